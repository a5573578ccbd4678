"""The verdict rule for one claim, given its two adjusted p-values.

Every claim's differences are resolved first (`paired_tests.resolved`: a difference within the resolution r is 0).
Each claim then has up to two hypotheses, both in its family's adjustment (`verdicts.verdict_table`):
- the **effect** hypothesis, whose rejection gives "holds" or "contradicted": for "above"/"below" on a mean, as many
  seeds jump up as down (the exact sign test); on a spread, equal spreads (pair-swap test); for "equal", the mean of
  the resolved differences lies within ±r (a shifted sign-flip test beyond the margin: rejection contradicts);
- the **equivalence** hypothesis (mean claims only), whose rejection says the mean of the resolved differences lies
  within ±r (an exact TOST on the jump counts given the metric's range, `paired_tests.equivalence_test`): "not
  supported" for "above"/"below", "holds" for "equal". A metric without a known range never gets these verdicts.

With R distinct rivals (a pattern): a positive verdict needs every rival (intersection–union: the claim-level p is
the largest of the rivals'); a negative one is a statement about some rival (union: the smallest p times R).

- "above" (below mirrors it): holds if the effect p_adj ≤ α, every rival's jumps favour the claim and every
  rival's mean resolved difference is ≥ r on the claimed side; contradicted if p_adj ≤ α against a rival whose
  jumps go the other way, by a mean of at least r; not supported if the equivalence p_adj ≤ α; else undecided.
- "equal": holds if the equivalence p_adj ≤ α; contradicted if the effect p_adj ≤ α; else undecided.
A difference smaller than r is never a finding, and a Monte-Carlo p whose interval still straddles a threshold
(`monte_carlo.MonteCarloP.determined`) never decides.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from harness.inference.claims import Claim
from harness.inference.monte_carlo import FIRST_BATCH, MonteCarloP
from harness.inference.paired_tests import (
    beyond_margin_test,
    equivalence_test,
    resolved,
    resolved_pairs,
    shift_test,
    swap_test,
)

VERDICTS = ("holds", "not supported", "contradicted", "undecided", "untested")
MIN_SEEDS = 20
NEGATIVE = ("contradicted", "not supported")

# A test's generator, from the names that make its stream its own: (rival index, test name) -> generator
Streams = Callable[[int, str], np.random.Generator]


@dataclass(frozen=True)
class ClaimData:
    """A claim's sides over shared seeds: side values and one array per distinct rival (None: the side is
    already a difference from a fixed value), with the rivals' labels."""

    side: np.ndarray
    others: tuple[np.ndarray | None, ...]
    labels: tuple[str, ...]
    bound: float = math.inf  # the largest |difference| the metric allows (its range): what equivalence needs

    def take(self, rows: np.ndarray) -> ClaimData:
        """The same claim over the seed rows given (resampling whole seeds: every side moves together)."""
        others = tuple(None if o is None else o[rows] for o in self.others)
        return ClaimData(self.side[rows], others, self.labels, self.bound)

    def differences(self, index: int, resolution: float) -> np.ndarray:
        """Resolved per-seed differences side − rival `index`."""
        other = self.others[index]
        return resolved(self.side if other is None else self.side - other, resolution)


@dataclass(frozen=True)
class RivalTest:
    """A claim's tests against one rival: its effect (mean of the resolved differences; spread difference of the
    resolved pairs), whether it lies on the claim's side, the effect test and the equivalence test (None: not
    a mean claim, or not asked for)."""

    effect: float
    favours: bool
    effect_test: MonteCarloP
    effect_name: str
    equivalence: MonteCarloP | None


@dataclass(frozen=True)
class Outcome:
    """A claim's verdict, why, and the rival it reports (the one that decided, or the weakest)."""

    verdict: str
    why: str
    rival: int
    effect: float
    test: str
    deciding: str  # "effect" or "equivalence": whose level the reported interval is built at


def rival_tests(
    data: ClaimData, claim: Claim, streams: Streams, draws: int = FIRST_BATCH, equivalence: bool = True
) -> tuple[RivalTest, ...]:
    """The claim's tests against each rival, drawn permutation tests with `draws` draws each (`monte_carlo`);
    equivalence: run the TOST too (mean claims)."""
    r, tests = claim.resolution, []
    for index, other in enumerate(data.others):
        if claim.statistic == "std":
            side, rival = resolved_pairs(data.side, other, r)
            effect = float(np.std(side, ddof=1) - np.std(rival, ddof=1))
            found = swap_test(side, rival, streams(index, "swap"), draws)
            favours = (effect > 0) == (claim.direction == "above") and effect != 0
            tests.append(RivalTest(effect, favours, found, "pair-swap permutation", None))
            continue
        differences = data.differences(index, r)
        effect = float(np.mean(differences))
        tost = equivalence_test(differences, r, data.bound) if equivalence else None
        if claim.direction == "equal":
            beyond = beyond_margin_test(differences, r, streams(index, "beyond"), draws)
            tests.append(RivalTest(effect, abs(effect) < r, beyond, "sign-flip beyond the margin", tost))
            continue
        shift = shift_test(differences)
        sign = 1.0 if claim.direction == "above" else -1.0
        favours = sign * (shift.up - shift.down) > 0
        tests.append(RivalTest(effect, favours, MonteCarloP.exact(shift.p), "sign test on the jumps", tost))
    return tuple(tests)


