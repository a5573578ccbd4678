"""Figures: each answers one question, with the quantities and panels taken from the metric registry.

headline: how does the reference condition move on every headline metric? boundaries_and_best: how do the reference,
the top-ranked mechanisms and the boundary conditions compare over training (one facet each)? all_conditions: where
does every condition end, per headline metric? end_state: where do individual runs end (quality vs alignment)?
inside_vs_outside: when does the loop's belief run ahead of real quality, per condition (the belief gap)?
Modules: common (shared drawing), trends (headline, boundaries_and_best), ends (all_conditions, end_state), gap
(inside_vs_outside).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib as mpl
import pandas as pd
import seaborn as sns

from harness.report.figures.ends import fig_all_conditions, fig_end_state
from harness.report.figures.gap import fig_inside_vs_outside
from harness.report.figures.trends import (
    boundaries_title,
    fig_boundaries_and_best,
    fig_headline,
    shown_in_boundaries_figure,
)
from harness.report.metrics_table import grid_facts, prepare, reference
from harness.report.tables import summarize

FIGURE_KEYS: tuple[str, ...] = ("headline", "boundaries_and_best", "all_conditions", "end_state", "inside_vs_outside")

__all__ = ["FIGURE_KEYS", "boundaries_title", "make_figures", "shown_in_boundaries_figure"]


def make_figures(metrics: pd.DataFrame, out_dir: Path, name: str | None = None) -> dict[str, Path]:
    """Write the five PNG figures into out_dir (created if needed) and return {key: path}.

    Keys (FIGURE_KEYS): headline, boundaries_and_best, all_conditions, end_state, inside_vs_outside; see the module
    docstring for the question each answers. name: the grid's name, for titles. Diverged rows are left out.
    """
    prepared = prepare(metrics)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(prepared)
    facts = grid_facts(prepared, name)
    ref = reference(prepared)
    draw: dict[str, Callable[[Path], Path]] = {
        "headline": lambda p: fig_headline(prepared, p, facts, ref),
        "boundaries_and_best": lambda p: fig_boundaries_and_best(prepared, p, summary, ref),
        "all_conditions": lambda p: fig_all_conditions(prepared, p, summary, facts),
        "end_state": lambda p: fig_end_state(prepared, p, facts),
        "inside_vs_outside": lambda p: fig_inside_vs_outside(prepared, p, summary),
    }
    # rc_context/axes_style restore matplotlib's global state afterwards, so callers' own plots are unaffected.
    with mpl.rc_context({"axes.titlesize": 11, "axes.labelsize": 10, "svg.hashsalt": "coevolab"}):
        with sns.axes_style("whitegrid"):
            return {key: draw[key](out_dir / f"{key}.png") for key in FIGURE_KEYS}
