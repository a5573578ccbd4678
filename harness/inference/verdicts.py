"""Test claims (`harness.inference.claims`) against a metrics table: effect, bootstrap CI, P(improvement), verdict.

The rule, for a claim with resolution r, effect Δ (claimed side minus other side) and its CI [lo, hi]:
- "above": holds if lo > 0 and Δ ≥ r; contradicted if hi < 0 and Δ ≤ -r; otherwise not supported.
- "below": the mirror image (holds if hi < 0 and Δ ≤ -r; contradicted if lo > 0 and Δ ≥ r).
- "equal" (r is the equivalence margin): holds if the whole CI lies within [-r, r]; contradicted if the CI
  excludes 0 and |Δ| ≥ r; otherwise not supported.
A difference smaller than r is never a finding: identical end modes differ by float noise alone.
With fewer than MIN_SEEDS paired seeds the claim is "untested": a percentile bootstrap over 5 seeds has 126
distinct resamples and intervals far narrower than the truth, so no verdict is given (effect and CI still are,
from 2 seeds on; a single seed has no interval).
"Not supported" says why: no difference (the CI lies within ±r), an effect below the resolution (the CI
excludes 0 but |Δ| < r), or too few seeds to tell (the CI includes 0 and reaches past ±r).

Δ is a mean of seed-paired differences (seeds are shared across conditions and iterations), or a
difference of standard deviations over seeds for statistic "std", or a mean minus a fixed value. Its CI is
scipy.stats.bootstrap's percentile interval over seeds (paired resampling, a fixed generator, so the
same table gives the same verdicts).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import scipy.stats

from harness.inference.claims import Claim

VERDICTS = ("holds", "not supported", "contradicted", "untested")
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
MIN_SEEDS = 20

VERDICT_COLUMNS = [
    "claim",
    "statement",
    "metric",
    "side",
    "other_side",
    "statistic",
    "seeds",
    "side_mean",
    "other_mean",
    "side_iqm",
    "other_iqm",
    "effect",
    "ci_low",
    "ci_high",
    "p_improvement",
    "resolution",
    "verdict",
    "why",
]


def _resolve(iteration: int | str, last: int) -> int:
    return last if iteration == "last" else int(iteration)


def _values(metrics: pd.DataFrame, metric: str, condition: str, iteration: int) -> pd.Series:
    """metric by seed for one condition at one iteration, diverged runs left out."""
    rows = metrics[(metrics["condition"] == condition) & (metrics["iteration"] == iteration)]
    if "diverged" in rows.columns:
        rows = rows[~rows["diverged"].astype(bool)]
    return rows.set_index("seed")[metric].astype(float)


def _interquartile_mean(values: np.ndarray) -> float:
    return float(scipy.stats.trim_mean(values, 0.25))


def paired_bootstrap_ci(
    side: np.ndarray, other: np.ndarray | None, statistic: str, confidence: float, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float, float]:
    """(effect, ci_low, ci_high) of side − other over seeds; other None compares side's mean with 0.

    statistic "mean": mean of the paired differences; "std": std(side) − std(other), seeds resampled jointly.
    With fewer than 2 seeds there is nothing to resample: the bounds are NaN (and a spread difference too).
    """
    if len(side) < 2:
        effect = float(np.mean(side if other is None else side - other)) if statistic == "mean" else np.nan
        return effect, np.nan, np.nan
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    if other is None or statistic == "mean":
        differences = side if other is None else side - other
        effect = float(np.mean(differences))
        if np.ptp(differences) == 0:  # every resample is the same: the interval is the point
            return effect, effect, effect
        result = scipy.stats.bootstrap(
            (differences,),
            np.mean,
            confidence_level=confidence,
            n_resamples=resamples,
            method="percentile",
            rng=rng,
        )
    else:

        def spread_difference(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
            return np.std(a, ddof=1, axis=axis) - np.std(b, ddof=1, axis=axis)

        effect = float(spread_difference(side, other))
        result = scipy.stats.bootstrap(
            (side, other),
            spread_difference,
            paired=True,
            confidence_level=confidence,
            n_resamples=resamples,
            method="percentile",
            rng=rng,
        )
    interval = result.confidence_interval
    return effect, float(interval.low), float(interval.high)


def decide(direction: str, effect: float, low: float, high: float, resolution: float) -> tuple[str, str]:
    """(verdict, why) by the module's rule."""
    sign = {"above": 1.0, "below": -1.0}.get(direction)
    within = -resolution <= low and high <= resolution
    if sign is None:  # equal
        if within:
            return "holds", f"CI within ±{resolution:g}"
        if (low > 0 or high < 0) and abs(effect) >= resolution:
            return "contradicted", f"a difference of {effect:+.3g} (CI excludes 0, |Δ| ≥ {resolution:g})"
        return "not supported", "CI reaches past the margin: more seeds needed to tell"
    claimed_low, claimed_high = sorted((sign * low, sign * high))
    if claimed_low > 0 and sign * effect >= resolution:
        return "holds", f"CI excludes 0 on the claimed side, |Δ| ≥ {resolution:g}"
    if claimed_high < 0 and sign * effect <= -resolution:
        return "contradicted", f"the opposite effect: CI excludes 0 on the other side, |Δ| ≥ {resolution:g}"
    if within:
        return "not supported", f"no difference (CI within ±{resolution:g})"
    if low > 0 or high < 0:
        return "not supported", f"effect below the resolution ({resolution:g})"
    return "not supported", "CI includes 0: more seeds needed to tell"


