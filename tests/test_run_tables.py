"""Per-run tables (`harness.grid.contract.RunTable`): best_of_n.parquet in the run directory of a grid that records
it (and in no other), its values against a float64 enumeration of best-of-n, kept across a resume, read joined from
seed blocks (no merged copy stored), earlier versions' CSV read alike; names refused that clash."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest

from harness.common.run_tables import read_run_table
from harness.engine.models import judge_score_table, policy_log_prob_table
from harness.experiment.blocks import block_dir
from harness.experiment.merge import run_in_blocks
from harness.experiment.runner import SilentProgress, execute
from harness.grid import registry
from harness.grid.contract import Mechanism, RunTable
from harness.grid.knobs import Knobs
from harness.grid.spec import Condition, GridSpec, RunSettings
from harness.grid.trainer import GridTrainer
from harness.mechanisms.best_of_n import N_GRID
from tests.worlds import TWO_POSITIONS

VOCAB, SEQ_LEN = TWO_POSITIONS["vocab_size"], TWO_POSITIONS["seq_len"]
SPEC = GridSpec(
    name="tables",
    run=RunSettings(seeds=(0, 1), iterations=2, steps_per_iteration=5, batch_size=16),
    world=TWO_POSITIONS,
    conditions=(
        Condition(name="baseline", knobs=Knobs(record_best_of_n=True)),
        Condition(name="frozen", knobs=Knobs(freeze_judge=True)),
    ),
)
TABLE = "best_of_n.parquet"
COLUMNS = ["condition", "seed", "iteration", "base", "scorer", "n", "gold", "proxy", "kl", "kl_bound", "top_mass"]


def reference(log_pi: np.ndarray, proxy: np.ndarray, gold: np.ndarray, ns: tuple[int, ...]) -> np.ndarray:
    """(gold, proxy, KL, mass of the top block) of best-of-n per n in float64, from the tie blocks' masses:
    π_n(B) = F_hi^n − F_lo^n."""
    pi = np.exp(log_pi.astype(np.float64) - np.logaddexp.reduce(log_pi.astype(np.float64)))
    levels, block = np.unique(proxy.astype(np.float64), return_inverse=True)
    mass = np.bincount(block, pi, len(levels))
    f_hi = np.cumsum(mass)
    f_lo = f_hi - mass
    block_gold = np.bincount(block, pi * gold, len(levels)) / np.where(mass > 0, mass, 1.0)
    rows = []
    for n in ns:
        mass_n = f_hi**n - f_lo**n
        with np.errstate(divide="ignore", invalid="ignore"):
            kl = np.sum(np.where(mass_n > 0, mass_n * np.log(mass_n / mass), 0.0))
        rows.append((mass_n @ block_gold, mass_n @ levels, kl, mass_n[-1]))
    return np.array(rows)


@pytest.fixture(scope="module")
def trained() -> tuple[GridTrainer, list, object]:
    trainer = GridTrainer(SPEC)
    state, first = trainer.start()
    records = [first]
    for iteration in range(SPEC.run.iterations):
        state, diagnostics = trainer.step(state, iteration)
        records.append(diagnostics)
    return trainer, records, state


def test_the_table_is_best_of_n_of_every_run_from_each_base(trained) -> None:
    trainer, records, state = trained
    table = trainer.run_tables(records)["best_of_n"]
    assert list(table.columns) == COLUMNS
    assert len(table) == 4 * 3 * 4 * len(N_GRID)
    q_star = np.asarray(trainer.world.q_star, np.float64)
    judges = trainer.judge_params(trainer.constants.pretrained_judges)
    policies = trainer.policy_params(state)
    labels = trainer.layout.run_labels()
    last = SPEC.run.iterations
    for run, (condition, seed) in enumerate(labels):
        # One judge per run; the frozen judge still scores as it was pretrained after the last iteration.
        pretrained = np.asarray(judge_score_table(jax.tree.map(lambda x, r=run: x[r], judges), VOCAB, SEQ_LEN))
        initial = np.asarray(trainer.constants.initial_log_pi[run])
        own = table[(table["condition"] == condition) & (table["seed"] == seed)]
        judged = own[own["scorer"] == "judges"]
        start = judged[(judged["iteration"] == 0) & (judged["base"] == "initial")]
        np.testing.assert_array_equal(start["n"], N_GRID)
        expected = reference(initial, pretrained, q_star, N_GRID)
        values = ["gold", "proxy", "kl", "top_mass"]
        np.testing.assert_allclose(start[values].to_numpy(), expected, rtol=2e-4, atol=2e-4)
        # The perfect proxy: q* scores, so its proxy is its gold.
        perfect = own[(own["iteration"] == 0) & (own["scorer"] == "q_star")]
        np.testing.assert_allclose(
            perfect[values].to_numpy(), reference(initial, q_star, q_star, N_GRID), rtol=2e-4, atol=2e-4
        )
        # The noisy proxy: as aligned with q* as the judge (Pearson over the outputs), its errors orthogonal to q*.
        noise = np.random.default_rng([0x0B0F, seed]).standard_normal(len(q_star))
        error = noise - noise.mean()
        centred = q_star - q_star.mean()
        error -= centred * (error @ centred) / (centred @ centred)
        alignment = np.corrcoef(pretrained, q_star)[0, 1]
        noisy = q_star + error * np.std(centred) / np.std(error) * np.sqrt(1 / alignment**2 - 1)
        assert np.corrcoef(noisy, q_star)[0, 1] == pytest.approx(alignment, abs=1e-9)
        expected_noisy = reference(initial, noisy, q_star, N_GRID)
        noisy_rows = own[(own["iteration"] == 0) & (own["scorer"] == "noisy_q_star")][values].to_numpy()
        np.testing.assert_allclose(noisy_rows, expected_noisy, rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(start["kl_bound"], np.log(N_GRID) - (np.array(N_GRID) - 1) / N_GRID, rtol=1e-6)
        # At iteration 0 the current policy is π₀.
        np.testing.assert_allclose(
            judged[(judged["iteration"] == 0) & (judged["base"] == "current")][values].to_numpy(),
            start[values].to_numpy(),
            rtol=1e-4,
            atol=1e-4,
        )
        if condition == "frozen":
            current = np.asarray(policy_log_prob_table(jax.tree.map(lambda x, r=run: x[r], policies), VOCAB, SEQ_LEN))
            end = judged[(judged["iteration"] == last) & (judged["base"] == "current")][values].to_numpy()
            np.testing.assert_allclose(end, reference(current, pretrained, q_star, N_GRID), rtol=2e-4, atol=2e-4)


class StopAfterFirstIteration(SilentProgress):
    def iteration_done(self, iteration: int) -> None:
        if iteration == 0:
            raise KeyboardInterrupt


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("whole")
    execute(SPEC, run_dir, write_report=False)
    return run_dir


def test_a_resumed_run_writes_the_table_of_an_uninterrupted_one(whole: Path, tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        execute(SPEC, tmp_path, StopAfterFirstIteration(), write_report=False)
    assert not (tmp_path / TABLE).exists()
    execute(SPEC, tmp_path, resume=True, write_report=False)
    assert (tmp_path / TABLE).read_bytes() == (whole / TABLE).read_bytes()
    assert (tmp_path / "metrics.csv.gz").read_bytes() == (whole / "metrics.csv.gz").read_bytes()


def test_a_run_in_blocks_reads_its_blocks_tables_joined_in_the_grids_order(whole: Path, tmp_path: Path) -> None:
    """The grid at 4 seeds in two blocks of 2: no merged copy is stored; the table read is the blocks' rows in the
    grid's order (conditions, then seeds, then iterations), and the first block, of the whole grid's seeds and shape,
    holds its runs' rows byte for byte (the same program)."""
    seeds = {"seeds": (0, 1, 2, 3), "block_seeds": 2}
    run_in_blocks(SPEC.model_copy(update={"run": SPEC.run.model_copy(update=seeds)}), tmp_path, figures=False)
    assert not (tmp_path / TABLE).exists()
    merged = read_run_table(tmp_path, "best_of_n")
    blocks = [pd.read_parquet(block_dir(tmp_path, k) / TABLE) for k in (0, 1)]
    expected = pd.concat(blocks).sort_values(["condition", "seed", "iteration"], kind="stable", key=_grid_order)
    pd.testing.assert_frame_equal(merged, expected.reset_index(drop=True))
    assert merged.drop_duplicates(["condition", "seed"])[["condition", "seed"]].values.tolist() == [
        [condition, seed] for condition in ("baseline", "frozen") for seed in (0, 1, 2, 3)
    ]
    assert (block_dir(tmp_path, 0) / TABLE).read_bytes() == (whole / TABLE).read_bytes()


