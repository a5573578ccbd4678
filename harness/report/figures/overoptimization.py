"""Figures of overoptimization and of where runs end: Gao-style frontiers (gold and proxy gain against √KL, one
panel per judge size, the fitted forms drawn) and rliable-style performance profiles of end quality."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from harness.inference.overoptimization import FORMS, fit_gao
from harness.rendering.figure_parts import empty, new_figure, panels, save, wrap

OPTIMIZER_COLOURS = {"best_of_n": "#1f77b4", "rl": "#d62728"}
OPTIMIZER_NAMES = {"best_of_n": "best-of-n", "rl": "RL"}
# The perfect-proxy baselines: best-of-n from π₀ scored by q* itself and by q* plus noise of the judges' alignment.
BASELINE_STYLES = {"q_star": ("#1a1a1a", "-"), "noisy_q_star": ("0.55", "-.")}
BASELINE_NAMES = {"q_star": "best-of-n against q* (perfect proxy)", "noisy_q_star": "against q* + random noise"}
SCALING_BASELINE_NAMES = {
    "q_star": "the perfect proxy (q*)",
    "noisy_q_star": "q* + random errors at the judges' alignment",
}


def _mean_curve(points: pd.DataFrame, step: str, columns: list[str]) -> pd.DataFrame:
    return points.groupby(step)[columns].mean()


def draw_gao_frontier(
    frontier: pd.DataFrame,
    fits: pd.DataFrame | None = None,
    panel: str = "judge_size",
    step: str = "step",
    gold: str = "gold_gain",
    proxy: str = "proxy_gain",
) -> Figure:
    """Gold and proxy gain against d = √KL, one panel per value of `panel` (Gao et al. 2022, figure 1's layout),
    with the perfect-proxy baselines.

    frontier: a tidy table, one row per curve point: `panel`, optimizer ("best_of_n" or "rl"), scorer ("judges";
    best-of-n also "q_star" and "noisy_q_star"), seed, `step` (n for best-of-n, the iteration for RL), d, and the gains
    since the curve's start. Each curve is its mean over seeds at every step (mean d against mean gain): the judges'
    curves gold solid, proxy dashed; best-of-n against q* and against q* plus noise as thin baselines (gold only:
    against q* proxy and gold are one). fits: `fit_gao` rows by [panel] of the judges' curves (computed here, without
    intervals, when None), drawn as dotted curves of each optimizer's own form up to the largest d it fitted.
    """
    if "scorer" not in frontier:  # a frontier of the judges' curves alone
        frontier = frontier.assign(scorer="judges")
    judged = frontier[frontier["scorer"] == "judges"]
    fits = fit_gao(judged, by=[panel], resamples=0) if fits is None else fits
    values = list(dict.fromkeys(frontier[panel]))
    if pd.api.types.is_numeric_dtype(frontier[panel]):
        values = sorted(values)
    fig = new_figure(3.6 * min(len(values), 4) + 0.6, 3.1 * math.ceil(len(values) / 4) + 1.2)
    axes = panels(fig, max(len(values), 1), 4, sharex=True, sharey=True)
    if not values:
        empty(axes[0], "the frontier")
        return fig
    for ax, value in zip(axes, values, strict=True):
        own = frontier[frontier[panel] == value]
        for scorer, (colour, style) in BASELINE_STYLES.items():
            baseline = own[(own["optimizer"] == "best_of_n") & (own["scorer"] == scorer)]
            if len(baseline):
                mean = _mean_curve(baseline, step, ["d", gold])
                ax.plot(mean["d"], mean[gold], color=colour, ls=style, lw=1.0)
        for optimizer, curve in own[own["scorer"] == "judges"].groupby("optimizer", sort=True):
            colour = OPTIMIZER_COLOURS[optimizer]
            mean = _mean_curve(curve, step, ["d", gold, proxy])
            ax.plot(mean["d"], mean[gold], color=colour, marker="o", ms=3, lw=1.6)
            ax.plot(mean["d"], mean[proxy], color=colour, ls="--", lw=1.2, alpha=0.8)
            row = fits[(fits[panel] == value) & (fits["optimizer"] == optimizer)]
            if len(row) and np.isfinite(row["alpha"].iloc[0]):
                grid = np.linspace(0.0, float(row["d_max"].iloc[0]), 200)
                fitted = FORMS[optimizer].curve(grid, float(row["alpha"].iloc[0]), float(row["beta"].iloc[0]))
                ax.plot(grid, fitted, color=colour, ls=":", lw=1.4)
        ax.axhline(0.0, color="0.7", lw=0.6)
        ax.set_title(wrap(f"{panel} = {value}", 34), fontsize=9)
        # On each panel, not the figure's: a figure-level label would sit on the legend below the panels.
        ax.set_xlabel("d = √KL(π ‖ π₀)  (√nats)", fontsize=8)
        ax.tick_params(labelsize=8)
    handles = []
    for optimizer in sorted(judged["optimizer"].unique()):
        colour, name = OPTIMIZER_COLOURS[optimizer], OPTIMIZER_NAMES[optimizer]
        handles += [
            Line2D([], [], color=colour, marker="o", ms=3, lw=1.6, label=f"{name}: gold (q*)"),
            Line2D([], [], color=colour, ls="--", lw=1.2, label=f"{name}: proxy (judges)"),
            Line2D([], [], color=colour, ls=":", lw=1.4, label=f"{name}: fit {FORMS[optimizer].formula}"),
        ]
    for scorer, (colour, style) in BASELINE_STYLES.items():
        if (frontier["scorer"] == scorer).any():
            handles.append(Line2D([], [], color=colour, ls=style, lw=1.0, label=f"{BASELINE_NAMES[scorer]}: gold"))
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    fig.supylabel("gain since the start", fontsize=9)
    fig.suptitle(
        "Gold and proxy against distance moved: mean over seeds, each optimizer's Gao form fitted, and the perfect "
        "proxy's best-of-n",
        fontsize=10,
    )
    return fig


def fig_gao_frontier(
    frontier: pd.DataFrame, path: Path, fits: pd.DataFrame | None = None, panel: str = "judge_size"
) -> Path:
    """`draw_gao_frontier` saved as a PNG at `path`."""
    return save(draw_gao_frontier(frontier, fits, panel), path)


SCALING_PANELS = (("best_of_n", "alpha"), ("best_of_n", "beta"), ("rl", "alpha"), ("rl", "beta"))


def draw_scaling(series: pd.DataFrame, baselines: pd.DataFrame) -> Figure:
    """α and β of each optimizer's Gao form against the judge's size and its pretraining data, with their 95%
    seed-bootstrap intervals, and each baseline's as a horizontal line.

    series: rows of `fit_gao` (judges' curves) with columns axis (the row of panels: "judge parameters" or "judge
    pretraining examples"), x (its value), optimizer, alpha, beta and their _low/_high. baselines: optimizer,
    baseline ("q_star": the perfect proxy; "noisy_q_star": q* plus random errors at the judges' alignment), alpha,
    beta (best-of-n against it, RL rewarded by it), drawn on every row where present.
    """
    axes_names = list(dict.fromkeys(series["axis"]))
    fig = new_figure(14.0, 3.0 * max(len(axes_names), 1) + 0.8)
    grid = fig.subplots(max(len(axes_names), 1), len(SCALING_PANELS), squeeze=False)
    for row, axis in enumerate(axes_names):
        own = series[series["axis"] == axis].sort_values("x")
        for column, (optimizer, coefficient) in enumerate(SCALING_PANELS):
            ax = grid[row, column]
            points = own[own["optimizer"] == optimizer]
            colour = OPTIMIZER_COLOURS[optimizer]
            if len(points):
                # A percentile interval may sit beside its point; errorbar draws lengths, which must be ≥ 0.
                low = (points[coefficient] - points[f"{coefficient}_low"]).clip(lower=0.0)
                high = (points[f"{coefficient}_high"] - points[coefficient]).clip(lower=0.0)
                ax.errorbar(
                    points["x"], points[coefficient], yerr=[low, high], color=colour, marker="o", ms=4, capsize=3
                )
            for baseline, (colour, style) in BASELINE_STYLES.items():
                base = baselines[(baselines["optimizer"] == optimizer) & (baselines["baseline"] == baseline)]
                if len(base) and np.isfinite(base[coefficient].iloc[0]):
                    ax.axhline(float(base[coefficient].iloc[0]), color=colour, lw=1.0, ls=style)
            ax.axhline(0.0, color="0.7", lw=0.6)
            ax.set_xscale("log")
            ax.set_title(f"{OPTIMIZER_NAMES[optimizer]}: {coefficient}", fontsize=9)
            ax.set_xlabel(axis, fontsize=8)
            ax.tick_params(labelsize=8)
    handles = [
        Line2D([], [], color="0.3", marker="o", ms=4, label="against the judges: fit, 95% seed-bootstrap interval"),
        *(
            Line2D([], [], color=colour, lw=1.0, ls=style, label=SCALING_BASELINE_NAMES[baseline])
            for baseline, (colour, style) in BASELINE_STYLES.items()
            if (baselines["baseline"] == baseline).any()
        ),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8, frameon=False)
    fig.suptitle("Gao's coefficients against the judge's size and data (best-of-n: d(α − β·d); RL: d(α − β·ln d))")
    return fig


def fig_scaling(series: pd.DataFrame, baselines: pd.DataFrame, path: Path) -> Path:
    """`draw_scaling` saved as a PNG at `path`."""
    return save(draw_scaling(series, baselines), path)


def draw_kl_paths(points: pd.DataFrame, title: str) -> Figure:
    """Gold gain against KL(· ‖ π₀) along the whole path, mean over seeds at every step: best-of-n from π₀ against the
    judges, against q* and against q* plus random errors at the judges' alignment, and every condition's RL path
    (points: `frontier_points` rows with a kl column and a label column naming each curve)."""
    fig = new_figure(9.0, 5.2)
    ax = fig.subplots()
    labels = list(dict.fromkeys(points["label"]))
    colours = dict(zip(labels, sns.color_palette("tab10" if len(labels) <= 10 else "tab20", len(labels)), strict=True))
    for label in labels:
        own = points[points["label"] == label]
        mean = _mean_curve(own, "step", ["kl", "gold_gain"])
        style = "--" if own["optimizer"].iloc[0] == "best_of_n" else "-"
        ax.plot(mean["kl"], mean["gold_gain"], color=colours[label], ls=style, lw=1.5, marker=".", ms=3, label=label)
    ax.axhline(0.0, color="0.7", lw=0.6)
    ax.set_xlabel("KL(π ‖ π₀) (nats)")
    ax.set_ylabel("gold (q*) gained since the start")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.suptitle(title, fontsize=10)
    return fig


def fig_kl_paths(points: pd.DataFrame, title: str, path: Path) -> Path:
    """`draw_kl_paths` saved as a PNG at `path`."""
    return save(draw_kl_paths(points, title), path)


def draw_performance_profile(profile: pd.DataFrame, value_label: str = "end real quality (q*)") -> Figure:
    """The fraction of runs ending above τ, against τ, one line per condition with its 95% bootstrap band.

    profile: `bands.performance_profile`'s table (condition, tau, runs, fraction, low, high). A line further right
    is better at every threshold; crossing lines mean neither condition's runs dominate.
    """
    fig = new_figure(8.0, 5.0)
    ax = fig.subplots()
    order = list(dict.fromkeys(profile["condition"]))
    if not order:
        empty(ax, "the performance profile")
        return fig
    colours = dict(zip(order, sns.color_palette("tab20" if len(order) > 10 else "tab10", len(order)), strict=True))
    for condition in order:
        own = profile[profile["condition"] == condition]
        runs = int(own["runs"].iloc[0])
        ax.step(
            own["tau"], own["fraction"], where="post", color=colours[condition], lw=1.5, label=f"{condition} ({runs})"
        )
        ax.fill_between(own["tau"], own["low"], own["high"], step="post", color=colours[condition], alpha=0.15, lw=0)
    ax.set_xlabel(f"threshold τ on {value_label}")
    ax.set_ylabel("fraction of runs with value > τ")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False, title="condition (runs)")
    fig.suptitle(
        "Performance profile: fraction of runs ending above each threshold, 95% bootstrap band over runs", fontsize=10
    )
    return fig


def fig_performance_profile(profile: pd.DataFrame, path: Path, value_label: str = "end real quality (q*)") -> Path:
    """`draw_performance_profile` saved as a PNG at `path`."""
    return save(draw_performance_profile(profile, value_label), path)
