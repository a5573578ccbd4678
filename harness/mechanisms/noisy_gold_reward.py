"""The randomly-erring proxy: the policy rewarded by q* plus noise, as aligned with q* as the run's own judges are.

The perfect proxy (`gold_reward`) is bounded by q* and still bends over, so a judge's overoptimization is what its
run does beyond that; but a judge is also imperfect. This proxy separates the two: its errors are random, at exactly
the judges' alignment. With `reward_from_noisy_q_star = true` each sample's reward is its value in a fixed table
q* + s·e over the outputs: e is the run's own standard-normal draw per output (from its seed alone, the same draw as
best-of-n's noisy curve: `harness.mechanisms.best_of_n.seed_noise`), made orthogonal to q*, and s sets the table's
Pearson correlation with q* to that of the reward table of the run's pretrained judges (as aggregated; floored at
0.01, so a judge that is not positively aligned, or whose table is constant, gets a proxy of alignment 0.01). What a
judge's run loses against this run at equal KL is overoptimization of the judge's particular errors, beyond what
random errors of the same size cost.

The table is made at the start of the run's first outer iteration (`start_iteration`, from the pretrained judges'
score tables) and kept as the run's state; later iterations keep it. The judges are pretrained, updated and measured
as usual, and a run with the knob off is untouched. Where `reward_from_q_star` is also on, this reward replaces it.
"""

from __future__ import annotations

import flax
import jax
import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict, Field

from harness.engine.metrics import Metric, ValidValues
from harness.engine.world import output_index
from harness.grid.contract import (
    DiagnosticsContext,
    GridConstants,
    GridShape,
    IterationContext,
    Mechanism,
    OwnState,
    PolicyBatch,
)
from harness.grid.diagnostics import judge_score_tables
from harness.grid.knobs import NOISY_PROXY, STUDY_ROLE, Knobs, RunKnobs
from harness.grid.reward import run_rewards
from harness.mechanisms.best_of_n import alignment, noisy_q_star, seed_noise

NAME = "noisy_gold_reward"


class NoisyGoldRewardKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    reward_from_noisy_q_star: bool = Field(
        False,
        description="reward the policy by q* plus a fixed random error per output, whose Pearson correlation with "
        "q* is that of the run's pretrained judges (a randomly-erring proxy of the judges' alignment); the judges "
        "still train and are measured",
        json_schema_extra={STUDY_ROLE: NOISY_PROXY},
    )


@flax.struct.dataclass
class NoisyProxy:
    """One run's proxy table over the outputs (N,), float32 (zeros until its first outer iteration starts), and
    whether it has been made."""

    table: jax.Array
    made: jax.Array


def _run_state(shape: GridShape, policy: jax.Array) -> NoisyProxy:
    del policy
    return NoisyProxy(jnp.zeros((shape.vocab_size**shape.seq_len,), jnp.float32), jnp.zeros((), jnp.bool_))


def proxy_tables(shape: GridShape, constants: GridConstants, knobs: RunKnobs) -> jax.Array:
    """Every run's proxy table (R, N): q* plus its seed's noise at the alignment of its pretrained judges' reward
    table (their score tables aggregated as the run aggregates its judges)."""
    rewards = run_rewards(shape, constants, knobs, judge_score_tables(shape, constants.pretrained_judges))
    noisy = jax.vmap(noisy_q_star, in_axes=(None, 0, 0))(constants.q_star, rewards, constants.of(NAME)["noise"])
    return noisy.astype(jnp.float32)


def _start_iteration(context: IterationContext, own: OwnState) -> OwnState:
    """Make every run's table once, at the start of the first outer iteration (later ones keep it)."""

    def make(proxy: NoisyProxy) -> NoisyProxy:
        return NoisyProxy(proxy_tables(context.shape, context.constants, context.knobs), jnp.ones_like(proxy.made))

    return own._replace(runs=jax.lax.cond(jnp.all(own.runs.made), lambda kept: kept, make, own.runs))


def noisy_gold_rewards(rewards: jax.Array, batch: PolicyBatch, own: NoisyProxy) -> tuple[jax.Array, NoisyProxy]:
    """One run's rewards (B,): each sample's value in the run's proxy table (its own state, unchanged here) where the
    run has the knob on."""
    noisy = own.table[output_index(batch.tokens, batch.vocab)]
    return jnp.where(batch.knobs.reward_from_noisy_q_star, noisy.astype(rewards.dtype), rewards), own


def _view(context: DiagnosticsContext) -> jax.Array:
    """Per run: the Pearson correlation with q* of the table it is rewarded by (before its first iteration, the
    table it will be: iteration 0 is measured before any); NaN where the knob is off."""
    proxy = context.state.runs.of(NAME)
    shape, constants, knobs = context.shape, context.constants, context.knobs
    table = jax.lax.cond(jnp.all(proxy.made), lambda: proxy.table, lambda: proxy_tables(shape, constants, knobs))
    pearson = jax.vmap(alignment, in_axes=(None, 0))(constants.q_star, table)
    return jnp.where(knobs.reward_from_noisy_q_star, pearson, jnp.nan)


def _uses(knobs: Knobs) -> bool:
    return knobs.reward_from_noisy_q_star


MECHANISM = Mechanism(
    name=NAME,
    summary="the policy rewarded by q* plus random noise at its pretrained judges' alignment (a randomly-erring proxy)",
    knobs=NoisyGoldRewardKnobs,
    uses=_uses,
    # The reward is replaced after q*'s (this one wins where both are on) and before any mechanism shapes it.
    after=("gold_reward",),
    before=("entropy_regularization",),
    run_state=_run_state,
    constants=seed_noise,
    start_iteration=_start_iteration,
    shape_reward=noisy_gold_rewards,
    metrics=(
        Metric(
            "noisy_proxy_alignment",
            "noisy proxy's alignment",
            "Pearson",
            "the Pearson correlation of the run's randomly-erring proxy table with q* over every output: its "
            "pretrained judges' (at least 0.01; empty: off)",
            lambda run: run.of(NAME),
            valid=ValidValues(-1.0, 1.0, undefined=True),
        ),
    ),
    view=_view,
)
