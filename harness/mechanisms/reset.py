"""Periodic resets: every k outer iterations a run's judges return to their pretrained weights, with a fresh Adam
state, and every mechanism's per-judge state returns to what it starts from (`Mechanism.slot_state`).

The mechanism says only when (`reset_due`); the grid does the reset (`harness.grid.training_step.reset_judges`),
since returning every mechanism's per-judge state to its start is the grid's to do, not one mechanism's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict, Field

from harness.grid.contract import Mechanism
from harness.grid.knobs import OUTER_ITERATIONS, UNIT, RunKnobs


class ResetKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    reset_every: int = Field(
        0,
        ge=0,
        description="judges return to their pretrained weights every k outer iterations (0: never)",
        json_schema_extra={UNIT: OUTER_ITERATIONS},
    )


def reset_due(knobs: RunKnobs, iteration: jax.Array) -> jax.Array:
    """bool (R,): the runs whose judges return to pretrained after outer iteration `iteration` (0-based): every k-th."""
    return (knobs.reset_every > 0) & ((iteration + 1) % jnp.maximum(knobs.reset_every, 1) == 0)


MECHANISM = Mechanism(
    name="reset",
    summary="judges (and every mechanism's per-judge state) return to pretrained every k outer iterations",
    knobs=ResetKnobs,
    reset_due=reset_due,
)
