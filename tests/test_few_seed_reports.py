"""A run of one or two seeds (a documented way to run a grid: `--seed-list 0`) gets a whole report, claims untested.

The metrics are the committed reference runs' own rows for the first seeds, so every section meets real data of
every condition; nothing is trained. The reports are text only: the figures' own few-seed cases are test_report's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.common.run_files import CLAIMS_FILE, GRID_FILE, METRICS_FILE
from harness.inference.verdicts import paired_bootstrap_ci
from harness.report import read_run_grid, write_run_report

# A report of one seed says its claims are untested; numpy warning about a spread of one value is not part of it.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

REFERENCE = Path(__file__).resolve().parent.parent / "artifacts" / "reference"


# The condition files with claims (paper-100's and paper-original's are paper's), at one and at two seeds.
@pytest.mark.parametrize(("reference", "seeds"), [("paper", 1), ("paper", 2), ("temporal", 1), ("temporal", 2)])
def test_a_run_of_few_seeds_reports_every_claim_untested(tmp_path: Path, reference: str, seeds: int) -> None:
    source = REFERENCE / reference
    grid = json.loads((source / GRID_FILE).read_text())
    kept = grid["run"]["seeds"][:seeds]
    grid["run"]["seeds"] = kept
    (tmp_path / GRID_FILE).write_text(json.dumps(grid))
    metrics = pd.read_csv(source / METRICS_FILE)
    metrics = metrics[metrics["seed"].isin(kept)].reset_index(drop=True)

    write_run_report(tmp_path, metrics, grid["name"], read_run_grid(tmp_path), figures=False)

    claims = pd.read_csv(tmp_path / CLAIMS_FILE)
    assert len(claims) == len(grid["claims"]) > 0
    assert set(claims["verdict"]) == {"untested"}
    assert (claims["seeds"] <= seeds).all()
    report = (tmp_path / "report.md").read_text()
    assert f"{len(claims)} untested" in report


def test_one_seed_has_an_effect_but_no_interval() -> None:
    effect, low, high = paired_bootstrap_ci(pd.Series([2.0]).to_numpy(), pd.Series([0.5]).to_numpy(), "mean", 0.95)
    assert effect == 1.5
    assert pd.isna(low) and pd.isna(high)
    spread, low, high = paired_bootstrap_ci(pd.Series([2.0]).to_numpy(), pd.Series([0.5]).to_numpy(), "std", 0.95)
    assert pd.isna(spread) and pd.isna(low) and pd.isna(high)
