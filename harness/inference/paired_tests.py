"""The tests behind a verdict, on seed-paired data: a permutation p-value, and exact tests that see end modes.

Per-seed differences of end states are mostly float noise plus a few jumps between discrete end modes, so what a
claim rests on is how many seeds jumped which way. `mode_counts` says so, with an exact test on them: the sign test
(scipy.stats.binomtest on the seeds that differ by more than the resolution) for a mean, McNemar's exact test on
escapes from the dominant end mode for a spread (binomtest on the discordant pairs). `claim_test` gives the
p-value a verdict uses: a sign-flip permutation test (scipy.stats.permutation_test, permutation_type "samples")
for a mean, swaps within seed pairs for a spread, and two one-sided shifted sign-flip tests (TOST) for "equal".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.stats

from harness.inference.intervals import spread_difference

PERMUTATIONS = 9_999


@dataclass(frozen=True)
class ClaimTest:
    """One comparison's p-value, to be compared with α (after the family's adjustment).

    p: two-sided-like: each one-sided test at α/2, so that p ≤ α matches a (1 − α) two-sided interval excluding
    the null. favours: the point estimate lies on the claim's side (Δ on the claimed side of 0; for "equal",
    |Δ| < margin). name: which test gave p.
    """

    p: float
    favours: bool
    name: str


def _mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(values, axis=axis)


def _drawn_p(null: np.ndarray, observed: float, alternative: str) -> float:
    """scipy.stats.permutation_test's p-value from a drawn null distribution (the observed statistic counted as
    one draw, a relative tolerance for ties, two-sided as twice the smaller side)."""
    tolerance = 100 * np.finfo(float).eps * abs(observed)  # scipy's own tie tolerance
    count = len(null) + 1
    greater = (np.sum(null >= observed - tolerance) + 1) / count
    less = (np.sum(null <= observed + tolerance) + 1) / count
    p = {"greater": greater, "less": less}.get(alternative, 2 * min(greater, less))
    return float(min(p, 1.0))


def fast_sign_flip_p(values: np.ndarray, alternative: str, resamples: int, rng: np.random.Generator) -> float:
    """sign_flip_p's randomized test drawn directly (what seeds_needed runs thousands of times: scipy's general
    permutation machinery costs ten times more there); tests/test_verdict_tests.py checks the two agree."""
    flips = rng.random((resamples, len(values))) < 0.5
    null = np.where(flips, -values, values).mean(axis=1)
    return _drawn_p(null, float(np.mean(values)), alternative)


def fast_swap_p(side: np.ndarray, other: np.ndarray, resamples: int, rng: np.random.Generator) -> float:
    """swap_p's randomized test drawn directly (see fast_sign_flip_p)."""
    swaps = rng.random((resamples, len(side))) < 0.5
    null = spread_difference(np.where(swaps, other, side), np.where(swaps, side, other), axis=1)
    return _drawn_p(null, float(spread_difference(side, other)), "two-sided")


def sign_flip_p(
    values: np.ndarray, alternative: str, resamples: int, rng: np.random.Generator, fast: bool = False
) -> float:
    """Permutation p-value of mean(values) = 0 (values symmetric about 0 under the null) by random sign flips,
    exact where 2^n ≤ resamples. Every value 0: p = 1. fast: fast_sign_flip_p (always randomized)."""
    if not np.any(values):
        return 1.0
    if fast:
        return fast_sign_flip_p(values, alternative, resamples, rng)
    result = scipy.stats.permutation_test(
        (values,),
        _mean,
        permutation_type="samples",
        vectorized=True,
        n_resamples=resamples,
        alternative=alternative,
        rng=rng,
    )
    return float(result.pvalue)


