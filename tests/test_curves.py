"""Curves people read: bootstrap bands over seeds against a direct numpy bootstrap, performance profiles against a
hand-computed case, and the Gao-style frontier and profile figures drawing exactly those numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from harness.inference.overoptimization import FORMS, fit_gao, gains_since_start
from harness.rendering.bands import bootstrap_bands, performance_profile
from harness.rendering.figure_parts import fitted, mean_band, new_figure, save
from harness.report.figures.overoptimization import (
    draw_gao_frontier,
    draw_kl_paths,
    draw_performance_profile,
    draw_scaling,
)


def _curves() -> pd.DataFrame:
    """3 conditions × 4 iterations: 10 seeds, 7 seeds (one with a NaN), 1 seed; one group where every seed agrees."""
    rng = np.random.default_rng(0)
    frames = []
    for condition, seeds in (("ten", 10), ("seven", 7), ("one", 1)):
        for iteration in range(4):
            values = rng.gamma(2.0, 1.0 + iteration, size=seeds)
            if condition == "seven" and iteration == 2:
                values[3] = np.nan
            if condition == "ten" and iteration == 0:
                values[:] = 0.25
            frames.append(
                pd.DataFrame({"condition": condition, "iteration": iteration, "seed": range(seeds), "q": values})
            )
    return pd.concat(frames, ignore_index=True)


def test_bootstrap_bands_match_a_direct_numpy_bootstrap() -> None:
    table = _curves()
    resamples = 20_000
    bands = bootstrap_bands(table, "q", resamples=resamples).set_index(["condition", "iteration"])
    rng = np.random.default_rng(123)
    for (condition, iteration), group in table.groupby(["condition", "iteration"]):
        values = group["q"].dropna().to_numpy()
        row = bands.loc[(condition, iteration)]
        assert row["n"] == len(values) and row["mean"] == pytest.approx(values.mean(), rel=1e-12)
        if len(values) == 1 or np.ptp(values) == 0:
            assert row["low"] == row["high"] == row["mean"]
            continue
        means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
        low, high = np.percentile(means, [2.5, 97.5])
        # Two independent 20,000-resample percentiles of the same bootstrap distribution: their Monte-Carlo
        # difference is a few hundredths of a standard error; 0.15 standard errors is far outside it.
        standard_error = values.std(ddof=1) / np.sqrt(len(values))
        assert abs(row["low"] - low) < 0.15 * standard_error and abs(row["high"] - high) < 0.15 * standard_error
        assert row["low"] < row["mean"] < row["high"]
    assert bootstrap_bands(table, "q").equals(bootstrap_bands(table, "q"))  # same table, same bands


def test_performance_profile_hand_computed() -> None:
    """A: end values 0.1, 0.5, 0.5, 0.9; B: 0.2, 0.2. The fraction above τ (strictly) and its band: where every
    resample agrees the band is the point; at τ = 0.3, A's count above is Binomial(4, 3/4) under resampling, whose
    2.5% and 97.5% quantiles are 1 and 4 of 4 (P(≤ 0) = 0.004 < 0.025 < P(≤ 1) = 0.051; P(≤ 3) = 0.68), and at
    τ = 0.5 Binomial(4, 1/4): 0 and 3 of 4 (P(≤ 2) = 0.949 < 0.975 < P(≤ 3) = 0.996)."""
    final = pd.DataFrame({"condition": ["A"] * 4 + ["B"] * 2, "q": [0.1, 0.5, 0.5, 0.9, 0.2, 0.2]})
    taus = np.array([0.0, 0.3, 0.5, 0.7, 1.0])
    profile = performance_profile(final, "q", taus=taus).set_index(["condition", "tau"])
    expected = {
        "A": [(1.0, 1.0, 1.0), (0.75, 0.25, 1.0), (0.25, 0.0, 0.75), (0.25, 0.0, 0.75), (0.0, 0.0, 0.0)],
        "B": [(1.0, 1.0, 1.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0)],
    }
    for condition, rows in expected.items():
        for tau, (fraction, low, high) in zip(taus, rows, strict=True):
            row = profile.loc[(condition, tau)]
            assert (row["fraction"], row["low"], row["high"]) == pytest.approx((fraction, low, high)), (condition, tau)
    assert set(profile["runs"]) == {4, 2}
    default = performance_profile(final, "q")
    assert len(default) == 2 * 101 and default["tau"].min() == 0.1 and default["tau"].max() == 0.9


def test_mean_band_draws_the_bootstrap_band() -> None:
    table = _curves()
    own = table[table["condition"] == "seven"]
    ax = new_figure(4, 3).subplots()
    mean_band(ax, own, "q", "black")
    bands = bootstrap_bands(own, "q", by=("iteration",)).sort_values("iteration")
    (line,) = ax.get_lines()
    np.testing.assert_allclose(line.get_ydata(), bands["mean"])
    outline = ax.collections[0].get_paths()[0].vertices
    assert outline[:, 1].min() == pytest.approx(bands["low"].min())
    assert outline[:, 1].max() == pytest.approx(bands["high"].max())


def _frontier() -> pd.DataFrame:
    """Two judge sizes × best-of-n and RL × 4 seeds: gold bends down (Gao's forms), proxy keeps rising."""
    rng = np.random.default_rng(1)
    n = np.geomspace(1, 1e4, 12)
    frames = []
    for size, bend in ((8, 0.4), (32, 0.2)):
        for seed in range(4):
            d = np.sqrt(np.log(n) - (n - 1) / n) * rng.uniform(0.85, 1.0)
            gold = FORMS["best_of_n"].curve(d, 1.0, bend) + 0.01 * rng.normal(size=d.size)
            frames.append(pd.DataFrame({"judge_size": size, "optimizer": "best_of_n", "seed": seed, "step": n, "d": d}))
            frames[-1] = frames[-1].assign(gold=0.5 + gold, proxy=0.5 + 1.2 * d)
            d_rl = np.linspace(0.0, 4.0, 10) * rng.uniform(0.9, 1.0)
            gold_rl = FORMS["rl"].curve(d_rl, 1.0, 2 * bend) + 0.01 * rng.normal(size=d_rl.size)
            frames.append(
                pd.DataFrame(
                    {"judge_size": size, "optimizer": "rl", "seed": seed, "step": range(10), "d": d_rl}
                ).assign(gold=0.3 + gold_rl, proxy=0.3 + 1.5 * d_rl)
            )
    table = pd.concat(frames, ignore_index=True)
    return gains_since_start(table, ["judge_size", "optimizer", "seed"], "step", ["gold", "proxy"])


def test_gao_frontier_figure_draws_the_means_and_the_fits(tmp_path) -> None:
    frontier = _frontier()
    fits = fit_gao(frontier, by=["judge_size"], resamples=0)
    assert set(zip(fits["judge_size"], fits["form"], strict=True)) == {
        (s, f) for s in (8, 32) for f in ("best_of_n", "rl")
    }
    fig = draw_gao_frontier(frontier, fits)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["judge_size = 8", "judge_size = 32"]
    for ax, size in zip(axes, (8, 32), strict=True):
        lines = ax.get_lines()
        assert len(lines) == 2 * 3 + 1  # per optimizer: gold, proxy, fit; the zero line
        for k, optimizer in enumerate(("best_of_n", "rl")):
            gold, _, fitted = lines[3 * k : 3 * k + 3]
            mean = frontier[(frontier["judge_size"] == size) & (frontier["optimizer"] == optimizer)]
            np.testing.assert_allclose(gold.get_ydata(), mean.groupby("step")["gold_gain"].mean())
            row = fits[(fits["judge_size"] == size) & (fits["optimizer"] == optimizer)].iloc[0]
            x = np.asarray(fitted.get_xdata())
            np.testing.assert_allclose(fitted.get_ydata(), FORMS[optimizer].curve(x, row["alpha"], row["beta"]))
            assert x.max() == pytest.approx(row["d_max"])
    assert save(draw_gao_frontier(frontier), tmp_path / "gao.png").read_bytes()[:4] == b"\x89PNG"
    # The perfect proxy's best-of-n: one more line per panel, its mean gold, drawn before the judges' curves.
    perfect = frontier[frontier["optimizer"] == "best_of_n"].assign(scorer="q_star", gold_gain=lambda t: 2 * t["d"])
    with_baseline = pd.concat([frontier.assign(scorer="judges"), perfect], ignore_index=True)
    for ax, size in zip(draw_gao_frontier(with_baseline, fits).axes, (8, 32), strict=False):
        baseline = ax.get_lines()[0]
        own = perfect[perfect["judge_size"] == size].groupby("step")["gold_gain"].mean()
        np.testing.assert_allclose(baseline.get_ydata(), own)
        assert len(ax.get_lines()) == 2 * 3 + 2
    with pytest.raises(ValueError, match="unknown optimizers"):
        fit_gao(frontier.assign(optimizer="ppo"))


def test_performance_profile_figure_draws_the_profile() -> None:
    final = _curves().query("iteration == 3").dropna()
    profile = performance_profile(final, "q")
    fig = draw_performance_profile(profile)
    assert isinstance(fig, Figure)
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["ten (10)", "seven (7)", "one (1)"]
    for line, (_, own) in zip(lines, profile.groupby("condition", sort=False), strict=True):
        np.testing.assert_allclose(line.get_ydata(), own["fraction"])


def _inside_canvas(fig) -> None:
    fitted(fig).canvas.draw()
    drawn = fig.get_tightbbox(fig.canvas.get_renderer())
    width, height = fig.get_size_inches()
    assert drawn.x0 >= -0.01 and drawn.y0 >= -0.01 and drawn.x1 <= width + 0.01 and drawn.y1 <= height + 0.01


def test_the_studys_scaling_and_path_figures_draw_their_data_inside_the_canvas() -> None:
    """α and β with their intervals against judge size and data, the perfect proxy's line; gold against KL per
    curve. Every artist, titles and legends included, inside the figure."""
    rows = []
    for axis, xs in (("judge parameters", (361, 1297, 4897, 19009)), ("judge pretraining examples", (64, 256, 1024))):
        for x in xs:
            for optimizer in ("best_of_n", "rl"):
                rows.append({"axis": axis, "x": x, "optimizer": optimizer, "alpha": 1.0, "beta": 0.1 * np.log10(x)})
    series = pd.DataFrame(rows)
    for name in ("alpha", "beta"):
        series[f"{name}_low"], series[f"{name}_high"] = series[name] - 0.1, series[name] + 0.2
    baselines = pd.DataFrame(
        {
            "optimizer": ["best_of_n", "rl", "best_of_n", "rl"],
            "baseline": ["q_star", "q_star", "noisy_q_star", "noisy_q_star"],
            "alpha": [2.8, 0.4, 2.1, 0.3],
            "beta": [0.19, -1.5, 0.27, -1.1],
        }
    )
    fig = draw_scaling(series, baselines)
    first = fig.axes[1]  # best-of-n's β against judge parameters
    points = first.containers[0].lines[0]
    np.testing.assert_allclose(np.asarray(points.get_ydata(), float), 0.1 * np.log10([361, 1297, 4897, 19009]))
    levels = [np.asarray(line.get_ydata(), float) for line in first.get_lines()]
    assert any(np.allclose(level, 0.19) for level in levels) and any(np.allclose(level, 0.27) for level in levels)
    rl_beta = fig.axes[3]  # RL's β: both of its baselines, and no best-of-n one
    rl_levels = [np.asarray(line.get_ydata(), float) for line in rl_beta.get_lines()]
    assert any(np.allclose(level, -1.5) for level in rl_levels) and any(np.allclose(level, -1.1) for level in rl_levels)
    assert not any(np.allclose(level, 0.19) for level in rl_levels)
    assert {text.get_text() for text in fig.legends[0].get_texts()} >= {
        "the perfect proxy (q*)",
        "q* + random errors at the judges' alignment",
    }
    _inside_canvas(fig)
    paths = _frontier().assign(kl=lambda t: t["d"] ** 2)
    paths = paths.assign(label=paths["optimizer"] + " " + paths["judge_size"].astype(str))
    fig = draw_kl_paths(paths, "Gold against KL along the whole path, a study of a rather long name " * 2)
    assert len(fig.axes[0].get_lines()) == 4 + 1  # one per curve and the zero line
    _inside_canvas(fig)
