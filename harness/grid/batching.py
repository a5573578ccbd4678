"""One helper that applies a one-network mechanism to a group of networks of the grid.

A mechanism is written for one network (see `harness.grid.contract.StepRow`); `apply_where_due`
gathers the group's networks, vmaps the mechanism over them, keeps the old values where
it is not due, and scatters the results back. Steps where no network of the group is
due skip the work entirely.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.struct
import jax
import jax.numpy as jnp

from harness.engine.state import Network, select, take


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


def apply_where_due(
    mechanism: Callable[..., Network],
    networks: Network,
    ids: jax.Array,
    due: jax.Array,
    arguments: Callable[[], tuple] = tuple,
) -> Network:
    """`networks` with `networks[ids[i]]` replaced by `mechanism(networks[ids[i]], *arguments()[·][i])` where `due[i]`.

    arguments: builds the per-member arguments (each with leading axis len(ids)); it is
    called only on steps where some member is due, so their cost is skipped too.
    """

    def apply(networks: Network) -> Network:
        old = take(networks, ids)
        new = select(due, jax.vmap(mechanism)(old, *arguments()), old)
        return jax.tree.map(lambda leaf, value: leaf.at[ids].set(value), networks, new)

    return jax.lax.cond(jnp.any(due), apply, lambda networks: networks, networks)
