"""The belief gap per condition (inside_vs_outside): how much more (or less) improvement the judges credit the policy
with than it really made, since iteration 0."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from harness.rendering.bands import bootstrap_bands
from harness.rendering.figure_parts import ROLE_COLOURS, dashes, integer_x, new_figure, panels, role_suffix, save, wrap
from harness.rendering.metrics_table import run_belief_gaps

GAP_AXIS_LABEL = "belief gap (q*)"


def draw_inside_vs_outside(prepared: pd.DataFrame, summary: pd.DataFrame) -> Figure:
    """One small panel per condition with its own belief gap, mean and 95% bootstrap band over seeds, on a shared axis.

    No other condition's curve is repeated in a panel: each condition's judges score on their own scale.
    """
    order = summary["condition"].tolist()
    role = summary.set_index("condition")["role"]
    gaps = bootstrap_bands(run_belief_gaps(prepared), "gap", by=("condition", "iteration")).sort_values("iteration")
    ncols = min(6, len(order))
    fig = new_figure(2.3 * ncols + 0.6, 2.0 * math.ceil(len(order) / ncols) + 1.1)
    axes = panels(fig, len(order), ncols, sharex=True, sharey=True)
    for i, (ax, condition) in enumerate(zip(axes, order, strict=True)):
        data = gaps[gaps["condition"] == condition]
        colour = ROLE_COLOURS[role[condition]]
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.plot(data["iteration"], data["mean"], color=colour, lw=1.8, ls=dashes(role[condition]))
        ax.fill_between(data["iteration"], data["low"], data["high"], color=colour, alpha=0.15, lw=0)
        ax.set_title(wrap(condition + role_suffix(role[condition]), 30), fontsize=7.5)
        ax.tick_params(labelsize=7)
        if i % ncols == 0:
            ax.set_ylabel(GAP_AXIS_LABEL, fontsize=8)
        if i + ncols >= len(order):
            ax.set_xlabel("outer iteration", fontsize=8)
        integer_x(ax)
    fig.suptitle(
        "Belief gap: judge-perceived quality gained since iteration 0 minus real quality gained (both start in q* "
        "units), mean and 95% bootstrap band over seeds\n> 0: the judges credit the policy with more improvement "
        "than it made; < 0: with less",
        fontsize=10,
    )
    return fig


def fig_inside_vs_outside(prepared: pd.DataFrame, path: Path, summary: pd.DataFrame) -> Path:
    """`draw_inside_vs_outside` saved as a PNG at `path`."""
    return save(draw_inside_vs_outside(prepared, summary), path)
