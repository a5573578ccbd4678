"""A KL penalty toward the policy as it stood at the start of the current outer iteration (a trust region per
iteration): each sample's reward becomes r(x) − β·(log π(x) − log π_prev(x)).

A mechanism of a lab's own, in one file, that keeps state and reads it in a reward hook: its per-run state is a copy
of the policy's row, taken at the start of every outer iteration (`start_iteration`); the reward hook evaluates
log π_prev on the batch's tokens from that copy (its `own` state), without gradient, as the built-in
`kl_penalty` does for π₀. In the first iteration π_prev is π₀, so a run penalised toward its previous policy trains
exactly as one penalised toward its initial policy with the same β; from the second iteration on the two part.

Its metric, `kl_to_previous`, is KL(π ‖ π_prev) over every output, exact: after an outer iteration, how far that
iteration moved the policy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict, Field

from harness.engine.flat_params import policy_layout
from harness.engine.metrics import NON_NEGATIVE, Metric
from harness.engine.models import policy_log_prob
from harness.grid.contract import DiagnosticsContext, GridShape, IterationContext, Mechanism, OwnState, PolicyBatch
from harness.grid.diagnostics import policy_log_prob_tables
from harness.grid.knobs import Knobs

NAME = "kl_to_previous"


class PreviousPolicyKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    kl_previous: float = Field(
        0.0,
        ge=0.0,
        description="β of a KL penalty toward the policy at the start of the current outer iteration: each "
        "sample's reward becomes r(x) − β·(log π(x) − log π_prev(x)) (0: off)",
    )


def _remember(shape: GridShape, policy: jax.Array) -> jax.Array:
    """One run's state before any iteration: its initial policy row (P,)."""
    return policy


def _start_iteration(context: IterationContext, own: OwnState) -> OwnState:
    """Every run's policy row as this iteration starts, (R, P): the π_prev of the iteration's steps."""
    return own._replace(runs=context.state.runs.policy.params)


def penalised(rewards: jax.Array, batch: PolicyBatch, own: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One run's rewards (B,) less β times each sample's log-ratio to π_prev, the run's own state (its row, (P,),
    returned unchanged: only `start_iteration` takes the copy)."""
    layout = policy_layout(batch.vocab, batch.tokens.shape[1], batch.model.policy)
    previous = policy_log_prob(layout.unravel(own), batch.tokens, batch.vocab)
    return rewards - batch.knobs.kl_previous * (batch.log_pi - jax.lax.stop_gradient(previous)), own


def kl_to_previous(context: DiagnosticsContext) -> jax.Array:
    """Per run: KL(π ‖ π_prev) over every output, from the exact log-probability tables."""
    previous = policy_log_prob_tables(context.shape, context.state.runs.of(NAME))
    # rel_entr, as the built-in KL from π₀: outputs the policy has abandoned add nothing.
    return jnp.sum(jax.scipy.special.rel_entr(jnp.exp(context.log_pi), jnp.exp(previous)), axis=1)


def _uses(knobs: Knobs) -> bool:
    return knobs.kl_previous > 0


MECHANISM = Mechanism(
    name=NAME,
    summary="a KL penalty toward the policy at the start of each outer iteration, r − β·(log π − log π_prev)",
    knobs=PreviousPolicyKnobs,
    uses=_uses,
    run_state=_remember,
    start_iteration=_start_iteration,
    shape_reward=penalised,
    metrics=(
        Metric(
            NAME,
            "KL to the previous policy",
            "nats",
            "KL(π ‖ π_prev) over every output, where π_prev is the policy at the start of the outer iteration",
            lambda run: run.of(NAME),
            valid=NON_NEGATIVE,
        ),
    ),
    view=kl_to_previous,
)
