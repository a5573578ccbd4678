"""The verdict rule for one claim, given its adjusted significance level.

For a claim with resolution r, effect Δ (claimed side minus other side), its interval [lo, hi] at the claim's
level and its adjusted p-value (`paired_tests.claim_test`, adjusted within its family):
- "above": holds if p_adj ≤ α, lo > 0 and Δ ≥ r; contradicted if p_adj ≤ α, hi < 0 and Δ ≤ −r. "below" mirrors it.
  Otherwise: not supported if the interval lies within ±r (no difference as large as the resolution) or if both
  tests find an effect smaller than r; undecided if the tests disagree (one finds an effect, the other not) or if
  the interval includes 0 and reaches past ±r (more seeds needed).
- "equal" (r is the margin): holds if p_adj (2 × TOST) ≤ α and the interval lies within ±r; contradicted if p_adj
  (2 × the shifted test beyond the margin) ≤ α and the interval lies wholly beyond ±r; otherwise undecided.
- Several rivals (a pattern): an intersection–union test. The claim holds only if it holds against every rival,
  at the claim's own level (no correction: every comparison must pass). A negative verdict against one rival
  (contradicted, not supported) is a statement about some rival, so it must survive Bonferroni over the rivals
  (p × R, interval at level / R); otherwise the claim is undecided. The reported rival is the worst case.
A difference smaller than r is never a finding: identical end modes differ by float noise alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.inference.claims import Claim
from harness.inference.intervals import paired_bootstrap_ci
from harness.inference.paired_tests import ClaimTest, claim_test

VERDICTS = ("holds", "not supported", "contradicted", "undecided", "untested")
MIN_SEEDS = 20
NEGATIVE = ("contradicted", "not supported")


@dataclass(frozen=True)
class ClaimData:
    """A claim's sides over shared seeds: side values and one array per distinct rival (None: the side is
    already a difference from a fixed value), with the rivals' labels."""

    side: np.ndarray
    others: tuple[np.ndarray | None, ...]
    labels: tuple[str, ...]

    def take(self, rows: np.ndarray) -> ClaimData:
        """The same claim over the seed rows given (resampling whole seeds: every side moves together)."""
        return ClaimData(self.side[rows], tuple(None if o is None else o[rows] for o in self.others), self.labels)


@dataclass(frozen=True)
class Outcome:
    """A claim's verdict and the comparison it reports (the worst-case rival where there are several)."""

    verdict: str
    why: str
    rival: int
    effect: float
    low: float
    high: float
    confidence: float
    test: str


def decide(
    direction: str, effect: float, low: float, high: float, resolution: float, p_adjusted: float, alpha: float = 0.05
) -> tuple[str, str]:
    """(verdict, why) of one comparison by the module's rule; [low, high] is the interval at the claim's level."""
    r = resolution
    significant = bool(p_adjusted <= alpha)
    test = f"p_adj = {p_adjusted:.2g}"
    if direction == "equal":
        inside = -r <= low and high <= r
        outside = low > r or high < -r
        if inside and significant:
            return "holds", f"CI within ±{r:g}, {test}"
        if outside and significant:
            return "contradicted", f"a difference of {effect:+.3g}: CI beyond ±{r:g}, {test}"
        if inside or outside or significant:
            where = "within" if inside else "beyond" if outside else "across"
            return "undecided", f"the tests disagree: CI {where} ±{r:g}, {test}"
        return "undecided", f"CI reaches across ±{r:g}: more seeds needed"
    sign = 1.0 if direction == "above" else -1.0
    claimed_low, claimed_high = sorted((sign * low, sign * high))
    if significant and claimed_low > 0 and sign * effect >= r:
        return "holds", f"CI excludes 0 on the claimed side, {test}, |Δ| ≥ {r:g}"
    if significant and claimed_high < 0 and sign * effect <= -r:
        return "contradicted", f"the opposite effect: CI excludes 0 on the other side, {test}, |Δ| ≥ {r:g}"
    if -r <= low and high <= r:
        return "not supported", f"no difference (CI within ±{r:g})"
    excludes = claimed_low > 0 or claimed_high < 0
    if significant and excludes:
        return "not supported", f"effect below the resolution ({r:g})"
    if significant or excludes:
        interval = "CI excludes 0" if excludes else "CI includes 0"
        return "undecided", f"the tests disagree: {interval}, {test}"
    return "undecided", "CI includes 0 and reaches past the resolution: more seeds needed"


