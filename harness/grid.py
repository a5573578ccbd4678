"""A grid of conditions × seeds, laid out as runs and judge slots for one compiled program.

Runs are condition-major. Each run owns `n_judges` consecutive judge slots; slots of
all runs are concatenated on one axis, so ensembles of different sizes share a grid
without padding every run to the largest ensemble.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

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
class GridShape:
    """The static sizes of a grid: the only things that select a compiled program."""

    n_runs: int
    n_slots: int
    n_seeds: int
    max_members: int
    anchor_slots: int
    max_anchor_pairs: int
    meta_slots: int
    max_holdout_pairs: int
    batch_size: int
    steps_per_iteration: int
    vocab_size: int
    seq_len: int


@dataclasses.dataclass(frozen=True)
class GridLayout:
    """Runs and judge slots of a grid, as host arrays.

    run_condition, run_seed_index: int (R,). slot_run, slot_member: int (J,).
    anchor_slot_ids / meta_slot_ids: the slots whose run uses that mechanism.
    """

    spec: GridSpec
    shape: GridShape
    run_condition: np.ndarray
    run_seed_index: np.ndarray
    slot_run: np.ndarray
    slot_member: np.ndarray
    anchor_slot_ids: np.ndarray
    meta_slot_ids: np.ndarray
    knobs: RunKnobs

    @property
    def seeds(self) -> tuple[int, ...]:
        return self.spec.run.seeds

    def run_labels(self) -> list[tuple[str, int]]:
        """(condition name, seed) of every run, in run order."""
        names = [c.name for c in self.spec.conditions]
        return [(names[c], self.seeds[s]) for c, s in zip(self.run_condition, self.run_seed_index, strict=True)]


def layout_grid(spec: GridSpec) -> GridLayout:
    """Lay out every condition × seed of `spec` as runs and judge slots."""
    n_conditions, n_seeds = len(spec.conditions), len(spec.run.seeds)
    run_condition = np.repeat(np.arange(n_conditions), n_seeds)
    run_seed_index = np.tile(np.arange(n_seeds), n_conditions)
    run_knobs = [spec.conditions[c].knobs for c in run_condition]
    members = np.array([k.n_judges for k in run_knobs])
    slot_run = np.repeat(np.arange(len(run_knobs)), members)
    slot_member = np.concatenate([np.arange(m) for m in members])

    anchor_pairs = np.asarray(anchor_pair_count(np.array([k.anchor_fraction for k in run_knobs]), spec.run.batch_size))
    holdout_pairs = np.asarray(
        holdout_pair_count(np.array([k.meta_holdout_fraction for k in run_knobs]), spec.world.n_outputs)
    )
    anchor_slot_ids = np.flatnonzero(anchor_pairs[slot_run] > 0)
    meta_slot_ids = np.flatnonzero(holdout_pairs[slot_run] > 0)
    shape = GridShape(
        n_runs=len(run_knobs),
        n_slots=len(slot_run),
        n_seeds=n_seeds,
        max_members=int(members.max()),
        anchor_slots=len(anchor_slot_ids),
        max_anchor_pairs=int(anchor_pairs.max()),
        meta_slots=len(meta_slot_ids),
        max_holdout_pairs=int(holdout_pairs.max()),
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
        anchor_slot_ids=anchor_slot_ids,
        meta_slot_ids=meta_slot_ids,
        knobs=RunKnobs.stack(run_knobs),
    )
