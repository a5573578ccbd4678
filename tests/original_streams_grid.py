"""A grid two test files share: the published claims' conditions (test_paper_claims) and mechanisms the original
recorded no runs of (test_original_engine), under the original lab's streams, seeds 0-4, as published (10 iterations
× 200 steps). One compile and one training serve both: `make test` runs the FILES in one process (tests/conftest.py's
scheduler), where the session fixture `original_streams_grid` trains it once.

The claims hold under either stream family (the same step code, other random draws); under these, each claim is also
checked on runs the original lab itself made.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd

from harness.grid.conditions import load_grid
from harness.grid.knobs import Knobs
from harness.grid.spec import Condition, GridSpec
from harness.grid.trainer import GridTrainer

FILES = ("test_original_engine.py", "test_paper_claims.py")
PAPER_ORIGINAL = Path(__file__).resolve().parents[1] / "conditions" / "paper-original.toml"
PAPER_CLAIMED = ("baseline", "frozen", "slow-judge[judge_update_every=10]", "anchor[anchor_fraction=0.1]")
VARIANTS = (
    Condition(name="anchor-ensemble", knobs=Knobs(n_judges=2, anchor_fraction=0.1)),
    Condition(name="slow-meta", knobs=Knobs(judge_update_every=10, meta_update_every=10, meta_holdout_fraction=0.05)),
    Condition(name="reset-slow-ensemble", knobs=Knobs(n_judges=3, reset_every=3, judge_update_every=5)),
)


class TrainedGrid(NamedTuple):
    trainer: GridTrainer
    metrics: pd.DataFrame


def original_streams_spec() -> GridSpec:
    """The published conditions the claims name, as `conditions/paper-original.toml` defines them (the baseline from
    the original's baseline script), then VARIANTS: 7 conditions × 5 seeds."""
    published = load_grid(PAPER_ORIGINAL).only(PAPER_CLAIMED)
    run = published.run
    assert (run.seeds, run.iterations, run.steps_per_iteration) == ((0, 1, 2, 3, 4), 10, 200), "not as published"
    return GridSpec(name="original-streams", run=run, conditions=(*published.conditions, *VARIANTS))
