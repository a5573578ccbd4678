"""The metrics table as the report reads it: validation, grid facts, roles, the resolution, the belief gap and
number formatting.

A metrics table has one row per condition × seed × iteration (0 = before training) with a column per registered
metric (`harness.engine.metrics.all_metrics`) and optionally boundary (the condition is a reference bound, not a
practical method), diverged (the run's parameters were non-finite at or before this iteration) and mode_sequence (the
glyphs of the policy's most probable output). Rows with diverged == True are left out of every mean and plot but still
counted;
other non-finite values are treated as missing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from harness.common.wording import plural
from harness.engine import metrics as registry
from harness.engine.metrics import Metric, loop_metric

REFERENCE_NAME = "baseline"
ITERATION_LABEL = "outer iteration (0 = before training)"

# The quantity conditions are ranked, compared and paired on; and the one the end-state figure sets it against.
# Every CSV the report writes: 9 significant digits, enough to round-trip float32 values.
CSV_FLOAT_FORMAT = "%.9g"

QUALITY: Metric = loop_metric("policy_quality")
ALIGNMENT: Metric = loop_metric("judge_alignment")
# What the loop believes, set against QUALITY in the belief gap.
PERCEIVED: Metric = loop_metric("judge_perceived_quality")


def float_metrics(prepared: pd.DataFrame) -> tuple[Metric, ...]:
    """Registered float metrics present in the table, registry order: what summaries are computed over."""
    return tuple(x for x in registry.all_metrics() if x.kind == "float" and x.name in prepared.columns)


def headline_metrics(prepared: pd.DataFrame) -> tuple[Metric, ...]:
    """Headline metrics present in the table (all are, after prepare())."""
    return tuple(x for x in registry.headline_metrics() if x.name in prepared.columns)


def prepare(metrics: pd.DataFrame) -> pd.DataFrame:
    """A validated copy: flags as bool, float metrics with non-finite -> NaN, rows in grid order."""
    # Only the loop's own curves: a headline metric of a mechanism this grid did not use (a plugin registered in the
    # same process) is no column of its table.
    required = ("condition", "seed", "iteration", *(x.name for x in registry.loop_headline_metrics()))
    missing = [c for c in required if c not in metrics.columns]
    if missing:
        raise ValueError(f"metrics table lacks columns {missing}")
    if metrics.empty:
        raise ValueError("metrics table is empty")
    prepared = metrics.copy()
    prepared["condition"] = prepared["condition"].astype(str)
    for flag in ("boundary", "diverged"):
        # Hand-built tables may omit the flags; a missing flag means "no".
        prepared[flag] = prepared[flag].fillna(False).astype(bool) if flag in prepared.columns else False
    for x in float_metrics(prepared):
        values = pd.to_numeric(prepared[x.name], errors="coerce").astype(float)
        prepared[x.name] = values.where(np.isfinite(values))
    order = {name: i for i, name in enumerate(dict.fromkeys(prepared["condition"]))}
    prepared["_order"] = prepared["condition"].map(order)
    prepared = prepared.sort_values(["_order", "seed", "iteration"], kind="stable").drop(columns="_order")
    return prepared.reset_index(drop=True)


def conditions(prepared: pd.DataFrame) -> list[str]:
    """Conditions in grid order (order of first appearance)."""
    return list(dict.fromkeys(prepared["condition"]))


def reference(prepared: pd.DataFrame) -> str:
    names = conditions(prepared)
    return REFERENCE_NAME if REFERENCE_NAME in names else names[0]


def roles(prepared: pd.DataFrame) -> dict[str, str]:
    """Role per condition; the reference keeps its role even if it is flagged as a boundary."""
    ref = reference(prepared)
    boundary = prepared.groupby("condition", sort=False)["boundary"].any()
    return {c: "reference" if c == ref else ("boundary" if boundary[c] else "mechanism") for c in conditions(prepared)}


def live(prepared: pd.DataFrame) -> pd.DataFrame:
    """Rows that enter means and plots: diverged rows are excluded (they are counted elsewhere)."""
    return prepared[~prepared["diverged"]]


def final_runs(prepared: pd.DataFrame) -> pd.DataFrame:
    """Each run's row at its condition's final iteration, if that row is not diverged."""
    last = prepared.groupby("condition", sort=False)["iteration"].transform("max")
    return live(prepared[prepared["iteration"] == last])


def series(prepared: pd.DataFrame, condition: str, column: str) -> pd.Series:
    """Mean over seeds of a column per iteration, for one condition, diverged rows excluded."""
    data = live(prepared[prepared["condition"] == condition]).dropna(subset=[column])
    return data.groupby("iteration")[column].mean().sort_index()


@dataclass(frozen=True)
class GridFacts:
    """What every table and figure heading states: which grid, which seeds, which iteration."""

    name: str | None
    n_conditions: int
    seeds: tuple[int, ...]
    final_iteration: int
    n_runs: int
    diverged_runs: int

    @property
    def seed_text(self) -> str:
        """ "seeds 0–4" for a contiguous range, else the list; with the count."""
        s = self.seeds
        if len(s) > 2 and list(s) == list(range(s[0], s[-1] + 1)):
            listed = f"{s[0]}–{s[-1]}"
        else:
            listed = ", ".join(str(x) for x in s)
        return f"{plural(len(s), 'seed')} ({listed})"

    @property
    def grid_text(self) -> str:
        named = f"grid `{self.name}`: " if self.name else ""
        return f"{named}{plural(self.n_conditions, 'condition')} × {self.seed_text}"

    def heading(self, what: str = "final iteration") -> str:
        """One line naming grid, seeds and iteration, for under a table's heading."""
        return f"{self.grid_text}; {what} {self.final_iteration}."


