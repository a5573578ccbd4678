"""Checkpoints survive what real runs meet: a process killed mid-run or mid-write, and a checkpoint of another
state layout."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import flax.serialization
import numpy as np
import pandas as pd
import pytest

from harness import cli
from harness.common.run_files import CHECKPOINT_FILE, METRICS_FILE, stale_temporaries
from harness.engine.metrics import all_metrics
from harness.engine.state import LAYOUT_VERSION
from harness.experiment.checkpoint import read_checkpoint
from harness.grid.compile_cache import CACHE_DIR_ENV
from tests.compile_cache_settings import compile_cache_settings_restored

ROOT = Path(__file__).resolve().parents[1]
# conditions/smoke.toml at one seed, the shape of test_blocks.py's blocks (the two files run in one process, so this
# shape compiles once): conditions of different kinds (meta-correction holds pairs out); three iterations: one before
# the first kill, one between the two kills, one after them.
GRID = (
    (ROOT / "conditions" / "smoke.toml")
    .read_text()
    .replace("seeds = 2\niterations = 2\n", "seeds = 1\niterations = 3\n")
)
assert "seeds = 1\niterations = 3\n" in GRID


@pytest.fixture(autouse=True)
def _compile_cache(subprocess_compile_cache: Path) -> Path:
    """Commands cache compiled programs in the session's shared directory, never the user's."""
    return subprocess_compile_cache


def _coevolab(*args: str) -> subprocess.CompletedProcess:
    """`coevolab ARGS` in a process of its own (the tests pass --no-figures: none reads a figure)."""
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def _killable(tmp_path: Path, name: str, *args: str) -> subprocess.Popen:
    """tests/killable_run.py with `args`, started in tmp_path (where a core file would go; none is written), its
    standard error in tmp_path/<name>.err."""
    with (tmp_path / f"{name}.err").open("w") as errors:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "killable_run.py"), *args],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )


def _read_until(process: subprocess.Popen, line: str) -> list[str]:
    """The process's output lines up to and including `line` (all of them, if it exits first)."""
    assert process.stdout is not None
    seen: list[str] = []
    while seen[-1:] != [line] and (text := process.stdout.readline()):
        seen.append(text.rstrip("\n"))
    return seen


def _completed(run_dir: Path) -> int:
    return int(read_checkpoint(run_dir)["completed_iterations"])


def test_a_run_killed_mid_write_and_mid_run_resumes_to_identical_metrics(tmp_path: Path, finished_run: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    out = tmp_path / "run"

    # 1. Killed by the kernel in the middle of writing checkpoint 2 (see tests/killable_run.py): the process stops
    # on its write past the file size limit, so where it stops is certain, not a matter of timing.
    cut = _killable(tmp_path, "cut", str(out), str(grid), "--cut-write-after", "1")
    lines = cut.communicate()[0].splitlines()  # to its end: the process dies on its own
    assert cut.returncode == -signal.SIGXFSZ, (tmp_path / "cut.err").read_text()
    assert lines[:1] == ["checkpointed 1"] and lines[1].startswith("limit "), lines
    limit = int(lines[1].split()[1])
    # What a kill can promise: the last complete checkpoint is intact and loads; the next one's temporary file is
    # left as far as it got (never renamed over the checkpoint); no metrics.
    assert _completed(out) == 1
    [partial] = stale_temporaries(out)
    assert partial.name.startswith(f".{CHECKPOINT_FILE}.") and partial.stat().st_size == limit
    assert not (out / METRICS_FILE).exists()

    # 2. Resumed, then SIGKILLed by its pid while it waits after checkpoint 2 (it cannot finish before the kill).
    blocked = _killable(tmp_path, "blocked", str(out), "--resume", "--block-after", "2")
    assert _read_until(blocked, "checkpointed 2")[-1:] == ["checkpointed 2"], (tmp_path / "blocked.err").read_text()
    # The resume removed the dead writer's temporary file; the checkpoint written since is complete.
    assert stale_temporaries(out) == []
    os.kill(blocked.pid, signal.SIGKILL)
    blocked.communicate()
    assert blocked.returncode == -signal.SIGKILL
    assert _completed(out) == 2 and not (out / METRICS_FILE).exists()

    # 3. The command line resumes it to the end: the same metrics as the same grid run without interruption.
    resumed = _coevolab("run", "--resume", str(out), "--quiet", "--no-figures")
    assert resumed.returncode == 0, resumed.stderr
    assert not (out / CHECKPOINT_FILE).exists() and stale_temporaries(out) == []
    metrics = pd.read_csv(out / METRICS_FILE)
    expected = pd.read_csv(finished_run / METRICS_FILE)
    assert len(metrics) == len(expected) == 3 * 4
    assert list(metrics.columns) == list(expected.columns)
    for metric in [metric for metric in all_metrics() if metric.name in expected.columns]:
        np.testing.assert_allclose(
            metrics[metric.name].astype(float),
            expected[metric.name].astype(float),
            rtol=0,
            atol=1e-6,
            err_msg=metric.name,
        )


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory, shared_compile_cache: Path) -> Path:
    """A real, finished run directory of the tiny grid (compiled programs from the session's shared cache)."""
    root = tmp_path_factory.mktemp("finished")
    grid = root / "grid.toml"
    grid.write_text(GRID)
    out = root / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_DIR_ENV, str(shared_compile_cache))
        result = _coevolab("run", str(grid), "--out", str(out), "--quiet", "--no-figures")
    assert result.returncode == 0, result.stderr
    return out


def _with_checkpoint(run: Path, tmp_path: Path, payload: bytes) -> Path:
    """A copy of a finished run directory whose checkpoint file holds `payload`."""
    out = Path(shutil.copytree(run, tmp_path / "run"))
    (out / CHECKPOINT_FILE).write_bytes(payload)
    return out


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (flax.serialization.msgpack_serialize({"layout_version": LAYOUT_VERSION - 1}), "state layout"),
        (flax.serialization.msgpack_serialize({"completed_iterations": 3}), "state layout 1"),
        (b"\x00not a checkpoint", "not a readable checkpoint"),
    ],
)
def test_a_checkpoint_of_another_layout_is_refused_in_one_line(
    finished_run: Path, tmp_path: Path, payload: bytes, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _with_checkpoint(finished_run, tmp_path, payload)
    # In this process (the refusal comes before anything compiles; the command's processes are tested above), with
    # the compile-cache settings the command turns on put back afterwards.
    with compile_cache_settings_restored():
        assert cli.main(["run", "--resume", str(out)]) == cli.EXIT_BAD_INPUT
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
