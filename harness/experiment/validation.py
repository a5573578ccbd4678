"""Reading a metrics.csv.gz back against the grid.json beside it: every run's rows exactly once, every value of its
metric's kind, finite and in range where the metric says it must be (`harness.engine.metrics.ValidValues`; the
grid's metrics are the loop's and those of the mechanisms its runs use, `harness.grid.spec.grid_metrics`).

What the manifest cannot vouch for (a directory written before manifests listed files, a block's table before it is
merged) is caught here; what it can, this checks a second time, from the meaning of the numbers rather than their
bytes. A refusal is one line naming the file, the row and what is wrong.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import harness.mechanisms  # noqa: F401  (registers the built-in mechanisms, whose knobs and metrics it reads)
from harness.common.integrity import RunDirectoryError
from harness.common.run_files import read_metrics_text
from harness.engine.metrics import Metric
from harness.grid.spec import GridSpec, grid_metrics

KEY_COLUMNS = ("condition", "seed", "iteration")
# Past a bound by float32 rounding (a Spearman of 1.0000001, a KL of −1e−7): still the bound.
ROUNDING = 1e-5
_INTEGER = r"-?\d+"
_BOOLEAN = ("True", "False")


def _row(index: int) -> str:
    return f"line {index + 2}"  # the header is line 1


def _integers(table: pd.DataFrame, column: str, where: Path) -> pd.Series:
    values = table[column]
    bad = ~values.str.fullmatch(_INTEGER)
    if bad.any():
        first = int(np.flatnonzero(bad.to_numpy())[0])
        raise RunDirectoryError(f"{where}: {_row(first)}: {column} is {values.iloc[first]!r}, not a whole number")
    return values.astype(np.int64)


def _booleans(table: pd.DataFrame, column: str, where: Path) -> pd.Series:
    values = table[column]
    bad = ~values.isin(_BOOLEAN)
    if bad.any():
        first = int(np.flatnonzero(bad.to_numpy())[0])
        raise RunDirectoryError(f"{where}: {_row(first)}: {column} is {values.iloc[first]!r}, not True or False")
    return values == "True"


def _floats(table: pd.DataFrame, column: str, where: Path) -> pd.Series:
    text = table[column]
    values = pd.to_numeric(text.where(text != "", "nan"), errors="coerce")
    bad = values.isna() & ~text.str.lower().isin(("", "nan"))
    if bad.any():
        first = int(np.flatnonzero(bad.to_numpy())[0])
        raise RunDirectoryError(f"{where}: {_row(first)}: {column} is {text.iloc[first]!r}, not a number")
    return values.astype(float)


def _check_values(metric: Metric, values: pd.Series, alive: np.ndarray, where: Path) -> None:
    """Raise unless every value of a run that has not diverged is one `metric` can take."""
    valid = metric.valid
    number = values.to_numpy(float)
    finite = np.isfinite(number)
    allowed = valid.undefined | finite
    tolerance = ROUNDING if metric.kind == "float" else 0.0
    inside = ~finite | ((number >= valid.low - tolerance) & (number <= valid.high + tolerance))
    bad = alive & ~(allowed & inside)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        value = float(number[first])
        why = (
            "not finite, in a run that has not diverged"
            if not finite[first]
            else f"outside [{valid.low:g}, {valid.high:g}]"
        )
        raise RunDirectoryError(f"{where}: {_row(first)}: {metric.name} is {value!r}, {why}")


def _check_rows(keys: pd.DataFrame, spec: GridSpec, where: Path, complete: bool) -> None:
    """Every (condition, seed, iteration) at most once, of the grid; with `complete`, every one of the grid's; else
    every condition's seeds S..S+n−1 from the grid's first seed S (a grid grown until decided grows some conditions
    further than others, each from its first look's first seed)."""
    names = [c.name for c in spec.conditions]
    unknown = ~keys["condition"].isin(names)
    if unknown.any():
        first = int(np.flatnonzero(unknown.to_numpy())[0])
        raise RunDirectoryError(
            f"{where}: {_row(first)}: condition {keys['condition'].iloc[first]!r} is not one of its grid.json's"
        )
    repeated = keys.duplicated()
    if repeated.any():
        first = int(np.flatnonzero(repeated.to_numpy())[0])
        condition, seed, iteration = keys.iloc[first]
        raise RunDirectoryError(
            f"{where}: {_row(first)}: condition {condition!r} seed {seed} iteration {iteration} appears twice"
        )
    iterations = spec.run.iterations
    late = (keys["iteration"] < 0) | (keys["iteration"] > iterations)
    if late.any():
        first = int(np.flatnonzero(late.to_numpy())[0])
        raise RunDirectoryError(
            f"{where}: {_row(first)}: iteration {keys['iteration'].iloc[first]}, but the grid has 0..{iterations}"
        )
    seeds, first_seed = list(spec.run.seeds), spec.run.seeds[0]
    if complete:
        expected = pd.MultiIndex.from_product([names, seeds, range(iterations + 1)], names=KEY_COLUMNS)
    else:
        counts = keys.groupby("condition")["seed"].nunique()
        expected = pd.MultiIndex.from_tuples(
            [
                (name, seed, iteration)
                for name in names
                for seed in range(first_seed, first_seed + int(counts.get(name, 0)))
                for iteration in range(iterations + 1)
            ],
            names=KEY_COLUMNS,
        )
    missing = expected.difference(pd.MultiIndex.from_frame(keys))
    if len(missing):
        condition, seed, iteration = missing[0]
        runs = f"{len(names)} conditions × {len(seeds)} seeds × {iterations + 1} iterations"
        if not complete:
            runs = f"each condition its seeds {first_seed}..{first_seed}+n−1"
        raise RunDirectoryError(
            f"{where}: holds {len(keys)} rows, {len(missing)} short of its grid's ({runs}): the first missing is "
            f"condition {condition!r} seed {seed} iteration {iteration} (cut short?)"
        )
    surplus = pd.MultiIndex.from_frame(keys).difference(expected)
    if len(surplus):
        condition, seed, iteration = surplus[0]
        raise RunDirectoryError(f"{where}: condition {condition!r} has seed {seed}, which its grid.json does not run")


def validated_metrics(text: str, spec: GridSpec, where: Path, complete: bool = True) -> pd.DataFrame:
    """metrics.csv.gz's `text` as `pd.read_csv` reads it, once it has read back as the runs of `spec`.

    Args:
        where: the file's path, for the messages.
        complete: every condition × seed × iteration of the grid (False: a grid grown until decided, whose conditions
            have their own seed counts, S..S+n−1 from the grid's first seed S; and metrics of an earlier version may
            be missing).

    Raises:
        RunDirectoryError: the first problem (one line).
    """
    try:
        # Every value as text, a field missing from a short row as an empty one.
        table = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False).fillna("")
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise RunDirectoryError(f"{where}: not a metrics table ({str(error).strip().splitlines()[0]})") from None
    metrics = grid_metrics(spec)  # the grid's, those of the mechanisms its runs use included
    required = [*KEY_COLUMNS, "boundary", "diverged", "finite"]
    if complete:
        required += [metric.name for metric in metrics]
    missing = [column for column in required if column not in table.columns]
    if missing:
        raise RunDirectoryError(f"{where}: lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    keys = pd.DataFrame(
        {
            "condition": table["condition"],
            "seed": _integers(table, "seed", where),
            "iteration": _integers(table, "iteration", where),
        }
    )
    _check_rows(keys, spec, where, complete)
    finite = _booleans(table, "finite", where)
    diverged = _booleans(table, "diverged", where)
    boundary = _booleans(table, "boundary", where)
    expected_boundary = keys["condition"].map({c.name: c.boundary for c in spec.conditions})
    wrong = boundary != expected_boundary
    if wrong.any():
        first = int(np.flatnonzero(wrong.to_numpy())[0])
        raise RunDirectoryError(f"{where}: {_row(first)}: boundary is not its condition's in grid.json")
    # A run has diverged from its first non-finite iteration on.
    ordered = keys.assign(finite=finite).sort_values(list(KEY_COLUMNS))
    since = ~ordered.groupby(["condition", "seed"])["finite"].cummin().astype(bool)
    wrong = since.reindex(keys.index) != diverged
    if wrong.any():
        first = int(np.flatnonzero(wrong.to_numpy())[0])
        raise RunDirectoryError(f"{where}: {_row(first)}: diverged does not follow from the run's finite column")
    alive = ~diverged.to_numpy()
    for metric in metrics:
        if metric.name not in table.columns or metric.name == "finite":
            continue
        if metric.kind == "int":
            values = _integers(table, metric.name, where)
        elif metric.kind == "bool":
            values = _booleans(table, metric.name, where).astype(float)
        else:
            values = _floats(table, metric.name, where)
        _check_values(metric, values.astype(float), alive, where)
    return pd.read_csv(io.StringIO(text))


