"""Text derived from the data: one reading under each figure, the end-mode sentence, and "How to read this"."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from harness import metrics as registry
from harness.report.data import (
    ALIGNMENT,
    QUALITY,
    GridFacts,
    final_runs,
    headline_metrics,
    num,
    plural,
    resolution,
    series,
)
from harness.report.figures import boundaries_title, gap_by_iteration, shown_in_boundaries_figure
from harness.report.tables import DIFF, difference_verdict, grid_modes, mode_label

TOKEN_GLYPHS_TEXT = "↑ ↗ → ↘ ↓ ↙ ← ↖"


def reading_headline(m: pd.DataFrame, ref: str) -> str:
    """The reference's first → last mean value of every headline metric, and when quality peaked."""
    parts = []
    for x in headline_metrics(m):
        values = series(m, ref, x.name)
        if values.empty:
            continue
        text = f"{x.axis_label} {num(values.iloc[0])} → {num(values.iloc[-1])}"
        if x is QUALITY and len(values) > 1:
            text += f" (peak {num(values.max())} at iteration {values.idxmax()})"
        parts.append(text)
    if not parts:
        return f"The reference '{ref}' has no finite values to report."
    quality = series(m, ref, QUALITY.name)
    span = f"iteration {quality.index[0]} to {quality.index[-1]}" if len(quality) else "training"
    return f"Reference ('{ref}'), mean over seeds from {span}: " + "; ".join(parts) + "."


def reading_boundaries(summary: pd.DataFrame) -> str:
    ref, top, bounds = shown_in_boundaries_figure(summary)
    rows = summary.set_index("condition")
    q = f"{QUALITY.name}_mean"

    def listed(names: list[str]) -> str:
        return ", ".join(f"{c} {num(rows.loc[c, q])}" for c in names)

    parts = [f"reference {listed(ref)}"]
    if top:
        verdicts = [difference_verdict(rows.loc[c].rename(c)) for c in top]
        parts.append(f"top-ranked mechanisms {listed(top)} ({_verdict_words(verdicts)})")
    if bounds:
        parts.append(f"boundary conditions {listed(bounds)}")
    return f"Shown: {boundaries_title(summary)}. Final mean {QUALITY.label}: " + "; ".join(parts) + "."


def _verdict_words(verdicts: list[str]) -> str:
    words = {
        "above": "above the reference",
        "below": "below the reference",
        "none": "no difference from the reference",
        "unresolved": "not resolved from the reference",
    }
    distinct = list(dict.fromkeys(verdicts))
    return ", ".join(words[v] for v in distinct) if len(distinct) > 1 else words[distinct[0]]


def reading_all_conditions(summary: pd.DataFrame, confidence: float) -> str:
    q = f"{QUALITY.name}_mean"
    ranked = summary.dropna(subset=[q]).sort_values(q, ascending=False, kind="stable")
    if ranked.empty:
        return "No condition has a finite final quality."
    best, worst = ranked.iloc[0], ranked.iloc[-1]
    text = (
        f"Final mean {QUALITY.label} spans {num(worst[q])} ({worst['condition']}) "
        f"to {num(best[q])} ({best['condition']})"
    )
    mech = summary[summary["role"] == "mechanism"]
    if len(mech):
        verdicts = mech.apply(difference_verdict, axis=1).tolist() if len(mech) else []
        count = {v: verdicts.count(v) for v in ("above", "below", "none", "unresolved")}
        res = resolution(QUALITY.name)
        text += (
            f"; of {plural(len(mech), 'mechanism')}, {count['above']} end above and {count['below']} below the "
            f"reference (the {100 * confidence:g}% paired CI excludes zero and |Δ| ≥ {res:g}), {count['none']} show "
            f"no difference (the CI lies within ±{res:g}) and {count['unresolved']} are unresolved (the CI spans zero)"
        )
        clear = mech[[v in ("above", "below") for v in verdicts]]
        if len(clear):
            text += f"; the clear differences reach |Δ| = {num(clear[f'{DIFF}_mean'].abs().max())}"
    return text + "."


def reading_modes(shares: pd.DataFrame) -> str:
    """The attractor fact: how many runs of the grid end at each end mode."""
    modes = grid_modes(shares)
    if modes.empty:
        return ""
    total = int(modes["runs"].sum())
    listed = [f"{int(r.runs)} at {mode_label(r.mode_sequence, r.mode_quality)}" for r in modes.head(3).itertuples()]
    first = listed[0].replace(" at ", f" of {total} runs end at ", 1)
    rest = len(modes) - 3
    tail = (
        f", and {plural(int(modes['runs'].iloc[3:].sum()), 'run')} at {plural(rest, 'other mode')}" if rest > 0 else ""
    )
    return ", ".join([first, *listed[1:]]) + tail + "."


