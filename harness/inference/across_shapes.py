"""Claims that compare the shapes of a study (`harness.grid.study`): other worlds, other networks.

Two kinds, written as `[across.NAME]` tables of a study file:

- **between** two shapes: a per-run measure (`harness.inference.run_measures`: any float metric at the final
  iteration, or a derived measure such as the ceiling iteration) of one condition in `shape` against the same
  condition in `than_shape`:

      [across.ceiling-later-in-larger-worlds]
      statement = "the ceiling iteration moves later as the world grows"
      measure = "ceiling_iteration"
      condition = "baseline"
      shape = "large"
      direction = "above"
      than_shape = "small"
      resolution = 0.5

  Runs of two shapes are independent samples (other worlds and networks: seed s of one shape has nothing in common
  with seed s of another), so the effect is the difference of the two means, its interval scipy.stats.bootstrap's
  BCa interval resampling each shape's runs on their own, and its p-value scipy.stats.permutation_test's, with
  runs exchanged between the shapes (two-sided).
- **every** shape: a `[claims]` claim of the file (judged within each shape's grid, seed-paired) said to hold in
  every shape that has it (or in the `shapes` listed). It holds where every shape's verdict is "holds" (an
  intersection–union test, whose p-value is the largest of the shapes' adjusted p-values); it is contradicted where
  some shape's is "contradicted" (p: the smallest of those shapes' adjusted p-values times the number of shapes,
  Bonferroni over the shapes); otherwise it is not supported, or undecided where some shape is. Either positive
  or negative verdict also needs its p-value to pass the study's adjustment, else it is undecided.

A study's across claims are one family: their p-values are adjusted together (Holm), and a between claim's interval
is built at its adjusted level. The verdict rule for a between claim is the seed-paired rule's (`rule`), with these
tests: with resolution r, "above" holds if p_adj ≤ α, the interval's low end > 0 and Δ ≥ r; it is contradicted if
p_adj ≤ α, the high end < 0 and Δ ≤ −r; not supported if the interval lies within ±r; undecided otherwise. Fewer
than MIN_SEEDS runs on a side: untested.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd
import scipy.stats
from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.engine.metrics import QUALITY_RESOLUTION
from harness.inference.intervals import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED
from harness.inference.multiplicity import adjust, levels
from harness.inference.paired_tests import PERMUTATIONS
from harness.inference.rule import MIN_SEEDS
from harness.inference.run_measures import measure_names

ACROSS_COLUMNS = [
    "claim",
    "statement",
    "kind",
    "measure",
    "condition",
    "shape",
    "than_shape",
    "runs",
    "than_runs",
    "shape_mean",
    "than_mean",
    "effect",
    "ci_low",
    "ci_high",
    "ci_level",
    "p_value",
    "p_adjusted",
    "resolution",
    "verdict",
    "why",
]


class AcrossClaim(BaseModel):
    """A claim comparing shapes: `between` (measure, condition, shape, than_shape) or `every` (within)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str
    statement: str = Field(min_length=1)
    source: str = ""
    within: str | None = Field(None, description="every: the [claims] claim that should hold in every shape")
    shapes: tuple[str, ...] = Field((), description="every: the shapes it should hold in (default: all that have it)")
    measure: str | None = None
    condition: str | None = None
    shape: str | None = None
    direction: Literal["above", "below"] = "above"
    than_shape: str | None = None
    resolution: float = Field(QUALITY_RESOLUTION, gt=0, description="the smallest difference that counts")

    @property
    def kind(self) -> str:
        return "every" if self.within is not None else "between"

    @model_validator(mode="after")
    def _one_kind(self) -> AcrossClaim:
        between = (self.measure, self.condition, self.shape, self.than_shape)
        if self.within is not None and any(value is not None for value in between):
            raise ValueError("an 'every' claim (within) takes no measure, condition, shape or than_shape")
        if self.within is None and any(value is None for value in between):
            raise ValueError("give within (a claim to hold in every shape), or measure, condition, shape, than_shape")
        if self.within is None and self.shapes:
            raise ValueError("shapes lists the shapes of an 'every' claim (within)")
        return self

    def check_against(self, conditions: Mapping[str, Sequence[str]], within: Mapping[str, Sequence[str]]) -> None:
        """Raise ValueError unless the claim's shapes, conditions and claims exist (per shape: its conditions and
        its claims' names)."""
        if self.within is not None:
            having = [shape for shape, names in within.items() if self.within in names]
            if not having:
                raise ValueError(f"across claim {self.name!r}: no shape has a claim {self.within!r}")
            missing = [shape for shape in self.shapes if shape not in having]
            if missing:
                raise ValueError(f"across claim {self.name!r}: shapes without claim {self.within!r}: {missing}")
            return
        for shape in (self.shape, self.than_shape):
            if shape not in conditions:
                raise ValueError(f"across claim {self.name!r}: no shape {shape!r}")
            if self.condition not in conditions[shape]:
                raise ValueError(f"across claim {self.name!r}: shape {shape!r} has no condition {self.condition!r}")
        if self.shape == self.than_shape:
            raise ValueError(f"across claim {self.name!r}: shape and than_shape are the same")
        if self.measure not in measure_names():
            raise ValueError(f"across claim {self.name!r}: measure must be one of {', '.join(measure_names())}")


