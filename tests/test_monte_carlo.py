"""Permutation p-values: exact where they can be, drawn where not, with the precision a decision needs.

The grouped sign-flip computation against brute-force enumeration of every sign pattern; its Rao–Blackwellized draws
against the exact distribution; the pair-swap test against enumeration; and the streams: a claim's p does not
depend on the claims judged beside it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.inference.claims import Claim
from harness.inference.intervals import spread_difference
from harness.inference.monte_carlo import sign_patterns
from harness.inference.paired_tests import swap_test
from harness.inference.rule import ClaimData
from harness.inference.sign_flip import EXACT_SUPPORT, grouped_null, sign_flip_p
from harness.inference.verdicts import judge_family


def _brute(values: np.ndarray, alternative: str) -> float:
    null = sign_patterns(len(values)) @ values
    observed, tolerance = values.sum(), 1e-9
    greater, less = np.mean(null >= observed - tolerance), np.mean(null <= observed + tolerance)
    return float({"greater": greater, "less": less}.get(alternative, min(1.0, 2 * min(greater, less))))


@settings(max_examples=60, deadline=None)
@given(
    ties=st.integers(0, 6),
    jumps=st.lists(st.sampled_from([0.25, -0.25, 0.5, -0.5, 0.764, -0.1]), min_size=0, max_size=9),
    alternative=st.sampled_from(["greater", "less", "two-sided"]),
)
def test_grouped_sign_flip_is_the_enumerated_test(ties: int, jumps: list[float], alternative: str) -> None:
    values = np.array([0.05] * ties + jumps + [0.0, 0.0])  # zeros cannot move; ties share one magnitude
    found = sign_flip_p(values, alternative, np.random.default_rng(0))
    assert found.draws == 0 and found.error == 0.0
    assert found.p == pytest.approx(_brute(values, alternative), abs=1e-12)


def test_drawn_sign_flip_agrees_with_the_exact_distribution() -> None:
    """14 distinct jumps and 100 ties: (100 + 1) · 2^14 > EXACT_SUPPORT null values, so the p is drawn; the exact one
    comes from enumerating the same grouped null directly. Within 4 Monte-Carlo errors, and inside its interval."""
    rng = np.random.default_rng(1)
    values = np.concatenate([np.full(100, 0.01), rng.normal(0, 0.3, size=14)])
    magnitudes, counts = np.unique(np.abs(values), return_counts=True)
    assert np.prod(counts + 1.0) > EXACT_SUPPORT
    support, weights = grouped_null(magnitudes, counts)
    for alternative in ("greater", "less"):
        exact = float(
            np.sum(
                weights[support >= values.sum() - 1e-9]
                if alternative == "greater"
                else weights[support <= values.sum() + 1e-9]
            )
        )
        drawn = sign_flip_p(values, alternative, np.random.default_rng(2), draws=20_000)
        assert drawn.draws == 20_000 and drawn.error > 0
        assert abs(drawn.p - exact) <= 4 * drawn.error
        assert drawn.low <= exact <= drawn.high


def test_the_pair_swap_test_is_enumerated_where_few_pairs_differ() -> None:
    rng = np.random.default_rng(3)
    side = np.concatenate([np.full(30, 1.75), rng.choice([1.0, 2.0], size=10)])
    other = np.concatenate([np.full(30, 1.75), rng.choice([1.0, 1.75], size=10)])
    moving = side != other
    patterns = sign_patterns(int(moving.sum())) < 0
    a = np.tile(side, (len(patterns), 1))
    b = np.tile(other, (len(patterns), 1))
    a[:, moving] = np.where(patterns, other[moving], side[moving])
    b[:, moving] = np.where(patterns, side[moving], other[moving])
    null, observed = spread_difference(a, b, axis=1), spread_difference(side, other)
    greater, less = np.mean(null >= observed - 1e-9), np.mean(null <= observed + 1e-9)
    found = swap_test(side, other, np.random.default_rng(0))
    assert found.draws == 0 and found.p == pytest.approx(min(1.0, 2 * min(greater, less)), abs=1e-12)


def test_a_claims_p_does_not_depend_on_the_claims_beside_it() -> None:
    """Each claim draws from its own stream (named by claim, rival and test): judged alone or in a family, its raw
    p is the same, while two claims on the same data but different names draw different (independent) streams."""
    rng = np.random.default_rng(4)
    side = np.concatenate([np.full(150, 1.75), rng.choice([1.0, 2.0], size=50)])
    other = np.concatenate([np.full(150, 1.75), rng.choice([1.0, 1.75, 2.2], size=50)])
    data = ClaimData(side, (other,), ("b",))

    def claim(name: str) -> Claim:
        return Claim(
            name=name,
            statement="s",
            metric="policy_quality",
            condition="a",
            direction="above",
            than_condition="b",
            statistic="std",
        )

    alone = judge_family([claim("x")], [data], 0.05)[0]
    beside = judge_family([claim("y"), claim("x")], [data, data], 0.05)
    assert alone.effect.draws > 0 and 0 < alone.effect.p < 1  # drawn (50 pairs differ), not exact
    assert beside[1].effect.p == alone.effect.p
    assert beside[0].effect.p != alone.effect.p
