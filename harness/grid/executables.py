"""The compiled programs of a grid: one outer iteration of training, and the diagnostics of a state, over shards.

Each is cached by the grid's static shape, so every grid of one shape shares one traced and
compiled executable; knob values, keys and parameters are arguments. Both are exported to disk
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
def iteration_program(shape: GridShape, n_shards: int, pieces: int = 1) -> Callable:
    """The jitted outer iteration for `n_shards` shards of one shape on n_shards / pieces devices side by side.

    (constants, knobs, state, iteration, steps) -> state after the iteration of `steps` inner steps; every input but
    the iteration and the step count carries a leading shard axis (S,), split over the devices; each device runs
    its `pieces` shards one after another (see `harness.grid.sharding`). Knob values,
    keys and parameters are arguments, so every grid of this shape reuses one
    executable; a second trace would mean something static leaked into the inputs.
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

        def one_shard(shard: tuple[GridConstants, RunKnobs, CoevolutionState]) -> CoevolutionState:
            return train_iteration(shape, *shard, iteration, steps)

        return each_shard(one_shard, pieces, (constants, knobs, state))

    sharded = P(SHARD_AXIS)
    return jax.jit(
        jax.shard_map(
            iterate,
            mesh=shard_mesh(n_shards // pieces),
            in_specs=(sharded, sharded, sharded, P(), P()),
            out_specs=sharded,
        )
    )


def each_shard(per_shard: Callable, pieces: int, shards: tuple) -> object:
    """Inside shard_map: `per_shard` applied to each of this device's `pieces` shards (inputs' leading axis), one
    after another, outputs stacked on a leading axis."""
    if pieces == 1:  # each device holds one shard: drop the shard axis, run it, put the axis back
        return jax.tree.map(lambda leaf: leaf[None], per_shard(jax.tree.map(lambda leaf: leaf[0], shards)))
    return jax.lax.map(per_shard, shards)


@functools.cache
def shard_diagnostics_program(shape: GridShape, n_shards: int, pieces: int = 1) -> Callable:
    """The jitted diagnostics of the shards of one shape, laid out as `iteration_program`'s inputs: (constants, knobs,
    state) with a leading shard axis -> Diagnostics with the same axis: every metric of the state before the first
    iteration and after each. Per shard, so memory follows the shard, not the grid."""

    def diagnose_shards(constants: GridConstants, knobs: RunKnobs, state: CoevolutionState) -> Diagnostics:
        return each_shard(lambda shard: diagnose(shape, *shard), pieces, (constants, knobs, state))

    sharded = P(SHARD_AXIS)
    mesh = shard_mesh(n_shards // pieces)
    return jax.jit(jax.shard_map(diagnose_shards, mesh=mesh, in_specs=(sharded,) * 3, out_specs=sharded))


def compile_iteration(
    shape: GridShape,
    n_shards: int,
    pieces: int,
    args: tuple[GridConstants, RunKnobs, CoevolutionState, jax.Array, jax.Array],
) -> Executable:
    """`iteration_program(shape, n_shards, pieces)` compiled for `args` (once per process; traced and lowered once
    per cache). The state's buffers are donated: each step() passes a fresh copy of the shards."""
    return compile_exported(
        "iterate",
        iteration_program(shape, n_shards, pieces),
        args,
        f"{shape} {n_shards} {pieces}",
        out_tree=jax.tree.structure(args[2]),  # a state shaped like the input state
        donate=(2,),
    )


def compile_diagnostics(
    shape: GridShape, n_shards: int, pieces: int, args: tuple[GridConstants, RunKnobs, CoevolutionState]
) -> Executable:
    """`shard_diagnostics_program(shape, n_shards, pieces)` compiled for `args`, as `compile_iteration` (its output, a
    dict of arrays, is carried by the exported program itself)."""
    return compile_exported(
        "diagnose_shards", shard_diagnostics_program(shape, n_shards, pieces), args, f"{shape} {n_shards} {pieces}"
    )


def clear_program_caches() -> None:
    """Forget every traced and compiled program (e.g. to measure a cold compile)."""
    forget_compiled()
    iteration_program.cache_clear()
    shard_diagnostics_program.cache_clear()
    jax.clear_caches()
