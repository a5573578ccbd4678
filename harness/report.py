"""Turn a tidy metrics table (one row per condition × seed × iteration) into a summary table, figures and a report.

Input columns: condition, seed, iteration (0 = before training), policy_quality, judge_alignment, policy_entropy,
judge_perceived_quality, and optionally boundary (the condition is a reference bound, not a practical method) and
diverged (the run's parameters were non-finite at or before this iteration). Rows with diverged == True are left
out of every mean and plot but still counted (diverged_runs); other non-finite values are treated as missing.

The reference condition for paired differences is "baseline" if present, else the first condition of the table.
Nothing here writes the metrics table itself; every output file is written atomically (temp file + os.replace).
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator
from scipy import stats

__all__ = ["make_figures", "run_summary", "summarize", "summary_markdown", "write_report"]

REFERENCE_NAME = "baseline"
DPI = 120

# Short name used in summary columns -> column of the metrics table.
METRICS: dict[str, str] = {
    "quality": "policy_quality",
    "alignment": "judge_alignment",
    "entropy": "policy_entropy",
    "perceived": "judge_perceived_quality",
}
REQUIRED_COLUMNS: tuple[str, ...] = ("condition", "seed", "iteration", *METRICS.values())

# Axis labels that let each panel stand alone.
LABELS: dict[str, str] = {
    "policy_quality": "policy quality Σπ·q* (real)",
    "judge_alignment": "judge alignment (Spearman ρ vs q*)",
    "policy_entropy": "policy entropy (nats)",
    "judge_perceived_quality": "judge-perceived quality Σπ·J̄",
}
TITLES: dict[str, str] = {
    "policy_quality": "Real policy quality",
    "judge_alignment": "Judge alignment with ground truth",
    "policy_entropy": "Policy entropy",
    "judge_perceived_quality": "Judge-perceived quality (what the loop believes)",
}
ITERATION_LABEL = "outer iteration (0 = before training)"

FIGURE_KEYS: tuple[str, ...] = ("headline", "boundaries_and_best", "all_conditions", "end_state", "inside_vs_outside")
ROLE_ORDER = {"reference": 0, "mechanism": 1, "boundary": 2}


# --------------------------------------------------------------------------------------------------------------------
# Preparation


def _prepare(metrics: pd.DataFrame) -> pd.DataFrame:
    """A validated copy: flags as bool, metric columns as float with non-finite -> NaN, rows in grid order."""
    missing = [c for c in REQUIRED_COLUMNS if c not in metrics.columns]
    if missing:
        raise ValueError(f"metrics table lacks columns {missing}")
    if metrics.empty:
        raise ValueError("metrics table is empty")
    m = metrics.copy()
    m["condition"] = m["condition"].astype(str)
    for flag in ("boundary", "diverged"):
        # Hand-built tables may omit the flags; a missing flag means "no".
        m[flag] = m[flag].fillna(False).astype(bool) if flag in m.columns else False
    for column in METRICS.values():
        values = pd.to_numeric(m[column], errors="coerce").astype(float)
        m[column] = values.where(np.isfinite(values))
    order = {name: i for i, name in enumerate(dict.fromkeys(m["condition"]))}
    m["_order"] = m["condition"].map(order)
    m = m.sort_values(["_order", "seed", "iteration"], kind="stable").drop(columns="_order")
    return m.reset_index(drop=True)


def _conditions(m: pd.DataFrame) -> list[str]:
    """Conditions in grid order (order of first appearance)."""
    return list(dict.fromkeys(m["condition"]))


def _reference(m: pd.DataFrame) -> str:
    names = _conditions(m)
    return REFERENCE_NAME if REFERENCE_NAME in names else names[0]


def _roles(m: pd.DataFrame) -> dict[str, str]:
    """Role per condition; the reference keeps its role even if it is flagged as a boundary."""
    reference = _reference(m)
    boundary = m.groupby("condition", sort=False)["boundary"].any()
    return {c: "reference" if c == reference else ("boundary" if boundary[c] else "mechanism") for c in _conditions(m)}


def _live(m: pd.DataFrame) -> pd.DataFrame:
    """Rows that enter means and plots: diverged rows are excluded (they are counted elsewhere)."""
    return m[~m["diverged"]]


def _mean_std_ci(values: Iterable[float], confidence: float) -> tuple[int, float, float, float, float]:
    """(n, mean, std ddof=1, ci_low, ci_high) over the finite values; Student-t CI, NaN where n is too small."""
    v = np.asarray(list(values), dtype=float)
    v = v[np.isfinite(v)]
    n = int(v.size)
    if n == 0:
        return 0, math.nan, math.nan, math.nan, math.nan
    mean = float(v.mean())
    if n == 1:
        return 1, mean, math.nan, math.nan, math.nan
    std = float(v.std(ddof=1))
    half = float(stats.t.ppf((1.0 + confidence) / 2.0, n - 1)) * std / math.sqrt(n)
    return n, mean, std, mean - half, mean + half


# --------------------------------------------------------------------------------------------------------------------
# Tables


def run_summary(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per (condition, seed), in grid order.

    peak_iteration / peak_quality: the iteration (earliest on ties) and value of max policy_quality over the run's
    non-diverged rows. final_iteration: the condition's last iteration; final_quality: policy_quality there (NaN if
    the run diverged or lacks that row). degradation_pct = 100·(peak − final)/|peak|, 0 when peak == final, NaN when
    final is missing or peak is 0 with final below it. Also carries the run's boundary and diverged flags.
    """
    m = _prepare(metrics)
    final_iteration = m.groupby("condition", sort=False)["iteration"].max()
    rows = []
    for (condition, seed), run in m.groupby(["condition", "seed"], sort=False):
        live = run[~run["diverged"] & run["policy_quality"].notna()]
        last = final_iteration[condition]
        if live.empty:
            peak_iteration, peak = pd.NA, math.nan
        else:
            # argmax returns the first maximum; rows are sorted by iteration, so ties resolve to the earliest.
            at = int(np.argmax(live["policy_quality"].to_numpy()))
            peak_iteration, peak = int(live["iteration"].iloc[at]), float(live["policy_quality"].iloc[at])
        final_rows = live[live["iteration"] == last]
        final = float(final_rows["policy_quality"].iloc[0]) if len(final_rows) else math.nan
        if math.isnan(final) or math.isnan(peak):
            degradation = math.nan
        elif peak == final:
            degradation = 0.0
        elif peak == 0.0:
            degradation = math.nan  # a relative drop from zero is undefined
        else:
            degradation = 100.0 * (peak - final) / abs(peak)
        rows.append(
            {
                "condition": condition,
                "seed": seed,
                "boundary": bool(run["boundary"].any()),
                "diverged": bool(run["diverged"].any()),
                "peak_iteration": peak_iteration,
                "peak_quality": peak,
                "final_iteration": int(last),
                "final_quality": final,
                "degradation_pct": degradation,
            }
        )
    out = pd.DataFrame(rows)
    out["peak_iteration"] = out["peak_iteration"].astype("Int64")
    return out


