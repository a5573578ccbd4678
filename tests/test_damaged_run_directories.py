"""A finished run directory (of two seed blocks, merged) with any one of its files cut, dropped or a byte flipped:
every command that reads it (`report`, `merge`, `verify`, `run --resume`, `harness.load_result`) refuses it in one line
(exit 2), or gives exactly what it gives undisturbed; never exit 0 with other numbers. And `coevolab verify` on an
intact directory, one not finished and one of an earlier coevolab."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import harness
from harness import cli
from harness.common.integrity import DIGEST_KEY, FILES_KEY, RunDirectoryError
from harness.common.run_files import MANIFEST_FILE
from harness.grid.compile_cache import CACHE_DIR_ENV
from tests.run_directories import copy, files, grid_file, in_process


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory, shared_compile_cache: Path) -> Path:
    """A grid of 2 seeds, 2 iterations, run as 2 seed blocks and merged, in this process (no figures)."""
    root = tmp_path_factory.mktemp("finished")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_DIR_ENV, str(shared_compile_cache))
        code, _, err = in_process(
            "run", grid_file(root, "blocks", seeds=2, iterations=2), "--out", root / "run", "--quiet", "--no-figures"
        )
    assert code == cli.EXIT_OK, err
    return root / "run"


def test_verify_vouches_for_a_finished_directory_and_names_what_it_cannot(finished: Path, tmp_path: Path) -> None:
    code, out, err = in_process("verify", finished)
    assert code == cli.EXIT_OK and "3 manifests" in out and "3 metrics tables read back" in out, err
    unfinished = copy(finished, tmp_path / "unfinished")  # as a merge stopped before its manifest
    (unfinished / MANIFEST_FILE).unlink()
    code, _, err = in_process("verify", unfinished)
    assert code == cli.EXIT_BAD_INPUT and "no manifest.json: the run has not finished" in err
    earlier = copy(finished, tmp_path / "earlier")
    manifest = json.loads((earlier / MANIFEST_FILE).read_text())
    del manifest[FILES_KEY], manifest[DIGEST_KEY]
    (earlier / MANIFEST_FILE).write_text(json.dumps(manifest))
    code, _, err = in_process("verify", earlier)
    assert code == cli.EXIT_BAD_INPUT and "lists no files" in err and len(err.strip().splitlines()) == 1


def _mutated(source: Path, target: Path, relative: str, how: str, position: float, mask: int) -> Path:
    out = copy(source, target)
    path = out / relative
    data = path.read_bytes()
    if how == "drop" or not data:
        path.unlink()
    elif how == "cut":
        path.write_bytes(data[: int(position * len(data))])
    else:
        flipped = bytearray(data)
        flipped[min(int(position * len(data)), len(data) - 1)] ^= mask
        path.write_bytes(bytes(flipped))
    return out


def _results(run_dir: Path) -> dict[str, object]:
    """What a command leaves that a reader relies on: every file's bytes but the lock files' and the manifest's
    (its times), and the files the manifest lists."""
    kept = {name: data for name, data in files(run_dir).items() if not name.endswith(".lock") and name != MANIFEST_FILE}
    return {"files": kept, "listed": json.loads((run_dir / MANIFEST_FILE).read_text())[FILES_KEY]}


def _loaded(run_dir: Path) -> dict[str, object]:
    result = harness.load_result(run_dir)
    tables = {name: getattr(result, name).to_csv() for name in ("metrics", "summary", "verdicts", "pretraining")}
    return {**tables, "times": dict(result.times)}


COMMANDS = {
    "report": lambda out: in_process("report", out, "--no-figures"),
    "merge": lambda out: in_process("merge", out, "--quiet", "--no-figures"),
    "verify": lambda out: in_process("verify", out),
    "resume": lambda out: in_process("run", "--resume", out, "--quiet", "--no-figures"),
}
_expected: dict[str, object] = {}


def _undisturbed(command: str, source: Path, target: Path) -> object:
    """What `command` gives on an undisturbed copy of the run (computed once per command)."""
    if command not in _expected:
        out = copy(source, target)
        if command == "load_result":
            _expected[command] = _loaded(out)
        else:
            code, _, err = COMMANDS[command](out)
            _expected[command] = (code, _results(out) if code == cli.EXIT_OK else err)
    return _expected[command]


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,  # the same examples every time: `make test` never fails by chance
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_damaged_run_directory_is_refused_in_one_line_or_read_as_it_was(
    data: st.DataObject, finished: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    source = finished
    relative = data.draw(st.sampled_from(sorted(files(source))), label="file")
    how = data.draw(st.sampled_from(("cut", "drop", "flip")), label="how")
    position = data.draw(st.floats(0, 1, exclude_max=True), label="position")
    mask = data.draw(st.integers(1, 255), label="mask")
    command = data.draw(st.sampled_from((*COMMANDS, "load_result")), label="command")
    root = tmp_path_factory.mktemp("damaged")
    expected = _undisturbed(command, source, root / "undisturbed")
    out = _mutated(source, root / "run", relative, how, position, mask)
    if command == "load_result":
        try:
            loaded = _loaded(out)
        except (RunDirectoryError, FileNotFoundError) as error:
            event(f"{command}: refused")
            assert len(str(error).splitlines()) == 1, error
        else:
            event(f"{command}: read as it was")
            assert loaded == expected
        return
    code, _, err = COMMANDS[command](out)
    event(f"{command}: exit {code}")
    if code == cli.EXIT_OK:
        assert expected[0] == cli.EXIT_OK and _results(out) == expected[1]
    else:
        assert code == cli.EXIT_BAD_INPUT, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, lines


@pytest.mark.parametrize("how", ["cut", "drop", "flip"])
def test_verify_finds_every_file_damaged(finished: Path, tmp_path: Path, how: str) -> None:
    """Every file the run wrote, each damaged in turn: verify names it (lock files are no part of a run)."""
    source = finished
    for index, relative in enumerate(sorted(files(source))):
        out = _mutated(source, tmp_path / f"{index}", relative, how, 0.5, 0x01)
        code, _, err = in_process("verify", out)
        if relative.endswith(".lock"):
            assert code == cli.EXIT_OK, err
        else:
            assert code == cli.EXIT_BAD_INPUT and len(err.strip().splitlines()) == 1, (relative, err)
        shutil.rmtree(out)
