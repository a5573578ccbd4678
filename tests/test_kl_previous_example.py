"""The third example of a lab's own mechanism, examples/mechanisms/kl_previous.py: a reward hook that reads its
mechanism's state (a copy of the policy taken at every outer iteration's start). In the first iteration that copy is
π₀, so its runs train bit for bit as the built-in KL penalty toward π₀ at the same β; in the second they part, and
its metric is KL(π ‖ π_prev) by scipy's relative entropy from the policies' exact tables."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np
import pandas as pd
import pytest
import scipy.special

import harness
from harness.engine.state import CoevolutionState
from harness.grid import registry
from harness.grid.diagnostics import policy_log_prob_tables
from harness.grid.trainer import GridTrainer

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "mechanisms" / "kl_previous.py"
NAME = "kl_to_previous"
BETA = 1.0
GRID = f"""
[mechanisms]
modules = ["kl_previous.py"]

[run]
seeds = 2
iterations = 2
steps_per_iteration = 20
batch_size = 16

[world]
vocab_size = 8
seq_len = 2

[conditions.baseline]
[conditions.initial]
kl_penalty = {BETA}
[conditions.previous]
kl_previous = {BETA}
"""


class Trained(NamedTuple):
    trainer: GridTrainer
    states: list[CoevolutionState]  # before the first iteration, after the first, after the second
    metrics: pd.DataFrame


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    """The grid trained one outer iteration at a time from a lab's folder, keeping the state after each."""
    folder = tmp_path_factory.mktemp("lab")
    shutil.copy(EXAMPLE, folder / "kl_previous.py")
    (folder / "grid.toml").write_text(GRID)
    with registry.restored_catalog():
        trainer = GridTrainer(harness.load_grid(folder / "grid.toml"))
        state, record = trainer.start()
        states, records = [state], [record]
        for iteration in range(2):
            state, record = trainer.step(state, iteration)
            states.append(state)
            records.append(record)
        metrics = trainer.metrics_table(records)
    return Trained(trainer, states, metrics)


def _condition(metrics: pd.DataFrame, name: str, iteration: int) -> pd.DataFrame:
    rows = metrics[(metrics["condition"] == name) & (metrics["iteration"] == iteration)]
    return rows.drop(columns=["condition", "mode_sequence"]).reset_index(drop=True)


def test_the_first_iteration_is_the_penalty_toward_the_initial_policy(trained: Trained) -> None:
    metrics = trained.metrics
    # Before any iteration the copy is π₀ = π: no divergence, exactly.
    assert (metrics.query("iteration == 0")[NAME] == 0).all()
    # After the first iteration every number of the two penalised conditions agrees bit for bit (π_prev = π₀).
    pd.testing.assert_frame_equal(
        _condition(metrics, "previous", 1).drop(columns=NAME), _condition(metrics, "initial", 1).drop(columns=NAME)
    )
    # ... and differs from the unpenalised baseline's, so the hook acted.
    assert not np.allclose(
        _condition(metrics, "previous", 1)["policy_quality"], _condition(metrics, "baseline", 1)["policy_quality"]
    )
    # KL to the copy taken at the first iteration's start is the KL from π₀, for every run.
    first = metrics.query("iteration == 1")
    np.testing.assert_allclose(first[NAME], first["kl_from_initial"], rtol=1e-5, atol=1e-7)


def test_the_second_iteration_is_penalised_toward_the_policy_after_the_first(trained: Trained) -> None:
    _, after_first, after_second = trained.states
    # The copy taken at the second iteration's start is the policy the first iteration left, bit for bit.
    np.testing.assert_array_equal(np.asarray(after_second.runs.of(NAME)), np.asarray(after_first.runs.policy.params))
    metrics = trained.metrics
    previous, initial = _condition(metrics, "previous", 2), _condition(metrics, "initial", 2)
    assert not np.allclose(previous["policy_quality"], initial["policy_quality"])

    # The metric by scipy from the exact tables of π (after the second iteration) and of the copy.
    def tables(rows: jax.Array) -> np.ndarray:
        return np.exp(np.asarray(policy_log_prob_tables(trained.trainer.shape, rows), np.float64))

    pi, pi_previous = tables(after_second.runs.policy.params), tables(after_second.runs.of(NAME))
    expected = scipy.special.rel_entr(pi, pi_previous).sum(axis=1)
    labels = trained.trainer.layout.run_labels()
    measured = metrics.query("iteration == 2").set_index(["condition", "seed"])[NAME]
    np.testing.assert_allclose([measured.loc[label] for label in labels], expected, rtol=1e-4, atol=1e-7)
    assert (expected > 1e-6).all()  # the second iteration moved every run


def test_the_examples_condition_file_loads_the_mechanism_beside_it() -> None:
    with registry.restored_catalog():
        grid = harness.load_grid(EXAMPLE.with_suffix(".toml"))
        assert [condition.name for condition in grid.conditions] == ["baseline", "initial", "previous"]
        assert [condition.knobs.kl_previous for condition in grid.conditions] == [0.0, 0.0, 0.5]
        assert NAME in grid.mechanism_names
