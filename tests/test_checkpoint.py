"""Checkpoints survive what real runs meet: a SIGKILL mid-iteration, and a checkpoint of another state layout."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import flax.serialization
import numpy as np
import pandas as pd
import pytest

from harness.common.run_files import CHECKPOINT_FILE
from harness.engine.metrics import METRICS
from harness.engine.state import LAYOUT_VERSION
from harness.grid.compile_cache import CACHE_DIR_ENV

ROOT = Path(__file__).resolve().parents[1]
GRID = """
[run]
seeds = 1
iterations = 5
steps_per_iteration = 40
batch_size = 16

[conditions.baseline]
[conditions.meta]
meta_holdout_fraction = 0.05
"""


@pytest.fixture(autouse=True)
def _compile_cache(subprocess_compile_cache: Path) -> Path:
    """Commands cache compiled programs in the session's shared directory, never the user's."""
    return subprocess_compile_cache


def _coevolab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def _killed_mid_iteration(grid: Path, out: Path) -> int:
    """Start a run, let it checkpoint its first iteration, SIGKILL it during the next; the checkpointed count."""
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", str(grid), "--out", str(out), "--quiet"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while not (out / CHECKPOINT_FILE).exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.01)
    time.sleep(0.05)  # into the next iteration, past the checkpoint's rename
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    if process.returncode == 0:
        pytest.skip("the run finished before the kill landed")
    assert process.returncode == -signal.SIGKILL
    payload = flax.serialization.msgpack_restore((out / CHECKPOINT_FILE).read_bytes())
    return int(payload["completed_iterations"])


def test_a_run_killed_mid_iteration_resumes_to_identical_metrics(tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    out = tmp_path / "run"
    completed = _killed_mid_iteration(grid, out)
    assert 1 <= completed < 5
    assert not (out / "metrics.csv").exists()
    # Nothing half-written is left beside the checkpoint: writes go through a temporary file and a rename.
    assert not [p for p in out.iterdir() if p.name.startswith(f".{CHECKPOINT_FILE}")]

    resumed = _coevolab("run", "--resume", str(out), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    metrics = pd.read_csv(out / "metrics.csv")
    # The same grid run without interruption (its compiled programs come from the shared cache).
    whole = _coevolab("run", str(grid), "--out", str(tmp_path / "whole"), "--quiet")
    assert whole.returncode == 0, whole.stderr
    expected = pd.read_csv(tmp_path / "whole" / "metrics.csv")
    assert len(metrics) == len(expected) == 2 * 6
    for metric in METRICS:
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
        result = _coevolab("run", str(grid), "--out", str(out), "--quiet")
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
    finished_run: Path, tmp_path: Path, payload: bytes, message: str
) -> None:
    out = _with_checkpoint(finished_run, tmp_path, payload)
    result = _coevolab("run", "--resume", str(out))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert message in lines[0]