def summarize(metrics: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """One row per condition, at the condition's final iteration, ordered reference → mechanisms → boundaries.

    Columns: condition, role ("reference" | "mechanism" | "boundary"), n_seeds (seeds in the table), n_final (runs
    with a finite final quality, i.e. what the statistics are over), diverged_runs (runs with any diverged row),
    final_iteration; for m in quality, alignment, entropy, perceived: m_mean, m_std (ddof=1), m_ci_low, m_ci_high
    (Student-t over seeds, NaN with fewer than 2); peak_iteration_mean and degradation_pct_mean over non-diverged
    runs; quality_diff_mean / _ci_low / _ci_high: paired final-quality difference from the reference over the seeds
    both share (NaN on the reference row), with n_paired. Mechanisms and boundaries are each sorted by quality_mean
    descending (NaN last, ties in grid order).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    m = _prepare(metrics)
    runs = run_summary(m)
    reference = _reference(m)
    roles = _roles(m)
    reference_final = runs.loc[runs["condition"] == reference, ["seed", "final_quality"]]
    rows = []
    for grid_position, condition in enumerate(_conditions(m)):
        cond = m[m["condition"] == condition]
        cond_runs = runs[runs["condition"] == condition]
        last = int(cond["iteration"].max())
        final = _live(cond)
        final = final[final["iteration"] == last]
        row: dict[str, object] = {
            "condition": condition,
            "role": roles[condition],
            "n_seeds": int(cond["seed"].nunique()),
            "n_final": int(cond_runs["final_quality"].notna().sum()),
            "diverged_runs": int(cond_runs["diverged"].sum()),
            "final_iteration": last,
        }
        for short, column in METRICS.items():
            _, mean, std, low, high = _mean_std_ci(final[column], confidence)
            row |= {f"{short}_mean": mean, f"{short}_std": std, f"{short}_ci_low": low, f"{short}_ci_high": high}
        healthy = cond_runs[~cond_runs["diverged"]]
        row["peak_iteration_mean"] = float(healthy["peak_iteration"].astype(float).mean())
        row["degradation_pct_mean"] = float(healthy["degradation_pct"].mean())
        if condition == reference:
            row |= {"quality_diff_mean": math.nan, "quality_diff_ci_low": math.nan, "quality_diff_ci_high": math.nan}
            row["n_paired"] = pd.NA
        else:
            paired = cond_runs[["seed", "final_quality"]].merge(reference_final, on="seed", suffixes=("", "_ref"))
            diff = (paired["final_quality"] - paired["final_quality_ref"]).dropna()
            n, mean, _, low, high = _mean_std_ci(diff, confidence)
            row |= {"quality_diff_mean": mean, "quality_diff_ci_low": low, "quality_diff_ci_high": high}
            row["n_paired"] = n
        row["_grid"] = grid_position
        rows.append(row)

    out = pd.DataFrame(rows)
    # Story order: role, then final mean quality descending (missing last), then grid order for ties.
    out["_role"] = out["role"].map(ROLE_ORDER)
    out["_quality"] = -out["quality_mean"].fillna(-math.inf)
    out = out.sort_values(["_role", "_quality", "_grid"], kind="stable").drop(columns=["_role", "_quality", "_grid"])
    out["n_paired"] = out["n_paired"].astype("Int64")
    return out.reset_index(drop=True)


def _num(value: object, digits: int = 3, signed: bool = False) -> str:
    """A number with fixed decimals, or "n/a" when missing or non-finite."""
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "n/a"
    if not math.isfinite(x):
        return "n/a"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def _mean_std(row: pd.Series, short: str) -> str:
    mean, std = row[f"{short}_mean"], row[f"{short}_std"]
    return _num(mean) if _num(std) == "n/a" else f"{_num(mean)} ± {_num(std)}"


def _with_ci(text: str, low: object, high: object) -> str:
    return text if _num(low) == "n/a" else f"{text} [{_num(low)}, {_num(high)}]"


def _markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    """A GitHub-flavoured markdown table, padded so the raw text reads as a table too."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    table = [[cell(h) for h in header], *[[cell(c) for c in r] for r in rows]]
    widths = [max(3, *(len(r[i]) for r in table)) for i in range(len(header))]
    lines = []
    for k, r in enumerate(table):
        padded = [c.rjust(w) if right[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append("| " + " | ".join(padded) + " |")
        if k == 0:
            rule = [("-" * (w - 1) + ":") if right[i] else ("-" * w) for i, w in enumerate(widths)]
            lines.append("| " + " | ".join(rule) + " |")
    return "\n".join(lines) + "\n"


def summary_markdown(summary: pd.DataFrame) -> str:
    """The output of summarize() as a markdown table, 3 decimals, "n/a" for undefined values.

    Conditions with diverged runs say so next to their name; boundary rows read "(boundary)" in the Role column.
    """
    header = [
        "Condition",
        "Role",
        "Quality (mean ± std [CI])",
        "Alignment (mean ± std)",
        "Entropy",
        "Judge-perceived",
        "Δ quality vs reference [CI]",
        "Peak iter",
        "Degradation %",
    ]
    rows = []
    for _, r in summary.iterrows():
        name = str(r["condition"])
        if int(r.get("diverged_runs", 0)) > 0:
            name += f" ({int(r['diverged_runs'])}/{int(r['n_seeds'])} runs diverged)"
        role = "(boundary)" if r["role"] == "boundary" else str(r["role"])
        delta = (
            "—"
            if r["role"] == "reference"
            else _with_ci(
                _num(r["quality_diff_mean"], signed=True), r["quality_diff_ci_low"], r["quality_diff_ci_high"]
            )
        )
        rows.append(
            [
                name,
                role,
                _with_ci(_mean_std(r, "quality"), r["quality_ci_low"], r["quality_ci_high"]),
                _mean_std(r, "alignment"),
                _mean_std(r, "entropy"),
                _mean_std(r, "perceived"),
                delta,
                _num(r["peak_iteration_mean"], digits=1),  # a mean iteration index: more decimals is noise
                _num(r["degradation_pct_mean"]),
            ]
        )
    return _markdown_table(header, rows, right=[False, False, *[True] * 7])


# --------------------------------------------------------------------------------------------------------------------
# Figures


# Strong colours that stay distinct on white: tab10 without its grey, then darker extras.
EXTRA_COLOURS = ("#000075", "#800000", "#469990", "#f032e6", "#b8860b", "#4b0082", "#6b8e23", "#e9967a")


def _palette(summary: pd.DataFrame) -> dict[str, tuple[float, float, float]]:
    """One colour per condition, fixed for every figure.

    Near-black for the reference. The conditions drawn together in boundaries_and_best (two best mechanisms, then
    boundaries) take the first, most distinct colours; the remaining mechanisms follow in story order; husl beyond.
    """
    reference = summary.loc[summary["role"] == "reference", "condition"].tolist()
    mechanisms = summary.loc[summary["role"] == "mechanism", "condition"].tolist()
    bounds = summary.loc[summary["role"] == "boundary", "condition"].tolist()
    others = mechanisms[:2] + bounds + mechanisms[2:]
    colours = [c for i, c in enumerate(sns.color_palette("tab10", 10)) if i != 7]
    colours += [mpl.colors.to_rgb(c) for c in EXTRA_COLOURS]
    if len(others) > len(colours):
        colours += sns.color_palette("husl", len(others) - len(colours))
    palette = {c: colours[i] for i, c in enumerate(others)}
    palette |= {c: (0.1, 0.1, 0.1) for c in reference}
    return palette


def _dashes(role: str) -> str:
    """Boundaries are drawn dashed everywhere, so a bound is never mistaken for a method."""
    return "--" if role == "boundary" else "-"


def _wrap(name: str, width: int) -> str:
    """Wrap a condition name after '[' or ',' so long knob lists fit a small panel title."""
    pieces, piece = [], ""
    for ch in name:
        piece += ch
        if ch in "[,":
            pieces.append(piece)
            piece = ""
    pieces.append(piece)
    lines, line = [], ""
    for p in pieces:
        if line and len(line) + len(p) > width:
            lines.append(line)
            line = p
        else:
            line += p
    lines.append(line)
    return "\n".join(lines)


def _new_figure(width: float, height: float) -> Figure:
    """A figure bound to the Agg canvas directly, so no pyplot state or display backend is involved."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    _atomic_write(path, buffer.getvalue())
    return path


def _integer_x(ax: mpl.axes.Axes) -> None:
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _empty(ax: mpl.axes.Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"no finite data for {what}", ha="center", va="center", transform=ax.transAxes, color="0.4")


def _legend_right(ax: mpl.axes.Axes, handles: list) -> None:
    """Legend beside the axes (an axes legend, so constrained layout makes room and a suptitle never overlaps it)."""
    ax.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8, frameon=False
    )


def _role_suffix(condition: str, roles: dict[str, str]) -> str:
    return {"reference": " (reference)", "boundary": " (boundary)"}.get(roles[condition], "")


def _legend_handles(conditions: Sequence[str], palette: dict, roles: dict[str, str], marker: bool = False) -> list:
    return [
        Line2D(
            [],
            [],
            color=palette[c],
            lw=0 if marker else (2.4 if roles[c] == "reference" else 1.8),
            ls=_dashes(roles[c]),
            marker=("*" if roles[c] == "reference" else "X" if roles[c] == "boundary" else "o") if marker else None,
            markersize=8 if marker else None,
            label=c + _role_suffix(c, roles),
        )
        for c in conditions
    ]


def _fig_headline(m: pd.DataFrame, path: Path, palette: dict, reference: str) -> Path:
    ref = _live(m[m["condition"] == reference])
    colour = palette[reference]
    fig = _new_figure(11, 8)
    axes = fig.subplots(2, 2, sharex=True)
    for ax, column in zip(axes.flat, METRICS.values(), strict=True):
        data = ref.dropna(subset=[column])
        if data.empty:
            _empty(ax, column)
        else:
            sns.lineplot(
                data=data,
                x="iteration",
                y=column,
                units="seed",
                estimator=None,
                color=colour,
                lw=0.7,
                alpha=0.3,
                legend=False,
                ax=ax,
            )
            sns.lineplot(
                data=data,
                x="iteration",
                y=column,
                errorbar="sd",
                color=colour,
                lw=2.2,
                marker="o",
                markersize=4,
                legend=False,
                ax=ax,
            )
        ax.set_title(TITLES[column])
        ax.set_xlabel(ITERATION_LABEL)
        ax.set_ylabel(LABELS[column])
        _integer_x(ax)
    every = m[m["condition"] == reference]
    n_seeds = every["seed"].nunique()
    n_diverged = every.loc[every["diverged"], "seed"].nunique()
    # Say so when seeds drop out: from a divergence on, the band is over the surviving seeds only.
    dropped = f", {n_diverged} diverged and dropped from then on" if n_diverged else ""
    fig.suptitle(
        f"Reference condition '{reference}': mean ± 1 sd over {n_seeds} seeds{dropped} (thin lines: individual seeds)",
        fontsize=12,
    )
    return _save(fig, path)


def _fig_boundaries_and_best(
    m: pd.DataFrame, path: Path, palette: dict, roles: dict[str, str], shown: Sequence[str]
) -> Path:
    fig = _new_figure(12, 9.5)
    axes = fig.subplots(2, 2, sharex=True)
    live = _live(m)
    for ax, column in zip(axes.flat, METRICS.values(), strict=True):
        for condition in shown:
            data = live[live["condition"] == condition].dropna(subset=[column])
            if data.empty:
                continue
            sns.lineplot(
                data=data,
                x="iteration",
                y=column,
                errorbar="sd",
                color=palette[condition],
                ls=_dashes(roles[condition]),
                lw=2.4 if roles[condition] == "reference" else 1.6,
                legend=False,
                ax=ax,
            )
        ax.set_title(TITLES[column])
        ax.set_xlabel(ITERATION_LABEL)
        ax.set_ylabel(LABELS[column])
        _integer_x(ax)
    fig.suptitle(
        "Reference vs boundary conditions (dashed) and the two best mechanisms: mean ± 1 sd over seeds", fontsize=13
    )
    fig.legend(
        handles=_legend_handles(shown, palette, roles), loc="outside lower center", ncol=2, fontsize=9, frameon=False
    )
    return _save(fig, path)


def _fig_all_conditions(m: pd.DataFrame, path: Path, order: Sequence[str], roles: dict[str, str]) -> Path:
    ncols = min(6, len(order))
    nrows = math.ceil(len(order) / ncols)
    fig = _new_figure(2.6 * ncols + 0.4, 2.3 * nrows + 0.9)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)).ravel()
    live = _live(m)
    colours = {"quality": sns.color_palette("deep")[0], "alignment": sns.color_palette("deep")[1]}
    for i, (ax, condition) in enumerate(zip(axes, order, strict=False)):
        cond = live[live["condition"] == condition]
        long = cond.melt(
            id_vars=["seed", "iteration"],
            value_vars=["policy_quality", "judge_alignment"],
            var_name="metric",
            value_name="value",
        ).dropna(subset=["value"])
        long["metric"] = long["metric"].map({"policy_quality": "quality", "judge_alignment": "alignment"})
        if long.empty:
            _empty(ax, "this condition")
        else:
            sns.lineplot(
                data=long,
                x="iteration",
                y="value",
                hue="metric",
                hue_order=list(colours),
                palette=colours,
                errorbar="sd",
                lw=1.5,
                legend=False,
                ax=ax,
            )
        label = condition + ("\n(boundary)" if roles[condition] == "boundary" else "")
        label += "\n(reference)" if roles[condition] == "reference" else ""
        ax.set_title(_wrap(label, 36), fontsize=7.5)
        # Label only the outer panels; a panel with an empty slot below it is a bottom panel too.
        bottom = i + ncols >= len(order)
        ax.set_xlabel("iteration" if bottom else "", fontsize=8)
        ax.set_ylabel("quality / alignment" if i % ncols == 0 else "", fontsize=8)
        ax.tick_params(labelsize=7, labelbottom=bottom)
        ax.axhline(0.0, color="0.75", lw=0.6, zorder=0)
        _integer_x(ax)
    for ax in axes[len(order) :]:
        ax.set_visible(False)
    handles = [
        Line2D([], [], color=colours["quality"], lw=2, label="policy quality Σπ·q* (real)"),
        Line2D([], [], color=colours["alignment"], lw=2, label="judge alignment (Spearman ρ vs q*)"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=9, frameon=False)
    fig.suptitle(
        "Every condition: real quality and judge alignment vs outer iteration (mean ± 1 sd over seeds)", fontsize=12
    )
    return _save(fig, path)


def _final_runs(m: pd.DataFrame) -> pd.DataFrame:
    """Each run's row at its condition's final iteration, if that row is not diverged."""
    last = m.groupby("condition", sort=False)["iteration"].transform("max")
    return _live(m[m["iteration"] == last])


def _fig_end_state(m: pd.DataFrame, path: Path, palette: dict, roles: dict[str, str], order: Sequence[str]) -> Path:
    fig = _new_figure(11, 6.5)
    ax = fig.subplots()
    final = _final_runs(m).dropna(subset=["policy_quality", "judge_alignment"])
    markers = {"reference": "*", "mechanism": "o", "boundary": "X"}
    # Mechanisms first, then boundaries, then the reference, so the emphasised points are never buried.
    draw_rank = {"mechanism": 0, "boundary": 1, "reference": 2}
    for condition in sorted(order, key=lambda c: draw_rank[roles[c]]):
        data = final[final["condition"] == condition]
        if data.empty:
            continue
        role = roles[condition]
        ax.scatter(
            data["policy_quality"],
            data["judge_alignment"],
            color=palette[condition],
            marker=markers[role],
            s=160 if role == "reference" else 55,
            alpha=1.0 if role == "reference" else 0.8,
            edgecolor="white",
            linewidth=0.8 if role == "reference" else 0.5,
            zorder=3 if role == "reference" else 2,
        )
    if final.empty:
        _empty(ax, "the final iteration")
    ax.set_xlabel("final " + LABELS["policy_quality"])
    ax.set_ylabel("final " + LABELS["judge_alignment"])
    fig.suptitle(
        "End state of every run: real quality vs judge alignment at the final iteration (one point per run)",
        fontsize=12,
    )
    _legend_right(ax, _legend_handles(order, palette, roles, marker=True))
    return _save(fig, path)


def _gap_by_iteration(m: pd.DataFrame) -> pd.DataFrame:
    """Per run, z-score perceived and real quality over the run's (non-diverged) iterations; gap = z_perc − z_real.

    Returns the mean gap per condition × iteration (columns condition, iteration, gap).
    """
    live = _live(m).dropna(subset=["policy_quality", "judge_perceived_quality"]).copy()
    if live.empty:
        return pd.DataFrame({"condition": [], "iteration": [], "gap": []})
    runs = live.groupby(["condition", "seed"], sort=False)
    for column, z in (("judge_perceived_quality", "z_perceived"), ("policy_quality", "z_real")):
        mean = runs[column].transform("mean")
        std = runs[column].transform(lambda s: s.std(ddof=0))
        # A flat trajectory carries no relative movement: its z-score is 0, not 0/0.
        live[z] = np.where(std > 0, (live[column] - mean) / std.where(std > 0, 1.0), 0.0)
    live["gap"] = live["z_perceived"] - live["z_real"]
    return live.groupby(["condition", "iteration"], sort=False)["gap"].mean().reset_index()


def _fig_inside_vs_outside(
    m: pd.DataFrame, path: Path, palette: dict, roles: dict[str, str], order: Sequence[str]
) -> Path:
    fig = _new_figure(12, 6.5)
    ax = fig.subplots()
    gaps = _gap_by_iteration(m)
    # Draw thin mechanisms first so the emphasised reference and boundaries sit on top.
    for condition in sorted(order, key=lambda c: roles[c] != "mechanism", reverse=True):
        data = gaps[gaps["condition"] == condition]
        if data.empty:
            continue
        strong = roles[condition] != "mechanism"
        ax.plot(
            data["iteration"],
            data["gap"],
            color=palette[condition],
            ls=_dashes(roles[condition]),
            lw=2.6 if strong else 1.0,
            alpha=1.0 if strong else 0.6,
            zorder=3 if strong else 2,
        )
    ax.axhline(0.0, color="0.3", lw=1.0, zorder=1)
    ax.set_xlabel(ITERATION_LABEL)
    ax.set_ylabel(
        "z(judge-perceived) − z(real quality)\n(each z-scored over its own run's iterations; mean over seeds)"
    )
    ax.set_title("Inside vs outside: where the loop's belief outruns (>0) or lags (<0) real quality")
    _integer_x(ax)
    handles = _legend_handles(order, palette, roles)
    for h, c in zip(handles, order, strict=True):
        h.set_linewidth(2.6 if roles[c] != "mechanism" else 1.2)
    _legend_right(ax, handles)
    return _save(fig, path)


def _shown_in_boundaries_figure(summary: pd.DataFrame) -> list[str]:
    """Reference, the two best mechanisms by final mean quality, then every boundary condition."""
    reference = summary.loc[summary["role"] == "reference", "condition"].tolist()
    best = summary.loc[summary["role"] == "mechanism", "condition"].head(2).tolist()
    bounds = summary.loc[summary["role"] == "boundary", "condition"].tolist()
    return reference + best + bounds


def make_figures(metrics: pd.DataFrame, out_dir: Path) -> dict[str, Path]:
    """Write the five PNG figures into out_dir (created if needed) and return {key: path}.

    Keys: headline (reference, 4 metrics), boundaries_and_best (reference + boundaries + two best mechanisms),
    all_conditions (one panel per condition), end_state (final quality vs alignment per run), inside_vs_outside
    (standardised perceived − real quality gap per condition). Diverged rows are left out.
    """
    m = _prepare(metrics)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(m)
    reference = _reference(m)
    roles = _roles(m)
    palette = _palette(summary)
    story = summary["condition"].tolist()
    # rc_context/axes_style restore matplotlib's global state afterwards, so callers' own plots are unaffected.
    with mpl.rc_context({"axes.titlesize": 11, "axes.labelsize": 10}), sns.axes_style("whitegrid"):
        return {
            "headline": _fig_headline(m, out_dir / "headline.png", palette, reference),
            "boundaries_and_best": _fig_boundaries_and_best(
                m, out_dir / "boundaries_and_best.png", palette, roles, _shown_in_boundaries_figure(summary)
            ),
            "all_conditions": _fig_all_conditions(m, out_dir / "all_conditions.png", story, roles),
            "end_state": _fig_end_state(m, out_dir / "end_state.png", palette, roles, story),
            "inside_vs_outside": _fig_inside_vs_outside(m, out_dir / "inside_vs_outside.png", palette, roles, story),
        }


# --------------------------------------------------------------------------------------------------------------------
# Readings: one data-derived line under each figure


def _series(m: pd.DataFrame, condition: str, column: str) -> pd.Series:
    """Mean over seeds of a column per iteration, for one condition, diverged rows excluded."""
    data = _live(m[m["condition"] == condition]).dropna(subset=[column])
    return data.groupby("iteration")[column].mean().sort_index()


def _reading_headline(m: pd.DataFrame, reference: str) -> str:
    quality = _series(m, reference, "policy_quality")
    if quality.empty:
        return f"The reference '{reference}' has no finite policy quality to report."
    it = quality.index.tolist()
    text = f"Reference ('{reference}') mean quality goes from {_num(quality.iloc[0])} at iteration {it[0]}"
    if len(it) > 2:
        text += f" to {_num(quality.iloc[1])} after iteration {it[1]} and {_num(quality.iloc[-1])} at the end"
    elif len(it) == 2:
        text += f" to {_num(quality.iloc[-1])} at the end"
    text += f" (iteration {it[-1]}, peak {_num(quality.max())} at iteration {quality.idxmax()})"
    entropy = _series(m, reference, "policy_entropy")
    if len(entropy) > 1:
        change = entropy.iloc[-1] - entropy.iloc[0]
        if change == 0:
            text += f"; entropy stays at {_num(entropy.iloc[0])} nats"
        else:
            # The iteration by which 95% of the total entropy change has happened: when the policy has settled.
            moved = (entropy - entropy.iloc[0]).abs() >= 0.95 * abs(change)
            settle = moved.idxmax()
            verb = "falls" if change < 0 else "rises"
            text += f"; entropy {verb} to {_num(entropy[settle])} nats by iteration {settle}"
    alignment = _series(m, reference, "judge_alignment")
    if len(alignment) > 1:
        text += f"; judge alignment moves from {_num(alignment.iloc[0])} to {_num(alignment.iloc[-1])}"
    return text + "."


def _reading_boundaries(summary: pd.DataFrame) -> str:
    def listed(role: str, limit: int | None = None) -> str:
        rows = summary[summary["role"] == role].head(limit) if limit else summary[summary["role"] == role]
        return ", ".join(f"{r.condition} {_num(r.quality_mean)}" for r in rows.itertuples())

    parts = [f"reference {listed('reference')}"]
    if (summary["role"] == "mechanism").any():
        parts.append(f"best mechanisms {listed('mechanism', 2)}")
    if (summary["role"] == "boundary").any():
        parts.append(f"boundaries {listed('boundary')}")
    return "Final mean quality: " + "; ".join(parts) + "."


def _reading_all_conditions(summary: pd.DataFrame, confidence: float) -> str:
    ranked = summary.dropna(subset=["quality_mean"]).sort_values("quality_mean", ascending=False, kind="stable")
    if ranked.empty:
        return "No condition has a finite final quality."
    best, worst = ranked.iloc[0], ranked.iloc[-1]
    text = (
        f"Final mean quality spans {_num(worst['quality_mean'])} ({worst['condition']}) "
        f"to {_num(best['quality_mean'])} ({best['condition']})"
    )
    mech = summary[summary["role"] == "mechanism"]
    if len(mech):
        level = f"{100 * confidence:g}%"
        counts = []
        for word, clear in (("above", mech["quality_diff_ci_low"] > 0), ("below", mech["quality_diff_ci_high"] < 0)):
            diffs = mech.loc[clear, "quality_diff_mean"].abs()
            # Say how big the clear differences are: a tiny but consistent difference also excludes zero.
            biggest = diffs.max() if len(diffs) else math.nan
            size = "" if not len(diffs) else " (|Δ| < 0.001)" if biggest < 5e-4 else f" (|Δ| up to {_num(biggest)})"
            counts.append(f"{len(diffs)} end {word} the reference{size}")
        text += f"; of {len(mech)} mechanisms, {counts[0]} and {counts[1]} with the {level} paired CI excluding zero"
    return text + "."


def _reading_end_state(m: pd.DataFrame) -> str:
    final = _final_runs(m).dropna(subset=["policy_quality", "judge_alignment"])
    if final.empty:
        return "No run has finite final quality and alignment."
    text = f"Across {len(final)} runs with finite end states"
    x, y = final["policy_quality"].to_numpy(), final["judge_alignment"].to_numpy()
    if len(final) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0:
        rho = stats.spearmanr(x, y).statistic
        text += f", final quality and final alignment have Spearman ρ = {_num(rho)}"
    top = final.loc[final["policy_quality"].idxmax()]
    text += (
        f"; the highest-quality run is {top['condition']} seed {top['seed']} "
        f"(quality {_num(top['policy_quality'])}, alignment {_num(top['judge_alignment'])})"
    )
    diverged = m.groupby(["condition", "seed"])["diverged"].any()
    if diverged.any():
        text += f"; {int(diverged.sum())} diverged runs are not shown"
    return text + "."


def _reading_inside_vs_outside(m: pd.DataFrame, reference: str) -> str:
    gaps = _gap_by_iteration(m)
    if gaps.empty:
        return "No run has finite perceived and real quality to compare."
    text = ""
    ref = gaps[gaps["condition"] == reference].set_index("iteration")["gap"].sort_index()
    if len(ref):
        text = (
            f"The reference's standardised gap peaks at {_num(ref.max(), signed=True)} at iteration {ref.idxmax()} "
            f"and ends at {_num(ref.iloc[-1], signed=True)}"
        )
    last = gaps.loc[gaps.groupby("condition", sort=False)["iteration"].idxmax()].dropna(subset=["gap"])
    if len(last) > 1:
        high, low = last.loc[last["gap"].idxmax()], last.loc[last["gap"].idxmin()]
        text += "; at" if text else "At"
        text += (
            f" the final iteration the largest gap is {high['condition']} ({_num(high['gap'], signed=True)}) "
            f"and the smallest {low['condition']} ({_num(low['gap'], signed=True)})"
        )
    return (text or "The reference has no finite gap") + "."


def _readings(m: pd.DataFrame, summary: pd.DataFrame, confidence: float) -> dict[str, str]:
    reference = _reference(m)
    return {
        "headline": _reading_headline(m, reference),
        "boundaries_and_best": _reading_boundaries(summary),
        "all_conditions": _reading_all_conditions(summary, confidence),
        "end_state": _reading_end_state(m),
        "inside_vs_outside": _reading_inside_vs_outside(m, reference),
    }


# --------------------------------------------------------------------------------------------------------------------
# Report


FIGURE_TITLES = {
    "headline": "Reference condition over training",
    "boundaries_and_best": "Boundaries and the best mechanisms",
    "all_conditions": "Every condition",
    "end_state": "End state per run",
    "inside_vs_outside": "What the loop believes vs reality",
}


def _atomic_write(path: Path, data: bytes) -> None:
    """Write bytes so readers see the old file or the new one, never a partial one."""
    path = Path(path)
    if path.name == "metrics.csv":
        # The metrics table is the record of the experiment; the report only ever reads it.
        raise ValueError(f"refusing to write {path}: the metrics table is read-only for reports")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; reports are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_report(
    metrics: pd.DataFrame,
    out_dir: Path,
    title: str = "Judge–policy co-evolution report",
    confidence: float = 0.95,
) -> None:
    """Write summary.csv, summary.md, figures/*.png and report.md into out_dir, each atomically.

    report.md holds the title, a line on the grid, the summary table and every figure (relative link) with one line
    of reading derived from the data. metrics.csv is never written or modified.
    """
    out_dir = Path(out_dir)
    m = _prepare(metrics)
    summary = summarize(m, confidence)
    table = summary_markdown(summary)
    _atomic_write(out_dir / "summary.csv", summary.to_csv(index=False).encode("utf-8"))
    _atomic_write(out_dir / "summary.md", table.encode("utf-8"))
    figures = make_figures(m, out_dir / "figures")
    readings = _readings(m, summary, confidence)

    reference = _reference(m)
    level = f"{100 * confidence:g}%"
    n_diverged = int(summary["diverged_runs"].sum())
    lines = [
        f"# {title}",
        "",
        f"{m['condition'].nunique()} conditions × {m['seed'].nunique()} seeds, outer iterations "
        f"{int(m['iteration'].min())}..{int(m['iteration'].max())} (0 = before training). "
        f"Reference for paired differences: `{reference}`. "
        f"{n_diverged} diverged runs (excluded from means and plots, counted in the table).",
        "",
        "## Summary at the final iteration",
        "",
        f"Mean ± std over seeds with {level} Student-t CIs; Δ is paired on shared seeds. "
        "Boundary conditions are reference bounds (a frozen judge, or an anchor that sees ground truth), "
        "not practical methods. Mechanisms are sorted by final mean quality.",
        "",
        table,
        "## Figures",
        "",
    ]
    for key, path in figures.items():
        relative = path.relative_to(out_dir).as_posix()
        lines += [f"### {FIGURE_TITLES[key]}", "", f"![{FIGURE_TITLES[key]}]({relative})", "", readings[key], ""]
    _atomic_write(out_dir / "report.md", "\n".join(lines).encode("utf-8"))
