"""The loop's flags in the contract's one form, (flag, context, own) -> (flag, own): `judge_update_due`, `contrast`
and `reset_due`. Each is a bool per run passed from one mechanism to the next in mechanism order, so a lab's
mechanism narrows or widens what a built-in decided instead of replacing it, and what it returns of its own state is
kept."""

from __future__ import annotations

from types import SimpleNamespace

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from harness.grid import registry
from harness.grid.contract import IterationContext, Mechanism, OwnState, StepContext
from harness.grid.knobs import Knobs, stack_knobs
from harness.grid.spec import Condition, GridSpec, MechanismSource, RunSettings
from harness.grid.trainer import GridTrainer
from harness.mechanisms import BUILT_IN, judge_update, pair_sources, reset
from tests.worlds import TWO_POSITIONS

BUILT_IN_NAMES = [m.name for m in BUILT_IN]


def test_reset_is_due_after_every_kth_outer_iteration_and_keeps_what_came_before() -> None:
    knobs = stack_knobs([Knobs(reset_every=k) for k in (0, 1, 2, 3)], BUILT_IN_NAMES)

    def due(before: jax.Array, iteration: int) -> np.ndarray:
        context = IterationContext(None, None, knobs, None, jnp.int32(iteration))
        flag, own = reset.reset_due(before, context, OwnState())
        assert own == OwnState()
        return np.asarray(flag)

    none = jnp.zeros(4, bool)
    # Rows: reset_every 0 (never), 1, 2, 3; columns: after outer iterations 0..5 (the k-th, 2k-th, ... of each).
    expected = [
        [False] * 6,
        [True] * 6,
        [False, True, False, True, False, True],
        [False, False, True, False, False, True],
    ]
    np.testing.assert_array_equal(np.stack([due(none, i) for i in range(6)], axis=1), expected)
    # A run an earlier mechanism marked stays marked: the flag is widened, never replaced.
    np.testing.assert_array_equal(due(jnp.ones(4, bool), 0), [True] * 4)


def test_the_judges_cadence_narrows_the_flag_it_is_given() -> None:
    knobs = stack_knobs(
        [Knobs(), Knobs(judge_update_every=3), Knobs(freeze_judge=True, judge_update_every=3)], BUILT_IN_NAMES
    )

    def due(before: jax.Array, counter: int) -> list[bool]:
        step = StepContext(None, None, knobs, None, keys=None, counter=jnp.int32(counter), update_due=None)
        return np.asarray(judge_update.update_due(before, step, OwnState())[0]).tolist()

    assert [due(jnp.ones(3, bool), c) for c in (1, 2, 3)] == [[True, False, False]] * 2 + [[True, True, False]]
    assert due(jnp.zeros(3, bool), 3) == [False, False, False]  # a run an earlier mechanism held back stays back


def test_contrast_pairs_widen_the_flag_they_are_given() -> None:
    """`pair_sources` marks the due runs whose rejected side is a past checkpoint (contrast_mix 1: always), never a run
    whose sides are both the policy; a run an earlier mechanism marked stays marked."""
    knobs = stack_knobs([Knobs(rejected_from="past", temporal_gap=1), Knobs()], BUILT_IN_NAMES)
    keys = SimpleNamespace(contrast=jax.random.split(jax.random.PRNGKey(3), 2))

    def labelled(before: jax.Array, due: list[bool]) -> list[bool]:
        step = StepContext(None, None, knobs, None, keys, jnp.int32(1), jnp.asarray(due))
        flag, own = pair_sources.contrast(before, step, OwnState())
        assert own == OwnState()
        return np.asarray(flag).tolist()

    none = jnp.zeros(2, bool)
    assert labelled(none, [True, True]) == [True, False]
    assert labelled(none, [False, True]) == [False, False]
    assert labelled(jnp.ones(2, bool), [False, False]) == [True, True]


@flax.struct.dataclass
class Calls:
    """Per run: the odd-steps hook's calls counted."""

    count: jax.Array


