"""The verdict rule calibrated by simulation: families of claims with known truth through the rule as shipped.

A scenario says how a claim's two sides are drawn for n seeds and which verdicts are wrong for it. Each simulated
family is the published grid's claims (their statistic, direction and resolution; one rival each) with data drawn
by the scenario, judged together by `verdicts.judge_family` (the tests, the family's Holm adjustment over every
hypothesis, the Monte-Carlo precision rule) exactly as a report judges them. What is measured per scenario and seed
count:
- familywise error: the share of families with at least one wrong verdict (the rule promises ≤ α = 5%);
- per-claim error: the share of wrong verdicts of a claim, averaged over the claims and its worst claim;
- power: the share of "holds" for the scenario's claim that carries a true effect;
- coverage: how often the 95% betting interval of the mean difference covers its true value;
- the sequential rules (`sequential_errors`): familywise error of families grown look by look, planned or anytime.

The nulls follow the review of the earlier rule: A, both sides drawn independently from the real baseline's end
values (about 14% of seed pairs then differ by a jump); B, mean zero but skewed jumps (+0.764 with chance 3.5%,
−0.25 with chance 10.7%, the end-mode ladder's shape); C, A with every difference moved by −0.001 (a sub-resolution
shift on every seed, as real same-mode differences are). Under B the jumps go down more often than up while the
mean is 0: the rule's "above"/"below" are claims about jumps, so under B "below" is true of the jumps and false of
the mean. B's errors are counted both ways (`wrong` for the rule's reading, `wrong_mean` for the mean's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness.inference.anytime import anytime_verdict
from harness.inference.betting import betting_interval
from harness.inference.claims import Claim
from harness.inference.multiplicity import holm
from harness.inference.rule import ClaimData
from harness.inference.sequential import ANYTIME, Spending, look_levels
from harness.inference.sign_flip import sign_flip_p
from harness.inference.verdicts import judge_family, judged, mean_reading

ALPHA = 0.05
POSITIVE = ("holds", "contradicted")

# (generator, claim, seeds) -> (side, other), or (side, other, side's end modes, other's end modes) where a jump is an
# end-mode change
Draw = Callable[[np.random.Generator, Claim, int], tuple[np.ndarray, ...]]


@dataclass(frozen=True)
class Jumps:
    """A distribution of per-seed differences: each value with its chance, 0 (a tie) otherwise."""

    values: tuple[float, ...]
    chances: tuple[float, ...]

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        support = np.array([*self.values, 0.0])
        chances = np.array([*self.chances, 1 - sum(self.chances)])
        return rng.choice(support, size=n, p=chances)

    def resolved_mean(self, resolution: float) -> float:
        return float(sum(v * c for v, c in zip(self.values, self.chances, strict=True) if abs(v) > resolution))

    def shift(self) -> float:
        """P(jump up) − P(jump down)."""
        return float(sum(np.sign(v) * c for v, c in zip(self.values, self.chances, strict=True)))


SKEWED_NULL = Jumps((0.764, -0.25), (0.035, 0.107))


@dataclass(frozen=True)
class Scenario:
    """How claims' data are drawn and judged wrong. effect_claim: the claim (by index) carrying a true effect, drawn by
    `effect` instead of `draw` (None: a pure null)."""

    name: str
    description: str
    draw: Draw
    effect: Draw | None = None
    effect_claim: int | None = None
    mean_truth: dict[str, float] = field(default_factory=dict)  # claim name -> true mean resolved difference


def value_claim(direction: str = "above", resolution: float = 0.01, **fields: object) -> Claim:
    """A claim on real quality against the fixed value 0 (named "c"): what a simulation's drawn differences are
    judged as, one claim alone; `fields` set its other keys (name, jump_share, ...)."""
    base: dict[str, object] = {"name": "c", "statement": "s", "metric": "policy_quality", "condition": "a"}
    return Claim(**(base | {"direction": direction, "than_value": 0.0, "resolution": resolution} | fields))


def independent_ends(baseline: np.ndarray, shift: float = 0.0) -> Draw:
    """Both sides drawn independently from `baseline` (end values), side moved by `shift`."""

    def draw(rng: np.random.Generator, claim: Claim, n: int) -> tuple[np.ndarray, np.ndarray]:
        return rng.choice(baseline, size=n) + shift, rng.choice(baseline, size=n)

    return draw


def jumps_from(baseline: np.ndarray, jumps: Jumps, spread: Draw) -> Draw:
    """Mean claims: the other side from `baseline`, the side that plus a draw of `jumps`; spread claims: `spread`."""

    def draw(rng: np.random.Generator, claim: Claim, n: int) -> tuple[np.ndarray, np.ndarray]:
        if claim.statistic == "std":
            return spread(rng, claim, n)
        other = rng.choice(baseline, size=n)
        return other + jumps.draw(rng, n), other

    return draw


def within_mode_drifts(differences: np.ndarray, same_mode: np.ndarray, ends: np.ndarray, spread: Draw) -> Draw:
    """Mean claims: seed pairs resampled from real ones (`differences`, whether the two runs share their end mode):
    a pair in one end mode keeps its measured difference, a drift, and its shared mode; a pair in two modes keeps its
    size with a random sign, so jumps go up as often as down (no shift of the end modes), while the drifts move the
    mean. The other side is drawn from `ends`. Spread claims: `spread`."""

    def draw(rng: np.random.Generator, claim: Claim, n: int) -> tuple[np.ndarray, ...]:
        if claim.statistic == "std":
            return spread(rng, claim, n)
        rows = rng.integers(0, len(differences), size=n)
        same = same_mode[rows]
        signs = np.where(same, 1.0, rng.choice([-1.0, 1.0], size=n))
        other = rng.choice(ends, size=n)
        return other + signs * differences[rows], other, np.zeros(n, dtype=int), (~same).astype(int)

    return draw


def without_end_modes(draw: Draw) -> Draw:
    """The same draw with the end modes dropped: jumps counted by the resolution alone (the earlier rule)."""
    return lambda rng, claim, n: draw(rng, claim, n)[:2]


def claim_data(drawn: tuple[np.ndarray, ...], bound: float) -> ClaimData:
    """A simulated claim's data against one rival, with end modes where the draw gives them."""
    modes = (drawn[2], (drawn[3],)) if len(drawn) == 4 else (None, None)
    return ClaimData(drawn[0], (drawn[1],), ("rival",), bound, *modes)


