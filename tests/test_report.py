"""Tests for harness.report: summary numbers checked against independent numpy/scipy computations."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from scipy import stats

from harness.engine import metrics as registry
from harness.inference.claims import Claim
from harness.inference.verdicts import claim_verdict, paired_bootstrap_ci
from harness.report import make_figures, run_summary, summarize, summary_markdown, write_report
from harness.report.figures import ends, gap, trends
from harness.report.figures.ends import bulk_range

METRIC_COLUMNS = ("policy_quality", "judge_alignment", "policy_entropy", "judge_perceived_quality")


def shown(path: Path) -> str:
    """A report's Markdown as a reader sees it rendered: q* escaped as q\\* (`markdown.literal_stars`) shows as q*."""
    return path.read_text().replace("q\\*", "q*")


def make_metrics(runs: dict[tuple[str, int], list[float]], boundary: set[str] = frozenset(), **extra) -> pd.DataFrame:
    """A tidy table from {(condition, seed): quality per iteration}; other metrics are simple functions of quality.

    extra: {(condition, seed): {"diverged": [...], "judge_alignment": [...], ...}} overrides per run.
    """
    overrides = extra.get("overrides", {})
    rows = []
    for (condition, seed), quality in runs.items():
        for iteration, q in enumerate(quality):
            row = {
                "condition": condition,
                "seed": seed,
                "iteration": iteration,
                "policy_quality": q,
                "judge_alignment": 0.5 + 0.1 * q,
                "policy_entropy": 2.0 - 0.3 * iteration + 0.01 * seed,
                "judge_perceived_quality": 2.0 * q + 0.1 * iteration,
                "meta_accuracy": math.nan,
                "boundary": condition in boundary,
                "diverged": False,
            }
            for column, values in overrides.get((condition, seed), {}).items():
                row[column] = values[iteration]
            rows.append(row)
    return pd.DataFrame(rows)


