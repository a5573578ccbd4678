"""An experiment: one grid trained into its run directory: pretrain, compile, train with checkpoints, write artifacts.

A *run* is one condition × one seed of the grid; an experiment is one invocation (`coevolab run`, a seed block, or
`harness.run_grid`) that trains all of them.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pandas as pd
from pydantic import ValidationError

import harness.mechanisms  # noqa: F401  (registers the built-in mechanisms, whose knobs and metrics it reads)
from harness.common.integrity import RunDirectoryError, write_manifest
from harness.common.run_files import (
    CHECKPOINT_FILE,
    GRID_FILE,
    METRICS_FILE,
    manifest,
    remove_figures,
    remove_stale_temporaries,
    write_metrics_text,
)
from harness.common.run_tables import write_run_tables
from harness.common.wording import plural
from harness.engine.state import CoevolutionState
from harness.experiment.checkpoint import (
    Checkpoint,
    has_checkpoint,
    load_checkpoint,
    load_pretrained,
    read_checkpoint,
    run_identity,
    save_checkpoint,
)
from harness.experiment.live import LiveLog
from harness.experiment.validation import read_metrics
from harness.grid.grid_file import read_grid_file, write_grid_file
from harness.grid.spec import GridSpec
from harness.grid.trainer import GridTrainer


class Progress(Protocol):
    """What an experiment reports as it goes; the command line renders it."""

    def phase(self, name: str, detail: str = "") -> None: ...
    def phase_done(self, name: str, seconds: float) -> None: ...
    def iterations(self, done: int, total: int) -> None: ...
    def iteration_done(self, iteration: int) -> None: ...
    def close(self) -> None: ...


class SilentProgress:
    def phase(self, name: str, detail: str = "") -> None:
        pass

    def phase_done(self, name: str, seconds: float) -> None:
        pass

    def iterations(self, done: int, total: int) -> None:
        pass

    def iteration_done(self, iteration: int) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class ExperimentOutcome:
    """Where an experiment wrote its artifacts, its metrics, its diverged runs (condition, seed, first bad
    iteration), and the state of every run after the last iteration (for `harness.api`; the run directory does not
    keep it)."""

    run_dir: Path
    metrics: pd.DataFrame
    diverged: pd.DataFrame
    final_state: CoevolutionState | None = None
    times: dict[str, float] = field(default_factory=dict)  # seconds per phase, as the manifest records them
    resumed_from_iteration: int | None = None


def diverged_runs(metrics: pd.DataFrame) -> pd.DataFrame:
    bad = metrics[metrics["diverged"]]
    return bad.groupby(["condition", "seed"], sort=False)["iteration"].min().rename("first_bad_iteration").reset_index()


def load_spec(run_dir: Path) -> GridSpec:
    """The grid a run directory records in its grid.json, its mechanisms loaded from their copies beside it where
    needed.

    Raises:
        RunDirectoryError: it is missing, unreadable, not a grid this version reads, or a mechanism it records cannot
            be loaded (one line).
    """
    path = Path(run_dir) / GRID_FILE
    try:
        return read_grid_file(path)
    except FileNotFoundError:
        raise RunDirectoryError(f"{path}: missing; not a run directory") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RunDirectoryError(f"{path}: cannot be read ({getattr(error, 'strerror', None) or error})") from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(map(str, first["loc"])) or "its contents"
        raise RunDirectoryError(f"{path}: not a grid of this coevolab: {where}: {first['msg']}") from None
    except ValueError as error:  # not JSON, or a mechanism's recorded source that cannot be loaded
        raise RunDirectoryError(f"{path}: {str(error).splitlines()[0]}") from None


def execute(
    spec: GridSpec,
    run_dir: Path,
    progress: Progress | None = None,
    resume: bool = False,
    started: float | None = None,
    write_report: bool = True,
    manifest_extra: dict | None = None,
    figures: bool = True,
    block: int | None = None,
    tensorboard: bool = False,
) -> ExperimentOutcome:
    """Train every run of `spec` into `run_dir` (which must exist). With resume, continue from its checkpoint.

    started: time.perf_counter() when the process began its work (the command line passes it), so that the
    recorded phases add up to the whole wall clock; time before execute() is the "startup" phase.
    write_report: False for a seed block (`harness.experiment.blocks`), whose report is the merged grid's.
    manifest_extra: further entries of manifest.json (how the grid was run).
    figures: False: the report's text and tables alone (`coevolab report` draws them later).
    block: the seed block `spec` is (its index), None for a grid run whole: part of the checkpoints' identity.
    tensorboard: write each iteration's per-condition means as TensorBoard events too (`harness.experiment.live`;
        progress.csv is written either way).

    Raises:
        CheckpointMismatch: with resume, a checkpoint of another run (another grid.json, block or state layout) or a
            damaged one; refused before anything is trained.
    """
    progress = progress or SilentProgress()
    entered = time.perf_counter()
    started = entered if started is None else started
    started_at = dt.datetime.now(dt.UTC)
    if not resume:
        write_grid_file(run_dir / GRID_FILE, spec)
    program = GridTrainer(spec)
    total = spec.run.iterations
    identity = run_identity(spec, block)

    if resume:
        # A process killed mid-write leaves its temporary file; this run is now the directory's only writer.
        remove_stale_temporaries(run_dir)
    resuming = resume and has_checkpoint(run_dir)
    pretrained = payload = None
    if resuming:
        progress.phase("restore", f"checkpoint in {run_dir}")
        payload = read_checkpoint(run_dir, identity)
        pretrained = load_pretrained(payload)  # no need to pretrain again
    else:
        judges = plural(program.shape.max_members, "judge")
        sources = program.origins.judge_sources
        targets = len({source.target for source in sources})
        per_target = f" at {targets} targets ({plural(len(sources), 'judge')} in all)" if targets > 1 else ""
        progress.phase("pretrain", f"{plural(len(spec.run.seeds), 'seed')} × {judges}{per_target}")
        program.pretrain()
        progress.phase_done("pretrain", program.times.pretrain)

    plan = program.plan
    progress.phase(
        "compile",
        f"{plural(program.shape.n_runs, 'run')}, {plural(program.shape.n_slots, 'judge')}, one program"
        + (
            f" for shards of {plural(plan.shape.n_runs, 'run')}: {plural(plan.pieces, 'turn')} of "
            f"{plural(plan.devices, 'device')} side by side, one shard each"
            if plan.n_shards > 1
            else ""
        ),
    )
    state, initial = program.start(pretrained)
    checkpoint = load_checkpoint(payload, state, program.record_names) if payload is not None else None
    if checkpoint:
        state, records, done = checkpoint.state, checkpoint.records, checkpoint.completed_iterations
    else:
        records, done = [initial], 0
    progress.phase_done("compile", program.times.compile)

    saving = time.perf_counter()
    live = LiveLog(run_dir, program, tensorboard)
    live.update(records)
    checkpoint_seconds = time.perf_counter() - saving  # (with the progress file written beside each checkpoint)
    progress.iterations(done, total)
    for iteration in range(done, total):
        state, diagnostics = program.step(state, iteration)
        records.append(diagnostics)
        saving = time.perf_counter()
        save_checkpoint(run_dir, Checkpoint(iteration + 1, program.pretrained, state, records), identity)
        live.update(records)
        checkpoint_seconds += time.perf_counter() - saving
        progress.iteration_done(iteration)
    live.close()
    progress.phase_done("train", program.times.train)

    metrics = program.metrics_table(records)
    write_metrics_text(run_dir, metrics.to_csv(index=False))
    try:
        # Read back as every later reader will (verify, report, merge, load_result): a value a metric cannot take
        # (a mechanism's NaN or out-of-range metric) stops the run here, before anything seals it.
        read_metrics(run_dir / METRICS_FILE, spec)
    except RunDirectoryError as error:
        raise RunDirectoryError(
            f"{error}; the run is not sealed (a mechanism's metric outside the values it declares?)"
        ) from None
    write_run_tables(run_dir, program.run_tables(records))
    report_seconds = 0.0
    remove_figures(run_dir)  # of an earlier report (a directory replaced with --force, a run grown)
    if write_report:
        progress.phase("report", str(run_dir))
        report_start = time.perf_counter()
        # Imported here: a process that writes no report (a seed block, a Ray task) starts without the report's
        # plotting and statistics libraries, a few seconds of imports.
        from harness.report import write_run_report

        # From the file just written, exactly as `coevolab report` reads it, so both render the same bytes.
        write_run_report(run_dir, pd.read_csv(run_dir / METRICS_FILE), spec.name, spec, figures=figures)
        report_seconds = time.perf_counter() - report_start
        progress.phase_done("report", report_seconds)
    times = {
        "startup": entered - started,  # imports and reading the condition file, before this function
        "pretrain": program.times.pretrain,
        "compile": program.times.compile,
        "train": program.times.train,
        "checkpoint": checkpoint_seconds,
        "report": report_seconds,
    }
    # Setting up the program, iteration-0 diagnostics and the metrics table: what no phase above measures, so that
    # the phases add up to the wall clock (writing the manifest below, a few milliseconds, is the only gap).
    times["other"] = max(0.0, time.perf_counter() - started - sum(times.values()))
    progress.phase_done("other (setup, iteration-0 diagnostics, metrics table)", times["other"])
    progress.phase("total", f"{sum(times.values()):.1f}s = " + " + ".join(f"{k} {v:.1f}s" for k, v in times.items()))
    # Last, listing every file written above: it vouches for them (harness.common.integrity).
    write_manifest(
        run_dir,
        manifest(
            spec.model_dump(mode="json"),
            times,
            started_at,
            resumed_from_iteration=checkpoint.completed_iterations if checkpoint else None,
            runs=len(spec.conditions) * len(spec.run.seeds),
            # Devices run side by side, each its shards in turn; fillers pad the shards to one shape.
            devices=program.plan.devices,
            shards=program.plan.n_shards,
            filler_runs=program.plan.fillers,
            pretrain=program.pretrain_table().to_dict(orient="records"),
            identity=dict(identity.components),
            **(manifest_extra or {}),
        ),
    )
    # Finished: metrics.csv.gz holds everything the checkpoint did (a kill before this line resumes from the last
    # checkpoint, which has no iteration left, and writes the same files again).
    (run_dir / CHECKPOINT_FILE).unlink(missing_ok=True)
    progress.close()
    resumed_from = checkpoint.completed_iterations if checkpoint else None
    return ExperimentOutcome(run_dir, metrics, diverged_runs(metrics), state, times, resumed_from)
