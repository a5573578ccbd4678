"""Per-run measures: when a run reaches its ceiling, when its entropy collapses, how much of q*'s range it reaches,
how far its end mode is from the world's best output. Computed from metrics.csv.gz (no in-graph diagnostics), so that
grids of different world sizes and networks compare on one scale (`harness.inference.across_shapes`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.engine.metrics import QUALITY_RESOLUTION, all_metrics, table_measures
from harness.engine.world import World, WorldConfig

# The entropy, in nats, below which a policy counts as collapsed (the published lab's "below 1 nat").
ENTROPY_COLLAPSE = 1.0
RUN_KEYS = ["condition", "seed"]
SUMMARY_COLUMNS = [
    *RUN_KEYS,
    "final_iteration",
    "final_quality",
    "ceiling_iteration",
    "entropy_collapse_iteration",
    "share_of_q_star_range",
]


def q_star_range(world: WorldConfig) -> tuple[float, float]:
    """(min, max) of q* over every output of the world."""
    q_star = np.asarray(World(world).q_star, np.float64)
    return float(q_star.min()), float(q_star.max())


def metric_ranges(world: WorldConfig | None) -> dict[str, tuple[float, float]]:
    """(low, high) every value of a metric lies in: its registered valid values where finite, and for real quality
    the world's q* range (a policy's expected q* lies between q*'s extremes). Metrics absent have no known range."""
    ranges = {
        m.name: (m.valid.low, m.valid.high)
        for m in all_metrics()
        if np.isfinite(m.valid.low) and np.isfinite(m.valid.high)
    }
    if world is not None:
        ranges["policy_quality"] = q_star_range(world)
    return ranges


def run_summaries(metrics: pd.DataFrame, world: WorldConfig) -> pd.DataFrame:
    """One row per run (condition × seed) of a metrics table.

    Args:
      metrics: metrics.csv.gz's rows (at least condition, seed, iteration, policy_quality, policy_entropy), any order.
      world: the grid's world, for q*'s range.

    Returns:
      A table with `SUMMARY_COLUMNS`, one row per run in (condition, seed) order of first appearance:
        final_iteration, final_quality: the run's last recorded iteration and its real quality there;
        ceiling_iteration: the first iteration whose real quality is within QUALITY_RESOLUTION of the final's
          (|q_t − q_final| < resolution, the report's rule for "no difference"); the run may leave and come back;
        entropy_collapse_iteration: the first iteration with policy entropy below ENTROPY_COLLAPSE nats
          (missing, <NA>, where it never falls that low);
        share_of_q_star_range: (final quality − min q*) / (max q* − min q*): 0 the worst output, 1 the best.
    """
    low, high = q_star_range(world)
    ordered = metrics.sort_values([*RUN_KEYS, "iteration"], kind="stable")
    runs = ordered.groupby(RUN_KEYS, sort=False)
    final = runs.tail(1).set_index(RUN_KEYS)
    final_quality = ordered.join(final["policy_quality"].rename("final_quality"), on=RUN_KEYS)["final_quality"]
    at_ceiling = (ordered["policy_quality"] - final_quality).abs() < QUALITY_RESOLUTION
    collapsed = ordered["policy_entropy"] < ENTROPY_COLLAPSE
    first = {
        "ceiling_iteration": ordered[at_ceiling].groupby(RUN_KEYS, sort=False)["iteration"].min(),
        "entropy_collapse_iteration": ordered[collapsed].groupby(RUN_KEYS, sort=False)["iteration"].min(),
    }
    order = metrics[RUN_KEYS].drop_duplicates().set_index(RUN_KEYS).index
    table = pd.DataFrame(index=order)
    table["final_iteration"] = final["iteration"].reindex(order).astype("int64")
    table["final_quality"] = final["policy_quality"].reindex(order).astype("float64")
    for column, iterations in first.items():
        table[column] = iterations.reindex(order).astype("Int64")
    table["share_of_q_star_range"] = (table["final_quality"] - low) / (high - low)
    return table.reset_index()[SUMMARY_COLUMNS]


# Per-run measures beside every float metric at the final iteration: name -> what it is (for claims and reports).
DERIVED_MEASURES = {
    "ceiling_iteration": "first iteration within the quality resolution of the run's final real quality",
    "entropy_collapse_iteration": f"first iteration with policy entropy below {ENTROPY_COLLAPSE:g} nat "
    "(the final iteration + 1 where it never falls that low)",
    "share_of_q_star_range": "final real quality as a share of q*'s range (0: worst output, 1: best)",
    "end_mode_gap": "(max q* − q* of the run's end mode) / q*'s range: how far the end mode is from the best output",
    "at_dominant_mode": "1 where the run ends at its condition's most common end mode, else 0",
}


def measure_names() -> tuple[str, ...]:
    """What a study's across claims may compare: every float metric (at the final iteration), DERIVED_MEASURES and
    the measures read off per-run tables (`harness.engine.metrics.table_measures`, where the metrics carry them)."""
    floats = (metric.name for metric in all_metrics() if metric.kind == "float")
    return (*floats, *DERIVED_MEASURES, *table_measures())


def run_measures(metrics: pd.DataFrame, world: WorldConfig) -> pd.DataFrame:
    """One row per run (condition × seed) with every float metric at its final iteration and every DERIVED_MEASURES
    column, all float64 (NaN where a metric is missing).

    The dominant end mode of a condition is its most common `mode_sequence` at the final iteration (ties broken by
    the higher q*, then by first appearance); a run's at_dominant_mode is 1.0 there, 0.0 elsewhere.
    """
    low, high = q_star_range(world)
    summaries = run_summaries(metrics, world).set_index(RUN_KEYS)
    ordered = metrics.sort_values([*RUN_KEYS, "iteration"], kind="stable")
    final = ordered.groupby(RUN_KEYS, sort=False).tail(1).set_index(RUN_KEYS).reindex(summaries.index)
    floats = [name for name in final.columns if pd.api.types.is_float_dtype(final[name])]
    table = final[floats].astype("float64")
    table["ceiling_iteration"] = summaries["ceiling_iteration"].astype("float64")
    collapse = summaries["entropy_collapse_iteration"].astype("float64")  # <NA> (never collapsed) -> NaN
    table["entropy_collapse_iteration"] = collapse.fillna(summaries["final_iteration"] + 1.0)
    table["share_of_q_star_range"] = summaries["share_of_q_star_range"]
    table["end_mode_gap"] = (high - final["mode_quality"].astype("float64")) / (high - low)
    ends = final[["mode_sequence", "mode_quality"]].reset_index()
    counts = ends.groupby(["condition", "mode_sequence"], sort=False).agg(
        runs=("seed", "size"), quality=("mode_quality", "first")
    )
    counts = counts.reset_index().sort_values(["runs", "quality"], ascending=False, kind="stable")
    dominant = counts.drop_duplicates("condition").set_index("condition")["mode_sequence"]
    at_dominant = ends["mode_sequence"].to_numpy() == ends["condition"].map(dominant).to_numpy()
    table["at_dominant_mode"] = at_dominant.astype("float64")
    return table.reset_index()
