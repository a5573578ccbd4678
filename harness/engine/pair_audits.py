"""Exact audits of the pairs a judge trains on: expectations over every pair of outputs, no sampling.

A judge update draws a batch of pairs (a, b) and a label for each. Which pairs and which
labels depends on where the run draws its pairs from (its mechanisms set the two sides and the
share): with probability s (the contrast share) a is drawn from the chosen side's distribution
and b from the rejected side's, labelled a > b; otherwise a and b are two draws of the policy,
labelled by the judge's own preference 1[J(a) > J(b)]. A second opinion (another score table, e.g. a frozen
judge) may then re-label the pairs on which the judge is least certain: those whose scores differ by less than a
margin. In a world of N outputs (4,096 in the published one) every quantity the follow-up papers argue about is an
exact sum over the N² ordered pairs.

A label disagrees with q* when it prefers the side of lower q*; pairs of equal q* (an output
paired with itself) are never wrong.

Most of these sums need no N² work. Expected gaps E|x(a) − x(b)| under a product of two
distributions are prefix sums over the outputs sorted by x. Contrast labels are wrong where
q*(a) < q*(b): a suffix sum in q* order. The self-labels' error is a weighted count of pairs
ordered one way by the judge and the other by q*: the inversions of the judge's scores in q*
order, counted level by level as a merge sort would, from one sort, in O(N log N) time and
memory (at 4,096 outputs, 42 ms for 8 judges' whole audits on one core, against 44 ms for a
square-root decomposition; at 262,144 outputs, 0.36 s and 19 MB of positions a judge, against
5.0 s and about 2 GB for that decomposition). Only the re-labelled pairs (a band of |J(a) − J(b)|
and a second score) are summed over every pair, in row blocks, and only where a second opinion is asked.
"""

from __future__ import annotations

import chex
import flax.struct
import jax
import jax.numpy as jnp

# Rows of the pair matrix summed at once in the re-labelled pairs' sum: 256 × 4,096 pairs stay in cache.
_ROW_BLOCK = 256


@flax.struct.dataclass
class PairAudit:
    """One judge's training pairs, exactly (each a float32 scalar).

    label_error: P(the label disagrees with q*); quality_gap: E|q*(a) − q*(b)|; judge_gap:
    E|J(a) − J(b)| on the judge's score scale; identical: P(a = b); relabelled_share: P(the
    second opinion re-labels the pair), a ≠ b with |J(a) − J(b)| < margin; relabelled_error: P(its label
    disagrees with q* | it re-labels the pair), NaN where it re-labels none.
    """

    label_error: jax.Array
    quality_gap: jax.Array
    judge_gap: jax.Array
    identical: jax.Array
    relabelled_share: jax.Array
    relabelled_error: jax.Array


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


def _level_orders(order: jax.Array, levels: int) -> jax.Array:
    """int32 (levels, 2^levels): row k the arrangement in which the merge-sort level of block size 2^(levels-1-k)
    takes its positions: each aligned block of 2^(levels-k) positions holds its own, in `order`'s order (order: a
    permutation of the positions, e.g. a stable argsort).

    From the top, each level's blocks are split into their halves by a stable partition on the half a position
    belongs to. One loop body for every level (the block size is a loop value, so the blocks are spans of one flat
    array, their counts exact integer sums), which keeps the diagnostics program as small as when each level sorted.
    """
    position = jnp.arange(1 << levels, dtype=jnp.int32)

    def split(arrangement: jax.Array, shift: jax.Array) -> tuple[jax.Array, jax.Array]:
        size = jnp.left_shift(1, shift)  # each block's halves hold `size` positions
        right = jnp.right_shift(arrangement, shift) & 1
        left = 1 - right
        block_start = position & ~(2 * size - 1)
        lefts_through = jnp.cumsum(left)  # left elements up to and including each place
        lefts_in_block = lefts_through - (lefts_through - left)[block_start]
        # A left element goes to its rank among the block's lefts; a right one after the half, at its rank among
        # the block's rights (the places before it in the block, less the lefts among them).
        rank = jnp.where(right == 1, size + (position - block_start) - lefts_in_block, lefts_in_block - 1)
        return jnp.zeros_like(arrangement).at[block_start + rank].set(arrangement, unique_indices=True), arrangement

    shifts = jnp.arange(levels - 1, -1, -1, dtype=jnp.int32)
    return jax.lax.scan(split, order.astype(jnp.int32), shifts)[1]


