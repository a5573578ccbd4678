"""Meta-correction, condition by condition: did it fire, on which held-out draw, and what it changed.

Meta-correction steps a judge on held-out q*-labelled pairs only while the judge's accuracy on them is below a
threshold, so whether it ever acts depends on the draw of pairs as much as on the judges. Each condition with
held-out pairs is set beside its twin: the condition of the grid with the same knobs and meta-correction off.
"""

from __future__ import annotations

import pandas as pd

from harness.grid import GridSpec
from harness.knobs import Knobs
from harness.report.data import conditions, num
from harness.report.grid_info import DEFAULTS
from harness.report.markdown import markdown_table
from harness.wording import plural

_META_KNOBS = ("meta_holdout_fraction", "meta_holdout_seed", "meta_update_every", "meta_accuracy_threshold")


def _without_meta(knobs: Knobs) -> Knobs:
    return knobs.model_copy(update={name: getattr(DEFAULTS, name) for name in _META_KNOBS})


def meta_twins(grid: GridSpec) -> dict[str, str | None]:
    """Each condition with held-out pairs -> the first condition with the same knobs and meta off (None if absent)."""
    twins: dict[str, str | None] = {}
    for condition in grid.conditions:
        if condition.knobs.meta_holdout_fraction == 0:
            continue
        target = _without_meta(condition.knobs)
        twins[condition.name] = next((c.name for c in grid.conditions if c.knobs == target), None)
    return twins


def meta_table(m: pd.DataFrame, grid: GridSpec) -> pd.DataFrame:
    """Per condition with held-out pairs: its draw, the judges' held-out accuracy before training, corrections,
    final quality, and the paired final-quality change from its twin without meta (mean over shared seeds).

    m: a prepared metrics table; seeds and iterations are those it holds.
    """
    last = int(m["iteration"].max())
    rows = []
    for name, twin in meta_twins(grid).items():
        if name not in conditions(m):
            continue
        runs = m[m["condition"] == name]
        start, end = runs[runs["iteration"] == 0], runs[runs["iteration"] == last].set_index("seed")
        corrections = runs.groupby("seed")["meta_corrections"].sum()
        row = {
            "condition": name,
            "holdout_seed": grid.condition(name).knobs.meta_holdout_seed,
            "holdout_accuracy_start": float(start["meta_accuracy"].mean()),
            "corrections_per_run": float(corrections.mean()),
            "runs_corrected": int((corrections > 0).sum()),
            "n_seeds": int(runs["seed"].nunique()),
            "final_quality": float(end["policy_quality"].mean()),
            "twin": twin,
            "quality_change_from_twin": float("nan"),
        }
        if twin is not None and twin in conditions(m):
            twin_end = m[(m["condition"] == twin) & (m["iteration"] == last)].set_index("seed")["policy_quality"]
            row["quality_change_from_twin"] = float((end["policy_quality"] - twin_end).dropna().mean())
        rows.append(row)
    return pd.DataFrame(rows)


def meta_section(m: pd.DataFrame, grid: GridSpec | None) -> list[str]:
    """The report's lines on meta-correction (none when no condition has held-out pairs or the grid is unknown)."""
    if grid is None or "meta_corrections" not in m or "meta_accuracy" not in m:
        return []
    table = meta_table(m, grid)
    if table.empty:
        return []
    rows = [
        [
            f"`{row.condition}`",
            str(row.holdout_seed),
            num(row.holdout_accuracy_start),
            f"{row.corrections_per_run:.1f}",
            f"{row.runs_corrected}/{row.n_seeds}",
            num(row.final_quality),
            f"`{row.twin}`" if isinstance(row.twin, str) else "none in the grid",
            "" if pd.isna(row.quality_change_from_twin) else num(row.quality_change_from_twin, signed=True),
        ]
        for row in table.itertuples(index=False)
    ]
    never = table[table["runs_corrected"] == 0]["condition"].tolist()
    fired = f"It never fired in {plural(len(never), 'condition')}." if never else "It fired in every condition."
    thresholds = sorted({grid.condition(c).knobs.meta_accuracy_threshold for c in table["condition"]})
    return [
        "## Meta-correction: did it fire?",
        "",
        "A judge takes a held-out step only when its accuracy on the held-out pairs is below "
        f"{' / '.join(f'{t:g}' for t in thresholds)}, so the draw of pairs (`meta_holdout_seed`) decides whether the "
        "mechanism acts at all. Accuracy at start: the pretrained judges on the run's draw (mean over seeds). "
        "Corrections: held-out steps per run over all iterations (summed over an ensemble's judges). Δ quality: the "
        f"paired final-quality change from the twin, the same knobs without meta-correction. {fired}",
        "",
        markdown_table(
            [
                "Condition",
                "Draw",
                "Accuracy at start",
                "Corrections per run",
                "Runs corrected",
                "Final quality",
                "Twin without meta",
                "Δ quality",
            ],
            rows,
            right=[False, True, True, True, True, True, False, True],
        ).rstrip("\n"),
        "",
    ]
