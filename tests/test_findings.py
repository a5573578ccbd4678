"""The report's answers on synthetic tables with known truth: mode shares, escapes, the frontier fit, the sections."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.optimize
import scipy.stats

from harness.grid.knobs import Knobs
from harness.grid.spec import Condition, GridSpec, RunSettings
from harness.inference.claims import Claim
from harness.rendering.metrics_table import GridFacts
from harness.report import attractors, write_report
from harness.report.attractors import escape_table
from harness.report.frontier import fit_frontier, frontier_points, gao_curve
from harness.report.tables import mode_shares, modes_markdown

MODES = {"↑ ↑ ↑ ↑": 1.748, "↑ ↑ ↑ ↗": 1.999, "↓ ↑ ↑ ↑": 1.419}


def _table(seeds: int = 40) -> pd.DataFrame:
    """Two conditions over 3 iterations. 'base' ends at ↑↑↑↑ except 4 seeds at ↓↑↑↑; 'slow' escapes upward on
    every third seed. KL grows with the iteration; quality gain follows d(1.0 - 0.5 ln d) exactly."""
    rows = []
    for condition, escape in (("base", lambda s: "↓ ↑ ↑ ↑" if s < 4 else "↑ ↑ ↑ ↑"), ("slow", None)):
        for seed in range(seeds):
            end = escape(seed) if escape else ("↑ ↑ ↑ ↗" if seed % 3 == 0 else "↑ ↑ ↑ ↑")
            for iteration in range(3):
                d = 0.4 * iteration * (1 + 0.01 * seed)
                quality = 0.2 + float(gao_curve(np.array(d), 1.0, 0.5))
                rows.append(
                    {
                        "condition": condition,
                        "seed": seed,
                        "iteration": iteration,
                        "policy_quality": quality,
                        "judge_alignment": 0.7 - 0.1 * iteration,
                        "policy_entropy": 8.0 - 3 * iteration,
                        "judge_perceived_quality": quality + 0.3 * iteration,
                        "kl_from_initial": d**2,
                        "mode_sequence": end if iteration == 2 else "↑ ↑ ↑ ↑",
                        "mode_quality": MODES[end] if iteration == 2 else MODES["↑ ↑ ↑ ↑"],
                        "boundary": False,
                        "diverged": False,
                    }
                )
    return pd.DataFrame(rows)


def test_mode_shares_sum_to_one_per_condition() -> None:
    shares = mode_shares(_table())
    np.testing.assert_allclose(shares.groupby("condition")["share"].sum(), 1.0)
    assert shares.set_index(["condition", "mode_sequence"]).loc[("base", "↓ ↑ ↑ ↑"), "runs"] == 4


def test_escape_share_and_its_exact_interval() -> None:
    escapes = escape_table(mode_shares(_table()), "base").set_index("condition")
    slow = escapes.loc["slow"]
    assert (slow["escaped"], slow["escaped_higher"], slow["escaped_lower"]) == (14, 14, 0)  # seeds 0, 3, ..., 39
    interval = scipy.stats.binomtest(14, 40).proportion_ci(0.95, method="exact")
    assert (slow["escape_ci_low"], slow["escape_ci_high"]) == pytest.approx((interval.low, interval.high))
    base = escapes.loc["base"]
    assert (base["escaped"], base["escaped_lower"]) == (4, 4)


def test_frontier_fit_recovers_the_generating_curve() -> None:
    fits = fit_frontier(frontier_points(_table())).set_index("condition")
    for condition in ("base", "slow"):
        assert fits.loc[condition, "alpha"] == pytest.approx(1.0, abs=1e-6)
        assert fits.loc[condition, "beta"] == pytest.approx(0.5, abs=1e-6)
        assert fits.loc[condition, "r2"] == pytest.approx(1.0)
        assert fits.loc[condition, "d_peak"] == pytest.approx(np.exp(1.0 / 0.5 - 1.0))
        assert fits.loc[condition, "peak_gain"] == pytest.approx(0.5 * np.exp(1.0))
        assert fits.loc[condition, "d_max"] < fits.loc[condition, "d_peak"]  # the synthetic runs stop short of it


def test_a_barely_bending_frontier_peaks_infinitely_far() -> None:
    # A straight line with a bend of 1e-4: α/β is about 1e4, so e^(α/β - 1) is beyond any float.
    d = np.linspace(0.5, 2.0, 20)
    points = pd.DataFrame({"condition": "flat", "seed": 0, "d": d, "quality_gain": gao_curve(d, 1.0, 1e-4)})
    fit = fit_frontier(points).iloc[0]
    assert fit["beta"] > 0 and np.isinf(fit["d_peak"]) and np.isinf(fit["peak_gain"])


def test_frontier_intervals_resample_seeds_and_need_twenty() -> None:
    """Each seed's path follows its own α (sd 0.2 around 1): the interval over seeds has about the width the seeds'
    spread gives (1.96 sd(α_s) / √S each way), far wider than curve_fit's covariance, which treats a path's 12 points
    as independent; with 10 seeds no interval is shown."""
    rng = np.random.default_rng(4)
    d = np.linspace(0.2, 2.4, 12)
    alphas = rng.normal(1.0, 0.2, size=40)
    points = pd.DataFrame(
        [("c", seed, x, gao_curve(x, alpha, 0.5)) for seed, alpha in enumerate(alphas) for x in d],
        columns=["condition", "seed", "d", "quality_gain"],
    )
    fit = fit_frontier(points).iloc[0]
    own = [np.linalg.lstsq(np.stack([d, -d * np.log(d)], 1), gao_curve(d, a, 0.5), rcond=None)[0][0] for a in alphas]
    expected = 1.96 * np.std(own, ddof=1) / np.sqrt(len(alphas))
    half_width = (fit["alpha_high"] - fit["alpha_low"]) / 2
    assert fit["alpha_low"] < 1.0 < fit["alpha_high"] and 0.8 < half_width / expected < 1.2, (half_width, expected)
    _, covariance = scipy.optimize.curve_fit(gao_curve, points["d"], points["quality_gain"], p0=(1.0, 0.0))
    assert half_width > 1.5 * 1.96 * np.sqrt(covariance[0, 0])
    few = fit_frontier(points[points["seed"] < 10]).iloc[0]
    assert np.isfinite(few["alpha"]) and np.isnan(few["alpha_low"]) and np.isnan(few["beta_high"])


def test_report_sections_and_files(tmp_path: Path) -> None:
    claim = Claim(
        name="slow-above",
        statement="slow ends above base",
        metric="policy_quality",
        condition="slow",
        direction="above",
        than_condition="base",
        resolution=0.001,
    )
    grid = GridSpec(
        run=RunSettings(seeds=tuple(range(40)), iterations=2),
        conditions=(Condition(name="base", knobs=Knobs()), Condition(name="slow", knobs=Knobs(judge_update_every=10))),
        claims=(claim,),
    )
    write_report(_table(), tmp_path, grid=grid)
    text = (tmp_path / "report.md").read_text(encoding="utf-8")
    for heading in ("## Which claims hold", "## Attractors", "## The overoptimization frontier"):
        assert heading in text
    for name in ("claims.csv", "attractors.csv", "frontier.csv", "figures/attractors.png"):
        assert (tmp_path / name).is_file(), name
    claims = pd.read_csv(tmp_path / "claims.csv")
    # Both conditions follow the same quality curve: a zero effect is "no difference", not a finding.
    # No seed jumps either way, but 40 seeds cannot exclude a rare jump as large as q*'s range: undecided, and the
    # equivalence test, which could not reject at this seed count whatever the data, stays out of the family.
    assert (claims.loc[0, "seeds_up"], claims.loc[0, "seeds_down"], claims.loc[0, "verdict"]) == (0, 0, "undecided")
    assert np.isnan(claims.loc[0, "equivalence_p"]) and "cannot be shown at 40 seeds" in claims.loc[0, "why"]
    assert "| slow ends above base [slow @ 2] |" in text.replace("  ", "")


def test_attractor_figure_shows_the_end_mode_tables_modes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The figure draws the same modes as the end-mode table's columns and pools the rest as that table does."""
    glyphs = ["↑ ↑ ↑ ↑", "↑ ↑ ↑ ↗", "↓ ↑ ↑ ↑", "→ → → →", "← ← ← ←", "↓ ↓ ↓ ↓", "↙ ↙ ↙ ↙"]
    shares = pd.DataFrame(
        {
            "condition": "base",
            "mode_sequence": glyphs,
            "mode_quality": np.linspace(2.0, 0.5, len(glyphs)),
            "runs": [10, 7, 6, 5, 4, 3, 2],
        }
    )
    shares["n_runs"] = shares["runs"].sum()
    shares["share"] = shares["runs"] / shares["n_runs"]
    drawn = {}
    monkeypatch.setattr(attractors, "save", lambda fig, path: drawn.setdefault("fig", fig) and path)
    facts = GridFacts(name=None, n_conditions=1, seeds=(0,), final_iteration=2, n_runs=37, diverged_runs=0)
    attractors.attractor_figure(shares, tmp_path / "attractors.png", facts)
    legend = [t.get_text() for t in drawn["fig"].axes[0].get_legend().get_texts()]
    header = modes_markdown(shares, ["base"]).splitlines()[0]
    columns = [cell.strip() for cell in header.strip("|").split("|")][2:]
    assert legend[:-1] == columns[:-1]  # the same modes, in the same order
    assert legend[-1] == "3 other modes" and columns[-1] == "runs at 3 other modes"
