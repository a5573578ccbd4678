"""What a row of the inner step reads of one member of its work group on one step: one judge slot (stages
"updates" and "corrections") or one run (stage "sides"), as if the grid did not exist.

The grid makes one `MemberContext` per member (inside `jax.vmap` over the group's members) and hands it to the
row's `due`, `check` and `update` (`harness.grid.step_rows.StepRow`). Each field is computed the first time a row
reads it, for the whole work group at once (the run's judges: for every judge slot), then taken for the member, so
what no row reads is never traced. A field is the member's own whichever work group it falls in; only
`group_size`, the group's padding, depends on the group.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import jax

from harness.engine import streams
from harness.engine.state import Network, RunState, SlotState, take
from harness.grid.contract import GridShape, PairSides, StepContext
from harness.grid.judge_slots import pair_tokens, run_judge_slots
from harness.grid.knobs import RunKnobs
from harness.grid.reward import reward_judges
from harness.grid.step_rows import STAGE_MEMBERS, Group, Stage


class MemberContext:
    """One member of a row's work group on one step: a judge slot, or a run in the sides stage.

    Of the step: shape, the grid's static shape (`GridShape`: vocab_size, seq_len, batch_size, model, `size(name)`);
    group_size, the static size the row's `group_size` gave the member's work group (0 without one); counter, int32
    (), the step's 1-based count within its outer iteration; update_due, bool (), whether its run's judge update is
    due on this step; contrast, bool (), whether its run's judge pairs on this step are labelled chosen > rejected.
    Randomness: key (2,), the row's mechanism's own key for this member on this step (independent of the loop's
    draws, of every other mechanism's and, for a judge, of its run's other judges'); keys, its run's keys of the
    step (`streams.StepKeys`), the loop's own draws, for a built-in that follows them.
    Of its run: knobs (`RunKnobs` of scalars); run, its `RunState` as the step stands (the policy and every
    mechanism's per-run state); sides, the `PairSides` rows (P,) its judge's pairs are drawn from (in the sides
    stage, as the stage stands); judges (M, P) and judge_members bool (M,), its run's judge rows as the policy is
    rewarded by them, padded to the grid's largest ensemble, and which are real; initial_policy (P,), its π₀ row;
    q_star (N,); `constants(name)`, what mechanism `name` declared for the run (`Mechanism.constants`).
    Of a judge slot (not in the sides stage): member, int32 (), which of its run's judges it is; slot, its
    `SlotState` as the stage stands when the row reaches it (the judge and every mechanism's per-judge state);
    pretrained (P,), its pretrained row; pairs, (chosen, rejected) int32 (B, L) each, its run's judge pair batch of
    this step (what the judge's own update trains on).
    """

    def __init__(
        self,
        step: StepContext,
        group: Group,
        stage: Stage,
        values: Any,
        owns: dict[str, Any],
        mechanism: str,
        index: jax.Array,
    ) -> None:
        """step: the step as the stage found it; group: the member's work group; values and owns: the stage's
        networks (`PairSides` for the sides stage, the judges' `Network` otherwise) and every mechanism's state on the
        stage's member axis, as the row found them; mechanism: the row's; index: the member's position in the group."""
        self._step, self._group, self._stage = step, group, stage
        self._values, self._owns, self._mechanism, self._index = values, owns, mechanism, index
        self._slot_member = STAGE_MEMBERS[stage] == "slot"
        ids = group.ids
        self._run = ids.slot_run[index] if self._slot_member else ids.run_ids[index]

    def _of_slot(self, field: str) -> None:
        if not self._slot_member:
            raise AttributeError(f"MemberContext.{field} is a judge slot's, and a member of stage 'sides' is a run")

    # Of the step.
    @property
    def shape(self) -> GridShape:
        return self._step.shape

    @property
    def group_size(self) -> int:
        return self._group.sizes.size

    @property
    def counter(self) -> jax.Array:
        return self._step.counter

    @cached_property
    def update_due(self) -> jax.Array:
        return self._step.update_due[self._run]

    @cached_property
    def contrast(self) -> jax.Array:
        return self._step.contrast[self._run]

    @cached_property
    def keys(self) -> streams.StepKeys:
        return take(self._step.keys, self._run)

    @cached_property
    def key(self) -> jax.Array:
        own = streams.own_key(self._step.keys.judge_pairs[self._run], self._mechanism)
        return jax.random.fold_in(own, self.member) if self._slot_member else own

    # Of its run.
    @cached_property
    def knobs(self) -> RunKnobs:
        return take(self._step.knobs, self._run)

    @cached_property
    def run(self) -> RunState:
        runs = self._step.state.runs
        if not self._slot_member:
            runs = runs.replace(mechanisms=self._owns)
        return take(runs, self._run)

    @cached_property
    def sides(self) -> PairSides:
        return take(self._step.sides if self._slot_member else self._values, self._run)

    @cached_property
    def _run_judges(self) -> tuple[jax.Array, jax.Array]:
        step = self._step
        slots = SlotState(judge=self._values, mechanisms=self._owns) if self._slot_member else step.state.slots
        rows = reward_judges(step.shape, step.constants, step.knobs, slots)
        run_slots, members = run_judge_slots(step.shape, step.constants)
        return rows[run_slots[self._run]], members[self._run]

    @property
    def judges(self) -> jax.Array:
        return self._run_judges[0]

    @property
    def judge_members(self) -> jax.Array:
        return self._run_judges[1]

    @cached_property
    def initial_policy(self) -> jax.Array:
        return self._step.constants.initial_policies[self._run]

    @property
    def q_star(self) -> jax.Array:
        return self._step.constants.q_star

    def constants(self, name: str) -> Any:
        """What mechanism `name` declared for the member's run (`Mechanism.constants`, without the run axis)."""
        return take(self._step.constants.of(name), self._run)

    # Of a judge slot.
    @cached_property
    def _slot(self) -> jax.Array:
        self._of_slot("slot")
        return self._group.ids.slot_ids[self._index]

    @cached_property
    def member(self) -> jax.Array:
        self._of_slot("member")
        return self._slot - self._step.constants.run_first_slot[self._run]

    @cached_property
    def slot(self) -> SlotState:
        self._of_slot("slot")
        judge: Network = self._values
        return take(SlotState(judge=judge, mechanisms=self._owns), self._slot)

    @cached_property
    def pretrained(self) -> jax.Array:
        self._of_slot("pretrained")
        return self._step.constants.pretrained_judges[self._slot]

    @cached_property
    def pairs(self) -> tuple[jax.Array, jax.Array]:
        self._of_slot("pairs")
        step = self._step
        chosen, rejected = pair_tokens(step.shape, step.sides, step.keys, self._group.ids)
        return chosen[self._index], rejected[self._index]
