"""One outer iteration of co-evolution for every run of a grid at once.

The step functions act on the whole grid: per-run work is vmapped over the run axis
(R) and per-judge work over the slot axis (J). Work that only some runs need on a
given step (judge updates, meta-correction) is done per work group (see
`harness.grid.layout_grid`) behind a `lax.cond`, so steps where no run of a group is
due skip it, and runs that are not due keep their old values through a select.

Inside an outer iteration every network is one flat parameter row (`harness.flat_params`):
the step functions take and return a `FlatState`, whose networks and Adam moments are
(R, P) / (J, P) arrays, and unravel a row only where a model reads it.
"""

from __future__ import annotations

import functools

import chex
import flax.struct
import jax
import jax.numpy as jnp
import optax

from harness.flat_params import (
    judge_layout,
    policy_layout,
    ravel_optimizer_rows,
    ravel_rows,
    unravel_optimizer_rows,
    unravel_rows,
)
from harness.grid import GridShape, MetaGroupShape, UpdateGroupShape
from harness.keys import distinct_pairs
from harness.knobs import RunKnobs, anchor_pair_count, holdout_pair_count
from harness.models import Params, judge_scores, judge_scores_of_outputs, sample_with_log_prob


@flax.struct.dataclass
class UpdateGroupIds:
    """Device copy of `harness.grid.UpdateGroup`: int32 run_ids (Rg,), slot_ids (Jg,),
    slot_group_run (Jg,), anchor_positions (Jga,)."""

    run_ids: jax.Array
    slot_ids: jax.Array
    slot_group_run: jax.Array
    anchor_positions: jax.Array


@flax.struct.dataclass
class GridConstants:
    """Arrays fixed for the life of a grid.

    q_star (N,); run_keys (R, 2) training keys; slot_run int32 (J,) the run of each judge
    slot; update_groups, one per shape.update_groups; meta_groups: int32 slot ids (Jm,),
    one per shape.meta_groups; holdout_pairs int32 (H, 2) output indices and holdout_labels
    (H,) = 1[q*(a) > q*(b)]; pretrained_judges: params with leading axis J.
    """

    q_star: jax.Array
    run_keys: jax.Array
    slot_run: jax.Array
    update_groups: tuple[UpdateGroupIds, ...]
    meta_groups: tuple[jax.Array, ...]
    holdout_pairs: jax.Array
    holdout_labels: jax.Array
    pretrained_judges: Params


@flax.struct.dataclass
class CoevolutionState:
    """Everything that changes during training. Leading axes: R for the policy, J for judges.

    Networks are pytrees (flax parameter dicts with a leading axis): the form checkpoints,
    diagnostics and callers see. `train_iteration` works on its `FlatState`.
    """

    policy_params: Params
    policy_opt_state: optax.OptState
    judge_params: Params
    judge_opt_state: optax.OptState
    step: jax.Array  # global inner-step count, shared by all runs
    judge_updates: jax.Array  # int32 (R,): steps with a judge update in the current outer iteration
    meta_corrections: jax.Array  # int32 (R,): meta-correction steps (summed over judges) this iteration


@flax.struct.dataclass
class FlatState:
    """`CoevolutionState` with every network as one flat parameter row (see `flat_state`).

    policy_params float32 (R, Pp), judge_params (J, Pj); the optimizer states are Adam's
    with moments of the same shapes and a step count per network. Flattening is exact
    because every Adam operation is per parameter.
    """

    policy_params: jax.Array
    policy_opt_state: optax.OptState
    judge_params: jax.Array
    judge_opt_state: optax.OptState
    step: jax.Array
    judge_updates: jax.Array
    meta_corrections: jax.Array


def adam_step(params: Params, opt_state: optax.OptState, grads: Params, learning_rate: jax.Array) -> tuple:
    """One Adam update with a traced learning rate (so it can vary per run)."""
    updates, opt_state = optax.adam(learning_rate).update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def init_opt_state(params: Params) -> optax.OptState:
    """Fresh Adam state; its structure does not depend on the learning rate."""
    return optax.adam(1.0).init(params)


def _select(mask: jax.Array, new: chex.ArrayTree, old: chex.ArrayTree) -> chex.ArrayTree:
    """Per leading-axis entry: new where mask, else old."""

    def pick(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b)

    return jax.tree.map(pick, new, old)


def _take(tree: chex.ArrayTree, index: jax.Array) -> chex.ArrayTree:
    return jax.tree.map(lambda leaf: leaf[index], tree)


def _put(tree: chex.ArrayTree, index: jax.Array, values: chex.ArrayTree) -> chex.ArrayTree:
    return jax.tree.map(lambda leaf, value: leaf.at[index].set(value), tree, values)