def grid_facts(prepared: pd.DataFrame, name: str | None = None) -> GridFacts:
    runs = prepared.groupby(["condition", "seed"], sort=False)["diverged"].any()
    return GridFacts(
        name=name,
        n_conditions=prepared["condition"].nunique(),
        seeds=tuple(sorted(int(s) for s in prepared["seed"].unique())),
        final_iteration=int(prepared["iteration"].max()),
        n_runs=len(runs),
        diverged_runs=int(runs.sum()),
    )


def mean_std_ci(values: Iterable[float], confidence: float) -> tuple[int, float, float, float, float]:
    """(n, mean, std ddof=1, ci_low, ci_high) over the finite values; Student-t CI (scipy), NaN where n < 2.

    The interval of a mean over seeds; paired differences take the claims' bootstrap instead
    (`harness.report.tables.paired_difference`).
    Identical values give a zero-width interval.
    """
    v = np.asarray(list(values), dtype=float)
    v = v[np.isfinite(v)]
    n = int(v.size)
    if n == 0:
        return 0, math.nan, math.nan, math.nan, math.nan
    mean = float(v.mean())
    if n == 1:
        return 1, mean, math.nan, math.nan, math.nan
    std = float(v.std(ddof=1))
    if std == 0.0:
        return n, mean, 0.0, mean, mean
    low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=stats.sem(v))
    return n, mean, std, float(low), float(high)


def power_of_ten(value: float) -> str:
    """A tolerance as people write it: 1e-05 -> "1e-5", 0.0002 -> "2e-4"."""
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def num(value: object, digits: int = 3, signed: bool = False) -> str:
    """A number with fixed decimals ("+" for positives when signed), "0.000" for anything that rounds to zero, or
    "n/a" when missing or non-finite."""
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "n/a"
    if not math.isfinite(x):
        return "n/a"
    if round(x, digits) == 0.0:
        # -1e-5 is not "-0.000": a value that rounds to zero has no sign worth printing.
        return f"{0.0:.{digits}f}"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def run_belief_gaps(prepared: pd.DataFrame) -> pd.DataFrame:
    """The belief gap of every run and iteration (`belief_gap` averages it over seeds): columns condition, seed,
    iteration, gap; empty without judge-perceived quality."""
    columns = ["condition", "seed", "iteration", "gap"]
    if PERCEIVED.name not in prepared.columns:
        return pd.DataFrame(columns=columns)
    ok = live(prepared).dropna(subset=[QUALITY.name, PERCEIVED.name]).sort_values(["condition", "seed", "iteration"])
    if ok.empty:
        return pd.DataFrame(columns=columns)
    runs = ok.groupby(["condition", "seed"], sort=False)
    start_perceived, start_real = runs[PERCEIVED.name].transform("first"), runs[QUALITY.name].transform("first")
    ok = ok.assign(gap=(ok[PERCEIVED.name] - start_perceived) - (ok[QUALITY.name] - start_real))
    return ok[columns].reset_index(drop=True)


def belief_gap(prepared: pd.DataFrame) -> pd.DataFrame:
    """The belief gap per condition × iteration: mean over seeds of (perceived(t) − perceived(0)) − (real(t) − real(0)).

    Per run, perceived is judge-perceived and real is real quality, and 0 is the run's first iteration with both
    finite (iteration 0 unless it is missing), so the gap is 0 there by construction and depends on no later
    iteration. Judges are pretrained by regression on q*, so both changes start in q* units; self-labelled updates
    can stretch a judge's scale, which the gap counts as belief. Diverged rows are left out. Columns: condition,
    iteration, gap, gap_std (over seeds, NaN with one seed); empty without judge-perceived quality.
    """
    columns = ["condition", "iteration", "gap", "gap_std"]
    gaps = run_belief_gaps(prepared)
    if gaps.empty:
        return pd.DataFrame(columns=columns)
    out = gaps.groupby(["condition", "iteration"])["gap"].agg(gap="mean", gap_std=lambda g: g.std(ddof=1))
    out = out.reset_index()
    order = {c: i for i, c in enumerate(conditions(prepared))}
    out = out.sort_values(["condition", "iteration"], key=lambda s: s.map(order) if s.name == "condition" else s)
    return out.reset_index(drop=True)[columns]