def wrong_verdicts(claim: Claim, scenario: str, effect: bool) -> tuple[set[str], set[str]]:
    """(wrong by the rule's reading, wrong for the mean) of a claim in a scenario. Nulls: a positive verdict about an
    effect is wrong ("equal" claims: only "contradicted", the sides being equal); under B (jumps down more often,
    mean 0) the rule's "below" is right for mean claims. A true effect on the claimed side: negative verdicts."""
    if effect:
        return {"contradicted", "not supported"}, {"contradicted", "not supported"}
    if claim.direction == "equal":
        return {"contradicted"}, {"contradicted"}
    if scenario == "B" and claim.statistic == "mean":
        # B's jumps (claimed side minus other) go down more often than up: "below" is true of them, "above" false
        return {"contradicted"} if claim.direction == "below" else {"holds"}, set(POSITIVE)
    return set(POSITIVE), set(POSITIVE)


def _family_data(
    scenario: Scenario, claims: Sequence[Claim], n: int, rng: np.random.Generator, bound: float
) -> list[ClaimData]:
    datas = []
    for index, claim in enumerate(claims):
        draw = scenario.effect if index == scenario.effect_claim and scenario.effect else scenario.draw
        datas.append(claim_data(draw(rng, claim, n), bound))
    return datas


def mean_reading_wrong(claim: Claim, data: ClaimData, truth: float, level: float) -> bool:
    """Whether the report's reading of a mean claim's mean (its betting interval at 1 − level, `mean_reading`) is
    wrong for the true mean difference `truth`: "holds", "contradicted" or "within ±r" said of a mean that is not so.
    Spread claims and metrics without a range have no such reading."""
    if claim.statistic != "mean" or not np.isfinite(data.bound):
        return False
    low, high = betting_interval(data.raw_differences(0), -data.bound, data.bound, 1 - level)
    reading, r = mean_reading(claim, low, high), claim.resolution
    sign = -1.0 if claim.direction == "below" else 1.0
    if claim.direction == "equal":
        true_reading = "holds" if abs(truth) <= r else "contradicted"
    else:
        true_reading = "holds" if sign * truth > r else "contradicted" if sign * truth < -r else f"within ±{r:g}"
    return reading != "undecided" and reading != true_reading


