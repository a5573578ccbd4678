"""The metric registry: every diagnostic of a run, declared once.

Each `Metric` says what a column of metrics.csv is called, how people should read it
(label, unit, one-line definition) and how it is computed from one run's exact view of
the world (`RunView`). The compiled program evaluates every registered metric for every
run; metrics.csv, the golden file, the report's tables and figures all iterate over
`METRICS`, so a new diagnostic is one entry here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

import flax.struct
import jax
import jax.numpy as jnp
import jax.scipy.special

from harness.engine.pair_audits import PairAudit
from harness.engine.rank_stats import spearman


@flax.struct.dataclass
class RunView:
    """Everything a metric may read about one run after an outer iteration (no leading axis).

    q_star (N,): ground truth; log_pi (N,): log π(x) of the policy over every output;
    reward (N,): the run's reward table, its judges' scores aggregated as the policy sees
    them; log_pi_initial (N,): log π₀(x) of the run's initial policy;
    holdout_accuracy: mean held-out pairwise accuracy of the run's judges; meta_on: whether
    the run has held-out pairs; judge_updates / meta_corrections: this iteration's counts;
    finite: every parameter of the run is finite; pairs: the exact audit of the pairs its judges
    train on, averaged over its judges (`harness.engine.pair_audits`); referee_on: the run has meta-judging.
    """

    q_star: jax.Array
    log_pi: jax.Array
    log_pi_initial: jax.Array
    reward: jax.Array
    holdout_accuracy: jax.Array
    meta_on: jax.Array
    judge_updates: jax.Array
    meta_corrections: jax.Array
    finite: jax.Array
    pairs: PairAudit
    referee_on: jax.Array

    @property
    def pi(self) -> jax.Array:
        return jnp.exp(self.log_pi)

    @property
    def mode(self) -> jax.Array:
        return jnp.argmax(self.log_pi).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class Metric:
    """One diagnostic: a column of metrics.csv.

    label: short name for tables and axes; unit: what its values are measured in;
    definition: one line a reader needs to interpret it; kind: the column's type;
    headline: one of the core curves every report shows per iteration; judge_scale: its values are on the run's own
    judges' score scale, which differs from judge to judge, so one condition's value is no reference line for
    another's.
    """

    name: str
    label: str
    unit: str
    definition: str
    compute: Callable[[RunView], jax.Array]
    kind: Literal["float", "int", "bool"] = "float"
    headline: bool = False
    judge_scale: bool = False

    @property
    def axis_label(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


def _entropy(run: RunView) -> jax.Array:
    return jnp.sum(jax.scipy.special.entr(run.pi))


def _kl_from_initial(run: RunView) -> jax.Array:
    # rel_entr gives 0 where π(x) = 0, so outputs the policy has abandoned add nothing.
    return jnp.sum(jax.scipy.special.rel_entr(run.pi, jnp.exp(run.log_pi_initial)))


METRICS: tuple[Metric, ...] = (
    Metric(
        "policy_quality",
        "real quality",
        "q*",
        "expected ground-truth quality of the policy's output, Σₓ π(x) q*(x), exact over all outputs",
        lambda run: run.pi @ run.q_star,
        headline=True,
    ),
    Metric(
        "judge_alignment",
        "judge alignment",
        "Spearman ρ",
        "rank correlation between the reward the policy is trained on and q*, over all outputs",
        lambda run: spearman(run.reward, run.q_star),
        headline=True,
    ),
    Metric(
        "policy_entropy",
        "policy entropy",
        "nats",
        "entropy of the policy's distribution over all outputs, -Σₓ π(x) log π(x)",
        _entropy,
        headline=True,
    ),
    Metric(
        "judge_perceived_quality",
        "judge-perceived quality",
        "judge score",
        "expected reward of the policy's output as the judges see it, Σₓ π(x) J(x): what the loop believes",
        lambda run: run.pi @ run.reward,
        headline=True,
        judge_scale=True,
    ),
    Metric(
        "kl_from_initial",
        "KL from π₀",
        "nats",
        "how far the policy has moved from its initial self, KL(π_t ‖ π₀) = Σₓ π(x) log(π(x)/π₀(x)), exact",
        _kl_from_initial,
    ),
    Metric(
        "meta_accuracy",
        "held-out accuracy",
        "fraction",
        "share of held-out q*-labelled pairs the run's judges order correctly, averaged over judges (empty: meta off)",
        lambda run: jnp.where(run.meta_on, run.holdout_accuracy, jnp.nan),
    ),
    Metric(
        "pair_label_error",
        "pair label error",
        "probability",
        "P(the label of a judge training pair prefers the side of lower q*), exact over the pair distribution of "
        "the run's pair source (for temporal pairs: how often 'newer is better' is wrong)",
        lambda run: run.pairs.label_error,
    ),
    Metric(
        "pair_label_error_distinct",
        "pair label error, a ≠ b",
        "probability",
        "P(the label prefers the side of lower q* | the pair is two different outputs): pairs of one output are never "
        "wrong and carry no signal, and after collapse they are most pairs (no two outputs share a q*)",
        lambda run: run.pairs.label_error / (1.0 - run.pairs.identical),
    ),
    Metric(
        "pair_quality_gap",
        "pair q* gap",
        "q*",
        "E|q*(a) − q*(b)| over the judge's training pairs: how far apart in real quality chosen and rejected are",
        lambda run: run.pairs.quality_gap,
    ),
    Metric(
        "pair_judge_gap",
        "pair judge gap",
        "judge score",
        "E|J(a) − J(b)| over the judge's training pairs: how far apart the judge itself sees them",
        lambda run: run.pairs.judge_gap,
        judge_scale=True,
    ),
    Metric(
        "pair_identical",
        "identical pairs",
        "probability",
        "P(a = b) over the judge's training pairs: pairs that carry no signal",
        lambda run: run.pairs.identical,
    ),
    Metric(
        "referee_share",
        "re-judged share",
        "probability",
        "meta-judging: P(the referee re-judges a training pair), |J(a) − J(b)| below the margin (empty: off)",
        lambda run: jnp.where(run.referee_on, run.pairs.referee_share, jnp.nan),
    ),
    Metric(
        "referee_label_error",
        "referee label error",
        "probability",
        "meta-judging: P(the referee's label prefers the side of lower q* | it re-judges the pair) (empty: off)",
        lambda run: jnp.where(run.referee_on, run.pairs.referee_error, jnp.nan),
    ),
    Metric(
        "mode_index",
        "end mode",
        "output index",
        "the policy's most probable output, as its index in enumeration order",
        lambda run: run.mode,
        kind="int",
    ),
    Metric(
        "mode_quality",
        "mode quality",
        "q*",
        "ground-truth quality of the policy's most probable output",
        lambda run: run.q_star[run.mode],
    ),
    Metric(
        "judge_updates",
        "judge updates",
        "steps",
        "inner steps of this outer iteration on which the run's judges took a self-labelled update",
        lambda run: run.judge_updates,
        kind="int",
    ),
    Metric(
        "meta_corrections",
        "meta-corrections",
        "judge steps",
        "held-out correction steps this outer iteration, summed over the run's judges",
        lambda run: run.meta_corrections,
        kind="int",
    ),
    Metric(
        "finite",
        "finite",
        "",
        "every parameter of the run's policy and judges is finite",
        lambda run: run.finite,
        kind="bool",
    ),
)

# The smallest paired difference in real quality (q* units) the report calls a difference; the one resolution of
# every table, reading, figure and claim. Runs that end at the same output have the same q* up to float32 noise (about
# 1e-5), so a mean difference of that size, even with a confidence interval that excludes zero, is the same end
# state. 0.01 is three orders of magnitude above that noise and well below any effect worth a sentence (the report
# states q*'s range across outputs beside it).
QUALITY_RESOLUTION = 0.01

METRIC_NAMES: tuple[str, ...] = tuple(metric.name for metric in METRICS)
HEADLINE_METRICS: tuple[Metric, ...] = tuple(metric for metric in METRICS if metric.headline)


def metric(name: str) -> Metric:
    """The registered metric called `name`."""
    for candidate in METRICS:
        if candidate.name == name:
            return candidate
    raise KeyError(f"no metric {name!r}; registered: {', '.join(METRIC_NAMES)}")


def evaluate(run: RunView) -> dict[str, jax.Array]:
    """Every registered metric of one run (vmap over runs for a grid)."""
    return {m.name: m.compute(run) for m in METRICS}
