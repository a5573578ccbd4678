"""Meta-correction (the published lab's): judges checked on held-out q*-labelled pairs take a corrective step.

Every `meta_update_every` inner steps each judge of a run with held-out pairs (floor(outputs · f) of one
fixed draw) is checked; where its accuracy on them is below the threshold it takes one Bradley–Terry step
on them. The check is a forward pass; the step's backward pass is skipped unless some judge fails it.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from harness.engine import keys
from harness.engine.architecture import DEFAULT_MODEL, ModelConfig
from harness.engine.learning import pair_bce
from harness.engine.metrics import NON_NEGATIVE, Metric, ValidValues
from harness.engine.state import Network, adam_step
from harness.grid.contract import (
    DiagnosticsContext,
    GridShape,
    HostRuns,
    IterationContext,
    Mechanism,
    OwnState,
    StepContext,
)
from harness.grid.knobs import INNER_STEPS, UNIT, Knobs
from harness.grid.member_context import MemberContext
from harness.grid.memory import FLOAT_BYTES, activation_width
from harness.grid.step_rows import Cadence, StepRow, cadence_of
from harness.mechanisms.meta_correction_report import REPORT
from harness.original import streams as original_streams

ROW = "meta_correction"


class MetaCorrectionKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    meta_holdout_fraction: float = Field(
        0.0, ge=0.0, le=1.0, description="held-out q*-labelled pairs, floor(outputs*f) of them (0: meta off)"
    )
    meta_holdout_seed: int = Field(
        0,
        ge=0,
        description="which fixed draw of held-out pairs meta-correction uses (0: the streams' own; "
        "see harness.mechanisms.meta_correction.holdout_tables)",
    )
    meta_update_every: int = Field(
        1,
        ge=1,
        description="meta-correction checks the judges every k inner policy steps, on steps where (step+1) % k == 0",
        json_schema_extra={UNIT: INNER_STEPS},
    )
    meta_accuracy_threshold: float = Field(
        0.75, ge=0.0, le=1.0, description="meta-correction steps when held-out accuracy is below this"
    )


def holdout_pair_count(holdout_fraction: jnp.ndarray | np.ndarray, n_outputs: int) -> jnp.ndarray:
    """Held-out meta pairs: floor(outputs * f); zero means meta-correction is off."""
    fraction = jnp.asarray(holdout_fraction, jnp.float32)
    return jnp.floor(n_outputs * fraction).astype(jnp.int32)


def holdout_correction(
    judge: Network,
    pairs: jax.Array,
    labels: jax.Array,
    mask: jax.Array,
    lr: jax.Array,
    *,
    vocab: int,
    seq_len: int,
    model: ModelConfig = DEFAULT_MODEL,
) -> Network:
    """Meta-correction of one judge: one Bradley–Terry step on the held-out q*-labelled pairs (`pair_bce`'s
    arguments; its accuracy on them, a forward pass, decides whether the step is due)."""
    grads, _ = jax.grad(pair_bce, has_aux=True)(judge.params, pairs, labels, mask, vocab, seq_len, model)
    return adam_step(judge, grads, lr)


@flax.struct.dataclass
class HeldOut:
    """Each run's held-out pairs, int32 (R, H, 2) output indices padded to the grid's largest count H, and their
    labels (R, H) = 1[q*(a) > q*(b)]."""

    pairs: jax.Array
    labels: jax.Array


def holdout_tables(runs: HostRuns) -> HeldOut:
    """Each run's held-out pairs and labels, H = the grid's largest count (at least 1).

    Which draw a run uses is its `meta_holdout_seed`; the pairs a run uses are the first
    floor(outputs * meta_holdout_fraction) of that draw. coevolab's streams: distinct pairs
    from PRNGKey(keys.HOLDOUT_KEY + seed). Original streams: the original's draw with
    replacement from PRNGKey(seed) (its own is seed 0).
    """
    world = runs.world
    count = max((group.size for group in runs.shape.groups if group.row == ROW), default=0)
    count, n_outputs = max(count, 1), world.n_outputs
    seeds = np.asarray(runs.knobs.meta_holdout_seed)
    draws = {}
    for seed in sorted({int(s) for s in seeds}):
        if runs.streams == "coevolab":
            # A prefix of any longer draw (threefry's bits are partitionable), so drawing `count` is exact.
            draws[seed] = keys.distinct_pairs(jax.random.PRNGKey(keys.HOLDOUT_KEY + seed), count, n_outputs)
        else:
            draws[seed] = original_streams.holdout_pairs(count, n_outputs, seed)
    # On the host: device gathers would compile for every grid's run count.
    pairs = np.stack([np.asarray(draws[int(s)]) for s in seeds])
    q_star = np.asarray(world.q_star)
    labels = (q_star[pairs[..., 0]] > q_star[pairs[..., 1]]).astype(np.float32)
    return HeldOut(jnp.asarray(pairs), jnp.asarray(labels))


def _schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """Meta-correction: runs with at least one held-out pair, on their check's cadence."""
    if int(holdout_pair_count(knobs.meta_holdout_fraction, n_outputs)) == 0:
        return None
    return cadence_of(knobs.meta_update_every)


def _group_size(knobs: Sequence[Knobs], n_outputs: int) -> int:
    """The largest held-out pair count of a group's runs, to which every run's are padded."""
    return int(np.max(holdout_pair_count(np.array([k.meta_holdout_fraction for k in knobs]), n_outputs)))


