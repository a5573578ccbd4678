"""A grid grown in seed blocks until its claims are decided or the seed budget is spent.

The looks and the error level each spends are planned before the first look (`harness.inference.sequential`): n_1 (the
grid's own seeds) doubling to the budget n_K. The grid's seeds are any consecutive run s_0..s_0 + n_1 − 1 (seeds are
just PRNG keys; a fresh range gives looks on data no earlier verdict saw), and the looks after the first take the seeds
that follow: stage k (stages/<k>/ of the run directory) holds seeds s_0 + n_{k−1}..s_0 + n_k − 1 of the conditions that
still appear in an undecided claim (stage 0: every condition, seeds s_0..s_0 + n_1 − 1), run as a seed-block grid by
`run_in_blocks` on any `Backend`. A run of condition c and seed s depends on which other conditions its grid
holds only through float rounding (another program shape rounds differently, as seed blocks against a grid run whole
do): the same end modes, other floats within 1e-4 (tests/test_until_decided.py); measured on the published grid at full
length (its six conditions of open claims alone at seeds 0–7 against the committed 100-seed grid), real quality within
2.5e-5 and judge-perceived quality within 2.5e-3. So the stages' runs are the runs one grid of every seed would hold, to
that rounding. After stage k the stages' metrics are merged (metrics.csv.gz) and every claim is judged at level α_k
(`verdict_table`, the family's adjustment within it); a claim decided at a look keeps that look's verdict, and the next
stage grows only the conditions of the claims still open. The run stops when every claim is decided or after the last
look.

A grid of fewer seeds than a verdict needs (MIN_SEEDS) starts at that many: a look that can decide nothing would
still spend α.

The plan (sequential.json: looks, levels, first seed) is written before the first look trains and never changes. A
finished run is adopted as the first look only if its claims were never judged: one with verdicts (claims.csv) spent α
outside any plan, and growing it would spend more than α in all (decide its claims on a fresh plan and fresh seeds).

The run directory: grid.json (the grid at its first look's seeds), sequential.json (the plan), stages/<k>/ (each a
blocks run with its own report, text and tables: the figures are the merged grid's), metrics.csv.gz (the stages merged:
conditions may hold different seed counts), looks.csv (one row per look taken), claims.csv (each claim's row from the
look that decided it, else from the last look, with the look, its level and, for open claims, the seeds a fixed-seed
grid would need at α), report.md (the merged grid's report and a section on the sequential verdicts) and manifest.json.
Running it again resumes: finished stages and blocks are kept, and the verdicts, which are deterministic, are recomputed
from them.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from harness.common.integrity import run_entries, write_manifest
from harness.common.run_files import (
    CLAIMS_FILE,
    GRID_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    atomic_write_text,
    manifest,
    metrics_file,
    remove_figures,
    write_metrics_text,
)
from harness.engine.metrics import all_metrics
from harness.experiment.blocks import Backend, BlockError, in_process
from harness.experiment.merge import IN_PROCESS, how_run_line_of, ordered_metrics_text, run_finished, run_in_blocks
from harness.experiment.runner import Progress, SilentProgress, diverged_runs, load_spec
from harness.experiment.validation import read_metrics_frame
from harness.grid.grid_file import write_grid_file
from harness.grid.spec import GridSpec
from harness.inference.anytime import anytime_table
from harness.inference.claims import Claim
from harness.inference.run_measures import metric_ranges
from harness.inference.sequential import ANYTIME, Spending, anytime_looks, look_levels, planned_looks
from harness.inference.verdicts import DECISIONS, MIN_SEEDS, verdict_table
from harness.rendering.markdown import literal_stars
from harness.rendering.metrics_table import CSV_FLOAT_FORMAT
from harness.report import write_run_report
from harness.report.sequential import sequential_section

PLAN_FILE = "sequential.json"
STAGES_DIR = "stages"
LOOKS_FILE = "looks.csv"
UNDECIDED = ("undecided", "untested")


class SequentialPlan(BaseModel):
    """sequential.json: the looks (seed counts) planned before the first, the level each spends, and the first seed
    (look k's seeds are first_seed..first_seed + looks[k] − 1; a plan written before it was recorded started at 0)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spending: Spending
    alpha: float
    looks: tuple[int, ...]
    levels: tuple[float, ...]
    first_seed: int = Field(0, ge=0)

    @classmethod
    def planned(
        cls, start: int, max_seeds: int, spending: Spending, alpha: float, first_seed: int = 0
    ) -> SequentialPlan:
        looks = anytime_looks(start, max_seeds) if spending == ANYTIME else planned_looks(start, max_seeds)
        levels = tuple(look_levels(looks, alpha, spending))
        return cls(spending=spending, alpha=alpha, looks=looks, levels=levels, first_seed=first_seed)

    def stage_seeds(self, stage: int) -> tuple[int, ...]:
        """The seeds stage `stage` adds: first_seed + n_{k−1} .. first_seed + n_k − 1 (n_0 = 0)."""
        before = 0 if stage == 0 else self.looks[stage - 1]
        return tuple(range(self.first_seed + before, self.first_seed + self.looks[stage]))


@dataclass
class UntilDecidedOutcome:
    """The merged metrics, their diverged runs, the claims' sequential verdicts (claims.csv) and the looks taken."""

    run_dir: Path
    metrics: pd.DataFrame
    diverged: pd.DataFrame
    claims: pd.DataFrame
    looks: pd.DataFrame


def first_seed_of(seeds: Sequence[int]) -> int:
    """The first seed of a grid that can grow: its seeds are s_0, s_0 + 1, …, in that order.

    Raises:
        BlockError: a gap or another order (the looks after the first take the seeds that follow the last).
    """
    first = seeds[0]
    if tuple(seeds) != tuple(range(first, first + len(seeds))):
        raise BlockError(
            f"only a grid of consecutive seeds S..S+N-1 can grow (e.g. --seed-list 1000-1099); this one has seeds "
            f"{_seeds_text(seeds)}"
        )
    return first


def _seeds_text(seeds: Sequence[int]) -> str:
    """A seed list for an error line: whole where short, else its first and last few."""
    shown = list(seeds) if len(seeds) <= 12 else [*seeds[:5], "…", *seeds[-5:]]
    return "[" + ", ".join(map(str, shown)) + "]"


def stage_dir(run_dir: Path, stage: int) -> Path:
    return Path(run_dir) / STAGES_DIR / str(stage)


def is_sequential(run_dir: Path) -> bool:
    """Whether a run directory holds a grid grown until its claims are decided."""
    return (Path(run_dir) / PLAN_FILE).is_file()


def claim_conditions(claims: Sequence[Claim], spec: GridSpec) -> list[str]:
    """The grid's conditions (in its order) that any of the claims compares."""
    names = [c.name for c in spec.conditions]
    used = {name for claim in claims for name in (claim.condition, *claim.other_conditions(names))}
    return [name for name in names if name in used]


def stage_spec(spec: GridSpec, plan: SequentialPlan, stage: int, names: Sequence[str]) -> GridSpec:
    """Stage `stage`'s grid: the conditions `names`, the seeds the stage adds (`SequentialPlan.stage_seeds`), no
    claims (they are judged merged)."""
    run = spec.run.model_copy(update={"seeds": plan.stage_seeds(stage)})
    return spec.only(names).model_copy(update={"run": run, "claims": ()})


def adopt_finished_run(run_dir: Path) -> GridSpec:
    """Make a finished run directory (not yet sequential) whose claims were never judged the first stage of a
    sequential one: its files move into stages/0/. Returns its grid.

    A run whose report judged its claims (claims.csv) is refused: that look spent α before any plan, and counting
    it again as a planned look would spend more than α over the looks (see the module).

    Raises:
        BlockError: the run has not finished, states no claims, its claims were judged, it holds stages without a
            plan, or its seeds are not consecutive (S..S+N-1) with N ≥ MIN_SEEDS.
    """
    run_dir = Path(run_dir)
    spec = load_spec(run_dir)
    if not spec.claims:
        raise BlockError(f"{run_dir}: its grid states no claims; there is nothing to decide")
    if (run_dir / STAGES_DIR).exists():
        raise BlockError(f"{run_dir} holds {STAGES_DIR}/ but no plan ({PLAN_FILE}); it cannot be resumed or grown")
    if (run_dir / CLAIMS_FILE).is_file():
        raise BlockError(
            f"{run_dir}: its claims were already judged ({CLAIMS_FILE}), so it cannot be a planned look (its verdicts "
            "spent α before any plan); start a fresh plan on seeds it did not use: coevolab run FILE --until-decided "
            "--seed-list S-E --max-seeds N"
        )
    first_seed_of(spec.run.seeds)
    if len(spec.run.seeds) < MIN_SEEDS:
        raise BlockError(
            f"{run_dir} has {len(spec.run.seeds)} seeds, fewer than a verdict needs ({MIN_SEEDS}); grow it first "
            f"(coevolab run --resume {run_dir} --seeds {MIN_SEEDS})"
        )
    if not run_finished(run_dir):
        raise BlockError(f"{run_dir} has not finished; finish it first (coevolab run --resume {run_dir})")
    first = stage_dir(run_dir, 0)
    first.mkdir(parents=True)
    for entry in run_entries(run_dir):  # the lock file this process holds stays where it is
        if entry.name != STAGES_DIR:
            shutil.move(entry, first / entry.name)
    return spec


def prepare(run_dir: Path, spec: GridSpec | None, max_seeds: int | None, spending: Spending, alpha: float) -> tuple:
    """(grid, plan) of a sequential run directory: read from it where it has a plan (max_seeds, if given, must be
    the plan's), else planned now from `spec` (or from a finished run in it, adopted as stage 0) and written.

    Raises:
        BlockError: a plan that differs from the one in the directory or from its grid's seeds, no budget for a
            new plan, a grid without claims or with seeds other than S..S+N-1, a finished run that cannot be adopted
            (`adopt_finished_run`).
    """
    run_dir = Path(run_dir)
    if is_sequential(run_dir):
        plan = SequentialPlan.model_validate_json((run_dir / PLAN_FILE).read_text(encoding="utf-8"))
        if max_seeds is not None and max_seeds != plan.looks[-1]:
            raise BlockError(
                f"{run_dir} was planned for {plan.looks[-1]} seeds; its looks cannot change once taken (the error "
                "control rests on them): resume it as it is"
            )
        spec = load_spec(run_dir)
        if spec.run.seeds != plan.stage_seeds(0):
            raise BlockError(
                f"{run_dir}: its grid's seeds {_seeds_text(spec.run.seeds)} are not its plan's first look "
                f"({_seeds_text(plan.stage_seeds(0))}); its files were changed"
            )
        return spec, plan
    if max_seeds is None:
        raise BlockError("--until-decided needs a seed budget: --max-seeds N")
    if spec is None:
        spec = adopt_finished_run(run_dir)
    if not spec.claims:
        raise BlockError(f"the grid '{spec.name}' states no claims; there is nothing to decide")
    start, first = len(spec.run.seeds), first_seed_of(spec.run.seeds)
    if max_seeds < max(start, MIN_SEEDS):
        raise BlockError(
            f"a budget of {max_seeds} seeds is too small: the grid has {start}, and a claim needs {MIN_SEEDS} for a "
            "verdict"
        )
    # A look with fewer seeds than a verdict needs could decide nothing but would spend α: the first has MIN_SEEDS.
    plan = SequentialPlan.planned(max(start, MIN_SEEDS), max_seeds, spending, alpha, first)
    if plan.looks[0] > start:
        spec = spec.model_copy(update={"run": spec.run.model_copy(update={"seeds": plan.stage_seeds(0)})})
    # Both before the first look's training: the looks, their levels and their seeds are fixed before any verdict.
    write_grid_file(run_dir / GRID_FILE, spec)
    atomic_write_text(run_dir / PLAN_FILE, plan.model_dump_json(indent=2) + "\n")
    return spec, plan


def merged_stages_text(spec: GridSpec, stages: int, run_dir: Path) -> str:
    """The first `stages` stages' metrics tables joined, text as each wrote it, in the grid's condition order, then
    seed, then iteration. A metric is kept where every stage has it, or where it may be undefined for a run: a stage
    none of whose conditions uses a mechanism has none of its metrics, and its rows are left empty there (what the
    metric records for a run that does not use it). A grown run of an earlier version may lack a newer metric in its
    early stages; that one is left out."""
    tables = [
        read_metrics_frame(metrics_file(stage_dir(run_dir, k)), dtype=str, keep_default_na=False) for k in range(stages)
    ]
    undefined = {metric.name for metric in all_metrics() if metric.valid.undefined}
    columns = [
        name
        for name in dict.fromkeys(name for table in tables for name in table.columns)
        if name in undefined or all(name in table.columns for table in tables)
    ]
    return ordered_metrics_text(spec, [table.reindex(columns=columns, fill_value="") for table in tables])


def record_look(decided: pd.DataFrame | None, table: pd.DataFrame, look: int, level: float) -> pd.DataFrame:
    """The claims' rows after a look: each decided claim's row from the look that decided it, each open claim's
    from this look; `look` (1-based) and `level` are the look and level of the row's verdict (look empty: open)."""
    table = table.assign(decided_at_look=np.where(table["verdict"].isin(UNDECIDED), np.nan, look), look_level=level)
    if decided is not None:
        keep = decided["decided_at_look"].notna()
        table.loc[keep] = decided.loc[keep]
    return table


def run_until_decided(
    spec: GridSpec | None,
    run_dir: Path,
    max_seeds: int | None = None,
    spending: Spending = "pocock",
    progress: Progress | None = None,
    backend: Backend = in_process,
    how: str = IN_PROCESS,
    confidence: float = 0.95,
    figures: bool = True,
) -> UntilDecidedOutcome:
    """Grow `spec` (seeds S..S+N-1, with claims) in stages until its claims are decided or `max_seeds` are spent.

    Args:
        spec: the grid at its first look's seeds; None resumes run_dir (a sequential run, or a finished run of a
            grid with claims never judged, adopted as its first stage).
        max_seeds: the budget (the last look's seed count: seeds S..S+max_seeds-1); None only where run_dir already
            holds a plan.
        spending: how α = 1 − confidence is spent over the looks (`harness.inference.sequential`).
        backend: what runs each stage's seed blocks.
        how: the backend's name for the manifests and reports.
        figures: False: the merged grid's report is text and tables alone (a stage's always is).

    Returns:
        The merged metrics and the claims' sequential verdicts (also written into run_dir, see the module).

    Raises:
        BlockError: see `prepare`; a stage's blocks of another grid.
        KeyboardInterrupt: Ctrl-C or SIGTERM; finished blocks and checkpoints stay for a resume.
    """
    run_dir = Path(run_dir)
    progress = progress or SilentProgress()
    started, entered = dt.datetime.now(dt.UTC), time.perf_counter()
    spec, plan = prepare(run_dir, spec, max_seeds, spending, round(1 - confidence, 12))
    earlier = _earlier_seconds(run_dir)
    # Written last again (by _write_outputs): until then nothing vouches for the merged files, rewritten look by look.
    (run_dir / MANIFEST_FILE).unlink(missing_ok=True)
    names = [c.name for c in spec.conditions]
    decided: pd.DataFrame | None = None
    looks: list[dict[str, object]] = []
    metrics = pd.DataFrame()
    for stage, (seeds, level) in enumerate(zip(plan.looks, plan.levels, strict=True)):
        if stage > 0:
            assert decided is not None
            still_open = decided["decided_at_look"].isna().to_numpy()
            names = claim_conditions([c for c, open_ in zip(spec.claims, still_open, strict=True) if open_], spec)
        directory = stage_dir(run_dir, stage)
        own = stage_spec(spec, plan, stage, names)
        if not run_finished(directory):
            directory.mkdir(parents=True, exist_ok=True)
            progress.phase("look", f"{stage + 1} of {len(plan.looks)}: {len(names)} conditions to {seeds} seeds")
            run_in_blocks(own, directory, progress, backend, how, figures=False)  # the merged grid's report draws
        write_metrics_text(run_dir, merged_stages_text(spec, stage + 1, run_dir))
        metrics = pd.read_csv(run_dir / METRICS_FILE)
        progress.phase("verdicts", f"look {stage + 1} at level {level:.3g}")
        ranges = metric_ranges(spec.world)
        if plan.spending == ANYTIME:
            table = anytime_table(metrics, spec.claims, plan.alpha, ranges)
        else:
            table = verdict_table(metrics, spec.claims, 1 - level, estimate_seeds=False, ranges=ranges)
        before = 0 if decided is None else int(decided["decided_at_look"].notna().sum())
        decided = record_look(decided, table, stage + 1, level)
        newly = decided["claim"][decided["decided_at_look"] == stage + 1].tolist()
        looks.append(
            {
                "look": stage + 1,
                "seeds": seeds,
                "level": level,
                "spent": plan.alpha if plan.spending == ANYTIME else float(np.sum(plan.levels[: stage + 1])),
                "conditions_grown": len(names),
                "runs": len(names) * len(own.run.seeds),
                "decided": len(newly) + before,
                "decided_here": "; ".join(newly),
            }
        )
        if decided["decided_at_look"].notna().all():
            break
    assert decided is not None
    claims = _with_seeds_needed(decided, metrics, spec.claims, confidence, metric_ranges(spec.world))
    look_table = pd.DataFrame(looks)
    seconds = time.perf_counter() - entered
    _write_outputs(run_dir, spec, plan, claims, look_table, how, started, {"until_decided": seconds} | earlier, figures)
    progress.close()
    return UntilDecidedOutcome(run_dir, metrics, diverged_runs(metrics), claims, look_table)


def _with_seeds_needed(
    decided: pd.DataFrame,
    metrics: pd.DataFrame,
    claims: Sequence[Claim],
    confidence: float,
    ranges: Mapping[str, tuple[float, float]],
) -> pd.DataFrame:
    """Open claims' seeds_needed: the seeds a fixed-seed grid would need to decide them at α, from all the data."""
    out = decided.copy()
    open_ = out["decided_at_look"].isna().to_numpy()
    if open_.any():
        estimates = verdict_table(metrics, claims, confidence, ranges=ranges)
        for column in ("seeds_needed", *(f"chance_{v.replace(' ', '_')}" for v in DECISIONS)):
            out[column] = np.where(open_, estimates[column].to_numpy(), np.nan)
    return out


def _earlier_seconds(run_dir: Path) -> dict[str, float]:
    """The wall time of the calls that finished this run before (its manifest's, where it has one): a finished run
    judged again (its looks' stages already trained, as after a change of the verdict rule) keeps the time its
    training took beside the time of the new call, as {"earlier_calls": seconds}; {} for a new or unfinished run."""
    try:
        manifest = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
        return {"earlier_calls": float(sum(manifest["wall_seconds"].values()))}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _write_outputs(
    run_dir: Path,
    spec: GridSpec,
    plan: SequentialPlan,
    claims: pd.DataFrame,
    looks: pd.DataFrame,
    how: str,
    started: dt.datetime,
    seconds: dict[str, float],
    figures: bool,
) -> None:
    """claims.csv, looks.csv, report.md (the merged grid's report and the sequential verdicts), then manifest.json."""
    atomic_write_text(run_dir / CLAIMS_FILE, claims.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    atomic_write_text(run_dir / LOOKS_FILE, looks.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    line = (
        f"Grown until its claims were decided: {len(looks)} of {len(plan.looks)} planned looks "
        f"({', '.join(map(str, plan.looks))} seeds from seed {plan.first_seed}), each look's new seeds run as seed "
        f"blocks, {how}."
    )
    render_report(run_dir, figures, how_run=line)
    write_manifest(
        run_dir,
        manifest(
            spec.model_dump(mode="json"),
            seconds,
            started,
            runs=int(looks["runs"].sum()),
            execution={"backend": how, "line": line},
            sequential=plan.model_dump(mode="json"),
            looks=looks.to_dict(orient="records"),
        ),
    )


def render_report(run_dir: Path, figures: bool = True, how_run: str | None = None) -> None:
    """report.md (and its figures) of a finished sequential run, from its files: as the run writes it, and as
    `coevolab report` re-renders it, the same bytes.

    The report is the merged grid's without its claims (the looks judge them, not one test at α), then the sequential
    verdicts, read from claims.csv and looks.csv rather than judged again: a claim's verdict belongs to the look that
    decided it, which the merged metrics alone do not say. Rendering what the files hold (floats as written) is what
    makes the run's report and a re-render agree to the digit, and agree with tables built from claims.csv.
    how_run: the line on how it ran (default: its manifest's, as the run wrote it).

    Raises:
        FileNotFoundError: the run has not finished (no claims.csv or looks.csv yet).
        ValueError: its grid.json or sequential.json does not validate.
    """
    run_dir = Path(run_dir)
    files = (metrics_file(run_dir), run_dir / CLAIMS_FILE, run_dir / LOOKS_FILE)
    missing = [path.name for path in files if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"{run_dir}: no {' or '.join(missing)} (the run has not finished)")
    spec = load_spec(run_dir)
    plan = SequentialPlan.model_validate_json((run_dir / PLAN_FILE).read_text(encoding="utf-8"))
    metrics, claims, looks = (pd.read_csv(path) for path in files)
    grid = spec.model_copy(update={"claims": ()})
    remove_figures(run_dir)
    line = how_run if how_run is not None else how_run_line_of(run_dir)
    write_run_report(run_dir, metrics, spec.name, grid, how_run=line, figures=figures)
    report = run_dir / "report.md"
    section = sequential_section(claims, looks, plan.looks, np.asarray(plan.levels), plan.alpha, plan.spending)
    atomic_write_text(report, report.read_text(encoding="utf-8").rstrip("\n") + "\n\n" + literal_stars(section))
