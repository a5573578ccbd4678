"""What the original lab published: its end-state table (quality and alignment per row, means over seeds 0–4) and its
own per-iteration records of its baseline, which the reproduced table and the findings line of its reproduction
compare with."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

# The original lab's own per-iteration records of its published baseline (see its README there).
ORIGINAL_BASELINE = Path(__file__).resolve().parents[1] / "tests" / "data" / "original_lab" / "baseline"

# End-state means over seeds 0–4 reported by the original lab (quality, alignment), and
# the condition (or family, of which the best is reported) each row corresponds to here.
PUBLISHED: list[tuple[str, str, float, float]] = [
    ("Baseline", "baseline", 1.594, 0.449),
    ("Frozen judge", "frozen", 1.610, 0.718),
    ("Slower judge updates (every 10)", "slow-judge[judge_update_every=10]", 1.912, 0.674),
    ("Slower updates + meta (every 10, 5%)", "slow-meta[judge_update_every=10,meta_update_every=10]", 1.977, 0.715),
    ("Judge ensemble (best of 3, 5)", "ensemble[", 1.747, 0.480),
    ("Periodic reset (best of 3, 5)", "reset[", 1.770, 0.718),
    ("Anchor 10% (oracle)", "anchor[anchor_fraction=0.1]", 2.214, 0.993),
]


def published_row(summary: pd.DataFrame, match: str) -> pd.Series | None:
    """The condition a published row corresponds to (the best by final quality for a family); None if absent.

    summary: a run's summary table indexed by condition (`policy_quality_mean` among its columns)."""
    candidates = (
        summary[summary.index == match] if not match.endswith("[") else summary[summary.index.str.startswith(match)]
    )
    if candidates.empty:
        return None
    return candidates.loc[candidates["policy_quality_mean"].idxmax()]


def original_records() -> pd.DataFrame:
    """The original lab's baseline records, every seed (columns seed, iteration, policy_quality, judge_alignment, ...;
    its iteration t is our t + 1)."""
    return pd.concat(pd.read_json(path, lines=True) for path in sorted(ORIGINAL_BASELINE.glob("seed_*.jsonl")))