def rival_tests(
    data: ClaimData, claim: Claim, resamples: int, rng: np.random.Generator, fast: bool = False
) -> tuple[ClaimTest, ...]:
    """The claim's test against each rival (`paired_tests.claim_test`; fast: for simulations)."""
    return tuple(
        claim_test(data.side, other, claim.statistic, claim.direction, claim.resolution, resamples, rng, fast)
        for other in data.others
    )


def claim_p(tests: Sequence[ClaimTest]) -> float:
    """The claim's p-value over its rivals: the largest where every point estimate favours the claim (the
    intersection–union test); else the smallest against it, times the rivals (Bonferroni over a union)."""
    if all(t.favours for t in tests):
        return max(t.p for t in tests)
    return min(1.0, min(t.p for t in tests if not t.favours) * len(tests))


def _compare(
    data: ClaimData,
    claim: Claim,
    index: int,
    p_adjusted: float,
    level: float,
    alpha: float,
    resamples: int,
    rng: np.random.Generator | None,
) -> tuple[str, str, float, float, float]:
    effect, low, high = paired_bootstrap_ci(data.side, data.others[index], claim.statistic, 1 - level, resamples, rng)
    return (*decide(claim.direction, effect, low, high, claim.resolution, p_adjusted, alpha), effect, low, high)


def judge(
    data: ClaimData,
    claim: Claim,
    tests: Sequence[ClaimTest],
    factor: float,
    level: float,
    alpha: float,
    resamples: int,
    rng: np.random.Generator | None = None,
) -> Outcome:
    """The claim's verdict by the module's rule. tests: `rival_tests`; factor: the family's adjustment as a
    multiplier of raw p (adjusted / raw); level: the error level of its intervals (e.g. Holm's α / (m − k + 1))."""
    rivals = len(tests)
    found = [
        _compare(data, claim, i, min(1.0, t.p * factor), level, alpha, resamples, rng) for i, t in enumerate(tests)
    ]
    verdicts = [f[0] for f in found]

    def outcome(index: int, verdict: str, why: str, row: tuple, confidence: float) -> Outcome:  # type: ignore[type-arg]
        return Outcome(verdict, why, index, row[2], row[3], row[4], confidence, tests[index].name)

    def strength(i: int) -> float:  # how far the point estimate lies on the claim's side
        effect = found[i][2]
        return -abs(effect) if claim.direction == "equal" else (effect if claim.direction == "above" else -effect)

    if rivals == 1 or all(v == "holds" for v in verdicts):
        weakest = max(range(rivals), key=lambda i: (tests[i].p, -strength(i)))  # the weakest win
        return outcome(weakest, verdicts[weakest], found[weakest][1], found[weakest], 1 - level)
    negative = [i for i in range(rivals) if verdicts[i] in NEGATIVE]
    if negative:
        worst = min(
            negative,
            key=lambda i: (
                NEGATIVE.index(verdicts[i]),
                -tests[i].p if verdicts[i] == "not supported" else tests[i].p,
                strength(i),
            ),
        )
        strict = _compare(
            data, claim, worst, min(1.0, tests[worst].p * factor * rivals), level / rivals, alpha, resamples, rng
        )
        if strict[0] in NEGATIVE:
            return outcome(worst, strict[0], strict[1], strict, 1 - level / rivals)
        why = f"against {data.labels[worst]}: {verdicts[worst]} at the claim's level, not after Bonferroni (×{rivals})"
        return outcome(worst, "undecided", why, strict, 1 - level / rivals)
    worst = max((i for i in range(rivals) if verdicts[i] == "undecided"), key=lambda i: (tests[i].p, -strength(i)))
    return outcome(worst, "undecided", found[worst][1], found[worst], 1 - level)
