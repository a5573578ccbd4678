"""A row of the inner step: one function of one member of a work group (a judge slot, or a run in the sides stage),
and the stages and cadences rows run in. A mechanism declares its rows (`Mechanism.rows`, `harness.grid.contract`);
the grid lays out each row's work groups (`harness.grid.layout`) and applies them (`harness.grid.step_table`), giving
each member what it reads of the step (`harness.grid.member_context.MemberContext`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import jax

from harness.grid.batching import WorkGroup
from harness.grid.knobs import Knobs

Cadence = Literal["every_step", "slower"]
CADENCES: tuple[Cadence, ...] = ("every_step", "slower")
Stage = Literal["sides", "updates", "corrections"]
STAGES: tuple[Stage, ...] = ("sides", "updates", "corrections")
# What each stage's rows act on: the runs' pair sides, or the judge slots.
STAGE_MEMBERS: dict[Stage, Literal["run", "slot"]] = {"sides": "run", "updates": "slot", "corrections": "slot"}


def cadence_of(every: int) -> Cadence:
    """The cadence class of a mechanism that acts every `every` inner steps: runs due on every step are kept apart
    from slower ones, so that a slower group skips its work (behind a `lax.cond`) on steps where none of it is due.
    Grouping decides cost, never results: every group still masks by its runs' own due flags."""
    return "every_step" if every == 1 else "slower"


@dataclasses.dataclass(frozen=True)
class WorkGroupShape:
    """Static sizes of one work group: a row's runs of one cadence and their judge slots.

    size: the static size the row's `group_size` gives for the group's runs (e.g. the largest held-out pair count,
    to which every run's are padded); 0 for rows without one. Padding per group rather than per grid keeps a run's
    masked sums, and so its results, independent of other groups.
    """

    row: str
    cadence: Cadence
    runs: int
    slots: int
    size: int = 0


class Group(NamedTuple):
    """One work group of a row: its runs and slots (device arrays) and its static sizes."""

    ids: WorkGroup
    sizes: WorkGroupShape


# (group, due mask per member) of every group a stage's rows acted on, by row name.
AppliedRows = Mapping[str, tuple[tuple[Group, jax.Array], ...]]


class StepRow(NamedTuple):
    """One row of the inner step: one function of one member of its work group (a judge slot, or a run in the sides
    stage), applied to every member where due, in the hooks' form `(value, member, own) -> (value, own)`.

    name: names the row's work groups (`GridShape.groups_of`), unique over every mechanism's rows; stage: where in
    the step it runs (`STAGES`); schedule: (a condition's `Knobs`, the world's output count) -> the cadence class of
    the runs it acts on (`cadence_of`), None for runs it never acts on.
    update: (value, member, own) -> (value, own): value is the member's network as the rows before left it (its
    judge's `Network` in stages "updates" and "corrections"; its run's `PairSides` rows in stage "sides"); member,
    what it reads of the step (`harness.grid.member_context.MemberContext`: knobs, keys, the pair batch, state);
    own, the mechanism's own state of the member (per judge in the slot stages, `Mechanism.slot_state`; per run in
    the sides stage, `Mechanism.run_state`; None where it keeps none of that kind). It returns both, changed or as
    given; the
    grid keeps what it returns where the member is due and the rest as it was.
    due: (member) -> bool (), whether the row acts on the member on this step (cheap: the grid skips the group's
    work on steps where no member is due). check: (value, member, own) -> bool (), None for none: a further
    condition read off the network (a forward pass, say), evaluated only on steps where some member of the group
    is due; the row acts where both hold.
    group_size: (the `Knobs` of a group's runs, the world's output count) -> a static size the group's arrays are
    padded to (`WorkGroupShape.size`, `MemberContext.group_size`; padded to the largest over shards too).
    member_keys: whether `update` draws from each judge's own key of the loop's streams (`MemberContext.keys.members`);
    under the original's streams a run's update then advances its key chain once per judge
    (`harness.engine.streams.step_keys`).
    """

    name: str
    stage: Stage
    schedule: Callable[[Knobs, int], Cadence | None]
    # The member is a `harness.grid.member_context.MemberContext`, which is built on this module's types.
    update: Callable[[Any, Any, Any], tuple[Any, Any]]
    due: Callable[[Any], jax.Array]
    check: Callable[[Any, Any, Any], jax.Array] | None = None
    group_size: Callable[[Sequence[Knobs], int], int] | None = None
    member_keys: bool = False
