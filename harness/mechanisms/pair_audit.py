"""The exact audit of the pairs every judge trains on: how often their labels prefer the worse side, how far apart
the sides are, how often they are one output, and what a referee re-judges (`harness.engine.pair_audits`).

It has no knobs and changes nothing: its view measures, after every outer iteration, the pair distribution a
judge update would draw from the state as it stands (the pair sources' sides; contrast pairs with the probability
the mechanisms' `contrast` hooks give, as the step draws them: `pair_sources`' contrast_mix where a run has a side
other than the policy; else self-labelled; the referee's re-judging where the grid has a referee).
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp

from harness.engine.metrics import NON_NEGATIVE, PROBABILITY, Metric, ValidValues
from harness.engine.pair_audits import PairAudit, audit_pairs
from harness.grid import registry
from harness.grid.contract import DiagnosticsContext, Mechanism, StepContext
from harness.grid.diagnostics import policy_log_prob_tables
from harness.grid.training_step import contrast_share, pair_sides, step_keys
from harness.mechanisms import referee
from harness.mechanisms.pair_audit_report import REPORT


def _contrast(context: DiagnosticsContext, pi: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Each run's contrast share, float32 (R,), and the distributions (R, N) of its two sides, as the next step (the
    first of the next outer iteration, counter 1) would draw them if its judge update were due: the share every used
    mechanism's `contrast` hook leaves (`training_step.contrast_share`, the step's own), the sides where it is above 0
    (the look-ahead drawn with that step's keys)."""
    shape, constants, knobs, state = context.shape, context.constants, context.knobs, context.state
    due = jnp.ones(shape.n_runs, bool)
    keys = step_keys(shape, constants, state, due)
    step = StepContext(shape, constants, knobs, state, keys, jnp.int32(1), due)
    share, _ = contrast_share(step)
    if not any(shape.groups_of(row.name) for row in registry.stage_rows(shape.mechanisms, "sides")):
        return share, pi, pi
    sides, _, _ = pair_sides(step._replace(contrast=share > 0))
    chosen, rejected = policy_log_prob_tables(shape, sides.chosen), policy_log_prob_tables(shape, sides.rejected)
    return share, jnp.exp(chosen), jnp.exp(rejected)


def audit_view(context: DiagnosticsContext) -> PairAudit:
    """Every run's audit, (R,) per field: the mean over its judges of each judge's exact audit (the re-labelled pairs'
    error averaged over the judges with any pair re-labelled). The second opinion is the referee: the judge as
    pretrained."""
    shape, constants, knobs = context.shape, context.constants, context.knobs
    pi = jnp.exp(context.log_pi)
    share, chosen, rejected = _contrast(context, pi)
    with_referee = referee.in_grid(shape)
    referees = context.score_table(constants.pretrained_judges) if with_referee else context.judge_tables
    run = constants.slot_run
    audit = partial(audit_pairs, q_star=constants.q_star, with_second_opinion=with_referee)
    margins = knobs.referee_margin[run]
    slot_pairs = jax.lax.map(
        lambda slot: audit(*slot),
        (chosen[run], rejected[run], pi[run], share[run], context.judge_tables, referees, margins),
    )
    real = jnp.where(context.members, 1.0, jnp.nan)
    return jax.tree.map(lambda leaf: jnp.nanmean(leaf[context.run_slots] * real, axis=1), slot_pairs)


def _audit(run: object) -> PairAudit:
    return run.of("pair_audit")  # type: ignore[attr-defined]


MECHANISM = Mechanism(
    name="pair_audit",
    summary="exact audit of every judge's training pairs: label error, q* and judge gaps, identical pairs",
    metrics=(
        Metric(
            "pair_label_error",
            "pair label error",
            "probability",
            "P(the label of a judge training pair prefers the side of lower q*), exact over the pair distribution of "
            "the run's pair source (for temporal pairs: how often 'newer is better' is wrong)",
            lambda run: _audit(run).label_error,
            valid=PROBABILITY,
        ),
        Metric(
            "pair_label_error_distinct",
            "pair label error, a ≠ b",
            "probability",
            "P(the label prefers the side of lower q* | the pair is two different outputs): pairs of one output are "
            "never wrong and carry no signal, and after collapse they are most pairs (no two outputs share a q*)",
            lambda run: _audit(run).label_error / (1.0 - _audit(run).identical),
            # a ratio of two rounded probabilities: past 1 by rounding where few pairs differ, x/0 where none do
            valid=ValidValues(0.0, math.inf, undefined=True),
        ),
        Metric(
            "pair_quality_gap",
            "pair q* gap",
            "q*",
            "E|q*(a) − q*(b)| over the judge's training pairs: how far apart in real quality chosen and rejected are",
            lambda run: _audit(run).quality_gap,
            valid=NON_NEGATIVE,
        ),
        Metric(
            "pair_judge_gap",
            "pair judge gap",
            "judge score",
            "E|J(a) − J(b)| over the judge's training pairs: how far apart the judge itself sees them",
            lambda run: _audit(run).judge_gap,
            judge_scale=True,
            valid=NON_NEGATIVE,
        ),
        Metric(
            "pair_identical",
            "identical pairs",
            "probability",
            "P(a = b) over the judge's training pairs: pairs that carry no signal",
            lambda run: _audit(run).identical,
            valid=PROBABILITY,
        ),
    ),
    view=audit_view,
    report=REPORT,
)
