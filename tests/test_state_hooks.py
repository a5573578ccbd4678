"""The state hooks (`start_iteration`, `end_iteration`, `after_step`): each is given its mechanism's own state and
returns it, and every hook at a point reads the state as the point found it, so neither their order nor another
mechanism's hook changes what one computes."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from harness.engine.state import CoevolutionState, RunState, SlotState, fresh_networks
from harness.grid.contract import GridShape, IterationContext, Mechanism, OwnState
from harness.grid.training_step import with_state_hooks

RUNS, SLOTS = 3, 4


def _reads_the_counter(context: IterationContext, own: OwnState) -> OwnState:
    # Another mechanism's state, read: its value as the hook point found it, whatever runs first.
    return own._replace(runs=context.state.runs.of("counter") + 1)


def _counts(context: IterationContext, own: OwnState) -> OwnState:
    return own._replace(runs=own.runs + 10, slots=own.slots * 2)


READER = Mechanism(
    "reader",
    "one more than the counter",
    run_state=lambda shape, row: jnp.zeros((), jnp.int32),
    start_iteration=_reads_the_counter,
)
COUNTER = Mechanism(
    "counter",
    "adds 10 per run and doubles per judge",
    run_state=lambda shape, row: jnp.zeros((), jnp.int32),
    slot_state=lambda shape, row: jnp.ones((), jnp.float32),
    start_iteration=_counts,
)


def _context(mechanisms: tuple[Mechanism, ...]) -> IterationContext:
    shape = GridShape(
        mechanisms=mechanisms,
        n_runs=RUNS,
        n_slots=SLOTS,
        max_members=2,
        groups=(),
        batch_size=16,
        vocab_size=4,
        seq_len=2,
        used=tuple(m.name for m in mechanisms),
    )
    runs = RunState(
        policy=fresh_networks(jnp.zeros((RUNS, 5))),
        stream_key=jnp.zeros((RUNS, 2), jnp.uint32),
        mechanisms={"reader": jnp.zeros(RUNS, jnp.int32), "counter": jnp.arange(RUNS, dtype=jnp.int32)},
    )
    slots = SlotState(judge=fresh_networks(jnp.zeros((SLOTS, 5))), mechanisms={"counter": jnp.ones(SLOTS)})
    state = CoevolutionState(runs=runs, slots=slots, step=jnp.int32(7))
    return IterationContext(shape, None, None, state, jnp.int32(0))  # type: ignore[arg-type]


@pytest.mark.parametrize("order", [(READER, COUNTER), (COUNTER, READER)], ids=["reader first", "counter first"])
def test_each_hook_reads_the_state_as_the_point_found_it_and_writes_only_its_own(
    order: tuple[Mechanism, ...],
) -> None:
    state = with_state_hooks("start_iteration", _context(order))
    np.testing.assert_array_equal(state.runs.of("reader"), [1, 2, 3])  # the counter before its hook, plus one
    np.testing.assert_array_equal(state.runs.of("counter"), [10, 11, 12])
    np.testing.assert_array_equal(state.slots.of("counter"), [2.0] * SLOTS)
    assert int(state.step) == 7  # what no mechanism owns is as it was


def test_a_point_no_mechanism_hooks_leaves_the_state_as_it_was() -> None:
    state = with_state_hooks("end_iteration", _context((READER, COUNTER)))
    np.testing.assert_array_equal(state.runs.of("counter"), [0, 1, 2])
    np.testing.assert_array_equal(state.runs.of("reader"), [0, 0, 0])
