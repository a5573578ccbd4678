"""A running grid can be watched: progress.csv holds every finished iteration's per-condition means while the grid
runs, and --tensorboard writes the same numbers as TensorBoard events."""

from __future__ import annotations

import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tensorboardX.proto import event_pb2

from harness.experiment.live import PROGRESS_FILE, TENSORBOARD_DIR
from harness.experiment.progress import JOIN_SECONDS, PlainProgress

ROOT = Path(__file__).resolve().parents[1]
# conditions/smoke.toml (3 conditions × 2 seeds, 20 steps per iteration) with iterations enough to be caught running:
# the shape tests/test_api.py trains, whose programs this command loads from the session's compile cache (the files
# run in one process: SHARED_GRID_FILES in tests/conftest.py).
ITERATIONS = 8
GRID = (ROOT / "conditions" / "smoke.toml").read_text().replace("iterations = 2\n", f"iterations = {ITERATIONS}\n")
assert f"iterations = {ITERATIONS}\n" in GRID


@pytest.fixture(autouse=True)
def _compile_cache(subprocess_compile_cache: Path) -> Path:
    return subprocess_compile_cache


def events(directory: Path) -> pd.DataFrame:
    """Every scalar of the TensorBoard event files in `directory` (TFRecord: length, its CRC, the record, its CRC)."""
    rows = []
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        at = 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = event_pb2.Event.FromString(data[at + 12 : at + 12 + length])
            at += 12 + length + 4
            rows += [(value.tag, event.step, value.simple_value) for value in event.summary.value]
    return pd.DataFrame(rows, columns=["tag", "step", "value"])


def test_progress_is_readable_while_the_grid_runs_and_tensorboard_has_the_same_means(tmp_path: Path) -> None:
    grid, out = tmp_path / "grid.toml", tmp_path / "run"
    grid.write_text(GRID)
    command = [sys.executable, "-m", "harness.cli", "run", str(grid), "--out", str(out), "--no-figures", "--quiet"]
    process = subprocess.Popen([*command, "--tensorboard"], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    seen = None
    deadline = time.monotonic() + 600
    while process.poll() is None and time.monotonic() < deadline:
        if (out / PROGRESS_FILE).is_file():
            table = pd.read_csv(out / PROGRESS_FILE)
            if table["iteration"].max() >= 1 and not (out / "metrics.csv.gz").exists():
                seen = table  # read while the grid runs: at least one iteration done, the results not yet written
                break
        time.sleep(0.05)
    assert process.wait(timeout=600) == 0, process.stderr.read()
    assert seen is not None, "progress.csv never showed a finished iteration while the grid ran"
    assert seen["iteration"].max() < ITERATIONS

    metrics = pd.read_csv(out / "metrics.csv.gz")
    final = pd.read_csv(out / PROGRESS_FILE)
    means = metrics.groupby(["condition", "iteration"], sort=False)[["policy_quality", "judge_alignment"]].mean()
    for table in (seen, final):
        indexed = table.set_index(["condition", "iteration"])
        np.testing.assert_allclose(indexed[["policy_quality", "judge_alignment"]], means.loc[indexed.index], rtol=1e-6)
        assert (indexed["runs"] == 2).all()
    assert len(final) == 3 * (ITERATIONS + 1)  # conditions × (iterations + 1)

    # one TensorBoard run per condition, each metric's tag its name alone: a metric's card overlays the conditions
    assert sorted(p.name for p in (out / TENSORBOARD_DIR).iterdir()) == sorted(set(final["condition"]))
    for row in final.itertuples(index=False):
        scalars = events(out / TENSORBOARD_DIR / row.condition).set_index(["tag", "step"])["value"]
        assert scalars[("policy_quality", row.iteration)] == pytest.approx(row.policy_quality)
    assert "progress.csv" in (out / "manifest.json").read_text()  # vouched for with the run's other files


def test_a_long_phase_prints_a_line_every_heartbeat_and_none_after_it_ends(capsys: pytest.CaptureFixture) -> None:
    """A phase that runs for 0.55 s with a 0.1 s heartbeat: at least 3 lines saying how long it has run, then the
    phase's end stops them (no line in the 0.3 s after)."""
    shown = PlainProgress(heartbeat=0.1)
    shown.phase("compile", "4 runs, one program")
    time.sleep(0.55)
    shown.phase_done("compile", 0.55)
    during = capsys.readouterr().out.splitlines()
    beats = [line for line in during if "compile: running for" in line]
    assert len(beats) >= 3 and during[0].endswith("compile: 4 runs, one program"), during
    assert during[-1].endswith("compile done in 0.6s")
    time.sleep(0.3)
    shown.close()
    assert capsys.readouterr().out == ""


def test_a_run_says_it_started_before_loading_anything_heavy(tmp_path: Path) -> None:
    """The first line of a run's output comes before JAX, pandas or the grid load (seconds on a cold machine); a
    quiet run prints nothing. The child reports which heavy modules it had loaded when the line was printed."""
    probe = (
        "import builtins, sys\n"
        "from harness import cli\n"
        "printed = builtins.print\n"
        "def first(*args, **kwargs):\n"
        "    printed(*args, **kwargs)\n"
        "    printed('loaded:', sorted({'jax', 'pandas', 'scipy'} & set(sys.modules)), flush=True)\n"
        "    builtins.print = printed\n"
        "builtins.print = first\n"
        "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    missing = str(tmp_path / "missing.toml")
    shown = subprocess.run([sys.executable, "-c", probe, "run", missing], cwd=ROOT, capture_output=True, text=True)
    lines = shown.stdout.splitlines()
    assert lines[:2] == ["[    0.0s] starting: loading JAX and the grid", "loaded: []"], shown.stdout
    quiet = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", missing, "--quiet"], cwd=ROOT, capture_output=True
    )
    assert quiet.stdout == b"" and quiet.returncode == 2


def test_a_stop_that_leaves_the_print_lock_held_cannot_hang_the_clean_up(capsys: pytest.CaptureFixture) -> None:
    """Ctrl-C landing in the main thread between a lock's acquire and the `with` block that would release it leaves
    the lock held. The heartbeat's thread then waits on it; closing the display must still return, and the main
    thread still print (the stop's "Resume with" message comes after)."""
    progress = PlainProgress(heartbeat=0.01)
    progress.phase("train")
    progress._lock.acquire()  # what such a stop leaves behind
    time.sleep(0.1)  # the heartbeat is now waiting for the lock
    heartbeat = progress._beating
    assert heartbeat is not None
    began = time.perf_counter()
    progress.close()
    assert time.perf_counter() - began < JOIN_SECONDS + 2.0
    progress.phase_done("train", 1.0)
    assert "train done in 1.0s" in capsys.readouterr().out
    progress._lock.release()  # the heartbeat's thread, still waiting on it, prints its line and ends here
    heartbeat._thread.join(timeout=5.0)
    assert not heartbeat._thread.is_alive()
