"""A grid of conditions × seeds, laid out as runs and judge slots for one compiled program.

Runs are condition-major. Each run owns its judges' consecutive slots (as many as its `JudgePlan`
says: `Mechanism.judge_plan`); slots of all runs are
concatenated on one axis, so ensembles of different sizes share a grid without padding every run
to the largest ensemble. Each row of the step (`harness.grid.step_rows.StepRow`) gets its work
groups: the runs (and slots) it acts on, by cadence. The grid itself is `harness.grid.spec.GridSpec`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from harness.grid import registry
from harness.grid.batching import WorkGroup
from harness.grid.contract import GridFacts, GridShape, Mechanism
from harness.grid.knobs import Knobs, RunKnobs, stack_knobs
from harness.grid.spec import GridSpec, judges_per_run, used_by
from harness.grid.step_rows import CADENCES, Cadence, WorkGroupShape


@dataclasses.dataclass(frozen=True)
class GridLayout:
    """Runs and judge slots of a grid, as host arrays.

    run_condition, run_seed_index, run_judges: int (R,) (run_judges: how many judges each run has).
    slot_run, slot_member: int (J,). groups: one `WorkGroup` (of numpy arrays) per `shape.groups` entry.
    knobs: `RunKnobs` (R,); run_knobs: each run's `Knobs`.
    """

    spec: GridSpec
    shape: GridShape
    run_condition: np.ndarray
    run_seed_index: np.ndarray
    run_judges: np.ndarray
    slot_run: np.ndarray
    slot_member: np.ndarray
    groups: tuple[WorkGroup, ...]
    knobs: RunKnobs
    run_knobs: tuple[Knobs, ...]

    @property
    def seeds(self) -> tuple[int, ...]:
        return self.spec.run.seeds

    @property
    def run_member_draws(self) -> np.ndarray:
        """int (R,): how many of each run's judges draw keys of their own on an update (`StepKeys.members`): all of
        them where the run is in a work group of a row that draws from them (`StepRow.member_keys`), else none."""
        drawing = {row.name for row in registry.rows(self.shape.mechanisms) if row.member_keys}
        draws = np.zeros(self.shape.n_runs, bool)
        for group, sizes in zip(self.groups, self.shape.groups, strict=True):
            draws[group.run_ids] |= sizes.row in drawing
        return np.where(draws, self.run_judges, 0)

    def run_labels(self) -> list[tuple[str, int]]:
        """(condition name, seed) of every run, in run order."""
        names = [c.name for c in self.spec.conditions]
        return [(names[c], self.seeds[s]) for c, s in zip(self.run_condition, self.run_seed_index, strict=True)]


# What of a run's knobs decides the grid's shape: its ensemble size and its work group in every row's schedule.
# Runs of one kind are interchangeable for padding (see `harness.grid.sharding`); the static sizes mechanisms
# declare (pair counts, depths) are not part of it: the grid pads those to their maximum.
GroupMembership = tuple[int, tuple[Cadence | None, ...]]


def group_membership(knobs: Knobs, n_outputs: int, mechanisms: Sequence[Mechanism]) -> GroupMembership:
    return judges_per_run(knobs, mechanisms), tuple(row.schedule(knobs, n_outputs) for row in registry.rows(mechanisms))


def layout_grid(spec: GridSpec) -> GridLayout:
    """Lay out every condition × seed of `spec` as runs (condition-major) and judge slots."""
    n_conditions, n_seeds = len(spec.conditions), len(spec.run.seeds)
    return layout_runs(spec, np.repeat(np.arange(n_conditions), n_seeds), np.tile(np.arange(n_seeds), n_conditions))


def layout_runs(spec: GridSpec, run_condition: np.ndarray, run_seed_index: np.ndarray) -> GridLayout:
    """Lay out the given runs of `spec`: condition index and seed index (into spec.run.seeds) of each, (R,)."""
    mechanisms = spec.active_mechanisms
    run_knobs = tuple(spec.conditions[c].knobs for c in run_condition)
    members = np.array([judges_per_run(k, mechanisms) for k in run_knobs])
    slot_run = np.repeat(np.arange(len(run_knobs)), members)
    slot_member = np.concatenate([np.arange(m) for m in members])
    n_outputs = spec.world.n_outputs

    groups, group_shapes = [], []
    for row in registry.rows(mechanisms):
        condition_cadence = [row.schedule(c.knobs, n_outputs) for c in spec.conditions]
        cadence = np.array([condition_cadence[c] for c in run_condition], dtype=object)
        for name in CADENCES:
            run_ids = np.flatnonzero(cadence == name)
            if run_ids.size:
                slot_ids = np.flatnonzero(np.isin(slot_run, run_ids))
                groups.append(
                    WorkGroup(run_ids, slot_ids, slot_run[slot_ids], np.searchsorted(run_ids, slot_run[slot_ids]))
                )
                size = row.group_size([run_knobs[r] for r in run_ids], n_outputs) if row.group_size else 0
                group_shapes.append(WorkGroupShape(row.name, name, run_ids.size, slot_ids.size, int(size)))

    facts = GridFacts(batch_size=spec.run.batch_size, n_outputs=n_outputs)
    sizes: dict[str, int] = {}
    declared_by: dict[str, str] = {}
    for mechanism in mechanisms:
        if mechanism.sizes is None:
            continue
        for name, value in mechanism.sizes(run_knobs, facts).items():
            # One namespace: a second declaration would silently replace the first one's size.
            if name in declared_by:
                raise registry.MechanismError(
                    f"mechanism '{mechanism.name}': static size '{name}' is declared by mechanism "
                    f"'{declared_by[name]}' too; give it a name of its own"
                )
            declared_by[name], sizes[name] = mechanism.name, int(value)
    shape = GridShape(
        mechanisms=mechanisms,
        n_runs=len(run_knobs),
        n_slots=len(slot_run),
        max_members=int(members.max()),
        groups=tuple(group_shapes),
        batch_size=spec.run.batch_size,
        vocab_size=spec.world.vocab_size,
        seq_len=spec.world.seq_len,
        streams=spec.run.streams,
        sizes=tuple(sorted(sizes.items())),
        model=spec.model,
        plugins=registry.plugins_of(spec.mechanism_names),
        used=used_by(mechanisms, run_knobs),
    )
    return GridLayout(
        spec=spec,
        shape=shape,
        run_condition=run_condition,
        run_seed_index=run_seed_index,
        run_judges=members,
        slot_run=slot_run,
        slot_member=slot_member,
        groups=tuple(groups),
        knobs=stack_knobs(run_knobs, [m.name for m in mechanisms]),
        run_knobs=run_knobs,
    )
