"""Seeds needed: the resampling estimate of how many seeds would decide an open claim, against a case whose
answer is known, and its place in the verdicts table."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import scipy.stats

from harness.inference.claims import Claim
from harness.inference.rule import ClaimData
from harness.inference.seeds_needed import seeds_needed
from harness.inference.verdicts import judged, verdict_table

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


def _sign_test_power(n: int, share_up: float, alpha: float) -> float:
    """The exact power of the two-sided sign test at level α with n seeds that each jump up with chance share_up
    (and down otherwise): the binomial probability of the counts it rejects at."""
    ups = np.arange(n + 1)
    rejects = np.array([scipy.stats.binomtest(int(k), n).pvalue <= alpha for k in ups])
    return float(scipy.stats.binom.pmf(ups[rejects], n, share_up).sum())


def test_seeds_needed_matches_a_known_answer() -> None:
    """20 observed seeds, 13 up and 7 down: resampled, a dataset of n seeds holds Binomial(n, 0.65) jumps up and the
    rule's verdict is the sign test's. Its exact power climbs past 80% between n = 80 and 90 (a sawtooth: the test is
    discrete); the estimate must lie within 15% of where a smooth curve through the exact powers crosses 80%."""
    observed = np.array([0.3] * 13 + [-0.3] * 7)
    data = ClaimData(observed, (None,), ("0",))

    def decided(rows: np.ndarray, rng: np.random.Generator) -> bool:
        return judged(data.take(rows), CLAIM, (1.0, 1.0), 0.05, lambda *_: rng).verdict != "undecided"

    ns = np.arange(40, 161)
    powers = np.array([_sign_test_power(int(n), 0.65, 0.05) for n in ns])
    smooth = np.convolve(powers, np.ones(9) / 9, mode="same")[4:-4]  # the sawtooth averaged over ±4 seeds
    crossing = float(ns[4:-4][np.argmax(smooth >= 0.8)])
    estimate = seeds_needed(decided, 20)
    assert crossing / 1.15 <= estimate <= crossing * 1.15, (estimate, crossing)
    assert seeds_needed(decided, 20) == estimate  # a fixed generator: the same answer every time


def test_no_effect_needs_more_seeds_than_the_ladder_reaches() -> None:
    def never(rows: np.ndarray, rng: np.random.Generator) -> bool:
        return False

    assert math.isinf(seeds_needed(never, 20))


def test_the_table_gives_undecided_claims_a_seed_count() -> None:
    side = np.array([0.3] * 17 + [-0.3] * 7)  # the sign test: p = 0.064 at 24 seeds
    metrics = pd.DataFrame({"condition": "a", "seed": range(24), "iteration": 1, "policy_quality": side})
    row = verdict_table(metrics, [CLAIM]).iloc[0]
    assert row["verdict"] == "undecided"
    assert 24 < row["seeds_needed"] < 8 * 24
    decided = verdict_table(metrics.assign(policy_quality=side + 1.0), [CLAIM]).iloc[0]
    assert decided["verdict"] == "holds" and np.isnan(decided["seeds_needed"])
    assert verdict_table(metrics, [CLAIM], estimate_seeds=False)["seeds_needed"].isna().all()
