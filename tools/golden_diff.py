"""Which columns of a regenerated golden file changed: the committed file against the regenerated one, column by
column, within the golden test's tolerance.

    python -m tools.golden_diff                     # HEAD's tests/test_golden_metrics/smoke_metrics.csv vs the file
    python -m tools.golden_diff OLD.csv NEW.csv

A regenerated file differs from the committed one in the last bits of every float column on another CPU (kernels
chosen for AVX2 and AVX-512 round differently), so `git diff` shows every line changed; this names the columns that
moved beyond the tolerance, the columns added and removed, and for each the largest difference. Exit 0 when no
column that both files have moved beyond the tolerance, 1 otherwise.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path("tests/test_golden_metrics/smoke_metrics.csv")
# The golden test's tolerance for float columns (float32 training over 40 steps: 1e-4 covers the last bits that
# kernels of different instruction sets round differently, and still catches any real change of dynamics).
TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}
KEYS = ("condition", "seed", "iteration")


def compare(old: pd.DataFrame, new: pd.DataFrame, atol: float, rtol: float) -> pd.DataFrame:
    """One row per column of either table: status (same, within tolerance, changed, added, removed), the largest
    absolute difference and how many rows moved beyond the tolerance. Rows are matched by condition, seed and
    iteration; a NaN matches a NaN."""
    keys = [key for key in KEYS if key in old.columns and key in new.columns]
    old, new = old.set_index(keys).sort_index(), new.set_index(keys).sort_index()
    if not old.index.equals(new.index):
        raise ValueError("the two files do not have the same (condition, seed, iteration) rows")
    rows = []
    for column in dict.fromkeys([*old.columns, *new.columns]):
        if column not in new.columns or column not in old.columns:
            rows.append((column, "removed" if column not in new.columns else "added", np.nan, 0))
            continue
        before, after = old[column], new[column]
        if not (pd.api.types.is_numeric_dtype(before) and pd.api.types.is_numeric_dtype(after)):
            moved = int((before.astype(str) != after.astype(str)).sum())
            rows.append((column, "changed" if moved else "same", np.nan, moved))
            continue
        a, b = before.to_numpy(float), after.to_numpy(float)
        both_nan = np.isnan(a) & np.isnan(b)
        difference = np.where(both_nan, 0.0, np.abs(a - b))
        beyond = ~both_nan & ~np.isclose(a, b, atol=atol, rtol=rtol)
        largest = float(np.nanmax(difference)) if difference.size else 0.0
        status = "changed" if beyond.any() else "same" if largest == 0 else "within tolerance"
        rows.append((column, status, largest, int(beyond.sum())))
    return pd.DataFrame(rows, columns=["column", "status", "largest difference", "rows beyond tolerance"])


def _committed(path: Path) -> pd.DataFrame:
    shown = subprocess.run(["git", "show", f"HEAD:{path.as_posix()}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        raise SystemExit(f"golden_diff: cannot read HEAD's {path}: {shown.stderr.strip()}")
    return pd.read_csv(io.StringIO(shown.stdout), index_col=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.golden_diff", description=__doc__.splitlines()[0])
    parser.add_argument("old", nargs="?", type=Path, help="the committed file (default: HEAD's golden file)")
    parser.add_argument("new", nargs="?", type=Path, help=f"the regenerated file (default: {GOLDEN})")
    parser.add_argument("--atol", type=float, default=TOLERANCE["atol"])
    parser.add_argument("--rtol", type=float, default=TOLERANCE["rtol"])
    args = parser.parse_args(argv)
    old = pd.read_csv(args.old, index_col=0) if args.old else _committed(GOLDEN)
    new = pd.read_csv(args.new or ROOT / GOLDEN, index_col=0)
    table = compare(old, new, args.atol, args.rtol)
    shown = table[table["status"] != "same"]
    print(shown.to_string(index=False) if len(shown) else "every column is the same")
    return 1 if (table["status"] == "changed").any() else 0


if __name__ == "__main__":
    sys.exit(main())
