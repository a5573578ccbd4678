"""The inner step's table: every scheduled mechanism is a row, every row a scheduled mechanism.

A schedule without a row would lay out work groups the step never applies; a row without a
schedule would never find a group to apply to. Both would pass silently, so they are checked here.
"""

from __future__ import annotations

import dataclasses
import inspect

from harness.engine import mechanisms
from harness.engine.state import SlotState
from harness.grid.schedules import SCHEDULES
from harness.grid.step_table import STEP_TABLE, PairSides, StepRow

# The networks each stage's rows replace a field of (what `apply_rows` is given by the step).
STAGE_NETWORKS = {"sides": PairSides, "judge_updates": SlotState, "meta_correction": SlotState}


def _rows() -> list[StepRow]:
    return [row for rows in STEP_TABLE.values() for row in rows]


def test_every_schedule_has_a_row_and_every_row_a_schedule() -> None:
    mechanisms_of_rows = [row.mechanism for row in _rows()]
    assert sorted(mechanisms_of_rows) == sorted(SCHEDULES)
    assert len(set(mechanisms_of_rows)) == len(mechanisms_of_rows)  # one row each


def test_stages_run_sides_then_judge_updates_then_meta_correction() -> None:
    assert list(STEP_TABLE) == ["sides", "judge_updates", "meta_correction"]
    assert [row.mechanism for row in STEP_TABLE["sides"]] == ["rejected_side", "lookahead"]
    # The judge's own update comes first: the anchor and meta-judging ride on it, and the average follows it.
    judge_rows = [row.mechanism for row in STEP_TABLE["judge_updates"]]
    assert judge_rows[0] == "judge_update"
    assert judge_rows[-1] == "judge_ema"


def test_every_row_replaces_a_field_of_its_stage_networks() -> None:
    for stage, rows in STEP_TABLE.items():
        fields = {field.name for field in dataclasses.fields(STAGE_NETWORKS[stage])}
        for row in rows:
            assert row.networks in fields, (stage, row.mechanism)
            assert row.per == ("run" if stage == "sides" else "slot"), (stage, row.mechanism)


def test_every_row_builds_its_pieces_from_the_step() -> None:
    """unit takes the step; arguments and due take (step, group, networks)."""
    for row in _rows():
        assert len(inspect.signature(row.unit).parameters) == 1, row.mechanism
        assert len(inspect.signature(row.arguments).parameters) == 3, row.mechanism
        assert len(inspect.signature(row.due).parameters) == 3, row.mechanism


def test_the_average_row_applies_the_mechanism_of_one_judge() -> None:
    (row,) = [row for row in _rows() if row.mechanism == "judge_ema"]
    assert row.networks == "judge_ema"
    assert row.unit(None) is mechanisms.ema_update  # its unit reads nothing of the step