def weighted_inversions(values: jax.Array, weights: jax.Array, order: jax.Array | None = None) -> jax.Array:
    """Σ over positions i < k with values[k] < values[i] of weights[i] · weights[k] (values, weights (N,)).

    A merge sort's counting, level by level: at block size s every pair of sibling blocks (left, right) is taken
    in value order, the right block's elements after the left's on ties (strict <), and each left element counts
    the right weight before it. Within an aligned block that order is the whole array's stable value order
    restricted to the block, so one sort serves every level (`_level_orders`): O(N log N) time, O(N log N)
    integers of memory. order: the stable argsort of values, where the caller has it (a sort is most of the cost).
    """
    n = values.shape[0]
    levels = max(0, (n - 1).bit_length())
    padded = 1 << levels
    if order is None:
        order = jnp.argsort(values, stable=True)
    # Padding: positions past the end, ordered last (as +inf values would be), weight 0, so it never counts.
    weights = jnp.concatenate([weights, jnp.zeros(padded - n, weights.dtype)])
    orders = _level_orders(jnp.concatenate([order.astype(jnp.int32), jnp.arange(n, padded, dtype=jnp.int32)]), levels)
    total = jnp.zeros((), weights.dtype)
    for level in range(levels):  # from the smallest blocks up: the order these sums have always been added in
        size = 1 << level
        blocks = orders[levels - 1 - level].reshape(-1, 2 * size)
        # Which half of its block a position is in: its bit `level` (positions are non-negative, so this is
        # (blocks // size) % 2, without the sign handling jnp's // and % compile to for every level).
        right, weight = jnp.right_shift(blocks, level) & 1, weights[blocks]
        right_before = _exclusive_cumsum(jnp.where(right == 1, weight, 0.0), axis=1)
        total = total + jnp.sum(jnp.where(right == 0, weight, 0.0) * right_before)
    return total


def ordered_against_quality(policy: jax.Array, judge: jax.Array, q_star: jax.Array) -> jax.Array:
    """Σ over ordered pairs (a, b) of π(a) π(b) · [the judge's own label of (a, b) disagrees with q*].

    The label 1[J(a) > J(b)] is wrong where q*(a) < q*(b), the label 0 where q*(a) > q*(b). Over the two orders of
    a pair with q*(a) < q*(b) that is 1[J(a) > J(b)] + 1[J(a) ≥ J(b)], so the sum is
    Σ π(a) π(b) over q*(a) < q*(b) of 2 · 1[J(b) < J(a)] + 1[J(b) = J(a)]. The first term is a weighted count of
    inversions of J in q* order (ties in q* ordered by J, so that no tied pair is an inversion); the second a sum
    within groups of equal J, in (J, q*) order. O(N log N) time and memory (`weighted_inversions`).
    """
    by_quality = jnp.lexsort((judge, q_star))
    judge_by_quality = judge[by_quality]
    # A stable sort of the q*-ordered scores is the (J, q*) order: one sort serves both terms.
    within = jnp.argsort(judge_by_quality, stable=True)
    inverted = weighted_inversions(judge_by_quality, policy[by_quality], order=within)
    by_judge = by_quality[within]
    score, quality, weight = judge[by_judge], q_star[by_judge], policy[by_judge]
    first = jnp.ones(1, bool)
    new_score = jnp.concatenate([first, score[1:] != score[:-1]])
    new_pair = new_score | jnp.concatenate([first, quality[1:] != quality[:-1]])
    score_group, pair_group = jnp.cumsum(new_score), jnp.cumsum(new_pair)
    # Weight after each output's (J, q*) group and up to the end of its J group: the outputs of equal J and higher q*.
    cumulative = jnp.concatenate([jnp.zeros(1, weight.dtype), jnp.cumsum(weight)])
    score_end = jnp.searchsorted(score_group, score_group, side="right")
    pair_end = jnp.searchsorted(pair_group, pair_group, side="right")
    tied = jnp.sum(weight * (cumulative[score_end] - cumulative[pair_end]))
    return 2.0 * inverted + tied


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


