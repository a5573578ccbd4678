"""Claims as data: a statement about a grid's metrics that the data can support or contradict.

A claim compares one side, a condition's metric at an iteration, with another side: the same
metric of another condition (paired by seed), of the same condition at another iteration
(paired by seed), or a fixed value. Its direction says which way the comparison should come
out. Claims sit in condition files as `[claims.NAME]` tables; `harness.inference.verdicts` tests them.

Example (the published "slower judge updates end above baseline"):

    [claims.slow-judge-beats-baseline]
    statement = "slower judge updates (every 10) end above the baseline in real quality"
    metric = "policy_quality"
    condition = "slow-judge[judge_update_every=10]"
    direction = "above"
    than_condition = "baseline"

A file's claims are one family for the adjustment of their p-values (`harness.inference.multiplicity`); a claim's
`family = "..."` key puts it in another, and `adjustment = "bh"` in the [claims] table itself chooses
Benjamini–Hochberg over Holm for the whole file.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.engine.metrics import QUALITY_RESOLUTION, all_metrics, table_measures
from harness.inference.multiplicity import Adjustment

Iteration = int | Literal["last"]


def comparable_metrics() -> tuple[str, ...]:
    """Metrics a claim may compare: the continuous ones of every registered mechanism (counts and the mode index are
    not effects), and the measures read off a run's per-run tables (`harness.engine.metrics.table_measures`, e.g.
    best-of-n's measures of overoptimization, `harness.inference.frontier_measures`)."""
    return (*(m.name for m in all_metrics() if m.kind == "float"), *table_measures())


class Claim(BaseModel):
    """One testable statement. Exactly one of than_condition, than_iteration, than_value sets the other side
    (than_condition and than_iteration may be combined).

    than_condition is a condition name or else a shell-style pattern (`anchor*`); where it names several
    conditions (minus any matching `excluding`), the claim is tested against every one of them (an
    intersection–union test: it holds only if it holds against each), rivals with identical values counted once.
    statistic "mean" compares seed-paired means; "std" compares the spread over seeds (paired resampling).
    resolution: the smallest difference that counts as a difference, in the metric's unit; for "equal" it
    is the equivalence margin. jump_share (p₀, mean claims): equivalence ("equal: holds", "not supported") is instead
    "at most p₀ of the seeds jump" (change end mode, where the metric is set by it), by an exact binomial test that
    needs no metric range and can be decided at far fewer seeds; an "equal" claim is then contradicted where more
    than p₀ of the seeds jump.
    family: the claims whose p-values are adjusted together (default: every claim of the condition file);
    adjustment: how ("holm", the default, or "bh" for Benjamini–Hochberg), set for a whole file by the
    `adjustment` key of its [claims] table; every claim of one family must agree.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str
    statement: str = Field(min_length=1, description="the claim in words, as a reader should understand it")
    source: str = Field("", description="where the claim comes from (e.g. a sentence of the blog)")
    metric: str
    condition: str
    iteration: Iteration = "last"
    direction: Literal["above", "below", "equal"]
    than_condition: str | None = None
    excluding: tuple[str, ...] = ()
    than_iteration: Iteration | None = None
    than_value: float | None = None
    statistic: Literal["mean", "std"] = "mean"
    resolution: float = Field(QUALITY_RESOLUTION, gt=0)
    jump_share: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="p₀: equivalence is 'at most this share of the seeds jump' (exact binomial)",
    )
    family: str | None = Field(None, min_length=1)
    adjustment: Adjustment = "holm"

    @model_validator(mode="after")
    def _one_other_side(self) -> Claim:
        if self.metric not in comparable_metrics():
            raise ValueError(f"metric must be one of {', '.join(comparable_metrics())}, got {self.metric!r}")
        paired = self.than_condition is not None or self.than_iteration is not None
        if paired == (self.than_value is not None):
            raise ValueError("give than_value, or than_condition and/or than_iteration (exactly one kind)")
        if self.than_value is not None and self.statistic != "mean":
            raise ValueError("a comparison with a fixed value uses statistic = 'mean'")
        if self.direction == "equal" and self.statistic != "mean":
            raise ValueError("an 'equal' claim uses statistic = 'mean' (its test shifts seed-paired differences)")
        if self.jump_share is not None and self.statistic != "mean":
            raise ValueError("jump_share bounds the share of seeds that jump: a claim with statistic = 'mean'")
        if self.excluding and self.than_condition is None:
            raise ValueError("excluding needs than_condition")
        return self

    def other_conditions(self, names: Sequence[str]) -> list[str]:
        """The grid's conditions the other side may be (the claim's own condition where none is named)."""
        if self.than_condition is None:
            return [self.condition]
        if self.than_condition in names:  # an exact name wins (sweep names contain pattern brackets)
            return [self.than_condition]
        return [
            name
            for name in names
            if fnmatch.fnmatchcase(name, self.than_condition)
            and name != self.condition
            and not any(fnmatch.fnmatchcase(name, pattern) for pattern in self.excluding)
        ]

    def check_against(self, names: Sequence[str], iterations: int) -> None:
        """Raise ValueError unless the claim's conditions and iterations exist in a grid."""
        if self.condition not in names:
            raise ValueError(f"claim {self.name!r}: no condition {self.condition!r} in the grid")
        if not self.other_conditions(names):
            raise ValueError(f"claim {self.name!r}: than_condition {self.than_condition!r} matches no other condition")
        for iteration in (self.iteration, self.than_iteration):
            if isinstance(iteration, int) and not 0 <= iteration <= iterations:
                raise ValueError(f"claim {self.name!r}: iteration {iteration} outside 0..{iterations}")
