"""One outer iteration of co-evolution for every run of a grid at once.

Each inner step applies the mechanisms of `harness.engine.mechanisms` (functions of one run or
one judge) to the whole grid: the policy step to every run, and each scheduled mechanism
(judge update, anchor, meta-correction) to its work groups through
`batching.apply_where_due`, which skips a group on steps where none of it is due. After
the last step, judges due a reset return to pretrained.
"""

from __future__ import annotations

from functools import partial

import flax.struct
import jax
import jax.numpy as jnp

from harness.engine import mechanisms, streams
from harness.engine.knobs import anchor_pair_count, choices, holdout_pair_count
from harness.engine.state import CoevolutionState, Network, adam_step, select, take
from harness.grid.batching import WorkGroup, apply_where_due
from harness.grid.layout import GridShape


@flax.struct.dataclass
class GridConstants:
    """Arrays fixed for the life of a grid.

    q_star (N,); slot_run int32 (J,) the run of each judge slot; run_first_slot int32 (R,)
    its first slot (a run's slots are consecutive); groups: one `WorkGroup` per
    shape.groups entry; holdout_pairs int32 (R, H, 2): each run's held-out pairs (output
    indices, padded to the grid's largest count H), holdout_labels (R, H) = 1[q*(a) > q*(b)];
    pretrained_judges float32 (J, P) rows; initial_policies float32 (R, P) rows, π₀ of each run;
    initial_log_pi float32 (R, N): log π₀ of each run's initial policy over every output
    (what the diagnostics measure drift from).
    """

    q_star: jax.Array
    slot_run: jax.Array
    run_first_slot: jax.Array
    groups: tuple[WorkGroup, ...]
    holdout_pairs: jax.Array
    holdout_labels: jax.Array
    pretrained_judges: jax.Array
    initial_policies: jax.Array
    initial_log_pi: jax.Array


def run_judge_slots(shape: GridShape, consts: GridConstants, knobs: object) -> tuple[jax.Array, jax.Array]:
    """Each run's judge slots padded to the largest ensemble: slot ids int32 (R, M) and which are real (R, M)."""
    member = jnp.arange(shape.max_members)
    members = member[None, :] < knobs.n_judges[:, None]
    slots = jnp.where(members, consts.run_first_slot[:, None] + member[None, :], consts.run_first_slot[:, None])
    return slots, members


def run_rewards(shape: GridShape, consts: GridConstants, knobs: object, slot_scores: jax.Array) -> jax.Array:
    """Each run's reward from its judges' scores: slot_scores (J, X) -> (R, X), by the run's aggregation rule."""
    slots, members = run_judge_slots(shape, consts, knobs)
    return jax.vmap(mechanisms.aggregate_scores)(
        slot_scores[slots], members, knobs.ensemble_aggregation, knobs.ensemble_std_weight
    )


def policy_step(
    shape: GridShape, consts: GridConstants, knobs: object, state: CoevolutionState, keys: jax.Array
) -> CoevolutionState:
    """`mechanisms.policy_step` for every run, batched so that each judge scores its run's batch once.

    keys (R, 2): each run's key for its policy batch (`streams.StepKeys.policy`).
    """
    batch, vocab, seq_len = shape.batch_size, shape.vocab_size, shape.seq_len
    noise = jax.vmap(partial(streams.sampling_noise, shape.streams, batch=batch, vocab=vocab, seq_len=seq_len))(keys)

    def log_prob(policies: jax.Array) -> tuple[jax.Array, jax.Array]:
        tokens, log_pi = jax.vmap(partial(mechanisms.sample, vocab=vocab))(policies, noise)
        return log_pi, tokens

    # One forward pass gives both the samples and log π; its VJP is the score function.
    policy = state.runs.policy
    _, pullback, tokens = jax.vjp(log_prob, policy.params, has_aux=True)
    slot_scores = jax.vmap(mechanisms.judge_reward, (0, 0, None))(
        state.slots.judge.params, tokens[consts.slot_run], vocab
    )
    rewards = run_rewards(shape, consts, knobs, slot_scores)
    (grads,) = pullback(jax.vmap(mechanisms.reinforce_cotangent)(rewards, knobs.entropy_bonus))
    policy = jax.vmap(adam_step)(policy, grads, knobs.lr_policy)
    return state.replace(runs=state.runs.replace(policy=policy))


