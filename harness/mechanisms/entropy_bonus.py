"""The original lab's entropy bonus: a weight w on mean log π over the batch in the policy's loss.

Its gradient, w·mean ∇log π(x_b), has expectation w·E_π[∇log π] = 0: on average it does not move the policy, and in
a batch it lowers log π of what was sampled, which normalisation hands to what was not: noise, not a push toward
higher entropy. The original lab uses this estimator, so it stays the default (0.01) for fidelity to its runs;
entropy regularisation whose expected gradient is the true one is `harness.mechanisms.entropy_regularization`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from harness.grid.contract import Mechanism, PolicyBatch, PolicyUpdate


class EntropyBonusKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    entropy_bonus: float = Field(
        0.01,
        ge=0.0,
        description="weight of mean log π in the policy loss (the original lab's entropy bonus; its expected "
        "gradient is zero, see entropy_regularization for one that raises entropy)",
    )


def add_weight(update: PolicyUpdate, batch: PolicyBatch, own: None) -> tuple[PolicyUpdate, None]:
    """The bonus added to the step's weight on mean log π."""
    return update.replace(log_prob_weight=update.log_prob_weight + batch.knobs.entropy_bonus), own


MECHANISM = Mechanism(
    name="entropy_bonus",
    summary="a weight on mean log π in the policy's loss (the original lab's entropy bonus; zero expected gradient)",
    knobs=EntropyBonusKnobs,
    update_policy=add_weight,
)
