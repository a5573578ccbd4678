"""Turn a tidy metrics table (one row per condition × seed × iteration) into summary tables, figures and a report.

tables: per-run and per-condition summaries, the difference rule, end-mode shares; identical: conditions whose
results coincide; grid_info: q*'s scale, mechanisms and knobs from the run's grid.json; figures: the PNGs; readings:
the text; the sections of the grid's mechanisms (`harness.grid.report_section`); this module writes them all into a
run directory. The prepared table, number formatting and markdown are `harness.rendering`'s. Everything is driven by
the metric registry (`harness.engine.metrics`). The reference condition for paired differences is "baseline" if
present, else the first condition of the table. Nothing here writes the metrics table itself.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

# A report reads metrics and knobs that the built-in mechanisms declare: importing them registers them.
import harness.mechanisms  # noqa: F401
from harness.common.run_files import CLAIMS_FILE, GRID_FILE, atomic_write_bytes
from harness.common.run_tables import MEASURE_KEYS, read_run_table, with_measures
from harness.common.wording import plural
from harness.grid import registry
from harness.grid.grid_file import read_grid_file
from harness.grid.report_section import ReportInputs
from harness.grid.spec import GridSpec
from harness.inference.run_measures import metric_ranges
from harness.rendering.markdown import literal_stars, markdown_table
from harness.rendering.metrics_table import CSV_FLOAT_FORMAT, grid_facts, prepare, reference, roles
from harness.report.figures import FIGURE_KEYS, make_figures
from harness.report.findings import findings_sections
from harness.report.identical import identical_groups, identical_section
from harness.report.readings import (
    how_to_read,
    reading_all_conditions,
    reading_boundaries,
    reading_end_state,
    reading_headline,
    reading_inside_vs_outside,
    reading_modes,
)
from harness.report.tables import (
    PAIRED_CI,
    mode_shares,
    modes_markdown,
    run_summary,
    summarize,
    summary_document,
    summary_markdown,
)

__all__ = [
    "FIGURE_KEYS",
    "make_figures",
    "markdown_table",
    "mode_shares",
    "read_run_grid",
    "run_summary",
    "summarize",
    "summary_markdown",
    "write_report",
    "write_run_report",
]

REPORT_FILE = "report.md"
# Every file a grid's report writes at the top of its run directory (its figures go under FIGURES_DIR): what
# `coevolab report` writes anew. Every other file of a run directory is an input of the report, verified before it
# is read. tests/test_tampered_runs.py checks that a report writes nothing else.
REPORT_FILES = (REPORT_FILE, "summary.csv", "summary.md", CLAIMS_FILE, "attractors.csv", "frontier.csv")

FIGURE_TITLES = {
    "headline": "The reference condition over training",
    "boundaries_and_best": "Reference, top-ranked mechanisms and boundaries over training",
    "all_conditions": "Where every condition ends",
    "end_state": "Where individual runs end",
    "inside_vs_outside": "What the loop believes vs reality",
}


def _write(out_dir: Path, name: str, text: str | bytes) -> None:
    if name not in REPORT_FILES:
        # What a report writes is listed, so that `coevolab report` verifies every other file (metrics.csv.gz, the
        # per-run tables) as an input before reading it, and re-seals only what it wrote.
        raise ValueError(f"refusing to write {out_dir / name}: not one of the report's files {REPORT_FILES}")
    if isinstance(text, str) and name.endswith(".md"):
        text = literal_stars(text)
    atomic_write_bytes(out_dir / name, text.encode("utf-8") if isinstance(text, str) else text)


def write_report(
    metrics: pd.DataFrame,
    out_dir: Path,
    title: str = "Judge–policy co-evolution report",
    confidence: float = 0.95,
    grid_name: str | None = None,
    grid: GridSpec | None = None,
    how_run: str | None = None,
    figures: bool = True,
) -> None:
    """Write summary.csv, summary.md, figures/*.png and report.md into out_dir, each atomically.

    report.md holds the title, a line on the grid, "How to read this", the summary table, the conditions with
    identical results, the end-mode table and every figure (relative link) with one line of reading derived from the
    data. grid_name names the grid in headings. grid (the run's grid.json), when given, adds q*'s scale, each
    mechanism's description, the knobs the grid sets and the knob differences of identical conditions, the sections
    of the grid's mechanisms (`MechanismReport.section`, after the identical conditions), and the grid's claims
    (harness.inference.claims) a verdicts section and claims.csv; it must describe the table's conditions.
    Attractors (attractors.csv) and, where the table has KL, the overoptimization frontier (frontier.csv) follow
    the end modes. how_run: one line on how the grid was run (its seed blocks), after the line on the grid. The output
    depends only on the arguments (same inputs, same bytes). metrics.csv.gz is never written. figures=False: the text
    and tables alone, no figure drawn or linked (most of a report's time is drawing figures).
    """
    out_dir = Path(out_dir)
    prepared = prepare(metrics)
    facts = grid_facts(prepared, grid_name)
    summary = summarize(prepared, confidence)
    shares = mode_shares(prepared)
    ref = reference(prepared)
    if grid is not None:
        missing = sorted(set(prepared["condition"]) - {c.name for c in grid.conditions})
        if missing:
            raise ValueError(f"the grid does not describe conditions {missing} of the metrics table")
    groups = identical_groups(prepared)  # one result each: sections that count conditions count a group once
    identical = identical_section(prepared, grid, groups)
    _write(out_dir, "summary.csv", summary.to_csv(index=False, float_format=CSV_FLOAT_FORMAT))
    _write(out_dir, "summary.md", summary_document(summary, facts, confidence, "\n".join(identical)))
    drawn = make_figures(prepared, out_dir / "figures", grid_name) if figures else {}
    readings = {
        "headline": reading_headline(prepared, ref),
        "boundaries_and_best": reading_boundaries(summary),
        "all_conditions": reading_all_conditions(summary, groups),
        "end_state": reading_end_state(prepared, shares),
        "inside_vs_outside": reading_inside_vs_outside(prepared, ref),
    }
    diverged = (
        f"{plural(facts.diverged_runs, 'run')} diverged (left out of means and plots, counted in the Diverged "
        "runs column)."
        if facts.diverged_runs
        else "No run diverged."
    )
    lines = [
        f"# {title}",
        "",
        f"{facts.grid_text}, {plural(facts.n_runs, 'run')}, outer iterations {int(prepared['iteration'].min())}.."
        f"{facts.final_iteration} (0 = before training). Reference for paired differences: `{ref}`. {diverged}",
        "",
        *([how_run, ""] if how_run else []),
        *how_to_read(prepared, facts, ref, confidence, grid, roles(prepared)),
        "## Summary at the final iteration",
        "",
        f"{facts.heading()} Mean ± std over seeds with {100 * confidence:g}% Student-t CIs of means; Δ is paired on "
        f"shared seeds, its CI {PAIRED_CI}, descriptive (see How to read this). Conditions in the grid's "
        "order, as in every table."
        + (" Conditions with identical results are listed below the table." if identical else ""),
        "",
        summary_markdown(summary),
    ]
    if identical:
        lines += ["### Conditions with identical results", "", *identical]
    lines += mechanism_sections(prepared, grid, out_dir, figures)
    if not shares.empty:
        lines += [
            "## Where runs end",
            "",
            f"{facts.heading()} Runs per end mode (the policy's most probable output, with its q*): the grid's "
            f"most common modes as columns, the runs at every other mode in the last. {reading_modes(shares)}",
            "",
            modes_markdown(shares, summary["condition"].tolist()),
        ]
    claims = grid.claims if grid is not None else ()
    ranges = claim_ranges(grid)
    lines += findings_sections(
        prepared,
        shares,
        out_dir,
        facts,
        claims,
        groups,
        lambda name, text: _write(out_dir, name, text),
        figures,
        ranges=ranges,
    )
    lines += ["## Figures", ""] if figures else []
    for key, path in drawn.items():
        relative = path.relative_to(out_dir).as_posix()
        lines += [f"### {FIGURE_TITLES[key]}", "", f"![{FIGURE_TITLES[key]}]({relative})", "", readings[key], ""]
    _write(out_dir, REPORT_FILE, "\n".join(lines))


def mechanism_sections(prepared: pd.DataFrame, grid: GridSpec | None, out_dir: Path, figures: bool) -> list[str]:
    """The sections of the grid's mechanisms (`MechanismReport.section`), in catalog order; none without a grid."""
    if grid is None:
        return []
    inputs = ReportInputs(
        table=prepared, knobs=grid.condition_knobs, world=grid.world, out_dir=out_dir, figures=figures
    )
    sections = [m.report.section for m in grid.active_mechanisms if m.report and m.report.section]
    return [line for section in sections for line in section(inputs)]


def report_title(grid_name: str) -> str:
    return f"coevolab report: {grid_name}"


def claim_ranges(grid: GridSpec | None) -> dict[str, tuple[float, float]] | None:
    """The metrics' ranges in the grid's world, which the verdicts' equivalence margins read (None without a grid)."""
    return metric_ranges(grid.world) if grid is not None else None


def run_report_table(run_dir: Path, metrics: pd.DataFrame) -> pd.DataFrame:
    """The table a run directory's report is rendered and its claims judged from: `metrics` with the measures of the
    directory's per-run tables joined (`with_table_measures`), prepared. The report and `harness.load_result` both
    read a run through it, so they judge the same claims on the same values."""
    return prepare(with_table_measures(run_dir, metrics))


def with_table_measures(run_dir: Path, metrics: pd.DataFrame) -> pd.DataFrame:
    """`metrics` with the measures of every per-run table the run directory holds joined on its rows: each table of
    a registered mechanism that declares measures (`RunTable.measures`, e.g. best-of-n's measures of
    overoptimization), computed from the metrics and the table's rows (`read_run_table`); `metrics` as it is where the
    directory holds none of them."""
    for table in registry.measured_tables():
        rows = read_run_table(run_dir, table.name)
        if rows is not None and not rows.empty:
            assert table.compute_measures is not None  # registration refuses measures without it
            measures = table.compute_measures(metrics, rows)
            missing = [column for column in (*MEASURE_KEYS, *table.measures) if column not in measures.columns]
            if missing:
                raise registry.MechanismError(
                    f"table '{table.name}': compute_measures returns no column {', '.join(map(repr, missing))}"
                )
            # Only the declared measures join, as float64 (what claims and run measures read), whatever else it returns.
            declared = measures[[*MEASURE_KEYS, *table.measures]].astype(dict.fromkeys(table.measures, "float64"))
            metrics = with_measures(metrics, declared)
    return metrics


def read_run_grid(run_dir: Path) -> GridSpec | None:
    """The grid a run directory records in its grid.json (None without one); ValueError if it does not validate."""
    path = Path(run_dir) / GRID_FILE
    return read_grid_file(path) if path.is_file() else None


def write_run_report(
    run_dir: Path,
    metrics: pd.DataFrame,
    grid_name: str,
    grid: GridSpec | None = None,
    how_run: str | None = None,
    figures: bool = True,
) -> None:
    """A run directory's report, as the run writes it and as `coevolab report` re-renders it (same bytes).

    grid: the run's grid (the run passes the grid it wrote to grid.json, `coevolab report` what read_run_grid reads
    back), for q*'s scale, mechanism descriptions and knobs. how_run: the line on how a grid run in seed blocks was
    run (its manifest's execution line). figures=False: text and tables only (see `write_report`). The measures of the
    run directory's per-run tables (best_of_n.parquet's measures of overoptimization, say) join the metrics
    (`with_table_measures`), so that the grid's claims may read them.
    """
    write_report(
        with_table_measures(run_dir, metrics),
        run_dir,
        title=report_title(grid_name),
        grid_name=grid_name,
        grid=grid,
        how_run=how_run,
        figures=figures,
    )
