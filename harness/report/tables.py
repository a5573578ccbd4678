"""Summary tables: per run, per condition, end-mode shares; and their markdown renderings."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness import metrics as registry
from harness.report.data import (
    QUALITY,
    ROLE_ORDER,
    GridFacts,
    conditions,
    final_runs,
    float_metrics,
    live,
    mean_std_ci,
    num,
    prepare,
    reference,
    resolution,
    roles,
)
from harness.report.markdown import markdown_table

# Columns of the end-mode table: the most common end modes of the grid, the rest summed as "other".
MODE_COLUMNS = 4
DIFF = f"{QUALITY.name}_diff"


def run_summary(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per (condition, seed), in grid order.

    peak_iteration / peak_quality: the iteration (earliest on ties) and value of max policy_quality over the run's
    non-diverged rows. final_iteration: the condition's last iteration; final_quality: policy_quality there (NaN if
    the run diverged or lacks that row). degradation_pct = 100·(peak − final)/|peak|, 0 when peak == final, NaN when
    final is missing or peak is 0 with final below it. Also carries the run's boundary and diverged flags.
    """
    m = prepare(metrics)
    q = QUALITY.name
    final_iteration = m.groupby("condition", sort=False)["iteration"].max()
    rows = []
    for (condition, seed), run in m.groupby(["condition", "seed"], sort=False):
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
                "degradation_pct": degradation,
            }
        )
    out = pd.DataFrame(rows)
    out["peak_iteration"] = out["peak_iteration"].astype("Int64")
    return out