def relabelled_sums(
    first: jax.Array,
    second: jax.Array,
    judge: jax.Array,
    second_opinion: jax.Array,
    margin: jax.Array,
    q_star: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """The pairs a second opinion (score table (N,)) re-labels, a ≠ b with |J(a) − J(b)| < margin, under the pair
    weights Σ_k first_k(a) second_k(b) (first, second (K, N)): their total weight and the weight of those its label
    gets wrong."""
    outputs = jnp.arange(q_star.shape[0])
    rows = (*(_blocks(side, _ROW_BLOCK) for side in first), _blocks(judge, _ROW_BLOCK))
    rows += (_blocks(second_opinion, _ROW_BLOCK), _blocks(q_star, _ROW_BLOCK), _blocks(outputs, _ROW_BLOCK))

    def row_block(block: tuple[jax.Array, ...]) -> jax.Array:
        *first_a, judge_a, opinion_a, q_a, index_a = block
        weight = sum(a[:, None] * b[None, :] for a, b in zip(first_a, second, strict=True))
        quality = q_a[:, None] - q_star[None, :]
        relabelled = weight * ((jnp.abs(judge_a[:, None] - judge[None, :]) < margin) & (index_a[:, None] != outputs))
        opinion_wrong = jnp.where(opinion_a[:, None] - second_opinion[None, :] > 0, quality < 0, quality > 0)
        return jnp.stack([jnp.sum(relabelled), jnp.sum(relabelled * opinion_wrong)])

    share, wrong = jnp.sum(jax.lax.map(row_block, rows), axis=0)
    return share, wrong


def audit_pairs(
    chosen: jax.Array,
    rejected: jax.Array,
    policy: jax.Array,
    contrast_share: jax.Array,
    judge: jax.Array,
    second_opinion: jax.Array,
    margin: jax.Array,
    q_star: jax.Array,
    with_second_opinion: bool = True,
) -> PairAudit:
    """The exact audit of one judge's training pairs.

    chosen, rejected, policy (N,): the distributions of the contrast pairs' two sides and of the
    policy (self-labelled pairs are two independent draws of it); contrast_share: s in [0, 1];
    judge, second_opinion (N,): score tables of the judge and of what re-labels its least certain pairs; margin:
    pairs with |J(a) − J(b)| below it are re-labelled (0: none); q_star (N,). with_second_opinion=False (static)
    skips the second opinion's O(N²) sum and reports it as with margin 0: share 0, error NaN.
    """
    chex.assert_equal_shape([chosen, rejected, policy, judge, second_opinion, q_star])
    share, own = contrast_share, 1.0 - contrast_share
    label_error = share * worse_than_rejected(chosen, rejected, q_star) + own * ordered_against_quality(
        policy, judge, q_star
    )
    quality_gap = share * expected_gap(chosen, rejected, q_star) + own * expected_gap(policy, policy, q_star)
    judge_gap = share * expected_gap(chosen, rejected, judge) + own * expected_gap(policy, policy, judge)
    identical = jnp.sum(share * chosen * rejected + own * policy * policy)
    relabelled_share = relabelled_wrong = jnp.zeros((), q_star.dtype)
    if with_second_opinion:
        sides = (jnp.stack([share * chosen, own * policy]), jnp.stack([rejected, policy]))
        relabelled_share, relabelled_wrong = relabelled_sums(*sides, judge, second_opinion, margin, q_star)
    relabelled_error = jnp.where(
        relabelled_share > 0, relabelled_wrong / jnp.where(relabelled_share > 0, relabelled_share, 1.0), jnp.nan
    )
    return PairAudit(label_error, quality_gap, judge_gap, identical, relabelled_share, relabelled_error)
