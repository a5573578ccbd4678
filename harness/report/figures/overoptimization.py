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
from harness.report.figures.common import empty, new_figure, panels, save, wrap

OPTIMIZER_COLOURS = {"best_of_n": "#1f77b4", "rl": "#d62728"}
OPTIMIZER_NAMES = {"best_of_n": "best-of-n", "rl": "RL"}


def draw_gao_frontier(
    frontier: pd.DataFrame,
    fits: pd.DataFrame | None = None,
    panel: str = "judge_size",
    step: str = "step",
    gold: str = "gold_gain",
    proxy: str = "proxy_gain",
) -> Figure:
    """Gold and proxy gain against d = √KL, one panel per value of `panel` (Gao et al. 2022, figure 1's layout).

    frontier: a tidy table, one row per curve point: `panel`, optimizer ("best_of_n" or "rl"), seed, `step` (n for
    best-of-n, the iteration for RL), d, and the gains since the curve's start (`gains_since_start`). Each
    optimizer's curve is its mean over seeds at every step (mean d against mean gain), gold solid, proxy dashed;
    fits: `fit_gao(frontier, by=[panel])` (computed here, without intervals, when None), drawn as thin dotted
    curves of each optimizer's own form up to the largest d it fitted.
    """
    fits = fit_gao(frontier, by=[panel], resamples=0) if fits is None else fits
    values = sorted(frontier[panel].unique())
    fig = new_figure(3.6 * min(len(values), 4) + 0.6, 3.1 * math.ceil(len(values) / 4) + 1.0)
    axes = panels(fig, max(len(values), 1), 4, sharex=True, sharey=True)
    if not values:
        empty(axes[0], "the frontier")
        return fig
    for ax, value in zip(axes, values, strict=True):
        own = frontier[frontier[panel] == value]
        for optimizer, curve in own.groupby("optimizer", sort=True):
            colour = OPTIMIZER_COLOURS[optimizer]
            mean = curve.groupby(step)[["d", gold, proxy]].mean()
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
    for optimizer in sorted(frontier["optimizer"].unique()):
        colour, name = OPTIMIZER_COLOURS[optimizer], OPTIMIZER_NAMES[optimizer]
        handles += [
            Line2D([], [], color=colour, marker="o", ms=3, lw=1.6, label=f"{name}: gold (q*)"),
            Line2D([], [], color=colour, ls="--", lw=1.2, label=f"{name}: proxy (judges)"),
            Line2D([], [], color=colour, ls=":", lw=1.4, label=f"{name}: fit {FORMS[optimizer].formula}"),
        ]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=8, frameon=False)
    fig.supylabel("gain since the start (n = 1, iteration 0)", fontsize=9)
    fig.suptitle(
        "Gold and proxy against distance moved: mean over seeds, each optimizer's Gao form fitted", fontsize=10
    )
    return fig


def fig_gao_frontier(
    frontier: pd.DataFrame, path: Path, fits: pd.DataFrame | None = None, panel: str = "judge_size"
) -> Path:
    """`draw_gao_frontier` saved as a PNG at `path`."""
    return save(draw_gao_frontier(frontier, fits, panel), path)


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
