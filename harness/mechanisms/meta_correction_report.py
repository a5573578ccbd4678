"""Meta-correction's part of a run's report (`REPORT`): did it fire, on which held-out draw, and what it changed.

Meta-correction steps a judge on held-out q*-labelled pairs only while the judge's accuracy on them is below a
threshold, so whether it ever acts depends on the draw of pairs as much as on the judges. Each condition with
held-out pairs is set beside its twin: the condition of the grid with the same knobs and meta-correction off. Where a
condition with meta-correction produced the same metrics as one without, `REPORT.why_identical` says whether and how
often it fired.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.common.wording import plural
from harness.engine.metrics import QUALITY_RESOLUTION
from harness.grid.knobs import Knobs
from harness.grid.report_section import ConditionKnobs, MechanismReport, ReportInputs
from harness.rendering.markdown import markdown_table
from harness.rendering.metrics_table import QUALITY, conditions, final_runs, num

CORRECTIONS = "meta_corrections"
HOLDOUT = "meta_accuracy"
_META_KNOBS = ("meta_holdout_fraction", "meta_holdout_seed", "meta_update_every", "meta_accuracy_threshold")


def _without_meta(knobs: Knobs) -> Knobs:
    defaults = Knobs()
    return knobs.model_copy(update={name: getattr(defaults, name) for name in _META_KNOBS})


def meta_twins(knobs: ConditionKnobs) -> dict[str, str | None]:
    """Each condition with held-out pairs -> the first condition with the same knobs and meta off (None if absent)."""
    twins: dict[str, str | None] = {}
    for name, own in knobs.items():
        if own.meta_holdout_fraction == 0:
            continue
        target = _without_meta(own)
        twins[name] = next((other for other, theirs in knobs.items() if theirs == target), None)
    return twins


def corrections(prepared: pd.DataFrame, condition: str) -> pd.Series:
    """Held-out correction steps per run (seed) of a condition, summed over its iterations (0 where unrecorded)."""
    rows = prepared[prepared["condition"] == condition]
    if CORRECTIONS not in rows:
        return pd.Series(0, index=pd.Index(rows["seed"].unique(), name="seed"))
    return pd.to_numeric(rows[CORRECTIONS], errors="coerce").fillna(0).groupby(rows["seed"]).sum()


def fired_phrase(prepared: pd.DataFrame, condition: str, detail: str = "") -> str:
    """How often meta-correction fired in a condition, with the count, for sentences that explain a match:
    "meta-correction never fired in `c` (`meta_corrections` is 0 at every seed and iteration)" or "meta-correction
    fired in k of n runs of `c` (t corrections in all)"; detail, when given, closes the parenthesis after a ";"."""
    per_run = corrections(prepared, condition)
    total = int(per_run.sum())
    more = f"; {detail}" if detail else ""
    if total == 0:
        return f"meta-correction never fired in `{condition}` (`{CORRECTIONS}` is 0 at every seed and iteration{more})"
    runs = f"{int((per_run > 0).sum())} of {plural(len(per_run), 'run')}"
    return f"meta-correction fired in {runs} of `{condition}` ({plural(total, 'correction')} in all{more})"


def ends_with_twin(prepared: pd.DataFrame, condition: str, twin: str) -> bool:
    """Whether every run of condition ends where the same seed's run of twin ends: final quality within
    QUALITY_RESOLUTION (a smaller difference is float noise, the report's one rule) and, where recorded, the same
    end mode. Needs at least one shared seed with a final value. prepared: the prepared metrics table."""
    final = final_runs(prepared)
    own, other = (final[final["condition"] == c].set_index("seed") for c in (condition, twin))
    seeds = own.index.intersection(other.index)
    if len(seeds) == 0 or len(seeds) < len(own):
        return False
    gaps = (own.loc[seeds, QUALITY.name] - other.loc[seeds, QUALITY.name]).to_numpy(float)
    if not np.all(np.abs(gaps) < QUALITY_RESOLUTION):  # NaN fails: a missing end is no match
        return False
    if "mode_sequence" not in final:
        return True
    own_modes, other_modes = own.loc[seeds, "mode_sequence"].astype(str), other.loc[seeds, "mode_sequence"].astype(str)
    return bool((own_modes == other_modes).all())


