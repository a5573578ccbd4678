"""The compiled programs of a grid: one outer iteration of training, and the diagnostics of a state, over shards.

Each is cached by the grid's static shape, so every grid of one shape shares one traced and
compiled executable; knob values, keys and parameters are arguments. The iteration program can
be exported to disk and reloaded (`harness.grid.compile_cache`) so a rerun skips tracing.

They are two programs, not one: the diagnostics measure the state before the first iteration
as well as after each, so as a program of their own they are compiled once (beside the
iteration program, on a second thread) instead of twice.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import jax
from jax.sharding import PartitionSpec as P

from harness.engine.state import CoevolutionState
from harness.grid import compile_cache
from harness.grid.contract import GridConstants, GridShape
from harness.grid.diagnostics import Diagnostics, diagnose
from harness.grid.knobs import RunKnobs
from harness.grid.sharding import SHARD_AXIS, shard_mesh
from harness.grid.training_step import train_iteration


@functools.cache
def iteration_program(shape: GridShape, n_shards: int, pieces: int = 1) -> Callable:
    """The jitted outer iteration for `n_shards` shards of one shape on n_shards / pieces devices side by side.

    (constants, knobs, state, iteration) -> state after the iteration; every input but the
    iteration carries a leading shard axis (S,), split over the devices; each device runs
    its `pieces` shards one after another (see `harness.grid.sharding`). Knob values,
    keys and parameters are arguments, so every grid of this shape reuses one
    executable; a second trace would mean something static leaked into the inputs.
    """

    # A per-shape counter rather than chex.assert_max_traces, whose counter is keyed on
    # the definition site and so would be shared by the programs of every grid shape.
    traces = 0

    def iterate(
        constants: GridConstants, knobs: RunKnobs, state: CoevolutionState, iteration: jax.Array
    ) -> CoevolutionState:
        nonlocal traces
        traces += 1
        if traces > 1:
            raise AssertionError(f"the iteration program of {shape} was traced again: an input changed shape or dtype")

        def one_shard(shard: tuple[GridConstants, RunKnobs, CoevolutionState]) -> CoevolutionState:
            return train_iteration(shape, *shard, iteration)

        return each_shard(one_shard, pieces, (constants, knobs, state))

    sharded = P(SHARD_AXIS)
    return jax.jit(
        jax.shard_map(
            iterate, mesh=shard_mesh(n_shards // pieces), in_specs=(sharded, sharded, sharded, P()), out_specs=sharded
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


@dataclass(frozen=True)
class IterationExecutable:
    """The compiled iteration program, called like `iteration_program`'s: pytrees in, pytrees out.

    The compiled program itself takes and returns flat lists of arrays, so that its
    traced form can be exported to disk and reloaded (see `compile_cache.exported`).
    """

    compiled: jax.stages.Compiled
    in_tree: jax.tree_util.PyTreeDef
    out_tree: jax.tree_util.PyTreeDef

    def __call__(
        self, constants: GridConstants, knobs: RunKnobs, state: CoevolutionState, iteration: jax.Array
    ) -> CoevolutionState:
        leaves, in_tree = jax.tree.flatten((constants, knobs, state, iteration))
        if in_tree != self.in_tree:
            raise ValueError(f"arguments do not match the compiled program: {in_tree} vs {self.in_tree}")
        return jax.tree.unflatten(self.out_tree, self.compiled(*leaves))

    def as_text(self) -> str:
        return self.compiled.as_text()

    def cost_analysis(self) -> object:
        return self.compiled.cost_analysis()


def compile_iteration(
    shape: GridShape, n_shards: int, pieces: int, args: tuple[GridConstants, RunKnobs, CoevolutionState, jax.Array]
) -> IterationExecutable:
    """Compile `iteration_program(shape, n_shards, pieces)` for `args`; the traced program comes from disk if cached."""
    leaves, in_tree = jax.tree.flatten(args)
    out_tree = jax.tree.structure(args[2])  # the output is a state shaped like the input state
    program = iteration_program(shape, n_shards, pieces)

    def flat(*leaves: jax.Array) -> list[jax.Array]:
        outputs = program(*jax.tree.unflatten(in_tree, leaves))
        assert jax.tree.structure(outputs) == out_tree, "the iteration's output changed structure"
        return jax.tree.leaves(outputs)

    traced = compile_cache.exported("iteration", jax.jit(flat), leaves, f"{shape} {n_shards} {pieces} {in_tree}")
    # The state's buffers are donated: each step() passes a fresh copy of the shards.
    first_state_leaf = len(jax.tree.leaves(args[:2]))
    state_leaves = range(first_state_leaf, first_state_leaf + len(jax.tree.leaves(args[2])))

    def iterate(*leaves: jax.Array) -> list[jax.Array]:  # named so that compile logs say jit(iterate)
        return traced.call(*leaves)

    compiled = jax.jit(iterate, donate_argnums=tuple(state_leaves)).lower(*leaves).compile()
    return IterationExecutable(compiled, in_tree, out_tree)


# Compiled iteration programs by shape: a later grid of the same shape reuses the
# executable instead of lowering (and tracing) the program again.
_EXECUTABLES: dict[tuple[GridShape, int, int], IterationExecutable] = {}


def iteration_executable(
    shape: GridShape, n_shards: int, pieces: int, args: tuple[GridConstants, RunKnobs, CoevolutionState, jax.Array]
) -> IterationExecutable:
    """`compile_iteration`'s executable, compiled once per (shape, n_shards, pieces) in this process."""
    key = (shape, n_shards, pieces)
    if key not in _EXECUTABLES:
        _EXECUTABLES[key] = compile_iteration(shape, n_shards, pieces, args)
    return _EXECUTABLES[key]


def clear_program_caches() -> None:
    """Forget every traced and compiled program (e.g. to measure a cold compile)."""
    _EXECUTABLES.clear()
    iteration_program.cache_clear()
    shard_diagnostics_program.cache_clear()
    jax.clear_caches()
