"""The loop's hooks that pass a value per run, in the contract's one form, (value, context, own) -> (value, own): the
flags `judge_update_due` and `reset_due` (a bool per run) and `contrast` (a probability per run, which the grid draws
from and the pair audit reads). Each is passed from one mechanism to the next in mechanism order, so a lab's mechanism
narrows or widens what a built-in decided instead of replacing it, and what it returns of its own state is kept."""

from __future__ import annotations

from types import SimpleNamespace

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from harness.engine.metrics import MechanismShapeError
from harness.grid import registry
from harness.grid.contract import IterationContext, Mechanism, OwnState, StepContext
from harness.grid.diagnostics import judge_score_tables, policy_log_prob_tables
from harness.grid.knobs import Knobs, stack_knobs
from harness.grid.spec import Condition, GridSpec, MechanismSource, RunSettings
from harness.grid.trainer import GridTrainer
from harness.grid.training_step import draw_contrast
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


def test_contrast_pairs_raise_the_share_they_are_given() -> None:
    """`pair_sources` raises the contrast share of the due runs whose rejected side is a past checkpoint to their
    contrast_mix, never a run whose sides are both the policy; a higher share an earlier mechanism gave stays."""
    knobs = stack_knobs([Knobs(rejected_from="past", temporal_gap=1, contrast_mix=0.25), Knobs()], BUILT_IN_NAMES)

    def share(before: list[float], due: list[bool]) -> list[float]:
        step = StepContext(None, None, knobs, None, keys=None, counter=jnp.int32(1), update_due=jnp.asarray(due))
        value, own = pair_sources.contrast(jnp.asarray(before, jnp.float32), step, OwnState())
        assert own == OwnState()
        return np.asarray(value).tolist()

    assert share([0.0, 0.0], [True, True]) == [0.25, 0.0]
    assert share([0.0, 0.0], [False, True]) == [0.0, 0.0]
    assert share([0.5, 0.5], [True, True]) == [0.5, 0.5]


def test_the_grid_draws_contrast_with_the_share() -> None:
    """Over 4,000 runs' keys: never at share 0, always at 1, and at 0.3 within 5 binomial standard deviations of 1,200
    (the keys are fixed, so the count is too); each draw is the one `pair_sources` made before the grid drew for it,
    uniform(fold_in(the run's contrast key, 0)) < share, run by run without vmap."""
    n = 4000
    keys = SimpleNamespace(contrast=jax.random.split(jax.random.PRNGKey(8), n))
    assert not np.any(draw_contrast(keys, jnp.zeros(n)))
    assert np.all(draw_contrast(keys, jnp.ones(n)))
    drawn = np.asarray(draw_contrast(keys, jnp.full(n, 0.3)))
    assert abs(int(drawn.sum()) - 0.3 * n) < 5 * np.sqrt(n * 0.3 * 0.7)
    one_by_one = [bool(jax.random.uniform(jax.random.fold_in(key, 0)) < 0.3) for key in keys.contrast[:200]]
    np.testing.assert_array_equal(drawn[:200], one_by_one)


@flax.struct.dataclass
class Calls:
    """Per run: the odd-steps hook's calls counted."""

    count: jax.Array


def _no_calls(shape: object, policy: jax.Array) -> Calls:
    return Calls(jnp.zeros((), jnp.int32))


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
    run_state=_no_calls,
    judge_update_due=_odd_steps,
    reset_due=_after_last_iteration,
)
STEPS = 6


def _grid_loading(mechanism: Mechanism, conditions: tuple[Condition, ...], iterations: int, steps: int) -> GridSpec:
    """Registers `mechanism` (inside the caller's `registry.restored_catalog()`) and returns a grid of one seed in the
    two-position world that loads it."""
    module = f"{mechanism.name}.py"
    registry.register(mechanism, module=module, digest="0" * 64)
    return GridSpec(
        mechanisms=(MechanismSource(name=mechanism.name, module=module, digest="0" * 64),),
        run=RunSettings(seeds=(0,), iterations=iterations, steps_per_iteration=steps, batch_size=16),
        world=TWO_POSITIONS,
        conditions=conditions,
    )


