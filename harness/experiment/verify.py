"""Checking a finished run directory before anything reads it (`coevolab verify`, `report`, `--resume`,
`harness.load_result`): its manifest and every manifest below it (seed blocks, stages, shapes) against the files they
list, then every metrics.csv.gz read back against the grid.json beside it (`harness.experiment.validation`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from harness.common.integrity import (
    FILES_KEY,
    REPLACED_PREFIX,
    RunDirectoryError,
    directory_files,
    legacy,
    read_manifest,
    run_entries,
    verify_listed,
)
from harness.common.locks import run_dir_lock
from harness.common.run_files import (
    CHECKPOINT_FILE,
    CLAIMS_FILE,
    FIGURES_DIR,
    GRID_FILE,
    LEGACY_METRICS_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    metrics_file,
    remove_figures,
)
from harness.common.run_tables import table_files
from harness.common.wording import plural
from harness.experiment.blocks import BLOCKS_DIR
from harness.experiment.live import PROGRESS_FILE, TENSORBOARD_DIR
from harness.experiment.runner import load_spec
from harness.experiment.study import SHAPES_DIR, STUDY_FILE, STUDY_REPORT_FILES
from harness.experiment.until_decided import LOOKS_FILE, PLAN_FILE, STAGES_DIR
from harness.experiment.validation import read_metrics
from harness.grid import registry
from harness.grid.grid_file import MECHANISMS_DIR
from harness.report import REPORT_FILES

# Every entry a coevolab run of any kind may write at the top of its run directory (a grid whole or in blocks, grown
# until decided, a study), besides its per-run tables and what its manifest lists: what --force may remove.
RUN_ENTRIES = frozenset(
    {
        GRID_FILE,
        MANIFEST_FILE,
        METRICS_FILE,
        LEGACY_METRICS_FILE,
        CHECKPOINT_FILE,
        BLOCKS_DIR,
        STAGES_DIR,
        SHAPES_DIR,
        STUDY_FILE,
        PLAN_FILE,
        LOOKS_FILE,
        PROGRESS_FILE,
        TENSORBOARD_DIR,
        MECHANISMS_DIR,
        FIGURES_DIR,
        *REPORT_FILES,
        *STUDY_REPORT_FILES,
    }
)


# What every manifest coevolab wrote before it listed files holds (`harness.common.run_files.manifest`): how such a
# run directory is told from a folder with a manifest.json of its own.
LEGACY_MANIFEST_KEYS = frozenset({"grid", "packages", "machine", "wall_seconds", "started", "finished"})


def is_run_directory(path: Path) -> bool:
    """Whether `path` holds a coevolab run (finished or not) of any kind, by a mark only coevolab leaves: the run
    directory's lock file, which every coevolab writer creates before it writes anything there, or a manifest that
    verifies as one coevolab sealed (its own digest, its coevolab version; one of before manifests listed files: the
    keys such manifests have). A folder that merely holds a file named manifest.json or grid.json is not one."""
    path = Path(path)
    if run_dir_lock(path).is_file():
        return True
    try:
        manifest = read_manifest(path)
    except RunDirectoryError:
        return False
    if manifest is None:
        return False
    # before manifests listed files (or one of those re-sealed later): the keys every coevolab manifest has always had
    return "coevolab_version" in manifest or LEGACY_MANIFEST_KEYS <= manifest.keys()


class Replaceable(NamedTuple):
    """A run directory's top entries as --force sees them: the run's (removed), and any other (never removed)."""

    owned: list[Path]
    foreign: list[Path]


def replaceable_entries(run_dir: Path) -> Replaceable:
    """Split the entries of `run_dir` (`run_entries`) into what its coevolab run wrote (`RUN_ENTRIES`, every per-run
    table a registered mechanism writes, every top entry its manifest lists) and everything else."""
    run_dir = Path(run_dir)
    tables = registry.tables(registry.active())
    names = set(RUN_ENTRIES) | {path.name for t in tables for path in table_files(run_dir, t.name)}
    try:
        manifest = read_manifest(run_dir)
    except RunDirectoryError:
        manifest = None
    if manifest is not None and not legacy(manifest):
        names |= {relative.split("/")[0] for relative in manifest[FILES_KEY]}
    entries = run_entries(run_dir)
    return Replaceable(
        [entry for entry in entries if entry.name in names], [entry for entry in entries if entry.name not in names]
    )


def report_outputs(run_dir: Path) -> Callable[[str], bool]:
    """Which files of a run directory (paths relative to it) `coevolab report` writes anew, so reads nothing from: the
    report's own files at its top (a grid's, a study's, or a grid grown until decided, whose claims.csv is its looks'
    record and so an input) and its figures. Every other file is an input, verified before anything reads it."""
    run_dir = Path(run_dir)
    own = _own_report_outputs(set(REPORT_FILES))
    if (run_dir / STUDY_FILE).is_file():
        # its shapes' reports too: re-rendered with it, the study's report reading their verdicts
        study = _own_report_outputs(set(STUDY_REPORT_FILES))
        return lambda relative: study(relative) or _in_part(relative, SHAPES_DIR, own)
    if (run_dir / PLAN_FILE).is_file():
        # its stages' reports too: re-rendered with it, so the verdict words of every page follow one rule
        top = _own_report_outputs(set(REPORT_FILES) - {CLAIMS_FILE})
        return lambda relative: top(relative) or _in_part(relative, STAGES_DIR, own)
    return own


def _own_report_outputs(outputs: set[str]) -> Callable[[str], bool]:
    """The report files of one run directory's own top: `outputs` and its figures."""
    return lambda relative: relative.startswith(f"{FIGURES_DIR}/") or relative in outputs


