"""Exact diagnostics over the whole output space, computed inside the compiled program.

The grid-level work (every run's distribution, every judge's score table over all outputs, every run's
reward table) happens here once; each used mechanism's view (`harness.grid.contract.Mechanism.view`) adds
what its metrics read, and each metric of the grid (`harness.engine.metrics`) is then a function of
one run's `RunView`, vmapped over the runs. Each used mechanism's per-run tables (`contract.RunTable`) are
computed from the same context, beside the metrics.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from harness.engine.flat_params import judge_layout, policy_layout
from harness.engine.metrics import MechanismShapeError, RunView, evaluate
from harness.engine.models import judge_score_table, policy_log_prob_table
from harness.engine.state import CoevolutionState
from harness.grid import registry
from harness.grid.contract import DiagnosticsContext, GridConstants, GridShape, Mechanism
from harness.grid.contract_checks import noting_place
from harness.grid.judge_slots import run_judge_slots
from harness.grid.knobs import RunKnobs
from harness.grid.reward import reward_judges, run_rewards

# One record of every metric of a grid: name -> array with a leading run axis (R,); and of every per-run table's
# value columns (`RunTable.key`: "<table>/<column>") -> (R, K).
Diagnostics = dict[str, jax.Array]

__all__ = ["Diagnostics", "diagnose"]


def _all_finite(tree: jax.Array) -> jax.Array:
    """Per leading-axis entry: every leaf's entries are finite."""
    leaves = [jnp.all(jnp.isfinite(leaf.reshape(leaf.shape[0], -1)), axis=1) for leaf in jax.tree.leaves(tree)]
    return jnp.all(jnp.stack(leaves), axis=0)


def policy_log_prob_tables(shape: GridShape, rows: jax.Array) -> jax.Array:
    """Every policy row's (R, P) log π of every output of the grid's world, (R, N)."""
    unravel = policy_layout(shape.vocab_size, shape.seq_len, shape.model.policy).unravel
    return jax.vmap(lambda row: policy_log_prob_table(unravel(row), shape.vocab_size, shape.seq_len))(rows)


def judge_score_tables(shape: GridShape, rows: jax.Array) -> jax.Array:
    """Every judge row's (J, P) score of every output of the grid's world, (J, N)."""
    unravel = judge_layout(shape.vocab_size, shape.seq_len, shape.model.judge).unravel
    return jax.vmap(lambda row: judge_score_table(unravel(row), shape.vocab_size, shape.seq_len))(rows)


def _view(mechanism: Mechanism, context: DiagnosticsContext) -> Any:
    with jax.named_scope(mechanism.name):  # the compiled program's metadata names the view's mechanism
        return noting_place(mechanism.view, "view")(context)


def diagnose(shape: GridShape, constants: GridConstants, knobs: RunKnobs, state: CoevolutionState) -> Diagnostics:
    """Every metric of the grid's mechanisms for every run, from its full policy distribution and judge score
    tables."""
    policies, judges = state.runs.policy.params, state.slots.judge.params
    log_pi = policy_log_prob_tables(shape, policies)  # (R, N)
    score_table = partial(judge_score_tables, shape)
    slot_tables = score_table(judges)  # (J, N)
    # The judges' reward (what judge-perceived quality and alignment measure): the rows the mechanisms choose, their
    # scores combined over each run's judges, before any `shape_reward` hook (a per-sample shaping such as a KL penalty
    # or a gold reward is not the judges' view). Where the rows are the judges' own, their tables are already scored.
    reward_rows = reward_judges(shape, constants, knobs, state.slots)
    reward = run_rewards(shape, constants, knobs, slot_tables if reward_rows is judges else score_table(reward_rows))

    slots, members = run_judge_slots(shape, constants)
    slot_finite = _all_finite(judges)
    judges_finite = jnp.all(slot_finite[slots] | ~members, axis=1)
    context = DiagnosticsContext(
        shape, constants, knobs, state, log_pi, slot_tables, reward, slots, members, score_table
    )
    runs = RunView(
        q_star=constants.q_star,
        log_pi=log_pi,
        log_pi_initial=constants.initial_log_pi,
        reward=reward,
        finite=_all_finite(policies) & judges_finite,
        mechanisms={m.name: _view(m, context) for m in shape.used_mechanisms if m.view is not None},
    )
    per_run = jax.tree.map(lambda _: 0, runs).replace(q_star=None)  # q* is shared by every run
    metrics = registry.metric_columns(shape.used_mechanisms)
    record = jax.vmap(partial(evaluate, metrics=metrics), in_axes=(per_run,))(runs)
    for table in registry.tables(shape.used_mechanisms):
        values = noting_place(table.compute, f"table '{table.name}' compute")(context)
        for column in table.columns:
            if jnp.shape(values[column]) != (shape.n_runs, table.size):
                raise MechanismShapeError(
                    f"table '{table.name}' column '{column}' computes shape {jnp.shape(values[column])}, not "
                    f"(runs, index entries) = {(shape.n_runs, table.size)}"
                )
            record[table.key(column)] = values[column].astype(jnp.float32)
    return record
