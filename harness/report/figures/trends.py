"""Figures over training: the reference on every headline metric (headline), and the reference, top-ranked
mechanisms and boundary conditions side by side, one facet each (boundaries_and_best)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from harness.rendering.figure_parts import (
    ROLE_COLOURS,
    dashes,
    empty,
    integer_x,
    mean_band,
    new_figure,
    no_shared_line_note,
    panels,
    role_suffix,
    save,
    wrap,
)
from harness.rendering.metrics_table import (
    ITERATION_LABEL,
    QUALITY,
    GridFacts,
    headline_metrics,
    live,
    plural,
    roles,
    series,
)

# Conditions drawn beside the reference and the boundaries in boundaries_and_best.
TOP_MECHANISMS = 2


def draw_headline(prepared: pd.DataFrame, facts: GridFacts, ref: str) -> Figure:
    """A panel per headline metric: the reference's seeds (grey) and their mean with its 95% bootstrap band over
    seeds, over iterations."""
    metrics = headline_metrics(prepared)
    rows = live(prepared[prepared["condition"] == ref])
    fig = new_figure(11, 3.6 * math.ceil(len(metrics) / 2) + 0.6)
    for ax, x in zip(panels(fig, len(metrics), 2, sharex=True), metrics, strict=True):
        data = rows.dropna(subset=[x.name])
        if data.empty:
            empty(ax, x.label)
        else:
            for _, run in data.groupby("seed"):
                ax.plot(run["iteration"], run[x.name], color="0.55", lw=0.8, alpha=0.6)
            mean_band(ax, data, x.name, ROLE_COLOURS["reference"], lw=2.2)
        ax.set_title(x.label.capitalize())
        ax.set_xlabel(ITERATION_LABEL)
        ax.set_ylabel(x.axis_label)
        integer_x(ax)
    every = prepared[prepared["condition"] == ref]
    n_diverged = every.loc[every["diverged"], "seed"].nunique()
    # Say so when seeds drop out: from a divergence on, the band is over the surviving seeds only.
    dropped = f", {n_diverged} diverged and dropped from then on" if n_diverged else ""
    fig.suptitle(
        f"Reference '{ref}' ({facts.grid_text}): mean, 95% bootstrap band over seeds{dropped}; grey: individual seeds",
        fontsize=12,
    )
    return fig


def fig_headline(prepared: pd.DataFrame, path: Path, facts: GridFacts, ref: str) -> Path:
    """`draw_headline` saved as a PNG at `path`."""
    return save(draw_headline(prepared, facts, ref), path)


def shown_in_boundaries_figure(summary: pd.DataFrame) -> tuple[list[str], list[str], list[str]]:
    """(reference, top mechanisms by final mean quality, boundary conditions) drawn in boundaries_and_best.

    The top mechanisms are ranked by final mean quality (missing last, ties in grid order); boundaries keep the
    summary's (grid) order.
    """
    pick = {r: summary[summary["role"] == r] for r in ("reference", "mechanism", "boundary")}
    ranked = pick["mechanism"].sort_values(f"{QUALITY.name}_mean", ascending=False, na_position="last", kind="stable")
    top = ranked["condition"].tolist()[:TOP_MECHANISMS]
    return pick["reference"]["condition"].tolist(), top, pick["boundary"]["condition"].tolist()


def boundaries_title(summary: pd.DataFrame) -> str:
    """What boundaries_and_best shows, in words that fit this grid (no boundaries, top mechanisms below the ref)."""
    ref, top, bounds = shown_in_boundaries_figure(summary)
    parts = [f"reference '{ref[0]}'"] if ref else []
    if top:
        # ranked by final mean quality: a ranking of means, which says nothing of which differences count
        parts.append(f"the {plural(len(top), 'top-ranked mechanism')} by final mean quality")
    if bounds:
        parts.append(f"{plural(len(bounds), 'boundary condition')} (dashed)")
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]


def draw_boundaries_and_best(prepared: pd.DataFrame, summary: pd.DataFrame, ref: str) -> Figure:
    """A facet per metric (row) and condition (column), so no two bands overlap; the reference's mean is repeated
    as a thin grey line in the other columns, except for metrics on a judge's own scale (no shared reference)."""
    metrics = headline_metrics(prepared)
    role = roles(prepared)
    first, top, bounds = shown_in_boundaries_figure(summary)
    shown = first + top + bounds
    ok = live(prepared)
    ncols = len(shown)
    fig = new_figure(2.45 * ncols + 0.9, 2.05 * len(metrics) + 1.3)
    axes = fig.subplots(len(metrics), ncols, sharex=True, sharey="row", squeeze=False)
    for i, x in enumerate(metrics):
        ref_mean = series(prepared, ref, x.name)
        for j, condition in enumerate(shown):
            ax = axes[i, j]
            colour = ROLE_COLOURS[role[condition]]
            if condition != ref and not x.judge_scale and len(ref_mean):
                ax.plot(ref_mean.index, ref_mean.to_numpy(), color="0.6", lw=1.1, zorder=1)
            data = ok[ok["condition"] == condition].dropna(subset=[x.name])
            if data.empty:
                empty(ax, x.label)
            else:
                mean_band(ax, data, x.name, colour, dashes(role[condition]), lw=1.8, alpha=0.2)
            if i == 0:
                ax.set_title(wrap(condition + role_suffix(role[condition]), 26), fontsize=8.5, color=colour)
            if j == 0:
                ax.set_ylabel(x.axis_label, fontsize=8.5)
            if i == len(metrics) - 1:
                ax.set_xlabel("outer iteration", fontsize=8.5)
            ax.tick_params(labelsize=7.5)
            integer_x(ax)
    fig.suptitle(
        f"{boundaries_title(summary).capitalize()}: mean and 95% bootstrap band over seeds, one column per condition;\n"
        f"thin grey line: the reference's mean{no_shared_line_note(metrics)}",
        fontsize=10.5,
    )
    return fig


def fig_boundaries_and_best(prepared: pd.DataFrame, path: Path, summary: pd.DataFrame, ref: str) -> Path:
    """`draw_boundaries_and_best` saved as a PNG at `path`."""
    return save(draw_boundaries_and_best(prepared, summary, ref), path)
