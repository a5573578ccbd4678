"""Text derived from the data: one reading under each figure, the end-mode sentence, and "How to read this"."""

from __future__ import annotations

import pandas as pd

from harness.engine import metrics as registry
from harness.engine.metrics import QUALITY_RESOLUTION
from harness.grid.spec import GridSpec
from harness.rendering.metrics_table import (
    ALIGNMENT,
    PERCEIVED,
    QUALITY,
    GridFacts,
    belief_gap,
    final_runs,
    headline_metrics,
    num,
    plural,
    series,
)
from harness.report.figures import boundaries_title, shown_in_boundaries_figure
from harness.report.grid_info import condition_lines, knob_lines, q_star_line
from harness.report.identical import counted_once, distinct
from harness.report.tables import (
    DIFF,
    FELL_FROM_PEAK,
    FELL_FROM_PEAK_MEANING,
    PAIRED_CI,
    descriptive_rule,
    mode_label,
    split_modes,
)

TOKEN_GLYPHS_TEXT = "↑ ↗ → ↘ ↓ ↙ ← ↖"


def reading_headline(prepared: pd.DataFrame, ref: str) -> str:
    """The reference's first → last mean value of every headline metric; quality's peak only when the mean curve
    ends at least QUALITY_RESOLUTION below it (the argmax of a flat curve says nothing)."""
    parts = []
    for x in headline_metrics(prepared):
        values = series(prepared, ref, x.name)
        if values.empty:
            continue
        text = f"{x.axis_label} {num(values.iloc[0])} → {num(values.iloc[-1])}"
        if x is QUALITY and values.max() - values.iloc[-1] >= QUALITY_RESOLUTION:
            text += f" (below its peak {num(values.max())} at iteration {values.idxmax()})"
        parts.append(text)
    if not parts:
        return f"The reference '{ref}' has no finite values to report."
    quality = series(prepared, ref, QUALITY.name)
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
        parts.append(f"top-ranked mechanisms by final mean {QUALITY.label} {listed(top)}")
    if bounds:
        parts.append(f"boundary conditions {listed(bounds)}")
    return f"Shown: {boundaries_title(summary)}. Final mean {QUALITY.label}: " + "; ".join(parts) + "."


def reading_all_conditions(summary: pd.DataFrame, groups: list[tuple[str, ...]]) -> str:
    """The span of final mean quality, and the mechanisms' largest paired mean difference from the reference: numbers
    only (which differences count is the claims' verdicts).

    groups: the identical groups (identical.identical_groups); a group is one result, so it is counted once and the
    sentence names it.
    """
    q = f"{QUALITY.name}_mean"
    ranked = summary.dropna(subset=[q]).sort_values(q, ascending=False, kind="stable")
    if ranked.empty:
        return "No condition has a finite final quality."
    best, worst = ranked.iloc[0], ranked.iloc[-1]
    text = (
        f"Final mean {QUALITY.label} spans {num(worst[q])} ({worst['condition']}) "
        f"to {num(best[q])} ({best['condition']})"
    )
    mechanisms = summary.loc[summary["role"] == "mechanism", "condition"].tolist()
    if mechanisms:
        mech = summary.set_index("condition").loc[distinct(mechanisms, groups)].reset_index()
        once = counted_once(mechanisms, groups)
        results = f" ({plural(len(mech), 'distinct result')}: {once})" if once else ""
        differences = mech[f"{DIFF}_mean"].dropna()
        if len(differences):
            low, high = differences.min(), differences.max()
            text += (
                f"; the {plural(len(mechanisms), 'mechanism')}{results} differ from the reference by mean paired "
                f"Δ {num(low, signed=True)} to {num(high, signed=True)} q* (descriptive; the claims' verdicts say "
                "which differences the verdict rule finds)"
            )
        else:
            text += f"; the {plural(len(mechanisms), 'mechanism')}{results} share no seed with the reference"
    return text + "."


def reading_modes(shares: pd.DataFrame) -> str:
    """How many runs of the grid end at each end mode: the modes that are the end-mode table's columns, then the runs
    at every other mode, counted as that table's last column counts them."""
    top, rest = split_modes(shares)
    if top.empty:
        return ""
    total = int(top["runs"].sum() + rest["runs"].sum())
    listed = [f"{int(r.runs)} at {mode_label(r.mode_sequence, r.mode_quality)}" for r in top.itertuples()]
    listed[0] = listed[0].replace(" at ", f" of {total} runs end at ", 1)
    if len(rest):
        listed.append(f"and {plural(int(rest['runs'].sum()), 'run')} at {plural(len(rest), 'other mode')}")
    return ", ".join(listed) + "."


def reading_end_state(prepared: pd.DataFrame, shares: pd.DataFrame) -> str:
    final = final_runs(prepared).dropna(subset=[QUALITY.name, ALIGNMENT.name])  # the runs the figure draws
    if final.empty:
        return "No run has finite final quality and alignment."
    text = f"{plural(len(final), 'run')} with finite final quality and alignment"
    modes = reading_modes(shares)
    if modes:
        text += ". " + modes[0].upper() + modes[1:-1]
    diverged = prepared.groupby(["condition", "seed"])["diverged"].any()
    if diverged.any():
        text += f"; {plural(int(diverged.sum()), 'diverged run is', 'diverged runs are')} not shown"
    return text + "."


