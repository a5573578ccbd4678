"""The report's meta-correction table, on a hand-made metrics table whose answers are known."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.grid.knobs import Knobs
from harness.grid.report_section import ReportInputs
from harness.grid.spec import Condition, GridSpec
from harness.mechanisms.meta_correction_report import ends_with_twin, meta_section, meta_table, meta_twins
from harness.rendering.metrics_table import prepare
from harness.report.identical import explain, identical_groups

SLOW = Knobs(judge_update_every=10)
GRID = GridSpec(
    conditions=(
        Condition(name="baseline"),
        Condition(name="slow", knobs=SLOW),
        Condition(name="slow-meta", knobs=SLOW.model_copy(update={"meta_holdout_fraction": 0.05})),
        Condition(
            name="slow-meta-draw", knobs=SLOW.model_copy(update={"meta_holdout_fraction": 0.05, "meta_holdout_seed": 4})
        ),
        Condition(name="orphan-meta", knobs=Knobs(n_judges=2, meta_holdout_fraction=0.1)),
    )
)


def _metrics() -> pd.DataFrame:
    rows = []
    # (condition, seed) -> (final quality, held-out accuracy at start, corrections in iterations 1 and 2)
    runs = {
        ("baseline", 0): (1.0, np.nan, (0, 0)),
        ("baseline", 1): (1.2, np.nan, (0, 0)),
        ("slow", 0): (1.5, np.nan, (0, 0)),
        ("slow", 1): (1.7, np.nan, (0, 0)),
        ("slow-meta", 0): (1.9, 0.70, (20, 3)),
        ("slow-meta", 1): (1.8, 0.72, (20, 0)),
        ("slow-meta-draw", 0): (1.5, 0.80, (0, 0)),
        ("slow-meta-draw", 1): (1.7, 0.78, (0, 0)),
        ("orphan-meta", 0): (1.1, 0.76, (0, 1)),
        ("orphan-meta", 1): (1.3, 0.77, (0, 0)),
    }
    for (condition, seed), (final, accuracy, corrections) in runs.items():
        for iteration in range(3):
            rows.append(
                {
                    "condition": condition,
                    "seed": seed,
                    "iteration": iteration,
                    "policy_quality": final if iteration == 2 else 1.0,
                    "judge_alignment": 0.5,
                    "policy_entropy": 1.0,
                    "judge_perceived_quality": 1.0,
                    "meta_accuracy": accuracy,
                    "meta_corrections": (0, *corrections)[iteration],
                    "mode_sequence": "AAAA",
                    "finite": True,
                    "diverged": False,
                }
            )
    return pd.DataFrame(rows)


def test_each_meta_condition_is_set_beside_its_twin_without_meta() -> None:
    assert meta_twins(GRID.condition_knobs) == {"slow-meta": "slow", "slow-meta-draw": "slow", "orphan-meta": None}


def test_meta_table_counts_corrections_and_pairs_the_change_by_seed() -> None:
    table = meta_table(prepare(_metrics()), GRID.condition_knobs).set_index("condition")
    assert table.loc["slow-meta", "corrections_per_run"] == pytest.approx(21.5)
    assert table.loc["slow-meta", "runs_corrected"] == 2
    assert table.loc["slow-meta", "holdout_accuracy_start"] == pytest.approx(0.71)
    assert table.loc["slow-meta", "quality_change_from_twin"] == pytest.approx(((1.9 - 1.5) + (1.8 - 1.7)) / 2)
    assert table.loc["slow-meta-draw", "holdout_seed"] == 4
    assert table.loc["slow-meta-draw", "runs_corrected"] == 0
    assert table.loc["slow-meta-draw", "quality_change_from_twin"] == pytest.approx(0.0)
    assert table.loc["orphan-meta", "runs_corrected"] == 1
    assert np.isnan(table.loc["orphan-meta", "quality_change_from_twin"])


def _inputs(prepared: pd.DataFrame) -> ReportInputs:
    return ReportInputs(
        table=prepared, knobs=GRID.condition_knobs, world=GRID.world, out_dir=Path("unused"), figures=False
    )


def test_meta_section_says_where_it_never_fired() -> None:
    text = "\n".join(meta_section(_inputs(prepare(_metrics()))))
    assert "It never fired in 1 condition." in text
    assert "| `slow-meta-draw` " in text and "none in the grid" in text
    assert meta_section(_inputs(prepare(_metrics()).drop(columns=["meta_corrections"]))) == []


def test_a_rarely_firing_condition_that_ends_with_its_twin_is_explained_with_its_count() -> None:
    """A correction in one run that moves quality by 3e-6 while the judges' alignment moves by more than the identity
    test allows leaves the condition at its twin's result: the meta section says so and how often the correction
    fired; a condition that ends elsewhere is not listed."""
    m = _metrics()
    rarely = m["condition"] == "slow-meta-draw"
    m.loc[rarely & (m["seed"] == 0) & (m["iteration"] == 1), "meta_corrections"] = 3
    m.loc[rarely & (m["iteration"] == 2), "policy_quality"] += 3e-6
    m.loc[rarely, "judge_alignment"] += 1e-3  # the judges moved: not identical to the twin
    m = prepare(m)
    assert identical_groups(m) == []
    assert ends_with_twin(m, "slow-meta-draw", "slow") and not ends_with_twin(m, "slow-meta", "slow")
    text = "\n".join(meta_section(_inputs(m)))
    assert "1 condition ends where the twin ends" in text
    assert (
        "- `slow-meta-draw` ends where `slow` ends: meta-correction fired in 1 of 2 runs of `slow-meta-draw` "
        "(3 corrections in all)." in text
    )
    assert "- `slow-meta` ends" not in text


def test_identical_conditions_state_how_often_meta_fired() -> None:
    m = _metrics()
    m.loc[(m["condition"] == "slow-meta-draw") & (m["seed"] == 1) & (m["iteration"] == 2), "meta_corrections"] = 2
    line = explain(prepare(m), ("slow", "slow-meta-draw"), GRID)
    assert "meta-correction fired in 1 of 2 runs of `slow-meta-draw` (2 corrections in all)" in line
    assert "do not show why" not in line
    # Without its grid the report knows no knobs: the built-in mechanisms still say what the metrics show.
    unknown = explain(prepare(m), ("slow", "slow-meta-draw"), None)
    assert (
        unknown == "- `slow` = `slow-meta-draw`: meta-correction fired in 1 of 2 runs of `slow-meta-draw` (2 "
        "corrections in all), without moving any metric beyond the tolerance."
    )
