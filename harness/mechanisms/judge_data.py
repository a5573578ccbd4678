"""Judge data: what a condition's judges are pretrained on (a fixed dataset of their own, a share of corrupted
labels) and for how long (a fixed number of steps instead of to the Spearman target).

Every knob acts before the program, in pretraining, so all are host-only and never change the program's shape.
`harness.grid.pretrain_data` defines the dataset and the corruption exactly, and what corruption does to the pairwise
order of the labels. Judges of every choice come from the same keys (the same initialisation and data stream);
conditions of equal choices (these and `judge_pretrain_target`) share their judges.

A judge trained on little or noisy data may never reach the Spearman target; pretraining to a target then fails
the grid, naming each judge and the Spearman it reached. `judge_pretrain_steps` is the way to compare data: every
judge trains for the same number of steps and is what that data makes of it, its Spearman recorded in the
manifest's pretraining table.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from harness.grid.contract import JudgePlan, Mechanism, PretrainData
from harness.grid.knobs import DATA_SIZE, HOST_ONLY, STUDY_ROLE, Knobs


class JudgeDataKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    judge_pretrain_examples: int = Field(
        0,
        ge=0,
        description="the size of a fixed pretraining dataset each of this condition's judges draws once from its "
        "data key and trains on (0: fresh draws every step)",
        json_schema_extra={HOST_ONLY: True, STUDY_ROLE: DATA_SIZE},
    )
    judge_label_corruption: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="the share of pretraining labels replaced by the q* of another, uniformly drawn output: exactly "
        "round(share × examples) of a dataset, each fresh draw with this probability",
        json_schema_extra={HOST_ONLY: True},
    )
    judge_pretrain_steps: int | None = Field(
        None,
        ge=1,
        description="pretrain this condition's judges for exactly this many steps, whatever Spearman they reach (a "
        "multiple of [pretrain] check_every; unset: to the Spearman target)",
        json_schema_extra={HOST_ONLY: True},
    )


def _with_data(plan: JudgePlan, knobs: Knobs) -> JudgePlan:
    """The plan with what the condition's knobs say its judges are pretrained on and for how long."""
    data = PretrainData(
        examples=knobs.judge_pretrain_examples,
        corruption=knobs.judge_label_corruption,
        fixed_steps=knobs.judge_pretrain_steps or 0,
    )
    return plan._replace(data=data)


MECHANISM = Mechanism(
    name="judge_data",
    summary="what a condition's judges are pretrained on (a fixed dataset, corrupted labels) and for how long",
    knobs=JudgeDataKnobs,
    judge_plan=_with_data,
)
