"""The judges' moving average: the policy is rewarded by an exponential moving average of each judge's weights.

After every judge update, ema ← d·ema + (1 − d)·judge, from (and reset with) the pretrained judge; where a run
keeps an average it rewards the policy (and the diagnostics score it) instead of the live judge.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict, Field

from harness.engine.state import Network
from harness.grid.contract import JudgeContext, Mechanism
from harness.grid.knobs import Knobs
from harness.grid.member_context import MemberContext
from harness.grid.step_rows import Cadence, StepRow
from harness.mechanisms.judge_update import judge_cadence, with_judge_update

NAME = "judge_ema"


class JudgeEmaKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    judge_ema: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="the policy is rewarded by an exponential moving average of each judge's weights, "
        "ema ← d·ema + (1 − d)·judge after every judge update, starting from (and reset with) the pretrained "
        "judge; d is this decay (0: off, the live judges reward the policy)",
    )


def ema_update(average: jax.Array, judge: jax.Array, decay: jax.Array) -> jax.Array:
    """One step of a judge's exponential moving average (rows (P,)): decay · average + (1 − decay) · judge."""
    return decay * average + (1.0 - decay) * judge


def _schedule(knobs: Knobs, n_outputs: int) -> Cadence | None:
    """A judge's moving average follows its updates: runs with a decay, on their judge's cadence."""
    return None if knobs.judge_ema == 0 else judge_cadence(knobs)


def _update(judge: Network, member: MemberContext, average: jax.Array) -> tuple[Network, jax.Array]:
    """A judge's average moved toward the judge as the rows before this one left it (its update, anchor and referee
    steps), at its run's decay; the judge as it was."""
    return judge, ema_update(average, judge.params, member.knobs.judge_ema)


def reward_row(row: jax.Array, judge: JudgeContext, average: jax.Array) -> jax.Array:
    """A judge slot's moving average where its run keeps one, else the row it is given."""
    return jnp.where(judge.knobs.judge_ema > 0, average, row)


MECHANISM = Mechanism(
    name=NAME,
    summary="the policy is rewarded by an exponential moving average of each judge's weights",
    knobs=JudgeEmaKnobs,
    rows=(
        StepRow(
            name=NAME,
            stage="updates",
            schedule=_schedule,
            update=_update,
            due=with_judge_update,
        ),
    ),
    # float32 (P,) per judge: its average, the pretrained row at the start and after a reset, and left so where the
    # run keeps none.
    slot_state=lambda shape, pretrained: pretrained,
    uses=lambda knobs: knobs.judge_ema > 0,
    reward_row=reward_row,
)