def meta_table(prepared: pd.DataFrame, knobs: ConditionKnobs) -> pd.DataFrame:
    """Per condition with held-out pairs: its draw, the judges' held-out accuracy before training, corrections,
    final quality, and the paired final-quality change from its twin without meta (mean over shared seeds).

    prepared: the prepared metrics table; seeds and iterations are those it holds.
    """
    last = int(prepared["iteration"].max())
    rows = []
    for name, twin in meta_twins(knobs).items():
        if name not in conditions(prepared):
            continue
        runs = prepared[prepared["condition"] == name]
        start, end = runs[runs["iteration"] == 0], runs[runs["iteration"] == last].set_index("seed")
        per_run = corrections(prepared, name)
        row = {
            "condition": name,
            "holdout_seed": knobs[name].meta_holdout_seed,
            "holdout_accuracy_start": float(start["meta_accuracy"].mean()),
            "corrections_per_run": float(per_run.mean()),
            "runs_corrected": int((per_run > 0).sum()),
            "n_seeds": int(runs["seed"].nunique()),
            "final_quality": float(end["policy_quality"].mean()),
            "twin": twin,
            "quality_change_from_twin": float("nan"),
        }
        if twin is not None and twin in conditions(prepared):
            twin_end = prepared[(prepared["condition"] == twin) & (prepared["iteration"] == last)].set_index("seed")[
                "policy_quality"
            ]
            row["quality_change_from_twin"] = float((end["policy_quality"] - twin_end).dropna().mean())
        rows.append(row)
    return pd.DataFrame(rows)


def meta_section(inputs: ReportInputs) -> list[str]:
    """The report's lines on meta-correction (none when no condition has held-out pairs or the run did not record
    meta-correction's metrics)."""
    prepared, knobs = inputs.table, inputs.knobs
    if CORRECTIONS not in prepared or HOLDOUT not in prepared:
        return []
    table = meta_table(prepared, knobs)
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
    # A condition whose runs all end where its twin's do is the twin's result to the report's resolution, though its
    # metrics may differ by more than the identity test allows; say how often the correction acted there.
    matched = [
        f"- `{row.condition}` ends where `{row.twin}` ends: {fired_phrase(prepared, row.condition)}."
        for row in table.itertuples(index=False)
        if isinstance(row.twin, str)
        and row.twin in conditions(prepared)
        and ends_with_twin(prepared, row.condition, row.twin)
    ]
    if matched:
        matched = [
            f"{plural(len(matched), 'condition ends', 'conditions end')} where the twin ends (every run's final "
            f"quality within {QUALITY_RESOLUTION:g} q* of the same seed's run of the twin, at the same end mode), so "
            "meta-correction changed no run's outcome there:",
            "",
            *matched,
            "",
        ]
    thresholds = sorted({knobs[c].meta_accuracy_threshold for c in table["condition"]})
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
        *matched,
    ]


def why_identical(prepared: pd.DataFrame, condition: str, knobs: ConditionKnobs | None) -> str | None:
    """Why a condition with meta-correction may match one without, as far as the data show it: whether and how often
    the correction fired (with the count; if never, also how low its held-out accuracy got). None without held-out
    pairs."""
    rows = prepared[prepared["condition"] == condition]
    if HOLDOUT not in rows or CORRECTIONS not in rows or rows[HOLDOUT].isna().all():
        return None
    if corrections(prepared, condition).sum() != 0:
        return f"{fired_phrase(prepared, condition)}, without moving any metric beyond the tolerance"
    lowest = float(rows[HOLDOUT].min())
    threshold = f", threshold {knobs[condition].meta_accuracy_threshold:g}" if knobs else ""
    accuracy = f"its held-out accuracy at iteration ends is never below {num(lowest)}{threshold}"
    return fired_phrase(prepared, condition, accuracy)


REPORT = MechanismReport(section=meta_section, why_identical=why_identical)