def reading_inside_vs_outside(prepared: pd.DataFrame, ref: str) -> str:
    gaps = belief_gap(prepared)
    if gaps.empty:
        return "No run has finite perceived and real quality to compare."
    text = ""
    own = gaps[gaps["condition"] == ref].set_index("iteration")["gap"].sort_index()
    if len(own):
        text = f"The reference's belief gap ends at {num(own.iloc[-1], signed=True)} q*"
        if own.max() - own.iloc[-1] >= QUALITY_RESOLUTION:  # a peak of a flat curve would be noise
            text += f" (down from {num(own.max(), signed=True)} at iteration {own.idxmax()})"
    last = gaps.loc[gaps.groupby("condition", sort=False)["iteration"].idxmax()].dropna(subset=["gap"])
    if len(last) > 1:
        high, low = last.loc[last["gap"].idxmax()], last.loc[last["gap"].idxmin()]
        text += "; at" if text else "At"
        text += (
            f" the final iteration the largest gap is {high['condition']} ({num(high['gap'], signed=True)}) "
            f"and the smallest {low['condition']} ({num(low['gap'], signed=True)})"
        )
    return (text or "The reference has no finite gap") + "." + _scale_stretch(prepared, last)


def _scale_stretch(prepared: pd.DataFrame, last: pd.DataFrame) -> str:
    """A sentence on the conditions whose final belief gap is positive (≥ QUALITY_RESOLUTION) although their judges
    end ranking outputs at least as well as before training (mean alignment at the end ≥ at iteration 0): there the
    gap cannot be belief in gains the policy did not make; it is the judges' score scale stretching. "" when none.

    last: the belief gap's final row per condition (belief_gap rows).
    """
    listed = []
    for row in last[last["gap"] >= QUALITY_RESOLUTION].itertuples(index=False):
        alignment = series(prepared, row.condition, ALIGNMENT.name)
        if alignment.empty or alignment.iloc[-1] < alignment.iloc[0]:
            continue
        perceived, real = (series(prepared, row.condition, x.name).iloc[-1] for x in (PERCEIVED, QUALITY))
        listed.append(
            f"`{row.condition}` (gap {num(row.gap, signed=True)}; judge alignment {num(alignment.iloc[0])} → "
            f"{num(alignment.iloc[-1])}; judge-perceived quality {num(perceived)} against real {num(real)})"
        )
    if not listed:
        return ""
    names = ", ".join(listed[:-1]) + (" and " if len(listed) > 1 else "") + listed[-1]
    return (
        f" In {names}, the judges end ranking outputs at least as well as before training, so the gap there is not "
        "belief in gains the policy did not make but is dominated by the judges' score scale stretching (the gap "
        "counts any stretch as belief)."
    )


def how_to_read(
    prepared: pd.DataFrame, facts: GridFacts, ref: str, confidence: float, grid: GridSpec | None, role: dict[str, str]
) -> list[str]:
    """The "How to read this" section: every metric in one line from the registry, q*'s scale, the difference rule,
    the derived quantities, and (with the grid) the conditions' mechanisms and the knobs they set."""
    shown = [x for x in registry.all_metrics() if x.headline or x.name == "mode_quality"]
    steps = f"; an outer iteration is {plural(grid.run.steps_per_iteration, 'inner policy step')}" if grid else ""
    lines = [
        "## How to read this",
        "",
        f"A run is one condition × one seed; iteration 0 is before training and the tables report iteration "
        f"{facts.final_iteration}, the last{steps}. Means are over seeds; CIs of means are {100 * confidence:g}% "
        f"Student-t over seeds, CIs of paired differences (Δ) {PAIRED_CI}; a claim's mean carries its own "
        "interval (a betting confidence sequence, valid without symmetry), described in Which claims hold.",
        "",
    ]
    lines += [
        f"- **{x.label}** ({x.unit}; column `{x.name}`): {x.definition}." for x in shown if x.name in prepared.columns
    ]
    if grid:
        lines.append(q_star_line(grid))
    lines += [
        f"- **Δ quality vs reference**: final {QUALITY.label} minus that of the reference `{ref}` on the same seed, "
        f"mean and paired CI. {descriptive_rule(confidence)}.",
        f"- **{FELL_FROM_PEAK}**: {FELL_FROM_PEAK_MEANING}.",
        "- **Belief gap** (last figure): per run, judge-perceived quality gained since iteration 0 minus real quality "
        "gained since iteration 0, averaged over seeds; it is 0 at iteration 0 by construction. Judges are pretrained "
        "by regression on q*, so both gains start in q* units; above 0 the judges credit the policy with more "
        "improvement than it made (self-labelled updates that stretch a judge's scale count as belief too).",
        "- **Roles**: the reference is the plain loop; mechanisms change how the judges learn; boundary conditions "
        "are reference bounds (a frozen judge, or an anchor that sees ground truth), not practical methods.",
    ]
    if grid:
        lines += condition_lines(grid, role)
        lines += knob_lines(grid, list(role))
    lines.append(
        f"- **End modes**: an output is a sequence of tokens, each drawn as a glyph ({TOKEN_GLYPHS_TEXT} for tokens "
        "0–7). A run's end mode is the policy's most probable output at the last iteration; q* is its ground-truth "
        "quality (mode quality)."
    )
    others = [x for x in registry.all_metrics() if x not in shown and x.name in prepared.columns]
    if others:
        listed = "; ".join(f"`{x.name}` ({x.definition})" for x in others)
        lines.append(f"- metrics.csv.gz also records: {listed}.")
    return [*lines, ""]