def metrics_text(path: Path) -> str:
    """The CSV text of the metrics table at `path` (metrics.csv.gz, or an earlier coevolab's metrics.csv).

    Raises:
        RunDirectoryError: it is missing or cannot be read (a compressed stream cut short, ...), in one line.
    """
    try:
        return read_metrics_text(Path(path))
    except FileNotFoundError:
        raise RunDirectoryError(f"{path}: missing (the run has not finished)") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RunDirectoryError(f"{path}: cannot be read ({getattr(error, 'strerror', None) or error})") from None


def read_metrics_frame(path: Path, **read_csv: Any) -> pd.DataFrame:
    """The metrics table at `path` as `pd.read_csv` reads it with `read_csv`'s options, not checked against a grid
    (`read_metrics` checks it).

    Raises:
        RunDirectoryError: it is missing, cannot be read or is not a table.
    """
    text = metrics_text(path)
    try:
        return pd.read_csv(io.StringIO(text), **read_csv)
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise RunDirectoryError(f"{path}: not a metrics table ({str(error).strip().splitlines()[0]})") from None


def read_metrics(path: Path, spec: GridSpec, complete: bool = True) -> pd.DataFrame:
    """The metrics table at `path` (metrics.csv.gz, or an earlier coevolab's metrics.csv), read back against `spec`
    (see `validated_metrics`).

    Raises:
        RunDirectoryError: it is missing, unreadable, or does not read back as the runs of `spec`.
    """
    return validated_metrics(metrics_text(path), spec, Path(path), complete)
