"""The per-run tables of a run directory (`harness.grid.contract.RunTable`, e.g. best_of_n.csv): written by a run
beside metrics.csv, and joined from finished seed blocks by a merge, text for text, as metrics.csv is.

A table is one row per condition × seed × iteration × index entry. A run writes its rows in the grid's condition
order, then seed, iteration and the index's order; a merge sorts the blocks' rows by (condition order, seed,
iteration), stably, so each run's index order stays: the same bytes whatever process ran a block, and for a one-block
grid the same bytes as the block's own table.
"""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from harness.common.run_files import atomic_write_text
from harness.grid.layout import GridSpec, grid_tables

# A float32 value's nine significant digits: enough to read every value back exactly.
TABLE_FLOAT_FORMAT = "%.9g"


def table_file(run_dir: Path, name: str) -> Path:
    return Path(run_dir) / f"{name}.csv"


def write_run_tables(run_dir: Path, tables: dict[str, pd.DataFrame]) -> None:
    """Each per-run table (`GridTrainer.run_tables`) as <name>.csv."""
    for name, table in tables.items():
        atomic_write_text(table_file(run_dir, name), table.to_csv(index=False, float_format=TABLE_FLOAT_FORMAT))


def merged_tables_text(spec: GridSpec, block_dirs: list[Path]) -> dict[str, str]:
    """Each per-run table of `spec` (`grid_tables`) joined from the finished blocks' directories, in block order,
    as <name>.csv text. A block without the table (run by a version of coevolab before it) leaves it out.

    Raises:
        ValueError: the blocks' tables have other columns (another version of coevolab), naming the table.
    """
    order = {condition.name: i for i, condition in enumerate(spec.conditions)}
    texts = {}
    for table in grid_tables(spec):
        paths = [table_file(directory, table.name) for directory in block_dirs]
        if not all(path.is_file() for path in paths):
            continue
        # Read as text, so that every value is written back exactly as its block wrote it.
        frames = [pd.read_csv(path, dtype=str, keep_default_na=False) for path in paths]
        if any(list(frame.columns) != list(frames[0].columns) for frame in frames):
            raise ValueError(f"the blocks' {table.name}.csv have other columns (another version of coevolab?)")
        merged = pd.concat(frames, ignore_index=True)
        keys = pd.DataFrame(
            {
                "condition": merged["condition"].map(order),
                "seed": merged["seed"].astype(int),
                "iteration": merged["iteration"].astype(int),
            }
        )
        merged = merged.loc[keys.sort_values(["condition", "seed", "iteration"], kind="stable").index]
        text = io.StringIO()
        merged.to_csv(text, index=False)
        texts[table.name] = text.getvalue()
    return texts


def read_run_table(run_dir: Path, name: str) -> pd.DataFrame | None:
    """A run directory's per-run table `name`, or None where it has none."""
    path = table_file(run_dir, name)
    return pd.read_csv(path) if path.is_file() else None
