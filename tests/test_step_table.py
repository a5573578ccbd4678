"""The inner step's table, as the built-in mechanisms declare it: every row in its stage, in order, replacing a field
that its stage's networks have, built from the step with the contract's signatures."""

from __future__ import annotations

import dataclasses
import inspect

from harness.grid import registry
from harness.grid.contract import STAGES, PairSides
from harness.mechanisms import BUILT_IN, judge_ema


def test_stages_run_sides_then_updates_then_corrections_in_mechanism_order() -> None:
    order = {stage: [row.name for row in registry.stage_rows(BUILT_IN, stage)] for stage in STAGES}
    assert order == {
        "sides": ["rejected_side", "lookahead"],
        # The judge's own update comes first: the anchor and meta-judging ride on it, and the average follows it.
        "updates": ["judge_update", "anchor", "referee", "judge_ema"],
        "corrections": ["meta_correction"],
    }


def test_every_row_replaces_a_field_of_its_stage_networks() -> None:
    slot_fields = {"judge"} | {m.name for m in BUILT_IN if m.slot_state is not None}
    side_fields = {field.name for field in dataclasses.fields(PairSides)}
    for row in registry.rows(BUILT_IN):
        assert row.replaces in (side_fields if row.stage == "sides" else slot_fields), row.name


def test_row_names_are_unique_and_every_row_has_a_schedule() -> None:
    names = [row.name for row in registry.rows(BUILT_IN)]
    assert len(set(names)) == len(names)
    for row in registry.rows(BUILT_IN):
        assert len(inspect.signature(row.schedule).parameters) == 2, row.name


def test_every_row_builds_its_pieces_from_the_step() -> None:
    """unit takes the step; arguments and due take (step, group, networks)."""
    for row in registry.rows(BUILT_IN):
        assert len(inspect.signature(row.unit).parameters) == 1, row.name
        assert len(inspect.signature(row.arguments).parameters) == 3, row.name
        assert len(inspect.signature(row.due).parameters) == 3, row.name


def test_the_average_row_applies_the_mechanism_of_one_judge() -> None:
    (row,) = [row for row in registry.rows(BUILT_IN) if row.name == "judge_ema"]
    assert row.replaces == "judge_ema"
    assert row.unit(None) is judge_ema.ema_update  # its unit reads nothing of the step
