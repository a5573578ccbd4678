"""Exact diagnostics over the whole output space, computed inside the compiled program."""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import jax.scipy.special

from harness.coevolution import CoevolutionState, GridConstants
from harness.grid import GridShape
from harness.knobs import RunKnobs, holdout_pair_count
from harness.models import judge_score_table, policy_log_prob_table
from harness.stats import spearman

METRIC_NAMES = (
    "policy_quality",
    "judge_alignment",
    "policy_entropy",
    "judge_perceived_quality",
    "meta_accuracy",
    "mode_index",
    "mode_quality",
    "judge_updates",
    "meta_corrections",
    "finite",
)


@flax.struct.dataclass
class Diagnostics:
    """One record per run (leading axis R) at one outer iteration.

    policy_quality = Σ π q*; judge_alignment = Spearman(J̄, q*) with J̄ the mean over
    the run's judges; policy_entropy in nats; judge_perceived_quality = Σ π J̄;
    meta_accuracy = mean held-out pairwise accuracy of the run's judges (NaN where meta
    is off); mode_index / mode_quality: most probable output and its q*;
    judge_updates: steps with a judge update this iteration; meta_corrections:
    meta-correction steps this iteration, summed over the run's judges; finite:
    whether every parameter of the run is finite.
    """

    policy_quality: jax.Array
    judge_alignment: jax.Array
    policy_entropy: jax.Array
    judge_perceived_quality: jax.Array
    meta_accuracy: jax.Array
    mode_index: jax.Array
    mode_quality: jax.Array
    judge_updates: jax.Array
    meta_corrections: jax.Array
    finite: jax.Array


def _all_finite(tree: jax.Array) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(leaf.reshape(leaf.shape[0], -1)), axis=1) for leaf in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves), axis=0)


def diagnose(shape: GridShape, consts: GridConstants, knobs: RunKnobs, state: CoevolutionState) -> Diagnostics:
    """Exact metrics of every run from its full policy distribution and judge score tables."""
    vocab, seq_len, n_runs = shape.vocab_size, shape.seq_len, shape.n_runs
    log_pi = jax.vmap(policy_log_prob_table, (0, None, None))(state.policy_params, vocab, seq_len)  # (R, N)
    slot_tables = jax.vmap(judge_score_table, (0, None, None))(state.judge_params, vocab, seq_len)  # (J, N)
    mean_judge = jax.ops.segment_sum(slot_tables, consts.slot_run, n_runs) / knobs.n_judges[:, None]
    pi = jnp.exp(log_pi)
    mode = jnp.argmax(log_pi, axis=1).astype(jnp.int32)

    # Held-out accuracy of every slot, from its score table; masked to the run's held-out size.
    first, second = consts.holdout_pairs[:, 0], consts.holdout_pairs[:, 1]
    correct = (slot_tables[:, first] > slot_tables[:, second]) == (consts.holdout_labels[None, :] > 0.5)
    count = holdout_pair_count(knobs.meta_holdout_fraction, consts.q_star.shape[0])[consts.slot_run]
    mask = jnp.arange(consts.holdout_pairs.shape[0])[None, :] < count[:, None]
    slot_accuracy = jnp.sum(correct & mask, axis=1) / jnp.maximum(count, 1)
    run_accuracy = jax.ops.segment_sum(slot_accuracy, consts.slot_run, n_runs) / knobs.n_judges
    meta_on = holdout_pair_count(knobs.meta_holdout_fraction, consts.q_star.shape[0]) > 0

    judges_finite = jax.ops.segment_min(
        _all_finite(state.judge_params).astype(jnp.int32), consts.slot_run, n_runs
    ).astype(bool)
    return Diagnostics(
        policy_quality=pi @ consts.q_star,
        judge_alignment=jax.vmap(spearman, (0, None))(mean_judge, consts.q_star),
        policy_entropy=jnp.sum(jax.scipy.special.entr(pi), axis=1),
        judge_perceived_quality=jnp.sum(pi * mean_judge, axis=1),
        meta_accuracy=jnp.where(meta_on, run_accuracy, jnp.nan),
        mode_index=mode,
        mode_quality=consts.q_star[mode],
        judge_updates=state.judge_updates,
        meta_corrections=state.meta_corrections,
        finite=_all_finite(state.policy_params) & judges_finite,
    )
