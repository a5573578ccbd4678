"""Run directories you can trust: a --force run leaves nothing of the run it replaces, a checkpoint is continued by
its own grid alone, a cut or edited file is refused in one line by every command that reads it, one writer at a
time (a live holder named, a dead one's lock taken over), a directory that cannot be written is refused before any
work. Real `coevolab` processes stopped by their pid, real files cut and edited, an unprivileged user and a
read-only mount where the tests run as root.

Every grid here is tests/test_cli.py's shape (one condition, one seed per program, a world of two positions, 10 steps),
so the session's compile cache serves all of them (tests/run_directories.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pandas.testing import assert_frame_equal

import harness
from harness import cli
from harness.common.integrity import DIGEST_KEY, FILES_KEY, RunDirectoryError
from harness.common.run_files import (
    CHECKPOINT_FILE,
    GRID_FILE,
    LEGACY_METRICS_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    metrics_bytes,
    read_metrics_text,
)
from harness.experiment.blocks import block_dir, read_record
from harness.experiment.checkpoint import read_checkpoint
from harness.experiment.runner import load_spec
from harness.grid.compile_cache import CACHE_DIR_ENV
from harness.grid.conditions import load_grid
from tests.run_directories import copy, files, grid_file, in_process

ROOT = Path(__file__).resolve().parents[1]
NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


def coevolab(*args: object, prefix: tuple[str, ...] = (), env: dict | None = None) -> subprocess.CompletedProcess:
    """`coevolab ARGS` in a process of its own (behind `prefix`: another user, a mount namespace)."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "harness.cli", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def one_line_error(result: subprocess.CompletedProcess, says: str) -> str:
    """The refusal's one stderr line (exit 2, no traceback), which must contain `says`."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == cli.EXIT_BAD_INPUT and len(lines) == 1, (result.returncode, result.stderr)
    assert says in lines[0] and "Traceback" not in result.stderr, lines
    return lines[0]


def killable(tmp_path: Path, *args: object) -> subprocess.Popen:
    """tests/killable_run.py ARGS (a writer that holds the directory's lock as `coevolab run` does)."""
    return subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "killable_run.py"), *map(str, args)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(process: subprocess.Popen, line: str) -> None:
    assert process.stdout is not None
    seen = []
    while seen[-1:] != [line]:
        text = process.stdout.readline()
        assert text, f"{process.args} ended before {line!r}: {seen} {process.stderr.read() if process.stderr else ''}"
        seen.append(text.rstrip("\n"))


def kill(process: subprocess.Popen) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.communicate()
    assert process.returncode == -signal.SIGKILL


@pytest.fixture(autouse=True)
def _compile_cache(subprocess_compile_cache: Path) -> Path:
    """Commands cache compiled programs in the session's shared directory, never the user's."""
    return subprocess_compile_cache


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, shared_compile_cache: Path) -> dict[str, Path]:
    """Finished runs, in this process: the flat grid (3 iterations, with figures); the same grid with another
    learning rate (2 iterations); a grid of 2 seeds as 2 seed blocks, merged; and the flat grid stopped by SIGKILL
    after its first checkpoint, in a process of its own."""
    root = tmp_path_factory.mktemp("trust")
    paths = {
        "grid": grid_file(root, "grid"),
        "other-grid": grid_file(root, "other", iterations=2, knob="lr_policy = 0.003"),
        "blocks-grid": grid_file(root, "blocks", seeds=2, iterations=2),
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_DIR_ENV, str(shared_compile_cache))
        for name, grid, flags in (
            ("flat", paths["grid"], ()),
            ("other", paths["other-grid"], ("--no-figures",)),
            ("blocks", paths["blocks-grid"], ("--no-figures",)),
        ):
            code, _, err = in_process("run", grid, "--out", root / name, "--quiet", *flags)
            assert code == cli.EXIT_OK, err
            paths[name] = root / name
        stopped = killable(root, root / "stopped", paths["grid"], "--block-after", 1)
        wait_for(stopped, "checkpointed 1")
        kill(stopped)
    paths["stopped"] = root / "stopped"
    assert int(read_checkpoint(paths["stopped"])["completed_iterations"]) == 1
    return paths


# 1. --force


