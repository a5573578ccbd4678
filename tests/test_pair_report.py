"""The report's pair-audit section, on a hand-made metrics table: its table, readings and figure."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.engine.world import WorldConfig
from harness.grid.knobs import Knobs
from harness.grid.report_section import ReportInputs
from harness.grid.spec import Condition, GridSpec
from harness.mechanisms.pair_audit_report import FIGURE, pair_section, pair_source, pair_table
from harness.report import mechanism_sections

CONDITIONS = {
    "baseline": Knobs(),
    "slow": Knobs(judge_update_every=10),
    "temporal": Knobs(rejected_from="past"),
    "anchored": Knobs(rejected_from="initial"),
    "referee": Knobs(referee_margin=1.0),
}
GRID = GridSpec(name="pairs", conditions=tuple(Condition(name=n, knobs=k) for n, k in CONDITIONS.items()))


def _metrics() -> pd.DataFrame:
    rows = []
    for name in CONDITIONS:
        for seed in range(20):  # intervals are shown from 20 seeds on
            for iteration in range(3):
                identical = 0.5 * iteration / 2
                distinct = {"temporal": 0.2 + 0.1 * iteration}.get(name, 0.4)
                rows.append(
                    {
                        "condition": name,
                        "seed": seed,
                        "iteration": iteration,
                        "policy_quality": 1.0 + {"slow": 0.5, "anchored": -0.2}.get(name, 0.0) + 0.01 * seed,
                        "pair_label_error": distinct * (1 - identical),
                        "pair_label_error_distinct": distinct,
                        "pair_identical": identical,
                        "pair_quality_gap": 2.0 if name == "anchored" else 1.0 - 0.4 * iteration,
                        "referee_share": 0.3 if name == "referee" else np.nan,
                        "referee_label_error": 0.25 if name == "referee" else np.nan,
                        "mode_index": 7 if name in ("temporal", "anchored") else seed,
                        "boundary": False,
                    }
                )
    return pd.DataFrame(rows)


def _inputs(table: pd.DataFrame, grid: GridSpec, out_dir: Path, figures: bool = True) -> ReportInputs:
    return ReportInputs(table=table, knobs=grid.condition_knobs, world=grid.world, out_dir=out_dir, figures=figures)


def test_pair_sources_in_words() -> None:
    assert pair_source(Knobs()) == "policy vs policy, judge-labelled"
    assert pair_source(Knobs(rejected_from="past", temporal_gap=2)) == "policy > checkpoint 2 back"
    assert pair_source(Knobs(rejected_from="past", temporal_gap=0)) == "policy > live policy (gap 0)"
    assert pair_source(Knobs(chosen_from="lookahead", rejected_from="initial", contrast_mix=0.5)) == (
        "look-ahead copy > π₀ on 0.5 of updates"
    )


def test_table_gives_each_audit_with_its_interval() -> None:
    table = pair_table(_metrics(), GRID.condition_knobs).set_index("condition")
    assert table.loc["temporal", "label error, a ≠ b @2"] == "0.400 [0.400, 0.400]"
    assert table.loc["anchored", "q* gap @2"] == "2.000 [2.000, 2.000]"
    assert table.loc["referee", "referee error @2"] == "0.250 [0.250, 0.250]"
    assert table.loc["baseline", "referee error @2"] == "·"  # no referee, no number


def test_readings_answer_the_three_questions(tmp_path: Path) -> None:
    lines = "\n".join(pair_section(_inputs(_metrics(), GRID, tmp_path)))
    assert "wrong on 0.300 [0.300, 0.300] after iteration 1, and 0.400 [0.400, 0.400] at iteration 2" in lines
    assert "0.500 [0.500, 0.500] of all pairs at the end" in lines
    assert "`anchored`: E|q*(chosen) − q*(rejected)| at iteration 2 is 2.000" in lines
    assert "paired Δ +1.800 [+1.800, +1.800]" in lines and "by -0.200 [-0.200, -0.200]" in lines
    assert "minus `slow`'s" in lines and "`anchored` -0.700 [-0.700, -0.700]" in lines and "(below)" not in lines
    assert "`referee` -0.500 [-0.500, -0.500]" in lines  # every non-reference condition is compared
    assert "`temporal`, `anchored` end at the same output on every seed" in lines
    assert (tmp_path / FIGURE).stat().st_size > 0


def test_the_section_counts_the_pairs_of_its_own_world(tmp_path: Path) -> None:
    """The number of pairs each audit sums over is the grid's world's (4,096² in the published one), never a fixed
    figure: 16² for a world of 4 tokens × 2 positions, 65,536² for 16 × 4."""
    for vocab, length, pairs in ((8, 4, "4,096²"), (4, 2, "16²"), (16, 4, "65,536²")):
        grid = GRID.model_copy(update={"world": WorldConfig(vocab_size=vocab, seq_len=length)})
        lines = "\n".join(pair_section(_inputs(_metrics(), grid, tmp_path, figures=False)))
        assert f"an exact sum over all {pairs} pairs" in lines and lines.count("²") == 1


def test_no_section_for_a_table_without_audits(tmp_path: Path) -> None:
    old = _metrics().drop(columns=["pair_label_error", "pair_label_error_distinct", "pair_identical"])
    assert pair_section(_inputs(old, GRID, tmp_path)) == []
    assert mechanism_sections(_metrics(), None, tmp_path, figures=True) == []  # no grid, no mechanism sections
