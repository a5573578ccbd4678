"""A step's keys: the original lab's key chain, restated split by split, and which runs' judges draw keys of their own.

The original's chain (tests/data/original_lab/STREAMS.md): (key, policy) = split(key); on a judge update
(key, x_a, x_b) = split(key, 3), then (key, first, second) = split(key, 3) once per judge that draws q*-labelled
pairs, in member order. The grid asks no mechanism's knob for this: a run's judges draw where a row it is scheduled
for says it draws per-judge keys (`StepRow.member_keys`, the anchor's row).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from harness.engine import streams
from harness.grid.knobs import Knobs
from harness.grid.layout import layout_grid
from harness.grid.spec import Condition, GridSpec, RunSettings
from tests.worlds import TWO_POSITIONS

MAX_MEMBERS = 4


def _chain(key: jax.Array, update_due: bool, member_draws: int) -> tuple[jax.Array, jax.Array, list[jax.Array]]:
    """(policy key, next key, each drawing member's key) by the original's splits, one call at a time."""
    key, policy = jax.random.split(key)
    if not update_due:
        return policy, key, []
    key = jax.random.split(key, 3)[0]
    members = []
    for _ in range(member_draws):
        members.append(key)
        key = jax.random.split(key, 3)[0]
    return policy, key, members


@pytest.mark.parametrize("update_due", [True, False])
@pytest.mark.parametrize("member_draws", [0, 1, 3, MAX_MEMBERS])
def test_the_original_chain_splits_once_per_drawing_judge(update_due: bool, member_draws: int) -> None:
    key = jax.random.PRNGKey(17)
    keys = streams.step_keys("original", key, np.int32(5), np.bool_(update_due), np.int32(member_draws), MAX_MEMBERS)
    policy, after, members = _chain(key, update_due, member_draws)
    np.testing.assert_array_equal(keys.policy, policy)
    np.testing.assert_array_equal(keys.next, after)
    for member, expected in enumerate(members):
        np.testing.assert_array_equal(keys.members[member], expected)


def test_coevolab_keys_do_not_depend_on_member_draws() -> None:
    key = jax.random.PRNGKey(3)
    none, all_members = (
        streams.step_keys("coevolab", key, np.int32(7), np.bool_(True), np.int32(draws), MAX_MEMBERS)
        for draws in (0, 3)
    )
    jax.tree.map(np.testing.assert_array_equal, none, all_members)
    np.testing.assert_array_equal(none.next, key)  # coevolab's run key never advances


def test_a_runs_judges_draw_keys_where_a_row_it_runs_draws_them() -> None:
    spec = GridSpec(
        run=RunSettings(seeds=(0, 1), iterations=1, steps_per_iteration=2, batch_size=16),
        world=TWO_POSITIONS,
        conditions=(
            Condition(name="baseline"),
            Condition(name="anchor", knobs=Knobs(anchor_fraction=0.25)),
            Condition(name="anchored-ensemble", knobs=Knobs(anchor_fraction=0.25, n_judges=3)),
            Condition(name="ensemble", knobs=Knobs(n_judges=3)),
            Condition(name="slow-anchor", knobs=Knobs(anchor_fraction=0.25, judge_update_every=4)),
            # Never updates, so never splits; scheduled for the anchor's row all the same (its judge's cadence).
            Condition(name="frozen-anchor", knobs=Knobs(anchor_fraction=0.25, freeze_judge=True)),
        ),
    )
    layout = layout_grid(spec)
    # Condition-major runs, two seeds each.
    np.testing.assert_array_equal(layout.run_member_draws, [0, 0, 1, 1, 3, 3, 0, 0, 1, 1, 1, 1])
