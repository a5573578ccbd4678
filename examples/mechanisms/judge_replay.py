"""A judge replay buffer: each judge keeps its last C pair batches and, after every update, takes one more
Bradley–Terry step on a batch drawn from them, labelled by its current preference.

A second mechanism of a lab's own (beside judge_tether.py), loaded by replay.toml with
`[mechanisms] modules = ["judge_replay.py"]`. It shows what the tether does not: state carried across inner steps
and outer iterations (the buffer, per judge), a static size (the buffer's capacity, the largest of the grid's
runs), a random draw of its own (which stored batch to replay, from the mechanism's own key for each judge,
`member.key`), two rows of one stage in order (replay, then store), and a metric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import flax.struct
import jax
import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict, Field

from harness.engine.architecture import ModelConfig
from harness.engine.metrics import NON_NEGATIVE, Metric
from harness.engine.state import Network
from harness.grid.contract import DiagnosticsContext, GridFacts, GridShape, Mechanism
from harness.grid.knobs import Knobs
from harness.grid.member_context import MemberContext
from harness.grid.step_rows import Cadence, StepRow
from harness.mechanisms.judge_update import judge_cadence, judge_pair_update, with_judge_update

NAME = "judge_replay"
CAPACITY = "judge_replay_capacity"  # the static size: stored batches per judge, the largest of the grid's runs


class ReplayKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    replay_buffer: int = Field(
        0,
        ge=0,
        le=64,
        description="each judge keeps its last C pair batches and, after every update, takes one more self-labelled "
        "Bradley–Terry step on one of them drawn at random; C is this capacity (0: off)",
    )


@flax.struct.dataclass
class ReplayBuffer:
    """One judge's stored pair batches: chosen and rejected int32 (C, B, L), the first `min(stored, capacity)` filled
    (oldest overwritten first), and stored int32 (), how many batches it has stored since the run began."""

    chosen: jax.Array
    rejected: jax.Array
    stored: jax.Array


def empty_buffer(shape: GridShape, pretrained: jax.Array) -> ReplayBuffer:
    """A judge's buffer before its first update (also what a judge reset returns it to)."""
    tokens = jnp.zeros((shape.size(CAPACITY), shape.batch_size, shape.seq_len), jnp.int32)
    return ReplayBuffer(tokens, tokens, jnp.zeros((), jnp.int32))


def replay(
    judge: Network,
    buffer: ReplayBuffer,
    key: jax.Array,
    capacity: jax.Array,
    lr: jax.Array,
    *,
    vocab: int,
    model: ModelConfig,
) -> Network:
    """One self-labelled Bradley–Terry step of one judge on a stored batch drawn uniformly from its filled entries."""
    entry = jax.random.randint(key, (), 0, jnp.minimum(buffer.stored, capacity))
    ordered = jnp.zeros((), bool)  # labelled by the judge's current preference, as its own update labels
    return judge_pair_update(judge, buffer.chosen[entry], buffer.rejected[entry], ordered, lr, vocab=vocab, model=model)


def store(buffer: ReplayBuffer, chosen: jax.Array, rejected: jax.Array, capacity: jax.Array) -> ReplayBuffer:
    """The buffer with this step's pair batch (B, L) each written over its oldest entry."""
    at = buffer.stored % jnp.maximum(capacity, 1)
    return ReplayBuffer(buffer.chosen.at[at].set(chosen), buffer.rejected.at[at].set(rejected), buffer.stored + 1)


def _schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """Runs with a buffer, on their judge's cadence (a frozen judge neither replays nor stores)."""
    return None if knobs.replay_buffer == 0 else judge_cadence(knobs)


def _replay(judge: Network, member: MemberContext, buffer: ReplayBuffer) -> tuple[Network, ReplayBuffer]:
    """The row's function of one judge: a replay step on one of its stored batches, drawn from the mechanism's own
    key for this judge on this step (`member.key`), independent of the loop's draws and of other mechanisms'."""
    shape, knobs = member.shape, member.knobs
    replayed = replay(
        judge, buffer, member.key, knobs.replay_buffer, knobs.lr_judge, vocab=shape.vocab_size, model=shape.model
    )
    return replayed, buffer


def _replay_due(member: MemberContext) -> jax.Array:
    """With the judge's update, once its buffer holds a batch."""
    return member.update_due & (member.slot.of(NAME).stored > 0)


def _store(judge: Network, member: MemberContext, buffer: ReplayBuffer) -> tuple[Network, ReplayBuffer]:
    """The row's function of one judge: the pair batch its update just used stored in its buffer."""
    chosen, rejected = member.pairs
    return judge, store(buffer, chosen, rejected, member.knobs.replay_buffer)


def _sizes(knobs: Sequence[Knobs], facts: GridFacts) -> Mapping[str, int]:
    return {CAPACITY: max((k.replay_buffer for k in knobs), default=0)}


def stored_batches(context: DiagnosticsContext) -> jax.Array:
    """Per run: the batches its judges hold (the run's judges store the same batches), at most its capacity."""
    stored = context.state.slots.of(NAME).stored[context.constants.run_first_slot]
    return jnp.minimum(stored, context.knobs.replay_buffer)


MECHANISM = Mechanism(
    name=NAME,
    summary="each judge replays a pair batch drawn from its last C after every update",
    knobs=ReplayKnobs,
    uses=lambda knobs: knobs.replay_buffer > 0,
    after=("judge_update",),
    rows=(
        StepRow(
            name=NAME,
            stage="updates",
            schedule=_schedule,
            update=_replay,
            due=_replay_due,
        ),
        StepRow(
            name=f"{NAME}_store",
            stage="updates",
            schedule=_schedule,
            update=_store,
            due=with_judge_update,
        ),
    ),
    sizes=_sizes,
    slot_state=empty_buffer,
    metrics=(
        Metric(
            "replay_stored",
            "replay buffer fill",
            "batches",
            "pair batches each of the run's judges holds to replay (at most its capacity)",
            lambda run: run.of(NAME),
            kind="int",
            valid=NON_NEGATIVE,
        ),
    ),
    view=stored_batches,
)