def _largest(found: Sequence[MonteCarloP]) -> MonteCarloP:
    """The largest of several p (an intersection–union test), bound by bound."""
    worst = max(found, key=lambda f: f.p)
    low, high = max(f.low for f in found), max(f.high for f in found)
    return MonteCarloP(worst.p, worst.error, low, high, worst.draws, all(f.determined for f in found))


def _smallest(found: Sequence[MonteCarloP], rivals: int) -> MonteCarloP:
    """The smallest of several p times the rivals (Bonferroni over a union), bound by bound."""
    best = min(found, key=lambda f: f.p)
    low, high = min(f.low for f in found), min(f.high for f in found)
    return MonteCarloP(best.p, best.error, low, high, best.draws, all(f.determined for f in found)).scaled(rivals)


def effect_p(claim: Claim, tests: Sequence[RivalTest]) -> MonteCarloP:
    """The claim-level p of its effect hypothesis: the largest rival p where every rival favours the claim
    (intersection–union; "equal": never), else the smallest p against it times the rivals (Bonferroni)."""
    if claim.direction != "equal" and all(t.favours for t in tests):
        return _largest([t.effect_test for t in tests])
    return _smallest([t.effect_test for t in tests if claim.direction == "equal" or not t.favours], len(tests))


def equivalence_p(claim: Claim, tests: Sequence[RivalTest]) -> MonteCarloP | None:
    """The claim-level p of its equivalence hypothesis: "equal" with every rival (the largest p); "not supported"
    against some rival (the smallest p times the rivals). None where a rival has no TOST (spread claims)."""
    found = [t.equivalence for t in tests]
    if any(f is None for f in found):
        return None
    if claim.direction == "equal":
        return _largest(found)  # type: ignore[arg-type]
    return _smallest(found, len(found))  # type: ignore[arg-type]


def judge(
    claim: Claim,
    tests: Sequence[RivalTest],
    effect_adjusted: float,
    equivalence_adjusted: float,
    alpha: float,
    determined: tuple[bool, bool] = (True, True),
) -> Outcome:
    """The claim's verdict by the module's rule from its adjusted p-values (NaN: not tested); determined: whether
    the effect and the equivalence p are settled (no value in their Monte-Carlo intervals changes a decision)."""
    r = claim.resolution
    effect_found = effect_adjusted <= alpha and determined[0]
    equivalent = equivalence_adjusted <= alpha and determined[1]
    text = f"p_adj = {effect_adjusted:.2g}"
    equivalence_text = f"TOST p_adj = {equivalence_adjusted:.2g}"
    sign = -1.0 if claim.direction == "below" else 1.0
    # the weakest rival: the largest p, and among equal p (exact tests tie often) the smallest effect the claimed way
    weakest = max(range(len(tests)), key=lambda i: (tests[i].effect_test.p, -sign * tests[i].effect))

    def outcome(index: int, verdict: str, why: str, deciding: str = "effect") -> Outcome:
        test = tests[index]
        name = "exact TOST on the jumps" if deciding == "equivalence" else test.effect_name
        return Outcome(verdict, why, index, test.effect, name, deciding)

    unsettled = [name for name, settled in zip(("effect", "equivalence"), determined, strict=True) if not settled]
    note = f" (the {' and '.join(unsettled)} test's Monte-Carlo p could not be settled)" if unsettled else ""
    if claim.direction == "equal":
        tightest = weakest
        if all(t.equivalence is not None for t in tests):
            tightest = max(range(len(tests)), key=lambda i: tests[i].equivalence.p)  # type: ignore[union-attr]
        if equivalent:
            return outcome(
                tightest, "holds", f"the mean difference lies within ±{r:g}, {equivalence_text}", "equivalence"
            )
        if effect_found:
            worst = min(range(len(tests)), key=lambda i: tests[i].effect_test.p)
            return outcome(worst, "contradicted", f"a difference beyond ±{r:g}: {tests[worst].effect:+.3g}, {text}")
        return outcome(tightest, "undecided", f"neither within nor beyond ±{r:g} yet: more seeds needed{note}")
    signed = [sign * t.effect for t in tests]
    moved = "the spreads differ" if claim.statistic == "std" else "seeds jump"
    if effect_found and all(t.favours for t in tests):
        weakest_effect = min(range(len(tests)), key=lambda i: signed[i])
        if signed[weakest_effect] >= r:
            return outcome(weakest, "holds", f"{moved} the claimed way, {text}, |Δ| ≥ {r:g}")
        return outcome(
            weakest_effect,
            "undecided",
            f"{moved} the claimed way ({text}), but the difference is below the resolution ({r:g})",
        )
    if effect_found:
        against = [i for i in range(len(tests)) if not tests[i].favours]
        worst = min(against, key=lambda i: tests[i].effect_test.p)
        if signed[worst] <= -r:
            return outcome(worst, "contradicted", f"{moved} the other way, {text}, |Δ| ≥ {r:g}")
    if equivalent:
        closest = min(range(len(tests)), key=lambda i: tests[i].equivalence.p)  # type: ignore[union-attr]
        return outcome(closest, "not supported", f"no difference as large as {r:g}: {equivalence_text}", "equivalence")
    if effect_found:
        return outcome(weakest, "undecided", f"the jumps and the mean disagree ({text}){note}")
    return outcome(weakest, "undecided", f"no test decides yet: more seeds needed{note}")
