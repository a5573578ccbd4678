"""One outer iteration of co-evolution for every run of a grid at once, from the grid's mechanisms.

Each inner step takes the loop's policy step (`harness.grid.reward.policy_step`), then the stages of
the step in order (`harness.grid.step_rows.STAGES`: where the judge's pairs come from, the updates that
ride on the judge's update, corrections on their own cadence), each row a function of one member of a work group
applied to its work groups through `batching.apply_where_due`, which skips a group on steps where none
of it is due. The hooks of the mechanisms some run uses (`GridShape.used_mechanisms`) run where the
contract places them; this module names none of them.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from harness.engine import streams
from harness.engine.state import CoevolutionState, fresh_networks, select
from harness.grid import registry
from harness.grid.contract import GridConstants, GridShape, IterationContext, OwnState, PairSides, StepContext
from harness.grid.knobs import RunKnobs
from harness.grid.reward import policy_step
from harness.grid.step_rows import AppliedRows
from harness.grid.step_table import apply_rows


def mechanism_states(shape: GridShape, policies: jax.Array, judges: jax.Array) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every mechanism's initial per-run state (from each run's initial policy row, policies (R, P)) and per-judge
    state (from each slot's pretrained row, judges (J, P)), by mechanism name."""
    runs = {m.name: jax.vmap(partial(m.run_state, shape))(policies) for m in shape.mechanisms if m.run_state}
    slots = {m.name: jax.vmap(partial(m.slot_state, shape))(judges) for m in shape.mechanisms if m.slot_state}
    return runs, slots


def own_state(state: CoevolutionState, name: str) -> OwnState:
    """Mechanism `name`'s own part of `state` (`OwnState`: None for a part it does not keep)."""
    return OwnState(runs=state.runs.mechanisms.get(name), slots=state.slots.mechanisms.get(name))


def with_own_state(state: CoevolutionState, name: str, own: OwnState) -> CoevolutionState:
    """`state` with mechanism `name`'s own part replaced by `own` (the parts it keeps)."""
    runs, slots = state.runs, state.slots
    if own.runs is not None:
        runs = runs.with_state(name, own.runs)
    if own.slots is not None:
        slots = slots.with_state(name, own.slots)
    return state.replace(runs=runs, slots=slots)


def with_state_hooks(hook: str, context: StepContext | IterationContext) -> CoevolutionState:
    """`context.state` after every used mechanism's state hook `hook` (`contract.STATE_HOOKS`): each is given the
    context and its own state (`OwnState`) and returns that alone, checked against what it was given. Every hook
    reads the state as the point found it and writes only its own part, so no hook's result depends on another's
    or on their order."""
    state = context.state
    for name, function in registry.checked_hooks(context.shape.used_mechanisms, hook, given_at=1):
        own = function(with_own_key(context, name, hook), own_state(context.state, name))
        state = with_own_state(state, name, own)
    return state


def with_value_hooks(
    hook: str, value: jax.Array, context: StepContext | IterationContext
) -> tuple[jax.Array, CoevolutionState]:
    """`value` (one per run, (R,): a flag, or the contrast's probability) after every used mechanism's hook `hook`
    (`judge_update_due`, `contrast` or `reset_due`: `Mechanism`), in mechanism order, each given the value as those
    before it left it, the context with its own key and its own state; returns the value and `context.state` with
    each hook's own state as it returned it. Every hook reads the state as the point found it."""
    state = context.state
    for name, function in registry.checked_hooks(context.shape.used_mechanisms, hook, given_at=(0, 2)):
        value, own = function(value, with_own_key(context, name, hook), own_state(context.state, name))
        state = with_own_state(state, name, own)
    return value, state


def with_own_key(context: StepContext | IterationContext, name: str, hook: str) -> StepContext | IterationContext:
    """`context` with mechanism `name`'s own key (R, 2) for `hook`: of the step, from each run's judge-pair key
    (`streams.own_keys`; none before the step's keys are drawn, in `judge_update_due`); around an outer iteration,
    from each run's stream key folded with the point, 2i at the start of iteration i and 2i + 1 at its end
    (`end_iteration` and `reset_due`; a run's stream key need not change between them)."""
    if isinstance(context, StepContext):
        if context.keys is None:
            return context
        return context._replace(key=streams.own_keys(context.keys.judge_pairs, name))
    point = 2 * context.iteration + (hook in ("end_iteration", "reset_due"))
    keys = streams.own_keys(context.state.runs.stream_key, name)
    return context._replace(key=jax.vmap(jax.random.fold_in, (0, None))(keys, point))


def step_keys(
    shape: GridShape, constants: GridConstants, state: CoevolutionState, update_due: jax.Array
) -> streams.StepKeys:
    """Every run's keys for the state's step (`streams.StepKeys`, each with a leading run axis)."""
    keys = partial(streams.step_keys, shape.streams, max_members=shape.max_members)
    return jax.vmap(keys, (0, None, 0, 0))(state.runs.stream_key, state.step, update_due, constants.run_member_draws)


def contrast_share(step: StepContext) -> tuple[jax.Array, CoevolutionState]:
    """float32 (R,): the probability that each run's judge update on this step draws contrast pairs (labelled chosen >
    rejected), after every used mechanism's `contrast` hook (0 to begin with), clipped to [0, 1]; and the state with
    their own states. The pair audit reads the same share, so it audits the pairs the step would draw whatever
    mechanism set it."""
    share, state = with_value_hooks("contrast", jnp.zeros(step.shape.n_runs, jnp.float32), step)
    # A share past 1 would draw always and still weigh the audit's contrast pairs past a probability.
    return jnp.clip(share, 0.0, 1.0), state


