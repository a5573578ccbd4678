"""One helper that applies a row of the step to the members of one of its work groups.

A row is written for one member of its work group (see `harness.grid.step_rows.StepRow`); `apply_where_due`
gathers the group's entries, vmaps the function over them, keeps the old values where it is not due, and
scatters the results back. Steps where no entry of the group is due skip the work entirely.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp

from harness.engine.state import select, take


@flax.struct.dataclass
class WorkGroup:
    """The runs and judge slots of one scheduled mechanism's work group, as int arrays: numpy in a grid's layout,
    int32 device arrays in the program's constants (`GridConstants.groups`).

    run_ids (Rg,): the group's runs; slot_ids (Jg,): their judge slots; slot_run (Jg,): the
    run of each slot; slot_position (Jg,): where that run is in run_ids.
    """

    run_ids: jax.Array
    slot_ids: jax.Array
    slot_run: jax.Array
    slot_position: jax.Array


def apply_where_due(update: Callable[[Any, jax.Array], Any], entries: Any, ids: jax.Array, due: jax.Array) -> Any:
    """`entries` with entry `ids[i]` of every leaf replaced by `update(entry, i)` where `due[i]`, each entry being the
    leaves' `ids[i]` slices (a pytree of `entries`' structure without the leading axis: a row's member's value and own
    state).

    The update is vmapped over the entries inside a `lax.cond`, so steps where no entry is due skip its work. A leaf it
    returns as it was given (the same traced value) is left as it is, neither selected nor written back.
    """

    def apply(entries: Any) -> Any:
        old = take(entries, ids)
        changed: list[bool] = []  # per leaf, whether the update returned it anew: known once it is traced

        def changed_leaves(entry: Any, index: jax.Array) -> list[jax.Array]:
            given, returned = jax.tree.leaves(entry), jax.tree.leaves(update(entry, index))
            changed[:] = [new is not before for new, before in zip(returned, given, strict=True)]
            return [new for new, anew in zip(returned, changed, strict=True) if anew]

        new = iter(jax.vmap(changed_leaves)(old, jnp.arange(ids.shape[0], dtype=jnp.int32)))
        leaves, structure = jax.tree.flatten(entries)
        merged = [
            leaf.at[ids].set(select(due, next(new), before)) if anew else leaf
            for leaf, before, anew in zip(leaves, jax.tree.leaves(old), changed, strict=True)
        ]
        return jax.tree.unflatten(structure, merged)

    return jax.lax.cond(jnp.any(due), apply, lambda entries: entries, entries)
