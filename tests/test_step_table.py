"""The inner step's table, as the built-in mechanisms declare it: every row in its stage, in order, each a function of
one member of its work group with the contract's signatures."""

from __future__ import annotations

import inspect

from harness.grid import registry
from harness.grid.contract import STAGES
from harness.mechanisms import BUILT_IN


def test_stages_run_sides_then_updates_then_corrections_in_mechanism_order() -> None:
    order = {stage: [row.name for row in registry.stage_rows(BUILT_IN, stage)] for stage in STAGES}
    assert order == {
        "sides": ["rejected_side", "lookahead"],
        # The judge's own update comes first: the anchor and meta-judging ride on it, and the average follows it.
        "updates": ["judge_update", "anchor", "referee", "judge_ema"],
        "corrections": ["meta_correction"],
    }


def test_row_names_are_unique_and_every_row_has_a_schedule() -> None:
    names = [row.name for row in registry.rows(BUILT_IN)]
    assert len(set(names)) == len(names)
    for row in registry.rows(BUILT_IN):
        assert len(inspect.signature(row.schedule).parameters) == 2, row.name


def test_every_row_is_a_function_of_one_member_in_the_hooks_form() -> None:
    """update and check take (value, member, own); due takes the member alone."""
    for row in registry.rows(BUILT_IN):
        assert list(inspect.signature(row.update).parameters)[1] == "member", row.name
        assert len(inspect.signature(row.update).parameters) == 3, row.name
        assert len(inspect.signature(row.due).parameters) == 1, row.name
        assert row.check is None or len(inspect.signature(row.check).parameters) == 3, row.name
    # Only meta-correction reads the network to decide: its held-out check is a forward pass.
    assert [row.name for row in registry.rows(BUILT_IN) if row.check is not None] == ["meta_correction"]
