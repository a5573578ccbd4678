"""The inner step's stages as tables: every row the grid's mechanisms declare, applied where due.

A row (`harness.grid.contract.StepRow`) is a function of one network with its arguments and due mask;
`apply_rows` applies a stage's rows in order (`harness.grid.registry.stage_rows`) to each of their work
groups through `batching.apply_where_due`. The helpers that rows of many mechanisms share live here too:
each run's judge slots (`run_judge_slots`) and the judge's pair batch (`pair_tokens`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from harness.engine import learning, streams
from harness.engine.state import SlotState
from harness.grid import registry
from harness.grid.batching import WorkGroup, apply_where_due
from harness.grid.contract import (
    STAGE_MEMBERS,
    AppliedRows,
    GridConstants,
    GridShape,
    Group,
    PairSides,
    Stage,
    StepContext,
)
from harness.grid.contract_checks import check_per_member, checked, noting_place


def run_judge_slots(shape: GridShape, constants: GridConstants) -> tuple[jax.Array, jax.Array]:
    """Each run's judge slots padded to the largest ensemble: slot ids int32 (R, M) and which are real (R, M)."""
    member = jnp.arange(shape.max_members)
    members = member[None, :] < constants.run_judges[:, None]
    slots = jnp.where(members, constants.run_first_slot[:, None] + member[None, :], constants.run_first_slot[:, None])
    return slots, members


def pair_tokens(
    shape: GridShape, sides: PairSides, keys: streams.StepKeys, group: WorkGroup
) -> tuple[jax.Array, jax.Array]:
    """The judge pair batch of each slot of `group`: chosen and rejected tokens (Jg, B, L) each, drawn with the
    run's judge-pair noise from its sides' policy rows (one batch per run, shared by the run's judges)."""
    batch, vocab, seq_len = shape.batch_size, shape.vocab_size, shape.seq_len
    pair_noise = partial(streams.judge_pair_noise, shape.streams, batch=batch, vocab=vocab, seq_len=seq_len)
    sample = jax.vmap(partial(learning.sample, vocab=vocab, model=shape.model))
    runs = group.run_ids
    noise = jax.vmap(pair_noise)(keys.judge_pairs[runs])
    chosen_rows, rejected_rows = sides.chosen[runs], sides.rejected[runs]
    chosen, _ = sample(chosen_rows, noise[:, :, :batch])
    rejected, _ = sample(rejected_rows, noise[:, :, batch:])
    return chosen[group.slot_position], rejected[group.slot_position]


def stage_field(networks: PairSides | SlotState, name: str) -> Any:
    """The field `name` of a stage's networks: a side of `PairSides`; the judge or a mechanism's state of
    `SlotState`."""
    if isinstance(networks, SlotState) and name != "judge":
        return networks.of(name)
    return getattr(networks, name)


def with_stage_field(networks: PairSides | SlotState, name: str, value: Any) -> PairSides | SlotState:
    """The stage's networks with field `name` (as `stage_field` reads it) replaced by `value`."""
    if isinstance(networks, SlotState) and name != "judge":
        return networks.with_state(name, value)
    return networks.replace(**{name: value})


def apply_rows(stage: Stage, step: StepContext, networks: PairSides | SlotState) -> tuple[Any, AppliedRows]:
    """The stage's networks after each of its rows, in order, on each of the row's work groups (in `GridShape.groups`
    order).

    Returns the networks and, by row name, every group the row was applied to with its members' due mask.
    """
    applied: dict[str, tuple[tuple[Group, jax.Array], ...]] = {}
    owners = registry.row_owners(step.shape.mechanisms)
    for row in registry.stage_rows(step.shape.mechanisms, stage):
        step = step._replace(key=streams.own_keys(step.keys.judge_pairs, owners[row.name]))  # unused keys cost nothing
        # The row's function of one network, checked while traced to return that network's kind (one line, not an
        # error deep in the batching, where its output is merged back).
        unit = checked(noting_place(row.unit, f"row '{row.name}' unit")(step), 0, owners[row.name], f"row '{row.name}'")
        for index in step.shape.groups_of(row.name):
            group = Group(step.constants.groups[index], step.shape.groups[index])
            ids = group.ids.run_ids if STAGE_MEMBERS[stage] == "run" else group.ids.slot_ids
            with jax.named_scope(owners[row.name]):  # the row's gathers, arguments and merge are its mechanism's too
                due = per_member(row.due, "due", row.name, owners[row.name], len(ids))(step, group, networks)
                arguments = per_member(row.arguments, "arguments", row.name, owners[row.name], len(ids))
                new = apply_where_due(
                    unit, stage_field(networks, row.replaces), ids, due, partial(arguments, step, group, networks)
                )
            networks = with_stage_field(networks, row.replaces, new)
            applied[row.name] = (*applied.get(row.name, ()), (group, due))
    return networks, applied


def per_member(function: Callable, part: str, row: str, mechanism: str, members: int) -> Callable:
    """A row's `due` or `arguments` (`part`), its errors noting the row and part, its result checked to hold one
    entry per member of the work group (`contract_checks.check_per_member`) while traced."""
    where = f"row '{row}' {part}"

    def call(*arguments: Any) -> Any:
        returned = noting_place(function, where)(*arguments)
        check_per_member(returned, members, mechanism, where, function, mask=part == "due")
        return returned

    return call


def with_judge_update(step: StepContext, group: Group, networks: Any) -> jax.Array:
    """A row's due mask for rows that ride on the judge update: each judge is due where its run's update is."""
    return step.update_due[group.ids.slot_run]
