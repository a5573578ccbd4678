"""Exact audits of the pairs a judge trains on: expectations over every pair of outputs, no sampling.

A judge update draws a batch of pairs (a, b) and a label for each. Which pairs and which
labels depends on the run's pair source (`Knobs.chosen_from`, `Knobs.rejected_from`,
`Knobs.contrast_mix`): with probability s (the contrast share) a is drawn from the chosen
side's distribution and b from the rejected side's, labelled a > b; otherwise a and b are
two draws of the policy, labelled by the judge's own preference 1[J(a) > J(b)]. Meta-judging
(`Knobs.referee_margin`) then re-labels, by a frozen referee, the pairs on which the judge is
least certain. In a world of 4,096 outputs every quantity the follow-up papers argue about
is an exact sum over the 4,096² ordered pairs.

A label disagrees with q* when it prefers the side of lower q*; pairs of equal q* (an output
paired with itself) are never wrong.

Most of these sums need no N² work. Expected gaps E|x(a) − x(b)| under a product of two
distributions are prefix sums over the outputs sorted by x. Contrast labels are wrong where
q*(a) < q*(b): a suffix sum in q* order. The self-labels' error is a weighted count of pairs
ordered one way by the judge and the other by q*, which a square-root decomposition counts in
O(N^1.5): q* order is cut into blocks of about √N outputs; pairs in the same or the next partial
block are compared directly, and pairs further apart are counted from prefix sums over the
judge's order, one column per block. Only the referee's pairs (a band of |J(a) − J(b)| and
a second score) are summed over every pair, in row blocks, and only where the grid has a referee.
"""

from __future__ import annotations

import math

import chex
import flax.struct
import jax
import jax.numpy as jnp

# Rows of the pair matrix summed at once in the referee's sum: 256 × 4,096 pairs stay in cache.
_ROW_BLOCK = 256


@flax.struct.dataclass
class PairAudit:
    """One judge's training pairs, exactly (each a float32 scalar).

    label_error: P(the label disagrees with q*); quality_gap: E|q*(a) − q*(b)|; judge_gap:
    E|J(a) − J(b)| on the judge's score scale; identical: P(a = b); referee_share: P(the
    referee re-judges the pair), a ≠ b with |J(a) − J(b)| < margin; referee_error: P(the referee's label
    disagrees with q* | it re-judges the pair), NaN where it re-judges none.
    """

    label_error: jax.Array
    quality_gap: jax.Array
    judge_gap: jax.Array
    identical: jax.Array
    referee_share: jax.Array
    referee_error: jax.Array


def _exclusive_cumsum(values: jax.Array, axis: int = 0) -> jax.Array:
    """Sums of the entries before each one along `axis` (0 for the first), without subtracting (which would
    round small remainders to nothing)."""
    zeros = jnp.zeros_like(jax.lax.slice_in_dim(values, 0, 1, axis=axis))
    head = jax.lax.slice_in_dim(values, 0, values.shape[axis] - 1, axis=axis)
    return jnp.concatenate([zeros, jnp.cumsum(head, axis=axis)], axis=axis)


def expected_gap(first: jax.Array, second: jax.Array, values: jax.Array) -> jax.Array:
    """E|x(a) − x(b)| for a ~ first, b ~ second independently (weights (N,) each, x = values (N,)), in O(N log N).

    In x order, each a contributes first(a) · [x(a) · W_before − XW_before + XW_after − x(a) · W_after], with W the
    second distribution's weight and XW its x-weighted sum on either side; ties contribute 0 on either side.
    """
    order = jnp.argsort(values)
    x, u, v = values[order], first[order], second[order]
    weight_before, moment_before = _exclusive_cumsum(v), _exclusive_cumsum(x * v)
    weight_after, moment_after = _exclusive_cumsum(v[::-1])[::-1], _exclusive_cumsum((x * v)[::-1])[::-1]
    return jnp.sum(u * (x * weight_before - moment_before + moment_after - x * weight_after))


