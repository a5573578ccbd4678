"""Figures of the final iteration: where every condition ends per headline metric (all_conditions), and where
individual runs end in quality and alignment (end_state)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from harness.engine.metrics import QUALITY_RESOLUTION
from harness.rendering.figure_parts import (
    ROLE_COLOURS,
    ROLE_MARKERS,
    ROLE_NAMES,
    RUN_ALPHA,
    RUN_COLOUR,
    RUN_SIZE,
    empty,
    new_figure,
    no_shared_line_note,
    panels,
    role_suffix,
    save,
)
from harness.rendering.metrics_table import (
    ALIGNMENT,
    QUALITY,
    GridFacts,
    final_runs,
    headline_metrics,
    num,
    plural,
    roles,
)

# Share of an axis' width between two count labels above end_state's axes before the second moves up a row.
LABEL_SPACING = 0.07


def bulk_range(values: np.ndarray) -> tuple[float, float]:
    """The range of the finite values after peeling off isolated extremes (NaN, NaN when there are none).

    While more than three values remain, the largest (smallest) is peeled when its gap to the next value exceeds the
    span of all the others: one run far from everything else then no longer squeezes the rest into a corner.
    """
    v = np.sort(values[np.isfinite(values)])
    if v.size == 0:
        return math.nan, math.nan
    lo, hi = 0, v.size - 1
    peeled = True
    while peeled and hi - lo + 1 > 3:
        peeled = False
        if v[hi] - v[hi - 1] > v[hi - 1] - v[lo]:
            hi, peeled = hi - 1, True
        elif v[lo + 1] - v[lo] > v[hi] - v[lo + 1]:
            lo, peeled = lo + 1, True
    return float(v[lo]), float(v[hi])


def _mark_beyond(ax: Axes, values: pd.Series, y: np.ndarray, lo: float, hi: float) -> int:
    """Runs outside [lo, hi] drawn at the axis edge as ◂/▸ with their value; returns how many."""
    edge = mpl.transforms.blended_transform_factory(ax.transAxes, ax.transData)
    count = 0
    for value, row in zip(values.to_numpy(float), y, strict=True):
        if not np.isfinite(value) or lo <= value <= hi:
            continue
        right = value > hi
        ax.plot(
            [1.0 if right else 0.0],
            [row],
            marker=">" if right else "<",
            color=RUN_COLOUR,
            ms=6,
            transform=edge,
            clip_on=False,
        )
        # The value goes just above the marker (rows run downwards), clear of the condition's own mean marker.
        ax.text(
            0.99 if right else 0.01,
            row - 0.3,
            num(value, 2),
            transform=edge,
            ha="right" if right else "left",
            va="bottom",
            fontsize=7,
            color="0.2",
        )
        count += 1
    return count


def draw_all_conditions(prepared: pd.DataFrame, summary: pd.DataFrame, facts: GridFacts) -> Figure:
    """One panel per headline metric; one row per condition: every run's final value, mean and ±1 sd."""
    metrics = headline_metrics(prepared)
    order = summary["condition"].tolist()
    role = summary.set_index("condition")["role"]
    final = final_runs(prepared)
    position = {c: i for i, c in enumerate(order)}
    rng = np.random.default_rng(0)  # fixed jitter: the same table draws the same picture
    y = final["condition"].map(position).to_numpy() + rng.uniform(-0.22, 0.22, len(final))
    fig = new_figure(3.3 * len(metrics) + 3.2, 0.32 * len(order) + 1.9)
    axes = panels(fig, len(metrics), len(metrics), sharey=True)
    beyond = 0
    for k, (ax, x) in enumerate(zip(axes, metrics, strict=True)):
        stats = final.groupby("condition")[x.name].agg(["mean", "std"]).reindex(order)
        lo, hi = bulk_range(final[x.name].to_numpy(float))
        if not np.isfinite(lo):
            empty(ax, x.label)
        else:
            # The axis keeps the bulk of the runs and every condition's mean; a run beyond it is marked at the edge.
            lo, hi = min(lo, stats["mean"].min()), max(hi, stats["mean"].max())
            pad = 0.06 * (hi - lo) or 0.05  # room for a run marked at the edge beside a mean at the limit
            lo, hi = lo - pad, hi + pad
            ax.set_xlim(lo, hi)
            inside = final[x.name].between(lo, hi).to_numpy()
            ax.scatter(final[x.name][inside], y[inside], s=RUN_SIZE, color=RUN_COLOUR, alpha=RUN_ALPHA, lw=0)
            beyond += _mark_beyond(ax, final[x.name], y, lo, hi)
        for c, (mean, sd) in stats.iterrows():
            if np.isfinite(mean):
                colour = ROLE_COLOURS[role[c]]
                xerr = 0 if np.isnan(sd) else sd
                ax.errorbar(mean, position[c], xerr=xerr, fmt=ROLE_MARKERS[role[c]], ms=6, color=colour, capsize=2)
        ref_mean = stats["mean"].get(next((c for c in order if role[c] == "reference"), None), math.nan)
        if np.isfinite(ref_mean) and not x.judge_scale:  # judges differ in scale: no shared reference line
            ax.axvline(ref_mean, color=ROLE_COLOURS["reference"], lw=0.8, ls=":", zorder=0)
        ax.set_title(x.label.capitalize())
        ax.set_xlabel(f"final {x.axis_label}")
        if k == 0:
            ax.set_yticks(range(len(order)), labels=[c + role_suffix(role[c]) for c in order], fontsize=8)
            ax.set_ylim(len(order) - 0.5, -0.5)
        else:
            ax.tick_params(labelleft=False)
        ax.grid(axis="y", visible=False)
    handles = [
        Line2D([], [], color=ROLE_COLOURS[r], marker=ROLE_MARKERS[r], ms=6, lw=0, label=f"{ROLE_NAMES[r]}: mean ± 1 sd")
        for r in ROLE_COLOURS
        if (summary["role"] == r).any()
    ]
    # The swatch is drawn as the dots are: same colour, alpha and area (scatter size is an area, in points²).
    dot = {"color": RUN_COLOUR, "alpha": RUN_ALPHA, "ms": math.sqrt(RUN_SIZE), "mew": 0, "lw": 0}
    handles.append(Line2D([], [], marker="o", label="one run", **dot))
    if beyond:
        handles.append(Line2D([], [], color=RUN_COLOUR, marker=">", ms=6, lw=0, label="a run beyond the axis (value)"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=9, frameon=False)
    fig.suptitle(
        f"Where every condition ends (iteration {facts.final_iteration}, {facts.seed_text}): runs as grey dots, "
        f"mean ± 1 sd as coloured marker and bar\ndotted line: reference mean{no_shared_line_note(metrics)}",
        fontsize=11,
    )
    return fig


def fig_all_conditions(prepared: pd.DataFrame, path: Path, summary: pd.DataFrame, facts: GridFacts) -> Path:
    """`draw_all_conditions` saved as a PNG at `path`."""
    return save(draw_all_conditions(prepared, summary, facts), path)


def _count_labels(ax: Axes, centres: list[tuple[float, int]], span: float) -> None:
    """Every cluster's run count above the axes at its x (with a leader down to the axes), moved up a row where it
    would overlap a neighbour."""
    above = mpl.transforms.blended_transform_factory(ax.transData, ax.transAxes)
    last_in_row: list[float] = []
    for x, count in sorted(centres):
        row = next((r for r, last in enumerate(last_in_row) if x - last >= LABEL_SPACING * span), len(last_in_row))
        if row == len(last_in_row):
            last_in_row.append(x)
        last_in_row[row] = x
        height = 1.01 + 0.045 * row
        # A leader from the axes' top edge, so a label moved up a row still points at its own cluster.
        ax.plot([x, x], [1.0, height], transform=above, color="0.55", lw=0.8, clip_on=False)
        ax.text(
            x,
            height,
            plural(count, "run"),
            transform=above,
            ha="center",
            va="bottom",
            fontsize=9,
            color="0.25",
        )


def draw_end_state(prepared: pd.DataFrame, facts: GridFacts) -> Figure:
    """Final quality vs alignment per run, coloured by role; runs at the same end output are jittered sideways and
    every such cluster (a single run included) is labelled with its run count."""
    final = final_runs(prepared).dropna(subset=[QUALITY.name, ALIGNMENT.name]).copy()
    role = roles(prepared)
    fig = new_figure(10, 6.4)
    ax = fig.subplots()
    if final.empty:
        empty(ax, "the final iteration")
        return fig
    # Runs that end at the same output (or, without mode columns, within the resolution in quality) coincide in x.
    if "mode_sequence" in final.columns:
        final["_group"] = final["mode_sequence"].astype(str)
    else:
        final["_group"] = (final[QUALITY.name] / QUALITY_RESOLUTION).round().astype(int).astype(str)
    sizes = final.groupby("_group")[QUALITY.name].transform("size")
    span = float(np.ptp(final[QUALITY.name])) or 1.0
    rng = np.random.default_rng(0)
    final["_x"] = final[QUALITY.name] + np.where(sizes > 1, rng.uniform(-0.012, 0.012, len(final)) * span, 0.0)
    final["_role"] = final["condition"].map(role)
    for r in ("mechanism", "boundary", "reference"):
        data = final[final["_role"] == r]
        if len(data):
            label = f"{ROLE_NAMES[r]} ({plural(len(data), 'run')})"
            ax.scatter(
                data["_x"],
                data[ALIGNMENT.name],
                s=28,
                color=ROLE_COLOURS[r],
                marker=ROLE_MARKERS[r],
                alpha=0.55,
                lw=0,
                label=label,
            )
    groups = final.groupby("_group")[QUALITY.name].agg(["mean", "size"])
    _count_labels(ax, [(float(x), int(n)) for x, n in groups.itertuples(index=False)], span)
    ax.set_xlabel(f"final {QUALITY.axis_label} (runs at the same end output jittered sideways; run counts above)")
    ax.set_ylabel(f"final {ALIGNMENT.axis_label}")
    ax.legend(loc="best", fontsize=9, frameon=True)
    fig.suptitle(
        f"Where runs end (iteration {facts.final_iteration}): one point per run, {plural(len(final), 'run')}\n",
        fontsize=12,
    )
    return fig


def fig_end_state(prepared: pd.DataFrame, path: Path, facts: GridFacts) -> Path:
    """`draw_end_state` saved as a PNG at `path`."""
    return save(draw_end_state(prepared, facts), path)
