"""A judge tethered to its pretrained weights: after every judge update, θ ← θ − t·(θ − θ₀).

A mechanism of a lab's own, in one file: the condition file beside it (tether.toml) loads it with
`[mechanisms] modules = ["judge_tether.py"]`, and no file of the package changes. It declares a knob
(`tether`, the pull t), a row of the step (one function of one judge, riding on the judge's update) and a
metric (`judge_drift`, how far each run's judges are from where they started) with the view it reads.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict, Field

from harness.engine.metrics import NON_NEGATIVE, Metric
from harness.engine.state import Network
from harness.grid.contract import DiagnosticsContext, Mechanism
from harness.grid.knobs import Knobs
from harness.grid.member_context import MemberContext
from harness.grid.step_rows import Cadence, StepRow
from harness.mechanisms.judge_update import judge_cadence, with_judge_update

NAME = "judge_tether"


class TetherKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    tether: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="after every judge update the judge is pulled back toward its pretrained weights, "
        "θ ← θ − t·(θ − θ₀); t is this pull (0: off, 1: the judge never leaves θ₀)",
    )


def tether(judge: Network, pretrained: jax.Array, pull: jax.Array) -> Network:
    """One judge (its row and Adam state) pulled toward its pretrained row (P,) by `pull`; Adam's moments are left
    as the update made them (the pull is not a gradient step)."""
    return judge.replace(params=judge.params - pull * (judge.params - pretrained))


def _schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """Runs with a pull, on their judge's cadence (the pull follows each update; a frozen judge has none)."""
    return None if knobs.tether == 0 else judge_cadence(knobs)


def _update(judge: Network, member: MemberContext, own: None) -> tuple[Network, None]:
    """The row's function of one judge: pulled toward its own pretrained row by its run's pull."""
    return tether(judge, member.pretrained, member.knobs.tether), own


def drift(context: DiagnosticsContext) -> jax.Array:
    """Per run: ‖θ − θ₀‖ of its judges, averaged over them."""
    distance = jnp.linalg.norm(context.state.slots.judge.params - context.constants.pretrained_judges, axis=1)
    per_run = jnp.where(context.members, distance[context.run_slots], 0.0)
    return jnp.sum(per_run, axis=1) / jnp.sum(context.members, axis=1)


MECHANISM = Mechanism(
    name=NAME,
    summary="after every judge update the judge is pulled back toward its pretrained weights",
    knobs=TetherKnobs,
    rows=(
        StepRow(
            name=NAME,
            stage="updates",
            schedule=_schedule,
            update=_update,
            due=with_judge_update,
        ),
    ),
    metrics=(
        Metric(
            "judge_drift",
            "judge drift",
            "L2 norm",
            "how far the run's judges are from their pretrained weights, ‖θ − θ₀‖, averaged over its judges",
            lambda run: run.of(NAME),
            valid=NON_NEGATIVE,
        ),
    ),
    view=drift,
)
