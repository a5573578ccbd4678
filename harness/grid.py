"""A grid of conditions × seeds, laid out as runs and judge slots for one compiled program.

Runs are condition-major. Each run owns `n_judges` consecutive judge slots; slots of
all runs are concatenated on one axis, so ensembles of different sizes share a grid
without padding every run to the largest ensemble.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.knobs import Knobs, RunKnobs, anchor_pair_count, holdout_pair_count
from harness.world import WorldConfig


class RunSettings(BaseModel):
    """Length and batch size shared by every run of a grid."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    seeds: tuple[int, ...] = Field((0, 1, 2, 3, 4), min_length=1, description="a count N (seeds 0..N-1) or a list")
    iterations: int = Field(10, ge=1, description="outer iterations")
    steps_per_iteration: int = Field(200, ge=1, description="inner steps per outer iteration")
    batch_size: int = Field(64, ge=2, le=4096, description="sequences per policy step and per judge batch")

    @field_validator("seeds", mode="before")
    @classmethod
    def _count_or_list(cls, value: object) -> object:
        if isinstance(value, bool):
            raise ValueError("seeds must be a count or a list of seeds")
        if isinstance(value, int):
            if value < 1:
                raise ValueError("a seed count must be at least 1")
            return tuple(range(value))
        return value

    @field_validator("seeds")
    @classmethod
    def _distinct_non_negative(cls, seeds: tuple[int, ...]) -> tuple[int, ...]:
        if any(s < 0 for s in seeds):
            raise ValueError(f"seeds must be non-negative, got {list(seeds)}")
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct, got {list(seeds)}")
        return seeds


class PretrainSettings(BaseModel):
    """Judge pretraining: MSE regression on noisy q* until a rank-correlation target."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    target_spearman: float = Field(0.70, gt=-1.0, le=1.0)
    check_every: int = Field(50, ge=1)
    max_steps: int = Field(5000, ge=1)
    batch_size: int = Field(64, ge=1)
    learning_rate: float = Field(3e-4, gt=0.0)
    label_noise: float = Field(0.1, ge=0.0)


class Condition(BaseModel):
    """A named set of knobs. `boundary` marks reference conditions (e.g. frozen judge, oracle anchor)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1)
    knobs: Knobs = Knobs()
    description: str = ""
    boundary: bool = False


