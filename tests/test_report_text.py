"""The report as a reader meets it: headings, resolution, end modes, registry-driven panels, reproducible bytes."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pandas as pd
import pytest
from test_report import make_metrics

from harness import metrics as registry
from harness.report import mode_shares, summarize, write_report
from harness.report.figures import boundaries_title
from harness.report.tables import difference_verdict


def with_modes(metrics: pd.DataFrame, modes: dict[tuple[str, int], tuple[str, float]]) -> pd.DataFrame:
    m = metrics.copy()
    m["mode_sequence"] = [modes[(c, s)][0] for c, s in zip(m["condition"], m["seed"], strict=True)]
    m["mode_quality"] = [modes[(c, s)][1] for c, s in zip(m["condition"], m["seed"], strict=True)]
    return m


@pytest.fixture
def same_end() -> pd.DataFrame:
    """Two conditions that end at the same output: qualities differ by float noise only."""
    runs = {("baseline", s): [0.0, 1.7475814] for s in range(3)}
    runs |= {("noise", s): [0.0, 1.7475814 + 1e-5 + 1e-7 * s] for s in range(3)}
    runs |= {("better", s): [0.0, 2.0 + 0.01 * s] for s in range(3)}
    modes = {key: ("↑ ↑ ↑ ↑", 1.7475814) for key in runs}
    modes |= {("better", s): ("↑ ↑ ↑ ↗", 2.0) for s in range(3)}
    return with_modes(make_metrics(runs), modes)


def test_differences_below_resolution_read_no_difference(same_end: pd.DataFrame, tmp_path: Path) -> None:
    summary = summarize(same_end).set_index("condition")
    # The CI excludes zero, but the difference is float noise: not a finding.
    assert summary.loc["noise", "policy_quality_diff_ci_low"] > 0
    assert difference_verdict(summary.loc["noise"]) == "none"
    assert difference_verdict(summary.loc["better"]) == "above"
    write_report(same_end, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "no difference" in next(line for line in report.splitlines() if line.startswith("| noise"))
    assert "1 end above and 0 below the reference" in report
    assert "1 show no difference" in report


def test_end_modes_are_counted_per_condition(same_end: pd.DataFrame, tmp_path: Path) -> None:
    shares = mode_shares(same_end)
    assert shares.loc[shares["condition"] == "better", "runs"].tolist() == [3]
    write_report(same_end, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "6 of 9 runs end at ↑ ↑ ↑ ↑ (q* 1.748), 3 at ↑ ↑ ↑ ↗ (q* 2.000)" in report
    assert "## Where runs end" in report
    assert "↑ ↑ ↑ ↗" in report and "glyph" in report


def test_headings_name_grid_seeds_and_iteration(same_end: pd.DataFrame, tmp_path: Path) -> None:
    write_report(same_end, tmp_path, grid_name="tiny")
    summary_md = (tmp_path / "summary.md").read_text()
    assert summary_md.startswith("# Summary of tiny\n")
    assert "grid `tiny`: 3 conditions × 3 seeds (0–2); final iteration 1." in summary_md
    report = (tmp_path / "report.md").read_text()
    assert (
        report.count("3 conditions × 3 seeds (0–2); final iteration 1.") == 3
    )  # every table (summary, modes, escapes)
    assert "## How to read this" in report
    for x in registry.HEADLINE_METRICS:
        assert f"**{x.label}** ({x.unit}; column `{x.name}`): {x.definition}." in report
    # No run diverged: no claim about a Diverged column, and no such column.
    assert "No run diverged." in report and "Diverged runs" not in report


def test_boundaries_title_fits_the_grid(same_end: pd.DataFrame) -> None:
    title = boundaries_title(summarize(same_end))
    assert "boundary" not in title and "dashed" not in title
    assert "the 2 top-ranked mechanisms" in title  # 'noise' is not clearly above the reference
    one_bound = same_end.assign(boundary=same_end["condition"] == "noise")
    title = boundaries_title(summarize(one_bound))
    assert "the 1 best mechanism" in title and "1 boundary condition (dashed)" in title


def test_a_new_headline_metric_appears_everywhere(
    same_end: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = dataclasses.replace(
        registry.metric("policy_entropy"),
        name="kl_initial",
        label="KL to the initial policy",
        unit="nats",
        definition="KL(π ‖ π₀) over all outputs",
    )
    monkeypatch.setattr(registry, "METRICS", (*registry.METRICS, extra))
    monkeypatch.setattr(registry, "HEADLINE_METRICS", (*registry.HEADLINE_METRICS, extra))
    metrics = same_end.assign(kl_initial=same_end["iteration"] * 0.5)
    write_report(metrics, tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "KL to the initial policy (nats)" in report.split("## Summary")[1].splitlines()[4]  # a table column
    assert "**KL to the initial policy** (nats; column `kl_initial`): KL(π ‖ π₀) over all outputs." in report
    assert "KL to the initial policy (nats) 0.000 → 0.500" in report  # the headline reading
    assert "kl_initial_mean" in pd.read_csv(tmp_path / "summary.csv").columns


def test_same_table_same_bytes_and_normal_file_modes(same_end: pd.DataFrame, tmp_path: Path) -> None:
    write_report(same_end, tmp_path / "a", title="t")
    write_report(same_end, tmp_path / "b", title="t")
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert len(files) == 10  # summary.csv, summary.md, report.md, attractors.csv, 6 figures
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    umask = os.umask(0)
    os.umask(umask)
    for name in files:
        assert stat.S_IMODE((tmp_path / "a" / name).stat().st_mode) == 0o666 & ~umask
