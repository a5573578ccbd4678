"""Per-run trajectory summaries (harness.inference.run_measures) on a hand-built metrics table."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.engine.world import World, WorldConfig
from harness.inference.run_measures import SUMMARY_COLUMNS, q_star_range, run_summaries

WORLD = WorldConfig(vocab_size=3, seq_len=3)


def _runs() -> pd.DataFrame:
    """Three runs, rows shuffled: one that reaches its ceiling at 2 and collapses at 3, one that touches its final
    value at 1, leaves it and returns (the first touch counts) and never collapses, one of a single iteration."""
    rows = []
    for iteration, (quality, entropy) in enumerate([(0.0, 3.0), (0.5, 2.0), (0.995, 1.5), (1.0, 0.9), (1.004, 0.5)]):
        rows.append(("a", 0, iteration, quality, entropy))
    for iteration, (quality, entropy) in enumerate([(0.2, 3.0), (0.7, 2.0), (0.3, 1.0), (0.705, 1.2)]):
        rows.append(("b", 1, iteration, quality, entropy))
    rows.append(("a", 7, 0, -0.5, 0.2))
    table = pd.DataFrame(rows, columns=["condition", "seed", "iteration", "policy_quality", "policy_entropy"])
    return table.sample(frac=1.0, random_state=0)


def test_run_summaries_by_hand() -> None:
    table = run_summaries(_runs(), WORLD)
    assert list(table.columns) == SUMMARY_COLUMNS
    low, high = q_star_range(WORLD)
    by_run = table.set_index(["condition", "seed"]).loc[[("a", 0), ("b", 1), ("a", 7)]]
    assert len(table) == 3
    a0, b1, a7 = by_run.loc[("a", 0)], by_run.loc[("b", 1)], by_run.loc[("a", 7)]
    assert (a0["final_iteration"], a0["ceiling_iteration"], a0["entropy_collapse_iteration"]) == (4, 2, 3)
    assert (b1["final_iteration"], b1["ceiling_iteration"]) == (3, 1)
    assert pd.isna(b1["entropy_collapse_iteration"])  # 1.0 is not below 1 nat
    assert (a7["final_iteration"], a7["ceiling_iteration"], a7["entropy_collapse_iteration"]) == (0, 0, 0)
    np.testing.assert_allclose(by_run["final_quality"], [1.004, 0.705, -0.5])
    np.testing.assert_allclose(by_run["share_of_q_star_range"], (np.array([1.004, 0.705, -0.5]) - low) / (high - low))


def test_q_star_range_is_the_worlds() -> None:
    q_star = np.asarray(World(WORLD).q_star)
    assert q_star_range(WORLD) == (float(q_star.min()), float(q_star.max()))
    rugged = WorldConfig(vocab_size=3, seq_len=3, q_star="rugged", interaction_order=2)
    assert q_star_range(rugged) != q_star_range(WORLD)
