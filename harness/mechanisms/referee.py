"""Meta-judging without ground truth (Meta-Rewarding): a frozen referee re-labels the pairs a judge is least sure of.

After each judge update, the pairs of two different outputs in its batch on which the judge is least certain,
|J(a) − J(b)| below the margin (a Bradley–Terry preference closer to ½ than σ(margin)), are re-judged by a
frozen referee, the judge's own pretrained weights, and the judge takes one step toward the referee's labels
on them. q* is never read after pretraining; the pair audit measures the referee's errors.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from pydantic import BaseModel, ConfigDict, Field

from harness.engine.architecture import DEFAULT_MODEL, ModelConfig
from harness.engine.learning import pair_margins
from harness.engine.metrics import Metric, ValidValues
from harness.engine.state import Network, adam_step
from harness.grid.contract import DiagnosticsContext, GridShape, Mechanism
from harness.grid.knobs import Knobs
from harness.grid.member_context import MemberContext
from harness.grid.step_rows import Cadence, StepRow
from harness.mechanisms.judge_update import judge_cadence, with_judge_update

ROW = "referee"


class RefereeKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    referee_margin: float = Field(
        0.0,
        ge=0.0,
        description="meta-judging: after each judge update, pairs of its batch on which the judge is least "
        "certain, |J(a) − J(b)| below this Bradley–Terry margin, get one more step toward the labels of a frozen "
        "referee, the judge's own pretrained weights; no q* involved (0: off)",
    )


def referee_update(
    judge: Network,
    first: jax.Array,
    second: jax.Array,
    referee: jax.Array,
    margin: jax.Array,
    lr: jax.Array,
    *,
    vocab: int,
    model: ModelConfig = DEFAULT_MODEL,
) -> Network:
    """Meta-judging of one judge: the pairs of two distinct outputs in its batch on which it is least certain,
    |J(a) − J(b)| < margin, are re-judged by a frozen referee row (its pretrained self), and the judge takes one
    Bradley–Terry step toward the referee's labels on them. No step where no pair is that uncertain."""
    # A pair of one output has margin 0 but nothing to judge: it is never re-judged (it would only dilute the step).
    distinct = jnp.any(first != second, axis=1)
    uncertain = (distinct & (jnp.abs(pair_margins(judge.params, first, second, vocab, model)) < margin)).astype(
        jnp.float32
    )
    labels = (pair_margins(referee, first, second, vocab, model) > 0).astype(jnp.float32)

    def loss(row: jax.Array) -> jax.Array:
        bce = optax.sigmoid_binary_cross_entropy(pair_margins(row, first, second, vocab, model), labels)
        return jnp.sum(uncertain * bce) / jnp.maximum(jnp.sum(uncertain), 1.0)

    stepped = adam_step(judge, jax.grad(loss)(judge.params), lr)
    return jax.tree.map(lambda new, old: jnp.where(jnp.any(uncertain > 0), new, old), stepped, judge)


def in_grid(shape: GridShape) -> bool:
    """Whether some run of the grid has a referee (its audit then sums the referee's pairs)."""
    return bool(shape.groups_of(ROW))


def _schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """Meta-judging rides on the judge update: runs with a referee margin, on their judge's cadence."""
    return None if knobs.referee_margin == 0 else judge_cadence(knobs)


def _update(judge: Network, member: MemberContext, own: None) -> tuple[Network, None]:
    """One judge's meta-judging step on its run's pair batch of this step, its referee its own pretrained row."""
    chosen, rejected = member.pairs
    knobs, shape = member.knobs, member.shape
    stepped = referee_update(
        judge,
        chosen,
        rejected,
        member.pretrained,
        knobs.referee_margin,
        knobs.lr_judge,
        vocab=shape.vocab_size,
        model=shape.model,
    )
    return stepped, own


def _view(context: DiagnosticsContext) -> jax.Array:
    """Per run: whether it has a referee."""
    return context.knobs.referee_margin > 0


MECHANISM = Mechanism(
    name="referee",
    summary="meta-judging: a frozen referee (the pretrained judge) re-labels the pairs the judge is least sure of",
    knobs=RefereeKnobs,
    rows=(
        StepRow(
            name=ROW,
            stage="updates",
            schedule=_schedule,
            update=_update,
            due=with_judge_update,
        ),
    ),
    metrics=(
        Metric(
            "referee_share",
            "re-judged share",
            "probability",
            "meta-judging: P(the referee re-judges a training pair), |J(a) − J(b)| below the margin (empty: off)",
            lambda run: jnp.where(run.of("referee"), run.of("pair_audit").relabelled_share, jnp.nan),
            valid=ValidValues(0.0, 1.0, undefined=True),
        ),
        Metric(
            "referee_label_error",
            "referee label error",
            "probability",
            "meta-judging: P(the referee's label prefers the side of lower q* | it re-judges the pair) (empty: off)",
            lambda run: jnp.where(run.of("referee"), run.of("pair_audit").relabelled_error, jnp.nan),
            valid=ValidValues(0.0, 1.0, undefined=True),
        ),
    ),
    view=_view,
)
