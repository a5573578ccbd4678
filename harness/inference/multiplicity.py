"""Claim families: adjusting p-values for testing many claims at once, and the test level each claim gets.

Holm's step-down (the default) controls the family-wise error rate: the chance of one or more wrong verdicts in a
family stays at most α. Benjamini–Hochberg (an option) controls the false discovery rate: the expected share of
wrong verdicts among the decided ones stays at most α. Claims are grouped by family (a claim's `family`, else the
whole condition file), and a family's adjustment is its claims' `adjustment` (one per family).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import scipy.stats

Adjustment = Literal["holm", "bh"]
ADJUSTMENTS: tuple[Adjustment, ...] = ("holm", "bh")
ADJUSTMENT_NAMES = {"holm": "Holm", "bh": "Benjamini–Hochberg"}


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm-adjusted p-values, in the input's order: sorted ascending, the k-th (from 1) of m becomes
    max over j ≤ k of min(1, (m − j + 1) p_(j)). A claim is rejected at α exactly when its adjusted p ≤ α."""
    p = np.asarray(p_values, dtype=float)
    m = len(p)
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    return adjusted


def adjust(p_values: np.ndarray, method: Adjustment) -> np.ndarray:
    """Adjusted p-values of one family, NaN kept where a claim has no p-value (it is left out of the family)."""
    p = np.asarray(p_values, dtype=float)
    adjusted = np.full(len(p), np.nan)
    finite = np.isfinite(p)
    if finite.any():
        tested = p[finite]
        adjusted[finite] = (
            holm(tested) if method == "holm" else scipy.stats.false_discovery_control(tested, method="bh")
        )
    return adjusted


def levels(p_values: np.ndarray, method: Adjustment, alpha: float) -> np.ndarray:
    """The error level each claim's interval is built at, so that interval and adjusted test agree.

    Holm: the claim of rank k (by ascending raw p, from 1) of m is tested at α / (m − k + 1) at its step.
    Benjamini–Hochberg: α R / m, R the number of claims the adjustment rejects (at least 1): Benjamini and
    Yekutieli's (2005) false-coverage-rate intervals for the selected claims. A claim without a p-value gets α.
    """
    p = np.asarray(p_values, dtype=float)
    out = np.full(len(p), alpha)
    finite = np.flatnonzero(np.isfinite(p))
    m = len(finite)
    if m == 0:
        return out
    if method == "holm":
        ranks = np.empty(m, dtype=int)
        ranks[np.argsort(p[finite], kind="stable")] = np.arange(1, m + 1)
        out[finite] = alpha / (m - ranks + 1)
    else:
        rejected = int(np.sum(adjust(p[finite], "bh") <= alpha))
        out[finite] = alpha * max(rejected, 1) / m
    return out
