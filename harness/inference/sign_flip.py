"""The sign-flip permutation test of a sum, computed from its groups of equal magnitudes.

Under the null every value's sign is a fair coin, so the values of one magnitude a (n of them) contribute
a (n − 2B) with B ~ Binomial(n, ½), whatever their observed signs. Resolved differences are mostly ties, and a TOST
shifts every tie to the same ±r: one large group of one magnitude and a few jumps. So the null distribution is
- enumerated exactly (`grouped_null`) where the product of the groups' support sizes is at most EXACT_SUPPORT;
- otherwise drawn for every group but the largest, whose tail is then exact given the others (a binomial cdf):
  the p is the mean of those conditional tails (Rao–Blackwellized Monte Carlo), far less variable than counting
  draws, with the interval mean ± z·se at RESAMPLING_RISK (`monte_carlo` says how draws grow until no decision
  can flip).
"""

from __future__ import annotations

import numpy as np
import scipy.stats

from harness.inference.monte_carlo import FIRST_BATCH, RESAMPLING_RISK, MonteCarloP, p_from_tails, tolerance_of

EXACT_SUPPORT = 2**20
CHUNK = 2**14


def _groups(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(magnitudes, counts) of the non-zero values, the largest group first."""
    magnitudes, counts = np.unique(np.abs(values[values != 0]), return_counts=True)
    order = np.argsort(-counts, kind="stable")
    return magnitudes[order], counts[order]


def grouped_null(magnitudes: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, probabilities) of the null sum, enumerated by convolving the groups' scaled binomials."""
    support, weights = np.zeros(1), np.ones(1)
    for magnitude, count in zip(magnitudes, counts, strict=True):
        heads = np.arange(count + 1)
        step_values = magnitude * (count - 2 * heads)
        step_weights = scipy.stats.binom.pmf(heads, count, 0.5)
        support = (support[:, None] + step_values[None, :]).ravel()
        weights = (weights[:, None] * step_weights[None, :]).ravel()
    return support, weights


def _tails(conditional: np.ndarray, magnitude: float, count: int, tolerance: float) -> tuple[np.ndarray, np.ndarray]:
    """P(a (n − 2B) ≥ x) and P(a (n − 2B) ≤ x) for each x in `conditional` (B ~ Binomial(n, ½)), read from the
    binomial's cumulative table."""
    cumulative = np.concatenate([[0.0], scipy.stats.binom.cdf(np.arange(count + 1), count, 0.5)])  # P(B ≤ k − 1)
    at_most = np.floor((count - (conditional - tolerance) / magnitude) / 2 + 1e-9)
    at_least = np.ceil((count - (conditional + tolerance) / magnitude) / 2 - 1e-9)
    greater = cumulative[np.clip(at_most, -1, count).astype(int) + 1]
    less = 1.0 - cumulative[np.clip(at_least, 0, count + 1).astype(int)]
    return greater, less


def sign_flip_p(
    values: np.ndarray, alternative: str, rng: np.random.Generator, draws: int = FIRST_BATCH
) -> MonteCarloP:
    """Permutation p of sum(values) under random sign flips: exact where the groups' support is small, else from
    `draws` Rao–Blackwellized draws. All values zero: p = 1."""
    magnitudes, counts = _groups(values)
    if len(counts) == 0:
        return MonteCarloP.exact(1.0)
    observed = float(np.sum(values))
    tolerance = tolerance_of(observed, float(np.sum(np.abs(values))))
    if np.prod((counts + 1).astype(float)) <= EXACT_SUPPORT:
        support, weights = grouped_null(magnitudes, counts)
        greater = float(np.sum(weights[support >= observed - tolerance]))
        less = float(np.sum(weights[support <= observed + tolerance]))
        return MonteCarloP.exact(p_from_tails(greater, less, alternative))
    big_magnitude, big_count = float(magnitudes[0]), int(counts[0])
    rest_magnitudes, rest_counts = magnitudes[1:], counts[1:]
    single = rest_magnitudes[rest_counts == 1]  # one value: a random sign (cheaper than a binomial draw)
    grouped, grouped_counts = rest_magnitudes[rest_counts > 1], rest_counts[rest_counts > 1]
    sums, squares = np.zeros(2), np.zeros(2)
    for start in range(0, draws, CHUNK):
        size = min(CHUNK, draws - start)
        others = (1.0 - 2.0 * rng.integers(0, 2, size=(size, len(single)), dtype=np.int8)) @ single
        if len(grouped):
            heads = rng.binomial(grouped_counts, 0.5, size=(size, len(grouped)))
            others = others + (grouped * (grouped_counts - 2 * heads)).sum(axis=1)
        tails = np.stack(_tails(observed - others, big_magnitude, big_count, tolerance))
        sums += tails.sum(axis=1)
        squares += (tails**2).sum(axis=1)
    means = sums / draws
    errors = np.sqrt(np.maximum(squares / draws - means**2, 0.0) / draws)
    side = {"greater": 0, "less": 1}.get(alternative, int(np.argmin(means)))
    scale = 1.0 if alternative in ("greater", "less") else 2.0
    z = scipy.stats.norm.isf(RESAMPLING_RISK / 2)
    low = max(0.0, scale * (means[side] - z * errors[side]))
    high = min(1.0, scale * (means[side] + z * errors[side]))
    p = p_from_tails(means[0], means[1], alternative)
    return MonteCarloP(p, float(scale * errors[side]), low, max(high, p), draws)
