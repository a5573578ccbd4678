"""Figures: each answers one question, with the quantities and panels taken from the metric registry.

headline: how does the reference condition move on every headline metric? boundaries_and_best: how do the reference,
the top-ranked mechanisms and the boundary conditions compare over training? all_conditions: where does every
condition end, per headline metric? end_state: where do individual runs end (quality vs alignment)?
inside_vs_outside: when does the loop's belief run ahead of real quality, per condition?
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from harness.artifacts import atomic_write_bytes
from harness.report.data import (
    ALIGNMENT,
    ITERATION_LABEL,
    QUALITY,
    GridFacts,
    final_runs,
    grid_facts,
    headline_metrics,
    live,
    plural,
    prepare,
    reference,
    resolution,
    roles,
)
from harness.report.tables import difference_verdict, summarize

DPI = 120
# Fixed PNG metadata (no matplotlib version), so the same table renders to the same bytes.
PNG_METADATA: dict[str, str | None] = {"Software": None}
FIGURE_KEYS: tuple[str, ...] = ("headline", "boundaries_and_best", "all_conditions", "end_state", "inside_vs_outside")
ROLE_COLOURS = {"reference": "#1a1a1a", "mechanism": "#1f77b4", "boundary": "#d62728"}
ROLE_MARKERS = {"reference": "D", "mechanism": "o", "boundary": "X"}
ROLE_NAMES = {"reference": "reference", "mechanism": "mechanisms", "boundary": "boundary conditions"}
# Conditions drawn as lines beside the reference and the boundaries in boundaries_and_best.
TOP_MECHANISMS = 2


def _palette(summary: pd.DataFrame) -> dict[str, tuple[float, float, float]]:
    """One colour per condition for line figures: near-black reference, distinct tab10 hues for the rest."""
    _, top, bounds = shown_in_boundaries_figure(summary)
    # The conditions drawn together in boundaries_and_best take the first, most distinct colours.
    rest = summary.loc[summary["role"] != "reference", "condition"].tolist()
    others = list(dict.fromkeys([*top, *bounds, *rest]))
    colours = [c for i, c in enumerate(sns.color_palette("tab10", 10)) if i != 7]
    if len(others) > len(colours):
        colours += sns.color_palette("husl", len(others) - len(colours))
    palette = {c: colours[i] for i, c in enumerate(others)}
    palette |= {c: mpl.colors.to_rgb(ROLE_COLOURS["reference"]) for c in summary["condition"] if c not in palette}
    return palette


def _dashes(role: str) -> str:
    """Boundaries are drawn dashed everywhere, so a bound is never mistaken for a method."""
    return "--" if role == "boundary" else "-"


def _new_figure(width: float, height: float) -> Figure:
    """A figure bound to the Agg canvas directly, so no pyplot state or display backend is involved."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata=PNG_METADATA)
    atomic_write_bytes(path, buffer.getvalue())
    return path


def _integer_x(ax: Axes) -> None:
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _empty(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"no finite data for {what}", ha="center", va="center", transform=ax.transAxes, color="0.4")


def _panels(fig: Figure, n: int, ncols: int, **kwargs: object) -> list[Axes]:
    """n axes in a grid of ncols columns; unused slots hidden."""
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, **kwargs)).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return list(axes[:n])


def _role_suffix(role: str) -> str:
    return {"reference": " (reference)", "boundary": " (boundary)"}.get(role, "")


def _line_handles(shown: Sequence[str], palette: dict, role: dict[str, str]) -> list[Line2D]:
    return [
        Line2D(
            [],
            [],
            color=palette[c],
            lw=2.4 if role[c] == "reference" else 1.8,
            ls=_dashes(role[c]),
            label=c + _role_suffix(role[c]),
        )
        for c in shown
    ]


def _mean_band(ax: Axes, data: pd.DataFrame, column: str, colour: object, style: str = "-", lw: float = 2.0) -> None:
    """Mean over seeds per iteration with a ±1 sd band."""
    grouped = data.groupby("iteration")[column]
    mean, sd = grouped.mean(), grouped.std(ddof=1).fillna(0.0)
    ax.plot(mean.index, mean.to_numpy(), color=colour, ls=style, lw=lw, marker="o", markersize=3)
    ax.fill_between(mean.index, (mean - sd).to_numpy(), (mean + sd).to_numpy(), color=colour, alpha=0.12, lw=0)


