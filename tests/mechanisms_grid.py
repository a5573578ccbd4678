"""A grid of every judge mechanism's kind that two test files share: test_grid_program (each condition alone and in
the grid, knob values that never recompile) and test_sharding (results independent of the split). Three seeds give
every kind an odd run count, so a split into shards needs fillers. `make test` runs the two files in one process
(tests/conftest.py), test_grid_program first: its split, a seed per shard on each device, is compiled once for both;
RETUNED has MECHANISMS's shape, so it runs on that program too.
"""

from __future__ import annotations

from harness.grid.knobs import Knobs
from harness.grid.spec import Condition, GridSpec, RunSettings
from tests.worlds import TWO_POSITIONS

MECHANISMS = GridSpec(
    name="mechanisms",
    run=RunSettings(seeds=(0, 1, 2), iterations=2, steps_per_iteration=20, batch_size=32),
    world=TWO_POSITIONS,
    conditions=(
        Condition(name="baseline"),
        Condition(name="ensemble", knobs=Knobs(n_judges=3)),
        Condition(name="anchor", knobs=Knobs(anchor_fraction=0.1)),
        Condition(name="meta", knobs=Knobs(meta_holdout_fraction=0.5)),  # 32 of the 64 outputs
        Condition(name="frozen", knobs=Knobs(freeze_judge=True), boundary=True),
        # Pads every anchor run of the grid to floor(32 * 0.5) = 16 pairs; "anchor" alone uses 3.
        Condition(name="anchor_wide", knobs=Knobs(anchor_fraction=0.5)),
    ),
)

# Same shape as MECHANISMS (ensemble sizes, anchor pair counts floor(32 f) = 3 and 16, held-out count, batch,
# steps, and the same work groups: which runs update their judges on every step, which check meta on
# every step), different knob values everywhere.
RETUNED = GridSpec(
    name="retuned",
    run=MECHANISMS.run,
    world=MECHANISMS.world,
    conditions=(
        Condition(name="baseline", knobs=Knobs(lr_judge=1e-3, lr_policy=1e-3, entropy_bonus=0.05)),
        Condition(name="ensemble", knobs=Knobs(n_judges=3, reset_every=1)),
        Condition(name="anchor", knobs=Knobs(anchor_fraction=0.12, lr_policy=1e-4)),
        Condition(name="meta", knobs=Knobs(meta_holdout_fraction=0.5, meta_accuracy_threshold=1.0)),
        Condition(name="frozen", knobs=Knobs(freeze_judge=False, judge_update_every=10), boundary=True),
        Condition(name="anchor_wide", knobs=Knobs(anchor_fraction=0.52, lr_judge=1e-4)),
    ),
)