class GridSpec(BaseModel):
    """Everything that defines a grid: world, run settings, pretraining and named conditions."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = "grid"
    world: WorldConfig = WorldConfig()
    run: RunSettings = RunSettings()
    pretrain: PretrainSettings = PretrainSettings()
    conditions: tuple[Condition, ...] = Field(min_length=1)

    @field_validator("conditions")
    @classmethod
    def _unique_names(cls, conditions: tuple[Condition, ...]) -> tuple[Condition, ...]:
        names = [c.name for c in conditions]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"condition names must be unique; repeated: {', '.join(repeated)}")
        return conditions

    def condition(self, name: str) -> Condition:
        return next(c for c in self.conditions if c.name == name)

    def only(self, names: Sequence[str]) -> GridSpec:
        """The same grid restricted to some conditions (in the given order)."""
        return self.model_copy(update={"conditions": tuple(self.condition(n) for n in names)})


@dataclasses.dataclass(frozen=True)
class UpdateGroupShape:
    """Static sizes of one judge-update group: its runs, their judge slots, and how many of
    those slots belong to runs with anchor pairs."""

    runs: int
    slots: int
    anchor_slots: int


@dataclasses.dataclass(frozen=True)
class MetaGroupShape:
    """Static sizes of one meta-correction group: its judge slots and held-out pairs (padded)."""

    slots: int
    holdout_pairs: int


@dataclasses.dataclass(frozen=True)
class GridShape:
    """The static sizes of a grid: the only things that select a compiled program.

    update_groups / meta_groups: the non-empty work groups (see `layout_grid`).
    """

    n_runs: int
    n_slots: int
    n_seeds: int
    max_members: int
    max_anchor_pairs: int
    update_groups: tuple[UpdateGroupShape, ...]
    meta_groups: tuple[MetaGroupShape, ...]
    batch_size: int
    steps_per_iteration: int
    vocab_size: int
    seq_len: int

    @property
    def meta_slots(self) -> int:
        return sum(group.slots for group in self.meta_groups)

    @property
    def max_holdout_pairs(self) -> int:
        return max((group.holdout_pairs for group in self.meta_groups), default=0)


@dataclasses.dataclass(frozen=True)
class UpdateGroup:
    """One judge-update group as host arrays: run_ids (Rg,); slot_ids (Jg,) and, for each,
    the position of its run in run_ids (slot_group_run); anchor_positions: positions in
    slot_ids whose run uses anchor pairs."""

    run_ids: np.ndarray
    slot_ids: np.ndarray
    slot_group_run: np.ndarray
    anchor_positions: np.ndarray


@dataclasses.dataclass(frozen=True)
class GridLayout:
    """Runs and judge slots of a grid, as host arrays.

    run_condition, run_seed_index: int (R,). slot_run, slot_member: int (J,).
    update_groups: runs split by judge-update schedule; meta_groups: slot ids (Jm,) of the
    meta-correcting judges split by meta cadence (both described in `layout_grid`).
    """

    spec: GridSpec
    shape: GridShape
    run_condition: np.ndarray
    run_seed_index: np.ndarray
    slot_run: np.ndarray
    slot_member: np.ndarray
    update_groups: tuple[UpdateGroup, ...]
    meta_groups: tuple[np.ndarray, ...]
    knobs: RunKnobs

    @property
    def seeds(self) -> tuple[int, ...]:
        return self.spec.run.seeds

    def run_labels(self) -> list[tuple[str, int]]:
        """(condition name, seed) of every run, in run order."""
        names = [c.name for c in self.spec.conditions]
        return [(names[c], self.seeds[s]) for c, s in zip(self.run_condition, self.run_seed_index, strict=True)]


class WorkKind(NamedTuple):
    """What of a run's knobs decides the grid's shape.

    Runs of one kind land in the same work groups with the same number of judge slots, so
    they are interchangeable for padding (see `harness.sharding`). Anchor and held-out
    pair counts are not part of the kind: the grid pads those to their maximum.
    """

    judges_every_step: bool  # judge update on every step (not frozen, judge_update_every 1)
    n_judges: int
    uses_anchor: bool
    meta: int  # 0: meta-correction off; 1: checked every step; 2: on a slower cadence


def work_kind(knobs: Knobs, n_outputs: int) -> WorkKind:
    meta_on = int(holdout_pair_count(knobs.meta_holdout_fraction, n_outputs)) > 0
    return WorkKind(
        judges_every_step=not knobs.freeze_judge and knobs.judge_update_every == 1,
        n_judges=knobs.n_judges,
        uses_anchor=knobs.anchor_fraction > 0,
        meta=0 if not meta_on else 1 if knobs.meta_update_every == 1 else 2,
    )


def layout_grid(spec: GridSpec) -> GridLayout:
    """Lay out every condition × seed of `spec` as runs (condition-major) and judge slots."""
    n_conditions, n_seeds = len(spec.conditions), len(spec.run.seeds)
    return layout_runs(spec, np.repeat(np.arange(n_conditions), n_seeds), np.tile(np.arange(n_seeds), n_conditions))


def layout_runs(spec: GridSpec, run_condition: np.ndarray, run_seed_index: np.ndarray) -> GridLayout:
    """Lay out the given runs of `spec`: condition index and seed index (into spec.run.seeds) of each, (R,)."""
    n_seeds = len(spec.run.seeds)
    run_knobs = [spec.conditions[c].knobs for c in run_condition]
    members = np.array([k.n_judges for k in run_knobs])
    slot_run = np.repeat(np.arange(len(run_knobs)), members)
    slot_member = np.concatenate([np.arange(m) for m in members])

    condition_kinds = [work_kind(c.knobs, spec.world.n_outputs) for c in spec.conditions]
    kinds = [condition_kinds[c] for c in run_condition]
    anchor_pairs = np.asarray(anchor_pair_count(np.array([k.anchor_fraction for k in run_knobs]), spec.run.batch_size))
    holdout_pairs = np.asarray(
        holdout_pair_count(np.array([k.meta_holdout_fraction for k in run_knobs]), spec.world.n_outputs)
    )
    uses_anchor = np.array([k.uses_anchor for k in kinds], bool)[slot_run]

    # Work groups. A grid-level `lax.cond` skips a group's judge updates (or meta checks)
    # on steps where none of its runs is due, so runs due on every step are kept apart from
    # runs on a slower cadence (frozen runs count as the latter): those then pay only on
    # their own steps. Grouping decides cost, never results: each group masks by its runs'
    # own due flags, so the executable stays correct for any knob values of this shape.
    every_step = np.array([k.judges_every_step for k in kinds], bool)
    update_groups = []
    for in_group in (every_step, ~every_step):
        run_ids = np.flatnonzero(in_group)
        slot_ids = np.flatnonzero(in_group[slot_run])
        if run_ids.size:
            update_groups.append(
                UpdateGroup(
                    run_ids=run_ids,
                    slot_ids=slot_ids,
                    slot_group_run=np.searchsorted(run_ids, slot_run[slot_ids]),
                    anchor_positions=np.flatnonzero(uses_anchor[slot_ids]),
                )
            )
    slot_meta = np.array([k.meta for k in kinds], int)[slot_run]
    meta_groups = [
        slot_ids for slot_ids in (np.flatnonzero(slot_meta == 1), np.flatnonzero(slot_meta == 2)) if slot_ids.size
    ]
    shape = GridShape(
        n_runs=len(run_knobs),
        n_slots=len(slot_run),
        n_seeds=n_seeds,
        max_members=int(members.max()),
        max_anchor_pairs=int(anchor_pairs.max()),
        update_groups=tuple(
            UpdateGroupShape(len(g.run_ids), len(g.slot_ids), len(g.anchor_positions)) for g in update_groups
        ),
        meta_groups=tuple(MetaGroupShape(len(ids), int(holdout_pairs[slot_run[ids]].max())) for ids in meta_groups),
        batch_size=spec.run.batch_size,
        steps_per_iteration=spec.run.steps_per_iteration,
        vocab_size=spec.world.vocab_size,
        seq_len=spec.world.seq_len,
    )
    return GridLayout(
        spec=spec,
        shape=shape,
        run_condition=run_condition,
        run_seed_index=run_seed_index,
        slot_run=slot_run,
        slot_member=slot_member,
        update_groups=tuple(update_groups),
        meta_groups=tuple(meta_groups),
        knobs=RunKnobs.stack(run_knobs),
    )