def ordered_against_quality(policy: jax.Array, judge: jax.Array, q_star: jax.Array) -> jax.Array:
    """Σ over ordered pairs (a, b) of π(a) π(b) · [the judge's own label of (a, b) disagrees with q*].

    The label 1[J(a) > J(b)] is wrong where q*(a) < q*(b), the label 0 where q*(a) > q*(b). Over the two orders of
    a pair with q*(a) < q*(b) that is 1[J(a) > J(b)] + 1[J(a) ≥ J(b)], so the sum is
    Σ_a π(a) X(a), X(a) = Σ_{b: q*(b) > q*(a)} π(b) (1[J(b) < J(a)] + 1[J(b) ≤ J(a)]), counted by blocks of q* order.
    """
    n = q_star.shape[0]
    block = max(1, math.isqrt(n - 1) + 1)  # ⌈√N⌉ outputs per block
    n_blocks = -(-n // block)
    by_quality = jnp.argsort(q_star)
    quality_sorted = q_star[by_quality]
    block_of = jnp.zeros(n, jnp.int32).at[by_quality].set(jnp.arange(n, dtype=jnp.int32) // block)
    # First position in q* order of a strictly better output, and the block it starts.
    better_from = jnp.searchsorted(quality_sorted, q_star, side="right")
    better_block = better_from // block

    # Outputs from better_from to the end of its block: compared directly.
    offsets = better_from[:, None] + jnp.arange(block)[None, :]
    in_window = offsets < jnp.minimum((better_block + 1) * block, n)[:, None]
    window = by_quality[jnp.minimum(offsets, n - 1)]
    below = (judge[window] < judge[:, None]).astype(judge.dtype) + (judge[window] <= judge[:, None])
    near = jnp.sum(jnp.where(in_window, policy[window] * below, 0.0), axis=1)

    # Later blocks: weight of each block below and at-or-below J(a), from prefix sums over the judge's order.
    by_judge = jnp.argsort(judge)
    judge_sorted = judge[by_judge]
    per_block = jax.nn.one_hot(block_of[by_judge], n_blocks, dtype=policy.dtype) * policy[by_judge][:, None]
    prefix = jnp.concatenate([jnp.zeros((1, n_blocks), policy.dtype), jnp.cumsum(per_block, axis=0)])  # (N+1, nb)
    # Weight in blocks strictly after block k, k = 0..nb (nb: nothing is better, so nothing after).
    later = _exclusive_cumsum(jnp.concatenate([prefix, jnp.zeros((n + 1, 1), prefix.dtype)], 1)[:, ::-1], 1)[:, ::-1]
    strictly_below = jnp.searchsorted(judge_sorted, judge, side="left")
    at_or_below = jnp.searchsorted(judge_sorted, judge, side="right")
    far = later[strictly_below, better_block] + later[at_or_below, better_block]
    return jnp.sum(policy * (near + far))


def worse_than_rejected(chosen: jax.Array, rejected: jax.Array, q_star: jax.Array) -> jax.Array:
    """Σ_a Σ_b chosen(a) rejected(b) 1[q*(a) < q*(b)]: how often 'chosen > rejected' is wrong, in O(N log N)."""
    order = jnp.argsort(q_star)
    better_from = jnp.searchsorted(q_star[order], q_star, side="right")
    weight_from = jnp.concatenate([jnp.cumsum(rejected[order][::-1])[::-1], jnp.zeros(1, rejected.dtype)])
    return jnp.sum(chosen * weight_from[better_from])


def _blocks(values: jax.Array, block: int) -> jax.Array:
    """(N,) -> (N / block, block), zero-padded at the end (padding carries no probability)."""
    padded = jnp.pad(values, (0, -values.shape[0] % block))
    return padded.reshape(-1, block)


def referee_sums(
    first: jax.Array,
    second: jax.Array,
    judge: jax.Array,
    referee: jax.Array,
    margin: jax.Array,
    q_star: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """The pairs a referee re-judges, a ≠ b with |J(a) − J(b)| < margin, under the pair weights Σ_k first_k(a)
    second_k(b) (first, second (K, N)): their total weight and the weight of those its label gets wrong."""
    outputs = jnp.arange(q_star.shape[0])
    rows = (*(_blocks(side, _ROW_BLOCK) for side in first), _blocks(judge, _ROW_BLOCK))
    rows += (_blocks(referee, _ROW_BLOCK), _blocks(q_star, _ROW_BLOCK), _blocks(outputs, _ROW_BLOCK))

    def row_block(block: tuple[jax.Array, ...]) -> jax.Array:
        *first_a, judge_a, referee_a, q_a, index_a = block
        weight = sum(a[:, None] * b[None, :] for a, b in zip(first_a, second, strict=True))
        quality = q_a[:, None] - q_star[None, :]
        rejudged = weight * ((jnp.abs(judge_a[:, None] - judge[None, :]) < margin) & (index_a[:, None] != outputs))
        referee_wrong = jnp.where(referee_a[:, None] - referee[None, :] > 0, quality < 0, quality > 0)
        return jnp.stack([jnp.sum(rejudged), jnp.sum(rejudged * referee_wrong)])

    share, wrong = jnp.sum(jax.lax.map(row_block, rows), axis=0)
    return share, wrong


def audit_pairs(
    chosen: jax.Array,
    rejected: jax.Array,
    policy: jax.Array,
    contrast_share: jax.Array,
    judge: jax.Array,
    referee: jax.Array,
    referee_margin: jax.Array,
    q_star: jax.Array,
    with_referee: bool = True,
) -> PairAudit:
    """The exact audit of one judge's training pairs.

    chosen, rejected, policy (N,): the distributions of the contrast pairs' two sides and of the
    policy (self-labelled pairs are two independent draws of it); contrast_share: s in [0, 1];
    judge, referee (N,): score tables of the judge and of its referee; referee_margin: pairs with
    |J(a) − J(b)| below it are re-judged (0: none); q_star (N,). with_referee=False (static) skips the
    referee's O(N²) sum and reports it as with margin 0: share 0, error NaN.
    """
    chex.assert_equal_shape([chosen, rejected, policy, judge, referee, q_star])
    share, own = contrast_share, 1.0 - contrast_share
    label_error = share * worse_than_rejected(chosen, rejected, q_star) + own * ordered_against_quality(
        policy, judge, q_star
    )
    quality_gap = share * expected_gap(chosen, rejected, q_star) + own * expected_gap(policy, policy, q_star)
    judge_gap = share * expected_gap(chosen, rejected, judge) + own * expected_gap(policy, policy, judge)
    identical = jnp.sum(share * chosen * rejected + own * policy * policy)
    referee_share = referee_wrong = jnp.zeros((), q_star.dtype)
    if with_referee:
        sides = (jnp.stack([share * chosen, own * policy]), jnp.stack([rejected, policy]))
        referee_share, referee_wrong = referee_sums(*sides, judge, referee, referee_margin, q_star)
    referee_error = jnp.where(
        referee_share > 0, referee_wrong / jnp.where(referee_share > 0, referee_share, 1.0), jnp.nan
    )
    return PairAudit(label_error, quality_gap, judge_gap, identical, referee_share, referee_error)