def held_out(member: MemberContext) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A judge's run's held-out pairs, labels and mask, (H, ...) with H its work group's largest count."""
    n_held = member.group_size
    count = holdout_pair_count(member.knobs.meta_holdout_fraction, member.q_star.shape[0])
    mask = (jnp.arange(n_held) < count).astype(jnp.float32)
    tables = member.constants(ROW)
    return tables.pairs[:n_held], tables.labels[:n_held], mask


def _due(member: MemberContext) -> jax.Array:
    """A judge's check is due every meta_update_every steps."""
    return member.counter % member.knobs.meta_update_every == 0


def _failing(judge: Network, member: MemberContext, own: None) -> jax.Array:
    """Whether a judge's accuracy on its run's held-out pairs (a forward pass) is below the threshold: only then does
    it take the correction's step, whose backward pass the grid skips on steps where no judge fails."""
    shape = member.shape
    _, accuracy = pair_bce(judge.params, *held_out(member), shape.vocab_size, shape.seq_len, shape.model)
    return accuracy < member.knobs.meta_accuracy_threshold


def _update(judge: Network, member: MemberContext, own: None) -> tuple[Network, None]:
    """One judge's corrective step on its run's held-out pairs."""
    shape = member.shape
    corrected = holdout_correction(
        judge,
        *held_out(member),
        member.knobs.lr_judge,
        vocab=shape.vocab_size,
        seq_len=shape.seq_len,
        model=shape.model,
    )
    return corrected, own


@flax.struct.dataclass
class CorrectionCount:
    """Per run: meta-correction steps of this outer iteration, summed over the run's judges, int32."""

    corrections: jax.Array


def _start_iteration(context: IterationContext, own: OwnState) -> OwnState:
    return own._replace(runs=CorrectionCount(jnp.zeros_like(own.runs.corrections)))


def _after_step(step: StepContext, own: OwnState) -> OwnState:
    corrections = own.runs.corrections
    for group, corrected in step.applied.get(ROW, ()):
        n_runs = step.shape.n_runs
        corrections += jax.ops.segment_sum(corrected.astype(jnp.int32), group.ids.slot_run, num_segments=n_runs)
    return own._replace(runs=CorrectionCount(corrections))


@flax.struct.dataclass
class MetaView:
    """Per run: the mean held-out accuracy of its judges, whether it has held-out pairs, its corrections."""

    accuracy: jax.Array
    on: jax.Array
    corrections: jax.Array


def _view(context: DiagnosticsContext) -> MetaView:
    """Held-out accuracy of every judge, from its score table, masked to its run's held-out size; each run's mean."""
    constants, knobs, tables = context.constants, context.knobs, context.judge_tables
    held = constants.of("meta_correction")
    pairs, labels = held.pairs[constants.slot_run], held.labels[constants.slot_run]  # (J, H, ...)
    first = jnp.take_along_axis(tables, pairs[..., 0], axis=1)
    second = jnp.take_along_axis(tables, pairs[..., 1], axis=1)
    correct = (first > second) == (labels > 0.5)
    holdout_count = holdout_pair_count(knobs.meta_holdout_fraction, constants.q_star.shape[0])
    count = holdout_count[constants.slot_run]
    mask = jnp.arange(pairs.shape[1])[None, :] < count[:, None]
    slot_accuracy = jnp.sum(correct & mask, axis=1) / jnp.maximum(count, 1)
    members = context.members
    accuracy = jnp.sum(jnp.where(members, slot_accuracy[context.run_slots], 0.0), axis=1) / knobs.n_judges
    corrections = context.state.runs.of("meta_correction").corrections
    return MetaView(accuracy=accuracy, on=holdout_count > 0, corrections=corrections)


def _extra_bytes(shape: GridShape) -> int:
    """The held-out check's forward and backward passes: a prefix tree's hidden states and each pair's two sides."""
    n_outputs = shape.vocab_size**shape.seq_len
    held = max((group.size for group in shape.groups if group.row == ROW), default=0)
    judge_width = activation_width(shape.model.judge, shape.seq_len)
    return FLOAT_BYTES * shape.slots_of(ROW) * (n_outputs // shape.vocab_size + 2 * held) * judge_width * 3


MECHANISM = Mechanism(
    name="meta_correction",
    summary="judges failing a held-out q*-labelled check take a corrective step (the published lab's meta-correction)",
    knobs=MetaCorrectionKnobs,
    rows=(
        StepRow(
            name=ROW,
            stage="corrections",
            schedule=_schedule,
            update=_update,
            due=_due,
            check=_failing,
            group_size=_group_size,
        ),
    ),
    run_state=lambda shape, policy: CorrectionCount(jnp.zeros((), jnp.int32)),
    constants=holdout_tables,
    extra_bytes=_extra_bytes,
    start_iteration=_start_iteration,
    after_step=_after_step,
    metrics=(
        Metric(
            "meta_accuracy",
            "held-out accuracy",
            "fraction",
            "share of held-out q*-labelled pairs the run's judges order correctly, averaged over judges "
            "(empty: meta off)",
            lambda run: jnp.where(run.of("meta_correction").on, run.of("meta_correction").accuracy, jnp.nan),
            valid=ValidValues(0.0, 1.0, undefined=True),
        ),
        Metric(
            "meta_corrections",
            "meta-corrections",
            "judge steps",
            "held-out correction steps this outer iteration, summed over the run's judges",
            lambda run: run.of("meta_correction").corrections,
            kind="int",
            valid=NON_NEGATIVE,
        ),
    ),
    view=_view,
    report=REPORT,
)