def contrast_runs(knobs: object) -> jax.Array:
    """bool (R,): runs whose pairs, when contrast is drawn, have a side other than the policy."""
    policy_chosen, policy_rejected = choices("chosen_from").index("policy"), choices("rejected_from").index("policy")
    return (knobs.chosen_from != policy_chosen) | (knobs.rejected_from != policy_rejected)


def pair_sides(
    shape: GridShape,
    consts: GridConstants,
    knobs: object,
    state: CoevolutionState,
    contrast_keys: jax.Array,
    contrast: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """The policy rows each run draws the chosen and the rejected side of its judge's pairs from, (R, P) each.

    Both are the run's policy, except where `contrast` (bool (R,)): there the rejected side follows
    `mechanisms.rejected_side` and the chosen side `mechanisms.lookahead_side`, each for its work
    groups only. contrast_keys (R, 2): each run's `StepKeys.contrast` (the look-ahead's batches).
    """
    batch, vocab, seq_len = shape.batch_size, shape.vocab_size, shape.seq_len
    policy = state.runs.policy
    chosen = rejected = policy.params

    def rejected_arguments(runs: jax.Array) -> tuple:
        history, initial = state.runs.policy_history[runs], consts.initial_policies[runs]
        return history, initial, knobs.rejected_from[runs], knobs.temporal_gap[runs]

    def lookahead_arguments(runs: jax.Array) -> tuple:
        slots, members = run_judge_slots(shape, consts, knobs)
        step_keys = jax.vmap(lambda key: jax.random.split(key, shape.max_lookahead_steps))(contrast_keys[runs])
        noise = jax.vmap(
            jax.vmap(partial(streams.sampling_noise, shape.streams, batch=batch, vocab=vocab, seq_len=seq_len))
        )(step_keys)
        run_knobs = jax.tree.map(lambda leaf: leaf[runs], knobs)
        judges = state.slots.judge.params[slots[runs]]
        return take(policy, runs), judges, members[runs], noise, knobs.lookahead_steps[runs], run_knobs

    for index in shape.groups_of("rejected_side"):
        runs = consts.groups[index].run_ids
        rejected = apply_where_due(
            mechanisms.rejected_side, rejected, runs, contrast[runs], partial(rejected_arguments, runs)
        )
    for index in shape.groups_of("lookahead"):
        runs = consts.groups[index].run_ids
        unit = partial(mechanisms.lookahead_side, vocab=vocab)
        chosen = apply_where_due(unit, chosen, runs, contrast[runs], partial(lookahead_arguments, runs))
    return chosen, rejected


def pair_tokens(
    shape: GridShape, sides: tuple[jax.Array, jax.Array], keys: streams.StepKeys, group: WorkGroup
) -> tuple[jax.Array, jax.Array]:
    """The judge pair batch of each slot of `group`: chosen and rejected tokens (Jg, B, L) each, drawn with the
    run's judge-pair noise from its sides' policy rows (one batch per run, shared by the run's judges)."""
    batch, vocab, seq_len = shape.batch_size, shape.vocab_size, shape.seq_len
    pair_noise = partial(streams.judge_pair_noise, shape.streams, batch=batch, vocab=vocab, seq_len=seq_len)
    sample = jax.vmap(partial(mechanisms.sample, vocab=vocab))
    runs = group.run_ids
    noise = jax.vmap(pair_noise)(keys.judge_pairs[runs])
    chosen_rows, rejected_rows = (rows[runs] for rows in sides)
    chosen, _ = sample(chosen_rows, noise[:, :, :batch])
    rejected, _ = sample(rejected_rows, noise[:, :, batch:])
    return chosen[group.slot_position], rejected[group.slot_position]


def judge_updates(
    shape: GridShape,
    consts: GridConstants,
    knobs: object,
    state: CoevolutionState,
    keys: streams.StepKeys,
    due: jax.Array,
) -> CoevolutionState:
    """Judge updates (on contrast pairs where drawn, else self-labelled), then the anchor step and meta-judging,
    for every judge whose run is due (due bool (R,))."""
    batch, vocab, seq_len = shape.batch_size, shape.vocab_size, shape.seq_len
    draw_anchors = partial(
        streams.anchor_pairs,
        shape.streams,
        batch=batch,
        max_pairs=shape.max_anchor_pairs,
        n_outputs=consts.q_star.shape[0],
    )
    # Contrast pairs on a judge update with probability contrast_mix (uniform in [0, 1): always at 1).
    drawn = jax.vmap(lambda key: jax.random.uniform(jax.random.fold_in(key, 0)))(keys.contrast)
    contrast = due & contrast_runs(knobs) & (drawn < knobs.contrast_mix)
    sides = pair_sides(shape, consts, knobs, state, keys.contrast, contrast)
    update = partial(mechanisms.judge_pair_update, vocab=vocab)
    anchor = partial(mechanisms.anchor_update, q_star=consts.q_star, vocab=vocab, seq_len=seq_len)
    referee = partial(mechanisms.referee_update, vocab=vocab)

    def update_arguments(group: WorkGroup) -> tuple[jax.Array, ...]:
        return *pair_tokens(shape, sides, keys, group), contrast[group.slot_run], knobs.lr_judge[group.slot_run]

    def anchor_arguments(group: WorkGroup) -> tuple[jax.Array, ...]:
        runs = group.slot_run
        members = group.slot_ids - consts.run_first_slot[runs]
        pairs = jax.vmap(draw_anchors)(keys.anchors[runs, members])
        return pairs, anchor_pair_count(knobs.anchor_fraction[runs], batch), knobs.lr_judge[runs]

    def referee_arguments(group: WorkGroup) -> tuple[jax.Array, ...]:
        runs = group.slot_run
        referees = consts.pretrained_judges[group.slot_ids]
        return *pair_tokens(shape, sides, keys, group), referees, knobs.referee_margin[runs], knobs.lr_judge[runs]

    judges = state.slots.judge
    mechanism_steps = (
        ("judge_update", update, update_arguments),
        ("anchor", anchor, anchor_arguments),
        ("referee", referee, referee_arguments),
    )
    for mechanism, unit, arguments in mechanism_steps:
        for index in shape.groups_of(mechanism):
            group = consts.groups[index]
            judges = apply_where_due(unit, judges, group.slot_ids, due[group.slot_run], partial(arguments, group))
    return state.replace(slots=state.slots.replace(judge=judges))


def meta_corrections(
    shape: GridShape, consts: GridConstants, knobs: object, state: CoevolutionState, counter: jax.Array
) -> tuple[CoevolutionState, jax.Array]:
    """Meta-correction where its check is due: judges whose held-out accuracy is below their run's
    threshold take one held-out step. Returns the state and the corrections per run (R,)."""
    vocab, seq_len = shape.vocab_size, shape.seq_len
    accuracy_of = jax.vmap(mechanisms.pair_bce, (0, 0, 0, 0, None, None))

    def group_corrections(judges: Network, group: WorkGroup, n_held: int) -> tuple[Network, jax.Array]:
        runs = group.slot_run

        def held_out() -> tuple[jax.Array, jax.Array, jax.Array]:
            # Each judge's run's pairs, labels and mask (Jg, n_held, ...): gathered only on steps that use them.
            count = holdout_pair_count(knobs.meta_holdout_fraction[runs], consts.q_star.shape[0])
            mask = (jnp.arange(n_held)[None, :] < count[:, None]).astype(jnp.float32)
            return consts.holdout_pairs[runs, :n_held], consts.holdout_labels[runs, :n_held], mask

        check_due = counter % knobs.meta_update_every[runs] == 0
        # The check is a forward pass; the correction's backward pass is skipped unless some judge fails it.
        accuracy = jax.lax.cond(
            jnp.any(check_due),
            lambda: accuracy_of(judges.params[group.slot_ids], *held_out(), vocab, seq_len)[1],
            lambda: jnp.ones_like(check_due, jnp.float32),  # (shaped like a per-shard value, for shard_map)
        )
        needs = check_due & (accuracy < knobs.meta_accuracy_threshold[runs])
        correct = partial(mechanisms.holdout_correction, vocab=vocab, seq_len=seq_len)
        judges = apply_where_due(correct, judges, group.slot_ids, needs, lambda: (*held_out(), knobs.lr_judge[runs]))
        return judges, jax.ops.segment_sum(needs.astype(jnp.int32), runs, num_segments=shape.n_runs)

    judges, corrections = state.slots.judge, jnp.zeros_like(state.runs.meta_corrections)
    for index in shape.groups_of("meta_correction"):
        judges, corrected = group_corrections(judges, consts.groups[index], shape.groups[index].holdout_pairs)
        corrections += corrected
    return state.replace(slots=state.slots.replace(judge=judges)), corrections


def inner_step(
    shape: GridShape, consts: GridConstants, knobs: object, state: CoevolutionState, step_in_iteration: jax.Array
) -> CoevolutionState:
    """Policy step, then the judge update (with the anchor) and meta-correction where due, for every run."""
    counter = step_in_iteration + 1
    update_due = (~knobs.freeze_judge) & (counter % knobs.judge_update_every == 0)
    step_keys = partial(streams.step_keys, shape.streams, max_members=shape.max_members)
    keys = jax.vmap(step_keys, (0, None, 0, 0, 0))(
        state.runs.stream_key, state.step, update_due, knobs.anchor_fraction > 0, knobs.n_judges
    )
    state = policy_step(shape, consts, knobs, state, keys.policy)
    state = judge_updates(shape, consts, knobs, state, keys, update_due)
    state, corrected = meta_corrections(shape, consts, knobs, state, counter)
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
    consts: GridConstants, knobs: object, state: CoevolutionState, iteration: jax.Array
) -> CoevolutionState:
    """After outer iteration `iteration` (0-based): judges of runs due a reset return to pretrained, with fresh Adam."""
    run_due = (knobs.reset_every > 0) & ((iteration + 1) % jnp.maximum(knobs.reset_every, 1) == 0)
    judges = state.slots.judge
    reset = jax.vmap(mechanisms.reset)(judges, consts.pretrained_judges)
    return state.replace(slots=state.slots.replace(judge=select(run_due[consts.slot_run], reset, judges)))


def train_iteration(
    shape: GridShape, consts: GridConstants, knobs: object, state: CoevolutionState, iteration: jax.Array
) -> CoevolutionState:
    """All inner steps of one outer iteration (counters restarted), then resets."""
    zeros = jnp.zeros_like(state.runs.judge_updates)  # (a per-shard value, as shard_map requires of the carry)
    runs = state.runs
    # A checkpoint at the start of every iteration, latest first: what a past rejected side is drawn from.
    history = jnp.concatenate([runs.policy.params[:, None], runs.policy_history[:, :-1]], axis=1)
    history = history[:, : shape.history_depth]
    state = state.replace(runs=runs.replace(policy_history=history, judge_updates=zeros, meta_corrections=zeros))

    def body(carry: CoevolutionState, step_in_iteration: jax.Array) -> tuple[CoevolutionState, None]:
        return inner_step(shape, consts, knobs, carry, step_in_iteration), None

    state, _ = jax.lax.scan(body, state, jnp.arange(shape.steps_per_iteration, dtype=jnp.int32))
    return reset_judges(consts, knobs, state, iteration)
