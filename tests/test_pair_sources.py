"""Pair sources inside the compiled grid: each side is drawn from what it says, and the look-ahead copy is discarded."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from harness.engine import streams
from harness.engine.state import take
from harness.engine.streams import StepKeys
from harness.grid import registry
from harness.grid.contract import StepContext
from harness.grid.judge_slots import pair_tokens
from harness.grid.knobs import Knobs
from harness.grid.member_context import MemberContext
from harness.grid.spec import Condition, GridSpec, RunSettings
from harness.grid.step_rows import Group
from harness.grid.trainer import GridTrainer
from harness.grid.training_step import judge_stages, pair_sides, step_keys
from tests.worlds import TWO_POSITIONS

SETTINGS = RunSettings(seeds=(0,), iterations=2, steps_per_iteration=5, batch_size=32)
CONDITIONS = {
    "baseline": Knobs(),
    "temporal-now": Knobs(rejected_from="past", temporal_gap=0),
    "temporal": Knobs(rejected_from="past", temporal_gap=1),
    "anchored": Knobs(rejected_from="initial"),
    "future": Knobs(chosen_from="lookahead", lookahead_steps=3),
    "averaged-pair": Knobs(n_judges=2, judge_ema=0.5),
}


@pytest.fixture(scope="module")
def trained() -> tuple[GridTrainer, pd.DataFrame, list]:
    spec = GridSpec(
        name="pairs",
        run=SETTINGS,
        world=TWO_POSITIONS,
        conditions=tuple(Condition(name=n, knobs=k) for n, k in CONDITIONS.items()),
    )
    program = GridTrainer(spec, max_shards=1)
    state, diagnostics = program.start()
    states, records = [state], [diagnostics]
    for iteration in range(SETTINGS.iterations):
        state, diagnostics = program.step(state, iteration)
        states.append(state)
        records.append(diagnostics)
    return program, program.metrics_table(records), states


def _run(program: GridTrainer, name: str) -> int:
    return [c for c, _ in program.layout.run_labels()].index(name)


def test_the_live_policy_as_the_past_side_is_a_coin_and_checkpoints_are_iteration_starts(trained) -> None:
    program, metrics, states = trained
    now = metrics[metrics.condition == "temporal-now"]
    np.testing.assert_allclose(now.pair_label_error, (1 - now.pair_identical) / 2, atol=1e-6)
    np.testing.assert_allclose(now.pair_label_error_distinct, 0.5, atol=1e-5)
    baseline = metrics[metrics.condition == "baseline"]
    assert np.all(baseline.pair_label_error.to_numpy() < 0.45)  # a pretrained judge's own labels beat a coin
    run = _run(program, "temporal")
    for iteration in range(SETTINGS.iterations):  # after iteration t, the latest checkpoint is the policy at its start
        np.testing.assert_array_equal(
            np.asarray(states[iteration + 1].runs.of("pair_sources").history[run, 0]),
            np.asarray(states[iteration].runs.policy.params[run]),
        )


def _draw_sides(program: GridTrainer, state, draws: int) -> tuple[np.ndarray, np.ndarray]:
    """Chosen and rejected output indices of every run, from `draws` independent pair batches."""
    constants, knobs, shape = program.constants, program.layout.knobs, program.shape
    contrast = jnp.ones(shape.n_runs, bool)
    group = constants.groups[shape.groups_of("judge_update")[0]]
    weights = shape.vocab_size ** jnp.arange(shape.seq_len - 1, -1, -1)

    @jax.jit
    def one_batch(key: jax.Array) -> tuple[jax.Array, jax.Array]:
        run_keys = jax.random.split(key, shape.n_runs)
        keys = StepKeys(run_keys, run_keys, None, jax.vmap(lambda k: jax.random.fold_in(k, 1))(run_keys), None)
        sides, _, _ = pair_sides(StepContext(shape, constants, knobs, state, keys, state.step, contrast, contrast))
        chosen, rejected = pair_tokens(shape, sides, keys, group)
        return chosen @ weights, rejected @ weights  # (R, B) output indices

    chosen, rejected = zip(*(one_batch(key) for key in jax.random.split(jax.random.PRNGKey(5), draws)), strict=True)
    return np.concatenate(chosen, axis=1), np.concatenate(rejected, axis=1)


def _goodness_of_fit(samples: np.ndarray, log_pi: np.ndarray, bins: int = 64) -> float:
    """Chi-square p-value of samples against a distribution over outputs, pooled into `bins` prefix classes."""
    group = np.arange(log_pi.size) // (log_pi.size // bins)
    expected = np.bincount(group, np.exp(log_pi), bins) * samples.size
    observed = np.bincount(group[samples], minlength=bins)
    keep = expected > 5
    observed, expected = observed[keep], expected[keep]
    return stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue


def test_anchored_rejection_draws_the_initial_policy_and_the_chosen_side_the_current_one(trained) -> None:
    program, _, states = trained
    # Move the policy well away from pi0, so the two distributions are easy to tell apart.
    state = states[-1]
    run = _run(program, "anchored")
    moved = state.runs.policy.params.at[run].set(program.constants.initial_policies[_run(program, "future")] * 0.0)
    state = state.replace(runs=state.runs.replace(policy=state.runs.policy.replace(params=moved)))
    chosen, rejected = _draw_sides(program, state, draws=150)
    uniform = np.full(program.world.n_outputs, -np.log(program.world.n_outputs))  # a zero row is the uniform policy
    initial = np.asarray(program.constants.initial_log_pi[run])
    assert _goodness_of_fit(rejected[run], initial) > 1e-3
    assert _goodness_of_fit(rejected[run], uniform) < 1e-6
    assert _goodness_of_fit(chosen[run], uniform) > 1e-3


def test_the_lookahead_copy_is_discarded(trained) -> None:
    program, _, states = trained
    state = states[-1]
    run, shape = _run(program, "future"), program.shape
    run_keys = jax.random.split(jax.random.PRNGKey(9), shape.n_runs)
    members = jnp.broadcast_to(run_keys[:, None], (shape.n_runs, shape.max_members, 2))
    keys = StepKeys(run_keys, run_keys, members, run_keys, run_keys)
    due = jnp.ones(shape.n_runs, bool)
    step = StepContext(shape, program.constants, program.layout.knobs, state, keys, state.step, due)

    def stages(state):
        after, stepped, _ = judge_stages(step._replace(state=state))
        return after, stepped.sides

    after, sides = jax.jit(stages)(state)
    np.testing.assert_array_equal(np.asarray(after.runs.policy.params), np.asarray(state.runs.policy.params))
    chosen = sides.chosen
    assert np.max(np.abs(np.asarray(chosen[run] - state.runs.policy.params[run]))) > 0  # the copy did move


def test_a_rows_member_reads_its_own_run_and_judge_and_the_average_row_is_its_recurrence(trained) -> None:
    """The second judge of a two-judge run, as the moving average's row sees it on a step: its own slot, run, pair
    batch (its run's, at its place in the work group) and key (its mechanism's, folded with the judge's index); the
    row returns the judge as given and the average d·ema + (1 − d)·judge."""
    program, _, states = trained
    shape, constants, knobs, state = program.shape, program.constants, program.layout.knobs, states[-1]
    due = jnp.ones(shape.n_runs, bool)
    keys = step_keys(shape, constants, state, due)
    step = StepContext(shape, constants, knobs, state, keys, jnp.int32(3), due, jnp.zeros(shape.n_runs, bool))
    sides, _, _ = pair_sides(step)
    step = step._replace(sides=sides)
    index = shape.groups_of("judge_ema")[0]
    group = Group(constants.groups[index], shape.groups[index])
    run = _run(program, "averaged-pair")
    slot = int(constants.run_first_slot[run]) + 1
    position = list(np.asarray(group.ids.slot_ids)).index(slot)

    def member_at(where: int, stage: str = "updates") -> MemberContext:
        judges, owns = state.slots.judge, state.slots.mechanisms
        return MemberContext(step, group, stage, judges, owns, "judge_ema", jnp.int32(where))

    member = member_at(position)
    assert int(member.member) == 1 and float(member.knobs.judge_ema) == 0.5 and int(member.counter) == 3
    np.testing.assert_array_equal(member.pretrained, constants.pretrained_judges[slot])
    np.testing.assert_array_equal(member.initial_policy, constants.initial_policies[run])
    chosen, rejected = pair_tokens(shape, sides, keys, group.ids)
    np.testing.assert_array_equal(member.pairs[0], chosen[position])
    np.testing.assert_array_equal(member.pairs[1], rejected[position])
    np.testing.assert_array_equal(member.sides.chosen, sides.chosen[run])
    own = jax.random.fold_in(streams.own_key(keys.judge_pairs[run], "judge_ema"), 1)
    np.testing.assert_array_equal(member.key, own)
    first = member_at(list(np.asarray(group.ids.slot_ids)).index(slot - 1))
    assert int(first.member) == 0 and not np.array_equal(first.key, member.key)  # each judge its own draws

    (row,) = [row for row in registry.rows(shape.mechanisms) if row.name == "judge_ema"]
    judge, average = take(state.slots.judge, slot), state.slots.of("judge_ema")[slot]
    new_judge, new_average = row.update(judge, member, average)
    assert new_judge is judge
    expected = 0.5 * np.asarray(average, np.float64) + 0.5 * np.asarray(judge.params, np.float64)
    np.testing.assert_allclose(np.asarray(new_average), expected, rtol=1e-6)
    with pytest.raises(AttributeError, match=r"MemberContext\.pairs is a judge slot's"):
        _ = member_at(0, stage="sides").pairs
