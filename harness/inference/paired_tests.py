"""The tests behind a verdict, on seed-paired data whose differences mostly tie and sometimes jump between end modes.

Per-seed differences of end states are float noise around 0 plus a few jumps between discrete end modes. Two rules
follow from that, and every test and interval here obeys them:

- **Ties at the resolution.** A difference within the claim's resolution r is a tie and counts as exactly 0
  (`resolved`); for a spread, a seed whose two values lie within r counts as two equal values (`resolved_pairs`).
  Float noise therefore never moves a test: 18 seeds at −0.001 and 2 jumps down are 2 jumps down.
- **A verdict is about jumps.** A sign-flip permutation test of the mean assumes the differences are
  symmetric about 0 under the null; jumps are not (a rare large jump up against frequent small jumps down has mean
  0, and without the rare jump in the sample the sign-flip test rejects far more often than its level: the
  calibration in `harness.inference.calibration` measures it). No test of a mean is exact at 20 seeds for such
  data. So "A ends above B" is tested as a shift of the end-mode distribution: seeds jump up more often than down
  (`shift_test`, the exact two-sided sign test on the jumps, scipy.stats.binomtest), with the mean of the resolved
  differences on the claimed side by at least r as the effect size it must also have.

Equivalence ("equal", and "not supported": the jumps' mean within ±r) is an exact two one-sided test (TOST) on the
jump counts that needs the metric's range (`equivalence_test`): a sign-flip TOST errs far beyond its level when a
mean at the margin is made of rare large jumps (the calibration measures it). A claim that states its jump share p₀
(`Claim.jump_share`) is instead equivalent when at most p₀ of its seeds jump, and an "equal" one contradicted when
more do: exact binomial tests that need no range (`jump_share_test`). A spread claim uses the pair-swap permutation
test (`swap_test`); the "equal" claim's contradiction without p₀ a betting test of the jumps' mean beyond ±r
(`betting.betting_p_value`). Permutation p-values are enumerated or drawn until exact enough (`monte_carlo`). Where
a claim's metric is set by the end mode, a jump is a change of end mode (`rule.ClaimData.differences`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.stats

from harness.inference.monte_carlo import (
    EXACT_MOVERS,
    FIRST_BATCH,
    MonteCarloP,
    chunked,
    drawn_p,
    enumerated_p,
    sign_patterns,
)
from harness.inference.sign_flip import sign_flip_p

CHUNK_CELLS = 4_000_000  # draws × seeds held at once


def resolved(differences: np.ndarray, resolution: float) -> np.ndarray:
    """The differences with every one within ± resolution set to exactly 0 (a tie)."""
    return np.where(np.abs(differences) <= resolution, 0.0, differences)


def resolved_pairs(side: np.ndarray, other: np.ndarray, resolution: float) -> tuple[np.ndarray, np.ndarray]:
    """(side, other) with other set to side's value on the seeds where the two lie within the resolution."""
    return side, np.where(np.abs(side - other) <= resolution, side, other)


@dataclass(frozen=True)
class Shift:
    """Seeds that jumped up / down (resolved difference > 0 / < 0) and the exact two-sided sign test on them."""

    up: int
    down: int
    p: float


def shift_test(differences: np.ndarray) -> Shift:
    """The exact two-sided sign test of as many jumps up as down (p 1 where nothing jumped); differences resolved."""
    up, down = int(np.sum(differences > 0)), int(np.sum(differences < 0))
    p = float(scipy.stats.binomtest(up, up + down).pvalue) if up + down else 1.0
    return Shift(up, down, p)


def sign_flip_test(
    values: np.ndarray, alternative: str, rng: np.random.Generator, draws: int = FIRST_BATCH
) -> MonteCarloP:
    """Permutation p of sum(values) by random sign flips (values symmetric about 0 under the null): exact where the
    values' groups of equal magnitude allow, else from `draws` draws (`sign_flip.sign_flip_p`). All 0: p = 1."""
    return sign_flip_p(values, alternative, rng, draws)


