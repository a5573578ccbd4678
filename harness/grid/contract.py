"""What a mechanism is: the one contract that every mechanism module fills, built in or a lab's own.

A mechanism is one module that defines `MECHANISM = Mechanism(...)`: its knobs, the rows it adds to
the inner step (each a function of one run or one judge, and when it is due), the state it keeps,
its static sizes and constants, its metrics and the view of a run they read, and any of the loop's
hooks it takes (where the policy's reward comes from, what happens at an outer iteration's start
and end). The grid (`harness.grid`) builds its knobs, state, step and metrics from the mechanisms
it is given and names none of them; `harness/mechanisms/` holds the built-in ones, and a condition
file loads others (`[mechanisms] modules = [...]`, `harness.grid.registry`).

The inner step of every run, in order:

1. ``judge_update_due``: whether the run's judge update is due on this step (every step where no
   mechanism says otherwise); then the step's keys (`harness.engine.streams`), which depend on it.
2. The policy's REINFORCE step, rewarded by its judges: each judge's row (``reward_row``), their
   scores aggregated over the run's judges (``aggregate``), shaped per sample (``shape_reward``),
   then the update's weight on mean log π and learning rate (``update_policy``).
3. Stage ``sides`` (rows over runs, each given its run's `PairSides`): where the two sides of the judge's
   training pairs are drawn from (the policy, unless a row replaces a side; before the stage, ``contrast``
   gives each run's probability of labelling its pairs chosen > rejected instead of by the judge, and the grid
   draws which do).
4. Stage ``updates`` (rows over judge slots, each given its judge and its own state of the slot): the judge's
   update and whatever rides on it.
5. Stage ``corrections`` (rows over judge slots): steps on a cadence of their own, after the updates.
6. ``after_step``: bookkeeping (counters) from what the rows did.

Around the inner steps of an outer iteration: ``start_iteration`` before the first, ``end_iteration``
after the last, then the judges' reset where ``reset_due`` says. A stage's rows run in the order the
mechanisms were registered (built-ins first, in `harness.mechanisms.BUILT_IN` order), except where a
mechanism's ``after`` / ``before`` say otherwise; so do the hooks that pass a value from one mechanism
to the next (``reward_row``, ``aggregate``, ``shape_reward``, ``update_policy``, the flags
``judge_update_due`` and ``reset_due``, each a bool per run that the grid acts on, ``contrast``, a
probability per run that the grid draws from, and, on the host, ``judge_plan``). No hook is one mechanism's
alone. The state hooks (``start_iteration``, ``end_iteration``, ``after_step``) need no order: each changes
only its own mechanism's state (`OwnState`), and every one at a point reads the state as that point found it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import flax.struct
import jax
import numpy as np
import pandas as pd
from pydantic import BaseModel

from harness.engine import streams
from harness.engine.architecture import DEFAULT_MODEL, ModelConfig
from harness.engine.metrics import Metric
from harness.engine.state import CoevolutionState
from harness.engine.streams import Streams
from harness.engine.world import World
from harness.grid.batching import WorkGroup
from harness.grid.knobs import Knobs, RunKnobs
from harness.grid.report_section import MechanismReport
from harness.grid.step_rows import AppliedRows, StepRow, WorkGroupShape


@dataclasses.dataclass(frozen=True)
class GridShape:
    """The static sizes of a grid: the only things that select a compiled program.

    mechanisms: every mechanism of the grid, built-in and loaded, in catalog order (left out of the shape's repr,
    which names the loaded ones with their source digests in `plugins`).
    used: the names of the mechanisms some run of the grid uses (`Mechanism.uses`), in catalog order; the loop
    calls the hooks and views of these only (`used_mechanisms`), and only their metrics and tables are the grid's.
    groups: the non-empty work groups, row by row in the order the step runs them, then by cadence.
    sizes: (name, value) of every static size the mechanisms declared (`Mechanism.sizes`, e.g. the largest anchor
    pair count, to which every run's are padded), sorted by name; `size(name)` reads one.
    model: the policy's and the judge's architecture (the grid's `[model]`), which decide every row's width.
    plugins: (name, source digest) of each mechanism the grid loads beside the built-in ones, so that a changed
    mechanism selects another program (the built-ins are covered by the package's source).
    The seed count, the iteration count and the inner steps per iteration are not sizes: they are values the host
    passes in, so grids that differ only in them share one program.
    """

    mechanisms: tuple[Mechanism, ...] = dataclasses.field(repr=False)
    n_runs: int
    n_slots: int
    max_members: int
    groups: tuple[WorkGroupShape, ...]
    batch_size: int
    vocab_size: int
    seq_len: int
    streams: Streams = "coevolab"
    sizes: tuple[tuple[str, int], ...] = ()
    model: ModelConfig = DEFAULT_MODEL
    plugins: tuple[tuple[str, str], ...] = ()
    used: tuple[str, ...] = ()

    @property
    def used_mechanisms(self) -> tuple[Mechanism, ...]:
        """The mechanisms some run of the grid uses (`used`), in catalog order: those whose hooks and views the loop
        calls."""
        return tuple(m for m in self.mechanisms if m.name in self.used)

    def parts(self) -> dict[str, str]:
        """Each field of the shape but `mechanisms` (whose used ones `used` names), as text: what a profile lists to
        tell two programs' shapes apart."""
        return {f.name: repr(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "mechanisms"}

    def size(self, name: str) -> int:
        """A static size a mechanism declared (0 where the grid has none of that name)."""
        return dict(self.sizes).get(name, 0)

    def groups_of(self, row: str) -> list[int]:
        """Positions in `groups` of a row's work groups."""
        return [i for i, group in enumerate(self.groups) if group.row == row]

    def slots_of(self, row: str) -> int:
        return sum(self.groups[i].slots for i in self.groups_of(row))


@flax.struct.dataclass
class GridConstants:
    """Arrays fixed for the life of a grid.

    q_star (N,); slot_run int32 (J,) the run of each judge slot; run_first_slot int32 (R,) its first slot (a run's
    slots are consecutive); run_judges int32 (R,) how many judges each run has; run_member_draws int32 (R,) how many
    of them draw keys of their own on an update (`GridLayout.run_member_draws`); groups: one `WorkGroup` per
    shape.groups entry; pretrained_judges float32 (J, P) rows; initial_policies float32 (R, P) rows, π₀ of each run;
    initial_log_pi float32 (R, N): log π₀ of each run's initial
    policy over every output (what the diagnostics measure drift from); mechanisms: mechanism name -> the constants
    it declared (`Mechanism.constants`, leading axis R).
    """

    q_star: jax.Array
    slot_run: jax.Array
    run_first_slot: jax.Array
    run_judges: jax.Array
    run_member_draws: jax.Array
    groups: tuple[WorkGroup, ...]
    pretrained_judges: jax.Array
    initial_policies: jax.Array
    initial_log_pi: jax.Array
    mechanisms: dict[str, Any]

    def of(self, mechanism: str) -> Any:
        """The constants `mechanism` declared."""
        return self.mechanisms[mechanism]


@flax.struct.dataclass
class PairSides:
    """The policy rows (R, P) each run draws the chosen and the rejected side of its judge's pairs from."""

    chosen: jax.Array
    rejected: jax.Array


class StepContext(NamedTuple):
    """What one inner step's hooks read (a row reads one member of it, `harness.grid.member_context.MemberContext`):
    the grid's static shape, constants and knobs, the state as the step left it so far, the step's keys
    (`streams.StepKeys`, each with a leading run axis), counter (the step's 1-based count within its outer
    iteration), update_due bool (R,) (the runs whose judge update is due; keys and update_due are None in the
    `judge_update_due` hooks, which decide them: the keys are drawn from it), and, from the sides stage on, contrast
    bool (R,) (the runs whose pairs on this step are labelled chosen > rejected, drawn with the probability the
    `contrast` hooks give) and sides (the `PairSides` each run draws its judge's pairs from); after the stages
    (`after_step`), applied: every work group each row acted on and its due mask (`AppliedRows`); key: where a
    mechanism's own hook reads the step, that mechanism's own key of the step, (R, 2) (`streams.own_keys`:
    independent of the loop's draws and of every other mechanism's; one for its `contrast` and `after_step` hooks and
    its sides-stage rows, so a mechanism that draws in more than one of them splits it; its rows read it per member,
    `MemberContext.key`, a judge's folded with its index in its run)."""

    shape: GridShape
    constants: GridConstants
    knobs: RunKnobs
    state: CoevolutionState
    keys: streams.StepKeys | None
    counter: jax.Array
    update_due: jax.Array | None
    contrast: jax.Array | None = None
    sides: PairSides | None = None
    applied: AppliedRows | None = None
    key: jax.Array | None = None


class JudgeContext(NamedTuple):
    """What a per-judge hook (`reward_row`) reads of one judge slot: knobs, its run's knobs (`RunKnobs` of scalars);
    pretrained (P,), the slot's pretrained judge row."""

    knobs: RunKnobs
    pretrained: jax.Array


class MemberScores(NamedTuple):
    """What an `aggregate` hook reads of one run's judges: scores (M, X), each judge slot's score of X samples or
    outputs; members bool (M,), which slots are the run's real judges (the rest pad the run to the largest
    ensemble); knobs, the run's knobs (`RunKnobs` of scalars)."""

    scores: jax.Array
    members: jax.Array
    knobs: RunKnobs


class OwnState(NamedTuple):
    """A mechanism's own part of the grid's state: all that its state hooks (`start_iteration`, `end_iteration`,
    `after_step`) are given and return. runs: its per-run state, leading axis R (`Mechanism.run_state`); slots: its
    per-judge state, leading axis J (`Mechanism.slot_state`); None for a part it does not keep."""

    runs: Any = None
    slots: Any = None


class IterationContext(NamedTuple):
    """What the hooks around an outer iteration read: the grid's static shape, constants and knobs, the state as the
    hook point found it (before any mechanism's hook there), iteration, the outer iteration's 0-based int32 count,
    and key, the hook's mechanism's own key of this point (R, 2), independent of every other draw (`reset_due`
    is given its mechanism's `end_iteration` key: one key for the end of an iteration)."""

    shape: GridShape
    constants: GridConstants
    knobs: RunKnobs
    state: CoevolutionState
    iteration: jax.Array
    key: jax.Array | None = None


@flax.struct.dataclass
class PolicyBatch:
    """One run's policy batch, as its reward hooks (`shape_reward`) see it: tokens int32 (B, L); log_pi (B,) the
    policy's log π of each sample (no gradient flows through it); initial_policy (P,) the row of the run's π₀; q_star
    (N,) the world's q* of every output (`harness.engine.world.output_index` of the tokens indexes it); vocab and model
    (static), to evaluate other rows on the tokens; mechanisms: the run's own state of every mechanism that keeps one
    (`RunState.mechanisms` without the run axis), to read; knobs: the run's knobs (`RunKnobs` without the run axis);
    key (2,): the key the batch was drawn from, which the grid folds with each hook's mechanism's stream number
    before the hook sees it (`harness.engine.streams.own_key`), so a hook's draws are its own."""

    tokens: jax.Array
    log_pi: jax.Array
    initial_policy: jax.Array
    q_star: jax.Array
    vocab: int = flax.struct.field(pytree_node=False)
    model: Any = flax.struct.field(pytree_node=False)
    mechanisms: dict[str, Any] = flax.struct.field(default_factory=dict)
    knobs: Any = None
    key: jax.Array | None = None


@flax.struct.dataclass
class PolicyUpdate:
    """What one run's policy step does with its shaped rewards, as its `update_policy` hooks see and change it:
    log_prob_weight () float32, the weight on mean log π in the loss (`harness.engine.learning.reinforce_cotangent`;
    0 before any hook adds to it); learning_rate () float32, Adam's step size (NaN before the hook that sets it, the
    `learning_rates` mechanism's, so a step no hook gave a rate is NaN, not silently unchanged)."""

    log_prob_weight: jax.Array
    learning_rate: jax.Array


class DiagnosticsContext(NamedTuple):
    """What a mechanism's view reads after an outer iteration: the grid's shape, constants, knobs and state;
    log_pi float32 (R, N), every run's log π over all outputs; judge_tables float32 (J, N), every judge's scores of
    all outputs; reward float32 (R, N), every run's reward table (its judges as the policy sees them); run_slots
    int32 (R, M) and members bool (R, M), each run's judge slots padded to the largest ensemble and which are real;
    score_table: judge rows (J', P) -> their score tables (J', N)."""

    shape: GridShape
    constants: GridConstants
    knobs: RunKnobs
    state: CoevolutionState
    log_pi: jax.Array
    judge_tables: jax.Array
    reward: jax.Array
    run_slots: jax.Array
    members: jax.Array
    score_table: Callable[[jax.Array], jax.Array]


class PretrainData(NamedTuple):
    """What a condition's judges are pretrained on, and for how long (`JudgePlan.data`;
    `harness.grid.pretrain_data` defines each): examples, the size of a fixed dataset per judge drawn once from its
    data key (0: fresh draws every step); corruption, the share of pretraining labels that are another output's q*;
    fixed_steps, pretrain for exactly this many steps whatever Spearman the judges reach (0: to the target)."""

    examples: int = 0
    corruption: float = 0.0
    fixed_steps: int = 0


class JudgePlan(NamedTuple):
    """How many judges a condition's runs have and how they are pretrained, as the `judge_plan` hooks leave it:
    count, the judges per run (its ensemble size; 1 to begin with); target, the Spearman they are pretrained to
    (None to begin with: the grid's [pretrain] target_spearman); data, what they are pretrained on and for how long
    (`PretrainData`; fresh draws, uncorrupted, to the target, to begin with)."""

    count: int = 1
    target: float | None = None
    data: PretrainData = PretrainData()


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity, as a mechanism's functions are
class RunTable:
    """A table per run and outer iteration with an index axis: like a metric, but a vector of K entries per run
    (`Mechanism.tables`). The run directory gets `<name>.parquet`, one row per condition × seed × iteration × index
    entry: condition, seed, iteration, the index columns, the value columns.

    name: the file's stem, unique over every mechanism's tables (and no other file of a run directory's);
    definition: what one row is, in a sentence; index: index column -> its K values (static, the same for every
    grid), in row order; columns: value column -> a one-line definition; compute: (`DiagnosticsContext`) -> value
    column -> float32 (R, K), computed inside the program after every outer iteration, as metrics are.
    measures: measure -> a one-line definition, of the numbers per run and outer iteration that `compute_measures`
    reads off the table after the run, on the host; claims read them as they read a float metric, and the report
    joins them to the metrics table where the run directory holds the table (names are one namespace with every
    metric's, and none may be a column the reports key by or derive, `registry.RESERVED_COLUMNS`).
    compute_measures: (the run's metrics table, this table's rows, both pandas) -> a frame of condition, seed,
    iteration and one column per measure, one row per run and iteration it measures (at most); only the declared
    measures are joined, as float64, and one it lacks stops the report in one line.
    """

    name: str
    definition: str
    index: Mapping[str, tuple]
    columns: Mapping[str, str]
    compute: Callable[[DiagnosticsContext], Mapping[str, jax.Array]]
    measures: Mapping[str, str] = dataclasses.field(default_factory=dict)
    compute_measures: Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame] | None = None

    @property
    def size(self) -> int:
        """K, the entries of the index axis."""
        return len(next(iter(self.index.values())))

    def key(self, column: str) -> str:
        """The name of one value column among a record's arrays (`harness.grid.diagnostics.Diagnostics`)."""
        return f"{self.name}/{column}"


class GridFacts(NamedTuple):
    """What a mechanism's static sizes may depend on beside its runs' knobs: the batch size and the world's size."""

    batch_size: int
    n_outputs: int


class HostRuns(NamedTuple):
    """Runs of a grid (or of one shard) on the host, for a mechanism's constants: shape (`GridShape`), knobs (their
    `RunKnobs`, (R,) each), streams (whose random streams the grid follows), world (`World`: q* and the outputs) and
    seeds (int (R,), each run's seed: a draw made from it alone is shared by every condition of the seed)."""

    shape: GridShape
    knobs: RunKnobs
    streams: Streams
    world: World
    seeds: np.ndarray


@dataclasses.dataclass(frozen=True)
class Mechanism:
    """One mechanism: everything it is, declared in its own module. Every field but `name` and `summary` is
    optional; a mechanism fills what it needs.

    Knobs and place:
        uses: (a run's `Knobs`) -> whether a run of these knobs uses the mechanism (None: every run does). A grid
            none of whose runs uses it calls none of its hooks and its view, and has none of its metrics and tables
            (`GridShape.used`), so that it costs nothing there; a grid where some run uses it calls them for every
            run, so they must leave a run that does not use it as it would be without them. Its rows are scheduled
            by their own `schedule`, per run, as always; its knobs, state and constants exist in every grid.
        knobs: a pydantic model of its knobs (each field documented, validated, with a default that leaves every
            grid as it was); a field with json_schema_extra={HOST_ONLY: True} acts only before the program runs.
            Knob names are one namespace over all mechanisms.
        rows: its rows of the inner step (`StepRow`).
        after / before: mechanisms whose rows, in a stage both have rows in, and whose hooks, for a hook both take,
            come before / after its own.
    State (each mechanism's state exists once, in `CoevolutionState`'s per-run or per-judge part, by its name):
        run_state: (shape, one run's initial policy row (P,)) -> its per-run state for one run (no leading axis).
        slot_state: (shape, one judge's pretrained row (P,)) -> its per-judge state for one judge; also what a
            judge reset returns it to.
    Sizes and constants:
        sizes: (the `Knobs` of the grid's runs, `GridFacts`) -> named static sizes the program needs
            (`GridShape.size`), padded to their largest over a grid's shards.
        constants: (`HostRuns`) -> host arrays with a leading run axis, fixed for the grid (`GridConstants.of`).
        extra_bytes: (shape) -> working memory its rows need beyond the loop's, for the memory estimate.
    Judges:
        judge_plan: (`JudgePlan`, a condition's `Knobs`) -> `JudgePlan`, on the host before pretraining, any number
            in mechanism order (of the mechanisms the condition uses): how many judges the condition's runs have and
            how they are pretrained, from the plan the mechanisms before it left (at first one judge, the grid's
            target, fresh data).
    The loop's values per run (two flags, bool, and the contrast's probability, float32), any number of each,
    applied in mechanism order: each is given the value (R,) as the mechanisms before it left it, the point's context
    with its own key, and its own state (`OwnState`), and returns the value and its own state (kept, changed or not);
    the rest of the grid's state it reads as the point found it:
        judge_update_due: (due, `StepContext` without keys or update_due, own) -> (due, own), at each inner step's
            start: the runs whose judge update is due on the step of 1-based count `step.counter` in its outer
            iteration (True to begin with: every step where no mechanism says otherwise). No key: the step's keys
            are drawn from its value.
        contrast: (share, `StepContext`, own) -> (share, own), after the policy step: each run's probability,
            float32 (R,), that its judge pairs on this step are labelled chosen > rejected (0 to begin with;
            `pair_sources` raises it to contrast_mix where the judge update is due and one of the run's sides is not
            the policy). The grid clips the share to [0, 1] and draws the flag from it once
            (`training_step.draw_contrast`). The pair audit reads the same share after each outer iteration, calling
            the hooks as for the next step (the first of the next iteration, its update due) and dropping their own
            state, so it audits the pairs that step would draw whichever mechanism set the share: a hook returns a
            probability rather than drawing from its own key, which the audit would see one draw of.
        reset_due: (due, `IterationContext`, own) -> (due, own), after every `end_iteration` hook: the runs whose
            judges the grid returns to their pretrained weights after outer iteration `context.iteration` (0-based),
            with a fresh Adam state and every mechanism's per-judge state at its start (`slot_state`) (False to
            begin with).
    The loop's hooks, any number, applied in mechanism order:
        aggregate: (reward (X,), `MemberScores`) -> reward (X,), for one run: its reward from its judges' scores, from
            the reward the mechanisms before it left (at first the real members' mean); like `reward_row`, called by
            the policy step, a look-ahead copy and the diagnostics, so it changes no state.
        reward_row: (row (P,), `JudgeContext`, own) -> row (P,), for one judge slot: the judge row that rewards its
            run's policy, from the row the mechanisms before it chose (at first the judge's own); own is the
            mechanism's per-judge state of the slot (`slot_state`; None where it keeps none), to read: what the
            hook returns is the row alone, since the policy step, a look-ahead copy and the diagnostics all call it.
        shape_reward: (rewards (B,), `PolicyBatch` (with the run's knobs and the mechanism's own key), own) ->
            (rewards (B,), own), per sample; own is the mechanism's per-run state for the run (None where it keeps
            none), returned changed or as it was. What the policy's own step returns is kept; a look-ahead copy's
            step returns it too, but the copy's is dropped with the copy.
        update_policy: (update (`PolicyUpdate`), `PolicyBatch`, own) -> (update, own), after every `shape_reward`:
            the policy step's weight on mean log π and learning rate, as the mechanisms before it left them (a
            weight is added to, a rate replaced); batch and own as for `shape_reward` (the same key: a mechanism
            that draws in both splits it), and what the policy's own step returns of own is kept.
    The state hooks, any number: each is given its mechanism's own state (`OwnState`) and returns it, changed; the
    rest of the grid's state it only reads, as the hook point found it, so their order does not matter:
        start_iteration / end_iteration: (`IterationContext`, own) -> own, before an outer iteration's first inner
            step and after its last.
        after_step: (`StepContext` with `applied`, own) -> own, after each inner step's stages.
    Metrics:
        metrics: its metrics (`harness.engine.metrics.Metric`); their `compute` reads `run.of(name)`, what `view`
            computed for the run.
        view: (`DiagnosticsContext`) -> a pytree with a leading run axis (R, ...), computed inside the program.
        tables: its per-run tables (`RunTable`), each a vector per run and iteration, written as `<name>.parquet`.
    Report:
        report: its own section of a run's report and its word on conditions with identical results
            (`MechanismReport`), written with the report's parts (`harness.rendering`).
    """

    name: str
    summary: str
    knobs: type[BaseModel] | None = None
    uses: Callable[[Knobs], bool] | None = None
    rows: tuple[StepRow, ...] = ()
    after: tuple[str, ...] = ()
    before: tuple[str, ...] = ()
    run_state: Callable[[GridShape, jax.Array], Any] | None = None
    slot_state: Callable[[GridShape, jax.Array], Any] | None = None
    sizes: Callable[[Sequence[Knobs], GridFacts], Mapping[str, int]] | None = None
    constants: Callable[[HostRuns], Any] | None = None
    extra_bytes: Callable[[GridShape], int] | None = None
    judge_plan: Callable[[JudgePlan, Knobs], JudgePlan] | None = None
    aggregate: Callable[[jax.Array, MemberScores], jax.Array] | None = None
    judge_update_due: Callable[[jax.Array, StepContext, OwnState], tuple[jax.Array, OwnState]] | None = None
    contrast: Callable[[jax.Array, StepContext, OwnState], tuple[jax.Array, OwnState]] | None = None
    reset_due: Callable[[jax.Array, IterationContext, OwnState], tuple[jax.Array, OwnState]] | None = None
    reward_row: Callable[[jax.Array, JudgeContext, Any], jax.Array] | None = None
    shape_reward: Callable[[jax.Array, PolicyBatch, Any], tuple[jax.Array, Any]] | None = None
    update_policy: Callable[[PolicyUpdate, PolicyBatch, Any], tuple[PolicyUpdate, Any]] | None = None
    start_iteration: Callable[[IterationContext, OwnState], OwnState] | None = None
    end_iteration: Callable[[IterationContext, OwnState], OwnState] | None = None
    after_step: Callable[[StepContext, OwnState], OwnState] | None = None
    metrics: tuple[Metric, ...] = ()
    view: Callable[[DiagnosticsContext], Any] | None = None
    tables: tuple[RunTable, ...] = ()
    report: MechanismReport | None = None


# The hooks that change only their mechanism's own state (`OwnState`; `Mechanism`'s docstring).
STATE_HOOKS = ("start_iteration", "end_iteration", "after_step")
