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

  Seed s of every shape draws from the same streams (`PRNGKey(s)`, `harness.engine.keys`): its runs in two shapes
  are correlated (the ceiling iteration of one seed correlates r = 0.70 between two shapes of the scale study), so
  runs are paired by seed and the claim is judged by the seed-paired rule (`rule`, `verdicts.judge_family`): the
  per-seed differences resolved at the claim's resolution, the exact sign test on the jumps, a TOST for "not
  supported", the BCa interval of the mean resolved difference.
- **every** shape: a `[claims]` claim of the file (judged within each shape's grid, seed-paired) said to hold in
  every shape that has it (or in the `shapes` listed). It holds where every shape's verdict is "holds" (an
  intersection–union test, whose p-value is the largest of the shapes' adjusted p-values); it is contradicted where
  some shape's is "contradicted" (p: the smallest of those shapes' adjusted p-values times the number of shapes:
  each shape's level is α split over the shapes); otherwise it is not supported, or undecided where some shape is.
  Either positive or negative verdict also needs its p-value to pass the study's adjustment, else it is undecided.

A study's across claims are one family: the between claims' hypotheses and the every claims' p-values are adjusted
together (Holm), and a between claim's interval is built at its adjusted level. Fewer than MIN_SEEDS seeds that
both shapes ran with a finite measure: untested.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.engine.metrics import QUALITY_RESOLUTION
from harness.inference.claims import Claim
from harness.inference.intervals import paired_bootstrap_ci
from harness.inference.monte_carlo import claim_generator
from harness.inference.multiplicity import adjust
from harness.inference.paired_tests import resolved
from harness.inference.rule import MIN_SEEDS, ClaimData
from harness.inference.run_measures import measure_names
from harness.inference.verdicts import Judged, adjusted_extra, judge_family

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


def paired_measures(claim: AcrossClaim, measures: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, int]:
    """(shape's values, than_shape's values, excluded) of a between claim over the seeds both shapes ran with a
    finite measure, in seed order; excluded counts the shared seeds left out for a non-finite value."""

    def values(shape: str | None) -> pd.Series:
        own = measures[(measures["shape"] == shape) & (measures["condition"] == claim.condition)]
        return own.set_index("seed")[claim.measure].astype(float)

    side, other = values(claim.shape), values(claim.than_shape)
    seeds = side.index.intersection(other.index).sort_values()
    side_values, other_values = side[seeds].to_numpy(), other[seeds].to_numpy()
    finite = np.isfinite(side_values) & np.isfinite(other_values)
    return side_values[finite], other_values[finite], int(np.sum(~finite))


def _as_claim(claim: AcrossClaim) -> Claim:
    """The between claim as a seed-paired claim of one family (its measure need not be a grid metric)."""
    return Claim.model_construct(
        name=claim.name,
        statement=claim.statement,
        metric=claim.measure,
        condition=claim.condition,
        direction=claim.direction,
        statistic="mean",
        resolution=claim.resolution,
        family="across",
        adjustment="holm",
        than_value=None,
    )


def _between_row(claim: AcrossClaim, measures: pd.DataFrame, judged: Judged, alpha: float) -> dict[str, object]:
    side, other, _ = paired_measures(claim, measures)
    level = judged.equivalence_level if judged.outcome.deciding == "equivalence" else judged.level
    differences = resolved(side - other, claim.resolution)
    effect, low, high = paired_bootstrap_ci(
        differences, None, "mean", 1 - level, rng=claim_generator(claim.name, "interval")
    )
    tested = judged.tested
    return {
        "measure": claim.measure,
        "condition": claim.condition,
        "shape": claim.shape,
        "than_shape": claim.than_shape,
        "runs": len(side),
        "than_runs": len(other),
        "shape_mean": float(np.mean(side)) if len(side) else np.nan,
        "than_mean": float(np.mean(other)) if len(other) else np.nan,
        "effect": effect,
        "ci_low": low,
        "ci_high": high,
        "ci_level": 1 - level,
        "p_value": judged.effect.p if tested else np.nan,
        "p_adjusted": judged.adjusted if tested else np.nan,
        "verdict": judged.outcome.verdict if tested else "untested",
        "why": judged.outcome.why if tested else f"fewer than {MIN_SEEDS} seeds both shapes ran",
    }


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
        measures: per-run measures of every shape (`run_measures` with `shape` and `seed` columns).
        within: every shape's claims table (`verdicts.verdict_table`) with a `shape` column.
    """
    alpha = 1 - confidence
    between = [c for c in claims if c.kind == "between"]
    every = {c.name: _every_row(c, within) for c in claims if c.kind == "every"}
    every_p = [float(row["p_value"]) for row in every.values()]
    if between:
        paired = [paired_measures(c, measures) for c in between]
        datas = [
            ClaimData(side, (other,), (c.than_shape or "",))
            for c, (side, other, _) in zip(between, paired, strict=True)
        ]
        as_claims = [_as_claim(c) for c in between]
        found = judge_family(as_claims, datas, alpha, every_p)
        every_adjusted = adjusted_extra(as_claims, found, every_p, alpha)
        judged_between = dict(zip([c.name for c in between], found, strict=True))
    else:
        every_adjusted = adjust(np.asarray(every_p, dtype=float), "holm")
        judged_between = {}
    every_adjusted_by = dict(zip(every, every_adjusted, strict=True))
    rows = []
    for claim in claims:
        row: dict[str, object] = {
            "claim": claim.name,
            "statement": claim.statement,
            "kind": claim.kind,
            "resolution": claim.resolution,
        }
        if claim.kind == "between":
            rows.append(row | _between_row(claim, measures, judged_between[claim.name], alpha))
            continue
        own = every[claim.name]
        p_adjusted = float(every_adjusted_by[claim.name])
        shapes_hold = own.pop("shape_verdict")
        row |= own | {"p_adjusted": p_adjusted, "ci_level": np.nan, "verdict": shapes_hold}
        if shapes_hold in ("holds", "contradicted") and not p_adjusted <= alpha:
            row["verdict"] = "undecided"
            row["why"] = f"{row['why']}; but its p, adjusted over the study's claims, is {p_adjusted:.3g} > {alpha:g}"
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=ACROSS_COLUMNS)
