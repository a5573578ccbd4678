"""The inner step's stages as tables: every row the grid's mechanisms declare, applied to its work groups where due.

A row (`harness.grid.step_rows.StepRow`) is a function of one member of a work group; `apply_rows` applies a
stage's rows in order (`harness.grid.registry.stage_rows`) to each of their work groups: each member's
`MemberContext`, its due flag (and `check`, on steps where some member is due), then the row's update, vmapped over
the members and kept where due (`batching.apply_where_due`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from harness.engine.state import take
from harness.grid import registry
from harness.grid.batching import apply_where_due
from harness.grid.contract import StepContext
from harness.grid.contract_checks import check_flag, checked, noting_place
from harness.grid.member_context import MemberContext
from harness.grid.step_rows import STAGE_MEMBERS, AppliedRows, Group, Stage, StepRow


def apply_rows(
    stage: Stage, step: StepContext, values: Any, owns: dict[str, Any]
) -> tuple[Any, dict[str, Any], AppliedRows]:
    """The stage's networks and mechanism states after each of its rows, in order, on each of the row's work groups (in
    `GridShape.groups` order).

    values: the stage's networks on its member axis (`PairSides` (R, P) for the sides stage, the judges' `Network`
    (J, ...) otherwise); owns: mechanism name -> its own state on the same axis (per run for the sides stage, per
    judge otherwise). Returns both and, by row name, every group the row was applied to with its members' due mask.
    """
    applied: dict[str, tuple[tuple[Group, jax.Array], ...]] = {}
    owners = registry.row_owners(step.shape.mechanisms)
    for row in registry.stage_rows(step.shape.mechanisms, stage):
        owner = owners[row.name]
        for index in step.shape.groups_of(row.name):
            group = Group(step.constants.groups[index], step.shape.groups[index])
            with jax.named_scope(owner):  # the row's gathers, due flags and merge are its mechanism's too
                due = _due(row, owner, stage, step, group, values, owns)
                values, own = apply_where_due(
                    _member_update(row, owner, stage, step, group, values, owns),
                    (values, owns.get(owner)),
                    _member_ids(stage, group),
                    due,
                )
            owns = {**owns, owner: own} if owner in owns else owns
            applied[row.name] = (*applied.get(row.name, ()), (group, due))
    return values, owns, applied


def _member_ids(stage: Stage, group: Group) -> jax.Array:
    """The group's members on the stage's member axis: its runs (sides) or its judge slots."""
    return group.ids.run_ids if STAGE_MEMBERS[stage] == "run" else group.ids.slot_ids


def _member_update(
    row: StepRow, owner: str, stage: Stage, step: StepContext, group: Group, values: Any, owns: dict[str, Any]
) -> Callable[..., Any]:
    """The row's update of one member, as `apply_where_due` calls it: (the member's (value, own), its position in
    the group) -> (value, own), its result checked to be of the structure, shapes and dtypes it was given (one line
    naming the row otherwise)."""
    update = checked(row.update, (0, 2), owner, f"row '{row.name}' update")

    def one(value_and_own: tuple[Any, Any], index: jax.Array) -> tuple[Any, Any]:
        # The member reads the stage as the row found it (closed over from outside the work group's cond, whose
        # branch carries the same values); its own value and state come in as the arguments.
        member = MemberContext(step, group, stage, values, owns, owner, index)
        value, own = value_and_own
        return update(value, member, own)

    return one


def _due(
    row: StepRow, owner: str, stage: Stage, step: StepContext, group: Group, values: Any, owns: dict[str, Any]
) -> jax.Array:
    """bool (members,): where the row acts on the group's members on this step: its `due`, and its `check` where it
    has one, evaluated only on steps where some member is due (a forward pass, say)."""
    ids = _member_ids(stage, group)
    positions = jnp.arange(ids.shape[0], dtype=jnp.int32)

    def due_of(index: jax.Array) -> jax.Array:
        flag = noting_place(row.due, f"row '{row.name}' due")(
            MemberContext(step, group, stage, values, owns, owner, index)
        )
        return check_flag(flag, owner, f"row '{row.name}' due", row.due)

    due = jax.vmap(due_of)(positions)
    if row.check is None:
        return due

    def check_of(index: jax.Array, value: Any, own: Any) -> jax.Array:
        member = MemberContext(step, group, stage, values, owns, owner, index)
        flag = noting_place(row.check, f"row '{row.name}' check")(value, member, own)
        return check_flag(flag, owner, f"row '{row.name}' check", row.check)

    # Under shard_map both branches of the cond must vary across shards alike, and a flag read off the step alone
    # (its counter, a constant) does not vary: each branch is or-ed with the members' ids, which do.
    none = jnp.zeros_like(ids, bool)

    def checked_members() -> jax.Array:
        return jax.vmap(check_of)(positions, take(values, ids), take(owns.get(owner), ids)) | none

    return due & jax.lax.cond(jnp.any(due), checked_members, lambda: none)