def _grid_order(column: pd.Series) -> pd.Series:
    return column.map({"baseline": 0, "frozen": 1}) if column.name == "condition" else column


@pytest.mark.parametrize(
    ("name", "problem"),
    [("metrics", "is not a name of its own"), ("best_of_n", "table 'best_of_n' is taken by mechanism 'best_of_n'")],
)
def test_a_table_named_like_another_file_is_refused(name: str, problem: str) -> None:
    table = RunTable(name, "a clash", {"k": (0,)}, {"v": "a value"}, lambda context: {})
    with registry.restored_catalog(), pytest.raises(registry.MechanismError, match=problem):
        registry.register(Mechanism("clashing", "a table of a taken name", tables=(table,)))


def test_a_grid_that_records_no_table_writes_none(tmp_path: Path) -> None:
    """A grid none of whose conditions asks for best-of-n: its program computes no table, its directory holds none."""
    spec = SPEC.model_copy(update={"conditions": (Condition(name="baseline"),)})
    execute(spec, tmp_path, write_report=False)
    assert read_run_table(tmp_path, "best_of_n") is None and not list(tmp_path.glob("best_of_n.*"))


def test_a_table_reads_back_exactly_and_an_earlier_versions_csv_alike(whole: Path, tmp_path: Path) -> None:
    """The Parquet table holds the program's float32 values as they are; the CSV an earlier version wrote (9
    significant digits) reads back to the same values."""
    table = read_run_table(whole, "best_of_n")
    assert table is not None and list(table.columns) == COLUMNS and table["gold"].dtype == np.float32
    table.to_csv(tmp_path / "best_of_n.csv", index=False, float_format="%.9g")
    legacy = read_run_table(tmp_path, "best_of_n")
    assert legacy is not None
    for column in ("gold", "proxy", "kl", "kl_bound"):
        np.testing.assert_array_equal(legacy[column].to_numpy(np.float32), table[column].to_numpy())
