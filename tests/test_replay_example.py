"""The second example of a lab's own mechanism, examples/mechanisms/judge_replay.py: its buffer against hand-computed
cases, then its grid run from a lab's folder by the command line (20 seeds, so its claim gets a verdict), from the
Python API, and as seed blocks in their own processes."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import harness
from harness.engine.architecture import DEFAULT_MODEL
from harness.engine.flat_params import judge_layout
from harness.engine.state import fresh_network
from harness.grid import registry
from harness.grid.compile_cache import CACHE_DIR_ENV
from harness.mechanisms.judge_update import judge_pair_update

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mechanisms" / "judge_replay.py"
VOCAB, LENGTH = 4, 2
# Every step updates the judges of both buffered conditions; 10 steps an iteration, so after iteration k a judge has
# stored 10k batches, and holds min(10k, C).
GRID = """
[mechanisms]
modules = ["judge_replay.py"]

[run]
seeds = {seeds}
iterations = 2
steps_per_iteration = 10
batch_size = 16
{block}

[world]
vocab_size = 4
seq_len = 2

[conditions.baseline]
[conditions.replay]
replay_buffer = [0, 4, 32]

[claims.replay-keeps-the-judge-aligned]
statement = "a judge replaying one of its last 32 batches ends more aligned with q* than the baseline's"
metric = "judge_alignment"
condition = "replay[replay_buffer=32]"
direction = "above"
than_condition = "baseline"
"""
FLOAT_COLUMNS = ["policy_quality", "judge_alignment", "policy_entropy", "judge_perceived_quality"]


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("judge_replay_under_test", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _batch(value: int, batch: int = 3) -> jax.Array:
    return jnp.full((batch, LENGTH), value, jnp.int32)


def test_the_buffer_overwrites_its_oldest_batch() -> None:
    replay = _example()
    buffer = replay.ReplayBuffer(jnp.zeros((3, 3, LENGTH), jnp.int32), jnp.zeros((3, 3, LENGTH), jnp.int32), 0)
    for value in range(5):  # batches 0..4 into a capacity of 3: 3 and 4 overwrite 0 and 1
        buffer = replay.store(buffer, _batch(value), _batch(10 + value), jnp.int32(3))
    assert int(buffer.stored) == 5
    np.testing.assert_array_equal(np.asarray(buffer.chosen[:, 0, 0]), [3, 4, 2])
    np.testing.assert_array_equal(np.asarray(buffer.rejected[:, 0, 0]), [13, 14, 12])
    # A run's capacity below the grid's (the buffer padded to the largest): only its first entries are written.
    small = replay.ReplayBuffer(jnp.zeros((3, 3, LENGTH), jnp.int32), jnp.zeros((3, 3, LENGTH), jnp.int32), 0)
    for value in range(1, 4):
        small = replay.store(small, _batch(value), _batch(value), jnp.int32(2))
    np.testing.assert_array_equal(np.asarray(small.chosen[:, 0, 0]), [3, 2, 0])


def test_a_replay_is_one_update_on_a_stored_batch() -> None:
    # Two batches stored in a buffer of 4, the unfilled entries holding batches no replay may draw: over many keys,
    # every replay equals the judge's own update on entry 0 or entry 1 (by the package's update), and both are drawn.
    replay = _example()
    layout = judge_layout(VOCAB, LENGTH, DEFAULT_MODEL.judge)
    judge = fresh_network(jax.random.normal(jax.random.PRNGKey(0), (layout.width,)) * 0.1)
    chosen = jnp.stack([_batch(0), _batch(1), _batch(3), _batch(3)])
    rejected = jnp.stack([_batch(2), _batch(3), _batch(0), _batch(0)])
    buffer = replay.ReplayBuffer(chosen, rejected, jnp.int32(2))
    lr = jnp.float32(0.01)
    expected = [
        judge_pair_update(judge, chosen[entry], rejected[entry], jnp.zeros((), bool), lr, vocab=VOCAB)
        for entry in range(4)
    ]
    drawn = set()
    for seed in range(40):
        got = replay.replay(judge, buffer, jax.random.PRNGKey(seed), jnp.int32(4), lr, vocab=VOCAB, model=DEFAULT_MODEL)
        matches = [
            entry for entry in range(4) if np.array_equal(np.asarray(got.params), np.asarray(expected[entry].params))
        ]
        assert matches and set(matches) <= {0, 1}, matches
        drawn |= set(matches)
    assert drawn == {0, 1}


def coevolab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def lab_folder(root: Path, seeds: int, block: str = "") -> Path:
    """A lab's folder outside the package: its own copy of the replay buffer and a condition file that loads it."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE, root / "judge_replay.py")
    (root / "replay.toml").write_text(GRID.format(seeds=seeds, block=block))
    return root / "replay.toml"


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory, shared_compile_cache: Path) -> tuple[Path, pd.DataFrame]:
    """The grid at 20 seeds, run by `coevolab run` from the lab's folder (its working directory): (run dir, metrics)."""
    grid = lab_folder(tmp_path_factory.mktemp("lab"), seeds=20)
    out = grid.parent / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_DIR_ENV, str(shared_compile_cache))
        result = coevolab("run", "replay.toml", "--out", str(out), "--no-figures", "--quiet", cwd=grid.parent)
    assert result.returncode == 0, result.stderr
    return out, pd.read_csv(out / "metrics.csv.gz")