@pytest.fixture(scope="module")
def trained() -> GridTrainer:
    """Two iterations of 6 steps with `odd_steps` loaded: a judge that updates every step, one every 3 steps, and one
    every step that the built-in reset returns to pretrained after every iteration."""
    with registry.restored_catalog():
        conditions = (
            Condition(name="baseline"),
            Condition(name="slower", knobs=Knobs(judge_update_every=3)),
            Condition(name="reset", knobs=Knobs(reset_every=1)),
        )
        spec = _grid_loading(ODD_STEPS, conditions, iterations=2, steps=STEPS)
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


def _always_contrast(share: jax.Array, step: StepContext, own: OwnState) -> tuple[jax.Array, OwnState]:
    """Every due judge update labels its pairs chosen > rejected (both sides the policy's: a coin for a label): a share
    of 2, past 1, which the grid clips to 1."""
    return jnp.where(step.update_due, 2.0, share), own


def _count_contrast(step: StepContext, own: OwnState) -> OwnState:
    """Counts the steps on which the grid drew contrast pairs for the run."""
    return own._replace(runs=Calls(own.runs.count + step.contrast))


ALWAYS_CONTRAST = Mechanism(
    "always_contrast",
    "every judge update labels its pairs by side",
    run_state=_no_calls,
    contrast=_always_contrast,
    after_step=_count_contrast,
)


def test_the_pair_audit_audits_the_pairs_a_loaded_contrast_hook_draws() -> None:
    """With a lab's hook that makes every baseline update draw contrast pairs from two policy samples, the grid draws
    them on each of the 6 steps, and the exact label error the audit reports is P(q*(a) < q*(b)) under π × π, summed
    here over every pair with numpy: not the self-labelled pairs' error (the audit once read `pair_sources`' knobs
    alone, and audited self-labelled pairs the step never drew), nor a share past 1 weighing the contrast pairs."""
    with registry.restored_catalog():
        trainer = GridTrainer(_grid_loading(ALWAYS_CONTRAST, (Condition(name="baseline"),), iterations=1, steps=STEPS))
        metrics = trainer.run()
        np.testing.assert_array_equal(trainer.final_state.runs.of("always_contrast").count, [STEPS])
        pi = np.exp(np.asarray(policy_log_prob_tables(trainer.shape, trainer.final_state.runs.policy.params)[0]))
        q_star = np.asarray(trainer.constants.q_star)
        expected = float(np.sum(np.outer(pi, pi) * (q_star[:, None] < q_star[None, :])))
        audited = metrics.query("iteration == 1")["pair_label_error"].item()
        np.testing.assert_allclose(audited, expected, rtol=1e-5)
        # The same state's self-labelled pairs, 1[J(a) > J(b)] against q*, have another error.
        judge = np.asarray(judge_score_tables(trainer.shape, trainer.final_state.slots.judge.params)[0])
        above = judge[:, None] > judge[None, :]
        wrong = np.where(above, q_star[:, None] < q_star[None, :], q_star[:, None] > q_star[None, :])
        assert abs(float(np.sum(np.outer(pi, pi) * wrong)) - expected) > 1e-3


def _labelled_flag(labelled: jax.Array, step: StepContext, own: OwnState) -> tuple[jax.Array, OwnState]:
    """The old form's value: a bool per run (the due runs) where the hook now passes a probability on."""
    return step.update_due, own


def test_a_contrast_hook_that_returns_a_flag_is_refused_in_one_line() -> None:
    with registry.restored_catalog():
        old = Mechanism("flag_contrast", "returns a flag", contrast=_labelled_flag)
        spec = _grid_loading(old, (Condition(name="baseline"),), iterations=1, steps=2)
        with pytest.raises(MechanismShapeError) as refused:
            GridTrainer(spec).run()
    message = str(refused.value)
    assert message.startswith("mechanism 'flag_contrast'") and "hook 'contrast'" in message and "\n" not in message
    assert "bool" in message and "float32" in message
