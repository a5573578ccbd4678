"""Figures: each answers one question, with the quantities and panels taken from the metric registry.

headline: how does the reference condition move on every headline metric? boundaries_and_best: how do the reference,
the top-ranked mechanisms and the boundary conditions compare over training (one facet each)? all_conditions: where
does every condition end, per headline metric? end_state: where do individual runs end (quality vs alignment)?
inside_vs_outside: when does the loop's belief run ahead of real quality, per condition (the belief gap)?
Modules: trends (headline,
boundaries_and_best), ends (all_conditions, end_state), gap (inside_vs_outside), overoptimization (Gao-style
frontiers and performance profiles, not among the report's default figures). `make_figures` writes them as PNGs;
`draw_figures` returns them as matplotlib Figures. They are drawn with `harness.rendering`'s parts (figure_parts:
shared drawing; bands: 95% bootstrap bands over seeds, performance profiles).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import matplotlib as mpl
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from harness.rendering.figure_parts import fitted
from harness.rendering.metrics_table import GridFacts, grid_facts, prepare, reference
from harness.report.figures.ends import draw_all_conditions, draw_end_state, fig_all_conditions, fig_end_state
from harness.report.figures.gap import draw_inside_vs_outside, fig_inside_vs_outside
from harness.report.figures.trends import (
    boundaries_title,
    draw_boundaries_and_best,
    draw_headline,
    fig_boundaries_and_best,
    fig_headline,
    shown_in_boundaries_figure,
)
from harness.report.tables import summarize

FIGURE_KEYS: tuple[str, ...] = ("headline", "boundaries_and_best", "all_conditions", "end_state", "inside_vs_outside")

__all__ = ["FIGURE_KEYS", "boundaries_title", "draw_figures", "make_figures", "shown_in_boundaries_figure"]


def _prepared(metrics: pd.DataFrame, name: str | None) -> tuple[pd.DataFrame, pd.DataFrame, GridFacts, str]:
    """What the figures are drawn from: the prepared table, its summary, the grid's facts and the reference."""
    prepared = prepare(metrics)
    return prepared, summarize(prepared), grid_facts(prepared, name), reference(prepared)


@contextlib.contextmanager
def _figure_style() -> Iterator[None]:
    """The report's figure style; rc_context/axes_style restore matplotlib's global state afterwards, so callers'
    own plots are unaffected."""
    with mpl.rc_context({"axes.titlesize": 11, "axes.labelsize": 10, "svg.hashsalt": "coevolab"}):
        with sns.axes_style("whitegrid"):
            yield


def make_figures(metrics: pd.DataFrame, out_dir: Path, name: str | None = None) -> dict[str, Path]:
    """Write the five PNG figures into out_dir (created if needed) and return {key: path}.

    Keys (FIGURE_KEYS): headline, boundaries_and_best, all_conditions, end_state, inside_vs_outside; see the module
    docstring for the question each answers. name: the grid's name, for titles. Diverged rows are left out.
    """
    prepared, summary, facts, ref = _prepared(metrics, name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write: dict[str, Callable[[Path], Path]] = {
        "headline": lambda p: fig_headline(prepared, p, facts, ref),
        "boundaries_and_best": lambda p: fig_boundaries_and_best(prepared, p, summary, ref),
        "all_conditions": lambda p: fig_all_conditions(prepared, p, summary, facts),
        "end_state": lambda p: fig_end_state(prepared, p, facts),
        "inside_vs_outside": lambda p: fig_inside_vs_outside(prepared, p, summary),
    }
    with _figure_style():
        return {key: write[key](out_dir / f"{key}.png") for key in FIGURE_KEYS}


def draw_figures(
    metrics: pd.DataFrame, name: str | None = None, keys: Sequence[str] = FIGURE_KEYS
) -> dict[str, Figure]:
    """The figures `make_figures` writes, as matplotlib Figures instead of PNG files.

    Args:
        metrics: a tidy metrics table (one row per condition × seed × iteration), as in metrics.csv.gz.
        name: the grid's name, for titles.
        keys: which figures to draw, a subset of FIGURE_KEYS.

    Returns:
        {key: Figure}, in the order of `keys`. Each Figure is bound to the Agg canvas without pyplot; saving it with
        `harness.rendering.figure_parts.save` gives the bytes of the PNG `make_figures` writes.
    """
    unknown = [key for key in keys if key not in FIGURE_KEYS]
    if unknown:
        raise ValueError(f"unknown figure keys {unknown}; known: {', '.join(FIGURE_KEYS)}")
    prepared, summary, facts, ref = _prepared(metrics, name)
    draw: dict[str, Callable[[], Figure]] = {
        "headline": lambda: draw_headline(prepared, facts, ref),
        "boundaries_and_best": lambda: draw_boundaries_and_best(prepared, summary, ref),
        "all_conditions": lambda: draw_all_conditions(prepared, summary, facts),
        "end_state": lambda: draw_end_state(prepared, facts),
        "inside_vs_outside": lambda: draw_inside_vs_outside(prepared, summary),
    }
    with _figure_style():
        return {key: fitted(draw[key]()) for key in keys}
