"""A study's report: its shapes side by side, per-run measures by shape and condition, and the verdicts on the
claims within every shape and across shapes (`harness.inference.across_shapes`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import seaborn as sns

from harness.common.run_files import atomic_write_text
from harness.grid.memory import parameter_count
from harness.grid.study import StudySpec
from harness.inference.run_measures import DERIVED_MEASURES
from harness.rendering.figure_parts import new_figure, save
from harness.rendering.markdown import literal_stars, markdown_table
from harness.rendering.metrics_table import num
from harness.report.overoptimization import overoptimization_section

SHAPE_COLUMNS = ["shape", "outputs", "vocab_size", "seq_len", "q_star", "interaction_order"]
MODEL_COLUMNS = ["policy_family", "policy_parameters", "judge_family", "judge_parameters"]
# The measures of the by-shape table, in its order: (column, header).
SUMMARY_MEASURES = (
    ("policy_quality", "real quality"),
    ("share_of_q_star_range", "share of q*'s range"),
    ("end_mode_gap", "end mode's gap to best"),
    ("ceiling_iteration", "ceiling iteration"),
    ("entropy_collapse_iteration", "entropy < 1 nat at"),
    ("at_dominant_mode", "at dominant mode"),
    ("judge_alignment", "judge alignment"),
)
FIGURE = "figures/study_share_of_range.png"


def _frame(table: pd.DataFrame) -> str:
    """A DataFrame as a markdown table: floats to 3 decimals (p-values to 3 significant digits), numbers right."""
    numeric = [pd.api.types.is_numeric_dtype(table[column]) for column in table.columns]

    def cell(column: str, value: object) -> str:
        if isinstance(value, float):
            return f"{value:.3g}" if column.startswith("p_") and pd.notna(value) else num(value)
        return str(value)

    rows = [[cell(c, v) for c, v in zip(table.columns, row, strict=True)] for row in table.itertuples(index=False)]
    return markdown_table(list(table.columns), rows, numeric)


def shape_table(study: StudySpec) -> pd.DataFrame:
    """One row per shape: its world and networks (parameter counts from `memory.parameter_count`)."""
    rows = []
    for shape in study.shapes:
        world, model = shape.grid.world, shape.grid.model
        policy, judge = parameter_count(world.vocab_size, world.seq_len, model)
        rows.append(
            {
                "shape": shape.name,
                "outputs": world.n_outputs,
                "vocab_size": world.vocab_size,
                "seq_len": world.seq_len,
                "q_star": world.q_star,
                "interaction_order": world.interaction_order if world.q_star == "rugged" else 0,
                "policy_family": model.policy.family,
                "policy_parameters": policy,
                "judge_family": model.judge.family,
                "judge_parameters": judge,
                "conditions": len(shape.grid.conditions),
                "seeds": len(shape.grid.run.seeds),
            }
        )
    return pd.DataFrame(rows)


def by_shape(measures: pd.DataFrame) -> pd.DataFrame:
    """Mean of each SUMMARY_MEASURES column per (shape, condition), in the measures' order of first appearance."""
    columns = [column for column, _ in SUMMARY_MEASURES]
    grouped = measures.groupby(["shape", "condition"], sort=False)
    table = grouped[columns].mean()
    table.insert(0, "runs", grouped.size())
    return table.reset_index()


def _figure(measures: pd.DataFrame, run_dir: Path) -> str:
    """Share of q*'s range reached, by shape and condition (mean and 95% bootstrap interval over runs)."""
    figure = new_figure(width=max(6.0, 0.9 * measures["shape"].nunique() + 3), height=4.0)
    axes = figure.add_subplot()
    sns.pointplot(
        data=measures,
        x="shape",
        y="share_of_q_star_range",
        hue="condition",
        errorbar=("ci", 95),
        seed=0,
        dodge=0.4,
        linestyle="none",
        ax=axes,
    )
    axes.set_ylabel("final real quality, share of q*'s range")
    axes.set_xlabel("")
    axes.tick_params(axis="x", labelrotation=30)
    save(figure, run_dir / FIGURE)
    return FIGURE


def _across_lines(across: pd.DataFrame) -> list[str]:
    if across.empty:
        return ["No claims across shapes."]
    shown = across.assign(
        interval=[
            f"[{num(low)}, {num(high)}] at {level:.3g}" if pd.notna(low) else "–"
            for low, high, level in zip(across["ci_low"], across["ci_high"], across["ci_level"], strict=True)
        ]
    )
    columns = ["claim", "statement", "kind", "measure", "shape", "than_shape", "effect", "interval"]
    columns += ["p_value", "p_adjusted", "verdict", "why"]
    return [_frame(shown[columns]), ""]


def study_report(
    study: StudySpec,
    measures: pd.DataFrame,
    within: pd.DataFrame,
    across: pd.DataFrame,
    run_dir: Path,
    how_run: str,
    figures: bool = True,
) -> None:
    """Write report.md (and its figure) for a study whose shapes' runs are under run_dir/shapes/. figures=False:
    the text alone, its figure neither drawn nor linked."""
    shapes = shape_table(study)
    summary = by_shape(measures)
    lines = [
        f"# Study {study.name}: {len(study.shapes)} shapes",
        "",
        how_run,
        "",
        "## Shapes",
        "",
        _frame(shapes),
        "",
        "Each shape's own report: " + ", ".join(f"[{s.name}](shapes/{s.name}/report.md)" for s in study.shapes) + ".",
        "",
        "## Per-run measures by shape and condition (means over runs)",
        "",
        _frame(summary.rename(columns=dict(SUMMARY_MEASURES))),
        "",
        *(f"- {name}: {meaning}." for name, meaning in DERIVED_MEASURES.items()),
        "",
        *([f"![share of q*'s range by shape]({_figure(measures, run_dir)})", ""] if figures else []),
        *overoptimization_section(
            study,
            run_dir,
            lambda shape: run_dir / "shapes" / shape,
            dict(zip(shapes["shape"], shapes["judge_parameters"], strict=True)),
            lambda name, text: atomic_write_text(run_dir / name, text),
            figures,
            (within, across, measures),
        ),
        "## Claims across shapes",
        "",
        "One family, Holm-adjusted. Between two shapes: paired by seed (seed s of every shape draws from the same "
        "streams), the per-seed differences resolved at the claim's resolution, an exact sign test on the seeds that "
        "differ, the BCa interval of the mean difference at the adjusted level. In every shape: the within-shape "
        "verdicts (seed-paired, adjusted within each shape's family), p the largest of them.",
        "",
        *_across_lines(across),
    ]
    if not within.empty:
        columns = ["shape", "claim", "effect", "ci_low", "ci_high", "p_adjusted", "verdict"]
        lines += ["## Claims within each shape", "", _frame(within[columns]), ""]
    atomic_write_text(run_dir / "report.md", literal_stars("\n".join(lines).rstrip("\n") + "\n"))