def sign_flip_family_error(claims: Sequence[Claim], datas: Sequence[ClaimData], rng: np.random.Generator) -> bool:
    """Whether the rejected alternative, a two-sided sign-flip permutation test of each mean claim's resolved
    differences (Holm over the family's mean claims, at α), finds any effect: under a null of the mean every such
    finding is wrong. What the rule would do had it tested means by sign flips, for comparison."""
    p = [
        sign_flip_p(data.differences(0, claim.resolution), "two-sided", rng).p
        for claim, data in zip(claims, datas, strict=True)
        if claim.statistic == "mean" and claim.direction != "equal"
    ]
    return bool(np.any(holm(np.array(p)) <= ALPHA))


def family_errors(
    scenario: Scenario, claims: Sequence[Claim], n: int, families: int, seed: int, bound: float = np.inf
) -> dict[str, float | int | str]:
    """One row of the calibration table: `families` families of n seeds judged by the rule (bound: the largest
    difference the metric allows, what its equivalence test needs)."""
    rng = np.random.default_rng([seed, n, sum(map(ord, scenario.name))])
    wrong = np.zeros((families, len(claims)), dtype=bool)
    wrong_mean = np.zeros_like(wrong)
    wrong_reading = np.zeros_like(wrong)
    truths = [
        population_mean(scenario.effect if i == scenario.effect_claim and scenario.effect else scenario.draw, c)
        if c.statistic == "mean"
        else np.nan
        for i, c in enumerate(claims)
    ]
    holds = np.zeros(families, dtype=bool)
    flip_wrong = np.zeros(families, dtype=bool)
    for family in range(families):
        datas = _family_data(scenario, claims, n, rng, bound)
        if scenario.effect_claim is None:
            flip_wrong[family] = sign_flip_family_error(claims, datas, rng)
        for index, (claim, data) in enumerate(zip(claims, datas, strict=True)):
            wrong_reading[family, index] = mean_reading_wrong(claim, data, truths[index], ALPHA / len(claims))
        for index, (claim, verdict) in enumerate(zip(claims, judge_family(claims, datas, ALPHA), strict=True)):
            is_effect = index == scenario.effect_claim
            rule_wrong, mean_wrong = wrong_verdicts(claim, scenario.name, is_effect)
            wrong[family, index] = verdict.outcome.verdict in rule_wrong
            wrong_mean[family, index] = verdict.outcome.verdict in mean_wrong
            holds[family] |= is_effect and verdict.outcome.verdict == "holds"
    per_claim = wrong.mean(axis=0)
    return {
        "scenario": scenario.name,
        "seeds": n,
        "families": families,
        "familywise_error": float(wrong.any(axis=1).mean()),
        "familywise_error_mean": float(wrong_mean.any(axis=1).mean()),
        "familywise_error_mean_reading": float(wrong_reading.any(axis=1).mean()),
        "per_claim_error": float(per_claim.mean()),
        "worst_claim_error": float(per_claim.max()),
        "worst_claim": claims[int(np.argmax(per_claim))].name,
        "power": float(holds.mean()) if scenario.effect_claim is not None else np.nan,
        "familywise_error_sign_flip": float(flip_wrong.mean()) if scenario.effect_claim is None else np.nan,
    }


def sequential_errors(
    scenario: Scenario,
    claims: Sequence[Claim],
    looks: Sequence[int],
    spending: Spending,
    families: int,
    seed: int,
    bound: float = np.inf,
) -> dict[str, float | int | str]:
    """One row of the sequential calibration: `families` families grown to the last of `looks` seeds and judged at
    every look as `until_decided` judges them, each claim keeping the verdict of the look that first decided it. A
    family errs where any kept verdict is wrong (the same as some look's verdict being wrong, the event the rule
    bounds by α, whatever look a run would stop at). Planned looks: the rule at each look's spending level
    (`sequential.look_levels`); "anytime": the sign e-values (`anytime.anytime_verdict`, Bonferroni over the family's
    above/below mean claims), every other claim left open. power: the share of families whose effect claim (if the
    scenario has one) holds by the last look."""
    rng = np.random.default_rng([seed, looks[-1], sum(map(ord, scenario.name)), sum(map(ord, spending))])
    levels = look_levels(tuple(looks), ALPHA, spending) if spending != ANYTIME else np.full(len(looks), ALPHA)
    by_e_value = [c.statistic == "mean" and c.direction != "equal" for c in claims]
    threshold = sum(by_e_value) / ALPHA
    wrong_family = np.zeros(families, dtype=bool)
    holds = np.zeros(families, dtype=bool)
    decided_by_last = np.zeros(families)
    for family in range(families):
        full = _family_data(scenario, claims, looks[-1], rng, bound)
        kept: list[str | None] = [None] * len(claims)
        for n, level in zip(looks, levels, strict=True):
            datas = [data.take(np.arange(n)) for data in full]
            if spending == ANYTIME:
                verdicts = [
                    anytime_verdict(claim, data, threshold)[0] if tested else "undecided"
                    for claim, data, tested in zip(claims, datas, by_e_value, strict=True)
                ]
            else:
                verdicts = [found.outcome.verdict for found in judge_family(claims, datas, float(level))]
            kept = [
                k if k is not None else (v if v != "undecided" else None) for k, v in zip(kept, verdicts, strict=True)
            ]
            if all(k is not None for k in kept):
                break
        for index, claim in enumerate(claims):
            rule_wrong, _ = wrong_verdicts(claim, scenario.name, index == scenario.effect_claim)
            wrong_family[family] |= kept[index] in rule_wrong
            holds[family] |= index == scenario.effect_claim and kept[index] == "holds"
        decided_by_last[family] = sum(k is not None for k in kept) / len(claims)
    return {
        "scenario": scenario.name,
        "spending": spending,
        "looks": " ".join(map(str, looks)),
        "families": families,
        "familywise_error": float(wrong_family.mean()),
        "decided_share": float(decided_by_last.mean()),
        "power": float(holds.mean()) if scenario.effect_claim is not None else np.nan,
    }


