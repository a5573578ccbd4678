"""The inner step's table, as the built-in mechanisms declare it: every row in its stage, in order, each a function of
one member of its work group with the contract's signatures."""

from __future__ import annotations

import inspect

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from harness.grid import registry
from harness.grid.contract import Mechanism, OwnState, PairSides, StepContext
from harness.grid.knobs import Knobs
from harness.grid.member_context import MemberContext
from harness.grid.spec import Condition, GridSpec, MechanismSource, RunSettings
from harness.grid.step_rows import STAGES, StepRow
from harness.grid.trainer import GridTrainer
from harness.mechanisms import BUILT_IN
from tests.worlds import TWO_POSITIONS


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


@flax.struct.dataclass
class SideCounts:
    """Per run: steps on which the counting row acted, as its own state counted them and as `after_step` read them
    off the sides stage's applied rows."""

    by_row: jax.Array
    by_applied: jax.Array


def _count(sides: PairSides, member: MemberContext, own: SideCounts) -> tuple[PairSides, SideCounts]:
    return sides, own.replace(by_row=own.by_row + 1)


def _after_step(step: StepContext, own: OwnState) -> OwnState:
    acted = sum(
        jnp.zeros(step.shape.n_runs, jnp.int32).at[group.ids.run_ids].add(due.astype(jnp.int32))
        for group, due in step.applied["side_counter"]
    )
    return own._replace(runs=own.runs.replace(by_applied=own.runs.by_applied + acted))


SIDE_COUNTER = Mechanism(
    "side_counter",
    "a sides-stage row due on even steps by the step's counter alone, checked on the network, counting in its state",
    rows=(
        StepRow(
            name="side_counter",
            stage="sides",
            schedule=lambda knobs, n_outputs: "every_step",
            update=_count,
            # A flag read off the step alone: the same on every shard, where the check's varies.
            due=lambda member: member.counter % 2 == 0,
            check=lambda sides, member, own: jnp.all(jnp.isfinite(sides.chosen)),
        ),
    ),
    run_state=lambda shape, policy: SideCounts(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)),
    after_step=_after_step,
)


def test_a_sides_row_keeps_its_run_state_and_a_counter_only_due_composes_with_a_check() -> None:
    """Two outer iterations of 5 steps: the row acts on steps 2 and 4 of each, in every run of both shards, and
    counts 4; `after_step` sees the same from the stage's applied rows. Each branch of the check's cond must vary
    across shards alike, which a due read off the counter alone does not (a trace error before the fix)."""
    with registry.restored_catalog():
        registry.register(SIDE_COUNTER, module="side_counter.py", digest="0" * 64)
        spec = GridSpec(
            mechanisms=(MechanismSource(name="side_counter", module="side_counter.py", digest="0" * 64),),
            run=RunSettings(seeds=(0, 1), iterations=2, steps_per_iteration=5, batch_size=16),
            world=TWO_POSITIONS,
            conditions=(Condition(name="baseline"), Condition(name="slower", knobs=Knobs(judge_update_every=2))),
        )
        trainer = GridTrainer(spec, max_shards=2)
        trainer.run()
    counts = trainer.final_state.runs.of("side_counter")
    np.testing.assert_array_equal(counts.by_row, [4] * 4)
    np.testing.assert_array_equal(counts.by_applied, [4] * 4)
