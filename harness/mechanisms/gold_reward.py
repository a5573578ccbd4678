"""The perfect proxy: the policy rewarded by q* itself in place of its judges, the baseline a judge's
overoptimization is measured against.

With `reward_from_q_star = true` each sample's reward is its q* (looked up in the world's table by the sample's output
index), so RL climbs the true quality with the loop's own estimator, batch and learning rate. q* is bounded, so its
gold-vs-KL path bends over too; what a judge's run does beyond that path is the judge's doing. The reward is replaced
before any mechanism shapes it (entropy regularisation and a KL penalty still apply), the judges are pretrained,
updated and measured as usual (their alignment, judge-perceived quality and the best-of-n table's judges' curves still
read the judges, not q*), and a run with the knob off is untouched.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict, Field

from harness.engine.world import output_index
from harness.grid.contract import Mechanism, PolicyBatch
from harness.grid.knobs import PERFECT_PROXY, STUDY_ROLE, Knobs


class GoldRewardKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    reward_from_q_star: bool = Field(
        False,
        description="reward the policy by q* itself (the perfect proxy) in place of its judges; the judges still "
        "train and are measured",
        json_schema_extra={STUDY_ROLE: PERFECT_PROXY},
    )


def gold_rewards(rewards: jax.Array, batch: PolicyBatch, own: None) -> tuple[jax.Array, None]:
    """One run's rewards (B,): each sample's q* where the run has the knob on, its judges' otherwise (the mechanism
    keeps no state)."""
    gold = batch.q_star[output_index(batch.tokens, batch.vocab)]
    return jnp.where(batch.knobs.reward_from_q_star, gold.astype(rewards.dtype), rewards), own


def _uses(knobs: Knobs) -> bool:
    return knobs.reward_from_q_star


MECHANISM = Mechanism(
    name="gold_reward",
    summary="the policy rewarded by q* itself in place of its judges (the perfect proxy)",
    knobs=GoldRewardKnobs,
    uses=_uses,
    # The reward is replaced before any mechanism shapes it (entropy regularisation's −τ·log π applies on top).
    before=("entropy_regularization",),
    shape_reward=gold_rewards,
)
