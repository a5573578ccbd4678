"""What a grid is: its run and pretraining settings, its conditions (each a named set of knobs), the mechanisms it
loads beside the built-in ones and its claims, with the rules across them (`GridSpec`); and what follows from the
spec alone: the mechanisms some run uses, the tables and metrics its runs record. `harness.grid.layout` lays a spec
out as runs and judge slots.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.engine.architecture import ModelConfig
from harness.engine.metrics import Metric, table_measures
from harness.engine.streams import Streams
from harness.engine.world import WorldConfig
from harness.grid import registry
from harness.grid.contract import JudgePlan, Mechanism, PretrainData, RunTable
from harness.grid.knobs import Knobs
from harness.inference.claims import Claim
from harness.original.streams import Script as OriginalScript

# A grid of more seeds than this is a typo (99999999), not an experiment: refused before anything is built (a
# condition file's [run] seeds, --seeds, --seed-list alike).
MAX_SEEDS = 10_000


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
            if value > MAX_SEEDS:
                raise ValueError(f"a seed count must be at most {MAX_SEEDS:,}, got {value:,}")
            return tuple(range(value))
        return value

    @field_validator("seeds")
    @classmethod
    def _distinct_non_negative(cls, seeds: tuple[int, ...]) -> tuple[int, ...]:
        if len(seeds) > MAX_SEEDS:
            raise ValueError(f"at most {MAX_SEEDS:,} seeds, got {len(seeds):,}")
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


def location(condition: str | None, key: str | None) -> list[str]:
    """The words that place a problem in a grid: its condition and its key, where it has them."""
    where = []
    if condition is not None:
        where.append(f"condition '{condition}'")
    if key is not None:
        where.append(f"key '{key}'")
    return where


class GridRuleError(ValueError):
    """A rule across a grid's tables that it breaks, with where: detail (the rule, in words), condition (the condition
    it is about) and key (the table or key it is about), each None where the rule has none. Its text names them."""

    def __init__(self, detail: str, condition: str | None = None, key: str | None = None) -> None:
        self.detail, self.condition, self.key = detail, condition, key
        where = location(condition, key)
        super().__init__(f"{', '.join(where)}: {detail}" if where else detail)


class Condition(BaseModel):
    """A named set of knobs. `boundary` marks reference conditions (e.g. frozen judge, oracle anchor)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = Field(min_length=1)
    knobs: Knobs = Field(default_factory=Knobs)
    description: str = ""
    boundary: bool = False
    original_script: OriginalScript = Field(
        "variants",
        description="under the original lab's streams, which of its entry scripts seeds this condition: "
        "'baseline' (its published baseline row; one judge) or 'variants' (every other row)",
    )


