"""Condition knobs: validated host values and the per-run arrays the compiled program reads.

Every knob enters the program as an array with one entry per run, so two grids that
differ only in knob values share one compiled executable.
"""

from __future__ import annotations

from collections.abc import Sequence

import chex
import flax.struct
import jax.numpy as jnp
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool

# Upper bound on ensemble size: each member is a pretrained judge per seed.
MAX_JUDGES = 16


class Knobs(BaseModel):
    """One condition's mechanisms. Every field has a default; they compose freely."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    freeze_judge: StrictBool = Field(
        False, description="skip the judge's self-labelled updates (and the anchor step riding on them)"
    )
    judge_update_every: int = Field(1, ge=1, description="judge update on inner steps where (step+1) % k == 0")
    n_judges: int = Field(1, ge=1, le=MAX_JUDGES, description="ensemble size; reward is the members' mean score")
    reset_every: int = Field(0, ge=0, description="reset judges to pretrained every k outer iterations (0: never)")
    anchor_fraction: float = Field(
        0.0, ge=0.0, le=1.0, description="extra q*-labelled step on max(1, floor(batch*f)) random pairs (0: off)"
    )
    meta_holdout_fraction: float = Field(
        0.0, ge=0.0, le=1.0, description="held-out q*-labelled pairs, floor(outputs*f) of them (0: meta off)"
    )
    meta_update_every: int = Field(1, ge=1, description="meta-correction check on steps where (step+1) % k == 0")
    meta_accuracy_threshold: float = Field(
        0.75, ge=0.0, le=1.0, description="meta-correction steps when held-out accuracy is below this"
    )
    entropy_bonus: float = Field(0.01, ge=0.0, description="weight of mean log π in the policy loss")
    lr_policy: float = Field(3e-4, gt=0.0, description="Adam learning rate of the policy")
    lr_judge: float = Field(3e-4, gt=0.0, description="Adam learning rate of every judge")


def anchor_pair_count(anchor_fraction: jnp.ndarray | np.ndarray, batch_size: int) -> jnp.ndarray:
    """Anchor pairs per judge update: max(1, floor(batch * f)) where f > 0, else 0."""
    fraction = jnp.asarray(anchor_fraction, jnp.float32)
    count = jnp.maximum(1, jnp.floor(batch_size * fraction).astype(jnp.int32))
    return jnp.where(fraction > 0, count, 0).astype(jnp.int32)


def holdout_pair_count(holdout_fraction: jnp.ndarray | np.ndarray, n_outputs: int) -> jnp.ndarray:
    """Held-out meta pairs: floor(outputs * f); zero means meta-correction is off."""
    fraction = jnp.asarray(holdout_fraction, jnp.float32)
    return jnp.floor(n_outputs * fraction).astype(jnp.int32)


@flax.struct.dataclass
class RunKnobs:
    """Knob values as arrays with a leading run axis (R,)."""

    freeze_judge: jnp.ndarray
    judge_update_every: jnp.ndarray
    n_judges: jnp.ndarray
    reset_every: jnp.ndarray
    anchor_fraction: jnp.ndarray
    meta_holdout_fraction: jnp.ndarray
    meta_update_every: jnp.ndarray
    meta_accuracy_threshold: jnp.ndarray
    entropy_bonus: jnp.ndarray
    lr_policy: jnp.ndarray
    lr_judge: jnp.ndarray

    @classmethod
    def stack(cls, knobs: Sequence[Knobs]) -> RunKnobs:
        """One entry per run, in run order."""
        columns = {name: [getattr(k, name) for k in knobs] for name in Knobs.model_fields}
        dtypes = {bool: jnp.bool_, int: jnp.int32, float: jnp.float32}
        arrays = {
            name: jnp.asarray(values, dtypes[type(Knobs.model_fields[name].default)])
            for name, values in columns.items()
        }
        result = cls(**arrays)
        chex.assert_equal_shape(list(arrays.values()))
        return result
