"""Each knob does exactly what it says, on one tiny grid where every condition is a paired run of seed 0.

Conditions of one seed share the initial policy, the pretrained judges and all sampling noise, so a
condition and its counterpart without a mechanism differ only by what that mechanism does.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from harness.engine import keys
from harness.engine.flat_params import ravel_rows
from harness.engine.state import CoevolutionState, fresh_networks, initial_state
from harness.grid import registry
from harness.grid.knobs import Knobs, choices, knob_fields, program_knobs, stack_knobs
from harness.grid.origins import JudgeSource
from harness.grid.pretrain import pretrain_judges
from harness.grid.reward import policy_step
from harness.grid.spec import Condition, GridSpec, RunSettings
from harness.grid.trainer import GridTrainer
from harness.grid.training_step import mechanism_states
from tests.worlds import TWO_POSITIONS

STEPS = 20
ITERATIONS = 2
META = {"meta_holdout_fraction": 0.5}  # 32 of the 64 outputs: a perfect check stays unlikely
CONDITIONS = {
    "base": Knobs(),
    "frozen": Knobs(freeze_judge=True),
    "every4": Knobs(judge_update_every=4),
    "every5": Knobs(judge_update_every=5),
    "every20": Knobs(judge_update_every=20),
    "reset1": Knobs(reset_every=1),
    "reset2": Knobs(reset_every=2),
    "anchor": Knobs(anchor_fraction=0.25),
    "anchor_frozen": Knobs(anchor_fraction=0.25, freeze_judge=True),
    "anchor_never_due": Knobs(anchor_fraction=0.25, judge_update_every=2 * STEPS),
    "meta_always": Knobs(meta_accuracy_threshold=1.0, **META),
    "meta_always_pair": Knobs(meta_accuracy_threshold=1.0, n_judges=2, **META),
    "meta_never": Knobs(meta_accuracy_threshold=0.0, **META),
    "meta_every3": Knobs(meta_accuracy_threshold=1.0, meta_update_every=3, **META),
    "meta_every5": Knobs(meta_accuracy_threshold=1.0, meta_update_every=5, **META),
    "ensemble": Knobs(n_judges=3),
    "ensemble_min": Knobs(n_judges=3, ensemble_aggregation="min"),
    "ensemble_cautious": Knobs(n_judges=3, ensemble_aggregation="mean_minus_std", ensemble_std_weight=2.0),
    "single_min": Knobs(ensemble_aggregation="min"),
    "ema": Knobs(judge_ema=0.9),
    "ema_every20": Knobs(judge_ema=0.75, judge_update_every=20),
    "ema_reset1": Knobs(judge_ema=0.9, reset_every=1),
}


@dataclass
class Trace:
    program: GridTrainer
    judges: list  # host judge params (J, ...) at start and after each iteration
    judge_adam: list  # host judge Adam states (J, ...) likewise
    judge_emas: list  # host judge moving-average rows (J, P) likewise
    policies: list  # host policy params (R, ...) likewise
    diagnostics: list  # per iteration (after it)

    def run(self, name: str) -> int:
        return self.program.layout.run_labels().index((name, 0))

    def slots(self, name: str) -> np.ndarray:
        return np.flatnonzero(self.program.layout.slot_run == self.run(name))

    def judge(self, name: str, after: int, member: int = 0) -> chex.ArrayTree:
        """Judge `member` of condition `name` after `after` iterations (0: at the start)."""
        slot = self.slots(name)[member]
        return jax.tree.map(lambda x: x[slot], self.judges[after])

    def adam(self, name: str, after: int) -> optax.ScaleByAdamState:
        """Adam state (count, mu, nu) of the first judge of condition `name` after `after` iterations."""
        slot = self.slots(name)[0]
        return jax.tree.map(lambda x: x[slot], self.judge_adam[after])[0]

    def policy(self, name: str, after: int) -> chex.ArrayTree:
        run = self.run(name)
        return jax.tree.map(lambda x: x[run], self.policies[after])

    def metric(self, metric: str, name: str) -> list:
        """Metric of condition `name` after each iteration."""
        return [np.asarray(d[metric])[self.run(name)].item() for d in self.diagnostics]

    def pretrained(self, member: int = 0) -> chex.ArrayTree:
        """Pretraining's own output for (seed 0, member), independent of the grid's slot layout."""
        target = self.program.spec.pretrain.target_spearman
        source = self.program.origins.judge_sources.index(JudgeSource(None, 0, member, target))
        return jax.tree.map(lambda x: np.asarray(x[source]), self.program.pretrained.params)


@pytest.fixture(scope="module")
def trace() -> Trace:
    spec = GridSpec(
        name="knobs",
        run=RunSettings(seeds=(0,), iterations=ITERATIONS, steps_per_iteration=STEPS, batch_size=16),
        world=TWO_POSITIONS,
        conditions=tuple(Condition(name=n, knobs=k) for n, k in CONDITIONS.items()),
    )
    program = GridTrainer(spec)
    state, _ = program.start()
    judges, adam, emas, policies, diagnostics = [], [], [], [], []
    for iteration in range(ITERATIONS + 1):
        if iteration:
            state, record = program.step(state, iteration - 1)  # donates the old state: copy what we keep first
            diagnostics.append(jax.device_get(record))
        judges.append(jax.device_get(program.judge_params(state.slots.judge.params)))
        adam.append(jax.device_get(state.slots.judge.adam))
        emas.append(np.array(jax.device_get(state.slots.of("judge_ema"))))  # a copy: step() donates the state
        policies.append(jax.device_get(program.policy_params(state)))
    assert all(np.all(d["finite"]) for d in diagnostics)
    return Trace(program, judges, adam, emas, policies, diagnostics)


def _differ(a: chex.ArrayTree, b: chex.ArrayTree, atol: float = 1e-6) -> bool:
    return any(
        not np.allclose(x, y, rtol=0, atol=atol) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def test_judges_start_pretrained(trace: Trace) -> None:
    for name in CONDITIONS:
        for member, _ in enumerate(trace.slots(name)):
            chex.assert_trees_all_equal(trace.judge(name, 0, member), trace.pretrained(member))


def test_frozen_judge_is_bit_identical_to_pretrained(trace: Trace) -> None:
    for after in range(1, ITERATIONS + 1):
        chex.assert_trees_all_equal(trace.judge("frozen", after), trace.pretrained())
        assert _differ(trace.judge("base", after), trace.pretrained())
    assert trace.metric("judge_updates", "frozen") == [0] * ITERATIONS
    assert _differ(trace.policy("frozen", ITERATIONS), trace.policy("frozen", 0))  # the policy still trains


@pytest.mark.parametrize(("name", "every"), [("base", 1), ("every4", 4), ("every5", 5), ("every20", 20)])
def test_judge_update_cadence(trace: Trace, name: str, every: int) -> None:
    assert trace.metric("judge_updates", name) == [STEPS // every] * ITERATIONS
    assert _differ(trace.judge(name, 1), trace.pretrained())


def test_ensemble_counts_judge_updates_per_run(trace: Trace) -> None:
    assert trace.metric("judge_updates", "ensemble") == [STEPS] * ITERATIONS


def test_reset_every_returns_judges_to_pretrained(trace: Trace) -> None:
    slot = trace.slots("reset1")[0]
    pretrained_judges = trace.program.judge_params(trace.program.constants.pretrained_judges)
    pretrained_slot = jax.tree.map(lambda x: np.asarray(x[slot]), pretrained_judges)
    chex.assert_trees_all_equal(pretrained_slot, trace.pretrained())
    for after in range(1, ITERATIONS + 1):
        chex.assert_trees_all_equal(trace.judge("reset1", after), pretrained_slot)
        assert _differ(trace.judge("base", after), pretrained_slot)  # reset_every=0: never reset
    assert trace.metric("judge_updates", "reset1") == [STEPS] * ITERATIONS  # it did train in between
    # reset_every=2: trained judge after iteration 1, pretrained again after iteration 2.
    assert _differ(trace.judge("reset2", 1), pretrained_slot)
    chex.assert_trees_all_equal(trace.judge("reset2", 2), pretrained_slot)
    # Before its first reset, reset2 is the same run as base.
    chex.assert_trees_all_close(trace.judge("reset2", 1), trace.judge("base", 1), rtol=0, atol=1e-6)


def _is_fresh(adam: optax.ScaleByAdamState) -> bool:
    return int(adam.count) == 0 and not any(np.any(m) for m in jax.tree.leaves((adam.mu, adam.nu)))


def test_reset_restarts_the_judges_adam(trace: Trace) -> None:
    """A reset judge starts Adam afresh (no step count, zero moments); the others keep counting."""
    for after in range(1, ITERATIONS + 1):
        assert _is_fresh(trace.adam("reset1", after))
        assert int(trace.adam("base", after).count) == STEPS * after
    assert int(trace.adam("reset2", 1).count) == STEPS and not _is_fresh(trace.adam("reset2", 1))
    assert _is_fresh(trace.adam("reset2", 2))


def test_anchor_changes_the_judge_when_an_update_is_due(trace: Trace) -> None:
    assert _differ(trace.judge("anchor", 1), trace.judge("base", 1))
    assert trace.metric("judge_updates", "anchor") == [STEPS] * ITERATIONS


def test_anchor_rides_on_the_judge_update(trace: Trace) -> None:
    for name in ("anchor_frozen", "anchor_never_due"):
        assert trace.metric("judge_updates", name) == [0] * ITERATIONS
        for after in range(1, ITERATIONS + 1):
            chex.assert_trees_all_equal(trace.judge(name, after), trace.pretrained())
            # Same judge, same noise: the policy is the frozen run's policy.
            chex.assert_trees_all_close(trace.policy(name, after), trace.policy("frozen", after), rtol=0, atol=1e-6)


def test_meta_threshold_one_corrects_on_every_due_check(trace: Trace) -> None:
    assert trace.metric("meta_corrections", "meta_always") == [STEPS] * ITERATIONS
    assert trace.metric("meta_corrections", "meta_always_pair") == [2 * STEPS] * ITERATIONS
    assert all(a < 1.0 for a in trace.metric("meta_accuracy", "meta_always_pair"))
    assert _differ(trace.judge("meta_always", 1), trace.judge("base", 1))


def test_meta_threshold_zero_never_corrects(trace: Trace) -> None:
    assert trace.metric("meta_corrections", "meta_never") == [0] * ITERATIONS
    assert trace.metric("meta_corrections", "base") == [0] * ITERATIONS
    for after in range(1, ITERATIONS + 1):
        chex.assert_trees_all_close(trace.judge("meta_never", after), trace.judge("base", after), rtol=0, atol=1e-6)
        chex.assert_trees_all_close(trace.policy("meta_never", after), trace.policy("base", after), rtol=0, atol=1e-6)
    assert all(np.isnan(trace.metric("meta_accuracy", "base")))
    assert not any(np.isnan(trace.metric("meta_accuracy", "meta_never")))


@pytest.mark.parametrize(("name", "every"), [("meta_every3", 3), ("meta_every5", 5)])
def test_meta_update_cadence(trace: Trace, name: str, every: int) -> None:
    assert trace.metric("meta_corrections", name) == [STEPS // every] * ITERATIONS


def test_ensemble_member_zero_is_the_single_judge(trace: Trace) -> None:
    pretrained_judges = trace.program.judge_params(trace.program.constants.pretrained_judges)
    ensemble, single = trace.slots("ensemble"), trace.slots("base")
    assert len(ensemble) == 3
    assert len(single) == 1
    chex.assert_trees_all_equal(
        jax.tree.map(lambda x: x[ensemble[0]], pretrained_judges),
        jax.tree.map(lambda x: x[single[0]], pretrained_judges),
    )
    for member in (1, 2):
        assert _differ(
            jax.tree.map(lambda x, m=member: x[ensemble[m]], pretrained_judges),
            trace.pretrained(),
        )
    # Pretraining member 0 of seed 0 on its own gives the same judge as inside the 3-member batch.
    init_key, data_key = keys.judge_keys(jnp.int32(0), jnp.int32(0))
    alone = pretrain_judges(init_key[None], data_key[None], trace.program.world, trace.program.spec.pretrain)
    assert int(alone.steps[0]) == int(trace.program.pretrained.steps[0])
    chex.assert_trees_all_close(jax.tree.map(lambda x: x[0], alone.params), trace.pretrained(), rtol=0, atol=1e-6)


def test_ensemble_aggregation_changes_the_reward_and_nothing_else(trace: Trace) -> None:
    """Same judges at the start, same noise: the aggregation rule alone separates the runs; one judge is its own
    minimum, so a single-judge run is the same run under every rule."""
    for name in ("ensemble_min", "ensemble_cautious"):
        for member in range(3):
            chex.assert_trees_all_equal(trace.judge(name, 0, member), trace.judge("ensemble", 0, member))
        assert _differ(trace.policy(name, ITERATIONS), trace.policy("ensemble", ITERATIONS))
        assert trace.metric("judge_updates", name) == [STEPS] * ITERATIONS
    chex.assert_trees_all_close(trace.policy("single_min", ITERATIONS), trace.policy("base", ITERATIONS), atol=1e-6)
    assert trace.metric("policy_quality", "single_min") == pytest.approx(trace.metric("policy_quality", "base"))


def test_run_knobs_are_the_program_knobs_in_order() -> None:
    built_in = [m.name for m in registry.active()]
    pretraining = {"judge_pretrain_target", "judge_pretrain_examples", "judge_label_corruption", "judge_pretrain_steps"}
    host_only = pretraining | {"record_best_of_n"}  # what acts before the program: no array in it
    assert list(program_knobs(built_in)) == [name for name in knob_fields(built_in) if name not in host_only]
    stacked = stack_knobs([Knobs(), Knobs(judge_ema=0.5, rejected_from="initial", freeze_judge=True)], built_in)
    assert stacked.names == program_knobs(built_in)
    assert jax.tree.leaves(stacked) == [getattr(stacked, name) for name in stacked.names]  # leaves in knob order
    assert all(getattr(stacked, name).shape == (2,) for name in stacked.names)
    assert stacked.rejected_from.dtype == jnp.int32
    assert stacked.rejected_from.tolist() == [0, choices("rejected_from").index("initial")]
    assert stacked.judge_ema.dtype == jnp.float32 and stacked.judge_ema.tolist() == [0.0, 0.5]
    assert stacked.freeze_judge.dtype == jnp.bool_ and stacked.freeze_judge.tolist() == [False, True]


def _pretrained_row(trace: Trace, name: str) -> np.ndarray:
    return np.asarray(trace.program.constants.pretrained_judges[trace.slots(name)[0]])


def _judge_row(trace: Trace, name: str, after: int) -> np.ndarray:
    return np.asarray(ravel_rows(trace.judges[after])[trace.slots(name)[0]])


def _ema_row(trace: Trace, name: str, after: int) -> np.ndarray:
    return trace.judge_emas[after][trace.slots(name)[0]]


def test_judge_ema_off_keeps_the_pretrained_row_and_changes_no_other_run(trace: Trace) -> None:
    for after in range(ITERATIONS + 1):
        np.testing.assert_array_equal(_ema_row(trace, "base", after), _pretrained_row(trace, "base"))
    np.testing.assert_array_equal(_ema_row(trace, "ema", 0), _pretrained_row(trace, "ema"))


def test_judge_ema_is_the_moving_average_of_the_judge_after_each_update(trace: Trace) -> None:
    """ema_every20 updates its judge once per iteration, on its last step: the average after iteration t is
    0.75 · average + 0.25 · judge_t, from the pretrained row (numpy, float32)."""
    average = _pretrained_row(trace, "ema_every20")
    decay = np.float32(0.75)
    for after in range(1, ITERATIONS + 1):
        average = decay * average + (np.float32(1) - decay) * _judge_row(trace, "ema_every20", after)
        np.testing.assert_allclose(_ema_row(trace, "ema_every20", after), average, rtol=1e-6, atol=1e-7)
    assert trace.metric("judge_updates", "ema_every20") == [1] * ITERATIONS
    # Until its first update the average is the judge: the first iteration is every20's run, exactly.
    chex.assert_trees_all_equal(trace.policy("ema_every20", 1), trace.policy("every20", 1))
    chex.assert_trees_all_equal(trace.judge("ema_every20", 1), trace.judge("every20", 1))
    # Then the policy is rewarded by the average, not by the judge.
    assert _differ(trace.policy("ema_every20", 2), trace.policy("every20", 2))


def test_judge_ema_trains_and_resets_with_the_judge(trace: Trace) -> None:
    assert trace.metric("judge_updates", "ema") == [STEPS] * ITERATIONS
    for after in range(1, ITERATIONS + 1):
        assert np.max(np.abs(_ema_row(trace, "ema", after) - _pretrained_row(trace, "ema"))) > 1e-4
        assert np.max(np.abs(_ema_row(trace, "ema", after) - _judge_row(trace, "ema", after))) > 1e-4
        np.testing.assert_array_equal(_ema_row(trace, "ema_reset1", after), _pretrained_row(trace, "ema_reset1"))
        chex.assert_trees_all_equal(trace.judge("ema_reset1", after), trace.pretrained())
    assert _differ(trace.policy("ema", ITERATIONS), trace.policy("base", ITERATIONS))


def _trained_state(trace: Trace, judges: np.ndarray, averages: np.ndarray) -> CoevolutionState:
    """A grid state at π₀ whose judge rows and moving averages are given (J, P) rows."""
    program = trace.program
    constants, shape = program.constants, program.shape
    stream_keys = jnp.zeros((shape.n_runs, 2), jnp.uint32)
    policies, pretrained = constants.initial_policies, constants.pretrained_judges
    state = initial_state(policies, pretrained, stream_keys, *mechanism_states(shape, policies, pretrained))
    slots = state.slots.replace(judge=fresh_networks(jnp.asarray(judges)))
    return state.replace(slots=slots.with_state("judge_ema", jnp.asarray(averages)))


def test_the_policy_and_the_diagnostics_see_the_average(trace: Trace) -> None:
    """With trained judges J and averages E, a run with judge_ema is rewarded (and measured) as a run without it
    whose judges are E; a run without it as before."""
    program, names = trace.program, ("ema", "ema_every20", "ema_reset1")
    judges, averages = np.asarray(ravel_rows(trace.judges[ITERATIONS])), trace.judge_emas[ITERATIONS]
    state, on_averages = _trained_state(trace, judges, averages), _trained_state(trace, averages, averages)
    knobs = program.layout.knobs
    without = knobs.replace(judge_ema=jnp.zeros_like(knobs.judge_ema))
    step = jax.jit(partial(policy_step, program.shape, program.constants))
    keys = jax.random.split(jax.random.PRNGKey(0), program.shape.n_runs)
    policies = np.asarray(step(knobs, state, keys).runs.policy.params)
    reference = np.asarray(step(without, on_averages, keys).runs.policy.params)
    live = np.asarray(step(without, state, keys).runs.policy.params)
    for name in names:
        run = trace.run(name)
        np.testing.assert_array_equal(policies[run], reference[run])
        if name != "ema_reset1":  # (just reset: its average and its judge are both the pretrained row)
            assert np.max(np.abs(policies[run] - live[run])) > 0
    np.testing.assert_array_equal(policies[trace.run("base")], live[trace.run("base")])

    measured, on_average = program.diagnose(state), program.diagnose(on_averages)
    for metric in ("judge_perceived_quality", "judge_alignment"):
        for name in names:
            assert float(measured[metric][trace.run(name)]) == float(on_average[metric][trace.run(name)])
        assert float(measured[metric][trace.run("base")]) != float(on_average[metric][trace.run("base")])
