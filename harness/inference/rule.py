"""The verdict rule for one claim, given its two adjusted p-values.

A claim's verdict word is about **jumps**: the seeds whose two runs differ in a way that counts. Where the metric is
set by the run's end mode (real quality, mode quality) and both sides are end states (the grid's last iteration), a
jump is a seed whose two runs end in *different end modes* and differ by more than the resolution r; a seed whose
two runs share their end mode but differ by more than r is a **drift**, counted and reported apart and never a
jump. For every other comparison (other metrics, an intermediate iteration, a fixed value) a jump is a seed whose
difference exceeds r (`paired_tests.resolved`). Each verdict's text states which rule it used.

Each claim then has up to two hypotheses, both in its family's adjustment (`verdicts.verdict_table`):
- the **effect** hypothesis, whose rejection gives "holds" or "contradicted": for "above"/"below" as many seeds
  jump up as down (the exact sign test on the jumps); for "equal", the jumps' mean lies within ±r (a betting test,
  `betting.betting_p_value`: rejection contradicts); on a spread, equal spreads (pair-swap test);
- the **equivalence** hypothesis (mean claims only), whose rejection says each way's share of seeds that jump lies
  below r / range, which keeps the jumps' mean within ±r (an exact TOST on the jump counts given the metric's range,
  `paired_tests.equivalence_test`): "not supported" for "above"/"below", "holds" for "equal". It joins the family
  only where it can reject at all at this seed count (`paired_tests.equivalence_reachable`): a hypothesis that no
  data could reject only takes α from the others. A metric without a known range never gets these verdicts,
  unless the claim states its jump share p₀ (`Claim.jump_share`): then equivalence is "at most p₀ of the seeds jump"
  and an "equal" claim's contradiction "more than p₀ do", both exact binomial tests (`paired_tests.jump_share_test`).

None of these is a test of the mean: a rare large jump against frequent small ones moves the mean without moving
the jump counts. The mean itself is reported beside the verdict with an interval valid for any distribution within
the metric's range (`betting`), and read from that interval alone (`mean_reading`).

With R distinct rivals (a pattern): a positive verdict needs every rival (intersection–union: the claim-level p is
the largest of the rivals'); a negative one is a statement about some rival (union: the smallest p times R).

- "above" (below mirrors it): holds if the effect p_adj ≤ α, every rival's jumps favour the claim and every
  rival's jumps add up to a mean of at least r on the claimed side; contradicted if p_adj ≤ α against a rival whose
  jumps go the other way, by a mean of at least r; not supported if the equivalence p_adj ≤ α; else undecided.
- "equal": holds if the equivalence p_adj ≤ α; contradicted if the betting test puts the jumps' mean beyond ±r;
  else undecided.
A difference smaller than r is never a finding, and a Monte-Carlo p whose interval still straddles a threshold
(`monte_carlo.MonteCarloP.determined`) never decides.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from harness.inference.betting import betting_p_value
from harness.inference.claims import Claim
from harness.inference.monte_carlo import FIRST_BATCH, MonteCarloP
from harness.inference.paired_tests import (
    Shift,
    equivalence_possible,
    equivalence_reachable,
    equivalence_seeds,
    equivalence_test,
    jump_share_test,
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


def jump_words(by_end_mode: bool, resolution: float, count: int = 2) -> str:
    """What a jump is, as a verdict states it of `count` seeds: "seeds whose end modes differ" where jumps are
    end-mode changes, else "seeds that differ by more than r" (singular for one)."""
    if by_end_mode:
        return "seed whose end modes differ" if count == 1 else "seeds whose end modes differ"
    return (
        f"seed that differs by more than {resolution:g}"
        if count == 1
        else f"seeds that differ by more than {resolution:g}"
    )


@dataclass(frozen=True)
class ClaimData:
    """A claim's sides over shared seeds: side values and one array per distinct rival (None: the side is
    already a difference from a fixed value), with the rivals' labels.

    bound: the largest |difference| the metric allows (its range): what equivalence and the mean's interval need.
    side_modes / other_modes: each run's end mode (an output index) where jumps are end-mode changes (the metric is
    set by the end mode and both sides are end states); None: a jump is any difference beyond the resolution."""

    side: np.ndarray
    others: tuple[np.ndarray | None, ...]
    labels: tuple[str, ...]
    bound: float = math.inf
    side_modes: np.ndarray | None = None
    other_modes: tuple[np.ndarray, ...] | None = None

    @property
    def by_end_mode(self) -> bool:
        """Whether a jump is an end-mode change (else a difference beyond the resolution)."""
        return self.side_modes is not None and self.other_modes is not None

    def take(self, rows: np.ndarray) -> ClaimData:
        """The same claim over the seed rows given (resampling whole seeds: every side moves together)."""
        others = tuple(None if o is None else o[rows] for o in self.others)
        taken = dataclasses.replace(self, side=self.side[rows], others=others)
        if not self.by_end_mode:
            return taken
        modes = tuple(m[rows] for m in self.other_modes)  # type: ignore[union-attr]
        return dataclasses.replace(taken, side_modes=self.side_modes[rows], other_modes=modes)  # type: ignore[index]

    def raw_differences(self, index: int) -> np.ndarray:
        """Per-seed differences side − rival `index`, as measured (drifts and float noise included)."""
        other = self.others[index]
        return self.side if other is None else self.side - other

    def same_mode(self, index: int) -> np.ndarray:
        """Per seed: whether both runs end in the same end mode (all False where jumps are not end-mode changes)."""
        if not self.by_end_mode:
            return np.zeros(len(self.side), dtype=bool)
        side, other = self.side_modes, self.other_modes[index]  # type: ignore[index]
        # a run without a recorded end mode (NaN) shares none: that seed is counted by the resolution
        return (side == other) & np.isfinite(side) & np.isfinite(other)

    def differences(self, index: int, resolution: float) -> np.ndarray:
        """Per-seed jumps side − rival `index`: the differences beyond the resolution, and where jumps are end-mode
        changes only those between different end modes; every other seed is a tie (0)."""
        return np.where(self.same_mode(index), 0.0, resolved(self.raw_differences(index), resolution))

    def drifts(self, index: int, resolution: float) -> np.ndarray:
        """The differences beyond the resolution of seeds whose two runs share their end mode (none where jumps are
        not end-mode changes): measured, reported, never a jump."""
        raw = self.raw_differences(index)
        return raw[self.same_mode(index) & (np.abs(raw) > resolution)]

    def jump_words(self, resolution: float, count: int = 2) -> str:
        """What a jump is for this claim, as a verdict states it of `count` seeds (`jump_words`)."""
        return jump_words(self.by_end_mode, resolution, count)


@dataclass(frozen=True)
class RivalTest:
    """A claim's tests against one rival: its effect (mean of the jumps over all seeds; spread difference of the
    resolved pairs), whether it lies on the claim's side, the effect test, the equivalence test (None: not a mean
    claim, not asked for, or unable to reject at this seed count) and the jump counts (mean claims)."""

    effect: float
    favours: bool
    effect_test: MonteCarloP
    effect_name: str
    equivalence: MonteCarloP | None
    shift: Shift | None = None


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
    data: ClaimData,
    claim: Claim,
    streams: Streams,
    draws: int = FIRST_BATCH,
    equivalence: bool = True,
    alpha: float = 0.05,
) -> tuple[RivalTest, ...]:
    """The claim's tests against each rival, drawn permutation tests with `draws` draws each (`monte_carlo`);
    equivalence: run the TOST too (mean claims) where it can reject at level alpha with this many seeds."""
    r, tests = claim.resolution, []
    # "not supported" against one of R rivals is Bonferroni over them: its smallest p is R times a single TOST's
    union = len(data.others) if claim.direction != "equal" else 1
    share = claim.jump_share
    reachable = equivalence and equivalence_reachable(len(data.side), r, data.bound, alpha / union, share)
    for index, other in enumerate(data.others):
        if claim.statistic == "std":
            side, rival = resolved_pairs(data.side, other, r)
            # A spread needs two seeds: with fewer the effect is unknown (and the claim untested), not a warning.
            effect = float(np.std(side, ddof=1) - np.std(rival, ddof=1)) if len(side) > 1 else np.nan
            found = swap_test(side, rival, streams(index, "swap"), draws)
            favours = not np.isnan(effect) and (effect > 0) == (claim.direction == "above") and effect != 0
            tests.append(RivalTest(effect, favours, found, "pair-swap permutation", None))
            continue
        differences = data.differences(index, r)
        effect = float(np.mean(differences)) if len(differences) else np.nan  # no seed with a value: untested
        tost = equivalence_test(differences, r, data.bound, share) if reachable else None
        shift = shift_test(differences)
        if claim.direction == "equal" and share is not None:
            more = jump_share_test(differences, share, "more than")
            name = f"binomial test of more than {share:g} of the seeds jumping"
            favours = shift.up + shift.down <= share * len(differences)
            tests.append(RivalTest(effect, favours, more, name, tost, shift))
            continue
        if claim.direction == "equal":
            beyond = betting_p_value(differences, -data.bound, data.bound, -r, r, alpha)
            name = "betting test of the jumps' mean beyond the margin"
            tests.append(RivalTest(effect, abs(effect) < r, MonteCarloP.exact(beyond), name, tost, shift))
            continue
        test = MonteCarloP.exact(shift.p)
        sign = 1.0 if claim.direction == "above" else -1.0
        favours = sign * (shift.up - shift.down) > 0
        tests.append(RivalTest(effect, favours, test, "sign test on the jumps", tost, shift))
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


@dataclass(frozen=True)
class Wording:
    """What a verdict's text needs of its data: what a jump is (by the count of seeds named), the seeds, and the
    metric's range (the bound)."""

    seeds: int = 0
    bound: float = math.inf
    by_end_mode: bool = False
    resolution: float = 0.0

    @staticmethod
    def of(data: ClaimData, resolution: float) -> Wording:
        return Wording(len(data.side), data.bound, data.by_end_mode, resolution)

    def jumps(self, count: int) -> str:
        """What a jump is, for `count` of them (`jump_words`)."""
        return jump_words(self.by_end_mode, self.resolution, count)