class MechanismSource(BaseModel):
    """A mechanism a grid loads beside the built-in ones: its name, its module as the condition file names it (a
    module name, or a file relative to the condition file) and the SHA-256 of its source when the grid was read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    module: str
    digest: str


def judge_plan(knobs: Knobs, mechanisms: Sequence[Mechanism]) -> JudgePlan:
    """How many judges a run of these knobs has and how they are pretrained: the `judge_plan` hook of every mechanism
    these knobs use (`Mechanism.uses`), in mechanism order, from one judge, the grid's target and fresh data
    (`JudgePlan()`).

    Raises:
        registry.MechanismError: a hook returned something other than a `JudgePlan` of at least one judge.
    """
    plan = JudgePlan()
    using = [m for m in mechanisms if m.uses is None or m.uses(knobs)]
    for name, hook in registry.ordered_hooks(using, "judge_plan"):
        plan = hook(plan, knobs)
        if not isinstance(plan, JudgePlan) or not isinstance(plan.count, numbers.Integral) or plan.count < 1:
            raise registry.MechanismError(
                f"mechanism '{name}': hook 'judge_plan' returns {plan!r}, not a JudgePlan of at least one judge"
            )
    return plan


def judges_per_run(knobs: Knobs, mechanisms: Sequence[Mechanism]) -> int:
    """How many judges a run of these knobs has (`judge_plan`): one where no mechanism says otherwise."""
    return int(judge_plan(knobs, mechanisms).count)


class GridSpec(BaseModel):
    """Everything that defines a grid: world, run settings, pretraining and named conditions."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = "grid"
    mechanisms: tuple[MechanismSource, ...] = Field(
        (), description="mechanisms the grid loads beside the built-in ones (harness.grid.registry)"
    )
    world: WorldConfig = WorldConfig()
    model: ModelConfig = ModelConfig()
    run: RunSettings = RunSettings()
    pretrain: PretrainSettings = PretrainSettings()
    conditions: tuple[Condition, ...] = Field(min_length=1)
    claims: tuple[Claim, ...] = Field(
        (), description="statements about the grid's metrics to test (harness.inference.claims)"
    )

    @field_validator("mechanisms")
    @classmethod
    def _mechanisms_loaded(cls, sources: tuple[MechanismSource, ...]) -> tuple[MechanismSource, ...]:
        loaded = registry.catalog()
        for source in sources:
            entry = loaded.get(source.name)
            if entry is None or entry.builtin:
                raise ValueError(f"mechanism '{source.name}' ({source.module}) is not loaded")
            if entry.digest != source.digest:
                raise ValueError(
                    f"mechanism '{source.name}' ({source.module}) is loaded from another source than this grid's "
                    f"(sha256 {entry.digest[:12]}, not {source.digest[:12]})"
                )
        return sources

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
            raise GridRuleError(
                "streams = 'original' restates the original lab's GRU initialisation; "
                "a non-default [model] needs streams = 'coevolab'",
                key="model",
            )
        return self

    @model_validator(mode="after")
    def _baseline_script_has_one_judge(self) -> GridSpec:
        # Judged with the mechanisms this grid loads: a loaded one's `judge_plan` may add judges the built-ins do not.
        for condition in self.conditions:
            if condition.original_script != "baseline":
                continue
            judges = judges_per_run(condition.knobs, self.active_mechanisms)
            if judges != 1:
                raise GridRuleError(
                    f"the original's baseline script pretrains one judge, and this condition's runs have {judges}",
                    condition.name,
                    key="original_script",
                )
        return self

    @model_validator(mode="after")
    def _knobs_of_loaded_mechanisms(self) -> GridSpec:
        loaded = {entry.mechanism.name for entry in registry.catalog().values() if entry.builtin}
        loaded |= {source.name for source in self.mechanisms}
        for condition in self.conditions:
            foreign = [name for name in condition.knobs.mechanisms() if name not in loaded]
            if foreign:
                raise GridRuleError(
                    f"it sets knobs of mechanism '{foreign[0]}', which this grid does not load: add its module to "
                    "[mechanisms] modules",
                    condition.name,
                )
        return self

    @property
    def mechanism_names(self) -> tuple[str, ...]:
        """The names of the mechanisms the grid loads beside the built-in ones."""
        return tuple(source.name for source in self.mechanisms)

    @property
    def active_mechanisms(self) -> tuple[Mechanism, ...]:
        """Every mechanism of the grid, built-in and loaded, in catalog order."""
        return registry.active(self.mechanism_names)

    @model_validator(mode="after")
    def _claims_fit_the_grid(self) -> GridSpec:
        for claim in self.claims:
            try:
                claim.check_against([c.name for c in self.conditions], self.run.iterations)
            except ValueError as error:
                raise GridRuleError(str(error), key=f"claims.{claim.name}") from None
        # A table's measure is a column only of a grid whose runs record the table.
        measures, recorded_tables = table_measures(), {table.name for table in grid_tables(self)}
        for claim in self.claims:
            table = measures[claim.metric][0] if claim.metric in measures else None
            if table is not None and table not in recorded_tables:
                mechanisms = [entry.mechanism for entry in registry.catalog().values()]
                (owner,) = [m for m in mechanisms if any(t.name == table for t in m.tables)]
                if owner in self.active_mechanisms:
                    fields = owner.knobs.model_fields if owner.knobs else {}
                    switches = [name for name, field in fields.items() if isinstance(field.default, bool)]
                    if switches and len(switches) == len(fields):
                        how = f"{' or '.join(f'{k} = true' for k in switches)} on a condition records it"
                    else:
                        how = f"a condition that uses mechanism '{owner.name}' records it"
                else:
                    how = f"its mechanism '{owner.name}' is not loaded"
                raise GridRuleError(
                    f"claim {claim.name!r} reads {claim.metric}, a measure of the per-run table {table!r}, which no "
                    f"condition of the grid records ({how})",
                    key=f"claims.{claim.name}",
                )
        # A mechanism's metric is a column only of a grid some run of which uses the mechanism.
        recorded = {metric.name for metric in grid_metrics(self)}
        owners = {metric.name: m for m in self.active_mechanisms for metric in m.metrics}
        for claim in self.claims:
            if claim.metric in owners and claim.metric not in recorded:
                owner = owners[claim.metric]
                raise GridRuleError(
                    f"claim {claim.name!r} reads {claim.metric}, a metric of mechanism '{owner.name}', which no "
                    f"condition of the grid uses (a condition that sets one of its knobs, "
                    f"{', '.join(owner.knobs.model_fields) if owner.knobs else 'none'}, records it)",
                    key=f"claims.{claim.name}",
                )
        return self

    @property
    def condition_knobs(self) -> dict[str, Knobs]:
        """Each condition's knobs by its name, in the grid's order."""
        return {condition.name: condition.knobs for condition in self.conditions}

    def condition(self, name: str) -> Condition:
        return next(c for c in self.conditions if c.name == name)

    def judge_target(self, condition: Condition) -> float:
        """The Spearman target `condition`'s judges are pretrained to: its `JudgePlan`'s where the plan sets one, else
        the grid's [pretrain] one."""
        target = judge_plan(condition.knobs, self.active_mechanisms).target
        return self.pretrain.target_spearman if target is None else float(target)

    def judge_data(self, condition: Condition) -> PretrainData:
        """What `condition`'s judges are pretrained on and for how long: its `JudgePlan`'s data (fresh draws,
        uncorrupted, to the target, where no mechanism changes it)."""
        return PretrainData(*judge_plan(condition.knobs, self.active_mechanisms).data)

    @model_validator(mode="after")
    def _judge_data_fits_the_pretraining(self) -> GridSpec:
        for condition in self.conditions:
            data = self.judge_data(condition)
            if data.fixed_steps % self.pretrain.check_every:
                raise GridRuleError(
                    f"it pretrains its judges for {data.fixed_steps} steps, not a multiple of [pretrain] check_every = "
                    f"{self.pretrain.check_every}",
                    condition.name,
                )
            if self.run.streams == "original" and (data.examples or data.corruption):
                raise GridRuleError(
                    "it pretrains its judges on a dataset or corrupted labels; the original lab's streams draw "
                    "fresh, uncorrupted batches only: use streams = 'coevolab'",
                    condition.name,
                )
        return self

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


def used_by(mechanisms: Sequence[Mechanism], run_knobs: Sequence[Knobs]) -> tuple[str, ...]:
    """The names of the mechanisms some of these runs uses (`Mechanism.uses`; one without it, every run), in order."""
    return tuple(m.name for m in mechanisms if m.uses is None or any(m.uses(knobs) for knobs in run_knobs))


def used_mechanisms(spec: GridSpec) -> tuple[Mechanism, ...]:
    """The mechanisms some run of a grid uses (`Mechanism.uses`), in catalog order: what its program calls, and whose
    metrics and tables its run directory holds."""
    mechanisms = spec.active_mechanisms
    used = used_by(mechanisms, [condition.knobs for condition in spec.conditions])
    return tuple(m for m in mechanisms if m.name in used)


def grid_tables(spec: GridSpec) -> tuple[RunTable, ...]:
    """The per-run tables a grid's runs record (`contract.RunTable`): those of the mechanisms they use."""
    return registry.tables(used_mechanisms(spec))


def grid_metrics(spec: GridSpec) -> tuple[Metric, ...]:
    """The metrics a grid's metrics table holds, in its column order: the loop's and those of the mechanisms its runs
    use."""
    return registry.metric_columns(used_mechanisms(spec))