def _fig_headline(m: pd.DataFrame, path: Path, facts: GridFacts, ref: str) -> Path:
    metrics = headline_metrics(m)
    rows = live(m[m["condition"] == ref])
    fig = _new_figure(11, 3.6 * math.ceil(len(metrics) / 2) + 0.6)
    for ax, x in zip(_panels(fig, len(metrics), 2, sharex=True), metrics, strict=True):
        data = rows.dropna(subset=[x.name])
        if data.empty:
            _empty(ax, x.label)
        else:
            for _, run in data.groupby("seed"):
                ax.plot(run["iteration"], run[x.name], color="0.55", lw=0.8, alpha=0.6)
            _mean_band(ax, data, x.name, ROLE_COLOURS["reference"], lw=2.2)
        ax.set_title(x.label.capitalize())
        ax.set_xlabel(ITERATION_LABEL)
        ax.set_ylabel(x.axis_label)
        _integer_x(ax)
    every = m[m["condition"] == ref]
    n_diverged = every.loc[every["diverged"], "seed"].nunique()
    # Say so when seeds drop out: from a divergence on, the band is over the surviving seeds only.
    dropped = f", {n_diverged} diverged and dropped from then on" if n_diverged else ""
    fig.suptitle(
        f"Reference '{ref}' ({facts.grid_text}): mean ± 1 sd over seeds{dropped}; grey: individual seeds",
        fontsize=12,
    )
    return _save(fig, path)


def shown_in_boundaries_figure(summary: pd.DataFrame) -> tuple[list[str], list[str], list[str]]:
    """(reference, top mechanisms by final mean quality, boundary conditions) drawn in boundaries_and_best."""
    pick = {r: summary.loc[summary["role"] == r, "condition"].tolist() for r in ("reference", "mechanism", "boundary")}
    return pick["reference"], pick["mechanism"][:TOP_MECHANISMS], pick["boundary"]


def boundaries_title(summary: pd.DataFrame) -> str:
    """What boundaries_and_best shows, in words that fit this grid (no boundaries, top mechanisms below the ref)."""
    ref, top, bounds = shown_in_boundaries_figure(summary)
    rows = summary.set_index("condition")
    parts = [f"reference '{ref[0]}'"] if ref else []
    if top:
        # "best" only when every one of them ends clearly above the reference; otherwise they are merely ranked first.
        above = all(difference_verdict(rows.loc[c]) == "above" for c in top)
        parts.append(f"the {plural(len(top), 'best mechanism' if above else 'top-ranked mechanism')} by final quality")
    if bounds:
        parts.append(f"{plural(len(bounds), 'boundary condition')} (dashed)")
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]


def _fig_boundaries_and_best(m: pd.DataFrame, path: Path, summary: pd.DataFrame, palette: dict) -> Path:
    metrics = headline_metrics(m)
    role = roles(m)
    ref, top, bounds = shown_in_boundaries_figure(summary)
    shown = ref + top + bounds
    ok = live(m)
    fig = _new_figure(12, 3.8 * math.ceil(len(metrics) / 2) + 1.2)
    for ax, x in zip(_panels(fig, len(metrics), 2, sharex=True), metrics, strict=True):
        for condition in shown:
            data = ok[ok["condition"] == condition].dropna(subset=[x.name])
            if not data.empty:
                lw = 2.4 if role[condition] == "reference" else 1.6
                _mean_band(ax, data, x.name, palette[condition], _dashes(role[condition]), lw)
        ax.set_title(x.label.capitalize())
        ax.set_xlabel(ITERATION_LABEL)
        ax.set_ylabel(x.axis_label)
        _integer_x(ax)
    fig.suptitle(boundaries_title(summary).capitalize() + ": mean ± 1 sd over seeds", fontsize=12)
    handles = _line_handles(shown, palette, role)
    fig.legend(handles=handles, loc="outside lower center", ncol=min(3, len(shown)), fontsize=9, frameon=False)
    return _save(fig, path)