def draw_contrast(keys: streams.StepKeys, share: jax.Array) -> jax.Array:
    """bool (R,): the runs that draw contrast pairs on this step, each with probability `share` (uniform in [0, 1)
    from the run's contrast key of the step, `streams.StepKeys.contrast`: never at 0, always at 1)."""
    drawn = jax.vmap(lambda key: jax.random.uniform(jax.random.fold_in(key, 0)))(keys.contrast)
    return drawn < share


def pair_sides(step: StepContext) -> tuple[PairSides, CoevolutionState, AppliedRows]:
    """The policy rows each run draws the chosen and the rejected side of its judge's pairs from on this step: the
    policy's own, except where a row of the sides stage replaces one (where `step.contrast`); the state with the
    sides rows' mechanisms' per-run states as they left them; and every group each sides row acted on."""
    runs = step.state.runs
    policy = runs.policy.params
    sides, owns, applied = apply_rows("sides", step, PairSides(chosen=policy, rejected=policy), runs.mechanisms)
    return sides, step.state.replace(runs=runs.replace(mechanisms=owns)), applied


def judge_stages(step: StepContext) -> tuple[CoevolutionState, StepContext, AppliedRows]:
    """The judge's side of an inner step, after the policy step (`step.state`): which runs draw contrast pairs, the
    pair sides, then the updates and the corrections. Returns the state, the step as its last stage saw it, and
    every group each row acted on."""
    if any(m.contrast is not None for m in step.shape.used_mechanisms):
        share, state = contrast_share(step)
        step = step._replace(state=state, contrast=draw_contrast(step.keys, share))
    else:  # no draw traced where nothing can set a share: the program stays as it was
        step = step._replace(contrast=jnp.zeros(step.shape.n_runs, bool))
    sides, state, applied = pair_sides(step)
    step = step._replace(state=state, sides=sides)
    for stage in ("updates", "corrections"):
        judges, owns, applied_here = apply_rows(stage, step, state.slots.judge, state.slots.mechanisms)
        state = state.replace(slots=state.slots.replace(judge=judges, mechanisms=owns))
        step, applied = step._replace(state=state), {**applied, **applied_here}
    return state, step, applied


def inner_step(
    shape: GridShape, constants: GridConstants, knobs: RunKnobs, state: CoevolutionState, step_in_iteration: jax.Array
) -> CoevolutionState:
    """The policy step, then the stages' rows where due, then the mechanisms' bookkeeping, for every run."""
    counter = step_in_iteration + 1
    starting = StepContext(shape, constants, knobs, state, keys=None, counter=counter, update_due=None)
    update_due, state = with_value_hooks("judge_update_due", jnp.ones(shape.n_runs, bool), starting)
    keys = step_keys(shape, constants, state, update_due)
    # Named scopes mark where the compiled program's instructions come from (benchmarks/test_program_size.py).
    with jax.named_scope("policy_step"):
        state = policy_step(shape, constants, knobs, state, keys.policy)
    with jax.named_scope("judge_stages"):
        state, step, applied = judge_stages(StepContext(shape, constants, knobs, state, keys, counter, update_due))
    state = with_state_hooks("after_step", step._replace(state=state, applied=applied))
    return state.replace(step=state.step + 1, runs=state.runs.replace(stream_key=keys.next))


def train_iteration(
    shape: GridShape,
    constants: GridConstants,
    knobs: RunKnobs,
    state: CoevolutionState,
    iteration: jax.Array,
    steps: jax.Array,
) -> CoevolutionState:
    """Outer iteration `iteration` (0-based) of `steps` inner steps (int32 scalars): the mechanisms' start hooks, the
    inner steps, their end hooks, then the reset of the judges of the runs `reset_due` names (`reset_judges`). The
    step count is a value, not a size: one compiled program serves every count."""
    state = with_state_hooks("start_iteration", IterationContext(shape, constants, knobs, state, iteration))

    def body(step_in_iteration: jax.Array, carry: CoevolutionState) -> CoevolutionState:
        return inner_step(shape, constants, knobs, carry, step_in_iteration)

    # A loop with a run-time trip count (XLA's while) rather than a scan of a fixed length: one program serves every
    # step count, and the published grid's metrics are byte for byte those the fixed-length scan gave.
    state = jax.lax.fori_loop(jnp.int32(0), steps, body, state)
    state = with_state_hooks("end_iteration", IterationContext(shape, constants, knobs, state, iteration))
    # Without a reset hook no reset is traced at all: no all-False select in the program, so its bits stay as they were.
    if not any(m.reset_due is not None for m in shape.used_mechanisms):
        return state
    ending = IterationContext(shape, constants, knobs, state, iteration)
    due, state = with_value_hooks("reset_due", jnp.zeros(shape.n_runs, bool), ending)
    return reset_judges(shape, constants, state, due)


def reset_judges(
    shape: GridShape, constants: GridConstants, state: CoevolutionState, run_due: jax.Array
) -> CoevolutionState:
    """The judges of the runs `run_due` (bool (R,)) returned to their pretrained rows with a fresh Adam state, and every
    mechanism's per-judge state of those judges to its start (`Mechanism.slot_state`); every other judge as it was."""
    slot_due, slots = run_due[constants.slot_run], state.slots
    judge = select(slot_due, fresh_networks(constants.pretrained_judges), slots.judge)
    _, fresh = mechanism_states(shape, constants.initial_policies, constants.pretrained_judges)
    own = {name: select(slot_due, fresh[name], value) for name, value in slots.mechanisms.items()}
    return state.replace(slots=slots.replace(judge=judge, mechanisms=own))
