"""Gao et al.'s overoptimization forms, fitted per condition with intervals over seeds and judged by held-out error.

Gao, Schulman & Hilton (2022) fit the gold reward gained since the start against d = √KL(π ‖ π₀):

- best-of-n: R(d) = d (α − β d), peaking at d* = α / (2β) with R(d*) = α² / (4β);
- RL:        R(d) = d (α − β ln d), peaking at d* = exp(α/β − 1) with R(d*) = β d*;

and the rival here is the general quadratic a + b d + c d² (three coefficients). It contains the best-of-n form
(a = 0), so on best-of-n data it can beat that form on held-out error only by fitting noise or a real offset at
d = 0. The fair two-coefficient quadratic, b d + c d² through the origin, *is* the best-of-n form: on RL data,
comparing the RL form with the best-of-n form is that equal-coefficient comparison. R is a gain (0 at d = 0): the
caller subtracts each curve's starting value (`gains_since_start`).

Every form is linear in its coefficients, so a fit is ordinary least squares, solved exactly (scipy.linalg.lstsq),
where scipy.optimize.curve_fit would iterate to the same minimum. The linearity also makes resampling cheap: each
seed's points are summarised once by their normal-equation moments (Σ x xᵀ, Σ x y over the seed's points, x the
form's basis at d), and a fit to any multiset of seeds is a solve of their summed moments. Intervals resample seeds
(every point of a seed together, since a run's points along its curve are not independent) and refit: scipy.stats.
bootstrap's percentile interval, chosen by simulation (tests/test_overoptimization.py's heavy
test_interval_coverage_simulation: per seed a curve with its own α, β around the truth, at a seed-scaled best-of-n
grid of d, plus noise; 1,000 studies per cell, nominal 95%; coverage of α / β in %):

    seeds                      5          10         20         50         100
    best-of-n form, percentile 88.1/86.2  89.3/88.7  91.8/91.7  94.6/92.7  95.5/93.7
    best-of-n form, BCa        79.4/75.1  83.6/83.9  89.8/87.9  93.3/91.3  94.1/93.1
    RL form, percentile        83.4/87.8  89.2/90.4  91.2/92.3  94.5/93.3  95.8/94.1
    RL form, BCa               81.6/75.5  88.2/82.0  90.8/87.1  93.6/91.7  95.5/93.2

The percentile interval reaches its nominal rate by 50–100 seeds and is the nearer at every count; BCa's correction
costs coverage at the few seeds this lab runs. Held-out error leaves out one seed (or one of K folds of seeds) at a
time, fits the rest, and scores the left-out seeds' points.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import scipy.linalg
import scipy.special
import scipy.stats

from harness.inference.intervals import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED


def best_of_n_gold(d: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """R(d) = d (α − β d)."""
    return alpha * d - beta * d * d


def rl_gold(d: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """R(d) = d (α − β ln d), with R(0) = 0 (xlogy)."""
    return alpha * d - beta * scipy.special.xlogy(d, d)


def quadratic(d: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    """a + b d + c d²."""
    return a + b * d + c * d * d


@dataclasses.dataclass(frozen=True)
class Form:
    """A curve linear in its coefficients: curve(d, *coefficients) = basis(d) @ coefficients."""

    name: str
    formula: str
    coefficients: tuple[str, ...]
    curve: Callable[..., np.ndarray]

    def basis(self, d: np.ndarray) -> np.ndarray:
        """(len(d), k): the curve at each unit coefficient vector, so that basis(d) @ c = curve(d, *c)."""
        d = np.asarray(d, float)
        return np.stack([self.curve(d, *unit) for unit in np.eye(len(self.coefficients))], axis=1)


FORMS: dict[str, Form] = {
    "best_of_n": Form("best_of_n", "d(α − β·d)", ("alpha", "beta"), best_of_n_gold),
    "rl": Form("rl", "d(α − β·ln d)", ("alpha", "beta"), rl_gold),
    "quadratic": Form("quadratic", "a + b·d + c·d²", ("a", "b", "c"), quadratic),
}


def peak(form: str, alpha: float, beta: float) -> tuple[float, float]:
    """(d*, R(d*)) of a Gao form; NaN where β ≤ 0 (the curve never turns down); d* = ∞ where it overflows."""
    if not beta > 0:
        return np.nan, np.nan
    if form == "best_of_n":
        return alpha / (2.0 * beta), alpha * alpha / (4.0 * beta)
    if form == "rl":
        with np.errstate(over="ignore"):
            d_peak = float(np.exp(alpha / beta - 1.0))
        return d_peak, beta * d_peak
    raise ValueError(f"no peak for form {form!r}; Gao forms: best_of_n, rl")


def gains_since_start(
    table: pd.DataFrame, curve: Sequence[str], step: str, values: Sequence[str], suffix: str = "_gain"
) -> pd.DataFrame:
    """`table` with value + suffix columns: each value minus its curve's value at the curve's smallest step
    (n = 1 for best-of-n, iteration 0 for RL). curve: the columns naming one curve (e.g. condition, seed)."""
    ordered = table.sort_values([*curve, step], kind="stable")
    start = ordered.groupby(list(curve), sort=False)[list(values)].transform("first")
    out = table.copy()
    for value in values:
        out[value + suffix] = table[value] - start[value].reindex(table.index)
    return out


def _group_arrays(points: pd.DataFrame, x: str, y: str, seed: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(d, y, seed position 0..S−1) of the finite points of one group."""
    own = points.dropna(subset=[x, y])
    positions = pd.factorize(own[seed], sort=True)[0]
    return own[x].to_numpy(float), own[y].to_numpy(float), positions


