"""A confidence interval for the mean of bounded values that assumes no symmetry: a betting confidence sequence.

Per-seed differences of end states are skewed (rare large jumps between end modes, frequent small drifts), so an
interval built on symmetry or on a normal approximation (t, bootstrap) can miss the mean far more often than its
level at the seed counts used here. Bounded values need neither: Waudby-Smith & Ramdas (2024), "Estimating means of
bounded random variables by betting" (JRSS B), build an interval from the wealth of a gambler who bets that the mean
is not m; where the wealth of the hedged bettor passes 1/α, m is excluded. By Ville's inequality the wealth stays
below 1/α with chance at least 1 − α at every seed count at once (a confidence sequence), so the interval holds for
any distribution on the bounds, and stays valid when seeds are added block by block and the interval looked at
after each.

The bets are the paper's predictable plug-in (PrPl-EB) with its hedged capital process (θ = ½, truncation c = ¾),
on values mapped to [0, 1]; their variance estimate centres each value on the running mean before it (the paper
uses the mean including it: any bet that uses only earlier values keeps the guarantee). The interval is the set of
candidate means never rejected up to the last seed, read off a grid of GRID_POINTS candidates and widened outward to
the neighbouring rejected candidates, so rounding can only widen it. `betting_p_value` turns the same wealth into a
p-value for a range of means (what contradicts an "equal" claim: the jumps' mean beyond ±r).
"""

from __future__ import annotations

import math

import numpy as np

GRID_POINTS = 4_001
TRUNCATION = 0.75  # the paper recommends ½ to ¾; any value below 1 keeps the wealth a valid bet
HEDGE = 0.5
ROUNDING = 1e-5  # a value past a bound by this share of the range is float rounding, clipped; further, an error


def _bets(values: np.ndarray, alpha: float) -> np.ndarray:
    """The predictable plug-in bet sizes λ_t (before truncation) for values in [0, 1]: each uses only the values
    before t (the running mean and variance, started at ½ and ¼ as the paper does)."""
    n = len(values)
    t = np.arange(1, n + 1)
    means = (0.5 + np.cumsum(values)) / (t + 1)
    previous_means = np.concatenate([[0.5], means[:-1]])
    variances = (0.25 + np.cumsum((values - previous_means) ** 2)) / (t + 1)
    previous_variances = np.concatenate([[0.25], variances[:-1]])
    return np.sqrt(2 * math.log(2 / alpha) / (previous_variances * t * np.log1p(t)))


def _most_wealth(unit: np.ndarray, bets: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """log of the largest wealth the hedged bettor against each candidate mean reached over the seeds (unit scale)."""
    most = np.empty(len(candidates))
    # Chunks of candidates keep the (candidates × seeds) wealth table small at thousands of seeds.
    for start in range(0, len(candidates), 512):
        m = candidates[start : start + 512, None]
        up = np.minimum(bets, TRUNCATION / np.maximum(m, 1e-12))
        down = np.minimum(bets, TRUNCATION / np.maximum(1 - m, 1e-12))
        with np.errstate(divide="ignore"):
            log_up = np.cumsum(np.log1p(up * (unit - m)), axis=1)
            log_down = np.cumsum(np.log1p(-down * (unit - m)), axis=1)
        wealth = np.logaddexp(math.log(HEDGE) + log_up, math.log(1 - HEDGE) + log_down)
        most[start : start + 512] = np.max(wealth, axis=1)
    return most


def _unit(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """The values mapped to [0, 1], clipped where float32 rounding put them just past a bound (as metrics are
    computed). Raises ValueError for a value further outside [low, high]: the guarantee holds only within them."""
    span = high - low
    slack = ROUNDING * span
    if np.any(values < low - slack) or np.any(values > high + slack):
        raise ValueError(f"values outside [{low:g}, {high:g}]: the betting interval needs every value within them")
    return np.clip((values - low) / span, 0.0, 1.0)


def betting_interval(values: np.ndarray, low: float, high: float, confidence: float) -> tuple[float, float]:
    """(low, high) of a confidence sequence for the mean of i.i.d. values that lie in [low, high], at its last value.

    Valid for every distribution on [low, high], at `confidence`, with the values taken in their given order (the
    seeds', fixed before the data; an order chosen after seeing them is not covered). NaN bounds without values or
    without finite bounds; (inf, -inf), an empty interval, where every candidate mean is rejected (a chance of at
    most 1 − confidence when the values are i.i.d. within the bounds)."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0 or not (np.isfinite(low) and np.isfinite(high)) or high <= low:
        return math.nan, math.nan
    alpha = 1 - confidence
    unit = _unit(values, low, high)
    candidates = np.linspace(0.0, 1.0, GRID_POINTS)
    kept = _most_wealth(unit, _bets(unit, alpha), candidates) < math.log(1 / alpha)
    if not kept.any():
        return math.inf, -math.inf
    first, last = int(np.argmax(kept)), GRID_POINTS - 1 - int(np.argmax(kept[::-1]))
    lower = candidates[max(first - 1, 0)]
    upper = candidates[min(last + 1, GRID_POINTS - 1)]
    return float(low + lower * (high - low)), float(low + upper * (high - low))


def betting_p_value(
    values: np.ndarray, low: float, high: float, null_low: float, null_high: float, alpha: float = 0.05
) -> float:
    """A p-value of "the mean lies in [null_low, null_high]" for i.i.d. values in [low, high], valid for every
    distribution there: 1 / the least, over the candidate means of that range, of the largest wealth the hedged
    bettor against the candidate reached (for the true mean that wealth passes 1/p with chance at most p, by Ville's
    inequality). The bets are sized as for an interval at level 1 − alpha. The least is read off GRID_POINTS // 20
    candidates spanning the range, its ends included; where it falls inside the range (the data's mean within it,
    no evidence against it) the p-value is 1. 1 without values or finite bounds."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0 or not (np.isfinite(low) and np.isfinite(high)) or high <= low:
        return 1.0
    unit = _unit(values, low, high)
    span = high - low
    ends = np.clip([(null_low - low) / span, (null_high - low) / span], 0.0, 1.0)
    candidates = np.linspace(ends[0], ends[1], GRID_POINTS // 20)
    most = _most_wealth(unit, _bets(unit, alpha), candidates)
    least = int(np.argmin(most))
    if 0 < least < len(candidates) - 1:
        return 1.0
    return float(min(1.0, math.exp(-most[least])))