def test_force_removes_the_run_it_replaces_before_writing(runs: dict[str, Path], tmp_path: Path) -> None:
    out = copy(runs["stopped"], tmp_path / "run")
    forced = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", str(runs["other-grid"]), "--out", str(out), "--force"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert forced.stdout is not None
    while "pretrain:" not in (line := forced.stdout.readline()):
        assert line, forced.stderr.read() if forced.stderr else ""
    os.kill(forced.pid, signal.SIGTERM)  # during pretraining, before any checkpoint of its own
    stdout, stderr = forced.communicate(timeout=300)
    assert forced.returncode == cli.EXIT_TERMINATED, stderr
    assert "nothing is checkpointed" in stdout
    # Nothing of the replaced run is left to resume or merge: only the new grid, written after the old files went.
    assert sorted(name for name in files(out) if not name.endswith(".lock")) == [GRID_FILE]
    assert load_spec(out) == load_grid(runs["other-grid"])

    code, _, err = in_process("run", "--resume", out, "--quiet", "--no-figures")
    assert code == cli.EXIT_OK, err
    assert json.loads((out / MANIFEST_FILE).read_text())["resumed_from_iteration"] is None
    assert (out / METRICS_FILE).read_bytes() == (runs["other"] / METRICS_FILE).read_bytes()


# 2. A checkpoint belongs to its grid


@pytest.mark.parametrize(
    ("edit", "differs"),
    [
        (lambda grid: grid["conditions"][0]["knobs"].update(lr_policy=0.003), "a knob"),
        (lambda grid: grid["run"].update(seeds=[0, 1, 2]), "the seeds"),
        (lambda grid: grid["run"].update(iterations=5), "the iterations"),
    ],
    ids=["a knob", "the seeds", "the iterations"],
)
def test_resume_refuses_a_checkpoint_of_another_grid(runs: dict[str, Path], tmp_path: Path, edit, differs) -> None:
    out = copy(runs["stopped"], tmp_path / "run")
    grid = json.loads((out / GRID_FILE).read_text())
    edit(grid)
    (out / GRID_FILE).write_text(json.dumps(grid, indent=2))
    before = files(out)
    code, _, err = in_process("run", "--resume", out, "--quiet")  # refused before anything compiles
    assert code == cli.EXIT_BAD_INPUT, (differs, err)
    [line] = err.strip().splitlines()
    assert "belongs to another run: its grid differs from this one's" in line, line
    assert {k: v for k, v in files(out).items() if not k.endswith(".lock")} == {
        k: v for k, v in before.items() if not k.endswith(".lock")
    }


