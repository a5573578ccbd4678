"""Attractors: which end mode each condition's runs fall into, and how often a mechanism escapes the reference's.

A run's end mode is the policy's most probable output at the final iteration. Most runs of most conditions end at
the same few outputs, so a condition's mean quality is largely a mixture of mode shares; this module reports those
shares directly, and the probability of escaping the reference condition's dominant mode (with an exact
Clopper–Pearson interval from scipy.stats.binomtest).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import scipy.stats
import seaborn as sns

from harness.common.wording import plural
from harness.engine.metrics import QUALITY_RESOLUTION
from harness.rendering.figure_parts import new_figure, save
from harness.rendering.markdown import markdown_table
from harness.rendering.metrics_table import GridFacts, conditions, num
from harness.report.identical import distinct
from harness.report.tables import mode_label, split_modes

ESCAPE_COLUMNS = [
    "condition",
    "runs",
    "at_dominant",
    "escaped",
    "escape_share",
    "escape_ci_low",
    "escape_ci_high",
    "escaped_higher",
    "escaped_lower",
]


def dominant_mode(shares: pd.DataFrame, ref: str) -> tuple[str, float]:
    """The reference condition's most common end mode: (glyphs, q*)."""
    own = shares[shares["condition"] == ref].sort_values(["runs", "mode_quality"], ascending=False, kind="stable")
    top = own.iloc[0]
    return str(top["mode_sequence"]), float(top["mode_quality"])


def escape_table(shares: pd.DataFrame, ref: str, confidence: float = 0.95) -> pd.DataFrame:
    """Per condition: runs away from the reference's dominant mode, their share with an exact CI, and how many of
    them ended at a mode of higher or lower q* (by more than the quality resolution)."""
    if shares.empty:
        return pd.DataFrame(columns=ESCAPE_COLUMNS)
    sequence, quality = dominant_mode(shares, ref)
    r = QUALITY_RESOLUTION
    rows = []
    for condition, own in shares.groupby("condition", sort=False):
        runs = int(own["runs"].sum())
        away = own[own["mode_sequence"] != sequence]
        escaped = int(away["runs"].sum())
        interval = scipy.stats.binomtest(escaped, runs).proportion_ci(confidence, method="exact")
        rows.append(
            {
                "condition": condition,
                "runs": runs,
                "at_dominant": runs - escaped,
                "escaped": escaped,
                "escape_share": escaped / runs,
                "escape_ci_low": interval.low,
                "escape_ci_high": interval.high,
                "escaped_higher": int(away.loc[away["mode_quality"] > quality + r, "runs"].sum()),
                "escaped_lower": int(away.loc[away["mode_quality"] < quality - r, "runs"].sum()),
            }
        )
    return pd.DataFrame(rows, columns=ESCAPE_COLUMNS)


def escape_markdown(escapes: pd.DataFrame, order: list[str]) -> str:
    """The escape table for report.md, conditions in the given order."""
    table = escapes.set_index("condition").loc[[c for c in order if c in set(escapes["condition"])]].reset_index()
    header = ["Condition", "Runs", "At the dominant mode", "Escaped", "Escape share [95% CI]", "Higher q*", "Lower q*"]
    rows = [
        [
            row.condition,
            str(row.runs),
            str(row.at_dominant),
            str(row.escaped),
            f"{num(row.escape_share, 2)} [{num(row.escape_ci_low, 2)}, {num(row.escape_ci_high, 2)}]",
            str(row.escaped_higher),
            str(row.escaped_lower),
        ]
        for row in table.itertuples(index=False)
    ]
    return markdown_table(header, rows, right=[False, True, True, True, True, True, True])


def attractor_figure(shares: pd.DataFrame, path: Path, facts: GridFacts) -> Path:
    """Stacked bars: per condition, the share of its runs at each of the grid's most common end modes.

    The modes and the pooled "other modes" bar are those of the end-mode table (tables.split_modes), so the figure
    and the table show the same modes and the same "other" bucket.
    """
    modes, rest = split_modes(shares)
    order = conditions(shares)
    labels = [mode_label(s, q) for s, q in zip(modes["mode_sequence"], modes["mode_quality"], strict=True)]
    wide = shares.pivot_table(index="condition", columns="mode_sequence", values="share", aggfunc="sum", fill_value=0.0)
    wide = wide.reindex(index=order, fill_value=0.0)
    kept = wide.reindex(columns=modes["mode_sequence"], fill_value=0.0)
    other = (1.0 - kept.sum(axis=1)).clip(lower=0.0)
    colours = sns.color_palette("colorblind", len(labels))
    fig = new_figure(10.5, 0.32 * len(order) + 2.0)
    ax = fig.add_subplot()
    y = np.arange(len(order))
    left = np.zeros(len(order))
    for column, label, colour in zip(kept.columns, labels, colours, strict=True):
        ax.barh(y, kept[column], left=left, color=colour, label=label, edgecolor="white", linewidth=0.5)
        left += kept[column].to_numpy()
    ax.barh(y, other, left=left, color="0.8", label=plural(len(rest), "other mode"), edgecolor="white", linewidth=0.5)
    runs = shares.groupby("condition", sort=False)["runs"].sum().reindex(order)
    ax.set_yticks(y, [f"{c}  (n={n})" for c, n in zip(order, runs, strict=True)], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the condition's runs ending at the mode")
    ax.set_title(f"End modes per condition ({facts.seed_text}; final iteration {facts.final_iteration})")
    ax.legend(title="end mode (glyphs, q*)", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return save(fig, path)


def attractor_reading(escapes: pd.DataFrame, shares: pd.DataFrame, ref: str, groups: list[tuple[str, ...]]) -> str:
    """One paragraph: the reference's dominant mode, and which conditions escape it most and least.

    groups: the identical groups (identical.identical_groups); a group is one result, so it is ranked and counted
    among ties once, under its first member, and its other members are named beside it.
    """
    if escapes.empty:
        return "No end modes were recorded."
    sequence, quality = dominant_mode(shares, ref)
    own = escapes.set_index("condition")
    at = own.loc[ref, "at_dominant"] / own.loc[ref, "runs"]
    kept = distinct([c for c in escapes["condition"] if c != ref], groups)
    ranked = escapes.set_index("condition").loc[kept].reset_index()
    ranked = ranked.sort_values("escape_share", ascending=False, kind="stable")
    # The members a kept condition stands for, named beside it.
    same = {c: "".join(f" = `{o}`" for o in group if o != c) for group in groups for c in group if c in kept}
    lines = [
        f"The reference `{ref}` ends at {mode_label(sequence, quality)} in {num(100 * at, 0)}% of its runs. "
        "A condition's escape share is the fraction of its runs that end anywhere else (exact 95% CI); "
        "*higher* and *lower* count escapes to a mode whose q* is above or below that one."
    ]
    if not ranked.empty:
        most, least = ranked.iloc[0], ranked.iloc[-1]
        tied = int((ranked["escape_share"] == least["escape_share"]).sum()) - 1
        ties = f", tied with {plural(tied, 'other condition')}" if tied else ""
        tied_names = ranked.loc[ranked["escape_share"] == least["escape_share"], "condition"]
        if any(same.get(c) for c in tied_names if c != least["condition"]):
            ties += "; identical results counted once"
        lines.append(
            f"Most escapes: `{most['condition']}`{same.get(most['condition'], '')} ({most['escaped']} of "
            f"{most['runs']}, {most['escaped_higher']} to higher q*); fewest: `{least['condition']}`"
            f"{same.get(least['condition'], '')} ({least['escaped']} of {least['runs']}{ties})."
        )
    return " ".join(lines)
