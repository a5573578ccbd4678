"""Judge strength: how well aligned a condition's judges start, as the Spearman target they are pretrained to.

It acts before the program, in pretraining, so it is a host-only knob and never changes the program's shape.
Conditions of different targets get judges from the same keys (the same initialisation and data), stopped at
the first check that meets each target, so a weaker judge is an earlier point of the stronger one's trajectory;
conditions of equal targets share their judges.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from harness.grid.contract import JudgePlan, Mechanism
from harness.grid.knobs import HOST_ONLY, Knobs


class JudgeStrengthKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    judge_pretrain_target: float | None = Field(
        None,
        gt=-1.0,
        le=1.0,
        description="the Spearman target this condition's judges are pretrained to (unset: the grid's "
        "[pretrain] target_spearman); conditions with equal targets share their pretrained judges",
        json_schema_extra={HOST_ONLY: True},
    )


def _with_target(plan: JudgePlan, knobs: Knobs) -> JudgePlan:
    """The plan with the condition's own target, where it sets one (unset: the plan's, at first the grid's)."""
    return plan if knobs.judge_pretrain_target is None else plan._replace(target=knobs.judge_pretrain_target)


MECHANISM = Mechanism(
    name="judge_strength",
    summary="the Spearman target a condition's judges are pretrained to (how well aligned they start)",
    knobs=JudgeStrengthKnobs,
    judge_plan=_with_target,
)