def swap_test(side: np.ndarray, other: np.ndarray, rng: np.random.Generator, draws: int = FIRST_BATCH) -> MonteCarloP:
    """Two-sided permutation p of std(side) = std(other), swapping the two values within seed pairs (pairs already
    resolved); enumerated where at most EXACT_MOVERS pairs differ, else from `draws` draws."""
    moving = side != other
    if not np.any(moving):
        return MonteCarloP.exact(1.0)
    n = len(side)
    movers_side, movers_other = side[moving], other[moving]
    shift = movers_other - movers_side  # a swap moves side's sum by this, and other's by its negative
    square_shift = movers_other**2 - movers_side**2
    sums, squares = np.array([side.sum(), other.sum()]), np.array([(side**2).sum(), (other**2).sum()])

    def statistic(swaps: np.ndarray) -> np.ndarray:
        """std(side) − std(other) after the given swaps, from the sums and sums of squares (ddof 1)."""
        moved, moved_squares = swaps @ shift, swaps @ square_shift
        spread = []
        for sign, total, square_total in ((1.0, sums[0], squares[0]), (-1.0, sums[1], squares[1])):
            total, square_total = total + sign * moved, square_total + sign * moved_squares
            spread.append(np.sqrt(np.maximum(square_total - total**2 / n, 0.0) / (n - 1)))
        return spread[0] - spread[1]

    observed = float(statistic(np.zeros((1, len(movers_side))))[0])  # computed as the null is: ties count exactly
    if len(movers_side) <= EXACT_MOVERS:
        return enumerated_p(statistic((sign_patterns(len(movers_side)) < 0).astype(float)), observed, "two-sided")

    def draw(generator: np.random.Generator, count: int) -> np.ndarray:
        return statistic((generator.random((count, len(movers_side))) < 0.5).astype(float))

    return drawn_p(chunked(draw, max(1, CHUNK_CELLS // len(side))), observed, "two-sided", rng, draws)


def equivalence_test(
    differences: np.ndarray, margin: float, bound: float, jump_share: float | None = None
) -> MonteCarloP:
    """Exact p that the mean of the (resolved) differences lies within ± margin, for differences that can never exceed
    ± bound (the metric's range): 2 × a TOST. With jump_share (p₀) instead: exact p that at most p₀ of the seeds jump
    either way, whatever the bound (`jump_share_test`).

    A mean of at least the margin needs jumps up with chance at least margin / bound (the mean of the positive part
    is at most bound times that chance, and the negative part only lowers it), so "μ ≥ margin" is rejected by the
    exact binomial test of that chance on the seeds that jumped up; "μ ≤ −margin" likewise on those that jumped down.
    Valid for every distribution of jumps, rare large ones included (a symmetric sign-flip TOST is not: a mean at
    the margin made of rare large jumps looks like no difference whenever the sample misses them). Without a finite
    bound nothing can be excluded: p = 1."""
    if jump_share is not None:
        return jump_share_test(differences, jump_share, "at most")
    if not np.isfinite(bound) or len(differences) == 0:
        return MonteCarloP.exact(1.0)
    chance = min(1.0, margin / bound)
    n = len(differences)
    up, down = int(np.sum(differences > 0)), int(np.sum(differences < 0))
    upper, lower = scipy.stats.binom.cdf(up, n, chance), scipy.stats.binom.cdf(down, n, chance)
    return MonteCarloP.exact(min(1.0, 2 * max(float(upper), float(lower))))


def jump_share_test(differences: np.ndarray, jump_share: float, claimed: str) -> MonteCarloP:
    """The exact one-sided binomial p against the claimed share of seeds that jump (a nonzero resolved difference):
    claimed "at most" rejects "at least jump_share of the seeds jump"; "more than" rejects "at most jump_share do".
    No seeds: p = 1."""
    n = len(differences)
    if n == 0:
        return MonteCarloP.exact(1.0)
    jumps = int(np.count_nonzero(differences))
    p = (
        scipy.stats.binom.cdf(jumps, n, jump_share)
        if claimed == "at most"
        else scipy.stats.binom.sf(jumps - 1, n, jump_share)
    )
    return MonteCarloP.exact(float(p))


def _null_chance(margin: float, bound: float, jump_share: float | None) -> tuple[float, float]:
    """(the per-seed jump chance an equivalence test rejects below, its p's factor): p₀ and 1 for a jump share,
    margin / bound each way and 2 (a TOST) for the range rule."""
    return (jump_share, 1.0) if jump_share is not None else (min(1.0, margin / bound), 2.0)


def equivalence_possible(bound: float, jump_share: float | None = None) -> bool:
    """Whether a mean claim has an equivalence test at all: a jump share, or a finite range to bound its jumps."""
    return jump_share is not None or bool(np.isfinite(bound))


def equivalence_reachable(
    seeds: int, margin: float, bound: float, alpha: float, jump_share: float | None = None
) -> bool:
    """Whether `equivalence_test` can reject at level alpha with this many seeds: its smallest p, with no seed
    jumping at all, is factor × (1 − chance)^seeds (`_null_chance`). A hypothesis that cannot reject is left out of
    its family."""
    if seeds == 0 or not equivalence_possible(bound, jump_share):
        return False
    chance, factor = _null_chance(margin, bound, jump_share)
    return factor * (1 - chance) ** seeds <= alpha


def equivalence_seeds(margin: float, bound: float, alpha: float, jump_share: float | None = None) -> int:
    """The fewest seeds at which `equivalence_test` can reject at level alpha (with no seed jumping)."""
    chance, factor = _null_chance(margin, bound, jump_share)
    return 1 if chance >= 1 else math.ceil(math.log(alpha / factor) / math.log(1 - chance))


def dominant_mode(values: np.ndarray, resolution: float) -> float:
    """The value with the most values within ± resolution of it (the end mode most seeds share)."""
    near = np.abs(values[:, None] - values[None, :]) <= resolution
    return float(values[int(np.argmax(near.sum(axis=1)))])


def mode_counts(
    side: np.ndarray, other: np.ndarray | None, statistic: str, resolution: float
) -> tuple[int, int, str, float]:
    """(up, down, test, p): seeds whose side differs by more than the resolution upwards / downwards, and the exact
    two-sided test on them (p 1 where none differs).

    mean: up = seeds with d > r, down = d < −r; the sign test (`shift_test`). std: up = seeds where the side escaped
    the dominant end mode (of both sides pooled) and the other did not, down = the reverse; McNemar's exact test.
    """
    if statistic == "std":
        center = dominant_mode(np.concatenate([side, other]), resolution)
        side_out, other_out = np.abs(side - center) > resolution, np.abs(other - center) > resolution
        up, down = int(np.sum(side_out & ~other_out)), int(np.sum(~side_out & other_out))
        p = float(scipy.stats.binomtest(up, up + down).pvalue) if up + down else 1.0
        return up, down, "McNemar exact", p
    differences = side if other is None else side - other
    shift = shift_test(resolved(differences, resolution))
    return shift.up, shift.down, "sign test", shift.p
