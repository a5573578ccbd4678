"""A grid of every judge mechanism's kind that two test files share: test_grid_program (each condition alone and in
the grid, knob values that never recompile) and test_sharding (results independent of the split). Three seeds give
every kind an odd run count, so a split into shards needs fillers. `make test` runs the two files in one process
(tests/conftest.py), test_grid_program first: its split, one shard per device, is compiled once for both.
"""

from __future__ import annotations

from harness.engine.knobs import Knobs
from harness.grid.layout import Condition, GridSpec, RunSettings

MECHANISMS = GridSpec(
    name="mechanisms",
    run=RunSettings(seeds=(0, 1, 2), iterations=2, steps_per_iteration=20, batch_size=32),
    conditions=(
        Condition(name="baseline"),
        Condition(name="ensemble", knobs=Knobs(n_judges=3)),
        Condition(name="anchor", knobs=Knobs(anchor_fraction=0.1)),
        Condition(name="meta", knobs=Knobs(meta_holdout_fraction=0.05)),
        Condition(name="frozen", knobs=Knobs(freeze_judge=True), boundary=True),
        # Pads every anchor run of the grid to floor(32 * 0.5) = 16 pairs; "anchor" alone uses 3.
        Condition(name="anchor_wide", knobs=Knobs(anchor_fraction=0.5)),
    ),
)
