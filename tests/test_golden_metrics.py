"""Golden metrics of conditions/smoke.toml: every diagnostic, every iteration, every run.

A change that moves any metric fails here with a table of the values that moved.
Regenerate deliberately with:  .venv/bin/python -m pytest tests/test_golden_metrics.py --force-regen
and see which columns moved with:  .venv/bin/python -m tools.golden_diff
"""

from __future__ import annotations

import pandas as pd

from harness.grid.conditions import load_grid
from harness.grid.spec import grid_metrics
from tests.conftest import ROOT
from tools.golden_diff import TOLERANCE  # (float32 training over 40 steps: why 1e-4, beside it)

# Every metric of the smoke grid (the loop's and those of every mechanism its runs use); counts and the mode compare
# exactly (mode_quality is q* of the mode, so exact too).
SMOKE = grid_metrics(load_grid(ROOT / "conditions" / "smoke.toml"))
EXACT_METRICS = [m.name for m in SMOKE if m.kind == "int"] + ["mode_quality"]
FLOAT_METRICS = [m.name for m in SMOKE if m.kind == "float" and m.name not in EXACT_METRICS]


def test_smoke_metrics_match_golden_file(smoke_metrics: pd.DataFrame, dataframe_regression) -> None:
    table = smoke_metrics[["condition", "seed", "iteration", *FLOAT_METRICS, *EXACT_METRICS]].copy()
    table["meta_accuracy"] = table["meta_accuracy"].fillna(-1.0)  # NaN (meta off) compares as a value
    dataframe_regression.check(
        table,
        basename="smoke_metrics",
        default_tolerance=TOLERANCE,
        tolerances={name: {"atol": 0.0, "rtol": 0.0} for name in EXACT_METRICS if name != "mode_quality"},
    )


def test_smoke_grid_shape(smoke_metrics: pd.DataFrame) -> None:
    assert list(smoke_metrics["condition"].unique()) == ["baseline", "frozen", "slow-meta"]
    assert len(smoke_metrics) == 3 * 2 * 3  # conditions × seeds × (iterations + 1)
    assert smoke_metrics.groupby(["condition", "seed"]).size().eq(3).all()
