"""Permutation p-values exact enough for the level they are compared with.

A permutation test's p-value is either computed exactly (enumerated, or from a closed form) or drawn. A drawn p
carries Monte-Carlo error, and a verdict compares it, after the family's adjustment, with α; the adjustment makes
the raw thresholds small (Holm's smallest step of a 17-claim family with two hypotheses each, at a second look, is
0.019 / 34). So every drawn p comes with an interval that holds the exact p with chance at least 1 −
RESAMPLING_RISK (Clopper–Pearson on tail counts; mean ± z·se for a Rao–Blackwellized mean), and the family is
judged twice, with every p at its interval's low end and at its high end (`verdicts.judge_family`). Holm's and
Benjamini–Hochberg's decisions only move one way as a p grows, so where the two agree no value inside the intervals
can flip them; where they differ, the tests of those claims are drawn again with four times the draws (from the same
streams, so earlier draws are kept), up to MAX_DRAWS, after Gandy (2009). A claim still unsettled then is reported
with its interval and left undecided (`MonteCarloP.determined` false): no verdict rests on a p that more draws
could flip.

Every test takes its own generator (`claim_generator`: one stream per claim, rival and test), so Monte-Carlo errors
of different claims are independent, and a claim's p does not depend on the claims beside it.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.stats

EXACT_MOVERS = 16  # 2^16 swap patterns are enumerated; more are drawn
FIRST_BATCH = 2_048
MAX_DRAWS = 2**22  # about 4 million
GROWTH = 4
RESAMPLING_RISK = 1e-5
GENERATOR_SEED = 0

# A null statistic drawn in bulk: (generator, how many) -> statistic values
Draw = Callable[[np.random.Generator, int], np.ndarray]


@dataclass(frozen=True)
class MonteCarloP:
    """A p-value with its Monte-Carlo standard error and an interval [low, high] holding the exact p with chance at
    least 1 − RESAMPLING_RISK (error 0 and low = high = p where computed exactly); draws: the null draws it took
    (0: exact); determined: its decision no longer depends on where in the interval the exact p lies."""

    p: float
    error: float
    low: float
    high: float
    draws: int = 0
    determined: bool = True

    @staticmethod
    def exact(p: float) -> MonteCarloP:
        p = float(min(p, 1.0))
        return MonteCarloP(p, 0.0, p, p)

    def scaled(self, factor: float) -> MonteCarloP:
        """The p (and its interval) times `factor`, capped at 1: a Bonferroni or two-sided doubling."""
        return MonteCarloP(
            min(1.0, self.p * factor),
            self.error * factor,
            min(1.0, self.low * factor),
            min(1.0, self.high * factor),
            self.draws,
            self.determined,
        )

    def unsettled(self) -> MonteCarloP:
        return MonteCarloP(self.p, self.error, self.low, self.high, self.draws, False)


def claim_generator(*names: str | int) -> np.random.Generator:
    """A generator of its own for one test, seeded by GENERATOR_SEED and the names (claim, rival, test): streams of
    different claims are independent, and a claim's stream does not depend on the claims beside it."""
    key = [zlib.crc32(str(name).encode()) for name in names]
    return np.random.default_rng([GENERATOR_SEED, *key])


def tail_counts(null: np.ndarray, observed: float, tolerance: float) -> tuple[int, int]:
    """How many null statistics are ≥ / ≤ the observed one (within `tolerance`: ties count as extreme)."""
    return int(np.sum(null >= observed - tolerance)), int(np.sum(null <= observed + tolerance))


def tolerance_of(observed: float, scale: float = 1.0) -> float:
    return 100 * np.finfo(float).eps * max(abs(observed), scale, 1.0)


def p_from_tails(greater: float, less: float, alternative: str) -> float:
    p = {"greater": greater, "less": less}.get(alternative)
    return float(min(1.0, 2 * min(greater, less) if p is None else p))


def enumerated_p(null: np.ndarray, observed: float, alternative: str) -> MonteCarloP:
    """The exact p of a statistic whose every equally likely null value is in `null`."""
    greater, less = tail_counts(null, observed, tolerance_of(observed))
    return MonteCarloP.exact(p_from_tails(greater / len(null), less / len(null), alternative))


def clopper_pearson(hits: int, draws: int) -> tuple[float, float]:
    """Clopper–Pearson interval of a tail probability at confidence 1 − RESAMPLING_RISK."""
    half = RESAMPLING_RISK / 2
    low = 0.0 if hits == 0 else float(scipy.stats.beta.ppf(half, hits, draws - hits + 1))
    high = 1.0 if hits == draws else float(scipy.stats.beta.ppf(1 - half, hits + 1, draws - hits))
    return low, high


def drawn_p(draw: Draw, observed: float, alternative: str, rng: np.random.Generator, draws: int) -> MonteCarloP:
    """The p of `observed` against `draws` null statistics drawn by `draw`: (tail hits + 1) / (draws + 1) (the
    observed statistic counted as one draw: never 0), two-sided twice the smaller tail; its interval from the
    Clopper–Pearson interval of the tail (doubled where two-sided)."""
    greater, less = tail_counts(draw(rng, draws), observed, tolerance_of(observed))
    p = p_from_tails((greater + 1) / (draws + 1), (less + 1) / (draws + 1), alternative)
    scale = 1.0 if alternative in ("greater", "less") else 2.0
    hits = {"greater": greater, "less": less}.get(alternative, min(greater, less))
    low, high = (min(1.0, scale * bound) for bound in clopper_pearson(hits, draws))
    error = scale * float(np.sqrt(max(p / scale * (1 - p / scale), 0.0) / draws))
    return MonteCarloP(p, error, low, max(high, p), draws)


def sign_patterns(count: int) -> np.ndarray:
    """Every ±1 pattern of `count` signs: (2^count, count)."""
    bits = (np.arange(2**count)[:, None] >> np.arange(count)[None, :]) & 1
    return 1.0 - 2.0 * bits


def chunked(draw: Draw, chunk: int) -> Draw:
    """`draw` in pieces of at most `chunk` statistics, so that a batch of millions never holds them all at once."""

    def pieces(rng: np.random.Generator, count: int) -> np.ndarray:
        return np.concatenate([draw(rng, min(chunk, count - start)) for start in range(0, count, chunk)])

    return pieces
