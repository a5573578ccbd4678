"""The inner step as a table: one row per scheduled mechanism, grouped by stage.

A row (`StepRow`) names its mechanism (its schedule's name in `harness.grid.schedules.SCHEDULES`,
which names its work groups), the one-network unit of `harness.engine.mechanisms`, how its
per-member arguments are built, and when each member is due. `apply_rows` applies a stage's rows
in order to each of their work groups through `batching.apply_where_due`; the step
(`harness.grid.training_step`) runs the stages of `STEP_TABLE` in order. Adding a scheduled
mechanism adds a schedule and a row; a test holds the two to each other. The constants and the
judge rows the rows read (`GridConstants`, `run_judge_slots`, `reward_judges`, `pair_tokens`) live
here too, below the step that imports them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Literal, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp

from harness.engine import mechanisms, streams
from harness.engine.knobs import RunKnobs, anchor_pair_count, holdout_pair_count
from harness.engine.state import CoevolutionState, SlotState, select, take
from harness.grid.batching import WorkGroup, apply_where_due
from harness.grid.layout import GridShape, WorkGroupShape


@flax.struct.dataclass
class GridConstants:
    """Arrays fixed for the life of a grid.

    q_star (N,); slot_run int32 (J,) the run of each judge slot; run_first_slot int32 (R,)
    its first slot (a run's slots are consecutive); groups: one `WorkGroup` per
    shape.groups entry; holdout_pairs int32 (R, H, 2): each run's held-out pairs (output
    indices, padded to the grid's largest count H), holdout_labels (R, H) = 1[q*(a) > q*(b)];
    pretrained_judges float32 (J, P) rows; initial_policies float32 (R, P) rows, π₀ of each run;
    initial_log_pi float32 (R, N): log π₀ of each run's initial policy over every output
    (what the diagnostics measure drift from).
    """

    q_star: jax.Array
    slot_run: jax.Array
    run_first_slot: jax.Array
    groups: tuple[WorkGroup, ...]
    holdout_pairs: jax.Array
    holdout_labels: jax.Array
    pretrained_judges: jax.Array
    initial_policies: jax.Array
    initial_log_pi: jax.Array


def run_judge_slots(shape: GridShape, constants: GridConstants, knobs: RunKnobs) -> tuple[jax.Array, jax.Array]:
    """Each run's judge slots padded to the largest ensemble: slot ids int32 (R, M) and which are real (R, M)."""
    member = jnp.arange(shape.max_members)
    members = member[None, :] < knobs.n_judges[:, None]
    slots = jnp.where(members, constants.run_first_slot[:, None] + member[None, :], constants.run_first_slot[:, None])
    return slots, members


def reward_judges(shape: GridShape, constants: GridConstants, knobs: RunKnobs, slots: SlotState) -> jax.Array:
    """The judge row each slot rewards its run's policy with, (J, P): its moving average where the run keeps one
    (`Knobs.judge_ema`), else the live judge. The rows themselves where no run of the grid averages."""
    if not shape.groups_of("judge_ema"):
        return slots.judge.params
    return select(knobs.judge_ema[constants.slot_run] > 0, slots.judge_ema, slots.judge.params)


def pair_tokens(
    shape: GridShape, sides: tuple[jax.Array, jax.Array], keys: streams.StepKeys, group: WorkGroup
) -> tuple[jax.Array, jax.Array]:
    """The judge pair batch of each slot of `group`: chosen and rejected tokens (Jg, B, L) each, drawn with the
    run's judge-pair noise from its sides' policy rows (one batch per run, shared by the run's judges)."""
    batch, vocab, seq_len = shape.batch_size, shape.vocab_size, shape.seq_len
    pair_noise = partial(streams.judge_pair_noise, shape.streams, batch=batch, vocab=vocab, seq_len=seq_len)
    sample = jax.vmap(partial(mechanisms.sample, vocab=vocab, model=shape.model))
    runs = group.run_ids
    noise = jax.vmap(pair_noise)(keys.judge_pairs[runs])
    chosen_rows, rejected_rows = (rows[runs] for rows in sides)
    chosen, _ = sample(chosen_rows, noise[:, :, :batch])
    rejected, _ = sample(rejected_rows, noise[:, :, batch:])
    return chosen[group.slot_position], rejected[group.slot_position]


# --------------------------------------------------------------------------------------------------------------------
# The step as a table: one row per scheduled mechanism


@flax.struct.dataclass
class PairSides:
    """The policy rows (R, P) each run draws the chosen and the rejected side of its judge's pairs from."""

    chosen: jax.Array
    rejected: jax.Array


# What a stage's rows replace fields of: the pair sides' policy rows, or the judge slots' state.
StageNetworks = PairSides | SlotState


class StepContext(NamedTuple):
    """What the rows of one inner step read: the state after the policy step, the step's keys (`streams.StepKeys`),
    and what a stage adds for the next: contrast bool (R,), the runs whose pairs on this step have a side other than
    the policy; update_due bool (R,), the runs whose judge update is due; sides, the (chosen, rejected) policy rows
    (R, P) each once drawn; counter, the step's 1-based count within its outer iteration. A field a stage's rows
    do not read may be None."""

    shape: GridShape
    constants: GridConstants
    knobs: RunKnobs
    state: CoevolutionState
    keys: streams.StepKeys | None = None
    contrast: jax.Array | None = None
    update_due: jax.Array | None = None
    sides: tuple[jax.Array, jax.Array] | None = None
    counter: jax.Array | None = None


class Group(NamedTuple):
    """One work group of a row's mechanism: its runs and slots (device arrays) and its static sizes."""

    ids: WorkGroup
    sizes: WorkGroupShape


class StepRow(NamedTuple):
    """One scheduled mechanism of the inner step: `apply_rows` applies it to each of its work groups.

    mechanism: its schedule's name in `SCHEDULES`, which names its work groups (`GridShape.groups_of`);
    networks: the field of the stage's networks it replaces (`PairSides` or `SlotState`); per: whether
    those are indexed by the group's runs ("run") or judge slots ("slot"); unit: the one-network function
    of `harness.engine.mechanisms`, its shared arguments bound from the step; arguments: the per-member
    arguments, each with the group's members on its leading axis (built only on steps where some member is
    due); due: bool per member, where the mechanism acts on this step. `arguments` and `due` read the
    stage's networks as they stand when the row reaches the group.
    """

    mechanism: str
    networks: str
    per: Literal["run", "slot"]
    unit: Callable[[StepContext], Callable[..., Any]]
    arguments: Callable[[StepContext, Group, StageNetworks], tuple]
    due: Callable[[StepContext, Group, StageNetworks], jax.Array]


def apply_rows(
    rows: tuple[StepRow, ...], step: StepContext, networks: StageNetworks
) -> tuple[StageNetworks, tuple[tuple[Group, jax.Array], ...]]:
    """The stage's networks after each row, in order, on each of its work groups (in `GridShape.groups` order).

    Returns the networks and, for every group a row was applied to, the group and its members' due mask.
    """
    applied = []
    for row in rows:
        unit = row.unit(step)
        for index in step.shape.groups_of(row.mechanism):
            group = Group(step.constants.groups[index], step.shape.groups[index])
            ids = group.ids.run_ids if row.per == "run" else group.ids.slot_ids
            due = row.due(step, group, networks)
            arguments = partial(row.arguments, step, group, networks)
            new = apply_where_due(unit, getattr(networks, row.networks), ids, due, arguments)
            networks = networks.replace(**{row.networks: new})
            applied.append((group, due))
    return networks, tuple(applied)


# Where a judge's pairs come from: rows over runs, replacing a field of `PairSides`.


def rejected_side_arguments(step: StepContext, group: Group, sides: PairSides) -> tuple[jax.Array, ...]:
    runs = group.ids.run_ids
    history, initial = step.state.runs.policy_history[runs], step.constants.initial_policies[runs]
    return history, initial, step.knobs.rejected_from[runs], step.knobs.temporal_gap[runs]


def lookahead_arguments(step: StepContext, group: Group, sides: PairSides) -> tuple[Any, ...]:
    shape, knobs, runs = step.shape, step.knobs, group.ids.run_ids
    slots, members = run_judge_slots(shape, step.constants, knobs)
    step_keys = jax.vmap(lambda key: jax.random.split(key, shape.max_lookahead_steps))(step.keys.contrast[runs])
    sampling_noise = partial(
        streams.sampling_noise, shape.streams, batch=shape.batch_size, vocab=shape.vocab_size, seq_len=shape.seq_len
    )
    noise = jax.vmap(jax.vmap(sampling_noise))(step_keys)
    run_knobs = jax.tree.map(lambda leaf: leaf[runs], knobs)
    # The copy trains as the policy does: against the judges the policy is rewarded by.
    judges = reward_judges(shape, step.constants, knobs, step.state.slots)[slots[runs]]
    return take(step.state.runs.policy, runs), judges, members[runs], noise, knobs.lookahead_steps[runs], run_knobs


def contrast_due(step: StepContext, group: Group, sides: PairSides) -> jax.Array:
    """A run's side is replaced where its judge update is due and draws contrast pairs (`judge_updates`)."""
    return step.contrast[group.ids.run_ids]


SIDE_ROWS = (
    StepRow(
        mechanism="rejected_side",
        networks="rejected",
        per="run",
        unit=lambda step: mechanisms.rejected_side,
        arguments=rejected_side_arguments,
        due=contrast_due,
    ),
    StepRow(
        mechanism="lookahead",
        networks="chosen",
        per="run",
        unit=lambda step: partial(mechanisms.lookahead_side, vocab=step.shape.vocab_size, model=step.shape.model),
        arguments=lookahead_arguments,
        due=contrast_due,
    ),
)


# The judge updates: rows over judge slots, replacing a field of `SlotState`.


def judge_update_arguments(step: StepContext, group: Group, slots: SlotState) -> tuple[jax.Array, ...]:
    runs = group.ids.slot_run
    chosen, rejected = pair_tokens(step.shape, step.sides, step.keys, group.ids)
    return chosen, rejected, step.contrast[runs], step.knobs.lr_judge[runs]


def anchor_arguments(step: StepContext, group: Group, slots: SlotState) -> tuple[jax.Array, ...]:
    shape, constants, knobs, runs = step.shape, step.constants, step.knobs, group.ids.slot_run
    members = group.ids.slot_ids - constants.run_first_slot[runs]
    draw = partial(
        streams.anchor_pairs,
        shape.streams,
        batch=shape.batch_size,
        max_pairs=shape.max_anchor_pairs,
        n_outputs=constants.q_star.shape[0],
    )
    pairs = jax.vmap(draw)(step.keys.anchors[runs, members])
    return pairs, anchor_pair_count(knobs.anchor_fraction[runs], shape.batch_size), knobs.lr_judge[runs]


def referee_arguments(step: StepContext, group: Group, slots: SlotState) -> tuple[jax.Array, ...]:
    runs = group.ids.slot_run
    chosen, rejected = pair_tokens(step.shape, step.sides, step.keys, group.ids)
    referees = step.constants.pretrained_judges[group.ids.slot_ids]
    return chosen, rejected, referees, step.knobs.referee_margin[runs], step.knobs.lr_judge[runs]


def judge_ema_arguments(step: StepContext, group: Group, slots: SlotState) -> tuple[jax.Array, ...]:
    """Each judge as the rows before this one left it (its update, anchor and referee steps), and its run's decay."""
    return slots.judge.params[group.ids.slot_ids], step.knobs.judge_ema[group.ids.slot_run]


def with_judge_update(step: StepContext, group: Group, slots: SlotState) -> jax.Array:
    """Each judge is due where its run's judge update is (`inner_step`'s update_due, by the run's cadence)."""
    return step.update_due[group.ids.slot_run]


JUDGE_UPDATE_ROWS = (
    StepRow(
        mechanism="judge_update",
        networks="judge",
        per="slot",
        unit=lambda step: partial(mechanisms.judge_pair_update, vocab=step.shape.vocab_size, model=step.shape.model),
        arguments=judge_update_arguments,
        due=with_judge_update,
    ),
    StepRow(
        mechanism="anchor",
        networks="judge",
        per="slot",
        unit=lambda step: partial(
            mechanisms.anchor_update,
            q_star=step.constants.q_star,
            vocab=step.shape.vocab_size,
            seq_len=step.shape.seq_len,
            model=step.shape.model,
        ),
        arguments=anchor_arguments,
        due=with_judge_update,
    ),
    StepRow(
        mechanism="referee",
        networks="judge",
        per="slot",
        unit=lambda step: partial(mechanisms.referee_update, vocab=step.shape.vocab_size, model=step.shape.model),
        arguments=referee_arguments,
        due=with_judge_update,
    ),
    StepRow(
        mechanism="judge_ema",
        networks="judge_ema",
        per="slot",
        unit=lambda step: mechanisms.ema_update,
        arguments=judge_ema_arguments,
        due=with_judge_update,
    ),
)


# Meta-correction: a row over judge slots on its own cadence, due where a judge fails its held-out check.


def held_out(step: StepContext, group: Group) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Each judge's run's held-out pairs, labels and mask, (Jg, H, ...) with H the group's largest count."""
    runs, n_held = group.ids.slot_run, group.sizes.holdout_pairs
    count = holdout_pair_count(step.knobs.meta_holdout_fraction[runs], step.constants.q_star.shape[0])
    mask = (jnp.arange(n_held)[None, :] < count[:, None]).astype(jnp.float32)
    return step.constants.holdout_pairs[runs, :n_held], step.constants.holdout_labels[runs, :n_held], mask


def meta_correction_arguments(step: StepContext, group: Group, slots: SlotState) -> tuple[jax.Array, ...]:
    return *held_out(step, group), step.knobs.lr_judge[group.ids.slot_run]


def meta_correction_due(step: StepContext, group: Group, slots: SlotState) -> jax.Array:
    """Judges whose check is due (every meta_update_every steps) and whose held-out accuracy is below threshold."""
    shape, knobs, runs = step.shape, step.knobs, group.ids.slot_run
    accuracy_of = jax.vmap(mechanisms.pair_bce, (0, 0, 0, 0, None, None, None))
    check_due = step.counter % knobs.meta_update_every[runs] == 0
    # The check is a forward pass; the correction's backward pass is skipped unless some judge fails it.
    accuracy = jax.lax.cond(
        jnp.any(check_due),
        lambda: accuracy_of(
            slots.judge.params[group.ids.slot_ids], *held_out(step, group), shape.vocab_size, shape.seq_len, shape.model
        )[1],
        lambda: jnp.ones_like(check_due, jnp.float32),  # (shaped like a per-shard value, for shard_map)
    )
    return check_due & (accuracy < knobs.meta_accuracy_threshold[runs])


META_CORRECTION_ROWS = (
    StepRow(
        mechanism="meta_correction",
        networks="judge",
        per="slot",
        unit=lambda step: partial(
            mechanisms.holdout_correction,
            vocab=step.shape.vocab_size,
            seq_len=step.shape.seq_len,
            model=step.shape.model,
        ),
        arguments=meta_correction_arguments,
        due=meta_correction_due,
    ),
)

# Every scheduled mechanism's row, by stage, in the order the inner step runs the stages.
STEP_TABLE: dict[str, tuple[StepRow, ...]] = {
    "sides": SIDE_ROWS,
    "judge_updates": JUDGE_UPDATE_ROWS,
    "meta_correction": META_CORRECTION_ROWS,
}