def _fig_all_conditions(m: pd.DataFrame, path: Path, summary: pd.DataFrame, facts: GridFacts) -> Path:
    """One panel per headline metric; one row per condition: every run's final value, mean and ±1 sd."""
    metrics = headline_metrics(m)
    order = summary["condition"].tolist()
    role = summary.set_index("condition")["role"]
    final = final_runs(m)
    position = {c: i for i, c in enumerate(order)}
    rng = np.random.default_rng(0)  # fixed jitter: the same table draws the same picture
    jitter = rng.uniform(-0.22, 0.22, len(final))
    fig = _new_figure(3.3 * len(metrics) + 3.2, 0.32 * len(order) + 1.6)
    axes = _panels(fig, len(metrics), len(metrics), sharey=True)
    for k, (ax, x) in enumerate(zip(axes, metrics, strict=True)):
        y = final["condition"].map(position).to_numpy() + jitter
        colours = [ROLE_COLOURS[role[c]] for c in final["condition"]]
        ax.scatter(final[x.name], y, s=14, c=colours, alpha=0.5, lw=0)
        stats = final.groupby("condition")[x.name].agg(["mean", "std"]).reindex(order)
        for c, (mean, sd) in stats.iterrows():
            if np.isfinite(mean):
                colour = ROLE_COLOURS[role[c]]
                ax.errorbar(
                    mean,
                    position[c],
                    xerr=0 if np.isnan(sd) else sd,
                    fmt=ROLE_MARKERS[role[c]],
                    ms=5,
                    color=colour,
                    capsize=2,
                    lw=1.2,
                )
        ref_mean = stats.loc[order[0], "mean"] if order else math.nan
        if np.isfinite(ref_mean):
            ax.axvline(ref_mean, color=ROLE_COLOURS["reference"], lw=0.8, ls=":", zorder=0)
        ax.set_title(x.label.capitalize())
        ax.set_xlabel(f"final {x.axis_label}")
        if k == 0:
            ax.set_yticks(range(len(order)), labels=[c + _role_suffix(role[c]) for c in order], fontsize=8)
            ax.set_ylim(len(order) - 0.5, -0.5)
        else:
            ax.tick_params(labelleft=False)
        ax.grid(axis="y", visible=False)
    handles = [
        Line2D([], [], color=ROLE_COLOURS[r], marker=ROLE_MARKERS[r], lw=0, label=ROLE_NAMES[r])
        for r in ROLE_COLOURS
        if (summary["role"] == r).any()
    ]
    handles.append(Line2D([], [], color="0.4", marker="o", ms=3, lw=0, alpha=0.5, label="one run"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=9, frameon=False)
    fig.suptitle(
        f"Where every condition ends (iteration {facts.final_iteration}, {facts.seed_text}): runs as dots, "
        "mean ± 1 sd as marker and bar; dotted line: reference mean",
        fontsize=11,
    )
    return _save(fig, path)


def _fig_end_state(m: pd.DataFrame, path: Path, facts: GridFacts) -> Path:
    """Final quality vs alignment per run, coloured by role; runs at the same quality are jittered and counted."""
    final = final_runs(m).dropna(subset=[QUALITY.name, ALIGNMENT.name]).copy()
    role = roles(m)
    fig = _new_figure(10, 6.2)
    ax = fig.subplots()
    if final.empty:
        _empty(ax, "the final iteration")
        return _save(fig, path)
    res = resolution(QUALITY.name)
    # Runs that end at the same output (or, without mode columns, within the resolution in quality) coincide in x:
    # count them and spread them sideways.
    if "mode_sequence" in final.columns:
        final["_group"] = final["mode_sequence"].astype(str)
    else:
        final["_group"] = (final[QUALITY.name] / res).round().astype(int).astype(str)
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
    above = mpl.transforms.blended_transform_factory(ax.transData, ax.transAxes)
    for _, group in final.groupby("_group"):
        if len(group) >= 3:
            ax.text(
                group[QUALITY.name].mean(),
                1.01,
                f"{len(group)} runs",
                transform=above,
                ha="center",
                va="bottom",
                fontsize=9,
                color="0.25",
            )
    ax.set_xlabel(f"final {QUALITY.axis_label} (runs at the same end output jittered sideways; counts above)")
    ax.set_ylabel(f"final {ALIGNMENT.axis_label}")
    ax.legend(loc="best", fontsize=9, frameon=True)
    fig.suptitle(
        f"Where runs end (iteration {facts.final_iteration}): one point per run, {plural(len(final), 'run')}\n",
        fontsize=12,
    )
    return _save(fig, path)


def gap_by_iteration(m: pd.DataFrame) -> pd.DataFrame:
    """Per run, z-score perceived and real quality over the run's (non-diverged) iterations; gap = z_perc − z_real.

    Returns the mean gap per condition × iteration (columns condition, iteration, gap).
    """
    perceived, real = "judge_perceived_quality", QUALITY.name
    ok = live(m).dropna(subset=[real, perceived]).copy() if perceived in m.columns else pd.DataFrame()
    if ok.empty:
        return pd.DataFrame({"condition": [], "iteration": [], "gap": []})
    runs = ok.groupby(["condition", "seed"], sort=False)
    for column, z in ((perceived, "z_perceived"), (real, "z_real")):
        mean = runs[column].transform("mean")
        std = runs[column].transform(lambda s: s.std(ddof=0))
        # A flat trajectory carries no relative movement: its z-score is 0, not 0/0.
        ok[z] = np.where(std > 0, (ok[column] - mean) / std.where(std > 0, 1.0), 0.0)
    ok["gap"] = ok["z_perceived"] - ok["z_real"]
    return ok.groupby(["condition", "iteration"], sort=False)["gap"].mean().reset_index()


def _fig_inside_vs_outside(m: pd.DataFrame, path: Path, summary: pd.DataFrame, ref: str) -> Path:
    """One small panel per condition: its standardised gap, with the reference's in grey for comparison."""
    order = summary["condition"].tolist()
    role = summary.set_index("condition")["role"]
    gaps = gap_by_iteration(m)
    ncols = min(6, len(order))
    fig = _new_figure(2.3 * ncols + 0.6, 2.0 * math.ceil(len(order) / ncols) + 1.0)
    axes = _panels(fig, len(order), ncols, sharex=True, sharey=True)
    ref_gap = gaps[gaps["condition"] == ref]
    for i, (ax, condition) in enumerate(zip(axes, order, strict=True)):
        data = gaps[gaps["condition"] == condition]
        ax.axhline(0.0, color="0.6", lw=0.8)
        if condition != ref:
            ax.plot(ref_gap["iteration"], ref_gap["gap"], color="0.6", lw=1.2)
        ax.plot(
            data["iteration"], data["gap"], color=ROLE_COLOURS[role[condition]], lw=1.8, ls=_dashes(role[condition])
        )
        ax.set_title(_wrap(condition + _role_suffix(role[condition]), 30), fontsize=7.5)
        ax.tick_params(labelsize=7)
        if i % ncols == 0:
            ax.set_ylabel("z(perceived) − z(real)", fontsize=8)
        if i + ncols >= len(order):
            ax.set_xlabel("iteration", fontsize=8)
        _integer_x(ax)
    fig.suptitle(
        "Where the loop's belief outruns (>0) or lags (<0) real quality: judge-perceived minus real quality, each "
        f"z-scored over its run, mean over seeds; grey: reference '{ref}'",
        fontsize=10,
    )
    return _save(fig, path)


def _wrap(name: str, width: int) -> str:
    """Wrap a condition name after '[' or ',' so long knob lists fit a small panel title."""
    lines, line = [], ""
    for piece in name.replace("[", "[\0").replace(",", ",\0").replace(" (", "\0 (").split("\0"):
        if line and len(line) + len(piece) > width:
            lines.append(line)
            line = piece.lstrip()
        else:
            line += piece
    return "\n".join([*lines, line])


def make_figures(metrics: pd.DataFrame, out_dir: Path, name: str | None = None) -> dict[str, Path]:
    """Write the five PNG figures into out_dir (created if needed) and return {key: path}.

    Keys (FIGURE_KEYS): headline, boundaries_and_best, all_conditions, end_state, inside_vs_outside; see the module
    docstring for the question each answers. name: the grid's name, for titles. Diverged rows are left out.
    """
    m = prepare(metrics)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(m)
    facts = grid_facts(m, name)
    ref = reference(m)
    draw: dict[str, Callable[[Path], Path]] = {
        "headline": lambda p: _fig_headline(m, p, facts, ref),
        "boundaries_and_best": lambda p: _fig_boundaries_and_best(m, p, summary, _palette(summary)),
        "all_conditions": lambda p: _fig_all_conditions(m, p, summary, facts),
        "end_state": lambda p: _fig_end_state(m, p, facts),
        "inside_vs_outside": lambda p: _fig_inside_vs_outside(m, p, summary, ref),
    }
    # rc_context/axes_style restore matplotlib's global state afterwards, so callers' own plots are unaffected.
    with mpl.rc_context({"axes.titlesize": 11, "axes.labelsize": 10, "svg.hashsalt": "coevolab"}):
        with sns.axes_style("whitegrid"):
            return {key: draw[key](out_dir / f"{key}.png") for key in FIGURE_KEYS}