def output_pair_bce(
    row: jax.Array, pairs: jax.Array, labels: jax.Array, mask: jax.Array, vocab: int, seq_len: int
) -> tuple[jax.Array, jax.Array]:
    """Masked Bradley–Terry loss of one judge (flat row) on pairs of outputs given by enumeration index.

    pairs int32 (P, 2); labels (P,) say whether the first should outscore the second;
    mask (P,) marks real pairs (the rest is padding). Returns (loss, accuracy on the mask).
    """
    params = judge_layout(vocab).unravel(row)
    scores = judge_scores_of_outputs(params, pairs.T.reshape(-1), vocab, seq_len, include_bias=False)
    margin = scores[: pairs.shape[0]] - scores[pairs.shape[0] :]
    weight = mask / jnp.maximum(jnp.sum(mask), 1.0)
    loss = jnp.sum(weight * optax.sigmoid_binary_cross_entropy(margin, labels))
    accuracy = jnp.sum(weight * ((margin > 0) == (labels > 0.5)))
    return loss, accuracy


def self_labelled_bce(row: jax.Array, first: jax.Array, second: jax.Array, vocab: int) -> jax.Array:
    """Bradley–Terry loss of one judge (flat row) with its own current preference 1[J(a) > J(b)] as the label."""
    scores = judge_scores(judge_layout(vocab).unravel(row), jnp.concatenate([first, second]), vocab, include_bias=False)
    margin = scores[: first.shape[0]] - scores[first.shape[0] :]
    labels = jax.lax.stop_gradient((margin > 0).astype(jnp.float32))
    return jnp.mean(optax.sigmoid_binary_cross_entropy(margin, labels))


def ensemble_scores(
    shape: GridShape, consts: GridConstants, knobs: RunKnobs, judge_rows: jax.Array, tokens: jax.Array
) -> jax.Array:
    """Mean score over each run's judges (flat rows (J, P)): tokens int32 (R, B, L) -> float32 (R, B)."""
    unravel, vocab = judge_layout(shape.vocab_size).unravel, shape.vocab_size
    per_slot = jax.vmap(lambda row, slot_tokens: judge_scores(unravel(row), slot_tokens, vocab))(
        judge_rows, tokens[consts.slot_run]
    )
    total = jax.ops.segment_sum(per_slot, consts.slot_run, num_segments=shape.n_runs)
    return total / knobs.n_judges[:, None]


def _sample(shape: GridShape, policy_rows: jax.Array, keys: jax.Array, batch: int) -> tuple[jax.Array, jax.Array]:
    """`batch` sequences from each policy (flat rows (R', P)), keys (R', 2): tokens (R', B, L), log π (R', B)."""
    unravel = policy_layout(shape.vocab_size).unravel
    return jax.vmap(lambda row, key: sample_with_log_prob(unravel(row), key, batch, shape.vocab_size, shape.seq_len))(
        policy_rows, keys
    )


def _policy_step(
    shape: GridShape, consts: GridConstants, knobs: RunKnobs, state: FlatState, keys: jax.Array
) -> FlatState:
    """Sample a batch per run, reward it with the run's judges, take one REINFORCE step."""

    def sample_all(policy_rows: jax.Array) -> tuple[jax.Array, jax.Array]:
        tokens, log_prob = _sample(shape, policy_rows, keys, shape.batch_size)
        return log_prob, tokens

    # One forward pass gives both the samples and log π; its VJP is the score function.
    _, pullback, tokens = jax.vjp(sample_all, state.policy_params, has_aux=True)
    rewards = ensemble_scores(shape, consts, knobs, state.judge_params, tokens)
    advantage = rewards - jnp.mean(rewards, axis=1, keepdims=True)
    # loss = -mean(advantage * log π) + entropy_bonus * mean(log π); d loss / d log π:
    cotangent = (knobs.entropy_bonus[:, None] - advantage) / shape.batch_size
    (grads,) = pullback(cotangent)
    params, opt_state = jax.vmap(adam_step)(state.policy_params, state.policy_opt_state, grads, knobs.lr_policy)
    return state.replace(policy_params=params, policy_opt_state=opt_state)


