"""One outer iteration of co-evolution for every run of a grid at once.

Each inner step applies the mechanisms of `harness.engine.mechanisms` (functions of one run or
one judge) to the whole grid: the policy step to every run, then the stages of
`harness.grid.step_table.STEP_TABLE` in order (where the judge's pairs come from, the judge
updates, meta-correction), each row a scheduled mechanism applied to its work groups through
`batching.apply_where_due`, which skips a group on steps where none of it is due. After the
last step, judges due a reset return to pretrained.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from harness.engine import mechanisms, streams
from harness.engine.knobs import RunKnobs, choices
from harness.engine.state import CoevolutionState, adam_step, select
from harness.grid.layout import GridShape
from harness.grid.step_table import (
    STEP_TABLE,
    GridConstants,
    PairSides,
    StepContext,
    apply_rows,
    pair_tokens,
    reward_judges,
    run_judge_slots,
)

# Re-exported: the pieces of a step that callers (the diagnostics, tests) use beside the step itself.
__all__ = [
    "GridConstants",
    "contrast_runs",
    "inner_step",
    "judge_updates",
    "meta_corrections",
    "pair_sides",
    "pair_tokens",
    "policy_step",
    "reset_judges",
    "run_judge_slots",
    "run_rewards",
    "train_iteration",
]


def run_rewards(shape: GridShape, constants: GridConstants, knobs: RunKnobs, slot_scores: jax.Array) -> jax.Array:
    """Each run's reward from its judges' scores: slot_scores (J, X) -> (R, X), by the run's aggregation rule."""
    slots, members = run_judge_slots(shape, constants, knobs)
    return jax.vmap(mechanisms.aggregate_scores)(
        slot_scores[slots], members, knobs.ensemble_aggregation, knobs.ensemble_std_weight
    )


def policy_step(
    shape: GridShape, constants: GridConstants, knobs: RunKnobs, state: CoevolutionState, keys: jax.Array
) -> CoevolutionState:
    """`mechanisms.policy_step` for every run, batched so that each judge scores its run's batch once.

    keys (R, 2): each run's key for its policy batch (`streams.StepKeys.policy`).
    """
    batch, vocab, seq_len = shape.batch_size, shape.vocab_size, shape.seq_len
    noise = jax.vmap(partial(streams.sampling_noise, shape.streams, batch=batch, vocab=vocab, seq_len=seq_len))(keys)

    def log_prob(policies: jax.Array) -> tuple[jax.Array, jax.Array]:
        tokens, log_pi = jax.vmap(partial(mechanisms.sample, vocab=vocab, model=shape.model))(policies, noise)
        return log_pi, tokens

    # One forward pass gives both the samples and log π; its VJP is the score function.
    policy = state.runs.policy
    _, pullback, tokens = jax.vjp(log_prob, policy.params, has_aux=True)
    judges = reward_judges(shape, constants, knobs, state.slots)
    judge_reward = partial(mechanisms.judge_reward, vocab=vocab, model=shape.model)
    slot_scores = jax.vmap(judge_reward)(judges, tokens[constants.slot_run])
    rewards = run_rewards(shape, constants, knobs, slot_scores)
    (grads,) = pullback(jax.vmap(mechanisms.reinforce_cotangent)(rewards, knobs.entropy_bonus))
    policy = jax.vmap(adam_step)(policy, grads, knobs.lr_policy)
    return state.replace(runs=state.runs.replace(policy=policy))


def contrast_runs(knobs: RunKnobs) -> jax.Array:
    """bool (R,): runs whose pairs, when contrast is drawn, have a side other than the policy."""
    policy_chosen, policy_rejected = choices("chosen_from").index("policy"), choices("rejected_from").index("policy")
    return (knobs.chosen_from != policy_chosen) | (knobs.rejected_from != policy_rejected)


