"""Exact diagnostics over the whole output space, computed inside the compiled program.

The grid-level work (every run's distribution and every judge's score table over all
outputs) happens here once; each registered metric (`harness.engine.metrics`) is then a
function of one run's `RunView`, vmapped over the runs.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from harness.engine import streams
from harness.engine.flat_params import judge_layout, policy_layout
from harness.engine.knobs import RunKnobs, holdout_pair_count
from harness.engine.metrics import METRIC_NAMES, RunView, evaluate
from harness.engine.models import judge_score_table, policy_log_prob_table
from harness.engine.pair_audits import PairAudit, audit_pairs
from harness.engine.state import CoevolutionState
from harness.grid.layout import GridShape
from harness.grid.step_table import reward_judges
from harness.grid.training_step import GridConstants, contrast_runs, pair_sides, run_judge_slots, run_rewards

# One record of every registered metric: name -> array with a leading run axis (R,).
Diagnostics = dict[str, jax.Array]

__all__ = ["METRIC_NAMES", "Diagnostics", "diagnose"]


def _all_finite(tree: jax.Array) -> jax.Array:
    """Per leading-axis entry: every leaf's entries are finite."""
    leaves = [jnp.all(jnp.isfinite(leaf.reshape(leaf.shape[0], -1)), axis=1) for leaf in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves), axis=0)


def _pair_audits(
    shape: GridShape,
    constants: GridConstants,
    knobs: RunKnobs,
    state: CoevolutionState,
    log_pi: jax.Array,
    slot_tables: jax.Array,
) -> PairAudit:
    """Every judge slot's exact pair audit (`harness.engine.pair_audits`), leading axis J, of the pairs a judge update
    draws from the state as it stands: the policy, judges and checkpoints of the iteration just trained (the last
    step's), the look-ahead drawn with the next step's keys; contrast pairs with probability contrast_mix where
    the run has them, else self-labelled."""
    vocab, seq_len = shape.vocab_size, shape.seq_len
    contrast = contrast_runs(knobs)
    share = jnp.where(contrast, knobs.contrast_mix, 0.0)
    pi = jnp.exp(log_pi)
    chosen = rejected = pi
    if shape.contrast:  # the sides' distributions, with the look-ahead drawn as the next step would draw it
        step_keys = partial(streams.step_keys, shape.streams, max_members=shape.max_members)
        keys = jax.vmap(step_keys, (0, None, None, 0, 0))(
            state.runs.stream_key, state.step, jnp.bool_(True), knobs.anchor_fraction > 0, knobs.n_judges
        )
        unravel = policy_layout(vocab, seq_len, shape.model.policy).unravel
        table = jax.vmap(lambda row: jnp.exp(policy_log_prob_table(unravel(row), vocab, seq_len)))
        chosen, rejected = (table(rows) for rows in pair_sides(shape, constants, knobs, state, keys.contrast, contrast))
    referees, with_referee = slot_tables, bool(shape.groups_of("referee"))
    if with_referee:
        unravel_judge = judge_layout(vocab, seq_len, shape.model.judge).unravel
        referees = jax.vmap(lambda row: judge_score_table(unravel_judge(row), vocab, seq_len))(
            constants.pretrained_judges
        )
    run = constants.slot_run
    audit = partial(audit_pairs, q_star=constants.q_star, with_referee=with_referee)
    return jax.lax.map(
        lambda slot: audit(*slot),
        (chosen[run], rejected[run], pi[run], share[run], slot_tables, referees, knobs.referee_margin[run]),
    )


def diagnose(shape: GridShape, constants: GridConstants, knobs: RunKnobs, state: CoevolutionState) -> Diagnostics:
    """Every registered metric of every run, from its full policy distribution and judge score tables."""
    vocab, seq_len = shape.vocab_size, shape.seq_len
    policies, judges = state.runs.policy.params, state.slots.judge.params
    unravel_policy = policy_layout(vocab, seq_len, shape.model.policy).unravel
    unravel_judge = judge_layout(vocab, seq_len, shape.model.judge).unravel
    log_pi = jax.vmap(lambda row: policy_log_prob_table(unravel_policy(row), vocab, seq_len))(policies)  # (R, N)
    score_table = jax.vmap(lambda row: judge_score_table(unravel_judge(row), vocab, seq_len))
    slot_tables = score_table(judges)  # (J, N)
    # The reward the policy trains on (what judge-perceived quality and alignment measure): from the judges'
    # moving averages where runs keep them, else the judges' own tables.
    reward_rows = reward_judges(shape, constants, knobs, state.slots)
    # (Where no run averages they are the judges' own rows, already scored.)
    reward = run_rewards(shape, constants, knobs, slot_tables if reward_rows is judges else score_table(reward_rows))

    # Held-out accuracy of every slot, from its score table; masked to the run's held-out size.
    pairs, labels = (
        constants.holdout_pairs[constants.slot_run],
        constants.holdout_labels[constants.slot_run],
    )  # (J, H, ...)
    first = jnp.take_along_axis(slot_tables, pairs[..., 0], axis=1)
    second = jnp.take_along_axis(slot_tables, pairs[..., 1], axis=1)
    correct = (first > second) == (labels > 0.5)
    holdout_count = holdout_pair_count(knobs.meta_holdout_fraction, constants.q_star.shape[0])
    count = holdout_count[constants.slot_run]
    mask = jnp.arange(pairs.shape[1])[None, :] < count[:, None]
    slot_accuracy = jnp.sum(correct & mask, axis=1) / jnp.maximum(count, 1)

    slots, members = run_judge_slots(shape, constants, knobs)
    slot_pairs = _pair_audits(shape, constants, knobs, state, log_pi, slot_tables)
    # Each run's audit: the mean over its judges (a referee's error over the judges that re-judge any pair).
    real = jnp.where(members, 1.0, jnp.nan)
    run_pairs = jax.tree.map(lambda leaf: jnp.nanmean(leaf[slots] * real, axis=1), slot_pairs)
    slot_finite = _all_finite(judges)
    judges_finite = jnp.all(slot_finite[slots] | ~members, axis=1)
    runs = RunView(
        q_star=constants.q_star,
        log_pi=log_pi,
        log_pi_initial=constants.initial_log_pi,
        reward=reward,
        holdout_accuracy=jnp.sum(jnp.where(members, slot_accuracy[slots], 0.0), axis=1) / knobs.n_judges,
        meta_on=holdout_count > 0,
        judge_updates=state.runs.judge_updates,
        meta_corrections=state.runs.meta_corrections,
        finite=_all_finite(policies) & judges_finite,
        pairs=run_pairs,
        referee_on=knobs.referee_margin > 0,
    )
    per_run = jax.tree.map(lambda _: 0, runs).replace(q_star=None)  # q* is shared by every run
    return jax.vmap(evaluate, in_axes=(per_run,))(runs)
