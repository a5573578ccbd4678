"""Condition knobs, declared once: the validated model, and the per-run arrays generated from it.

Every knob the training loop reads enters the compiled program as an array with one entry
per run, so two grids that differ only in knob values share one compiled executable. A new
knob is one field of `Knobs` (with its documentation) and, unless it acts only before the
program runs (on the host, e.g. in pretraining: marked host-only, see `HOST_ONLY`), one
field of `RunKnobs` of the same name, in the same order.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Any, Literal

import chex
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool

# Upper bound on ensemble size: each member is a pretrained judge per seed.
MAX_JUDGES = 16
# Upper bounds on the look-ahead and the temporal gap: each bounds a scan or a stored history.
MAX_LOOKAHEAD_STEPS = 64
MAX_TEMPORAL_GAP = 10

EnsembleAggregation = Literal["mean", "min", "mean_minus_std"]
# Where the two sides of a judge's training pair come from (see `Knobs.chosen_from`, `Knobs.rejected_from`).
ChosenSide = Literal["policy", "lookahead"]
RejectedSide = Literal["policy", "past", "initial"]

# What a knob that counts something counts: its field's json_schema_extra[UNIT] (see knob_unit).
UNIT = "unit"
INNER_STEPS = "inner policy steps"
OUTER_ITERATIONS = "outer iterations"

# A knob whose field has json_schema_extra[HOST_ONLY] = True acts on the host only, before the
# compiled program runs (e.g. how far its judges are pretrained). It is kept out of `RunKnobs`
# rather than encoded as an array the program never reads: an unused input would still be
# an argument of every executable, and a knob that may be None has no array value of its own
# (its meaning, e.g. "the grid's [pretrain] target", belongs to the grid, not the run).
HOST_ONLY = "host_only"


class Knobs(BaseModel):
    """One condition's mechanisms. Every field has a default; they compose freely."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    freeze_judge: StrictBool = Field(
        False, description="skip the judge's self-labelled updates (and the anchor step riding on them)"
    )
    judge_update_every: int = Field(
        1,
        ge=1,
        description="the judge updates every k inner policy steps, on steps where (step+1) % k == 0",
        json_schema_extra={UNIT: INNER_STEPS},
    )
    n_judges: int = Field(1, ge=1, le=MAX_JUDGES, description="ensemble size: judges per run")
    ensemble_aggregation: EnsembleAggregation = Field(
        "mean",
        description="how an ensemble's scores become the reward: mean; min (worst case, Coste et al. 2024); "
        "mean_minus_std (mean − λ·std over members, λ = ensemble_std_weight)",
    )
    ensemble_std_weight: float = Field(1.0, ge=0.0, description="λ of mean_minus_std aggregation")
    reset_every: int = Field(
        0,
        ge=0,
        description="judges return to their pretrained weights every k outer iterations (0: never)",
        json_schema_extra={UNIT: OUTER_ITERATIONS},
    )
    anchor_fraction: float = Field(
        0.0, ge=0.0, le=1.0, description="extra q*-labelled step on max(1, floor(batch*f)) random pairs (0: off)"
    )
    meta_holdout_fraction: float = Field(
        0.0, ge=0.0, le=1.0, description="held-out q*-labelled pairs, floor(outputs*f) of them (0: meta off)"
    )
    meta_holdout_seed: int = Field(
        0,
        ge=0,
        description="which fixed draw of held-out pairs meta-correction uses (0: the streams' own; "
        "see harness.grid.origins.holdout_tables)",
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
    chosen_from: ChosenSide = Field(
        "policy",
        description="where the first (chosen) side of the judge's training pairs comes from: the policy; or "
        "lookahead, a copy of the policy trained lookahead_steps more steps against the current judges, then "
        "discarded (future-guided chosen, Temporal Self-Rewarding)",
    )
    rejected_from: RejectedSide = Field(
        "policy",
        description="where the second (rejected) side comes from: the policy; past, the policy temporal_gap "
        "checkpoints ago (temporal contrast, EvoLM); or initial, π₀ (anchored rejection). Unless both sides are "
        "the policy, pairs are labelled chosen > rejected instead of by the judge",
    )
    temporal_gap: int = Field(
        1,
        ge=0,
        le=MAX_TEMPORAL_GAP,
        description="which checkpoint the past side is drawn from: checkpoints are taken at the start of every "
        "outer iteration, 1 is the latest, 0 is the live policy (π₀ before the first)",
        json_schema_extra={UNIT: OUTER_ITERATIONS},
    )
    lookahead_steps: int = Field(
        5,
        ge=1,
        le=MAX_LOOKAHEAD_STEPS,
        description="REINFORCE steps the look-ahead copy takes before it draws the chosen side",
        json_schema_extra={UNIT: INNER_STEPS},
    )
    contrast_mix: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="probability that a judge update uses the chosen_from/rejected_from pairs rather than two "
        "judge-labelled policy samples (1: always)",
    )
    referee_margin: float = Field(
        0.0,
        ge=0.0,
        description="meta-judging: after each judge update, pairs of its batch on which the judge is least "
        "certain, |J(a) − J(b)| below this Bradley–Terry margin, get one more step toward the labels of a frozen "
        "referee, the judge's own pretrained weights; no q* involved (0: off)",
    )
    judge_ema: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="the policy is rewarded by an exponential moving average of each judge's weights, "
        "ema ← d·ema + (1 − d)·judge after every judge update, starting from (and reset with) the pretrained "
        "judge; d is this decay (0: off, the live judges reward the policy)",
    )
    entropy_bonus: float = Field(0.01, ge=0.0, description="weight of mean log π in the policy loss")
    lr_policy: float = Field(3e-4, gt=0.0, description="Adam learning rate of the policy")
    lr_judge: float = Field(3e-4, gt=0.0, description="Adam learning rate of every judge")
    judge_pretrain_target: float | None = Field(
        None,
        gt=-1.0,
        le=1.0,
        description="the Spearman target this condition's judges are pretrained to (unset: the grid's "
        "[pretrain] target_spearman); conditions with equal targets share their pretrained judges",
        json_schema_extra={HOST_ONLY: True},
    )


