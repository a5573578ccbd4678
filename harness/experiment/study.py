"""Run a study (`harness.grid.study`): one program per shape, one shape after another, into one run directory.

Each shape's grid runs as a seed-block grid (`run_in_blocks`) into shapes/<name>/ on any `Backend`, with its own
pretraining, metrics, report and claims; shapes that are equal share one compiled program (the trainer caches by
shape). A shape's runs are exactly those of a file with that world and model run alone. Then the study is merged:

- metrics.csv.gz: every shape's metrics, prefixed by the shape and its world and networks (`report.study.SHAPE_COLUMNS`,
  `MODEL_COLUMNS`);
- runs.csv: one row per run (shape × condition × seed) of per-run measures (`harness.inference.run_measures`);
- claims.csv: every shape's within-shape verdicts, with the shape; across.csv: the claims across shapes;
- report.md (with its figure) and manifest.json (per shape: wall seconds by phase; this invocation's wall time and
  its process's peak resident memory).

Running it again (`coevolab run --resume DIR`) keeps every finished shape and block, continues the others, and merges.
"""

from __future__ import annotations

import datetime as dt
import json
import resource
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.common.integrity import write_manifest
from harness.common.run_files import (
    CLAIMS_FILE,
    LEGACY_METRICS_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    atomic_write_text,
    manifest,
    metrics_file,
    remove_figures,
    write_metrics_text,
)
from harness.experiment.blocks import Backend, BlockError, in_process
from harness.experiment.merge import IN_PROCESS, run_finished, run_in_blocks
from harness.experiment.runner import Progress, SilentProgress, diverged_runs, load_spec
from harness.experiment.validation import read_metrics_frame
from harness.grid.study import StudySpec
from harness.inference.across_shapes import across_table
from harness.inference.run_measures import run_measures
from harness.rendering.metrics_table import CSV_FLOAT_FORMAT
from harness.report import REPORT_FILE, with_table_measures
from harness.report.overoptimization import FITS_FILE, HELD_OUT_FILE
from harness.report.study import MODEL_COLUMNS, SHAPE_COLUMNS, shape_table, study_report

STUDY_FILE = "study.json"
SHAPES_DIR = "shapes"
RUNS_FILE = "runs.csv"
ACROSS_FILE = "across.csv"
# What a study's report (`write_study_files`) writes at its top, figures aside: `coevolab report` writes these anew and
# verifies everything else (study.json, every shape's files) before reading it.
# The top metrics table is the shapes' joined: a report writes it anew, and removes the plain one of coevolab 0.3.
STUDY_REPORT_FILES = (
    METRICS_FILE,
    LEGACY_METRICS_FILE,
    RUNS_FILE,
    CLAIMS_FILE,
    ACROSS_FILE,
    REPORT_FILE,
    FITS_FILE,
    HELD_OUT_FILE,
)


@dataclass
class StudyOutcome:
    """The merged metrics of every shape, their diverged runs, the per-run measures and the across verdicts."""

    run_dir: Path
    metrics: pd.DataFrame
    diverged: pd.DataFrame
    measures: pd.DataFrame
    across: pd.DataFrame


def shape_dir(run_dir: Path, shape: str) -> Path:
    return Path(run_dir) / SHAPES_DIR / shape


def is_study(run_dir: Path) -> bool:
    """Whether a run directory holds a study."""
    return (Path(run_dir) / STUDY_FILE).is_file()


def load_study_spec(run_dir: Path) -> StudySpec:
    return StudySpec.model_validate_json((Path(run_dir) / STUDY_FILE).read_text(encoding="utf-8"))


