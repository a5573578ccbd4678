"""Exact diagnostics over the whole output space, computed inside the compiled program.

The grid-level work (every run's distribution and every judge's score table over all
outputs) happens here once; each registered metric (`harness.metrics`) is then a
function of one run's `RunView`, vmapped over the runs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from harness.coevolution import GridConstants, run_judge_slots, run_rewards
from harness.flat_params import judge_layout, policy_layout
from harness.grid import GridShape
from harness.knobs import holdout_pair_count
from harness.metrics import METRIC_NAMES, RunView, evaluate
from harness.models import judge_score_table, policy_log_prob_table
from harness.state import CoevolutionState

# One record of every registered metric: name -> array with a leading run axis (R,).
Diagnostics = dict[str, jax.Array]

__all__ = ["METRIC_NAMES", "Diagnostics", "diagnose"]


def _all_finite(tree: jax.Array) -> jax.Array:
    """Per leading-axis entry: every leaf's entries are finite."""
    leaves = [jnp.all(jnp.isfinite(leaf.reshape(leaf.shape[0], -1)), axis=1) for leaf in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves), axis=0)


def diagnose(shape: GridShape, consts: GridConstants, knobs: object, state: CoevolutionState) -> Diagnostics:
    """Every registered metric of every run, from its full policy distribution and judge score tables."""
    vocab, seq_len = shape.vocab_size, shape.seq_len
    policies, judges = state.runs.policy.params, state.slots.judge.params
    unravel_policy, unravel_judge = policy_layout(vocab).unravel, judge_layout(vocab).unravel
    log_pi = jax.vmap(lambda row: policy_log_prob_table(unravel_policy(row), vocab, seq_len))(policies)  # (R, N)
    slot_tables = jax.vmap(lambda row: judge_score_table(unravel_judge(row), vocab, seq_len))(judges)  # (J, N)
    reward = run_rewards(shape, consts, knobs, slot_tables)

    # Held-out accuracy of every slot, from its score table; masked to the run's held-out size.
    pairs, labels = consts.holdout_pairs[consts.slot_run], consts.holdout_labels[consts.slot_run]  # (J, H, ...)
    first = jnp.take_along_axis(slot_tables, pairs[..., 0], axis=1)
    second = jnp.take_along_axis(slot_tables, pairs[..., 1], axis=1)
    correct = (first > second) == (labels > 0.5)
    holdout_count = holdout_pair_count(knobs.meta_holdout_fraction, consts.q_star.shape[0])
    count = holdout_count[consts.slot_run]
    mask = jnp.arange(pairs.shape[1])[None, :] < count[:, None]
    slot_accuracy = jnp.sum(correct & mask, axis=1) / jnp.maximum(count, 1)

    slots, members = run_judge_slots(shape, consts, knobs)
    slot_finite = _all_finite(judges)
    judges_finite = jnp.all(slot_finite[slots] | ~members, axis=1)
    runs = RunView(
        q_star=consts.q_star,
        log_pi=log_pi,
        log_pi_initial=consts.initial_log_pi,
        reward=reward,
        holdout_accuracy=jnp.sum(jnp.where(members, slot_accuracy[slots], 0.0), axis=1) / knobs.n_judges,
        meta_on=holdout_count > 0,
        judge_updates=state.runs.judge_updates,
        meta_corrections=state.runs.meta_corrections,
        finite=_all_finite(policies) & judges_finite,
    )
    per_run = RunView(None, *([0] * 8))  # q* is shared by every run
    return jax.vmap(evaluate, in_axes=(per_run,))(runs)
