"""Entropy regularisation whose expected gradient is the true one: each sample's reward becomes r(x) − τ·log π(x).

The REINFORCE step's expected update is then E_π[(r − τ log π) ∇log π] = ∇E_π[r] + τ·∇H(π): the soft (maximum-entropy)
objective E[r] + τ·H(π), since −E_π[log π(x) ∇log π(x)] = ∇H(π) (E_π[∇log π] = 0 absorbs the "+1" of the entropy's
derivative). log π is the batch's own, carried without gradient, as the KL penalty's is; the mean baseline then
leaves the expectation at (1 − 1/B) of it, as it does the reward's. Compare the original lab's entropy bonus
(`harness.mechanisms.entropy_bonus`), a weight on mean log π in the loss, whose expected gradient is zero.

τ = 0 is the default and leaves a run as it was; a grid none of whose runs has τ > 0 does not use the mechanism.
"""

from __future__ import annotations

import jax
from pydantic import BaseModel, ConfigDict, Field

from harness.grid.contract import Mechanism, PolicyBatch
from harness.grid.knobs import Knobs


class EntropyRegularizationKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    entropy_regularization: float = Field(
        0.0,
        ge=0.0,
        description="τ of entropy regularisation with the true gradient: each sample's reward becomes "
        "r(x) − τ·log π(x), so the expected update climbs E[r] + τ·H(π) (0: off)",
    )


def soft_rewards(rewards: jax.Array, batch: PolicyBatch, own: None) -> tuple[jax.Array, None]:
    """One run's rewards (B,) less τ times each sample's log π (the mechanism keeps no state)."""
    return rewards - batch.knobs.entropy_regularization * batch.log_pi, own


def _uses(knobs: Knobs) -> bool:
    return knobs.entropy_regularization > 0


MECHANISM = Mechanism(
    name="entropy_regularization",
    summary="entropy regularisation with the true expected gradient: each sample's reward r − τ·log π",
    knobs=EntropyRegularizationKnobs,
    uses=_uses,
    shape_reward=soft_rewards,
)
