"""Per-run trajectory summaries: when a run reaches its ceiling, when its entropy collapses, how much of q*'s range it
reaches. Computed from metrics.csv (no in-graph diagnostics), so that grids of different world sizes and networks
can be compared on the same scale.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.engine.metrics import QUALITY_RESOLUTION
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


def run_summaries(metrics: pd.DataFrame, world: WorldConfig) -> pd.DataFrame:
    """One row per run (condition × seed) of a metrics table.

    Args:
      metrics: metrics.csv's rows (at least condition, seed, iteration, policy_quality, policy_entropy), any order.
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
