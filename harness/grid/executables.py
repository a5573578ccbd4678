"""The compiled programs of a grid: one outer iteration of training, and the diagnostics of a state, over shards.

Each is cached by the shape of one shard and the device count, so every grid whose shards have
one shape shares one traced and compiled executable, whatever its seed count or number of turns
(`harness.grid.sharding`); knob values, keys and parameters are arguments. Both are exported to disk
and reloaded (`harness.grid.compile_cache.compile_exported`) so a rerun skips tracing.

They are two programs, not one: the diagnostics measure the state before the first iteration
as well as after each, so as a program of their own they are compiled once instead of twice.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
from jax.sharding import PartitionSpec as P

from harness.engine.state import CoevolutionState
from harness.grid.compile_cache import Executable, compile_exported, forget_compiled
from harness.grid.contract import GridConstants, GridShape
from harness.grid.diagnostics import Diagnostics, diagnose
from harness.grid.knobs import RunKnobs
from harness.grid.sharding import SHARD_AXIS, shard_mesh
from harness.grid.training_step import train_iteration


@functools.cache
def iteration_program(shape: GridShape, devices: int) -> Callable:
    """The jitted outer iteration of one shard of `shape` per device, on `devices` devices side by side.

    (constants, knobs, state, iteration, steps) -> state after the iteration of `steps` inner steps; every input but
    the iteration and the step count carries a leading axis of one shard per device, split over the devices. A grid
    of more shards than devices calls it once per turn (`harness.grid.sharding.to_pieces`). Knob values, keys and
    parameters are arguments, so every grid whose shards have this shape reuses one executable, whatever its
    seed, condition, shard, step or iteration count; a second trace would mean something static leaked into the
    inputs.
    """

    # A per-shape counter rather than chex.assert_max_traces, whose counter is keyed on
    # the definition site and so would be shared by the programs of every grid shape.
    traces = 0

    def iterate(
        constants: GridConstants, knobs: RunKnobs, state: CoevolutionState, iteration: jax.Array, steps: jax.Array
    ) -> CoevolutionState:
        nonlocal traces
        traces += 1
        if traces > 1:
            raise AssertionError(f"the iteration program of {shape} was traced again: an input changed shape or dtype")
        return on_own_shard(lambda *shard: train_iteration(shape, *shard, iteration, steps), constants, knobs, state)

    sharded = P(SHARD_AXIS)
    return jax.jit(
        jax.shard_map(
            iterate, mesh=shard_mesh(devices), in_specs=(sharded, sharded, sharded, P(), P()), out_specs=sharded
        )
    )


def on_own_shard(per_shard: Callable, *shards: object) -> object:
    """Inside shard_map, where each device holds one shard: drop the shard axis, apply `per_shard`, put it back."""
    own = jax.tree.map(lambda leaf: leaf[0], shards)
    return jax.tree.map(lambda leaf: leaf[None], per_shard(*own))


@functools.cache
def shard_diagnostics_program(shape: GridShape, devices: int) -> Callable:
    """The jitted diagnostics of one shard of `shape` per device, laid out as `iteration_program`'s inputs:
    (constants, knobs, state) -> Diagnostics with the same leading axis: every metric of the state before the first
    iteration and after each. Per shard, so memory follows the shard, not the grid."""

    def diagnose_shards(constants: GridConstants, knobs: RunKnobs, state: CoevolutionState) -> Diagnostics:
        return on_own_shard(lambda *shard: diagnose(shape, *shard), constants, knobs, state)

    sharded = P(SHARD_AXIS)
    return jax.jit(jax.shard_map(diagnose_shards, mesh=shard_mesh(devices), in_specs=(sharded,) * 3, out_specs=sharded))


def _static_key(shape: GridShape, devices: int) -> str:
    """What a grid program's trace depends on besides its arguments (`compile_exported`'s static key)."""
    return f"{shape} {devices}"


def _parts(shape: GridShape, devices: int) -> dict[str, str]:
    """`_static_key` by part, for profiles."""
    return shape.parts() | {"devices": str(devices)}


def compile_iteration(
    shape: GridShape, devices: int, args: tuple[GridConstants, RunKnobs, CoevolutionState, jax.Array, jax.Array]
) -> Executable:
    """`iteration_program(shape, devices)` compiled for `args` (once per process; traced and lowered once per
    cache). The state's buffers are donated: each call is passed a fresh copy of its shards."""
    return compile_exported(
        "iterate",
        iteration_program(shape, devices),
        args,
        _static_key(shape, devices),
        out_tree=jax.tree.structure(args[2]),  # a state shaped like the input state
        donate=(2,),
        parts=_parts(shape, devices),
    )


def compile_diagnostics(
    shape: GridShape, devices: int, args: tuple[GridConstants, RunKnobs, CoevolutionState]
) -> Executable:
    """`shard_diagnostics_program(shape, devices)` compiled for `args`, as `compile_iteration` (its output, a dict of
    arrays, is carried by the exported program itself)."""
    program = shard_diagnostics_program(shape, devices)
    return compile_exported("diagnose_shards", program, args, _static_key(shape, devices), parts=_parts(shape, devices))


def clear_program_caches() -> None:
    """Forget every traced and compiled program (e.g. to measure a cold compile)."""
    forget_compiled()
    iteration_program.cache_clear()
    shard_diagnostics_program.cache_clear()
    jax.clear_caches()
