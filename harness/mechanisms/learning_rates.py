"""Adam's learning rates: the policy's, and every judge's (every mechanism that steps a judge reads `lr_judge`)."""

from __future__ import annotations

import jax
from pydantic import BaseModel, ConfigDict, Field

from harness.grid.contract import Mechanism
from harness.grid.knobs import RunKnobs


class LearningRateKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    lr_policy: float = Field(3e-4, gt=0.0, description="Adam learning rate of the policy")
    lr_judge: float = Field(3e-4, gt=0.0, description="Adam learning rate of every judge")


def _policy_rate(knobs: RunKnobs) -> jax.Array:
    return knobs.lr_policy


MECHANISM = Mechanism(
    name="learning_rates",
    summary="Adam's learning rates of the policy and of every judge",
    knobs=LearningRateKnobs,
    policy_learning_rate=_policy_rate,
)
