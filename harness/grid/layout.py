"""A grid of conditions × seeds, laid out as runs and judge slots for one compiled program.

Runs are condition-major. Each run owns `n_judges` consecutive judge slots; slots of
all runs are concatenated on one axis, so ensembles of different sizes share a grid
without padding every run to the largest ensemble. Each scheduled mechanism
(`harness.grid.schedules`) gets its work groups: the runs (and slots) it acts on, by cadence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.engine.architecture import DEFAULT_MODEL, ModelConfig
from harness.engine.knobs import Knobs, RunKnobs, anchor_pair_count, holdout_pair_count, stack_knobs
from harness.engine.streams import Streams
from harness.engine.world import WorldConfig
from harness.grid.batching import WorkGroup
from harness.grid.schedules import CADENCES, SCHEDULES, Cadence
from harness.inference.claims import Claim
from harness.original.streams import Script as OriginalScript


class RunSettings(BaseModel):
    """Length and batch size shared by every run of a grid."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    seeds: tuple[int, ...] = Field((0, 1, 2, 3, 4), min_length=1, description="a count N (seeds 0..N-1) or a list")
    iterations: int = Field(10, ge=1, description="outer iterations")
    steps_per_iteration: int = Field(200, ge=1, description="inner steps per outer iteration")
    batch_size: int = Field(64, ge=2, le=4096, description="sequences per policy step and per judge batch")
    streams: Streams = Field(
        "coevolab",
        description="whose random streams every draw follows: coevolab's own (paired across conditions) or "
        "the original lab's, run for run (harness.engine.streams); 'harness', the old name of coevolab's, is read "
        "as 'coevolab'",
    )
    block_seeds: int | None = Field(
        None,
        ge=1,
        description="seeds per block, the unit of work a grid is run in (harness.experiment.blocks); unset: the "
        "harness's default for the grid's condition count",
    )

    @field_validator("streams", mode="before")
    @classmethod
    def _old_stream_name(cls, value: object) -> object:
        # Condition files and grid.json of earlier runs name coevolab's streams "harness".
        return "coevolab" if value == "harness" else value

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
    original_script: OriginalScript = Field(
        "variants",
        description="under the original lab's streams, which of its entry scripts seeds this condition: "
        "'baseline' (its published baseline row; one judge) or 'variants' (every other row)",
    )

    @model_validator(mode="after")
    def _baseline_script_has_one_judge(self) -> Condition:
        if self.original_script == "baseline" and self.knobs.n_judges != 1:
            raise ValueError(f"the original's baseline script pretrains one judge, not n_judges={self.knobs.n_judges}")
        return self


