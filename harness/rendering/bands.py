"""Bands over seeds for figures: 95% bootstrap intervals of a mean (learning curves), and rliable-style performance
profiles (the share of runs whose end value exceeds τ, for every τ).

Both resample seeds with scipy.stats.bootstrap's percentile interval, as seaborn's errorbar=("ci", 95) does. A band
shows how well the seeds pin the mean down, not how spread the runs are (a ±1 sd band does not shrink with more
seeds). At few seeds a percentile band is narrow for its nominal 95% (about 80% coverage at 5 seeds for a normal
mean); with one seed there is nothing to resample and the band is the point. Groups with the same number of seeds are
resampled in one vectorized call, sharing the resample indices (each band is still a marginal 95% band), so a whole
report's bands cost a few calls; a fixed generator makes the same table give the same bands (and figure bytes).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import scipy.stats

BAND_RESAMPLES = 2_000
BAND_SEED = 0
# Values in one vectorized batch of resamples: bounds the (groups, batch, seeds) array scipy builds (32 MB).
_BATCH_VALUES = 4_000_000


def _percentile_bands(values: np.ndarray, confidence: float, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(groups, 2): percentile bootstrap interval of the mean of each row of values (groups, seeds ≥ 2)."""
    result = scipy.stats.bootstrap(
        (values,),
        np.mean,
        axis=-1,
        vectorized=True,
        n_resamples=resamples,
        batch=max(1, _BATCH_VALUES // values.size),
        confidence_level=confidence,
        method="percentile",
        rng=rng,
    )
    return np.stack([result.confidence_interval.low, result.confidence_interval.high], axis=-1)


def bootstrap_bands(
    table: pd.DataFrame,
    value: str,
    by: Sequence[str] = ("condition", "iteration"),
    confidence: float = 0.95,
    resamples: int = BAND_RESAMPLES,
    seed: int = BAND_SEED,
) -> pd.DataFrame:
    """Mean of `value` per group of `by` (one row per seed), with its percentile bootstrap band over the rows.

    Non-finite values are left out. Returns the `by` columns, n (finite values), mean, low, high, one row per group
    with at least one finite value, in the order the groups first appear in `table`. n = 1: low = high = mean.
    """
    finite = table[np.isfinite(table[value].to_numpy(float))]
    groups = finite.groupby(list(by), sort=False)[value]
    out = groups.agg(n="size", mean="mean").reset_index()
    out["low"], out["high"] = out["mean"].to_numpy(float), out["mean"].to_numpy(float)
    rng = np.random.default_rng(seed)
    samples = [g.to_numpy(float) for _, g in groups]
    sizes = out["n"].to_numpy()
    for size in np.unique(sizes[sizes >= 2]):
        rows = np.flatnonzero(sizes == size)
        values = np.stack([samples[row] for row in rows])
        if np.ptp(values, axis=1).max() == 0:  # every resample is the same: the band is the point
            continue
        bands = _percentile_bands(values, confidence, resamples, rng)
        # A group whose seeds all agree has a point band; the resampled mean can differ from it by rounding.
        constant = np.ptp(values, axis=1) == 0
        out.loc[rows[~constant], ["low", "high"]] = bands[~constant]
    return out


def performance_profile(
    final: pd.DataFrame,
    value: str,
    by: Sequence[str] = ("condition",),
    taus: np.ndarray | None = None,
    confidence: float = 0.95,
    resamples: int = BAND_RESAMPLES,
    seed: int = BAND_SEED,
) -> pd.DataFrame:
    """rliable-style performance profile: per group, the fraction of runs (rows of `final`) with value > τ, for
    every τ, with its percentile bootstrap band over runs (one resample of the runs serves every τ of a group, so
    a profile's band is a band of whole profiles' points).

    taus: the thresholds (default: 101 evenly spaced over the finite values' range, shared by every group).
    Non-finite values are left out. Returns the `by` columns, tau, runs, fraction, low, high: groups in the order
    they first appear in `final`, τ ascending within each.
    """
    finite = final[np.isfinite(final[value].to_numpy(float))]
    if taus is None:
        span = finite[value].to_numpy(float)
        taus = np.linspace(span.min(), span.max(), 101) if len(span) else np.zeros(0)
    taus = np.sort(np.asarray(taus, float))
    above = finite[list(by)].copy()
    exceeds = finite[value].to_numpy(float)[:, None] > taus[None, :]
    long = pd.concat(
        [above.assign(tau=tau, exceeds=exceeds[:, k].astype(float)) for k, tau in enumerate(taus)], ignore_index=True
    )
    bands = bootstrap_bands(long, "exceeds", by=[*by, "tau"], confidence=confidence, resamples=resamples, seed=seed)
    # `long` runs τ by τ; a merge onto the groups' first appearance puts each group's τ together, in order.
    bands = finite[list(by)].drop_duplicates().merge(bands, on=list(by), how="inner")
    return bands.rename(columns={"n": "runs", "mean": "fraction"})[[*by, "tau", "runs", "fraction", "low", "high"]]