def _moments(basis: np.ndarray, y: np.ndarray, positions: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Per seed (or fold) position: Σ x xᵀ (count, k, k) and Σ x y (count, k) over its points."""
    one_hot = np.eye(count)[positions]
    return np.einsum("ps,pi,pj->sij", one_hot, basis, basis), np.einsum("ps,pi,p->si", one_hot, basis, y)


def _solve(gram: np.ndarray, moment: np.ndarray) -> np.ndarray:
    """Least-squares coefficients from summed moments, batched over leading axes (pseudo-inverse: a singular
    resample, e.g. every point at one d, gets the minimum-norm solution instead of an error)."""
    return np.einsum("...ij,...j->...i", np.linalg.pinv(gram), moment)


def seed_intervals(
    basis: np.ndarray,
    gain: np.ndarray,
    positions: np.ndarray,
    confidence: float,
    resamples: int,
    method: str = "percentile",
) -> np.ndarray:
    """(k, 2): bootstrap intervals of the least-squares coefficients, seeds resampled (positions 0..S−1 name each
    point's seed; S ≥ 2). One resample of seeds refits every coefficient at once. method: scipy.stats.bootstrap's
    ("percentile", the one chosen; "BCa" for the simulation that chose it)."""
    n_seeds = int(positions.max()) + 1
    gram, moment = _moments(basis, gain, positions, n_seeds)

    def coefficients(chosen: np.ndarray, axis: int = -1) -> np.ndarray:
        chosen = np.moveaxis(np.asarray(chosen, int), axis, -1)
        return np.moveaxis(_solve(gram[chosen].sum(axis=-3), moment[chosen].sum(axis=-2)), -1, 0)

    if np.ptp(gram, axis=0).max() == 0 and np.ptp(moment, axis=0).max() == 0:  # identical seeds: nothing varies
        point = coefficients(np.arange(n_seeds))
        return np.stack([point, point], axis=-1)
    result = scipy.stats.bootstrap(
        (np.arange(n_seeds),),
        coefficients,
        n_resamples=resamples,
        confidence_level=confidence,
        method=method,
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    )
    return np.stack([result.confidence_interval.low, result.confidence_interval.high], axis=-1)


def fit_form(
    points: pd.DataFrame,
    form: str,
    by: Sequence[str] = ("condition",),
    x: str = "d",
    y: str = "gold_gain",
    seed: str = "seed",
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    min_seeds: int = 2,
) -> pd.DataFrame:
    """Least-squares fit of one form per group of `by`, with bootstrap intervals over seeds.

    Returns one row per group: the `by` columns, form, points, seeds, each coefficient with <name>_low and
    <name>_high (`seed_intervals` at `confidence`; NaN with fewer than min_seeds seeds, at least 2, or resamples=0), r2,
    rmse, d_max (the largest d fitted) and, for the Gao forms, d_peak and peak_gain (`peak`). Groups with fewer
    finite points than coefficients, or a single d, get NaN coefficients.
    """
    shape = FORMS[form]
    rows = []
    for key, group in points.groupby(list(by), sort=False):
        d, gain, positions = _group_arrays(group, x, y, seed)
        row: dict[str, object] = dict(zip(by, key, strict=True)) | {"form": form, "points": len(d)}
        row["seeds"] = int(positions.max()) + 1 if len(d) else 0
        if len(d) < len(shape.coefficients) or np.ptp(d) == 0:
            rows.append(row)
            continue
        basis = shape.basis(d)
        coefficients = scipy.linalg.lstsq(basis, gain)[0]
        residual = gain - basis @ coefficients
        total = np.sum((gain - gain.mean()) ** 2)
        row |= {
            "r2": 1.0 - np.sum(residual**2) / total if total > 0 else np.nan,
            "rmse": float(np.sqrt(np.mean(residual**2))),
            "d_max": float(d.max()),
        }
        bounds = np.full((len(shape.coefficients), 2), np.nan)
        if row["seeds"] >= max(2, min_seeds) and resamples > 0:
            bounds = seed_intervals(basis, gain, positions, confidence, resamples)
        for index, name in enumerate(shape.coefficients):
            row |= {name: float(coefficients[index]), f"{name}_low": bounds[index, 0], f"{name}_high": bounds[index, 1]}
        if form in ("best_of_n", "rl"):
            row["d_peak"], row["peak_gain"] = peak(form, row["alpha"], row["beta"])
        rows.append(row)
    intervals = [f"{name}{end}" for name in shape.coefficients for end in ("", "_low", "_high")]
    peaks = ["d_peak", "peak_gain"] if form in ("best_of_n", "rl") else []
    return pd.DataFrame(rows, columns=[*by, "form", "points", "seeds", *intervals, "r2", "rmse", "d_max", *peaks])


def held_out_errors(
    points: pd.DataFrame,
    forms: Sequence[str] = ("best_of_n", "rl", "quadratic"),
    by: Sequence[str] = ("condition",),
    x: str = "d",
    y: str = "gold_gain",
    seed: str = "seed",
    folds: int | None = None,
) -> pd.DataFrame:
    """Held-out mean squared error of each form per group: fit on all seeds but a fold, score the fold's points.

    folds None: leave one seed out; an integer K: seeds (sorted) dealt round-robin into K folds. Returns one row per
    group and form: the `by` columns, form, coefficients (how many), folds, held_out_mse (over every point, each
    scored by the fit that did not see its seed), in_sample_mse (the fit to all seeds), and rank (1 = lowest
    held-out error in the group). NaN where a group has fewer than 2 seeds.
    """
    rows = []
    for key, group in points.groupby(list(by), sort=False):
        d, gain, positions = _group_arrays(group, x, y, seed)
        n_seeds = int(positions.max()) + 1 if len(d) else 0
        n_folds = n_seeds if folds is None else min(folds, n_seeds)
        fold = positions % n_folds if n_folds else positions
        for form in forms:
            row = dict(zip(by, key, strict=True)) | {"form": form, "coefficients": len(FORMS[form].coefficients)}
            row |= {"folds": n_folds, "held_out_mse": np.nan, "in_sample_mse": np.nan}
            if n_folds >= 2:
                basis = FORMS[form].basis(d)
                gram, moment = _moments(basis, gain, fold, n_folds)
                trained = _solve(gram.sum(axis=0) - gram, moment.sum(axis=0) - moment)  # (folds, k): all but one
                held_out = gain - np.einsum("pi,pi->p", basis, trained[fold])
                in_sample = gain - basis @ _solve(gram.sum(axis=0), moment.sum(axis=0))
                row |= {"held_out_mse": float(np.mean(held_out**2)), "in_sample_mse": float(np.mean(in_sample**2))}
            rows.append(row)
    table = pd.DataFrame(rows)
    if not table.empty:
        table["rank"] = table.groupby(list(by), sort=False)["held_out_mse"].rank(method="min")
    return table


def fit_gao(
    points: pd.DataFrame,
    by: Sequence[str] = ("condition",),
    optimizer: str = "optimizer",
    x: str = "d",
    y: str = "gold_gain",
    seed: str = "seed",
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> pd.DataFrame:
    """Each optimizer's own Gao form per group of `by`: rows whose `optimizer` column is "best_of_n" fitted by
    d(α − β d), rows with "rl" by d(α − β ln d) (`fit_form`; the optimizer column joins the group)."""
    unknown = set(points[optimizer].unique()) - {"best_of_n", "rl"}
    if unknown:
        raise ValueError(f"unknown optimizers {sorted(unknown)}; known: best_of_n, rl")
    fits = [
        fit_form(own, name, [*by, optimizer], x, y, seed, confidence, resamples)
        for name, own in points.groupby(optimizer, sort=False)
    ]
    return pd.concat(fits, ignore_index=True) if fits else pd.DataFrame()
