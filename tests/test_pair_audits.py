"""The exact pair audits (harness.engine.pair_audits) against a brute-force numpy sum over every ordered pair."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.engine import pair_audits

# Compiled once per size: op by op, each of the audit's sorts and sums would compile on its own.
audit_pairs = jax.jit(pair_audits.audit_pairs, static_argnames="with_second_opinion")
weighted_inversions = jax.jit(pair_audits.weighted_inversions)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from([1, 2, 3, 7, 8, 9, 33]), st.integers(1, 6))
def test_weighted_inversions_equal_the_count_over_every_pair(data: st.DataObject, n: int, levels: int) -> None:
    # Few score levels: many ties, which never count (strict <). Sizes around powers of two: the padding.
    values = np.asarray(data.draw(st.lists(st.integers(0, levels), min_size=n, max_size=n)), np.float32)
    weights = np.asarray(data.draw(st.lists(st.floats(0, 1, width=32), min_size=n, max_size=n)), np.float32)
    first, later = np.triu_indices(n, 1)
    v, w = values.astype(np.float64), weights.astype(np.float64)
    expected = np.sum(w[first] * w[later] * (v[later] < v[first]))
    counted = weighted_inversions(values, weights)
    assert float(counted) == pytest.approx(expected, rel=1e-5, abs=1e-6)
    # The caller's own stable order serves as the sort it saves.
    order = np.argsort(values, kind="stable").astype(np.int32)
    assert float(weighted_inversions(values, weights, order)) == pytest.approx(float(counted), rel=1e-6, abs=1e-7)


def _brute_force(chosen, rejected, policy, share, judge, second_opinion, margin, q) -> dict[str, float]:
    """Every pair (a, b) and its label, one at a time: the definitions written out."""
    totals = dict.fromkeys(["label_error", "quality_gap", "judge_gap", "identical", "relabelled_share", "wrong"], 0.0)
    n = len(q)
    for a in range(n):
        for b in range(n):
            for weight, label in (
                (share * chosen[a] * rejected[b], True),  # contrast pair: chosen > rejected
                ((1 - share) * policy[a] * policy[b], judge[a] > judge[b]),  # the judge's own label
            ):
                wrong = q[a] < q[b] if label else q[a] > q[b]
                totals["label_error"] += weight * wrong
                totals["quality_gap"] += weight * abs(q[a] - q[b])
                totals["judge_gap"] += weight * abs(judge[a] - judge[b])
                totals["identical"] += weight * (a == b)
                if a != b and abs(judge[a] - judge[b]) < margin:
                    opinion_label = second_opinion[a] > second_opinion[b]
                    totals["relabelled_share"] += weight
                    totals["wrong"] += weight * (q[a] < q[b] if opinion_label else q[a] > q[b])
    wrong, relabelled = totals.pop("wrong"), totals["relabelled_share"]
    totals["relabelled_error"] = wrong / relabelled if relabelled > 0 else np.nan
    return totals


@pytest.mark.parametrize(
    ("n", "share", "margin", "quality_levels"),
    [(40, 0.0, 0.0, None), (40, 1.0, 0.5, None), (300, 0.3, 0.8, None), (300, 0.0, 0.0, 7), (1, 0.5, 0.5, None)],
)
def test_audit_equals_the_sum_over_every_pair(n: int, share: float, margin: float, quality_levels: int | None) -> None:
    rng = np.random.default_rng(n + int(10 * share))
    chosen, rejected, policy = (rng.dirichlet(np.full(n, 0.3)) for _ in range(3))  # uneven, like a trained policy
    judge, second_opinion, q = (rng.normal(size=n) for _ in range(3))
    judge[:5] = judge[min(5, n - 1)]  # ties in the judge's scores: label 0, so wrong where q*(a) > q*(b)
    if quality_levels:  # ties in q* across the audit's blocks, and outputs tied in both q* and the judge's score
        q = rng.integers(quality_levels, size=n).astype(float)
        judge[10:20] = judge[10]
    args = [np.float32(x) for x in (chosen, rejected, policy, share, judge, second_opinion, margin, q)]
    audit = audit_pairs(*map(jnp.asarray, args))
    expected = _brute_force(*(np.asarray(x, np.float64) for x in args))
    for name, value in expected.items():
        np.testing.assert_allclose(float(getattr(audit, name)), value, rtol=2e-5, atol=1e-6, err_msg=name)


def test_two_draws_of_one_distribution_labelled_first_better_are_a_coin() -> None:
    # Temporal pairs with no gap: the 'newer' side is as good as the 'older' one, so the label is wrong half the time
    # (pairs of one output apart, which are never wrong).
    rng = np.random.default_rng(3)
    pi, judge, q = rng.dirichlet(np.ones(64)), rng.normal(size=64), rng.normal(size=64)
    audit = audit_pairs(*(jnp.asarray(x, jnp.float32) for x in (pi, pi, pi, 1.0, judge, judge, 0.0, q)))
    assert float(audit.label_error) == pytest.approx((1 - np.sum(pi**2)) / 2, abs=1e-6)
    assert float(audit.identical) == pytest.approx(np.sum(pi**2), abs=1e-7)
    assert np.isnan(float(audit.relabelled_error)) and float(audit.relabelled_share) == 0.0


def test_self_labels_error_at_the_worlds_size_equals_a_dense_sum() -> None:
    # 4,096 outputs, the blocks of the published world; a dense float64 sum over every ordered pair as reference.
    rng = np.random.default_rng(7)
    n = 4096
    policy, judge = rng.dirichlet(np.full(n, 0.05)), np.round(rng.normal(size=n), 2)  # peaked; many score ties
    q = np.round(rng.normal(size=n), 2)
    args = [np.float32(x) for x in (policy, policy, policy, 0.0, judge, judge, 0.0, q)]
    audit = audit_pairs(*map(jnp.asarray, args), with_second_opinion=False)
    p, j, quality = (np.asarray(x, np.float64) for x in (args[2], args[4], args[7]))
    weight = p[:, None] * p[None, :]
    wrong = np.where(j[:, None] > j[None, :], quality[:, None] < quality, quality[:, None] > quality)
    assert float(audit.label_error) == pytest.approx(np.sum(weight * wrong), rel=2e-5, abs=1e-7)
    assert float(audit.quality_gap) == pytest.approx(np.sum(weight * np.abs(quality[:, None] - quality)), rel=2e-5)
    assert float(audit.judge_gap) == pytest.approx(np.sum(weight * np.abs(j[:, None] - j)), rel=2e-5)
    assert float(audit.relabelled_share) == 0.0 and np.isnan(float(audit.relabelled_error))
