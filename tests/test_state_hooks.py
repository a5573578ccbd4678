"""The state hooks (`start_iteration`, `end_iteration`, `after_step`): each is given its mechanism's own state and
returns it, and every hook at a point reads the state as the point found it, so neither their order nor another
mechanism's hook changes what one computes."""

from __future__ import annotations

import zlib
from collections.abc import Callable

import jax
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


def test_each_mechanism_gets_a_key_of_its_own_at_each_point() -> None:
    # A hook's key (R, 2): its run's stream key folded with the mechanism's stream number, then with the point (2i at
    # the start of iteration i, 2i + 1 at its end): computed here by hand from jax.random.fold_in and zlib.crc32.
    seen: dict[tuple[str, str], np.ndarray] = {}

    def recorder(name: str) -> Mechanism:
        def record(point: str) -> Callable[[IterationContext, OwnState], OwnState]:
            def hook(context: IterationContext, own: OwnState) -> OwnState:
                seen[(name, point)] = np.asarray(context.key)
                return own

            return hook

        return Mechanism(
            name,
            "records its keys",
            run_state=lambda shape, row: jnp.zeros(()),
            start_iteration=record("start_iteration"),
            end_iteration=record("end_iteration"),
        )

    context = _context((recorder("first"), recorder("second")))
    stream_keys = jnp.stack([jax.random.PRNGKey(run) for run in range(RUNS)])
    runs = context.state.runs.replace(stream_key=stream_keys)
    context = context._replace(state=context.state.replace(runs=runs), iteration=jnp.int32(3))
    for point, fold in (("start_iteration", 6), ("end_iteration", 7)):
        with_state_hooks(point, context)
        for name in ("first", "second"):
            own = [jax.random.fold_in(jax.random.fold_in(key, zlib.crc32(name.encode())), fold) for key in stream_keys]
            np.testing.assert_array_equal(seen[(name, point)], np.stack(own))
    keys = [tuple(key) for key in np.concatenate(list(seen.values()))]
    assert len(set(keys)) == len(keys) == 4 * RUNS  # per run, mechanism and point, no key twice