def _counts(test: RivalTest, wording: Wording, p_text: str) -> str:
    """A mean test's counts in words: "of the 19 seeds whose end modes differ, 18 end higher and 1 lower (…)"."""
    shift = test.shift
    if shift is None:
        return f"spread over seeds {test.effect:+.3g} against the rival's (pair-swap permutation test, {p_text})"
    total = shift.up + shift.down
    named = f"sign test, {p_text}" if test.effect_name.startswith("sign") else f"{test.effect_name}, {p_text}"
    if total == 0:
        return f"0 {wording.jumps(0)} ({named})"
    return f"of the {total} {wording.jumps(total)}, {shift.up} end higher and {shift.down} lower ({named})"


def judge(
    claim: Claim,
    tests: Sequence[RivalTest],
    effect_adjusted: float,
    equivalence_adjusted: float,
    alpha: float,
    determined: tuple[bool, bool] = (True, True),
    wording: Wording = Wording(),
) -> Outcome:
    """The claim's verdict by the module's rule from its adjusted p-values (NaN: not tested); determined: whether
    the effect and the equivalence p are settled (no value in their Monte-Carlo intervals changes a decision).
    Its text states what was tested and the counts that decided it (or why nothing was decided)."""
    r = claim.resolution
    effect_found = effect_adjusted <= alpha and determined[0]
    equivalent = equivalence_adjusted <= alpha and determined[1]
    text = f"{'claim ' if len(tests) > 1 else ''}p_adj = {effect_adjusted:.2g}"
    sign = -1.0 if claim.direction == "below" else 1.0
    # the weakest rival: the largest p, and among equal p (exact tests tie often) the smallest effect the claimed way
    weakest = max(range(len(tests)), key=lambda i: (tests[i].effect_test.p, -sign * tests[i].effect))

    def outcome(index: int, verdict: str, why: str, deciding: str = "effect") -> Outcome:
        test = tests[index]
        tost = "exact binomial test of the jump share" if claim.jump_share is not None else "exact TOST on the jumps"
        name = tost if deciding == "equivalence" else test.effect_name
        return Outcome(verdict, why, index, test.effect, name, deciding)

    def counts(index: int) -> str:
        return _counts(tests[index], wording, text)

    def equivalence_text(index: int) -> str:
        shift, chance = tests[index].shift, min(1.0, r / wording.bound)
        found = f"{shift.up} up and {shift.down} down" if shift else ""
        if claim.jump_share is not None:
            jumped = shift.up + shift.down if shift else 0
            return (
                f"at most {claim.jump_share:g} of the seeds jump ({wording.jumps(2)}): {jumped} of all "
                f"{wording.seeds} seeds do, {found} (exact binomial test of that share, p_adj = "
                f"{equivalence_adjusted:.2g})"
            )
        return (
            f"each way's share of all {wording.seeds} seeds that jump lies below {chance:.2g} (= {r:g} / the "
            f"metric's range), which keeps the jumps' mean within ±{r:g}: {found} (exact binomial TOST, p_adj = "
            f"{equivalence_adjusted:.2g})"
        )

    unsettled = [name for name, settled in zip(("effect", "equivalence"), determined, strict=True) if not settled]
    note = f" (the {' and '.join(unsettled)} test's Monte-Carlo p could not be settled)" if unsettled else ""
    unreachable = ""
    share = claim.jump_share
    if claim.statistic == "mean" and equivalence_possible(wording.bound, share) and wording.seeds:
        union = len(tests) if claim.direction != "equal" else 1
        if not equivalence_reachable(wording.seeds, r, wording.bound, alpha / union, share):
            needs = equivalence_seeds(r, wording.bound, alpha / union, share)
            what = f"at most {share:g} of the seeds jumping" if share is not None else f"the jumps' mean within ±{r:g}"
            unreachable = (
                f"; {what} cannot be shown at {wording.seeds} seeds (that needs at least {needs:,}, even with no "
                "seed jumping)"
            )
    if claim.direction == "equal":
        tightest = weakest
        if all(t.equivalence is not None for t in tests):
            tightest = max(range(len(tests)), key=lambda i: tests[i].equivalence.p)  # type: ignore[union-attr]
        if equivalent:
            return outcome(tightest, "holds", equivalence_text(tightest), "equivalence")
        worst = min(range(len(tests)), key=lambda i: tests[i].effect_test.p)
        if effect_found and share is not None:
            jumped = tests[worst].shift.up + tests[worst].shift.down  # type: ignore[union-attr]
            return outcome(
                worst,
                "contradicted",
                f"{counts(worst)}: more than {share:g} of the seeds jump ({jumped} of {wording.seeds})",
            )
        if effect_found:
            return outcome(
                worst,
                "contradicted",
                f"{counts(worst)}: the jumps' mean, {tests[worst].effect:+.3g}, lies beyond ±{r:g}",
            )
        return outcome(tightest, "undecided", f"{counts(tightest)}: not decided{note}{unreachable}")
    signed = [sign * t.effect for t in tests]
    if effect_found and all(t.favours for t in tests):
        weakest_effect = min(range(len(tests)), key=lambda i: signed[i])
        if signed[weakest_effect] >= r:
            return outcome(weakest, "holds", f"{counts(weakest)}, adding up to {tests[weakest].effect:+.3g}")
        return outcome(
            weakest_effect,
            "undecided",
            f"{counts(weakest_effect)}, but adding up to only {tests[weakest_effect].effect:+.3g}, "
            f"within the resolution ({r:g})",
        )
    if effect_found:
        against = [i for i in range(len(tests)) if not tests[i].favours]
        worst = min(against, key=lambda i: tests[i].effect_test.p)
        if signed[worst] <= -r:
            return outcome(
                worst, "contradicted", f"{counts(worst)}: the other way, adding up to {tests[worst].effect:+.3g}"
            )
        return outcome(
            worst,
            "undecided",
            f"{counts(worst)}: the other way, but adding up to only {tests[worst].effect:+.3g}, within the resolution "
            f"({r:g}){note}",
        )
    if equivalent:
        closest = min(range(len(tests)), key=lambda i: tests[i].equivalence.p)  # type: ignore[union-attr]
        return outcome(closest, "not supported", equivalence_text(closest), "equivalence")
    return outcome(weakest, "undecided", f"{counts(weakest)}: not decided{note}{unreachable}")
