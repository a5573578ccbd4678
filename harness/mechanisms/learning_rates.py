"""Adam's learning rates: the policy's, and every judge's (every mechanism that steps a judge reads `lr_judge`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from harness.grid.contract import Mechanism, PolicyBatch, PolicyUpdate


class LearningRateKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    lr_policy: float = Field(3e-4, gt=0.0, description="Adam learning rate of the policy")
    lr_judge: float = Field(3e-4, gt=0.0, description="Adam learning rate of every judge")


def set_policy_rate(update: PolicyUpdate, batch: PolicyBatch, own: None) -> tuple[PolicyUpdate, None]:
    """The policy's learning rate, its knob's."""
    return update.replace(learning_rate=batch.knobs.lr_policy), own


MECHANISM = Mechanism(
    name="learning_rates",
    summary="Adam's learning rates of the policy and of every judge",
    knobs=LearningRateKnobs,
    update_policy=set_policy_rate,
)