def reading_end_state(m: pd.DataFrame, shares: pd.DataFrame) -> str:
    final = final_runs(m).dropna(subset=[QUALITY.name, ALIGNMENT.name])
    if final.empty:
        return "No run has finite final quality and alignment."
    text = f"{plural(len(final), 'run')} with finite end states"
    x, y = final[QUALITY.name].to_numpy(), final[ALIGNMENT.name].to_numpy()
    if len(final) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0:
        rho = stats.spearmanr(x, y).statistic
        text += f"; across them, final {QUALITY.label} and final {ALIGNMENT.label} have Spearman ρ = {num(rho)}"
    modes = reading_modes(shares)
    if modes:
        text += ". " + modes[0].upper() + modes[1:-1]
    diverged = m.groupby(["condition", "seed"])["diverged"].any()
    if diverged.any():
        text += f"; {plural(int(diverged.sum()), 'diverged run is', 'diverged runs are')} not shown"
    return text + "."


def reading_inside_vs_outside(m: pd.DataFrame, ref: str) -> str:
    gaps = gap_by_iteration(m)
    if gaps.empty:
        return "No run has finite perceived and real quality to compare."
    text = ""
    own = gaps[gaps["condition"] == ref].set_index("iteration")["gap"].sort_index()
    if len(own):
        text = (
            f"The reference's standardised gap peaks at {num(own.max(), signed=True)} at iteration {own.idxmax()} "
            f"and ends at {num(own.iloc[-1], signed=True)}"
        )
    last = gaps.loc[gaps.groupby("condition", sort=False)["iteration"].idxmax()].dropna(subset=["gap"])
    if len(last) > 1:
        high, low = last.loc[last["gap"].idxmax()], last.loc[last["gap"].idxmin()]
        text += "; at" if text else "At"
        text += (
            f" the final iteration the largest gap is {high['condition']} ({num(high['gap'], signed=True)}) "
            f"and the smallest {low['condition']} ({num(low['gap'], signed=True)})"
        )
    return (text or "The reference has no finite gap") + "."


def how_to_read(m: pd.DataFrame, facts: GridFacts, ref: str, confidence: float) -> list[str]:
    """The "How to read this" section: every metric in one line from the registry, then the derived quantities."""
    shown = [x for x in registry.METRICS if x.headline or x.name == "mode_quality"]
    lines = [
        "## How to read this",
        "",
        f"A run is one condition × one seed; iteration 0 is before training and the tables report iteration "
        f"{facts.final_iteration}, the last. Means are over seeds; CIs are {100 * confidence:g}% Student-t over seeds.",
        "",
    ]
    lines += [f"- **{x.label}** ({x.unit}; column `{x.name}`): {x.definition}." for x in shown if x.name in m.columns]
    res = resolution(QUALITY.name)
    lines += [
        f"- **Δ quality vs reference**: final {QUALITY.label} minus that of the reference `{ref}` on the same seed, "
        f'mean and paired CI; "no difference" when the CI lies within ±{res:g} q* (runs that end at the same '
        "output differ by float noise, about 1e-5).",
        "- **Peak iter (mean)**: the iteration of each run's highest real quality, averaged over seeds; "
        "**Drop from peak % (mean)**: 100·(peak − final)/|peak| per run, averaged over seeds (0: never fell back).",
        "- **Standardised gap** (last figure): judge-perceived minus real quality, each z-scored over its own run's "
        "iterations; above 0 the loop believes it is improving faster than it is.",
        "- **Roles**: the reference is the plain loop; mechanisms change how the judges learn; boundary conditions "
        "are reference bounds (a frozen judge, or an anchor that sees ground truth), not practical methods.",
        f"- **End modes**: an output is a sequence of tokens, each drawn as a glyph ({TOKEN_GLYPHS_TEXT} for tokens "
        "0–7). A run's end mode is the policy's most probable output at the last iteration; q* is its ground-truth "
        "quality (mode quality).",
    ]
    others = [x for x in registry.METRICS if x not in shown and x.name in m.columns]
    if others:
        listed = "; ".join(f"`{x.name}` ({x.definition})" for x in others)
        lines.append(f"- metrics.csv also records: {listed}.")
    return [*lines, ""]
