"""The entropy bonus: a weight on mean log π in the policy's loss, which lowers log π of what is sampled."""

from __future__ import annotations

import jax
from pydantic import BaseModel, ConfigDict, Field

from harness.grid.contract import Mechanism
from harness.grid.knobs import RunKnobs


class EntropyBonusKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    entropy_bonus: float = Field(0.01, ge=0.0, description="weight of mean log π in the policy loss")


def _weight(knobs: RunKnobs) -> jax.Array:
    return knobs.entropy_bonus


MECHANISM = Mechanism(
    name="entropy_bonus",
    summary="a weight on mean log π in the policy's loss (an entropy bonus)",
    knobs=EntropyBonusKnobs,
    log_prob_weight=_weight,
)
