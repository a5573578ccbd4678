"""Where a judge's training pairs come from: temporal contrast, anchored rejection, a look-ahead chosen side.

By default both sides of a judge's pair are samples of the current policy, labelled by the judge. The
follow-up work replaces a side and labels the pair chosen > rejected instead:
- temporal contrast (EvoLM; `rejected_from = "past"`): the rejected side from the policy's checkpoint
  `temporal_gap` outer iterations back (a checkpoint is kept at the start of every outer iteration);
- anchored rejection (Temporal Self-Rewarding; `rejected_from = "initial"`): the rejected side from π₀;
- future-guided chosen (Temporal Self-Rewarding; `chosen_from = "lookahead"`): the chosen side from a copy of
  the policy trained `lookahead_steps` more steps against the current judges, then thrown away.
`contrast_mix` is the share of judge updates that use these pairs; the rest stay self-labelled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Literal

import flax.struct
import jax
import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict, Field

from harness.engine import streams
from harness.engine.architecture import DEFAULT_MODEL, ModelConfig
from harness.engine.state import Network
from harness.grid.contract import GridFacts, GridShape, IterationContext, Mechanism, OwnState, PairSides, StepContext
from harness.grid.knobs import INNER_STEPS, OUTER_ITERATIONS, UNIT, Knobs, RunKnobs, choices
from harness.grid.member_context import MemberContext
from harness.grid.reward import run_policy_step
from harness.grid.step_rows import Cadence, StepRow
from harness.mechanisms.judge_update import judge_cadence

# Upper bounds on the look-ahead and the temporal gap: each bounds a scan or a stored history.
MAX_LOOKAHEAD_STEPS = 64
MAX_TEMPORAL_GAP = 10
ChosenSide = Literal["policy", "lookahead"]
RejectedSide = Literal["policy", "past", "initial"]
# Static sizes: the checkpoints each run keeps (the largest gap of runs with a past side) and the longest look-ahead.
HISTORY_DEPTH, LOOKAHEAD_STEPS = "history_depth", "lookahead_steps"


class PairSourceKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    chosen_from: ChosenSide = Field(
        "policy",
        description="where the first (chosen) side of the judge's training pairs comes from: the policy; or "
        "lookahead, a copy of the policy trained lookahead_steps more steps against the current judges, then "
        "discarded (future-guided chosen, Temporal Self-Rewarding)",
    )
    rejected_from: RejectedSide = Field(
        "policy",
        description="where the second (rejected) side comes from: the policy; past, the policy temporal_gap "
        "checkpoints ago (temporal contrast, EvoLM); or initial, π₀ (anchored rejection). Unless both sides are "
        "the policy, pairs are labelled chosen > rejected instead of by the judge",
    )
    temporal_gap: int = Field(
        1,
        ge=0,
        le=MAX_TEMPORAL_GAP,
        description="which checkpoint the past side is drawn from: checkpoints are taken at the start of every "
        "outer iteration, 1 is the latest, 0 is the live policy (π₀ before the first)",
        json_schema_extra={UNIT: OUTER_ITERATIONS},
    )
    lookahead_steps: int = Field(
        5,
        ge=1,
        le=MAX_LOOKAHEAD_STEPS,
        description="REINFORCE steps the look-ahead copy takes before it draws the chosen side",
        json_schema_extra={UNIT: INNER_STEPS},
    )
    contrast_mix: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="probability that a judge update uses the chosen_from/rejected_from pairs rather than two "
        "judge-labelled policy samples (1: always)",
    )


def rejected_side(
    current: jax.Array, history: jax.Array, initial: jax.Array, rejected_from: jax.Array, gap: jax.Array
) -> jax.Array:
    """The policy row (P,) one run draws the rejected side of contrast pairs from: its current row, its checkpoint
    `gap` ago (history (D, P), latest first; gap 0 is the current row) or its initial row, by the code of
    `rejected_from`."""
    past = current if history.shape[0] == 0 else jnp.where(gap > 0, history[jnp.clip(gap - 1, 0)], current)
    codes = {name: code for code, name in enumerate(choices("rejected_from"))}
    return jnp.select([rejected_from == codes["past"], rejected_from == codes["initial"]], [past, initial], current)


def lookahead_side(
    policy: Network,
    judges: jax.Array,
    members: jax.Array,
    noise: jax.Array,
    step_keys: jax.Array,
    steps: jax.Array,
    knobs: RunKnobs,
    initial_policy: jax.Array,
    q_star: jax.Array,
    run_state: dict[str, Any],
    *,
    vocab: int,
    model: ModelConfig = DEFAULT_MODEL,
    mechanisms: tuple[Mechanism, ...],
) -> jax.Array:
    """The chosen side's policy row for future-guided pairs: a copy of one run's policy (with its Adam state)
    trained `steps` more REINFORCE steps against the run's current judges (rows (M, P), members marking the real
    ones), step i with noise[i] (S, L, B, K), S ≥ steps, drawn from step_keys[i] (S, 2), as the loop trains the policy
    (`run_policy_step`); the copy's row is returned, the run's policy and its mechanisms' states are untouched."""
    train = partial(run_policy_step, vocab=vocab, model=model, mechanisms=mechanisms)

    def step(copy: Network, inputs: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[Network, None]:
        index, step_noise, key = inputs
        stepped = train(copy, judges, members, step_noise, knobs, initial_policy, q_star, run_state, key)
        return jax.tree.map(lambda new, old: jnp.where(index < steps, new, old), stepped, copy), None

    copy, _ = jax.lax.scan(step, policy, (jnp.arange(noise.shape[0]), noise, step_keys))
    return copy.params


def contrast_runs(knobs: RunKnobs) -> jax.Array:
    """bool (R,): runs whose pairs, when contrast is drawn, have a side other than the policy."""
    policy_chosen, policy_rejected = choices("chosen_from").index("policy"), choices("rejected_from").index("policy")
    return (knobs.chosen_from != policy_chosen) | (knobs.rejected_from != policy_rejected)


def contrast(share: jax.Array, step: StepContext, own: OwnState) -> tuple[jax.Array, OwnState]:
    """float32 (R,): the share it is given, raised to contrast_mix for the runs whose judge update is due on this step
    and whose pairs have a side other than the policy: the probability that such an update draws contrast pairs (the
    grid draws them: `harness.grid.training_step.draw_contrast`); own state unchanged."""
    mix = jnp.where(step.update_due & contrast_runs(step.knobs), step.knobs.contrast_mix, 0.0)
    return jnp.maximum(share, mix), own


def contrast_due(member: MemberContext) -> jax.Array:
    """A run's side is replaced where its judge update is due and draws contrast pairs (`contrast`)."""
    return member.contrast


def _rejected_update(sides: PairSides, member: MemberContext, own: PolicyHistory) -> tuple[PairSides, PolicyHistory]:
    """The run's rejected side from its checkpoint or its π₀, by its `rejected_from`."""
    knobs = member.knobs
    rejected = rejected_side(
        sides.rejected, own.history, member.initial_policy, knobs.rejected_from, knobs.temporal_gap
    )
    return sides.replace(rejected=rejected), own


def _lookahead_update(sides: PairSides, member: MemberContext, own: PolicyHistory) -> tuple[PairSides, PolicyHistory]:
    """The run's chosen side from a look-ahead copy of its policy, trained on batches drawn from its contrast key."""
    shape, knobs = member.shape, member.knobs
    step_keys = jax.random.split(member.keys.contrast, shape.size(LOOKAHEAD_STEPS))
    sampling_noise = partial(
        streams.sampling_noise, shape.streams, batch=shape.batch_size, vocab=shape.vocab_size, seq_len=shape.seq_len
    )
    noise = jax.vmap(sampling_noise)(step_keys)
    # The copy trains as the policy does: against the judges the policy is rewarded by, reading the run's mechanism
    # states as its reward hooks do (what no hook reads, XLA drops).
    chosen = lookahead_side(
        member.run.policy,
        member.judges,
        member.judge_members,
        noise,
        step_keys,
        knobs.lookahead_steps,
        knobs,
        member.initial_policy,
        member.q_star,
        member.run.mechanisms,
        vocab=shape.vocab_size,
        model=shape.model,
        mechanisms=shape.used_mechanisms,
    )
    return sides.replace(chosen=chosen), own


def _rejected_schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """A rejected side other than the policy (past or initial) rides on the judge update, on its cadence."""
    return None if knobs.rejected_from == "policy" else judge_cadence(knobs)


def _lookahead_schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """The look-ahead copy that draws the chosen side is trained for each judge update of runs that use it."""
    return None if knobs.chosen_from != "lookahead" else judge_cadence(knobs)


def _sizes(knobs: Sequence[Knobs], facts: GridFacts) -> Mapping[str, int]:
    past_gaps = [k.temporal_gap for k in knobs if k.rejected_from == "past"]
    lookaheads = [k.lookahead_steps for k in knobs if k.chosen_from == "lookahead"]
    return {HISTORY_DEPTH: max(past_gaps, default=0), LOOKAHEAD_STEPS: max(lookaheads, default=0)}


@flax.struct.dataclass
class PolicyHistory:
    """Per run: float32 (D, P), its policy at the start of the last D outer iterations, latest first (π₀ before the
    first); what a past rejected side is drawn from. D = the grid's HISTORY_DEPTH, 0 where no run needs it."""

    history: jax.Array


def _initial_history(shape: GridShape, policy: jax.Array) -> PolicyHistory:
    return PolicyHistory(jnp.repeat(policy[None], shape.size(HISTORY_DEPTH), axis=0))


def _checkpoint(context: IterationContext, own: OwnState) -> OwnState:
    """A checkpoint at the start of every outer iteration, latest first: what a past rejected side is drawn from."""
    policy = context.state.runs.policy.params
    history = jnp.concatenate([policy[:, None], own.runs.history[:, :-1]], axis=1)
    return own._replace(runs=PolicyHistory(history[:, : context.shape.size(HISTORY_DEPTH)]))


MECHANISM = Mechanism(
    name="pair_sources",
    summary="the judge's pairs from a past checkpoint, from π₀ or from a look-ahead copy, labelled chosen > rejected",
    knobs=PairSourceKnobs,
    rows=(
        StepRow(
            name="rejected_side",
            stage="sides",
            schedule=_rejected_schedule,
            update=_rejected_update,
            due=contrast_due,
        ),
        StepRow(
            name="lookahead",
            stage="sides",
            schedule=_lookahead_schedule,
            update=_lookahead_update,
            due=contrast_due,
        ),
    ),
    run_state=_initial_history,
    sizes=_sizes,
    contrast=contrast,
    start_iteration=_checkpoint,
)