def ci(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return stats.t.interval(confidence, len(v) - 1, loc=v.mean(), scale=stats.sem(v))


@pytest.fixture
def grid() -> pd.DataFrame:
    runs = {
        ("baseline", 0): [0.0, 1.0, 0.8],
        ("baseline", 1): [0.0, 1.2, 1.1],
        ("baseline", 2): [0.0, 0.9, 1.3],
        ("low", 0): [0.0, 0.5, 0.4],
        ("low", 1): [0.0, 0.6, 0.7],
        ("low", 2): [0.0, 0.2, 0.3],
        ("bound", 0): [0.0, 2.0, 3.0],
        ("bound", 1): [0.0, 2.5, 2.9],
        ("bound", 2): [0.0, 2.2, 3.1],
        ("high", 0): [0.0, 1.5, 2.0],
        ("high", 1): [0.0, 1.6, 1.9],
        ("high", 5): [0.0, 1.7, 2.6],  # seed 5 has no reference partner
        ("bound2", 0): [0.0, 0.1, 0.2],
        ("bound2", 1): [0.0, 0.1, 0.3],
    }
    return make_metrics(runs, boundary={"bound", "bound2"})


def test_run_summary_peak_ties_degradation() -> None:
    metrics = make_metrics(
        {
            ("baseline", 0): [1.0, 3.0, 3.0, 2.0],  # tie at the peak -> earliest iteration
            ("baseline", 1): [-2.0, -1.0, -1.0, -1.5],  # negative peak: divide by |peak|
            ("baseline", 2): [0.0, 1.0, 2.0, 2.0],  # peak == final (the tie resolves to iteration 2)
        }
    )
    runs = run_summary(metrics).set_index("seed")
    assert list(runs["peak_iteration"]) == [1, 1, 2]
    assert list(runs["peak_quality"]) == [3.0, -1.0, 2.0]
    assert list(runs["final_quality"]) == [2.0, -1.5, 2.0]
    assert list(runs["final_iteration"]) == [3, 3, 3]
    assert runs.loc[0, "degradation_pct"] == pytest.approx(100.0 * (3.0 - 2.0) / 3.0)
    assert runs.loc[1, "degradation_pct"] == pytest.approx(50.0)
    assert runs.loc[2, "degradation_pct"] == 0.0


def test_summarize_means_stds_and_t_intervals(grid: pd.DataFrame) -> None:
    summary = summarize(grid).set_index("condition")
    finals = {c: grid[(grid.condition == c) & (grid.iteration == 2)] for c in summary.index}
    for condition, final in finals.items():
        row = summary.loc[condition]
        assert row["n_seeds"] == final["seed"].nunique()
        for short in METRIC_COLUMNS:
            values = final[short].to_numpy()
            assert row[f"{short}_mean"] == pytest.approx(values.mean())
            assert row[f"{short}_std"] == pytest.approx(values.std(ddof=1))
            low, high = ci(values)
            assert row[f"{short}_ci_low"] == pytest.approx(low)
            assert row[f"{short}_ci_high"] == pytest.approx(high)
    # Confidence level is honoured.
    wide = summarize(grid, confidence=0.99).set_index("condition")
    low, high = ci(finals["low"]["policy_quality"].tolist(), 0.99)
    assert wide.loc["low", "policy_quality_ci_low"] == pytest.approx(low)
    assert wide.loc["low", "policy_quality_ci_high"] == pytest.approx(high)


def test_fell_from_peak_counts_only_drops_beyond_the_resolution(grid: pd.DataFrame) -> None:
    summary = summarize(grid).set_index("condition")
    # baseline: seeds 0 and 1 end 0.2 and 0.1 below peaks at iteration 1; seed 2 peaks at the end.
    assert summary.loc["baseline", "runs_below_peak"] == 2
    assert summary.loc["baseline", "drop_from_peak_mean"] == pytest.approx((0.2 + 0.1) / 2)
    assert summary.loc["baseline", "peak_iteration_below_first"] == summary.loc["baseline", "peak_iteration_below_last"]
    assert summary.loc["baseline", "peak_iteration_below_first"] == 1
    assert "2/3: −0.150 (mean) from iter 1 |" in summary_markdown(summarize(grid))
    # high: every run peaks at the end, so there is no peak iteration to report.
    assert summary.loc["high", "runs_below_peak"] == 0
    assert math.isnan(summary.loc["high", "drop_from_peak_mean"])
    assert math.isnan(summary.loc["high", "peak_iteration_below_first"])


def test_fell_from_peak_gives_whole_iterations() -> None:
    """Peaks at different iterations read as a span of whole iterations, never a mean such as "iter 1.5"."""
    metrics = make_metrics({("baseline", 0): [0.0, 2.0, 1.0, 1.0], ("baseline", 1): [0.0, 1.0, 2.0, 1.5]})
    text = summary_markdown(summarize(metrics))
    assert "2/2: −0.750 (mean) from iters 1–2" in text
    assert "1.5" not in text.split("|")[-2]


def test_a_flat_curve_has_no_peak_to_report(tmp_path: Path) -> None:
    """Float noise above the final value (argmax of a flat line) is no peak; a real drop is, with its iteration."""
    flat = 1.7475814
    metrics = make_metrics(
        {
            ("baseline", 0): [0.0, flat, flat + 1e-5, flat],
            ("baseline", 1): [0.0, flat + 2e-6, flat, flat],
            ("falls", 0): [0.0, 2.0, 1.9, 1.8],
            ("falls", 1): [0.0, flat, flat, flat],
        }
    )
    runs = run_summary(metrics).set_index(["condition", "seed"])
    assert not runs.loc[("baseline", 0), "below_peak"] and runs.loc[("baseline", 0), "peak_iteration"] == 2
    assert runs.loc[("falls", 0), "below_peak"]
    text = summary_markdown(summarize(metrics))
    assert "Peak iter" not in text
    rows = {line.split("|")[1].strip(): line for line in text.splitlines()[2:]}
    assert rows["baseline"].rstrip(" |").endswith("·")
    assert "1/2: −0.200 from iter 1" in rows["falls"]
    write_report(metrics, tmp_path)
    report = shown(tmp_path / "report.md")
    # The reference's headline reading names no peak for a curve that is flat to float noise.
    assert "peak" not in next(line for line in report.splitlines() if line.startswith("Reference ('baseline')"))


def test_paired_difference_uses_shared_seeds_only(grid: pd.DataFrame) -> None:
    summary = summarize(grid).set_index("condition")
    reference = {0: 0.8, 1: 1.1, 2: 1.3}
    high = {0: 2.0, 1: 1.9}  # seed 5 has no reference partner and is left out
    diffs = [high[s] - reference[s] for s in high]
    # The claims' interval (verdicts.paired_bootstrap_ci), not a Student-t one: the two disagree near zero.
    _, low_ci, high_ci = paired_bootstrap_ci(np.array(diffs), None, "mean", 0.95)
    row = summary.loc["high"]
    assert row["policy_quality_diff_mean"] == pytest.approx(np.mean(diffs))
    assert row["policy_quality_diff_ci_low"] == pytest.approx(low_ci)
    assert row["policy_quality_diff_ci_high"] == pytest.approx(high_ci)
    assert row["n_paired"] == 2
    # The unpaired mean includes seed 5, so it differs from reference mean + paired diff.
    assert row["policy_quality_mean"] == pytest.approx(np.mean([2.0, 1.9, 2.6]))
    diff_columns = ("policy_quality_diff_mean", "policy_quality_diff_ci_low")
    assert all(math.isnan(summary.loc["baseline", c]) for c in diff_columns)


def test_summary_keeps_grid_order_and_roles(grid: pd.DataFrame) -> None:
    summary = summarize(grid)
    assert summary["condition"].tolist() == ["baseline", "low", "bound", "high", "bound2"]
    assert summary["role"].tolist() == ["reference", "mechanism", "boundary", "mechanism", "boundary"]
    # The figure of the top mechanisms still ranks them by final quality.
    assert trends.shown_in_boundaries_figure(summary) == (["baseline"], ["high", "low"], ["bound", "bound2"])


def test_the_summary_describes_a_difference_and_the_claim_judges_it() -> None:
    """Near zero a Student-t interval and the bootstrap disagree about excluding 0: the summary shows the bootstrap
    interval as a description (no direction word), and only the claim, tested by its rule, says "above"."""
    gains = [0.0] * 16 + [0.1, 0.2, 0.3, 0.4]  # most seeds tie, four gain: t reaches below 0, the bootstrap does not
    runs = {("baseline", s): [0.0, 1.0] for s in range(20)}
    runs |= {("better", s): [0.0, 1.0 + g] for s, g in enumerate(gains)}
    metrics = make_metrics(runs)
    summary = summarize(metrics)
    row = summary.set_index("condition").loc["better"]
    _, low, high = paired_bootstrap_ci(np.array(gains), None, "mean", 0.95)
    assert (row["policy_quality_diff_ci_low"], row["policy_quality_diff_ci_high"]) == pytest.approx((low, high))
    assert ci(gains)[0] < 0 < row["policy_quality_diff_ci_low"]
    line = next(line for line in summary_markdown(summary).splitlines() if line.startswith("| better"))
    assert "[" in line and not any(word in line for word in ("above", "below", "no difference"))
    claim = Claim(
        name="c",
        statement="better ends above",
        metric="policy_quality",
        condition="better",
        direction="above",
        than_condition="baseline",
    )
    verdict = claim_verdict(metrics, claim)
    # 4 of 4 seeds that differ go up: the sign test's p is 0.125, so the claim is not decided
    assert (verdict["seeds_up"], verdict["seeds_down"], verdict["verdict"]) == (4, 0, "undecided")


def test_below_twenty_paired_seeds_no_interval_is_shown() -> None:
    runs = {("baseline", s): [0.0, 1.0] for s in range(5)}
    runs |= {("better", s): [0.0, 1.1 + 0.01 * s] for s in range(5)}
    summary = summarize(make_metrics(runs))
    assert not np.isnan(summary.set_index("condition").loc["better", "policy_quality_diff_ci_low"])  # in the csv
    line = next(line for line in summary_markdown(summary).splitlines() if line.startswith("| better"))
    assert "+0.120 " in line and "[" not in line.split("|")[-3]


def test_reference_falls_back_to_first_condition() -> None:
    metrics = make_metrics({("first", 0): [0.0, 1.0], ("first", 1): [0.0, 2.0], ("second", 0): [0.0, 3.0]})
    summary = summarize(metrics).set_index("condition")
    assert summary.loc["first", "role"] == "reference"
    assert summary.loc["second", "policy_quality_diff_mean"] == pytest.approx(2.0)
    # One pair: a mean but no interval.
    assert math.isnan(summary.loc["second", "policy_quality_diff_ci_low"])


def test_single_seed_has_nan_spread() -> None:
    summary = summarize(make_metrics({("baseline", 0): [0.0, 1.0]})).iloc[0]
    assert summary["policy_quality_mean"] == 1.0
    assert math.isnan(summary["policy_quality_std"])
    assert math.isnan(summary["policy_quality_ci_low"]) and math.isnan(summary["policy_quality_ci_high"])


def test_diverged_runs_are_counted_and_excluded() -> None:
    metrics = make_metrics(
        {
            ("baseline", 0): [0.0, 1.0, 1.0],
            ("baseline", 1): [0.0, 2.0, 3.0],
            ("baseline", 2): [0.0, 5.0, math.nan],
            ("other", 0): [0.0, 1.0, math.inf],  # non-finite but not flagged: treated as missing
            ("other", 1): [0.0, 1.0, 2.0],
        },
        overrides={("baseline", 2): {"diverged": [False, True, True]}},
    )
    summary = summarize(metrics).set_index("condition")
    assert summary.loc["baseline", "diverged_runs"] == 1
    assert summary.loc["baseline", "n_seeds"] == 3
    assert summary.loc["baseline", "n_final"] == 2
    assert summary.loc["baseline", "policy_quality_mean"] == pytest.approx(2.0)  # the 5.0 at a diverged row is ignored
    assert summary.loc["other", "diverged_runs"] == 0
    assert summary.loc["other", "policy_quality_mean"] == pytest.approx(2.0)
    runs = run_summary(metrics).set_index(["condition", "seed"])
    assert runs.loc[("baseline", 2), "diverged"]
    assert runs.loc[("baseline", 2), "peak_quality"] == 0.0
    assert math.isnan(runs.loc[("baseline", 2), "final_quality"])
    # Paired difference: only seed 1 has finite finals on both sides.
    assert summary.loc["other", "n_paired"] == 1
    assert summary.loc["other", "policy_quality_diff_mean"] == pytest.approx(-1.0)
    text = summary_markdown(summarize(metrics))
    assert "Diverged runs" in text.splitlines()[0]
    assert "1/3" in next(line for line in text.splitlines() if line.startswith("| baseline"))


def test_missing_columns_raise() -> None:
    with pytest.raises(ValueError, match="lacks columns"):
        summarize(pd.DataFrame({"condition": ["a"], "seed": [0], "iteration": [0]}))


def test_summary_markdown_layout(grid: pd.DataFrame) -> None:
    text = summary_markdown(summarize(grid))
    lines = text.strip().splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == [
        "Condition",
        "Role",
        "real quality (q*) [CI]",
        "judge alignment (Spearman ρ)",
        "policy entropy (nats)",
        "judge-perceived quality (judge score)",
        "Δ quality vs reference [CI] (descriptive)",
        "Fell from peak (q*)",
    ]
    assert len(lines) == 2 + 5
    rows = {line.split("|")[1].strip(): line for line in lines[2:]}
    assert "| boundary" in rows["bound"] and "| boundary" in rows["bound2"]
    assert "—" in rows["baseline"]
    # 3 seeds: the mean and spread, and no interval (one is shown from 20 seeds on)
    cell = f"{np.mean([0.4, 0.7, 0.3]):.3f} ± {np.std([0.4, 0.7, 0.3], ddof=1):.3f}"
    assert f"{cell} |" in rows["low"] and f"{cell} [" not in rows["low"]


def test_write_report_writes_everything_and_leaves_metrics_alone(grid: pd.DataFrame, tmp_path: Path) -> None:
    metrics_path = tmp_path / "metrics.csv.gz"
    grid.to_csv(metrics_path, index=False)
    before = metrics_path.read_bytes()
    write_report(pd.read_csv(metrics_path), tmp_path, title="Test report")
    assert metrics_path.read_bytes() == before
    for name in ("summary.csv", "summary.md", "report.md"):
        assert (tmp_path / name).stat().st_size > 0
    keys = ("headline", "boundaries_and_best", "all_conditions", "end_state", "inside_vs_outside")
    for key in keys:
        assert (tmp_path / "figures" / f"{key}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = shown(tmp_path / "report.md")
    assert report.startswith("# Test report")
    for key in keys:
        assert f"(figures/{key}.png)" in report
    # Readings are derived from the data: reference mean quality at iteration 0, 1 and the end.
    reference = grid[grid.condition == "baseline"].groupby("iteration")["policy_quality"].mean()
    assert f"real quality (q*) {reference[0]:.3f} → {reference[2]:.3f}" in report
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert summary["condition"].tolist() == ["baseline", "low", "bound", "high", "bound2"]
    # Atomic writes leave no temp files behind.
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_make_figures_survives_non_finite_values(tmp_path: Path) -> None:
    metrics = make_metrics(
        {
            ("baseline", 0): [0.0, 1.0, 1.0],
            ("baseline", 1): [0.0, math.nan, math.nan],
            ("broken", 0): [0.0, math.inf, math.nan],
            ("flat", 0): [1.0, 1.0, 1.0],
        },
        boundary={"flat"},
        overrides={
            ("baseline", 1): {"diverged": [False, True, True]},
            ("broken", 0): {"diverged": [False, True, True]},
        },
    )
    paths = make_figures(metrics, tmp_path / "figs")
    assert set(paths) == {"headline", "boundaries_and_best", "all_conditions", "end_state", "inside_vs_outside"}
    assert all(p.exists() and p.parent == tmp_path / "figs" for p in paths.values())
    write_report(metrics, tmp_path / "report")
    assert (tmp_path / "report" / "report.md").exists()


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> dict[str, Figure]:
    """Every figure make_figures draws, by key, kept instead of (as well as) written."""
    figures: dict[str, Figure] = {}

    def keep(fig: Figure, path: Path) -> Path:
        figures[path.stem] = fig
        return path

    for module in (ends, trends, gap):
        monkeypatch.setattr(module, "save", keep)
    return figures


def judge_scaled() -> set[str]:
    return {x.label.capitalize() for x in registry.headline_metrics() if x.judge_scale}


def dotted(ax: Axes) -> int:
    return sum(line.get_linestyle() == ":" for line in ax.get_lines())


def test_no_shared_reference_line_on_a_judge_scale(
    drawn: dict[str, Figure], grid: pd.DataFrame, tmp_path: Path
) -> None:
    """Judges score on their own scales: no figure draws one condition's judge score as another's reference."""
    assert judge_scaled() == {"Judge-perceived quality"}
    make_figures(grid, tmp_path)
    panels = [ax for ax in drawn["all_conditions"].axes if ax.get_visible()]
    for ax in panels:
        assert dotted(ax) == (0 if ax.get_title() in judge_scaled() else 1), ax.get_title()
    # boundaries_and_best: one row per metric, the reference column first; other columns repeat the reference's mean.
    facets = np.array(drawn["boundaries_and_best"].axes).reshape(len(registry.headline_metrics()), -1)
    for x, row in zip(registry.headline_metrics(), facets, strict=True):
        assert [len(ax.get_lines()) for ax in row[1:]] == [1 if x.judge_scale else 2] * (len(row) - 1), x.name
    # inside_vs_outside: the zero line and the condition's own gap, nothing of another condition.
    assert {len(ax.get_lines()) for ax in drawn["inside_vs_outside"].axes if ax.get_visible()} == {2}


def test_run_dots_match_their_legend_swatch(drawn: dict[str, Figure], grid: pd.DataFrame, tmp_path: Path) -> None:
    make_figures(grid, tmp_path)
    fig = drawn["all_conditions"]
    swatch = next(h for h in fig.legends[0].legend_handles if h.get_label() == "one run")
    dots = fig.axes[0].collections[0]
    assert mcolors.to_rgb(dots.get_facecolor()[0]) == mcolors.to_rgb(swatch.get_markerfacecolor())
    assert dots.get_alpha() == swatch.get_alpha()
    assert dots.get_sizes()[0] == pytest.approx(swatch.get_markersize() ** 2)
    assert swatch.get_marker() == "o"


def test_an_isolated_run_does_not_set_the_axis(drawn: dict[str, Figure], grid: pd.DataFrame, tmp_path: Path) -> None:
    bulk = np.r_[np.linspace(0.0, 0.4, 30), 3.0]
    assert bulk_range(bulk) == (0.0, 0.4)
    assert bulk_range(np.array([1.0, 1.4, 1.7, 1.8, 2.6])) == (1.0, 2.6)  # spread out: nothing is peeled
    assert bulk_range(np.array([-3.0, 1.0, 2.0, 3.0, 8.0])) == (-3.0, 8.0)  # each gap is within the rest's span
    last = grid["iteration"] == grid["iteration"].max()
    one = last & (grid["condition"] == "bound") & (grid["seed"] == 0)
    outlier = grid.assign(policy_entropy=grid["policy_entropy"].where(~one, 5.0))
    make_figures(outlier, tmp_path)
    entropy = next(ax for ax in drawn["all_conditions"].axes if ax.get_title() == "Policy entropy")
    # The axis keeps the bulk and the condition's mean (pulled up by the run), not the run itself.
    assert entropy.get_xlim()[1] < 5.0
    assert "5.00" in [t.get_text() for t in entropy.texts]  # marked at the edge with its value


def test_every_end_state_cluster_is_counted(drawn: dict[str, Figure], tmp_path: Path) -> None:
    qualities = [1.7, 1.7, 1.7, 2.0, 2.33, 2.33, 2.58, 2.62, 2.62, 1.0]
    runs = {(f"c{i % 3}", i // 3): [0.0, q] for i, q in enumerate(qualities)}
    metrics = make_metrics(runs).assign(mode_sequence=lambda m: m["policy_quality"].round(2).astype(str))
    make_figures(metrics, tmp_path)
    counts = [t.get_text() for t in drawn["end_state"].axes[0].texts]
    assert sorted(counts) == sorted(["3 runs", "1 run", "2 runs", "1 run", "2 runs", "1 run"])