def pair_sides(
    shape: GridShape,
    constants: GridConstants,
    knobs: RunKnobs,
    state: CoevolutionState,
    contrast_keys: jax.Array,
    contrast: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """The policy rows each run draws the chosen and the rejected side of its judge's pairs from, (R, P) each.

    Both are the run's policy, except where `contrast` (bool (R,)): there the rows of `SIDE_ROWS` replace
    them (`mechanisms.rejected_side`, `mechanisms.lookahead_side`), each for its work groups only.
    contrast_keys (R, 2): each run's `StepKeys.contrast` (the look-ahead's batches).
    """
    # The sides' rows read no key but the contrast keys.
    keys = streams.StepKeys(policy=None, judge_pairs=None, anchors=None, contrast=contrast_keys, next=None)
    step = StepContext(shape, constants, knobs, state, keys, contrast)
    policy = state.runs.policy.params
    sides, _ = apply_rows(STEP_TABLE["sides"], step, PairSides(chosen=policy, rejected=policy))
    return sides.chosen, sides.rejected


def judge_updates(
    shape: GridShape,
    constants: GridConstants,
    knobs: RunKnobs,
    state: CoevolutionState,
    keys: streams.StepKeys,
    due: jax.Array,
) -> CoevolutionState:
    """The rows of `JUDGE_UPDATE_ROWS` for every judge whose run is due (due bool (R,)): the judge update (on
    contrast pairs where drawn, else self-labelled), the anchor step, meta-judging, then the judges' averages."""
    # Contrast pairs on a judge update with probability contrast_mix (uniform in [0, 1): always at 1).
    drawn = jax.vmap(lambda key: jax.random.uniform(jax.random.fold_in(key, 0)))(keys.contrast)
    contrast = due & contrast_runs(knobs) & (drawn < knobs.contrast_mix)
    sides = pair_sides(shape, constants, knobs, state, keys.contrast, contrast)
    step = StepContext(shape, constants, knobs, state, keys, contrast, update_due=due, sides=sides)
    slots, _ = apply_rows(STEP_TABLE["judge_updates"], step, state.slots)
    return state.replace(slots=slots)


def meta_corrections(
    shape: GridShape, constants: GridConstants, knobs: RunKnobs, state: CoevolutionState, counter: jax.Array
) -> tuple[CoevolutionState, jax.Array]:
    """Meta-correction where its check is due: judges whose held-out accuracy is below their run's
    threshold take one held-out step. Returns the state and the corrections per run (R,)."""
    step = StepContext(shape, constants, knobs, state, counter=counter)
    slots, applied = apply_rows(STEP_TABLE["meta_correction"], step, state.slots)
    corrections = jnp.zeros_like(state.runs.meta_corrections)
    for group, needs in applied:
        corrections += jax.ops.segment_sum(needs.astype(jnp.int32), group.ids.slot_run, num_segments=shape.n_runs)
    return state.replace(slots=slots), corrections


def inner_step(
    shape: GridShape, constants: GridConstants, knobs: RunKnobs, state: CoevolutionState, step_in_iteration: jax.Array
) -> CoevolutionState:
    """Policy step, then the judge update (with the anchor) and meta-correction where due, for every run."""
    counter = step_in_iteration + 1
    update_due = (~knobs.freeze_judge) & (counter % knobs.judge_update_every == 0)
    step_keys = partial(streams.step_keys, shape.streams, max_members=shape.max_members)
    keys = jax.vmap(step_keys, (0, None, 0, 0, 0))(
        state.runs.stream_key, state.step, update_due, knobs.anchor_fraction > 0, knobs.n_judges
    )
    state = policy_step(shape, constants, knobs, state, keys.policy)
    state = judge_updates(shape, constants, knobs, state, keys, update_due)
    state, corrected = meta_corrections(shape, constants, knobs, state, counter)
    runs = state.runs
    return state.replace(
        step=state.step + 1,
        runs=runs.replace(
            stream_key=keys.next,
            judge_updates=runs.judge_updates + update_due,
            meta_corrections=runs.meta_corrections + corrected,
        ),
    )


def reset_judges(
    constants: GridConstants, knobs: RunKnobs, state: CoevolutionState, iteration: jax.Array
) -> CoevolutionState:
    """After outer iteration `iteration` (0-based): judges of runs due a reset return to pretrained, with fresh Adam,
    and their moving averages with them."""
    run_due = (knobs.reset_every > 0) & ((iteration + 1) % jnp.maximum(knobs.reset_every, 1) == 0)
    slot_due, slots = run_due[constants.slot_run], state.slots
    reset = jax.vmap(mechanisms.reset)(slots.judge, constants.pretrained_judges)
    judge_ema = select(slot_due, constants.pretrained_judges, slots.judge_ema)
    return state.replace(slots=slots.replace(judge=select(slot_due, reset, slots.judge), judge_ema=judge_ema))


def train_iteration(
    shape: GridShape, constants: GridConstants, knobs: RunKnobs, state: CoevolutionState, iteration: jax.Array
) -> CoevolutionState:
    """All inner steps of one outer iteration (counters restarted), then resets."""
    zeros = jnp.zeros_like(state.runs.judge_updates)  # (a per-shard value, as shard_map requires of the carry)
    runs = state.runs
    # A checkpoint at the start of every iteration, latest first: what a past rejected side is drawn from.
    history = jnp.concatenate([runs.policy.params[:, None], runs.policy_history[:, :-1]], axis=1)
    history = history[:, : shape.history_depth]
    state = state.replace(runs=runs.replace(policy_history=history, judge_updates=zeros, meta_corrections=zeros))

    def body(carry: CoevolutionState, step_in_iteration: jax.Array) -> tuple[CoevolutionState, None]:
        return inner_step(shape, constants, knobs, carry, step_in_iteration), None

    state, _ = jax.lax.scan(body, state, jnp.arange(shape.steps_per_iteration, dtype=jnp.int32))
    return reset_judges(constants, knobs, state, iteration)