def _judge_update(
    shape: GridShape,
    group_shape: UpdateGroupShape,
    group: UpdateGroupIds,
    consts: GridConstants,
    knobs: RunKnobs,
    state: FlatState,
    keys: jax.Array,
    run_due: jax.Array,
) -> FlatState:
    """Self-labelled Bradley–Terry step (then the anchor step) for the group's judges whose
    run is due. keys (R, 2, 2): pair and anchor keys of every run; run_due bool (Rg,)."""
    batch, vocab = shape.batch_size, shape.vocab_size
    runs, slots = group.run_ids, group.slot_ids
    pair_keys, anchor_keys = keys[runs, 0], keys[runs, 1]
    tokens, _ = _sample(shape, state.policy_params[runs], pair_keys, 2 * batch)
    tokens = tokens[group.slot_group_run]
    old_params, old_opt_state = _take(state.judge_params, slots), _take(state.judge_opt_state, slots)
    grads = jax.vmap(jax.grad(self_labelled_bce), (0, 0, 0, None))(
        old_params, tokens[:, :batch], tokens[:, batch:], vocab
    )
    lr = knobs.lr_judge[consts.slot_run[slots]]
    params, opt_state = jax.vmap(adam_step)(old_params, old_opt_state, grads, lr)

    if group_shape.anchor_slots:
        # q*-labelled pairs drawn uniformly from all outputs, padded to the grid's maximum count.
        anchored_at = group.anchor_positions
        anchor_runs = consts.slot_run[slots[anchored_at]]
        # Draw the largest possible count (one per batch element) and keep a prefix, so a
        # run's anchor pairs do not depend on how far the grid pads them.
        pairs = jax.vmap(distinct_pairs, (0, None, None))(
            anchor_keys[group.slot_group_run[anchored_at]], batch, consts.q_star.shape[0]
        )
        pairs = pairs[:, : shape.max_anchor_pairs]
        labels = (consts.q_star[pairs[..., 0]] > consts.q_star[pairs[..., 1]]).astype(jnp.float32)
        count = anchor_pair_count(knobs.anchor_fraction[anchor_runs], batch)
        mask = (jnp.arange(shape.max_anchor_pairs)[None, :] < count[:, None]).astype(jnp.float32)
        anchor_grads, _ = jax.vmap(jax.grad(output_pair_bce, has_aux=True), (0, 0, 0, 0, None, None))(
            _take(params, anchored_at), pairs, labels, mask, vocab, shape.seq_len
        )
        anchored = jax.vmap(adam_step)(
            _take(params, anchored_at), _take(opt_state, anchored_at), anchor_grads, lr[anchored_at]
        )
        params = _put(params, anchored_at, anchored[0])
        opt_state = _put(opt_state, anchored_at, anchored[1])

    slot_due = run_due[group.slot_group_run]
    params = _select(slot_due, params, old_params)
    opt_state = _select(slot_due, opt_state, old_opt_state)
    return state.replace(
        judge_params=_put(state.judge_params, slots, params),
        judge_opt_state=_put(state.judge_opt_state, slots, opt_state),
    )


def _meta_correction(
    shape: GridShape,
    group_shape: MetaGroupShape,
    slots: jax.Array,
    consts: GridConstants,
    knobs: RunKnobs,
    state: FlatState,
    due: jax.Array,
) -> tuple[FlatState, jax.Array]:
    """On the group's meta slots (Jm,) where `due`: one held-out BCE step if held-out accuracy is below threshold.

    The accuracy check is a forward pass only; the gradient step sits behind its own
    cond, so steps where every judge of the group passes its check skip the backward pass.
    Returns the new state and whether each meta slot was corrected (Jm,).
    """
    runs = consts.slot_run[slots]
    count = holdout_pair_count(knobs.meta_holdout_fraction[runs], consts.q_star.shape[0])
    mask = (jnp.arange(group_shape.holdout_pairs)[None, :] < count[:, None]).astype(jnp.float32)
    params, opt_state = _take(state.judge_params, slots), _take(state.judge_opt_state, slots)
    holdout_bce = functools.partial(
        output_pair_bce,
        pairs=consts.holdout_pairs[: group_shape.holdout_pairs],
        labels=consts.holdout_labels[: group_shape.holdout_pairs],
        vocab=shape.vocab_size,
        seq_len=shape.seq_len,
    )
    _, accuracy = jax.vmap(lambda p, m: holdout_bce(p, mask=m))(params, mask)
    needs_correction = due & (accuracy < knobs.meta_accuracy_threshold[runs])

    def correct(judges: tuple[Params, optax.OptState]) -> tuple[Params, optax.OptState]:
        grads, _ = jax.vmap(jax.grad(lambda p, m: holdout_bce(p, mask=m), has_aux=True))(params, mask)
        corrected = jax.vmap(adam_step)(params, opt_state, grads, knobs.lr_judge[runs])
        return _select(needs_correction, corrected[0], judges[0]), _select(needs_correction, corrected[1], judges[1])

    params, opt_state = jax.lax.cond(jnp.any(needs_correction), correct, lambda j: j, (params, opt_state))
    state = state.replace(
        judge_params=_put(state.judge_params, slots, params),
        judge_opt_state=_put(state.judge_opt_state, slots, opt_state),
    )
    return state, needs_correction


