"""Summary tables: per run, per condition, end-mode shares; and their markdown renderings."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.common.wording import plural
from harness.engine import metrics as registry
from harness.engine.metrics import QUALITY_RESOLUTION
from harness.inference.verdicts import BOOTSTRAP_RESAMPLES, MIN_SEEDS, paired_bootstrap_ci
from harness.rendering.markdown import markdown_table
from harness.rendering.metrics_table import (
    QUALITY,
    GridFacts,
    conditions,
    final_runs,
    float_metrics,
    live,
    mean_std_ci,
    num,
    prepare,
    reference,
    roles,
)

# Columns of the end-mode table: the most common end modes of the grid, the rest summed as "other".
MODE_COLUMNS = 4
DIFF = f"{QUALITY.name}_diff"
# How a paired difference's CI is computed (paired_difference), in the words every section that shows one uses.
PAIRED_CI = f"a BCa bootstrap over seeds (scipy.stats.bootstrap, {BOOTSTRAP_RESAMPLES:,} paired resamples)"


def run_summary(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per (condition, seed), in grid order.

    peak_iteration / peak_quality: the iteration (earliest on ties) and value of max policy_quality over the run's
    non-diverged rows. final_iteration: the condition's last iteration; final_quality: policy_quality there (NaN if
    the run diverged or lacks that row). drop_from_peak = peak − final (q*); below_peak: drop_from_peak ≥
    QUALITY_RESOLUTION, i.e. the run ended measurably below its own peak (on a curve flat to float noise the peak
    iteration is an arbitrary argmax, so only runs below their peak have a peak worth reporting).
    degradation_pct = 100·(peak − final)/|peak|, 0 when peak == final, NaN when final is missing or peak is 0 with
    final below it. Also carries the run's boundary and diverged flags.
    """
    prepared = prepare(metrics)
    q = QUALITY.name
    final_iteration = prepared.groupby("condition", sort=False)["iteration"].max()
    rows = []
    for (condition, seed), run in prepared.groupby(["condition", "seed"], sort=False):
        ok = run[~run["diverged"] & run[q].notna()]
        last = final_iteration[condition]
        if ok.empty:
            peak_iteration, peak = pd.NA, math.nan
        else:
            # argmax returns the first maximum; rows are sorted by iteration, so ties resolve to the earliest.
            at = int(np.argmax(ok[q].to_numpy()))
            peak_iteration, peak = int(ok["iteration"].iloc[at]), float(ok[q].iloc[at])
        final_rows = ok[ok["iteration"] == last]
        final = float(final_rows[q].iloc[0]) if len(final_rows) else math.nan
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
                "drop_from_peak": peak - final,
                "below_peak": bool(peak - final >= QUALITY_RESOLUTION),  # False when either is NaN
                "degradation_pct": degradation,
            }
        )
    out = pd.DataFrame(rows)
    out["peak_iteration"] = out["peak_iteration"].astype("Int64")
    return out