def test_a_damaged_checkpoint_is_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    out = copy(runs["stopped"], tmp_path / "run")
    data = bytearray((out / CHECKPOINT_FILE).read_bytes())
    data[len(data) // 2] ^= 0x40  # a byte inside the state's arrays
    (out / CHECKPOINT_FILE).write_bytes(bytes(data))
    code, _, err = in_process("run", "--resume", out, "--quiet")
    assert code == cli.EXIT_BAD_INPUT and len(err.strip().splitlines()) == 1, err
    assert "is damaged" in err or "not a readable checkpoint" in err, err


# 3. A truncated metrics table


def _cut_at_a_line(path: Path) -> None:
    lines = read_metrics_text(path).splitlines(keepends=True)
    path.write_bytes(metrics_bytes("".join(lines[:-1])))


@pytest.mark.parametrize("listed", [True, False], ids=["manifest", "before-manifests-listed-files"])
def test_report_and_load_result_refuse_a_metrics_table_cut_at_a_line(
    runs: dict[str, Path], tmp_path: Path, listed: bool
) -> None:
    out = copy(runs["flat"], tmp_path / "run")
    if not listed:  # a directory of an earlier coevolab: read-back alone catches it
        _unlisted(out)
    _cut_at_a_line(out / METRICS_FILE)
    says = "bytes where" if listed else "short of its grid's"
    code, _, err = in_process("report", out, "--no-figures")
    assert code == cli.EXIT_BAD_INPUT and len(err.strip().splitlines()) == 1, err
    assert f"{out / METRICS_FILE}: " in err and says in err, err
    with pytest.raises(RunDirectoryError, match=says):
        harness.load_result(out)


def _unlisted(out: Path) -> None:
    """The manifest as an earlier coevolab wrote it, listing no files: read-back alone checks the tables."""
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    del manifest[FILES_KEY], manifest[DIGEST_KEY]
    (out / MANIFEST_FILE).write_text(json.dumps(manifest))


def test_a_metrics_table_whose_compressed_stream_is_cut_is_refused_in_one_line(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    out = copy(runs["flat"], tmp_path / "run")
    _unlisted(out)
    data = (out / METRICS_FILE).read_bytes()
    (out / METRICS_FILE).write_bytes(data[: len(data) // 2])  # a copy cut mid-stream
    code, _, err = in_process("report", out, "--no-figures")
    assert code == cli.EXIT_BAD_INPUT and len(err.strip().splitlines()) == 1, err
    assert f"{out / METRICS_FILE}: cannot be read (its compressed stream ends early" in err, err
    with pytest.raises(RunDirectoryError, match="ends early"):
        harness.load_result(out)


def test_a_plain_metrics_csv_of_an_earlier_coevolab_is_read_as_the_same_table(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    out = copy(runs["flat"], tmp_path / "run")
    _unlisted(out)
    (out / LEGACY_METRICS_FILE).write_text(read_metrics_text(out / METRICS_FILE))
    (out / METRICS_FILE).unlink()
    assert_frame_equal(harness.load_result(out).metrics, harness.load_result(runs["flat"]).metrics)
    code, _, err = in_process("report", out, "--no-figures")
    assert code == 0, err


# 4. Merging blocks


def _with_field(text: str, column: str, value: str, line: int = 2) -> str:
    """metrics.csv.gz `text` with `column` of its `line` (1: the header) set to `value`."""
    lines = text.split("\n")
    fields = lines[line - 1].split(",")
    fields[lines[0].split(",").index(column)] = value
    lines[line - 1] = ",".join(fields)
    return "\n".join(lines)


BLOCK_EDITS = {
    "cut mid-row": lambda text: text[:-7],
    "a Spearman of 9.9": lambda text: _with_field(text, "judge_alignment", "9.9"),
    "text for a number": lambda text: _with_field(text, "policy_quality", "abc"),
    "a row relabelled": lambda text: _with_field(text, "condition", "frozen", line=3),
    "a seed relabelled": lambda text: _with_field(text, "seed", "0", line=3),
}
READ_BACK = {
    "cut mid-row": "line 4: diverged is '', not True or False",
    "a Spearman of 9.9": "line 2: judge_alignment is 9.9, outside [-1, 1]",
    "text for a number": "line 2: policy_quality is 'abc', not a number",
    "a row relabelled": "line 3: condition 'frozen' is not one of its grid.json's",
    "a seed relabelled": "the first missing is condition 'baseline' seed 1 iteration 1",
}


@pytest.mark.parametrize("listed", [True, False], ids=["manifest", "before-manifests-listed-files"])
@pytest.mark.parametrize("edit", list(BLOCK_EDITS))
def test_merge_refuses_a_bad_block_by_name_and_writes_nothing(
    runs: dict[str, Path], tmp_path: Path, edit: str, listed: bool
) -> None:
    out = copy(runs["blocks"], tmp_path / "run")
    if not listed:  # blocks of an earlier coevolab, whose manifests list no files: read back against their grid alone
        for manifest in out.rglob(MANIFEST_FILE):
            written = json.loads(manifest.read_text())
            manifest.write_text(json.dumps({k: v for k, v in written.items() if k not in (FILES_KEY, DIGEST_KEY)}))
    path = block_dir(out, 1) / METRICS_FILE
    path.write_bytes(metrics_bytes(BLOCK_EDITS[edit](read_metrics_text(path))))
    before = files(out)
    code, _, err = in_process("merge", out, "--quiet", "--no-figures")
    assert code == cli.EXIT_BAD_INPUT and len(err.strip().splitlines()) == 1, err
    says = ("bytes where", "SHA-256") if listed else (READ_BACK[edit],)
    assert f"{path}: " in err and any(text in err for text in says), err
    assert files(out) == before


def test_merge_refuses_a_block_whose_manifest_was_removed(runs: dict[str, Path], tmp_path: Path) -> None:
    """A block finished by its record but without its manifest cannot be checked: named, never merged, even where
    its metrics read back (one value edited inside its range)."""
    out = copy(runs["blocks"], tmp_path / "run")
    for manifest in (out / MANIFEST_FILE, block_dir(out, 1) / MANIFEST_FILE):
        manifest.unlink()
    path = block_dir(out, 1) / METRICS_FILE
    lines = read_metrics_text(path).splitlines(keepends=True)
    header, row = lines[0].rstrip("\n").split(","), lines[1].rstrip("\n").split(",")
    column = header.index("policy_quality")
    row[column] = repr(float(row[column]) + 0.01)
    path.write_bytes(metrics_bytes("".join([lines[0], ",".join(row) + "\n", *lines[2:]])))
    before = files(out)
    code, _, err = in_process("merge", out, "--quiet", "--no-figures")
    assert code == cli.EXIT_BAD_INPUT and len(err.strip().splitlines()) == 1, err
    assert f"{block_dir(out, 1) / MANIFEST_FILE}: missing" in err and "not merged" in err, err
    assert files(out) == before


# 5. One writer at a time


def test_one_writer_at_a_time_and_a_dead_writers_lock_is_taken_over(runs: dict[str, Path], tmp_path: Path) -> None:
    out = copy(runs["stopped"], tmp_path / "run")
    live = killable(tmp_path, out, "--resume", "--block-after", 2)
    wait_for(live, "checkpointed 2")
    holder = f"pid {live.pid} on "
    # --force into a live run's directory, and a second resume of it: refused at once, the holder named.
    one_line_error(coevolab("run", runs["other-grid"], "--out", out, "--force", "--quiet"), holder)
    code, _, err = in_process("run", "--resume", out, "--quiet")
    assert code == cli.EXIT_BAD_INPUT and holder in err and len(err.strip().splitlines()) == 1, err
    assert int(read_checkpoint(out)["completed_iterations"]) == 2 and load_spec(out) == load_grid(runs["grid"])
    kill(live)  # its lock dies with it
    code, _, err = in_process("run", "--resume", out, "--quiet", "--no-figures")
    assert code == cli.EXIT_OK, err
    assert (out / METRICS_FILE).read_bytes() == (runs["flat"] / METRICS_FILE).read_bytes()


def test_one_process_per_block_beside_the_other_blocks(runs: dict[str, Path], tmp_path: Path) -> None:
    out, grid = tmp_path / "run", runs["blocks-grid"]
    live = killable(tmp_path, out, grid, "--seed-block", 0, "--block-after", 1)
    wait_for(live, "checkpointed 1")
    # A second process at block 0 is refused, naming the first; a merge is refused while a block runs; block 1 runs.
    one_line_error(coevolab("run", grid, "--out", out, "--block", 0, "--quiet"), f"block 0 of {out} is in use by pid")
    code, _, err = in_process("merge", out, "--quiet")
    assert code == cli.EXIT_BAD_INPUT and f"blocks/0.lock by pid {live.pid}" in err and len(err.splitlines()) == 1
    assert in_process("run", grid, "--out", out, "--block", 1, "--quiet", "--no-figures")[0] == cli.EXIT_OK
    kill(live)
    assert in_process("run", grid, "--out", out, "--block", 0, "--quiet", "--no-figures")[0] == cli.EXIT_OK
    attempts = read_record(out, 0).attempts
    assert [a.resumed_from_iteration for a in attempts] == [None, 1] and attempts[0].finished is None
    assert in_process("merge", out, "--quiet", "--no-figures")[0] == cli.EXIT_OK
    assert (out / METRICS_FILE).read_bytes() == (runs["blocks"] / METRICS_FILE).read_bytes()


# 6. Directories that cannot be written


@pytest.fixture
def world_readable(tmp_path: Path) -> Iterator[Path]:
    """A directory every user can reach (the tests' own temporary folders are their user's alone)."""
    directory = Path(tempfile.mkdtemp(prefix="coevolab-trust-", dir="/tmp"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def _other_user() -> tuple[str, ...]:
    """The command prefix of a user that cannot write the test's files: nobody, where the tests run as root (whom
    permissions do not stop); the test's own user otherwise (permissions are enough)."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None or subprocess.run([*NOBODY, "true"], capture_output=True).returncode:
        pytest.skip("the tests run as root, and setpriv cannot switch to the user nobody here")
    # A checkout under a private folder (mktemp -d makes one of mode 0700) hides the package from nobody: the probe
    # would then fail on the import, never reaching the refusal it tests.
    imports = subprocess.run([*NOBODY, sys.executable, "-c", "import harness.cli"], cwd=ROOT, capture_output=True)
    if imports.returncode:
        pytest.skip(f"the user nobody cannot import the package from {ROOT} (a folder above it is private)")
    return NOBODY


def _read_only(directory: Path) -> tuple[str, ...]:
    """The command prefix that runs a command with `directory` mounted read-only (a mount namespace of its own)."""
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    prefix = ("unshare", "--mount", "sh", "-c", script, "sh", str(directory))
    if shutil.which("unshare") is None or subprocess.run([*prefix, "true"], capture_output=True).returncode:
        pytest.skip("no read-only mount can be made here (unshare --mount needs privileges)")
    return prefix


def _owned_by_this_user(source: Path, target: Path) -> Path:
    """A copy of `source`, readable by every user, writable by this one alone."""
    copy(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def test_a_directory_that_cannot_be_written_is_refused_before_any_work(
    runs: dict[str, Path], world_readable: Path
) -> None:
    user = _other_user()
    cache = world_readable / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    env = {**os.environ, CACHE_DIR_ENV: str(cache), "HOME": str(cache)}
    grid = Path(shutil.copy(runs["grid"], world_readable / "grid.toml"))
    grid.chmod(0o644)

    existing = world_readable / "existing"
    existing.mkdir(mode=0o755)
    result = coevolab("run", grid, "--out", existing, "--quiet", prefix=user, env=env)
    one_line_error(result, f"{existing}: cannot write there (Permission denied)")
    assert not any(existing.iterdir())

    stopped = _owned_by_this_user(runs["stopped"], world_readable / "stopped")
    before = files(stopped)
    result = coevolab("run", "--resume", stopped, prefix=user, env=env)
    one_line_error(result, f"{stopped}: cannot write there (Permission denied)")
    assert "iteration" not in result.stdout and files(stopped) == before  # refused before compiling or training

    finished = _owned_by_this_user(runs["flat"], world_readable / "finished")
    before = files(finished)
    one_line_error(coevolab("report", finished, prefix=user, env=env), "cannot write there (Permission denied)")
    assert files(finished) == before


def test_a_read_only_file_system_is_refused_in_one_line(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "mounted"
    out.mkdir()
    prefix = _read_only(out)
    one_line_error(coevolab("run", runs["grid"], "--out", out, "--quiet", prefix=prefix), "Read-only file system")
    finished = copy(runs["flat"], tmp_path / "finished")
    one_line_error(coevolab("report", finished, prefix=_read_only(finished)), "Read-only file system")


def _unwritable_home(world_readable: Path) -> tuple[Path, Path, dict[str, str]]:
    """A home directory the other user cannot write (so neither ~/.cache), a work directory it can, and its
    environment (no $COEVOLAB_CACHE_DIR: the cache goes under home; matplotlib's own cache in the work directory)."""
    home = world_readable / "home"
    home.mkdir(mode=0o755)
    work = world_readable / "work"
    work.mkdir()
    work.chmod(0o777)
    env = {key: value for key, value in os.environ.items() if key != CACHE_DIR_ENV}
    return home, work, env | {"HOME": str(home), "MPLCONFIGDIR": str(work)}


def test_an_unusable_compile_cache_is_one_warning_line_not_a_crash(runs: dict[str, Path], world_readable: Path) -> None:
    user = _other_user()
    home, work, env = _unwritable_home(world_readable)
    out = copy(runs["stopped"], work / "run")  # resumed to a refusal (a checkpoint of another grid), no training
    for path in [out, *out.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o666)
    grid = json.loads((out / GRID_FILE).read_text())
    grid["run"]["iterations"] = 5
    (out / GRID_FILE).write_text(json.dumps(grid))
    result = coevolab("run", "--resume", out, "--quiet", prefix=user, env=env)
    warning, error = result.stderr.strip().splitlines()
    assert warning.startswith(f"coevolab: warning: the compile cache at {home}/.cache/coevolab/jax cannot be used")
    assert result.returncode == cli.EXIT_BAD_INPUT and "belongs to another run" in error, result.stderr


@pytest.mark.heavy
def test_an_unusable_compile_cache_is_a_warning_and_a_run_without_it(
    runs: dict[str, Path], world_readable: Path
) -> None:
    """The whole run as the other user, compiled without a cache (cold: about a minute on two busy cores)."""
    user = _other_user()
    home, work, env = _unwritable_home(world_readable)
    grid = Path(shutil.copy(runs["grid"], work / "grid.toml"))
    grid.chmod(0o644)
    result = coevolab("run", grid, "--out", work / "run", "--quiet", "--no-figures", prefix=user, env=env)
    assert result.returncode == cli.EXIT_OK, result.stderr
    [warning] = result.stderr.strip().splitlines()
    assert warning.startswith(f"coevolab: warning: the compile cache at {home}/.cache/coevolab/jax cannot be used")
    assert json.loads((work / "run" / MANIFEST_FILE).read_text())["compile_cache"] is None
    assert (work / "run" / METRICS_FILE).read_bytes() == (runs["flat"] / METRICS_FILE).read_bytes()


# 8. Smaller points


def test_growing_without_figures_leaves_no_figure_of_the_smaller_run(runs: dict[str, Path], tmp_path: Path) -> None:
    out = copy(runs["flat"], tmp_path / "run")
    assert any((out / "figures").glob("*.png"))
    code, _, err = in_process("run", "--resume", out, "--seeds", 2, "--quiet", "--no-figures")
    assert code == cli.EXIT_OK, err
    assert not (out / "figures").exists() and "](figures/" not in (out / "report.md").read_text()
    assert in_process("verify", out)[0] == cli.EXIT_OK