def inner_step(
    shape: GridShape, consts: GridConstants, knobs: RunKnobs, state: FlatState, step_in_iteration: jax.Array
) -> FlatState:
    """Policy step, then the judge update and meta-correction where due, for every run."""
    step_keys = jax.vmap(jax.random.fold_in, (0, None))(consts.run_keys, state.step)
    step_keys = jax.vmap(lambda k: jax.random.split(k, 4))(step_keys)  # (R, 4, 2)
    state = _policy_step(shape, consts, knobs, state, step_keys[:, 0])

    counter = step_in_iteration + 1
    run_update_due = (~knobs.freeze_judge) & (counter % knobs.judge_update_every == 0)
    for group_shape, group in zip(shape.update_groups, consts.update_groups, strict=True):
        group_due = run_update_due[group.run_ids]
        state = jax.lax.cond(
            jnp.any(group_due),
            functools.partial(
                _judge_update, shape, group_shape, group, consts, knobs, keys=step_keys[:, 1:3], run_due=group_due
            ),
            lambda s: s,
            state,
        )
    meta_corrections = jnp.zeros_like(state.meta_corrections)
    for group_shape, slots in zip(shape.meta_groups, consts.meta_groups, strict=True):
        meta_runs = consts.slot_run[slots]
        meta_due = counter % knobs.meta_update_every[meta_runs] == 0
        state, corrected = jax.lax.cond(
            jnp.any(meta_due),
            lambda s, g=group_shape, ids=slots, d=meta_due: _meta_correction(shape, g, ids, consts, knobs, s, d),
            lambda s, d=meta_due: (s, jnp.zeros_like(d)),
            state,
        )
        meta_corrections += jax.ops.segment_sum(corrected.astype(jnp.int32), meta_runs, num_segments=shape.n_runs)
    return state.replace(
        step=state.step + 1,
        judge_updates=state.judge_updates + run_update_due,
        meta_corrections=state.meta_corrections + meta_corrections,
    )


def flat_state(state: CoevolutionState) -> FlatState:
    """The state with every network and its Adam moments as flat rows: (R, P) policies, (J, P) judges."""
    return FlatState(
        policy_params=ravel_rows(state.policy_params),
        policy_opt_state=ravel_optimizer_rows(state.policy_opt_state, state.policy_params),
        judge_params=ravel_rows(state.judge_params),
        judge_opt_state=ravel_optimizer_rows(state.judge_opt_state, state.judge_params),
        step=state.step,
        judge_updates=state.judge_updates,
        meta_corrections=state.meta_corrections,
    )


def tree_state(shape: GridShape, flat: FlatState, like: CoevolutionState) -> CoevolutionState:
    """Inverse of `flat_state`; `like` is a pytree-shaped state of the same grid (e.g. the one flattened)."""
    policy, judge = policy_layout(shape.vocab_size), judge_layout(shape.vocab_size)
    state = CoevolutionState(
        policy_params=unravel_rows(policy, flat.policy_params),
        policy_opt_state=unravel_optimizer_rows(policy, flat.policy_opt_state, like.policy_opt_state),
        judge_params=unravel_rows(judge, flat.judge_params),
        judge_opt_state=unravel_optimizer_rows(judge, flat.judge_opt_state, like.judge_opt_state),
        step=flat.step,
        judge_updates=flat.judge_updates,
        meta_corrections=flat.meta_corrections,
    )
    chex.assert_trees_all_equal_shapes_and_dtypes(state, like)
    return state


def reset_judges(consts: GridConstants, knobs: RunKnobs, flat: FlatState, iteration: jax.Array) -> FlatState:
    """After outer iteration `iteration` (0-based): judges of runs due a reset return to pretrained, with fresh Adam."""
    run_due = (knobs.reset_every > 0) & ((iteration + 1) % jnp.maximum(knobs.reset_every, 1) == 0)
    slot_due = run_due[consts.slot_run]
    pretrained = ravel_rows(consts.pretrained_judges)
    return flat.replace(
        judge_params=_select(slot_due, pretrained, flat.judge_params),
        judge_opt_state=_select(slot_due, jax.vmap(init_opt_state)(pretrained), flat.judge_opt_state),
    )


def train_iteration(
    shape: GridShape,
    consts: GridConstants,
    knobs: RunKnobs,
    state: CoevolutionState,
    iteration: jax.Array,
) -> CoevolutionState:
    """All inner steps of one outer iteration, then resets."""
    flat = flat_state(state).replace(
        judge_updates=jnp.zeros_like(state.judge_updates), meta_corrections=jnp.zeros_like(state.meta_corrections)
    )

    def body(carry: FlatState, step_in_iteration: jax.Array) -> tuple[FlatState, None]:
        return inner_step(shape, consts, knobs, carry, step_in_iteration), None

    flat, _ = jax.lax.scan(body, flat, jnp.arange(shape.steps_per_iteration, dtype=jnp.int32))
    return tree_state(shape, reset_judges(consts, knobs, flat, iteration), like=state)
