"""Exact diagnostics over the whole output space, computed inside the compiled program.

The grid-level work (every run's distribution and every judge's score table over all
outputs) happens here once; each registered metric (`harness.metrics`) is then a
function of one run's `RunView`, vmapped over the runs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from harness.coevolution import CoevolutionState, GridConstants
from harness.grid import GridShape
from harness.knobs import RunKnobs, holdout_pair_count
from harness.metrics import METRIC_NAMES, RunView, evaluate
from harness.models import judge_score_table, policy_log_prob_table

# One record of every registered metric: name -> array with a leading run axis (R,).
Diagnostics = dict[str, jax.Array]

__all__ = ["METRIC_NAMES", "Diagnostics", "diagnose"]


def _all_finite(tree: jax.Array) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(leaf.reshape(leaf.shape[0], -1)), axis=1) for leaf in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves), axis=0)


def diagnose(shape: GridShape, consts: GridConstants, knobs: RunKnobs, state: CoevolutionState) -> Diagnostics:
    """Every registered metric of every run, from its full policy distribution and judge score tables."""
    vocab, seq_len, n_runs = shape.vocab_size, shape.seq_len, shape.n_runs
    log_pi = jax.vmap(policy_log_prob_table, (0, None, None))(state.policy_params, vocab, seq_len)  # (R, N)
    slot_tables = jax.vmap(judge_score_table, (0, None, None))(state.judge_params, vocab, seq_len)  # (J, N)
    reward = jax.ops.segment_sum(slot_tables, consts.slot_run, n_runs) / knobs.n_judges[:, None]

    # Held-out accuracy of every slot, from its score table; masked to the run's held-out size.
    first, second = consts.holdout_pairs[:, 0], consts.holdout_pairs[:, 1]
    correct = (slot_tables[:, first] > slot_tables[:, second]) == (consts.holdout_labels[None, :] > 0.5)
    holdout_count = holdout_pair_count(knobs.meta_holdout_fraction, consts.q_star.shape[0])
    count = holdout_count[consts.slot_run]
    mask = jnp.arange(consts.holdout_pairs.shape[0])[None, :] < count[:, None]
    slot_accuracy = jnp.sum(correct & mask, axis=1) / jnp.maximum(count, 1)

    judges_finite = jax.ops.segment_min(
        _all_finite(state.judge_params).astype(jnp.int32), consts.slot_run, n_runs
    ).astype(bool)
    runs = RunView(
        q_star=consts.q_star,
        log_pi=log_pi,
        reward=reward,
        holdout_accuracy=jax.ops.segment_sum(slot_accuracy, consts.slot_run, n_runs) / knobs.n_judges,
        meta_on=holdout_count > 0,
        judge_updates=state.judge_updates,
        meta_corrections=state.meta_corrections,
        finite=_all_finite(state.policy_params) & judges_finite,
    )
    per_run = RunView(None, *([0] * 7))  # q* is shared by every run
    return jax.vmap(evaluate, in_axes=(per_run,))(runs)
