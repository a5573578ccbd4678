"""Checking a finished run directory before anything reads it (`coevolab verify`, `report`, `--resume`,
`harness.load_result`): its manifest and every manifest below it (seed blocks, stages, shapes) against the files they
list, then every metrics.csv read back against the grid.json beside it (`harness.experiment.validation`).
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
    legacy,
    read_manifest,
    verify_listed,
)
from harness.common.run_files import (
    CHECKPOINT_FILE,
    CLAIMS_FILE,
    FIGURES_DIR,
    GRID_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
)
from harness.experiment.blocks import BLOCKS_DIR
from harness.experiment.runner import load_spec
from harness.experiment.study import STUDY_FILE
from harness.experiment.until_decided import LOOKS_FILE, PLAN_FILE
from harness.experiment.validation import read_metrics

# What only a run directory holds: a directory holding none of these is not one (and --force does not replace it).
RUN_MARKERS = (GRID_FILE, MANIFEST_FILE, CHECKPOINT_FILE, STUDY_FILE, PLAN_FILE, BLOCKS_DIR)


def is_run_directory(path: Path) -> bool:
    """Whether `path` holds a run (finished or not) of any kind: a grid, its blocks, a study, a grid grown until
    decided."""
    return any((Path(path) / name).exists() for name in RUN_MARKERS)


def report_outputs(run_dir: Path) -> Callable[[str], bool]:
    """Which files of a run directory (paths relative to it) `coevolab report` writes anew, so reads nothing from:
    every file at its top but the ones the report is rendered from, and its figures. Everything else is an input."""
    run_dir = Path(run_dir)
    if (run_dir / STUDY_FILE).is_file():
        inputs = {STUDY_FILE}
    elif (run_dir / PLAN_FILE).is_file():
        inputs = {METRICS_FILE, GRID_FILE, CLAIMS_FILE, LOOKS_FILE, PLAN_FILE}
    else:
        inputs = {METRICS_FILE, GRID_FILE}
    return lambda relative: relative.startswith(f"{FIGURES_DIR}/") or ("/" not in relative and relative not in inputs)


def _folders(run_dir: Path) -> list[Path]:
    """run_dir and every folder below it, but the ones an interrupted --force left."""
    below = (path for path in run_dir.rglob("*") if path.is_dir())
    kept = (path for path in below if not path.relative_to(run_dir).parts[0].startswith(REPLACED_PREFIX))
    return [run_dir, *sorted(kept)]


def read_back(run_dir: Path) -> pd.DataFrame | None:
    """Read every metrics.csv under run_dir back against the grid.json beside it; returns the top one's table (None
    where the top holds none of its own, as a study's, whose metrics are its shapes').

    Raises:
        RunDirectoryError: the first table that does not read back, or a grid.json that is not a grid.
    """
    top = None
    for folder in _folders(Path(run_dir)):
        if not ((folder / GRID_FILE).is_file() and (folder / METRICS_FILE).is_file()):
            continue
        # A grid grown until decided grows its conditions to different seed counts (its stages are complete).
        table = read_metrics(folder / METRICS_FILE, load_spec(folder), complete=not (folder / PLAN_FILE).is_file())
        top = table if folder == Path(run_dir) else top
    return top


class Checked(NamedTuple):
    """A finished run directory, checked: its manifest and its top metrics.csv as `pd.read_csv` reads it (None for a
    study, whose metrics are its shapes')."""

    manifest: dict[str, Any]
    metrics: pd.DataFrame | None


def check_finished(run_dir: Path, rewriting: Callable[[str], bool] | None = None) -> Checked:
    """Check a finished run directory: its manifest and every manifest below it against the files they list (but
    those `rewriting` names: what the calling command writes anew), then every metrics.csv read back.

    Raises:
        RunDirectoryError: the first problem, in one line (no manifest: the run has not finished).
    """
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    if manifest is None:
        raise RunDirectoryError(
            f"{run_dir}: no {MANIFEST_FILE}: the run has not finished (coevolab run --resume {run_dir}), or this is "
            "not a run directory"
        )
    verify_listed(run_dir, manifest, rewriting or (lambda _: False))
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
    tables = [folder for folder in _folders(run_dir) if (folder / METRICS_FILE).is_file()]
    return (
        f"{run_dir}: verified {len(manifest[FILES_KEY])} files against their sizes and SHA-256 ({len(manifests)} "
        f"manifest{'s' if len(manifests) > 1 else ''}); {len(tables)} metrics table{'s' if len(tables) > 1 else ''} "
        "read back as their grids' runs"
    )