class GridSpec(BaseModel):
    """Everything that defines a grid: world, run settings, pretraining and named conditions."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = "grid"
    world: WorldConfig = WorldConfig()
    model: ModelConfig = ModelConfig()
    run: RunSettings = RunSettings()
    pretrain: PretrainSettings = PretrainSettings()
    conditions: tuple[Condition, ...] = Field(min_length=1)
    claims: tuple[Claim, ...] = Field(
        (), description="statements about the grid's metrics to test (harness.inference.claims)"
    )

    @field_validator("conditions")
    @classmethod
    def _unique_names(cls, conditions: tuple[Condition, ...]) -> tuple[Condition, ...]:
        names = [c.name for c in conditions]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"condition names must be unique; repeated: {', '.join(repeated)}")
        return conditions

    @model_validator(mode="after")
    def _original_streams_need_default_networks(self) -> GridSpec:
        # The original lab's streams restate its initialisation of its own GRUs only.
        if self.run.streams == "original" and not self.model.is_default:
            raise ValueError(
                "streams = 'original' restates the original lab's GRU initialisation; "
                "a non-default [model] needs streams = 'coevolab'"
            )
        return self

    @model_validator(mode="after")
    def _claims_fit_the_grid(self) -> GridSpec:
        for claim in self.claims:
            claim.check_against([c.name for c in self.conditions], self.run.iterations)
        return self

    def condition(self, name: str) -> Condition:
        return next(c for c in self.conditions if c.name == name)

    def judge_target(self, condition: Condition) -> float:
        """The Spearman target `condition`'s judges are pretrained to: its knob, or else the grid's [pretrain] one."""
        target = condition.knobs.judge_pretrain_target
        return self.pretrain.target_spearman if target is None else target

    def only(self, names: Sequence[str]) -> GridSpec:
        """The same grid restricted to some conditions (in the given order), keeping the claims that still apply."""
        kept = []
        for claim in self.claims:
            try:
                claim.check_against(names, self.run.iterations)
            except ValueError:
                continue
            kept.append(claim)
        return self.model_copy(update={"conditions": tuple(self.condition(n) for n in names), "claims": tuple(kept)})


@dataclasses.dataclass(frozen=True)
class WorkGroupShape:
    """Static sizes of one work group: a scheduled mechanism's runs of one cadence and their judge slots.

    holdout_pairs: the largest held-out pair count of the group's runs (every run's are padded
    to it), for meta-correction groups; 0 for others. Padding per group rather than per grid
    keeps a run's masked held-out sums, and so its results, independent of other groups.
    """

    mechanism: str
    cadence: Cadence
    runs: int
    slots: int
    holdout_pairs: int = 0


@dataclasses.dataclass(frozen=True)
class GridShape:
    """The static sizes of a grid: the only things that select a compiled program.

    groups: the non-empty work groups, mechanism by mechanism in `SCHEDULES` order, then by cadence.
    max_anchor_pairs: the largest anchor pair count, to which every run's are padded (its draws
    do not depend on the padding); max_holdout_pairs: the largest over the meta groups.
    history_depth: policy checkpoints each run keeps, the largest temporal gap of runs with a past
    rejected side (0: none kept); max_lookahead_steps: the longest look-ahead (0: no run looks ahead).
    model: the policy's and the judge's architecture (the grid's `[model]`), which decide every row's width.
    """

    n_runs: int
    n_slots: int
    n_seeds: int
    max_members: int
    max_anchor_pairs: int
    groups: tuple[WorkGroupShape, ...]
    batch_size: int
    steps_per_iteration: int
    vocab_size: int
    seq_len: int
    streams: Streams = "coevolab"
    history_depth: int = 0
    max_lookahead_steps: int = 0
    model: ModelConfig = DEFAULT_MODEL

    @property
    def contrast(self) -> bool:
        """Whether some run's judge trains on pairs with a side other than the policy."""
        return bool(self.groups_of("rejected_side") or self.groups_of("lookahead"))

    @property
    def max_holdout_pairs(self) -> int:
        return max((group.holdout_pairs for group in self.groups), default=0)

    def groups_of(self, mechanism: str) -> list[int]:
        """Positions in `groups` of a mechanism's work groups."""
        return [i for i, group in enumerate(self.groups) if group.mechanism == mechanism]

    def slots_of(self, mechanism: str) -> int:
        return sum(self.groups[i].slots for i in self.groups_of(mechanism))


@dataclasses.dataclass(frozen=True)
class GridLayout:
    """Runs and judge slots of a grid, as host arrays.

    run_condition, run_seed_index: int (R,). slot_run, slot_member: int (J,).
    groups: one `WorkGroup` (of numpy arrays) per `shape.groups` entry. knobs: `RunKnobs` (R,).
    """

    spec: GridSpec
    shape: GridShape
    run_condition: np.ndarray
    run_seed_index: np.ndarray
    slot_run: np.ndarray
    slot_member: np.ndarray
    groups: tuple[WorkGroup, ...]
    knobs: RunKnobs

    @property
    def seeds(self) -> tuple[int, ...]:
        return self.spec.run.seeds

    def run_labels(self) -> list[tuple[str, int]]:
        """(condition name, seed) of every run, in run order."""
        names = [c.name for c in self.spec.conditions]
        return [(names[c], self.seeds[s]) for c, s in zip(self.run_condition, self.run_seed_index, strict=True)]


# What of a run's knobs decides the grid's shape: its ensemble size and its work group in
# every schedule. Runs of one kind are interchangeable for padding (see `harness.grid.sharding`);
# anchor and held-out pair counts are not part of it: the grid pads those to their maximum.
GroupMembership = tuple[int, tuple[Cadence | None, ...]]


def group_membership(knobs: Knobs, n_outputs: int) -> GroupMembership:
    return knobs.n_judges, tuple(schedule(knobs, n_outputs) for schedule in SCHEDULES.values())


def layout_grid(spec: GridSpec) -> GridLayout:
    """Lay out every condition × seed of `spec` as runs (condition-major) and judge slots."""
    n_conditions, n_seeds = len(spec.conditions), len(spec.run.seeds)
    return layout_runs(spec, np.repeat(np.arange(n_conditions), n_seeds), np.tile(np.arange(n_seeds), n_conditions))


def layout_runs(spec: GridSpec, run_condition: np.ndarray, run_seed_index: np.ndarray) -> GridLayout:
    """Lay out the given runs of `spec`: condition index and seed index (into spec.run.seeds) of each, (R,)."""
    run_knobs = [spec.conditions[c].knobs for c in run_condition]
    members = np.array([k.n_judges for k in run_knobs])
    slot_run = np.repeat(np.arange(len(run_knobs)), members)
    slot_member = np.concatenate([np.arange(m) for m in members])
    n_outputs = spec.world.n_outputs
    holdout_pairs = np.asarray(holdout_pair_count(np.array([k.meta_holdout_fraction for k in run_knobs]), n_outputs))

    groups, group_shapes = [], []
    for mechanism, schedule in SCHEDULES.items():
        condition_cadence = [schedule(c.knobs, n_outputs) for c in spec.conditions]
        cadence = np.array([condition_cadence[c] for c in run_condition], dtype=object)
        for name in CADENCES:
            run_ids = np.flatnonzero(cadence == name)
            if run_ids.size:
                slot_ids = np.flatnonzero(np.isin(slot_run, run_ids))
                groups.append(
                    WorkGroup(run_ids, slot_ids, slot_run[slot_ids], np.searchsorted(run_ids, slot_run[slot_ids]))
                )
                held_out = int(np.max(holdout_pairs[run_ids])) if mechanism == "meta_correction" else 0
                group_shapes.append(WorkGroupShape(mechanism, name, run_ids.size, slot_ids.size, held_out))

    anchor_pairs = anchor_pair_count(np.array([k.anchor_fraction for k in run_knobs]), spec.run.batch_size)
    past_gaps = [k.temporal_gap for k in run_knobs if k.rejected_from == "past"]
    lookaheads = [k.lookahead_steps for k in run_knobs if k.chosen_from == "lookahead"]
    shape = GridShape(
        n_runs=len(run_knobs),
        n_slots=len(slot_run),
        n_seeds=len(spec.run.seeds),
        max_members=int(members.max()),
        max_anchor_pairs=int(np.max(anchor_pairs)),
        groups=tuple(group_shapes),
        batch_size=spec.run.batch_size,
        steps_per_iteration=spec.run.steps_per_iteration,
        vocab_size=spec.world.vocab_size,
        seq_len=spec.world.seq_len,
        streams=spec.run.streams,
        history_depth=max(past_gaps, default=0),
        max_lookahead_steps=max(lookaheads, default=0),
        model=spec.model,
    )
    return GridLayout(
        spec=spec,
        shape=shape,
        run_condition=run_condition,
        run_seed_index=run_seed_index,
        slot_run=slot_run,
        slot_member=slot_member,
        groups=tuple(groups),
        knobs=stack_knobs(run_knobs),
    )
