"""The committed reference runs in the current run-directory form (nothing trained): python -m tools.compact_references.

The metrics table is now gzip-compressed CSV (metrics.csv.gz). Per-run tables are written only for grids that use
the mechanism defining them, as Parquet, and never stored twice (a run in seed blocks keeps its blocks' tables and no
merged copy; `harness.common.run_tables`). For every run directory under artifacts/reference/ this
- sets `record_best_of_n = true` on every condition of the overoptimization study (its grid files and study.json): the
  grids that recorded best-of-n before the knob existed, whose claims read it;
- converts each best_of_n.csv of a grid that records best-of-n to best_of_n.parquet, the values the CSV holds as the
  float32 the run computed (written to 9 significant digits, so read back exactly), and removes every other one (a
  grid that never used it, or a merged copy of its blocks' tables);
- compresses each metrics.csv to metrics.csv.gz (`harness.common.run_files.metrics_bytes`: the same text, gzip with
  no time stamp) and removes the plain copy;
- re-seals every manifest, deepest first, listing the files as they now are, with `resealed` saying when and why; a
  manifest of before files were listed gets its first listing this way.
Then `coevolab verify` checks each reference. Running it again changes nothing.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pandas as pd

from harness.common.integrity import (
    DIGEST_KEY,
    FILES_KEY,
    directory_files,
    file_entry,
    legacy,
    read_manifest,
    write_manifest,
)
from harness.common.run_files import (
    BLOCKS_DIR,
    GRID_FILE,
    LEGACY_METRICS_FILE,
    MANIFEST_FILE,
    atomic_write_bytes,
    atomic_write_text,
    write_metrics_text,
)
from harness.common.run_tables import legacy_table_file, table_bytes, table_file
from harness.experiment.study import STUDY_FILE
from harness.experiment.verify import verify_run_dir
from harness.grid.grid_file import grid_from_json, read_grid_file
from harness.grid.spec import grid_tables
from harness.grid.study import StudySpec
from harness.mechanisms.best_of_n import COLUMNS
from harness.mechanisms.best_of_n import NAME as BEST_OF_N_TABLE

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "artifacts" / "reference"
RECORDING_BEST_OF_N = ("overoptimization",)  # the references whose grids recorded best-of-n before the knob
KNOB = "record_best_of_n"
WHY = (
    "metrics gzip-compressed; tables as Parquet, only where a grid records them, no merged copies "
    "(tools/compact_references.py)"
)


def _with_knob(grid: dict) -> dict:
    for condition in grid["conditions"]:
        condition["knobs"][KNOB] = True
    return grid


def set_knob(reference: Path) -> None:
    """`record_best_of_n = true` on every condition of every grid file (and study.json's grids) below `reference`,
    each validated and written as a run writes it now."""
    for path in sorted(reference.rglob(GRID_FILE)):
        document = json.loads(path.read_text(encoding="utf-8"))
        if not all(condition["knobs"].get(KNOB) for condition in document["conditions"]):
            spec = grid_from_json(json.dumps(_with_knob(document)), path.parent)
            atomic_write_text(path, spec.model_dump_json(indent=2) + "\n")
    study = reference / STUDY_FILE
    if study.is_file():
        document = json.loads(study.read_text(encoding="utf-8"))
        if not all(c["knobs"].get(KNOB) for shape in document["shapes"] for c in shape["grid"]["conditions"]):
            for shape in document["shapes"]:
                _with_knob(shape["grid"])
            atomic_write_text(study, StudySpec.model_validate(document).model_dump_json(indent=2) + "\n")


def _records(directory: Path) -> bool:
    """Whether the grid of a run directory records the best-of-n table."""
    grid = directory / GRID_FILE
    return grid.is_file() and BEST_OF_N_TABLE in {t.name for t in grid_tables(read_grid_file(grid))}


def compact_tables(reference: Path) -> list[str]:
    """Convert or remove every best_of_n.csv below `reference`; what was done, one line each."""
    done = []
    for csv in sorted(reference.rglob(legacy_table_file(Path(), BEST_OF_N_TABLE).name)):
        directory = csv.parent
        blocks = directory / BLOCKS_DIR
        block_copies = blocks.is_dir() and any(
            (b / csv.name).is_file() or table_file(b, BEST_OF_N_TABLE).is_file() for b in blocks.iterdir()
        )
        records = _records(directory)
        if records and not block_copies:
            table = pd.read_csv(csv)
            table = table.astype({column: np.float32 for column in COLUMNS})
            atomic_write_bytes(table_file(directory, BEST_OF_N_TABLE), table_bytes(table))
            done.append(f"{csv.relative_to(ROOT)} -> {table_file(directory, BEST_OF_N_TABLE).name}")
        else:
            done.append(f"{csv.relative_to(ROOT)} removed ({'a merged copy' if records else 'its grid records none'})")
        csv.unlink()
    return done


def compress_metrics(reference: Path) -> list[str]:
    """Every plain metrics.csv below `reference` written as metrics.csv.gz (the same text), the plain one removed."""
    done = []
    for plain in sorted(reference.rglob(LEGACY_METRICS_FILE)):
        write_metrics_text(plain.parent, plain.read_text(encoding="utf-8"))  # removes the plain one
        done.append(f"{plain.relative_to(ROOT)} -> {LEGACY_METRICS_FILE}.gz")
    return done


def reseal(reference: Path, when: str) -> None:
    """Every manifest below `reference` whose listing is not the files as they are now (or that lists none),
    deepest first, listing them as they are."""
    manifests = sorted(reference.rglob(MANIFEST_FILE), key=lambda p: len(p.parts), reverse=True)
    for path in manifests:
        manifest = read_manifest(path.parent) or {}
        now = {relative: file_entry(path.parent / relative) for relative in directory_files(path.parent)}
        if not legacy(manifest) and manifest[FILES_KEY] == now:
            continue
        kept = {k: v for k, v in manifest.items() if k not in (FILES_KEY, DIGEST_KEY)}
        write_manifest(path.parent, kept | {"resealed": f"{when}: {WHY}"})


def main() -> None:
    when = dt.date.today().isoformat()
    for reference in sorted(p for p in REFERENCE.iterdir() if (p / MANIFEST_FILE).is_file()):
        if reference.name in RECORDING_BEST_OF_N:
            set_knob(reference)
        for line in [*compact_tables(reference), *compress_metrics(reference)]:
            print(line)
        reseal(reference, when)
        print(verify_run_dir(reference))


if __name__ == "__main__":
    main()