def _odd_steps(due: jax.Array, step: StepContext, own: OwnState) -> tuple[jax.Array, OwnState]:
    """The judge updates only on odd steps (1-based) of where it was due; counts its calls."""
    return due & (step.counter % 2 == 1), own._replace(runs=Calls(own.runs.count + 1))


def _after_last_iteration(due: jax.Array, context: IterationContext, own: OwnState) -> tuple[jax.Array, OwnState]:
    """The judges of runs that update every step and never reset return to pretrained after the second outer
    iteration (0-based 1): the baseline's, not the built-in reset's run nor the slower one."""
    knobs = context.knobs
    own_choice = (knobs.judge_update_every == 1) & (knobs.reset_every == 0) & (context.iteration == 1)
    return due | own_choice, own


ODD_STEPS = Mechanism(
    "odd_steps",
    "judges update on odd steps only, and reset after the second iteration",
    run_state=lambda shape, policy: Calls(jnp.zeros((), jnp.int32)),
    judge_update_due=_odd_steps,
    reset_due=_after_last_iteration,
)
STEPS = 6


@pytest.fixture(scope="module")
def trained() -> GridTrainer:
    """Two iterations of 6 steps with `odd_steps` loaded: a judge that updates every step, one every 3 steps, and one
    every step that the built-in reset returns to pretrained after every iteration."""
    with registry.restored_catalog():
        registry.register(ODD_STEPS, module="odd_steps.py", digest="0" * 64)
        spec = GridSpec(
            mechanisms=(MechanismSource(name="odd_steps", module="odd_steps.py", digest="0" * 64),),
            run=RunSettings(seeds=(0,), iterations=2, steps_per_iteration=STEPS, batch_size=16),
            world=TWO_POSITIONS,
            conditions=(
                Condition(name="baseline"),
                Condition(name="slower", knobs=Knobs(judge_update_every=3)),
                Condition(name="reset", knobs=Knobs(reset_every=1)),
            ),
        )
        trainer = GridTrainer(spec)
        trainer.run()
    return trainer


def test_a_loaded_cadence_composes_with_the_built_in_one_and_keeps_its_state(trained: GridTrainer) -> None:
    """The last iteration's judge updates: steps 1, 3, 5 of 6 where the built-in is due every step; step 3 alone of 3
    and 6 where it is due every 3 (6 is even). The hook was called on every step of both iterations, in every run."""
    state = trained.final_state
    np.testing.assert_array_equal(state.runs.of("judge_update").updates, [3, 1, 3])
    np.testing.assert_array_equal(state.runs.of("odd_steps").count, [2 * STEPS] * 3)


def test_a_loaded_reset_widens_the_built_in_one(trained: GridTrainer) -> None:
    """After the last iteration the baseline's judge (marked by the loaded hook) and the reset run's (marked by the
    built-in, after every iteration) are back at their pretrained rows with a fresh Adam state; the slower run's,
    which neither marks, is not. A hook that replaced the flag, or a built-in left out, would leave one of the two."""
    judges = trained.final_state.slots.judge
    params, pretrained = np.asarray(judges.params), np.asarray(trained.constants.pretrained_judges)
    counts = np.asarray(judges.adam[0].count)
    for slot in (0, 2):  # baseline, reset
        np.testing.assert_array_equal(params[slot], pretrained[slot])
        assert counts[slot] == 0
    assert np.max(np.abs(params[1] - pretrained[1])) > 0 and counts[1] == 2  # slower: one update per iteration


def test_a_flag_hook_in_the_old_form_is_refused_when_it_registers() -> None:
    """`judge_update_due` took (knobs, counter) and replaced the flag; it now takes (due, step, own): a hook of the
    old form cannot bind those three and is refused in one line."""

    def old_form(knobs: object, counter: jax.Array) -> jax.Array:
        return counter % 2 == 0

    with registry.restored_catalog(), pytest.raises(registry.MechanismError) as refused:
        registry.register(Mechanism("old_due", "the old form", judge_update_due=old_form), module="old.py", digest="1")
    assert str(refused.value).startswith("mechanism 'old_due': hook 'judge_update_due' (")
    assert "is called with (due, step, own)" in str(refused.value)
