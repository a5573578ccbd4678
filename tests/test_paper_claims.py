"""The published grid shows the lab's scientific claims.

Thresholds sit between the effect and the seed spread measured on seeds 0–4, so a
regression in the dynamics (not seed noise) is what fails them.

Each run of a grid is independent of the others, so the claims about the baseline, the slower judge, the frozen
judge and the anchor are checked on those four conditions of the published grid alone (seeds 0–4, 10 iterations ×
200 steps, as published), under the original lab's streams: the runs of `tests/original_streams_grid.py`, which
test_original_engine holds to the original's own records and shares (one compile, one training). Only "the anchor
ends above every other condition" needs all 18; it is marked heavy (`make test-all`).
"""

from __future__ import annotations

import pandas as pd
import pytest

from tests.original_streams_grid import PAPER_CLAIMED, TrainedGrid


def _mean_curve(metrics: pd.DataFrame, condition: str, metric: str) -> pd.Series:
    return metrics[metrics["condition"] == condition].groupby("iteration")[metric].mean()


def _final(metrics: pd.DataFrame, condition: str, metric: str) -> pd.Series:
    rows = metrics[(metrics["condition"] == condition) & (metrics["iteration"] == metrics["iteration"].max())]
    return rows.set_index("seed")[metric]


@pytest.fixture(scope="module")
def claimed(original_streams_grid: TrainedGrid) -> pd.DataFrame:
    """The shared grid's runs of the conditions these claims name."""
    metrics = original_streams_grid.metrics
    claimed = metrics[metrics["condition"].isin(PAPER_CLAIMED)]
    assert sorted(claimed["condition"].unique()) == sorted(PAPER_CLAIMED)
    assert claimed["seed"].nunique() == 5
    assert not claimed["diverged"].any()
    return claimed


def test_baseline_quality_gain_comes_early_then_plateaus(claimed: pd.DataFrame) -> None:
    quality = _mean_curve(claimed, "baseline", "policy_quality")
    total_gain = quality.iloc[-1] - quality.iloc[0]
    assert total_gain > 1.5
    assert quality[1] - quality[0] > 0.6 * total_gain  # most of the gain in iteration 1
    assert quality[2:].max() - quality[2:].min() < 0.05  # then a narrow band


def test_baseline_entropy_near_collapse_by_iteration_3(claimed: pd.DataFrame) -> None:
    entropy = _mean_curve(claimed, "baseline", "policy_entropy")
    assert entropy[0] > 8.0  # nearly uniform over 4096 outputs (ln 4096 = 8.32)
    assert entropy[3] < 1.0
    assert (claimed[(claimed["condition"] == "baseline") & (claimed["iteration"] == 3)]["policy_entropy"] < 1.0).all()


def test_baseline_alignment_drifts_down(claimed: pd.DataFrame) -> None:
    alignment = claimed[claimed["condition"] == "baseline"].pivot(
        index="seed", columns="iteration", values="judge_alignment"
    )
    assert (alignment[alignment.columns[-1]] < alignment[0] - 0.1).all()


def test_inside_score_outgrows_real_quality_after_iteration_1(claimed: pd.DataFrame) -> None:
    perceived = _mean_curve(claimed, "baseline", "judge_perceived_quality")
    quality = _mean_curve(claimed, "baseline", "policy_quality")
    assert perceived.iloc[-1] - perceived[1] > 2.0 * (quality.iloc[-1] - quality[1])
    # With slower judge updates the inside score is still climbing over the last iterations.
    slow = _mean_curve(claimed, "slow-judge[judge_update_every=10]", "judge_perceived_quality")
    assert (slow.diff().iloc[-3:] > 0).all()


def test_slow_judge_ends_above_baseline(claimed: pd.DataFrame) -> None:
    slow = _final(claimed, "slow-judge[judge_update_every=10]", "policy_quality")
    base = _final(claimed, "baseline", "policy_quality")
    assert slow.mean() > base.mean()
    assert (slow - base).min() > -0.01  # paired by seed: never worse
    assert _final(claimed, "slow-judge[judge_update_every=10]", "judge_alignment").mean() > 0.6


def test_oracle_anchor_ends_aligned_and_above_the_others_here(claimed: pd.DataFrame) -> None:
    final = claimed[claimed["iteration"] == claimed["iteration"].max()].groupby("condition")["policy_quality"].mean()
    assert final.idxmax() == "anchor[anchor_fraction=0.1]"
    assert _final(claimed, "anchor[anchor_fraction=0.1]", "judge_alignment").min() > 0.95


@pytest.mark.heavy
def test_oracle_anchor_ends_highest_of_the_whole_grid(paper_metrics: pd.DataFrame) -> None:
    """Every published condition trained (90 runs): the 10% anchor ends above all of them, on average."""
    assert paper_metrics["condition"].nunique() == 18
    assert paper_metrics["seed"].nunique() == 5
    assert not paper_metrics["diverged"].any()
    final = paper_metrics[paper_metrics["iteration"] == paper_metrics["iteration"].max()]
    assert final.groupby("condition")["policy_quality"].mean().idxmax() == "anchor[anchor_fraction=0.1]"


def test_frozen_keeps_pretrained_alignment(claimed: pd.DataFrame) -> None:
    frozen = claimed[claimed["condition"] == "frozen"].pivot(
        index="seed", columns="iteration", values="judge_alignment"
    )
    assert (frozen.sub(frozen[0], axis=0).abs() < 1e-6).all().all()
    assert (frozen[0] >= 0.70).all()