def summarize(metrics: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """One row per condition, at the condition's final iteration, ordered reference → mechanisms → boundaries.

    Columns: condition, role ("reference" | "mechanism" | "boundary"), n_seeds (seeds in the table), n_final (runs
    with a finite final quality, i.e. what the statistics are over), diverged_runs (runs with any diverged row),
    final_iteration; for every registered float metric M in the table: M_mean, M_std (ddof=1), M_ci_low, M_ci_high
    (Student-t over seeds, NaN with fewer than 2); peak_iteration_mean and degradation_pct_mean over non-diverged
    runs; policy_quality_diff_mean / _ci_low / _ci_high: paired final-quality difference from the reference over
    the seeds both share (NaN on the reference row), with n_paired. Mechanisms and boundaries are each sorted by
    policy_quality_mean descending (NaN last, ties in grid order).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    m = prepare(metrics)
    runs = run_summary(m)
    ref = reference(m)
    role = roles(m)
    summarised = float_metrics(m)
    reference_final = runs.loc[runs["condition"] == ref, ["seed", "final_quality"]]
    rows = []
    for grid_position, condition in enumerate(conditions(m)):
        cond = m[m["condition"] == condition]
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
        healthy = cond_runs[~cond_runs["diverged"]]
        row["peak_iteration_mean"] = float(healthy["peak_iteration"].astype(float).mean())
        row["degradation_pct_mean"] = float(healthy["degradation_pct"].mean())
        if condition == ref:
            row |= {f"{DIFF}_mean": math.nan, f"{DIFF}_ci_low": math.nan, f"{DIFF}_ci_high": math.nan}
            row["n_paired"] = pd.NA
        else:
            paired = cond_runs[["seed", "final_quality"]].merge(reference_final, on="seed", suffixes=("", "_ref"))
            diff = (paired["final_quality"] - paired["final_quality_ref"]).dropna()
            n, mean, _, low, high = mean_std_ci(diff, confidence)
            row |= {f"{DIFF}_mean": mean, f"{DIFF}_ci_low": low, f"{DIFF}_ci_high": high}
            row["n_paired"] = n
        row["_grid"] = grid_position
        rows.append(row)

    out = pd.DataFrame(rows)
    # Story order: role, then final mean quality descending (missing last), then grid order for ties.
    out["_role"] = out["role"].map(ROLE_ORDER)
    out["_quality"] = -out[f"{QUALITY.name}_mean"].fillna(-math.inf)
    out = out.sort_values(["_role", "_quality", "_grid"], kind="stable").drop(columns=["_role", "_quality", "_grid"])
    out["n_paired"] = out["n_paired"].astype("Int64")
    return out.reset_index(drop=True)


def difference_verdict(row: pd.Series) -> str:
    """How a condition's paired quality difference from the reference reads.

    "reference"; "above" / "below": the CI excludes zero and |Δ| is at least the resolution; "none": the interval
    (or, with one pair, the difference) lies within ± resolution, i.e. the same end state up to float noise;
    "unresolved": anything else (the interval spans zero, or no pairs).
    """
    if row["role"] == "reference":
        return "reference"
    mean, low, high = (float(row[f"{DIFF}_{k}"]) for k in ("mean", "ci_low", "ci_high"))
    res = resolution(QUALITY.name)
    if math.isnan(mean):
        return "unresolved"
    if math.isnan(low):
        return "none" if abs(mean) < res else "unresolved"
    if -res < low and high < res:
        return "none"
    if abs(mean) >= res and (low > 0 or high < 0):
        return "above" if low > 0 else "below"
    return "unresolved"


def _mean_std(row: pd.Series, name: str) -> str:
    mean, std = row[f"{name}_mean"], row[f"{name}_std"]
    return num(mean) if num(std) == "n/a" else f"{num(mean)} ± {num(std)}"


def _with_ci(text: str, low: object, high: object) -> str:
    return text if num(low) == "n/a" else f"{text} [{num(low)}, {num(high)}]"


def summary_markdown(summary: pd.DataFrame) -> str:
    """The output of summarize() as a markdown table, 3 decimals, "n/a" for undefined values.

    One column per headline metric (mean ± std over seeds; quality also with its CI), the paired quality difference
    ("no difference" below the resolution), the mean peak iteration and mean drop from peak, and a Diverged column
    when any run diverged. Boundary rows read "boundary" in the Role column.
    """
    headline = [x for x in registry.HEADLINE_METRICS if f"{x.name}_mean" in summary.columns]
    any_diverged = int(summary["diverged_runs"].sum()) > 0
    header = ["Condition", "Role"]
    for x in headline:
        header.append(x.axis_label + (" [CI]" if x is QUALITY else ""))
    header += ["Δ quality vs reference [CI]", "Peak iter (mean)", "Drop from peak % (mean)"]
    if any_diverged:
        header.append("Diverged runs")
    rows = []
    for _, r in summary.iterrows():
        verdict = difference_verdict(r)
        if verdict == "reference":
            delta = "—"
        elif verdict == "none":
            delta = "no difference"
        else:
            delta = _with_ci(num(r[f"{DIFF}_mean"], signed=True), r[f"{DIFF}_ci_low"], r[f"{DIFF}_ci_high"])
        cells = [str(r["condition"]), str(r["role"])]
        for x in headline:
            text = _mean_std(r, x.name)
            cells.append(_with_ci(text, r[f"{x.name}_ci_low"], r[f"{x.name}_ci_high"]) if x is QUALITY else text)
        # A mean iteration index: more decimals is noise.
        cells += [delta, num(r["peak_iteration_mean"], digits=1), num(r["degradation_pct_mean"], digits=1)]
        if any_diverged:
            cells.append(f"{int(r['diverged_runs'])}/{int(r['n_seeds'])}")
        rows.append(cells)
    return markdown_table(header, rows, right=[False, False, *[True] * (len(header) - 2)])


def mode_shares(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per condition, how many of its runs end at each end mode (most probable output at the final iteration).

    Columns: condition, mode_sequence, mode_quality (its q*), runs, n_runs (the condition's runs with a
    non-diverged final row), share. Conditions in grid order, modes by runs descending. Empty without mode_sequence.
    """
    m = prepare(metrics)
    columns = ["condition", "mode_sequence", "mode_quality", "runs", "n_runs", "share"]
    if "mode_sequence" not in m.columns:
        return pd.DataFrame(columns=columns)
    final = final_runs(m).copy()
    if "mode_quality" not in final.columns:
        final["mode_quality"] = math.nan
    final["mode_sequence"] = final["mode_sequence"].astype(str)
    order = {c: i for i, c in enumerate(conditions(m))}
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


def modes_markdown(shares: pd.DataFrame, order: list[str]) -> str:
    """Runs per end mode and condition: the grid's most common modes as columns, the rest as "other"."""
    top = grid_modes(shares).head(MODE_COLUMNS)
    shown = top["mode_sequence"].tolist()
    header = ["Condition", "Runs", *(mode_label(s, q) for s, q in zip(shown, top["mode_quality"], strict=True))]
    other = len(grid_modes(shares)) > len(shown)
    if other:
        header.append("other modes")
    rows = []
    for condition in order:
        own = shares[shares["condition"] == condition].set_index("mode_sequence")["runs"]
        if own.empty:
            continue
        cells = [condition, str(int(own.sum()))]
        cells += [str(int(own[s])) if s in own.index else "·" for s in shown]
        if other:
            rest = int(own[~own.index.isin(shown)].sum())
            cells.append(str(rest) if rest else "·")
        rows.append(cells)
    return markdown_table(header, rows, right=[False, *[True] * (len(header) - 1)])


def summary_document(summary: pd.DataFrame, facts: GridFacts, confidence: float) -> str:
    """summary.md: a heading naming grid, seeds and iteration, a line on how to read it, and the table."""
    title = f"# Summary of {facts.name}" if facts.name else "# Summary"
    return (
        f"{title}\n\n{facts.heading()} Mean ± std over seeds, {100 * confidence:g}% Student-t CIs; "
        f'Δ is paired on shared seeds; |Δ| < {resolution(QUALITY.name):g} reads "no difference"; '
        "peak iteration and drop from peak are means over seeds.\n\n" + summary_markdown(summary)
    )
