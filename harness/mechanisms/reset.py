"""Periodic resets: every k outer iterations a run's judges return to their pretrained weights, with a fresh Adam
state, and every mechanism's per-judge state returns to what it starts from (`Mechanism.slot_state`).

The mechanism says only when (`reset_due`); the grid does the reset (`harness.grid.training_step.reset_judges`),
since returning every mechanism's per-judge state to its start is the grid's to do, not one mechanism's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict, Field

from harness.grid.contract import IterationContext, Mechanism, OwnState
from harness.grid.knobs import OUTER_ITERATIONS, UNIT


class ResetKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    reset_every: int = Field(
        0,
        ge=0,
        description="judges return to their pretrained weights every k outer iterations (0: never)",
        json_schema_extra={UNIT: OUTER_ITERATIONS},
    )


def reset_due(due: jax.Array, context: IterationContext, own: OwnState) -> tuple[jax.Array, OwnState]:
    """bool (R,): the runs `due` names, and those whose judges return to pretrained after outer iteration
    `context.iteration` (0-based) as every k-th (k = reset_every; never at 0); this mechanism keeps no state."""
    every = context.knobs.reset_every
    return due | ((every > 0) & ((context.iteration + 1) % jnp.maximum(every, 1) == 0)), own


MECHANISM = Mechanism(
    name="reset",
    summary="judges (and every mechanism's per-judge state) return to pretrained every k outer iterations",
    knobs=ResetKnobs,
    reset_due=reset_due,
)
