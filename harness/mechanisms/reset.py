"""Periodic resets: every k outer iterations a run's judges return to their pretrained weights, with a fresh Adam
state, and every mechanism's per-judge state returns to what it starts from (`Mechanism.slot_state`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict, Field

from harness.engine.state import CoevolutionState, Network, fresh_network, select
from harness.grid.contract import GridConstants, GridShape, Mechanism
from harness.grid.knobs import OUTER_ITERATIONS, UNIT, RunKnobs
from harness.grid.training_step import mechanism_states


class ResetKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    reset_every: int = Field(
        0,
        ge=0,
        description="judges return to their pretrained weights every k outer iterations (0: never)",
        json_schema_extra={UNIT: OUTER_ITERATIONS},
    )


def reset(judge: Network, pretrained: jax.Array) -> Network:
    """A judge returned to its pretrained row, with a fresh Adam state."""
    del judge
    return fresh_network(pretrained)


def reset_judges(
    shape: GridShape, constants: GridConstants, knobs: RunKnobs, state: CoevolutionState, iteration: jax.Array
) -> CoevolutionState:
    """After outer iteration `iteration` (0-based): judges of runs due a reset return to pretrained, with fresh Adam,
    and every mechanism's state of those judges returns to its start."""
    run_due = (knobs.reset_every > 0) & ((iteration + 1) % jnp.maximum(knobs.reset_every, 1) == 0)
    slot_due, slots = run_due[constants.slot_run], state.slots
    judge = select(slot_due, jax.vmap(reset)(slots.judge, constants.pretrained_judges), slots.judge)
    _, fresh = mechanism_states(shape, constants.initial_policies, constants.pretrained_judges)
    own = {name: select(slot_due, fresh[name], value) for name, value in slots.mechanisms.items()}
    return state.replace(slots=slots.replace(judge=judge, mechanisms=own))


MECHANISM = Mechanism(
    name="reset",
    summary="judges (and every mechanism's per-judge state) return to pretrained every k outer iterations",
    knobs=ResetKnobs,
    end_iteration=reset_judges,
)
