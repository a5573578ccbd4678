"""A KL penalty toward the initial policy, as RLHF recipes put it on the reward: r(x) − β·(log π(x) − log π₀(x)).

Each sample's reward loses β times its log-ratio to the run's π₀, so the penalty's expectation over the batch is
β·KL(π ‖ π₀) (the sampled estimate PPO in TRL uses). log π₀ is evaluated teacher-forced on the batch's tokens from the
run's initial policy row; like log π (which the batch carries without gradient) it is a constant of the step: the
penalty shapes the reward the score function weighs, and no gradient flows through it, as in those recipes. The
REINFORCE step's mean baseline then subtracts the batch's mean shaped reward. The look-ahead copy of a policy
(`pair_sources`) is rewarded through the same hook, so it is penalised alike.

β = 0 is the default and leaves a run as it was; a grid none of whose runs has β > 0 does not use the mechanism
(`uses`), so its program evaluates no π₀ on any batch.
"""

from __future__ import annotations

import jax
from pydantic import BaseModel, ConfigDict, Field

from harness.engine.flat_params import policy_layout
from harness.engine.models import policy_log_prob
from harness.grid.contract import Mechanism, PolicyBatch
from harness.grid.knobs import Knobs


class KLPenaltyKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    kl_penalty: float = Field(
        0.0,
        ge=0.0,
        description="β of the KL penalty toward the initial policy: each sample's reward becomes "
        "r(x) − β·(log π(x) − log π₀(x)) (0: off)",
    )


def initial_log_prob(batch: PolicyBatch) -> jax.Array:
    """log π₀ (B,) of the batch's tokens under the run's initial policy, teacher-forced, without gradient."""
    layout = policy_layout(batch.vocab, batch.tokens.shape[1], batch.model.policy)
    return jax.lax.stop_gradient(policy_log_prob(layout.unravel(batch.initial_policy), batch.tokens, batch.vocab))


def penalised(rewards: jax.Array, batch: PolicyBatch, own: None) -> tuple[jax.Array, None]:
    """One run's rewards (B,) less β times each sample's log-ratio to π₀ (the mechanism keeps no state)."""
    return rewards - batch.knobs.kl_penalty * (batch.log_pi - initial_log_prob(batch)), own


def _uses(knobs: Knobs) -> bool:
    return knobs.kl_penalty > 0


MECHANISM = Mechanism(
    name="kl_penalty",
    summary="a KL penalty toward the initial policy on each sample's reward, r − β·(log π − log π₀)",
    knobs=KLPenaltyKnobs,
    uses=_uses,
    shape_reward=penalised,
)