def _labelled(study: StudySpec, frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Every shape's rows after its shape's columns (SHAPE_COLUMNS, MODEL_COLUMNS), in the study's shape order."""
    shapes = shape_table(study).set_index("shape")
    labelled = []
    for name, frame in frames.items():
        columns = {column: shapes.at[name, column] for column in [*SHAPE_COLUMNS[1:], *MODEL_COLUMNS]}
        labelled.append(frame.assign(**columns).assign(shape=name))
    merged = pd.concat(labelled, ignore_index=True)
    first = [*SHAPE_COLUMNS, *MODEL_COLUMNS]
    return merged[[*first, *(column for column in merged.columns if column not in first)]]


def how_run_line(study: StudySpec, how: str) -> str:
    return f"{len(study.shapes)} shapes, one program each, run one after another as seed blocks, {how}."


def write_study_files(study: StudySpec, run_dir: Path, how: str, figures: bool = True) -> StudyOutcome:
    """Merge the finished shapes of `study` in run_dir into its metrics.csv.gz, runs.csv, claims.csv, across.csv and
    report.md (the same bytes each time: `coevolab report DIR` re-renders a study with it). figures=False: the
    report's text alone."""
    metrics = {s.name: read_metrics_frame(metrics_file(shape_dir(run_dir, s.name))) for s in study.shapes}
    joined = {s.name: with_table_measures(shape_dir(run_dir, s.name), metrics[s.name]) for s in study.shapes}
    measures = {s.name: run_measures(joined[s.name], s.grid.world) for s in study.shapes}
    within_files = {s.name: shape_dir(run_dir, s.name) / CLAIMS_FILE for s in study.shapes if s.grid.claims}
    within = pd.concat(
        [pd.read_csv(path).assign(shape=name) for name, path in within_files.items()] or [pd.DataFrame()],
        ignore_index=True,
    )
    merged, per_run = _labelled(study, metrics), _labelled(study, measures)
    across = across_table(study.across, per_run, within)
    write_metrics_text(run_dir, merged.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    atomic_write_text(run_dir / RUNS_FILE, per_run.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    if not within.empty:
        within = within[["shape", *(column for column in within.columns if column != "shape")]]
        atomic_write_text(run_dir / CLAIMS_FILE, within.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    atomic_write_text(run_dir / ACROSS_FILE, across.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    remove_figures(run_dir)
    study_report(study, per_run, within, across, run_dir, how_run_line(study, how), figures)
    return StudyOutcome(run_dir, merged, diverged_runs(merged), per_run, across)


def merge_study(
    study: StudySpec, run_dir: Path, how: str, seconds: float, started: dt.datetime, figures: bool = True
) -> StudyOutcome:
    """`write_study_files`, then manifest.json (see the module)."""
    outcome = write_study_files(study, run_dir, how, figures)
    shape_manifests = {
        s.name: _read_json(shape_dir(run_dir, s.name) / MANIFEST_FILE).get("wall_seconds", {}) for s in study.shapes
    }
    # The shapes' own phases (summed over their blocks' last attempts), whichever invocation ran them, and this one's.
    shape_seconds = {name: sum(phases.values()) for name, phases in shape_manifests.items()}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    write_manifest(
        run_dir,
        manifest(
            study.model_dump(mode="json"),
            {"shapes": sum(shape_seconds.values()), "invocation": seconds},
            started,
            runs=len(outcome.measures),
            execution={"backend": how, "line": how_run_line(study, how)},
            shapes=shape_manifests,
            shape_seconds=shape_seconds,
            # Of this process: a study run whole holds every shape's peak; a resumed one only its own invocation's.
            peak_resident_bytes=peak,
        ),
    )
    return outcome


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def run_study(
    study: StudySpec | None,
    run_dir: Path,
    progress: Progress | None = None,
    backend: Backend = in_process,
    how: str = IN_PROCESS,
    figures: bool = True,
) -> StudyOutcome:
    """Run every unfinished shape of `study` into run_dir, then merge (see the module).

    Args:
        study: the study; None resumes the one run_dir holds (study.json).
        backend: what runs each shape's seed blocks.
        how: the backend's name for the manifests and reports.
        figures: False: every report this call writes (the shapes' and the study's) is text and tables alone.

    Raises:
        BlockError: a finished shape's directory holds another grid's run.
        KeyboardInterrupt: Ctrl-C or SIGTERM; finished shapes, blocks and checkpoints stay for a resume.
    """
    run_dir = Path(run_dir)
    progress = progress or SilentProgress()
    started, entered = dt.datetime.now(dt.UTC), time.perf_counter()
    if study is None:
        study = load_study_spec(run_dir)
    finished = [shape for shape in study.shapes if run_finished(shape_dir(run_dir, shape.name))]
    for shape in finished:  # checked before anything is written
        if load_spec(shape_dir(run_dir, shape.name)) != shape.grid:
            raise BlockError(f"shape {shape.name}: {run_dir} holds the run of another grid there; start over (--force)")
    # Written last again (by merge_study): until then nothing vouches for the merged files.
    (run_dir / MANIFEST_FILE).unlink(missing_ok=True)
    atomic_write_text(run_dir / STUDY_FILE, study.model_dump_json(indent=2) + "\n")
    for index, shape in enumerate(study.shapes):
        if shape in finished:
            continue
        directory = shape_dir(run_dir, shape.name)
        directory.mkdir(parents=True, exist_ok=True)
        world = shape.grid.world
        progress.phase("shape", f"{index + 1} of {len(study.shapes)}: {shape.name} ({world.n_outputs:,} outputs)")
        run_in_blocks(shape.grid, directory, progress, backend, how, figures=figures)
    progress.phase("study", "merging the shapes")
    outcome = merge_study(study, run_dir, how, time.perf_counter() - entered, started, figures)
    progress.close()
    return outcome