def margin_errors(claim: Claim, jumps: Jumps, bound: float, n: int, datasets: int, seed: int) -> tuple[float, float]:
    """(the rule's error, a sign-flip TOST's error) when the truth sits exactly at the margin, for one claim alone (a
    family of one: its own level α, the least protected case). The truth: an "equal" claim's mean resolved
    difference is exactly the margin ("holds" and "contradicted" are wrong), or an "above" claim's is exactly its
    resolution ("not supported" is wrong); for a claim with a jump share p₀, exactly p₀ of the seeds jump. The
    sign-flip TOST (two shifted sign-flip tests, doubled) is the
    alternative the rule rejects: it assumes symmetry, and a mean at the margin made of rare large jumps breaks it."""
    rng = np.random.default_rng([seed, n])
    # at the margin an "equal" claim is neither within it nor beyond it: "holds" and "contradicted" are both wrong
    wrong = ("holds", "contradicted") if claim.direction == "equal" else ("not supported",)
    rule_wrong = flip_wrong = 0
    for _ in range(datasets):
        differences = jumps.draw(rng, n)
        data = ClaimData(differences, (None,), ("0",), bound)
        rule_wrong += judge_family([claim], [data], ALPHA)[0].outcome.verdict in wrong
        r = claim.resolution
        flipped = max(sign_flip_p(differences + r, "greater", rng).p, sign_flip_p(differences - r, "less", rng).p)
        flip_wrong += 2 * flipped <= ALPHA
    return rule_wrong / datasets, flip_wrong / datasets


def population_mean(draw: Draw, claim: Claim, size: int = 1_000_000) -> float:
    """The mean difference of a scenario's claim as measured, from one large draw (standard error about 1e-4)."""
    side, other, *_ = draw(np.random.default_rng(23), claim, size)
    return float(np.mean(side - other))


def coverage(draw: Draw, claim: Claim, truth: float, n: int, datasets: int, seed: int, bound: float) -> float:
    """How often the 95% betting interval of the mean difference (`betting`, differences within ± bound) covers its
    true value."""
    rng = np.random.default_rng([seed, n, 7])
    covered = 0
    for _ in range(datasets):
        side, other, *_ = draw(rng, claim, n)
        low, high = betting_interval(side - other, -bound, bound, 0.95)
        covered += low <= truth <= high
    return covered / datasets


def power_at(
    population: np.ndarray,
    claim: Claim,
    factors: tuple[float, float],
    n: int,
    datasets: int,
    seed: int,
    bound: float = np.inf,
) -> float:
    """The share of datasets of n seeds resampled from `population` (differences) that the rule decides, the
    claim's adjustment held at `factors`: what `seeds_needed` predicts to be TARGET at its estimate."""
    rng = np.random.default_rng([seed, n, 11])
    decided = 0
    for _ in range(datasets):
        data = ClaimData(rng.choice(population, size=n), (None,), ("0",), bound)
        decided += judged(data, claim, factors, ALPHA, lambda *_: rng).verdict != "undecided"
    return decided / datasets


def calibration_table(rows: Sequence[dict[str, float | int | str]]) -> pd.DataFrame:
    return pd.DataFrame(list(rows))
