"""An ensemble of judges per run, and how their scores become the policy's reward.

Each run owns `n_judges` judges, each pretrained from its own keys and updated on the run's pairs; the policy is
rewarded by one of:

- mean: the members' mean (Coste et al. 2024's mean ensemble);
- min: their minimum, the worst case over the ensemble (Coste et al.'s worst-case optimisation, WCO);
- mean_minus_variance: mean − λ·variance over the members (Coste et al.'s uncertainty-weighted optimisation, UWO,
  whose penalty is the intra-ensemble variance), λ = ensemble_variance_weight;
- mean_minus_std: mean − λ·std over the members, λ = ensemble_std_weight: a penalty in the scores' own units, as
  some lower-confidence-bound objectives put it; not Coste et al.'s form.

Variance and std are the population's (divided by the member count).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from pydantic import BaseModel, ConfigDict, Field

from harness.grid.contract import JudgePlan, Mechanism, MemberScores
from harness.grid.knobs import Knobs
from harness.grid.reward import mean_of_members

# Upper bound on ensemble size: each member is a pretrained judge per seed.
MAX_JUDGES = 16
EnsembleAggregation = Literal["mean", "min", "mean_minus_std", "mean_minus_variance"]
_AGGREGATIONS: tuple[str, ...] = ("mean", "min", "mean_minus_std", "mean_minus_variance")


class EnsembleKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    n_judges: int = Field(1, ge=1, le=MAX_JUDGES, description="ensemble size: judges per run")
    ensemble_aggregation: EnsembleAggregation = Field(
        "mean",
        description="how an ensemble's scores become the reward: mean; min (worst case, Coste et al. 2024's WCO); "
        "mean_minus_variance (mean − λ·variance over members, Coste et al.'s UWO, λ = ensemble_variance_weight); "
        "mean_minus_std (mean − λ·std over members, λ = ensemble_std_weight; not Coste et al.'s form)",
    )
    ensemble_std_weight: float = Field(1.0, ge=0.0, description="λ of mean_minus_std aggregation")
    ensemble_variance_weight: float = Field(
        1.0, ge=0.0, description="λ of mean_minus_variance aggregation (Coste et al.'s uncertainty weight)"
    )


def aggregate_scores(reward: jax.Array, judges: MemberScores) -> jax.Array:
    """One run's reward from its judges' scores (M, X) (`judges.members` marks real judges, the rest is padding), in
    place of the reward it is given: by the code of the run's `ensemble_aggregation`, the members' mean, their
    minimum (the worst case over the ensemble), mean − ensemble_std_weight · std or mean − ensemble_variance_weight ·
    variance (the population's).
    """
    del reward  # replaced by the run's rule, computed from the scores whatever a mechanism before it did
    scores, members, knobs = judges.scores, judges.members, judges.knobs
    rule, std_weight = knobs.ensemble_aggregation, knobs.ensemble_std_weight
    mean = mean_of_members(scores, members)
    minimum = jnp.min(jnp.where(members[:, None], scores, jnp.inf), axis=0)
    variance = mean_of_members((scores - mean) ** 2, members)
    by_rule = {
        "mean": mean,
        "min": minimum,
        "mean_minus_std": mean - std_weight * jnp.sqrt(variance),
        "mean_minus_variance": mean - knobs.ensemble_variance_weight * variance,
    }
    return jnp.select([rule == code for code in range(len(_AGGREGATIONS))], [by_rule[n] for n in _AGGREGATIONS])


def _with_ensemble_size(plan: JudgePlan, knobs: Knobs) -> JudgePlan:
    """The plan with the condition's ensemble size."""
    return plan._replace(count=knobs.n_judges)


MECHANISM = Mechanism(
    name="ensemble",
    summary="several judges per run; their scores aggregated by mean, minimum, mean − λ·variance or mean − λ·std",
    knobs=EnsembleKnobs,
    judge_plan=_with_ensemble_size,
    aggregate=aggregate_scores,
)
