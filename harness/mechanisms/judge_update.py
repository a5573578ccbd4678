"""The judge's self-labelled update, and when it happens: every step, every k steps (slower updates), or never
(a frozen judge).

On each step where its run's update is due, a judge takes one Bradley–Terry step on a batch of pairs drawn
from the run's pair sides (two policy samples unless a mechanism replaces a side), labelled by its own
current preference 1[J(a) > J(b)], or chosen > rejected where the run draws contrast pairs. The mechanisms
that ride on the update (the anchor, meta-judging, the judge's moving average) use this module's cadence.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from harness.engine.architecture import DEFAULT_MODEL, ModelConfig
from harness.engine.learning import pair_bce_labelled
from harness.engine.metrics import NON_NEGATIVE, Metric
from harness.engine.state import Network, adam_step
from harness.grid.contract import IterationContext, Mechanism, OwnState, StepContext
from harness.grid.knobs import INNER_STEPS, UNIT, Knobs
from harness.grid.member_context import MemberContext
from harness.grid.step_rows import Cadence, StepRow, cadence_of


class JudgeUpdateKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    freeze_judge: StrictBool = Field(
        False, description="skip the judge's self-labelled updates (and the anchor step riding on them)"
    )
    judge_update_every: int = Field(
        1,
        ge=1,
        description="the judge updates every k inner policy steps, on steps where (step+1) % k == 0",
        json_schema_extra={UNIT: INNER_STEPS},
    )


def judge_cadence(knobs: Knobs) -> Cadence:
    """The cadence class of the judge's update (and of every mechanism riding on it) for a condition's knobs."""
    # A frozen judge is never due; it shares the slower group, so freezing a run on a cadence (or thawing a frozen
    # one) keeps the grid's shape and its compiled program.
    return "slower" if knobs.freeze_judge else cadence_of(knobs.judge_update_every)


def update_due(due: jax.Array, step: StepContext, own: OwnState) -> tuple[jax.Array, OwnState]:
    """bool (R,): the runs `due` names whose judge update is also due on this module's cadence on the step of
    1-based count `step.counter` in its outer iteration (never for a frozen judge); own state unchanged."""
    knobs = step.knobs
    return due & (~knobs.freeze_judge) & (step.counter % knobs.judge_update_every == 0), own


def judge_pair_update(
    judge: Network,
    first: jax.Array,
    second: jax.Array,
    ordered: jax.Array,
    lr: jax.Array,
    *,
    vocab: int,
    model: ModelConfig = DEFAULT_MODEL,
) -> Network:
    """One Bradley–Terry step of one judge on sequence pairs (first[i], second[i]), each (B, L): labelled
    chosen > rejected where `ordered`, else by the judge itself (`pair_bce_labelled`)."""
    return adam_step(judge, jax.grad(pair_bce_labelled)(judge.params, first, second, ordered, vocab, model), lr)


def _update(judge: Network, member: MemberContext, own: None) -> tuple[Network, None]:
    """One judge's step on its run's pair batch of this step, at the run's judge learning rate."""
    chosen, rejected = member.pairs
    shape = member.shape
    stepped = judge_pair_update(
        judge, chosen, rejected, member.contrast, member.knobs.lr_judge, vocab=shape.vocab_size, model=shape.model
    )
    return stepped, own


def with_judge_update(member: MemberContext) -> jax.Array:
    """A row's due flag for rows that ride on the judge update: a judge is due where its run's update is."""
    return member.update_due


@flax.struct.dataclass
class UpdateCount:
    """Per run: inner steps of this outer iteration with a judge update, int32."""

    updates: jax.Array


def _start_iteration(context: IterationContext, own: OwnState) -> OwnState:
    # zeros_like of the carried count: a per-shard value, as shard_map requires of the scan's carry.
    return own._replace(runs=UpdateCount(jnp.zeros_like(own.runs.updates)))


def _after_step(step: StepContext, own: OwnState) -> OwnState:
    return own._replace(runs=UpdateCount(own.runs.updates + step.update_due))


MECHANISM = Mechanism(
    name="judge_update",
    summary="the judge's self-labelled Bradley–Terry update: every k steps (slower updates) or never (frozen)",
    knobs=JudgeUpdateKnobs,
    rows=(
        StepRow(
            name="judge_update",
            stage="updates",
            schedule=lambda knobs, n_outputs: judge_cadence(knobs),
            update=_update,
            due=with_judge_update,
        ),
    ),
    run_state=lambda shape, policy: UpdateCount(jnp.zeros((), jnp.int32)),
    judge_update_due=update_due,
    start_iteration=_start_iteration,
    after_step=_after_step,
    metrics=(
        Metric(
            "judge_updates",
            "judge updates",
            "steps",
            "inner steps of this outer iteration on which the run's judges took a self-labelled update",
            lambda run: run.of("judge_update"),
            kind="int",
            valid=NON_NEGATIVE,
        ),
    ),
    view=lambda context: context.state.runs.of("judge_update").updates,
)