def knob_unit(name: str) -> str | None:
    """What a counting knob counts (INNER_STEPS or OUTER_ITERATIONS); None for a knob that counts nothing."""
    extra = Knobs.model_fields[name].json_schema_extra
    return extra.get(UNIT) if isinstance(extra, dict) else None  # type: ignore[return-value]


def host_only(name: str) -> bool:
    """Whether a knob acts on the host only (see HOST_ONLY), and so has no array in `RunKnobs`."""
    extra = Knobs.model_fields[name].json_schema_extra
    return isinstance(extra, dict) and bool(extra.get(HOST_ONLY, False))


# The knobs the compiled program reads, in `Knobs` order: the fields of `RunKnobs`.
PROGRAM_KNOBS = tuple(name for name in Knobs.model_fields if not host_only(name))


def choices(name: str) -> tuple[str, ...]:
    """The values of a categorical knob, in the order of their codes in `RunKnobs`."""
    return typing.get_args(Knobs.model_fields[name].annotation)


def _array_dtype(name: str) -> Any:
    """A knob's dtype inside the program: booleans, integers and floats as such, categories as int32 codes."""
    if choices(name):
        return jnp.int32
    return {bool: jnp.bool_, int: jnp.int32, float: jnp.float32}[type(Knobs.model_fields[name].default)]


def _code(name: str, value: object) -> object:
    return choices(name).index(value) if choices(name) else value


@flax.struct.dataclass
class RunKnobs:
    """The knobs the compiled program reads, as arrays with a leading run axis: each field is float32, int32 or
    bool (R,), one entry per run (a scalar inside a function of one run). Categorical knobs are int32 codes
    (`choices`); host-only knobs are absent. The fields are `PROGRAM_KNOBS`, in `Knobs` order, each documented
    there (a test holds the two to each other)."""

    freeze_judge: jax.Array  # bool
    judge_update_every: jax.Array  # int32
    n_judges: jax.Array  # int32
    ensemble_aggregation: jax.Array  # int32 code of `EnsembleAggregation`
    ensemble_std_weight: jax.Array  # float32
    reset_every: jax.Array  # int32
    anchor_fraction: jax.Array  # float32
    meta_holdout_fraction: jax.Array  # float32
    meta_holdout_seed: jax.Array  # int32
    meta_update_every: jax.Array  # int32
    meta_accuracy_threshold: jax.Array  # float32
    chosen_from: jax.Array  # int32 code of `ChosenSide`
    rejected_from: jax.Array  # int32 code of `RejectedSide`
    temporal_gap: jax.Array  # int32
    lookahead_steps: jax.Array  # int32
    contrast_mix: jax.Array  # float32
    referee_margin: jax.Array  # float32
    judge_ema: jax.Array  # float32
    entropy_bonus: jax.Array  # float32
    lr_policy: jax.Array  # float32
    lr_judge: jax.Array  # float32


def stack_knobs(knobs: Sequence[Knobs]) -> RunKnobs:
    """`RunKnobs` with one entry per run, in run order (host-only knobs are not part of it)."""
    arrays = {
        name: jnp.asarray([_code(name, getattr(k, name)) for k in knobs], _array_dtype(name)) for name in PROGRAM_KNOBS
    }
    chex.assert_equal_shape(list(arrays.values()))
    return RunKnobs(**arrays)


def anchor_pair_count(anchor_fraction: jnp.ndarray | np.ndarray, batch_size: int) -> jnp.ndarray:
    """Anchor pairs per judge update: max(1, floor(batch * f)) where f > 0, else 0."""
    fraction = jnp.asarray(anchor_fraction, jnp.float32)
    count = jnp.maximum(1, jnp.floor(batch_size * fraction).astype(jnp.int32))
    return jnp.where(fraction > 0, count, 0).astype(jnp.int32)


def holdout_pair_count(holdout_fraction: jnp.ndarray | np.ndarray, n_outputs: int) -> jnp.ndarray:
    """Held-out meta pairs: floor(outputs * f); zero means meta-correction is off."""
    fraction = jnp.asarray(holdout_fraction, jnp.float32)
    return jnp.floor(n_outputs * fraction).astype(jnp.int32)