def _in_part(relative: str, folder: str, outputs: Callable[[str], bool]) -> bool:
    """Whether `relative` is <folder>/<name>/<path> (a stage of a grid grown until decided, a shape of a study) with
    <path> one of that part's own report files."""
    parts = relative.split("/", 2)
    return len(parts) == 3 and parts[0] == folder and outputs(parts[2])


def resealed_part_manifest(relative: str) -> bool:
    """Whether `relative` is a stage's or a shape's manifest, which re-rendering its report reseals (so the top's
    listing of it is brought up to date with the report's own files)."""
    return any(_in_part(relative, folder, lambda name: name == MANIFEST_FILE) for folder in (STAGES_DIR, SHAPES_DIR))


def part_report_outputs() -> Callable[[str], bool]:
    """Which files of one stage or shape (paths relative to it) its report writes: a grid's."""
    return _own_report_outputs(set(REPORT_FILES))


def remove_report_outputs(run_dir: Path, outputs: Callable[[str], bool]) -> None:
    """Remove the files `outputs` names (`report_outputs`) before a report is rendered anew, so that what the report
    leaves, and the manifest then lists, is exactly what it wrote: nothing of an earlier report, nor a file placed
    under one of its names, is sealed as this report's."""
    for relative in directory_files(run_dir):
        if outputs(relative):
            (Path(run_dir) / relative).unlink(missing_ok=True)
    remove_figures(run_dir)


def _folders(run_dir: Path) -> list[Path]:
    """run_dir and every folder below it, but the ones an interrupted --force left."""
    below = (path for path in run_dir.rglob("*") if path.is_dir())
    kept = (path for path in below if not path.relative_to(run_dir).parts[0].startswith(REPLACED_PREFIX))
    return [run_dir, *sorted(kept)]


def read_back(run_dir: Path) -> pd.DataFrame | None:
    """Read every metrics table under run_dir back against the grid.json beside it; returns the top one's table (None
    where the top holds none of its own, as a study's, whose metrics are its shapes').

    Raises:
        RunDirectoryError: the first table that does not read back, or a grid.json that is not a grid.
    """
    top = None
    for folder in _folders(Path(run_dir)):
        if not ((folder / GRID_FILE).is_file() and metrics_file(folder).is_file()):
            continue
        # A grid grown until decided grows its conditions to different seed counts (its stages are complete).
        table = read_metrics(metrics_file(folder), load_spec(folder), complete=not (folder / PLAN_FILE).is_file())
        top = table if folder == Path(run_dir) else top
    return top


class Checked(NamedTuple):
    """A finished run directory, checked: its manifest and its top metrics.csv.gz as `pd.read_csv` reads it (None for a
    study, whose metrics are its shapes')."""

    manifest: dict[str, Any]
    metrics: pd.DataFrame | None


def check_finished(run_dir: Path, rewriting: Callable[[str], bool] | None = None) -> Checked:
    """Check a finished run directory: its manifest and every manifest below it against the files they list (but
    those `rewriting` names: what the calling command writes anew), then every metrics.csv.gz read back.

    Raises:
        RunDirectoryError: the first problem, in one line (no manifest: the run has not finished).
    """
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    if manifest is None:
        raise RunDirectoryError(
            f"{run_dir}: no {MANIFEST_FILE}: the run has not finished, or its manifest was removed, so nothing vouches "
            f"for its files; coevolab run --resume {run_dir} finishes it (what no checkpoint kept is trained again)"
            if (run_dir / GRID_FILE).is_file() or (run_dir / STUDY_FILE).is_file()
            else f"{run_dir}: no {MANIFEST_FILE} and no {GRID_FILE}: not a coevolab run directory"
        )
    rewriting = rewriting or (lambda _: False)
    verify_listed(run_dir, manifest, rewriting)
    if not legacy(manifest):
        # A file the manifest does not list was added after the run was sealed: never read as the run's.
        listed = manifest[FILES_KEY]
        added = [
            relative for relative in directory_files(run_dir) if relative not in listed and not rewriting(relative)
        ]
        if added:
            raise RunDirectoryError(
                f"{run_dir / added[0]}: not listed in {run_dir / MANIFEST_FILE}: added after the run was sealed "
                f"({plural(len(added), 'such file')}); move it out of the run directory"
            )
    for folder in _folders(run_dir)[1:]:
        nested = read_manifest(folder)
        if nested is not None:
            verify_listed(folder, nested)
    return Checked(manifest, read_back(run_dir))


def verify_run_dir(run_dir: Path) -> str:
    """`coevolab verify DIR`: what was checked, in one line, if everything verified.

    Raises:
        RunDirectoryError: the first problem: a file that differs from its manifest, a metrics table that does not
            read back, a checkpoint (the run has not finished), or a manifest that lists no files.
    """
    run_dir = Path(run_dir)
    manifest = check_finished(run_dir).manifest
    checkpoints = sorted(run_dir.rglob(CHECKPOINT_FILE))
    if checkpoints:
        raise RunDirectoryError(f"{checkpoints[0]}: a checkpoint: the run has not finished (coevolab run --resume)")
    if legacy(manifest):
        raise RunDirectoryError(
            f"{run_dir / MANIFEST_FILE}: lists no files (written before coevolab recorded them), so none can be "
            "verified; its metrics read back as its grid's runs"
        )
    manifests = [folder for folder in _folders(run_dir) if (folder / MANIFEST_FILE).is_file()]
    tables = [folder for folder in _folders(run_dir) if metrics_file(folder).is_file()]
    return (
        f"{run_dir}: verified {len(manifest[FILES_KEY])} files against their sizes and SHA-256 ({len(manifests)} "
        f"manifest{'s' if len(manifests) > 1 else ''}); {len(tables)} metrics table{'s' if len(tables) > 1 else ''} "
        "read back as their grids' runs"
    )