def _improvement_probability(claim: Claim, differences: np.ndarray) -> float:
    """Share of seeds on the claimed side by more than the resolution, ties (|d| ≤ r) counted half."""
    r = claim.resolution
    if claim.direction == "equal":
        return float(np.mean(np.abs(differences) <= r))
    signed = differences if claim.direction == "above" else -differences
    return float(np.mean(signed > r) + 0.5 * np.mean(np.abs(signed) <= r))


def _strongest(metrics: pd.DataFrame, claim: Claim, names: Sequence[str], iteration: int) -> str:
    """The other condition a claim is tested against where its pattern names several: the strongest rival."""
    means = {name: _values(metrics, claim.metric, name, iteration).mean() for name in names}
    pick = min if claim.direction == "below" else max
    return pick(means, key=lambda name: means[name])


def claim_verdict(metrics: pd.DataFrame, claim: Claim, confidence: float = 0.95) -> dict[str, object]:
    """One row of the verdicts table (see VERDICT_COLUMNS)."""
    last = int(metrics["iteration"].max())
    iteration = _resolve(claim.iteration, last)
    side = _values(metrics, claim.metric, claim.condition, iteration)
    side_label = f"{claim.condition} @ {iteration}"  # what the Mean columns describe
    if claim.than_value is not None:
        seeds = side.index
        side_values, other_values = side.to_numpy(), None
        other_label, other_mean, other_iqm = f"the value {claim.than_value:g}", claim.than_value, claim.than_value
        differences = side_values - claim.than_value
        effect, low, high = paired_bootstrap_ci(differences, None, "mean", confidence)
    else:
        other_iteration = _resolve(claim.than_iteration if claim.than_iteration is not None else iteration, last)
        names = claim.other_conditions(list(dict.fromkeys(metrics["condition"])))
        other_condition = _strongest(metrics, claim, names, other_iteration) if len(names) > 1 else names[0]
        other = _values(metrics, claim.metric, other_condition, other_iteration)
        seeds = side.index.intersection(other.index)  # paired: only seeds both sides have
        side_values, other_values = side[seeds].to_numpy(), other[seeds].to_numpy()
        rivals = f" (strongest of {len(names)})" if len(names) > 1 else ""
        other_label = f"{other_condition} @ {other_iteration}{rivals}"
        other_mean, other_iqm = float(np.mean(other_values)), _interquartile_mean(other_values)
        differences = side_values - other_values
        effect, low, high = paired_bootstrap_ci(side_values, other_values, claim.statistic, confidence)
    outcome, why = decide(claim.direction, effect, low, high, claim.resolution)
    if len(seeds) < MIN_SEEDS:
        outcome, why = "untested", f"too few seeds ({len(seeds)} < {MIN_SEEDS}) for a verdict"
    return {
        "claim": claim.name,
        "statement": claim.statement,
        "metric": claim.metric,
        "side": side_label,
        "other_side": other_label,
        "statistic": claim.statistic,
        "seeds": len(seeds),
        "side_mean": float(np.mean(side_values)),
        "other_mean": other_mean,
        "side_iqm": _interquartile_mean(side_values),
        "other_iqm": other_iqm,
        "effect": effect,
        "ci_low": low,
        "ci_high": high,
        "p_improvement": _improvement_probability(claim, differences) if claim.statistic == "mean" else np.nan,
        "resolution": claim.resolution,
        "verdict": outcome,
        "why": why,
    }


def verdict_table(metrics: pd.DataFrame, claims: Sequence[Claim], confidence: float = 0.95) -> pd.DataFrame:
    """The verdicts table: one row per claim, in the given order (columns VERDICT_COLUMNS)."""
    return pd.DataFrame([claim_verdict(metrics, claim, confidence) for claim in claims], columns=VERDICT_COLUMNS)
