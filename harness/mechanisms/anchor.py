"""The oracle anchor: on every judge update, one more Bradley–Terry step on random pairs labelled by q*.

The published lab's upper reference: a share of each judge batch, max(1, floor(B·f)) pairs of distinct
outputs drawn uniformly, labelled by ground truth. It rides on the judge's update (its cadence, and none for
a frozen judge).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from harness.engine.architecture import DEFAULT_MODEL, ModelConfig
from harness.engine.keys import distinct_pairs
from harness.engine.learning import pair_bce
from harness.engine.state import Network, adam_step
from harness.engine.streams import Streams
from harness.grid.contract import GridFacts, Mechanism
from harness.grid.knobs import Knobs
from harness.grid.member_context import MemberContext
from harness.grid.step_rows import Cadence, StepRow
from harness.mechanisms.judge_update import judge_cadence, with_judge_update

# The static size every run's anchor pairs are padded to: the grid's largest count.
ANCHOR_PAIRS = "anchor_pairs"


class AnchorKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    anchor_fraction: float = Field(
        0.0, ge=0.0, le=1.0, description="extra q*-labelled step on max(1, floor(batch*f)) random pairs (0: off)"
    )


def anchor_pair_count(anchor_fraction: jnp.ndarray | np.ndarray, batch_size: int) -> jnp.ndarray:
    """Anchor pairs per judge update: max(1, floor(batch * f)) where f > 0, else 0."""
    fraction = jnp.asarray(anchor_fraction, jnp.float32)
    count = jnp.maximum(1, jnp.floor(batch_size * fraction).astype(jnp.int32))
    return jnp.where(fraction > 0, count, 0).astype(jnp.int32)


def anchor_pairs(streams: Streams, key: jax.Array, batch: int, max_pairs: int, n_outputs: int) -> jax.Array:
    """One judge's anchor pairs from its member key of the step, int32 (max_pairs, 2); a run uses the first count of
    them.

    coevolab's streams: pairs of distinct outputs, a prefix of one draw of `batch` pairs. The original's: each side
    drawn on its own, with replacement (a pair may repeat an output), from the key's split into three, as the
    original's anchor step splits its chain. Either way the first pairs do not depend on `max_pairs`, the grid's
    padding.
    """
    if streams == "coevolab":
        return distinct_pairs(key, batch, n_outputs)[:max_pairs]
    _, first_key, second_key = jax.random.split(key, 3)
    first = jax.random.randint(first_key, (max_pairs,), 0, n_outputs)
    second = jax.random.randint(second_key, (max_pairs,), 0, n_outputs)
    return jnp.stack([first, second], axis=1).astype(jnp.int32)


def anchor_update(
    judge: Network,
    pairs: jax.Array,
    count: jax.Array,
    lr: jax.Array,
    *,
    q_star: jax.Array,
    vocab: int,
    seq_len: int,
    model: ModelConfig = DEFAULT_MODEL,
) -> Network:
    """One q*-labelled step of one judge on the first `count` of `pairs` (int32 (P, 2) output indices,
    drawn uniformly by `anchor_pairs`; the rest is padding)."""
    labels = (q_star[pairs[:, 0]] > q_star[pairs[:, 1]]).astype(jnp.float32)
    mask = (jnp.arange(pairs.shape[0]) < count).astype(jnp.float32)
    grads, _ = jax.grad(pair_bce, has_aux=True)(judge.params, pairs, labels, mask, vocab, seq_len, model)
    return adam_step(judge, grads, lr)


def _schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """The anchor rides on the judge update: runs with anchor pairs, on their judge's cadence."""
    return None if knobs.anchor_fraction == 0 else judge_cadence(knobs)


def _update(judge: Network, member: MemberContext, own: None) -> tuple[Network, None]:
    """One judge's anchor step, on pairs drawn from its own key of the loop's streams (`StepKeys.members`)."""
    shape, knobs, q_star = member.shape, member.knobs, member.q_star
    n_outputs, batch = q_star.shape[0], shape.batch_size
    pairs = anchor_pairs(shape.streams, member.keys.members[member.member], batch, shape.size(ANCHOR_PAIRS), n_outputs)
    count = anchor_pair_count(knobs.anchor_fraction, batch)
    stepped = anchor_update(
        judge,
        pairs,
        count,
        knobs.lr_judge,
        q_star=q_star,
        vocab=shape.vocab_size,
        seq_len=shape.seq_len,
        model=shape.model,
    )
    return stepped, own


def _sizes(knobs: Sequence[Knobs], facts: GridFacts) -> Mapping[str, int]:
    counts = anchor_pair_count(np.array([k.anchor_fraction for k in knobs]), facts.batch_size)
    return {ANCHOR_PAIRS: int(np.max(counts))}


MECHANISM = Mechanism(
    name="anchor",
    summary="an extra q*-labelled step on a share of each judge batch (the oracle anchor)",
    knobs=AnchorKnobs,
    rows=(
        StepRow(
            name="anchor",
            stage="updates",
            schedule=_schedule,
            update=_update,
            due=with_judge_update,
            member_keys=True,
        ),
    ),
    sizes=_sizes,
)