def test_the_buffer_fills_to_its_capacity_and_an_empty_one_changes_nothing(replayed) -> None:
    out, metrics = replayed
    stored = metrics.groupby(["condition", "iteration"])["replay_stored"].agg(["min", "max"])
    for iteration in range(3):
        for condition, capacity in (("baseline", 0), ("replay[replay_buffer=0]", 0), ("replay[replay_buffer=4]", 4)):
            assert tuple(stored.loc[(condition, iteration)]) == (min(10 * iteration, capacity),) * 2
        assert tuple(stored.loc[("replay[replay_buffer=32]", iteration)]) == (10 * iteration,) * 2
    # A capacity of 0 acts on no run (no work group): every number is the baseline's.
    off = metrics[metrics["condition"] == "replay[replay_buffer=0]"].reset_index(drop=True)
    baseline = metrics[metrics["condition"] == "baseline"].reset_index(drop=True)
    pd.testing.assert_frame_equal(off[FLOAT_COLUMNS], baseline[FLOAT_COLUMNS])
    # Replaying moves the judges: a buffer's runs differ from the baseline's.
    replaying = metrics[metrics["condition"] == "replay[replay_buffer=32]"].reset_index(drop=True)
    assert not np.allclose(replaying["judge_alignment"], baseline["judge_alignment"])
    # The claim on the loop's own metric gets a verdict at 20 seeds (whichever way it goes).
    claims = pd.read_csv(out / "claims.csv")
    assert claims.loc[0, "claim"] == "replay-keeps-the-judge-aligned"
    assert claims.loc[0, "seeds"] == 20
    assert claims.loc[0, "verdict"] in ("holds", "not supported", "contradicted", "undecided")
    assert (out / "mechanisms" / "judge_replay.py").read_bytes() == EXAMPLE.read_bytes()


def test_the_api_runs_the_buffer_to_the_command_lines_numbers(replayed, tmp_path: Path) -> None:
    _, metrics = replayed
    with registry.restored_catalog():
        assert harness.register_mechanism(EXAMPLE) == ("judge_replay",)
        grid = harness.load_grid(lab_folder(tmp_path / "lab", seeds=20))
        result = harness.run_grid(grid, run_dir=tmp_path / "api", figures=False)
    columns = [*FLOAT_COLUMNS, "replay_stored"]
    pd.testing.assert_frame_equal(result.metrics[columns], metrics[columns])


# In make test-all only: test_plugins runs a lab's mechanism as seed-block processes (the tether), and the buffer's
# state across iterations is checked in process above.
@pytest.mark.heavy
def test_seed_blocks_run_the_buffer_in_their_own_processes(replayed, tmp_path: Path) -> None:
    """4 seeds as two `coevolab run --block` processes of 2 seeds, merged: the 20-seed run's numbers for those seeds
    (to float rounding: a block batches fewer runs together)."""
    _, metrics = replayed
    grid = lab_folder(tmp_path / "lab", seeds=4, block="block_seeds = 2")
    blocks = tmp_path / "blocks"
    for block in ("0", "1"):
        argv = ("run", "replay.toml", "--out", str(blocks), "--block", block, "--no-figures", "--quiet")
        result = coevolab(*argv, cwd=grid.parent)
        assert result.returncode == 0, result.stderr
    merged = coevolab("merge", str(blocks), "--no-figures", "--quiet", cwd=grid.parent)
    assert merged.returncode == 0, merged.stderr
    in_blocks = pd.read_csv(blocks / "metrics.csv.gz")
    whole = metrics[metrics["seed"] < 4].reset_index(drop=True)
    assert in_blocks[["condition", "seed", "iteration"]].equals(whole[["condition", "seed", "iteration"]])
    assert in_blocks["replay_stored"].equals(whole["replay_stored"])
    np.testing.assert_allclose(in_blocks[FLOAT_COLUMNS], whole[FLOAT_COLUMNS], atol=1e-4)