def _mean_difference(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def independent_interval(
    a: np.ndarray, b: np.ndarray, confidence: float, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float]:
    """BCa interval of mean(a) − mean(b), each sample resampled on its own (percentile where BCa is undefined; the
    point where neither sample varies); a generator seeded with BOOTSTRAP_SEED, so a table repeats its bounds."""
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        effect = float(np.mean(a) - np.mean(b))
        return effect, effect
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DegenerateDataWarning: the percentile fallback below
            result = scipy.stats.bootstrap(
                (a, b),
                _mean_difference,
                confidence_level=confidence,
                n_resamples=resamples,
                method=method,
                rng=np.random.default_rng(BOOTSTRAP_SEED),
            )
        bounds = (float(result.confidence_interval.low), float(result.confidence_interval.high))
        if np.all(np.isfinite(bounds)):
            return bounds
    return bounds


def independent_p(a: np.ndarray, b: np.ndarray, resamples: int = PERMUTATIONS) -> float:
    """Two-sided permutation p-value of mean(a) − mean(b) (runs exchanged between the samples); exact where the
    permutations are fewer than `resamples`."""
    result = scipy.stats.permutation_test(
        (a, b),
        _mean_difference,
        permutation_type="independent",
        alternative="two-sided",
        n_resamples=resamples,
        vectorized=True,
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    )
    return float(result.pvalue)


def _between_row(claim: AcrossClaim, measures: pd.DataFrame) -> dict[str, object]:
    """A between claim's sides, effect and tests (verdict and interval are filled in with the family)."""

    def values(shape: str | None) -> np.ndarray:
        own = measures[(measures["shape"] == shape) & (measures["condition"] == claim.condition)]
        column = own[claim.measure].to_numpy(np.float64)
        return column[np.isfinite(column)]

    side, other = values(claim.shape), values(claim.than_shape)
    tested = min(len(side), len(other)) >= MIN_SEEDS
    return {
        "measure": claim.measure,
        "condition": claim.condition,
        "shape": claim.shape,
        "than_shape": claim.than_shape,
        "runs": len(side),
        "than_runs": len(other),
        "shape_mean": float(np.mean(side)) if len(side) else np.nan,
        "than_mean": float(np.mean(other)) if len(other) else np.nan,
        "effect": float(np.mean(side) - np.mean(other)) if len(side) and len(other) else np.nan,
        "p_value": independent_p(side, other) if tested else np.nan,
        "samples": (side, other),
    }


def _between_verdict(claim: AcrossClaim, row: dict, alpha: float) -> tuple[str, str]:
    if not np.isfinite(row["p_value"]):
        return "untested", f"fewer than {MIN_SEEDS} runs on a side"
    sign = 1.0 if claim.direction == "above" else -1.0
    effect, low, high = sign * row["effect"], *sorted((sign * row["ci_low"], sign * row["ci_high"]))
    r = claim.resolution
    if row["p_adjusted"] <= alpha and low > 0 and effect >= r:
        return "holds", "the permutation test and the interval agree, beyond the resolution"
    if row["p_adjusted"] <= alpha and high < 0 and effect <= -r:
        return "contradicted", "the permutation test and the interval agree on the opposite, beyond the resolution"
    if -r < low and high < r:
        return "not supported", "the interval lies within ± the resolution: no difference that counts"
    if row["p_adjusted"] <= alpha:
        return "undecided", "the tests disagree: the permutation test finds a difference, the interval includes 0"
    return "undecided", "the interval includes 0 and reaches past the resolution: more runs needed"


def _every_row(claim: AcrossClaim, within: pd.DataFrame) -> dict[str, object]:
    """An every claim's per-shape verdicts (within: the shapes' claims tables with a `shape` column) and its p-value:
    the largest of the shapes' adjusted p where it holds in every shape (intersection–union); where some shape
    contradicts it, the smallest p of those shapes times the number of shapes (a statement about some shape, so
    Bonferroni over them); otherwise the largest."""
    own = within[within["claim"] == claim.within] if not within.empty else within
    if claim.shapes:
        own = own[own["shape"].isin(claim.shapes)]
    verdicts = dict(zip(own["shape"], own["verdict"], strict=True))
    p = dict(zip(own["shape"], own["p_adjusted"].astype(float), strict=True))
    listed = "; ".join(f"{shape}: {verdict}" for shape, verdict in verdicts.items())
    largest = max(p.values()) if p and all(np.isfinite(list(p.values()))) else np.nan
    if verdicts and all(verdict == "holds" for verdict in verdicts.values()):
        verdict, why, p_value = "holds", f"holds in every shape ({listed})", largest
    elif "contradicted" in verdicts.values():
        against = [p[shape] for shape, verdict in verdicts.items() if verdict == "contradicted"]
        verdict, why = "contradicted", f"contradicted in some shape ({listed})"
        p_value = min(1.0, len(verdicts) * min(against))
    elif "undecided" in verdicts.values() or "untested" in verdicts.values() or not verdicts:
        verdict, why, p_value = "undecided", f"not decided in every shape ({listed})", largest
    else:
        verdict, why, p_value = "not supported", f"does not hold in every shape ({listed})", largest
    return {
        "measure": str(own["metric"].iloc[0]) if len(own) else "",
        "shape": ", ".join(verdicts),
        "effect": float(own["effect"].min()) if len(own) else np.nan,
        "p_value": p_value,
        "shape_verdict": verdict,
        "why": why,
    }


def across_table(
    claims: Sequence[AcrossClaim], measures: pd.DataFrame, within: pd.DataFrame, confidence: float = 0.95
) -> pd.DataFrame:
    """One row per across claim (ACROSS_COLUMNS), the claims one Holm family.

    Args:
        measures: per-run measures of every shape (`run_measures` with a `shape` column).
        within: every shape's claims table (`verdicts.verdict_table`) with a `shape` column.
    """
    alpha = 1 - confidence
    rows = [
        {"claim": c.name, "statement": c.statement, "kind": c.kind, "resolution": c.resolution}
        | (_every_row(c, within) if c.kind == "every" else _between_row(c, measures))
        for c in claims
    ]
    raw = np.array([row["p_value"] for row in rows], dtype=float)
    adjusted, level = adjust(raw, "holm"), levels(raw, "holm", alpha)
    for claim, row, p_adjusted, claim_level in zip(claims, rows, adjusted, level, strict=True):
        row["p_adjusted"], row["ci_level"] = p_adjusted, 1 - claim_level
        if claim.kind == "every":
            shapes_hold = row.pop("shape_verdict")
            row["verdict"] = shapes_hold
            if shapes_hold in ("holds", "contradicted") and not p_adjusted <= alpha:
                row["verdict"] = "undecided"
                row["why"] += f"; but its p, adjusted over the study's claims, is {p_adjusted:.3g} > {alpha:g}"
            continue
        side, other = row.pop("samples")
        tested = np.isfinite(row["p_value"])
        row["ci_low"], row["ci_high"] = independent_interval(side, other, 1 - claim_level) if tested else (np.nan,) * 2
        row["verdict"], row["why"] = _between_verdict(claim, row, alpha)
    return pd.DataFrame(rows).reindex(columns=ACROSS_COLUMNS)
