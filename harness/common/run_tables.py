"""The per-run tables of a run directory (`harness.grid.contract.RunTable`, e.g. best_of_n.parquet): written by a run
beside metrics.csv.gz, only for grids whose runs use the mechanism that defines them.

A table is one row per condition × seed × iteration × index entry, stored as Parquet (pyarrow, zstd): the values are
the program's float32 as they are, and a table of 131,200 rows takes 0.9 MB against 9.0 MB as CSV. A run writes its
rows in the grid's condition order, then seed, iteration and the index's order. A run in seed blocks keeps each
block's table in the block's directory and no merged copy: `read_run_table` joins them when read (sorted stably by
condition, seed and iteration, so each run's index order stays), the same table whatever process ran a block. Run
directories of earlier versions hold the same table as <name>.csv, which `read_run_table` reads too.
"""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from harness.common.run_files import BLOCKS_DIR, atomic_write_bytes

TABLE_SUFFIX = ".parquet"
LEGACY_SUFFIX = ".csv"  # the form of run directories written before tables were Parquet
COMPRESSION_LEVEL = 9
COMPRESSION = "zstd"
KEY_DTYPES = {"condition": "string", "seed": "int64", "iteration": "int64"}
# The keys of a metrics table's rows, one per run and outer iteration, on which a table's measures join it.
MEASURE_KEYS = list(KEY_DTYPES)


def table_file(run_dir: Path, name: str) -> Path:
    """Where a run directory keeps its per-run table `name`."""
    return Path(run_dir) / f"{name}{TABLE_SUFFIX}"


def legacy_table_file(run_dir: Path, name: str) -> Path:
    """Where a run directory of an earlier version kept it, as CSV."""
    return Path(run_dir) / f"{name}{LEGACY_SUFFIX}"


def table_files(run_dir: Path, name: str) -> tuple[Path, Path]:
    """Every file that may hold a run directory's table `name`: this version's and an earlier version's."""
    return table_file(run_dir, name), legacy_table_file(run_dir, name)


def table_bytes(table: pd.DataFrame) -> bytes:
    """A per-run table as Parquet bytes: the key columns in fixed types, the rest as they are (float32 values stay
    float32), no index; the same table gives the same bytes."""
    typed = table.reset_index(drop=True).astype({k: v for k, v in KEY_DTYPES.items() if k in table.columns})
    # Float columns byte-stream-split without a dictionary: zstd then finds the curves' repeats (best-of-n's table
    # shrinks by 45%, measured on the overoptimization study's); key columns keep the dictionary that suits them.
    floats = [column for column in typed.columns if pd.api.types.is_float_dtype(typed[column])]
    buffer = io.BytesIO()
    typed.to_parquet(
        buffer,
        engine="pyarrow",
        compression=COMPRESSION,
        compression_level=COMPRESSION_LEVEL,
        use_dictionary=[column for column in typed.columns if column not in floats],
        column_encoding=dict.fromkeys(floats, "BYTE_STREAM_SPLIT"),
        index=False,
    )
    return buffer.getvalue()


def write_run_tables(run_dir: Path, tables: dict[str, pd.DataFrame]) -> None:
    """Each per-run table (`GridTrainer.run_tables`) as <name>.parquet."""
    for name, table in tables.items():
        atomic_write_bytes(table_file(run_dir, name), table_bytes(table))


def _own_table(run_dir: Path, name: str) -> pd.DataFrame | None:
    """The table a run directory holds itself (Parquet, or the CSV of an earlier version), or None."""
    path = table_file(run_dir, name)
    if path.is_file():
        return pd.read_parquet(path, engine="pyarrow")
    legacy = legacy_table_file(run_dir, name)
    return pd.read_csv(legacy) if legacy.is_file() else None


def _block_dirs(run_dir: Path) -> list[Path]:
    """A run in seed blocks: its blocks' directories, in block order."""
    blocks = Path(run_dir) / BLOCKS_DIR
    if not blocks.is_dir():
        return []
    return sorted((d for d in blocks.iterdir() if d.is_dir() and d.name.isdigit()), key=lambda d: int(d.name))


def joined_blocks(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Seed blocks' tables as one: concatenated in block order, then sorted stably by (condition, seed, iteration),
    conditions in the order they first appear (every block holds every condition of its grid, in the grid's order),
    so each run's index order stays: for one block, that block's table as it is."""
    merged = pd.concat(frames, ignore_index=True)
    order = {name: i for i, name in enumerate(pd.unique(merged["condition"]))}
    keys = pd.DataFrame(
        {"condition": merged["condition"].map(order), "seed": merged["seed"], "iteration": merged["iteration"]}
    )
    return merged.loc[keys.sort_values(["condition", "seed", "iteration"], kind="stable").index].reset_index(drop=True)


def blocks_table(run_dir: Path, name: str) -> pd.DataFrame | None:
    """The per-run table `name` of a run in seed blocks, its blocks' tables joined (`joined_blocks`); None where it
    has no blocks or a block lacks the table (run by a version before it).

    Raises:
        ValueError: the blocks' tables have other columns (another version of coevolab), naming the table.
    """
    blocks = _block_dirs(run_dir)
    if not blocks:
        return None
    frames = [_own_table(directory, name) for directory in blocks]
    if any(frame is None for frame in frames):
        return None
    if any(list(frame.columns) != list(frames[0].columns) for frame in frames):  # type: ignore[union-attr]
        raise ValueError(f"{run_dir}: the blocks' {name} tables have other columns (another version of coevolab?)")
    return joined_blocks(frames)  # type: ignore[arg-type]


def read_run_table(run_dir: Path, name: str) -> pd.DataFrame | None:
    """A run directory's per-run table `name`: its own, or for a run in seed blocks its blocks' joined (a merge
    stores no copy of them, `blocks_table`); None where it has none.

    Raises:
        ValueError: the blocks' tables have other columns (another version of coevolab), naming the table.
    """
    own = _own_table(run_dir, name)
    return own if own is not None else blocks_table(run_dir, name)


def with_measures(metrics: pd.DataFrame, measures: pd.DataFrame) -> pd.DataFrame:
    """`metrics` with the columns of `measures` (condition, seed, iteration and the measures, one row per run and
    iteration at most) joined on its rows, in their order and index; NaN where a row has no measures."""
    joined = metrics.merge(measures, on=MEASURE_KEYS, how="left", validate="one_to_one")
    joined.index = metrics.index
    return joined