def summarize(metrics: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """One row per condition, at the condition's final iteration, in grid order (the order of every table).

    Columns: condition, role ("reference" | "mechanism" | "boundary"), n_seeds (seeds in the table), n_final (runs
    with a finite final quality, i.e. what the statistics are over), diverged_runs (runs with any diverged row),
    final_iteration; for every registered float metric M in the table: M_mean, M_std (ddof=1), M_ci_low, M_ci_high
    (Student-t over seeds, NaN with fewer than 2); runs_below_peak (runs that ended at least QUALITY_RESOLUTION below
    their own peak, see run_summary), with drop_from_peak_mean and the earliest and latest of their peak iterations,
    peak_iteration_below_first / _last, over those runs only (NaN when there are none); policy_quality_diff_mean /
    _ci_low / _ci_high: paired final-quality difference from the reference over the seeds both share, its CI the
    claims' bootstrap (paired_difference; NaN on the reference row), with n_paired.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    prepared = prepare(metrics)
    runs = run_summary(prepared)
    ref = reference(prepared)
    role = roles(prepared)
    summarised = float_metrics(prepared)
    reference_final = runs.loc[runs["condition"] == ref, ["seed", "final_quality"]]
    rows = []
    for condition in conditions(prepared):
        cond = prepared[prepared["condition"] == condition]
        cond_runs = runs[runs["condition"] == condition]
        last = int(cond["iteration"].max())
        final = live(cond)
        final = final[final["iteration"] == last]
        row: dict[str, object] = {
            "condition": condition,
            "role": role[condition],
            "n_seeds": int(cond["seed"].nunique()),
            "n_final": int(cond_runs["final_quality"].notna().sum()),
            "diverged_runs": int(cond_runs["diverged"].sum()),
            "final_iteration": last,
        }
        for x in summarised:
            _, mean, std, low, high = mean_std_ci(final[x.name], confidence)
            row |= {f"{x.name}_mean": mean, f"{x.name}_std": std, f"{x.name}_ci_low": low, f"{x.name}_ci_high": high}
        fell = cond_runs[~cond_runs["diverged"] & cond_runs["below_peak"]]
        row["runs_below_peak"] = len(fell)
        row["drop_from_peak_mean"] = float(fell["drop_from_peak"].mean()) if len(fell) else math.nan
        # Iterations are whole numbers: the span of the peaks, not a mean that reads as "iteration 5.7".
        peaks = fell["peak_iteration"].astype(float)
        row["peak_iteration_below_first"] = peaks.min() if len(fell) else math.nan
        row["peak_iteration_below_last"] = peaks.max() if len(fell) else math.nan
        if condition == ref:
            row |= {f"{DIFF}_mean": math.nan, f"{DIFF}_ci_low": math.nan, f"{DIFF}_ci_high": math.nan}
            row["n_paired"] = pd.NA
        else:
            paired = cond_runs[["seed", "final_quality"]].merge(reference_final, on="seed", suffixes=("", "_ref"))
            n, mean, low, high = paired_difference(paired["final_quality"] - paired["final_quality_ref"], confidence)
            row |= {f"{DIFF}_mean": mean, f"{DIFF}_ci_low": low, f"{DIFF}_ci_high": high}
            row["n_paired"] = n
        rows.append(row)

    out = pd.DataFrame(rows)
    out["n_paired"] = out["n_paired"].astype("Int64")
    return out.reset_index(drop=True)


def paired_difference(differences: pd.Series, confidence: float) -> tuple[int, float, float, float]:
    """(n, mean, ci_low, ci_high) of seed-paired differences over their finite values.

    The CI is the claims' BCa bootstrap (`harness.inference.verdicts.paired_bootstrap_ci`), so a summary row
    and a claim on the same comparison give the same interval. NaN bounds with fewer than 2 pairs (one pair has no
    spread to resample); NaN mean too without pairs.
    """
    v = differences.to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    if v.size < 2:
        return int(v.size), float(v[0]) if v.size else math.nan, math.nan, math.nan
    mean, low, high = paired_bootstrap_ci(v, None, "mean", confidence)
    return int(v.size), mean, low, high


def descriptive_rule(confidence: float) -> str:
    """What the summary's Δ and its interval are, as report.md and summary.md state it (once each)."""
    return (
        f"Δ and its {100 * confidence:g}% interval describe the seeds and decide nothing: the interval is per "
        "comparison, not adjusted for the table's other comparisons, and shown only from "
        f"{MIN_SEEDS} paired seeds on; a direction (above, below, the same) is stated only by a claim's verdict, "
        "under one rule with its family's adjustment"
    )


FELL_FROM_PEAK = "Fell from peak (q*)"
FELL_FROM_PEAK_MEANING = (
    f"runs whose final real quality is at least {QUALITY_RESOLUTION:g} q* below their own peak over the iterations, "
    "out of the runs with a final value, with the (mean) drop in q* and the iteration of their peak (a range when "
    "their peaks fall at different iterations); "
    '"·" when no run did (a curve flat to float noise has no peak iteration worth reporting)'
)


def fell_from_peak(row: pd.Series) -> str:
    """The "Fell from peak" cell: "·" when no run ended QUALITY_RESOLUTION below its own peak, else how many did,
    their (mean) drop in q* and their peak iteration, as whole iterations ("iter 3", or "iters 2–7" for a span)."""
    k = int(row["runs_below_peak"])
    if k == 0:
        return "·"
    n = int(row["n_final"])
    drop = f"{k}/{n}: −{num(row['drop_from_peak_mean'])}" + (" (mean)" if k > 1 else "")
    first, last = int(row["peak_iteration_below_first"]), int(row["peak_iteration_below_last"])
    return f"{drop} from iter {first}" if first == last else f"{drop} from iters {first}–{last}"


def _mean_std(row: pd.Series, name: str) -> str:
    mean, std = row[f"{name}_mean"], row[f"{name}_std"]
    return num(mean) if num(std) == "n/a" else f"{num(mean)} ± {num(std)}"


def _with_ci(text: str, low: object, high: object) -> str:
    return text if num(low) == "n/a" else f"{text} [{num(low)}, {num(high)}]"


def summary_markdown(summary: pd.DataFrame) -> str:
    """The output of summarize() as a markdown table, 3 decimals, "n/a" for undefined values.

    One column per headline metric (mean ± std over seeds; quality also with its CI from MIN_SEEDS seeds on), the
    paired quality difference
    with its CI where at least MIN_SEEDS seeds are paired (descriptive: no direction word), the runs that fell from
    their peak (fell_from_peak), and a Diverged column when any run diverged. Boundary rows read "boundary" in the
    Role column.
    """
    headline = [x for x in registry.headline_metrics() if f"{x.name}_mean" in summary.columns]
    any_diverged = int(summary["diverged_runs"].sum()) > 0
    header = ["Condition", "Role"]
    for x in headline:
        header.append(x.axis_label + (" [CI]" if x is QUALITY else ""))
    header += ["Δ quality vs reference [CI] (descriptive)", FELL_FROM_PEAK]
    if any_diverged:
        header.append("Diverged runs")
    rows = []
    for _, r in summary.iterrows():
        delta = "—" if r["role"] == "reference" else num(r[f"{DIFF}_mean"], signed=True)
        if r["role"] != "reference" and not pd.isna(r["n_paired"]) and int(r["n_paired"]) >= MIN_SEEDS:
            delta = _with_ci(delta, *_diff_ci(r))
        cells = [str(r["condition"]), str(r["role"])]
        for x in headline:
            text = _mean_std(r, x.name)
            shown = x is QUALITY and int(r["n_final"]) >= MIN_SEEDS  # no interval below MIN_SEEDS seeds
            cells.append(_with_ci(text, r[f"{x.name}_ci_low"], r[f"{x.name}_ci_high"]) if shown else text)
        cells += [delta, fell_from_peak(r)]
        if any_diverged:
            cells.append(f"{int(r['diverged_runs'])}/{int(r['n_seeds'])}")
        rows.append(cells)
    return markdown_table(header, rows, right=[False, False, *[True] * (len(header) - 2)])


def _diff_ci(row: pd.Series) -> tuple[object, object]:
    return row[f"{DIFF}_ci_low"], row[f"{DIFF}_ci_high"]


def mode_shares(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per condition, how many of its runs end at each end mode (most probable output at the final iteration).

    Columns: condition, mode_sequence, mode_quality (its q*), runs, n_runs (the condition's runs with a
    non-diverged final row), share. Conditions in grid order, modes by runs descending. Empty without mode_sequence.
    """
    prepared = prepare(metrics)
    columns = ["condition", "mode_sequence", "mode_quality", "runs", "n_runs", "share"]
    if "mode_sequence" not in prepared.columns:
        return pd.DataFrame(columns=columns)
    final = final_runs(prepared).copy()
    if "mode_quality" not in final.columns:
        final["mode_quality"] = math.nan
    final["mode_sequence"] = final["mode_sequence"].astype(str)
    order = {c: i for i, c in enumerate(conditions(prepared))}
    counted = (
        final.groupby(["condition", "mode_sequence"], sort=False)
        .agg(mode_quality=("mode_quality", "mean"), runs=("seed", "size"))
        .reset_index()
    )
    counted["n_runs"] = counted.groupby("condition")["runs"].transform("sum")
    counted["share"] = counted["runs"] / counted["n_runs"]
    counted["_order"] = counted["condition"].map(order)
    counted = counted.sort_values(["_order", "runs"], ascending=[True, False], kind="stable")
    return counted.drop(columns="_order").reset_index(drop=True)[columns]


def grid_modes(shares: pd.DataFrame) -> pd.DataFrame:
    """End modes over the whole grid: mode_sequence, mode_quality, runs; most common first (ties: higher q*)."""
    if shares.empty:
        return pd.DataFrame(columns=["mode_sequence", "mode_quality", "runs"])
    total = shares.groupby("mode_sequence", sort=False).agg(mode_quality=("mode_quality", "mean"), runs=("runs", "sum"))
    total = total.reset_index().sort_values(["runs", "mode_quality"], ascending=[False, False], kind="stable")
    return total.reset_index(drop=True)


def mode_label(sequence: str, quality: float) -> str:
    return f"{sequence} (q* {num(quality)})"


def split_modes(shares: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the grid's MODE_COLUMNS most common end modes, every other end mode), each as grid_modes() rows.

    The end-mode table's columns and the sentence above it both come from this split, so their counts agree.
    """
    modes = grid_modes(shares)
    return modes.head(MODE_COLUMNS), modes.iloc[MODE_COLUMNS:]


def other_modes_header(other: pd.DataFrame) -> str:
    """The header of the end-mode table's last column: its cells count runs, spread over this many modes."""
    return f"runs at {plural(len(other), 'other mode')}"


def modes_markdown(shares: pd.DataFrame, order: list[str]) -> str:
    """Runs per end mode and condition: the grid's most common modes as columns, the runs at every other mode summed
    in a last column whose header says how many modes those are."""
    top, rest = split_modes(shares)
    shown = top["mode_sequence"].tolist()
    header = ["Condition", "Runs", *(mode_label(s, q) for s, q in zip(shown, top["mode_quality"], strict=True))]
    if len(rest):
        header.append(other_modes_header(rest))
    rows = []
    for condition in order:
        own = shares[shares["condition"] == condition].set_index("mode_sequence")["runs"]
        if own.empty:
            continue
        cells = [condition, str(int(own.sum()))]
        cells += [str(int(own[s])) if s in own.index else "·" for s in shown]
        if len(rest):
            elsewhere = int(own[~own.index.isin(shown)].sum())
            cells.append(str(elsewhere) if elsewhere else "·")
        rows.append(cells)
    return markdown_table(header, rows, right=[False, *[True] * (len(header) - 1)])


def summary_document(summary: pd.DataFrame, facts: GridFacts, confidence: float, notes: str = "") -> str:
    """summary.md: a heading naming grid, seeds and iteration, how to read it (the difference rule included), the
    table, and `notes` (markdown, e.g. the conditions with identical results) after it."""
    title = f"# Summary of {facts.name}" if facts.name else "# Summary"
    text = (
        f"{title}\n\n{facts.heading()} Mean ± std over seeds, {100 * confidence:g}% Student-t CIs of means; Δ is "
        f"paired on shared seeds, its CI {PAIRED_CI}; {descriptive_rule(confidence)}. "
        f"{FELL_FROM_PEAK}: {FELL_FROM_PEAK_MEANING}.\n\n" + summary_markdown(summary)
    )
    return text + (f"\n{notes}" if notes else "")
