"""Seeds needed: the resampling estimate of how many seeds would decide an open claim, against a case whose
answer is known, and its place in the verdicts table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from harness.inference.claims import Claim
from harness.inference.rule import ClaimData, judge, rival_tests
from harness.inference.seeds_needed import SIMULATION_RESAMPLES, seeds_needed, simulation_resamples
from harness.inference.verdicts import verdict_table

CLAIM = Claim(
    name="c",
    statement="s",
    metric="policy_quality",
    condition="a",
    direction="above",
    than_value=0.0,
    resolution=0.001,
)


def _sample(effect: float, n: int = 20) -> np.ndarray:
    """n values with mean `effect` and population sd 1 exactly (normal quantiles, standardized)."""
    z = scipy.stats.norm.ppf((np.arange(n) + 0.5) / n)
    return effect + (z - z.mean()) / z.std()


def test_seeds_needed_matches_a_known_answer() -> None:
    """Effect 0.35 sd: a two-sided test at 5% has 80% power at n = (1.96 + 0.84)² / 0.35² ≈ 64; simulating the rule
    itself at 48–80 seeds (600 datasets each: 0.65, 0.72, 0.80, 0.81, 0.87 decided at 48, 56, 64, 72, 80) puts
    the crossing at about 65. The estimate, from 20 observed seeds, must lie within 20% of it (it says 57)."""
    data = ClaimData(_sample(0.35), (None,), ("0",))

    def decided(rows: np.ndarray, rng: np.random.Generator) -> bool:
        resampled = data.take(rows)
        tests = rival_tests(resampled, CLAIM, SIMULATION_RESAMPLES, rng, fast=True)
        return judge(resampled, CLAIM, tests, 1.0, 0.05, 0.05, SIMULATION_RESAMPLES, rng).verdict != "undecided"

    estimate = seeds_needed(decided, 20)
    assert 65 / 1.2 <= estimate <= 65 * 1.2, estimate
    assert seeds_needed(decided, 20) == estimate  # a fixed generator: the same answer every time


def test_no_effect_needs_more_seeds_than_the_ladder_reaches() -> None:
    def never(rows: np.ndarray, rng: np.random.Generator) -> bool:
        return False

    assert math.isinf(seeds_needed(never, 20))


def test_the_table_gives_undecided_claims_a_seed_count() -> None:
    side = _sample(0.35, n=24)
    metrics = pd.DataFrame({"condition": "a", "seed": range(24), "iteration": 1, "policy_quality": side})
    row = verdict_table(metrics, [CLAIM]).iloc[0]
    assert row["verdict"] == "undecided"
    assert 24 < row["seeds_needed"] < 200
    decided = verdict_table(metrics.assign(policy_quality=side + 1.0), [CLAIM]).iloc[0]
    assert decided["verdict"] == "holds" and np.isnan(decided["seeds_needed"])
    assert verdict_table(metrics, [CLAIM], estimate_seeds=False)["seeds_needed"].isna().all()


@pytest.mark.parametrize(("level", "factor"), [(0.05, 1.0), (0.005, 10.0)])
def test_fewer_resamples_inside_the_estimate_do_not_bias_it(level: float, factor: float) -> None:
    """The share of datasets decided at one n, with the estimator's resamples and with the report's 10,000 on the
    same datasets, agrees to within Monte-Carlo noise (measured over 300 datasets at n = 64 and level 0.05: 0.767
    with 999 resamples, 0.770 with 10,000; for a stringent level see `simulation_resamples`)."""
    resamples = simulation_resamples(level)
    data = ClaimData(_sample(0.35 if level == 0.05 else 0.5), (None,), ("0",))
    rows = [np.random.default_rng(i).integers(0, 20, size=64) for i in range(40)]

    def share(count: int) -> float:
        rng = np.random.default_rng(0)
        verdicts = []
        for seeds in rows:
            resampled = data.take(seeds)
            tests = rival_tests(resampled, CLAIM, count, rng, fast=True)
            verdicts.append(judge(resampled, CLAIM, tests, factor, level, 0.05, count, rng).verdict != "undecided")
        return float(np.mean(verdicts))

    assert share(resamples) == pytest.approx(share(10_000), abs=0.05)  # 999 at level 0.005: 0.85 against 0.925