def swap_p(side: np.ndarray, other: np.ndarray, resamples: int, rng: np.random.Generator, fast: bool = False) -> float:
    """Two-sided permutation p-value of std(side) = std(other), swapping the two values within seed pairs.
    fast: fast_swap_p."""
    if np.array_equal(side, other):
        return 1.0
    if fast:
        return fast_swap_p(side, other, resamples, rng)
    result = scipy.stats.permutation_test(
        (side, other),
        spread_difference,
        permutation_type="samples",
        vectorized=True,
        n_resamples=resamples,
        rng=rng,
    )
    return float(result.pvalue)


def claim_test(
    side: np.ndarray,
    other: np.ndarray | None,
    statistic: str,
    direction: str,
    resolution: float,
    resamples: int,
    rng: np.random.Generator,
    fast: bool = False,
) -> ClaimTest:
    """The p-value of one comparison (side − other; other None: side is already a difference from a value).

    "above"/"below": the two-sided sign-flip (mean) or pair-swap (spread) p-value, testing no difference.
    "equal" (mean only), margin r: with |Δ| < r, 2 × TOST p (the larger of the sign-flip p-values of d + r > 0 and
    d − r < 0), testing a difference of at least r; with |Δ| ≥ r, 2 × the shifted sign-flip p of d beyond the
    margin on Δ's side, testing a difference within it. With fewer than 2 seeds: p NaN. fast: the permutation
    tests drawn directly (fast_sign_flip_p), for simulations.
    """
    if len(side) < 2:
        return ClaimTest(np.nan, False, "none (fewer than 2 seeds)")
    if statistic == "std":
        effect = float(spread_difference(side, other))
        sign = 1.0 if direction == "above" else -1.0
        return ClaimTest(swap_p(side, other, resamples, rng, fast), sign * effect > 0, "pair-swap permutation")
    differences = side if other is None else side - other
    effect = float(np.mean(differences))
    if direction != "equal":
        sign = 1.0 if direction == "above" else -1.0
        return ClaimTest(sign_flip_p(differences, "two-sided", resamples, rng, fast), sign * effect > 0, "sign-flip")
    r = resolution
    if abs(effect) < r:
        tost = max(
            sign_flip_p(differences + r, "greater", resamples, rng, fast),
            sign_flip_p(differences - r, "less", resamples, rng, fast),
        )
        return ClaimTest(min(1.0, 2 * tost), True, "TOST sign-flip")
    beyond = (
        sign_flip_p(differences - r, "greater", resamples, rng, fast)
        if effect > 0
        else sign_flip_p(differences + r, "less", resamples, rng, fast)
    )
    return ClaimTest(min(1.0, 2 * beyond), False, "sign-flip beyond the margin")


def dominant_mode(values: np.ndarray, resolution: float) -> float:
    """The value with the most values within ± resolution of it (the end mode most seeds share)."""
    near = np.abs(values[:, None] - values[None, :]) <= resolution
    return float(values[int(np.argmax(near.sum(axis=1)))])


def mode_counts(
    side: np.ndarray, other: np.ndarray | None, statistic: str, resolution: float
) -> tuple[int, int, str, float]:
    """(up, down, test, p): seeds whose side differs by more than the resolution upwards / downwards, and the exact
    two-sided test on them (p 1 where none differs).

    mean: up = seeds with d > r, down = d < −r; the sign test. std: up = seeds where the side escaped the
    dominant end mode (of both sides pooled) and the other did not, down = the reverse; McNemar's exact test.
    """
    if statistic == "std":
        center = dominant_mode(np.concatenate([side, other]), resolution)
        side_out, other_out = np.abs(side - center) > resolution, np.abs(other - center) > resolution
        up, down, name = int(np.sum(side_out & ~other_out)), int(np.sum(~side_out & other_out)), "McNemar exact"
    else:
        differences = side if other is None else side - other
        up, down, name = int(np.sum(differences > resolution)), int(np.sum(differences < -resolution)), "sign test"
    p = float(scipy.stats.binomtest(up, up + down).pvalue) if up + down else 1.0
    return up, down, name, p
