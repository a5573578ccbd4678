"""Test claims (`harness.inference.claims`) against a metrics table: effect, interval, tests, verdict.

Every claim compares a side with one or more others, paired by seed (`rule` states the verdict rule and its
tests). A condition file's claims form one family by default (a claim may name its own `family`); within a family
the p-values of every claim's hypotheses (its effect test and, for a mean, its equivalence test) are adjusted
together (Holm by default, Benjamini–Hochberg as an option: `multiplicity`). Each claim's interval is the BCa
interval of its resolved differences at the level of the hypothesis that decided it (Holm's step for its rank).
A run whose value is not finite is left out of the claim and counted (`seeds_excluded`); with fewer than MIN_SEEDS
paired seeds left a claim is "untested" (effect, interval and tests still shown from 2 seeds on). Permutation
p-values are drawn until no threshold of the family can flip (`monte_carlo`), from one stream per claim and rival;
`p_error` is the Monte-Carlo standard error of p_value (0: exact). An undecided claim gets an estimate of the seeds
that would decide it (`seeds_needed`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.stats

from harness.engine.metrics import all_metrics
from harness.inference.betting import betting_interval
from harness.inference.claims import Claim
from harness.inference.intervals import BOOTSTRAP_RESAMPLES, paired_bootstrap_ci, share_interval
from harness.inference.monte_carlo import FIRST_BATCH, GROWTH, MAX_DRAWS, MonteCarloP, claim_generator
from harness.inference.multiplicity import ADJUSTMENT_NAMES, adjust, levels
from harness.inference.paired_tests import equivalence_possible, mode_counts, resolved_pairs, shift_test
from harness.inference.rule import (
    MIN_SEEDS,
    VERDICTS,
    ClaimData,
    Outcome,
    RivalTest,
    Wording,
    effect_p,
    equivalence_p,
    judge,
    rival_tests,
)
from harness.inference.seeds_needed import seeds_needed, simulation_resamples, verdict_shares

__all__ = ["BOOTSTRAP_RESAMPLES", "MIN_SEEDS", "VERDICTS", "claim_verdict", "paired_bootstrap_ci"]

DEFAULT_FAMILY = "condition file"
MODE = "mode_index"  # each run's end mode: what a jump changes where the metric is set by it

VERDICT_COLUMNS = [
    "claim",
    "statement",
    "metric",
    "side",
    "other_side",
    "statistic",
    "seeds",
    "seeds_excluded",
    "side_mean",
    "other_mean",
    "side_iqm",
    "other_iqm",
    "effect",
    "ci_low",
    "ci_high",
    "ci_level",
    "ci_method",
    "mean_reading",
    "jump_rule",
    "seeds_up",
    "seeds_down",
    "exact_test",
    "exact_p",
    "seeds_drift",
    "drift_mean",
    "test",
    "p_value",
    "p_error",
    "family",
    "adjustment",
    "p_adjusted",
    "equivalence_p",
    "equivalence_p_adjusted",
    "p_improvement",
    "p_improvement_low",
    "p_improvement_high",
    "resolution",
    "verdict",
    "why",
    "seeds_needed",
    "chance_holds",
    "chance_contradicted",
    "chance_not_supported",
    "chance_undecided",
]
DECISIONS = ("holds", "contradicted", "not supported", "undecided")  # what a claim at seeds_needed may come to


def _resolve(iteration: int | str, last: int) -> int:
    return last if iteration == "last" else int(iteration)


def _values(metrics: pd.DataFrame, metric: str, condition: str, iteration: int) -> pd.Series:
    """metric by seed for one condition at one iteration, diverged runs left out."""
    rows = metrics[(metrics["condition"] == condition) & (metrics["iteration"] == iteration)]
    if "diverged" in rows.columns:
        rows = rows[~rows["diverged"].astype(bool)]
    return rows.set_index("seed")[metric].astype(float)


def _interquartile_mean(values: np.ndarray) -> float:
    return float(scipy.stats.trim_mean(values, 0.25)) if len(values) else np.nan


def claim_data(
    metrics: pd.DataFrame, claim: Claim, ranges: Mapping[str, tuple[float, float]] | None = None
) -> tuple[ClaimData, str, str, int, int]:
    """(data, side label, other label, iteration, excluded) of a claim: its sides over the seeds every side shares
    with a finite value on every side; excluded counts the shared seeds left out for a non-finite value. ranges:
    (low, high) of metrics (`run_measures.metric_ranges`), which bound a difference (what equivalence needs).

    Rivals (the conditions a pattern names) whose per-seed values are identical are one rival, labelled with all
    their names. A comparison with a fixed value has one other side, None, and the side's values minus the value.
    """
    last = int(metrics["iteration"].max())
    iteration = _resolve(claim.iteration, last)
    low, high = (ranges or {}).get(claim.metric, (-np.inf, np.inf))
    side = _values(metrics, claim.metric, claim.condition, iteration)
    side_label = f"{claim.condition} @ {iteration}"
    if claim.than_value is not None:
        finite = np.isfinite(side.to_numpy())
        bound = max(high - claim.than_value, claim.than_value - low)
        data = ClaimData(
            side.to_numpy()[finite] - claim.than_value, (None,), (f"the value {claim.than_value:g}",), bound
        )
        return data, side_label, f"the value {claim.than_value:g}", iteration, int(np.sum(~finite))
    other_iteration = _resolve(claim.than_iteration if claim.than_iteration is not None else iteration, last)
    names = claim.other_conditions(list(dict.fromkeys(metrics["condition"])))
    others = {name: _values(metrics, claim.metric, name, other_iteration) for name in names}
    seeds = side.index
    for values in others.values():
        seeds = seeds.intersection(values.index)  # paired: only seeds every side has
    finite = np.isfinite(side[seeds].to_numpy())
    for values in others.values():
        finite &= np.isfinite(values[seeds].to_numpy())
    excluded, seeds = int(np.sum(~finite)), seeds[finite]
    by_mode = _jumps_by_end_mode(metrics, claim.metric, iteration, other_iteration, last)
    modes = {name: _values(metrics, MODE, name, other_iteration)[seeds].to_numpy() for name in names} if by_mode else {}
    groups: dict[bytes, tuple[np.ndarray, list[str]]] = {}
    for name, values in others.items():
        array = values[seeds].to_numpy()
        # one rival where the values and the end modes are the same seed by seed
        key = array.tobytes() + (modes[name].tobytes() if by_mode else b"")
        groups.setdefault(key, (array, []))[1].append(name)
    labels = tuple(
        f"{named[0]} @ {other_iteration}" + (f" (= {', '.join(named[1:])})" if len(named) > 1 else "")
        for _, named in groups.values()
    )
    side_modes, other_modes = None, None
    if by_mode:
        side_modes = _values(metrics, MODE, claim.condition, iteration)[seeds].to_numpy()
        other_modes = tuple(modes[named[0]] for _, named in groups.values())
    arrays = tuple(array for array, _ in groups.values())
    data = ClaimData(side[seeds].to_numpy(), arrays, labels, high - low, side_modes, other_modes)
    return data, side_label, labels[0], iteration, excluded


def _jumps_by_end_mode(metrics: pd.DataFrame, metric: str, iteration: int, other_iteration: int, last: int) -> bool:
    """Whether a claim's jumps are end-mode changes: its metric is set by the end mode, both sides are end states
    (the last iteration) and the table records each run's end mode."""
    tied = any(m.name == metric and m.set_by_end_mode for m in all_metrics())
    return tied and iteration == other_iteration == last and MODE in metrics.columns


def _improvement_scores(claim: Claim, differences: np.ndarray) -> np.ndarray:
    """Per seed: 1 on the claimed side by more than the resolution, ½ a tie (|d| ≤ r), 0 otherwise; for "equal":
    1 within the margin, else 0."""
    r = claim.resolution
    if claim.direction == "equal":
        return (np.abs(differences) <= r).astype(float)
    signed = differences if claim.direction == "above" else -differences
    return (signed > r) + 0.5 * (np.abs(signed) <= r)


def _family(claim: Claim) -> str:
    return claim.family or DEFAULT_FAMILY


def _streams(claim: Claim, labels: Sequence[str]):  # noqa: ANN202
    return lambda index, test: claim_generator(claim.name, labels[index], test)


@dataclass(frozen=True)
class Judged:
    """A claim judged within its family: its verdict, the claim-level p of its effect and equivalence hypotheses
    (raw and adjusted; NaN where it has none or is untested) and the levels of their Holm steps."""

    outcome: Outcome
    effect: MonteCarloP
    equivalence: MonteCarloP | None
    adjusted: float
    adjusted_equivalence: float
    level: float
    equivalence_level: float
    tested: bool

    def factors(self) -> tuple[float, float]:
        """The family's adjustment of each hypothesis as a multiplier of its raw p (1 where nothing to adjust)."""

        def ratio(adjusted: float, raw: float) -> float:
            return adjusted / raw if raw > 0 and np.isfinite(adjusted) else 1.0

        effect = ratio(self.adjusted, self.effect.p)
        if self.equivalence is None:  # left out of the family here: at more seeds it joins it, adjusted like the effect
            return effect, effect
        return effect, ratio(self.adjusted_equivalence, self.equivalence.p)


def _adjusted(
    claims: Sequence[Claim],
    tested: np.ndarray,
    effect: np.ndarray,
    equivalence: np.ndarray,
    alpha: float,
    extra: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(effect p, equivalence p, effect level, equivalence level, extra p) adjusted within each family, where a
    mean claim brings two hypotheses and a spread claim one; untested claims are left out (NaN). extra: p-values of
    hypotheses judged elsewhere that join the first claim's family."""
    extra = np.zeros(0) if extra is None else np.asarray(extra, dtype=float)
    adjusted_extra = np.full(len(extra), np.nan)
    families = [_family(c) for c in claims]
    adjusted, adjusted_equivalence = np.full(len(claims), np.nan), np.full(len(claims), np.nan)
    level, equivalence_level = np.full(len(claims), alpha), np.full(len(claims), alpha)
    for family in dict.fromkeys(families):
        members = np.array([f == family for f in families])
        methods = {c.adjustment for c, member in zip(claims, members, strict=True) if member}
        if len(methods) > 1:
            raise ValueError(f"claims of family {family!r} ask for different adjustments: {sorted(methods)}")
        method = methods.pop()
        own = tested[members]
        joined = extra if family == families[0] else np.zeros(0)
        p = np.concatenate(
            [np.where(own, effect[members], np.nan), np.where(own, equivalence[members], np.nan), joined]
        )
        both, both_levels = adjust(p, method), levels(p, method, alpha)
        count = int(members.sum())
        adjusted[members], adjusted_equivalence[members] = both[:count], both[count : 2 * count]
        level[members], equivalence_level[members] = both_levels[:count], both_levels[count : 2 * count]
        if len(joined):
            adjusted_extra = both[2 * count :]
    return adjusted, adjusted_equivalence, level, equivalence_level, adjusted_extra


def _bounds(found: Sequence[MonteCarloP | None], bound: str) -> np.ndarray:
    return np.array([np.nan if f is None else getattr(f, bound) for f in found], dtype=float)


def adjusted_extra(
    claims: Sequence[Claim], found: Sequence[Judged], extra: Sequence[float], alpha: float
) -> np.ndarray:
    """The adjusted p-values of `extra` hypotheses in the family of `judge_family`'s result `found`."""
    tested = np.array([j.tested for j in found], dtype=bool)
    effect = np.array([j.effect.p for j in found])
    equivalence = np.array([np.nan if j.equivalence is None else j.equivalence.p for j in found])
    return _adjusted(claims, tested, effect, equivalence, alpha, np.asarray(extra, dtype=float))[-1]


def judge_family(
    claims: Sequence[Claim], datas: Sequence[ClaimData], alpha: float, extra: Sequence[float] = ()
) -> list[Judged]:
    """Every claim judged by the rule, the p-values of each family's hypotheses (a mean claim's effect and
    equivalence tests, a spread claim's effect test) adjusted together; claims with fewer than MIN_SEEDS seeds are
    left out of their family (their verdict is the table's "untested").

    Drawn p-values are refined until no decision depends on their Monte-Carlo error (`monte_carlo`): the family is
    adjusted with every p at its interval's low end and at its high end, and the claims whose decisions differ are
    drawn again with GROWTH times the draws, up to MAX_DRAWS. Raises ValueError where one family's claims ask for
    different adjustments. extra: p-values of hypotheses judged elsewhere that join the first claim's family (their
    adjusted values: `adjusted_extra`)."""
    tested = np.array([len(data.side) >= MIN_SEEDS for data in datas])
    extra_p = np.asarray(extra, dtype=float)
    draws = [FIRST_BATCH] * len(claims)

    def tests_of(index: int) -> tuple[RivalTest, ...]:
        claim, data = claims[index], datas[index]
        return rival_tests(data, claim, _streams(claim, data.labels), draws[index], alpha=alpha)

    tests = [tests_of(index) for index in range(len(claims))]
    while True:
        effect = [effect_p(claim, found) for claim, found in zip(claims, tests, strict=True)]
        equivalence = [equivalence_p(claim, found) for claim, found in zip(claims, tests, strict=True)]
        decisions = []
        for bound in ("low", "high"):
            adjusted_effect, adjusted_equivalence, *_ = _adjusted(
                claims, tested, _bounds(effect, bound), _bounds(equivalence, bound), alpha, extra_p
            )
            decisions.append((adjusted_effect <= alpha, adjusted_equivalence <= alpha))
        unsettled_effect = decisions[0][0] != decisions[1][0]
        unsettled_equivalence = decisions[0][1] != decisions[1][1]
        open_claims = [i for i in np.flatnonzero(unsettled_effect | unsettled_equivalence) if draws[i] < MAX_DRAWS]
        if not open_claims:
            break
        for index in open_claims:
            draws[index] = min(MAX_DRAWS, draws[index] * GROWTH)
            tests[index] = tests_of(index)
    effect = [f.unsettled() if unsettled_effect[i] else f for i, f in enumerate(effect)]
    equivalence = [
        f.unsettled() if f is not None and unsettled_equivalence[i] else f for i, f in enumerate(equivalence)
    ]
    adjusted, adjusted_equivalence, level, equivalence_level, _ = _adjusted(
        claims, tested, _bounds(effect, "p"), _bounds(equivalence, "p"), alpha, extra_p
    )
    judged_claims = []
    for index, claim in enumerate(claims):
        found = equivalence[index]
        determined = (effect[index].determined, True if found is None else found.determined)
        effect_adjusted = adjusted[index] if tested[index] else effect[index].p
        equivalence_adjusted = adjusted_equivalence[index] if tested[index] else _bounds([found], "p")[0]
        wording = Wording.of(datas[index], claim.resolution)
        outcome = judge(claim, tests[index], effect_adjusted, equivalence_adjusted, alpha, determined, wording)
        judged_claims.append(
            Judged(
                outcome,
                effect[index],
                found,
                adjusted[index],
                adjusted_equivalence[index],
                level[index],
                equivalence_level[index],
                bool(tested[index]),
            )
        )
    return judged_claims


def verdict_table(
    metrics: pd.DataFrame,
    claims: Sequence[Claim],
    confidence: float = 0.95,
    estimate_seeds: bool = True,
    ranges: Mapping[str, tuple[float, float]] | None = None,
) -> pd.DataFrame:
    """The verdicts table: one row per claim, in the given order (columns VERDICT_COLUMNS).

    effect, ci_low, ci_high, ci_level, ci_method: for a mean claim the mean of the per-seed differences as measured
    (the mean itself, drifts included) and its betting confidence interval (`betting`: valid for any distribution
    within the metric's range; NaN without a range) at 1 − α/m for the m tested claims of its family (Bonferroni, so
    every mean reading of a family holds together); for a spread claim the difference of the resolved pairs' spreads
    and its BCa interval at the level of the hypothesis that decided it; against other_side (the rival that decided,
    or the weakest). mean_reading: what that interval says of the mean (`mean_reading`). jump_rule: "end mode"
    where a jump is a change of end mode, else "resolution". seeds_up / seeds_down: the seeds that jumped each way
    (spread: escapes from the dominant end mode), exact_test and exact_p the exact test on them. seeds_drift,
    drift_mean: seeds whose runs share their end mode yet differ by more than the resolution, and their mean
    difference (0 seeds where jumps are not end-mode changes). p_value: the effect test's p (test names it)
    with its Monte-Carlo error p_error; equivalence_p: the TOST's (mean claims); both adjusted within the family by
    `adjustment` (NaN where untested). p_improvement with p_improvement_low/high: P(better) and its 95% interval.
    seeds_needed: for undecided claims, the seeds that would decide them with chance 0.8 (inf: more than the
    ladder's top), NaN otherwise; chance_holds, chance_contradicted, chance_not_supported, chance_undecided: the
    share of each verdict among resampled datasets of that many seeds (which way it would be decided; NaN where
    seeds_needed is not a finite count).

    α = 1 − confidence is each family's error rate. estimate_seeds: give undecided claims a seeds_needed (the
    costly part); NaN otherwise. ranges: the metrics' (low, high) (`run_measures.metric_ranges` of the grid's world):
    without a metric's range no claim on it can be found "not supported" or "equal". Raises ValueError where one
    family's claims ask for different adjustments.
    """
    alpha = 1 - confidence
    prepared = [claim_data(metrics, claim, ranges) for claim in claims]
    found = judge_family(claims, [data for data, *_ in prepared], alpha)
    tested_in_family = pd.Series([_family(c) for c, j in zip(claims, found, strict=True) if j.tested]).value_counts()
    rows = []
    for claim, (data, side_label, _, _, excluded), judged_claim in zip(claims, prepared, found, strict=True):
        outcome = judged_claim.outcome
        equivalence = judged_claim.equivalence
        level = judged_claim.equivalence_level if outcome.deciding == "equivalence" else judged_claim.level
        mean_level = alpha / max(1, int(tested_in_family.get(_family(claim), 0)))
        rows.append(
            _row(claim, data, side_label, outcome, judged_claim.tested, alpha, (level, mean_level), excluded)
            | {
                "p_value": judged_claim.effect.p,
                "p_error": judged_claim.effect.error,
                "p_adjusted": judged_claim.adjusted,
                "equivalence_p": np.nan if equivalence is None else equivalence.p,
                "equivalence_p_adjusted": judged_claim.adjusted_equivalence,
            }
        )
        if rows[-1]["verdict"] == "undecided" and estimate_seeds:
            needed, shares = _seeds_needed(data, claim, judged_claim.factors(), level, alpha)
            rows[-1]["seeds_needed"] = needed
            rows[-1] |= {
                f"chance_{v.replace(' ', '_')}": shares.get(v, np.nan if not shares else 0.0) for v in DECISIONS
            }
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def judged(
    data: ClaimData,
    claim: Claim,
    factors: tuple[float, float],
    alpha: float,
    streams,  # noqa: ANN001
    draws: int = FIRST_BATCH,
) -> Outcome:
    """One claim judged on its own with its family's adjustment held fixed (factors: adjusted / raw p of its effect
    and equivalence hypotheses): what the seeds-needed estimate runs on resampled data. The TOST runs only where it
    can still change the verdict: for a metric with a known range, and for "above"/"below" only where the effect
    test leaves the claim open."""
    can_equal = claim.statistic == "mean" and equivalence_possible(data.bound, claim.jump_share)
    wording = Wording.of(data, claim.resolution)
    found = rival_tests(data, claim, streams, draws, can_equal and claim.direction == "equal", alpha)
    first = effect_p(claim, found)
    adjusted_effect = min(1.0, first.p * factors[0])
    second = equivalence_p(claim, found)
    if second is None and can_equal:
        outcome = judge(claim, found, adjusted_effect, np.nan, alpha, (first.determined, True), wording)
        if outcome.verdict != "undecided":
            return outcome
        found = rival_tests(data, claim, streams, draws, True, alpha)
        second = equivalence_p(claim, found)
    adjusted_equivalence = np.nan if second is None else min(1.0, second.p * factors[1])
    determined = (first.determined, True if second is None else second.determined)
    return judge(claim, found, adjusted_effect, adjusted_equivalence, alpha, determined, wording)


def _seeds_needed(
    data: ClaimData, claim: Claim, factors: tuple[float, float], level: float, alpha: float
) -> tuple[float, dict[str, float]]:
    """(seeds_needed, the share of each verdict there) through the rule at the claim's current adjustment, with a
    fixed number of resamples; no shares where the count is beyond the ladder (inf)."""
    draws = simulation_resamples(level)

    def verdict_of(rows: np.ndarray, rng: np.random.Generator) -> str:
        return judged(data.take(rows), claim, factors, alpha, lambda *_: rng, draws).verdict

    needed = seeds_needed(
        lambda rows, rng: verdict_of(rows, rng) != "undecided", len(data.side), single_test=len(data.others) == 1
    )
    if not np.isfinite(needed):
        return needed, {}
    return needed, verdict_shares(verdict_of, len(data.side), int(needed))


def mean_reading(claim: Claim, low: float, high: float) -> str:
    """What a mean's interval says of a claim about the mean, by the resolution r: "holds" where it lies beyond r on
    the claimed side ("equal": within ±r), "contradicted" beyond r on the other side ("equal": beyond ±r either
    way), "within ±r" where it lies inside ±r (an "above"/"below" claim's no difference), else "undecided"; "no
    interval" without one (a metric without a known range), "empty interval" where every mean was rejected (the
    data unlikely under i.i.d. seeds within the range: a chance below the interval's level)."""
    r = claim.resolution
    if np.isnan(low) or np.isnan(high):
        return "no interval"
    if low > high:
        return "empty interval"
    within = -r <= low and high <= r
    if claim.direction == "equal":
        return "holds" if within else "contradicted" if low > r or high < -r else "undecided"
    above, below = low > r, high < -r
    if above or below:
        return "holds" if above == (claim.direction == "above") else "contradicted"
    return f"within ±{r:g}" if within else "undecided"


def _joint_reading(claim: Claim, bounds: Sequence[tuple[float, float]]) -> str:
    """The mean reading of a claim against several rivals, each rival's interval read by `mean_reading`: "holds"
    (and "within ±r") only where it holds against every rival, "contradicted" where it does against any."""
    readings = [mean_reading(claim, low, high) for low, high in bounds]
    if not readings:
        return "no interval"
    if "contradicted" in readings:
        return "contradicted"
    return readings[0] if len(set(readings)) == 1 else "undecided"


def _row(claim, data, side_label, outcome, tested, alpha, levels, excluded) -> dict[str, object]:  # noqa: ANN001
    """A claim's row; levels: (the level of the hypothesis that decided it, the level of its mean's interval)."""
    level, mean_level = levels
    rival = outcome.rival
    other = data.others[rival]
    side_values = data.side + (claim.than_value or 0.0) if other is None else data.side
    other_values = np.full(len(data.side), claim.than_value) if other is None else other
    differences = side_values - other_values
    jumps = data.differences(rival, claim.resolution)
    drifts = data.drifts(rival, claim.resolution)
    if claim.statistic == "std":
        up, down, exact, exact_p = mode_counts(data.side, other, claim.statistic, claim.resolution)
    else:
        shift = shift_test(jumps)
        up, down, exact, exact_p = shift.up, shift.down, "sign test", shift.p
    share = share_interval(_improvement_scores(claim, jumps), 1 - alpha) if claim.statistic == "mean" else (np.nan,) * 3
    if claim.statistic == "std":
        rng = claim_generator(claim.name, data.labels[rival], "interval")
        interval = paired_bootstrap_ci(*resolved_pairs(data.side, other, claim.resolution), "std", 1 - level, rng=rng)
        if not tested:  # below MIN_SEEDS no interval is shown, as no verdict is
            interval = (interval[0], np.nan, np.nan)
        method, interval_level, reading = "BCa bootstrap", 1 - level if tested else np.nan, "—"
    else:
        # The interval only where the claim is tested (below MIN_SEEDS none is shown, as no verdict is), against
        # every rival at α / (m R): the reported rival is chosen from the data, and the reading speaks of them all.
        rivals_level = mean_level / len(data.others)
        bounds = [
            betting_interval(data.raw_differences(i), -data.bound, data.bound, 1 - rivals_level) if tested else None
            for i in range(len(data.others))
        ]
        mean = float(np.mean(differences)) if len(differences) else np.nan
        interval = (mean, *(bounds[rival] or (np.nan, np.nan)))
        method, interval_level = "betting confidence sequence", 1 - rivals_level if tested else np.nan
        reading = _joint_reading(claim, [b for b in bounds if b is not None]) if tested else "—"
    rivals = len(data.others)
    other_label = data.labels[rival] + (f" (worst of {rivals} distinct rivals)" if rivals > 1 else "")
    verdict, why = outcome.verdict, outcome.why
    if not tested:
        verdict, why = "untested", f"too few seeds ({len(data.side)} < {MIN_SEEDS}) for a verdict"
    if excluded:
        why += f"; {excluded} run{'s' if excluded > 1 else ''} with a non-finite value left out"
    return {
        "claim": claim.name,
        "statement": claim.statement,
        "metric": claim.metric,
        "side": side_label,
        "other_side": other_label,
        "statistic": claim.statistic,
        "seeds": len(data.side),
        "seeds_excluded": excluded,
        "side_mean": float(np.mean(side_values)) if len(side_values) else np.nan,
        "other_mean": float(np.mean(other_values)) if len(other_values) else np.nan,
        "side_iqm": _interquartile_mean(side_values),
        "other_iqm": _interquartile_mean(other_values),
        "effect": interval[0],
        "ci_low": interval[1],
        "ci_high": interval[2],
        "ci_level": interval_level,
        "ci_method": method,
        "mean_reading": reading,
        "jump_rule": "end mode" if data.by_end_mode else "resolution",
        "seeds_up": up,
        "seeds_down": down,
        "exact_test": exact,
        "exact_p": exact_p,
        "seeds_drift": len(drifts),
        "drift_mean": float(np.mean(drifts)) if len(drifts) else np.nan,
        "test": outcome.test + (f", intersection–union over {rivals} rivals" if rivals > 1 else ""),
        "family": _family(claim),
        "adjustment": ADJUSTMENT_NAMES[claim.adjustment] if tested else "none (untested)",
        "p_improvement": share[0],
        "p_improvement_low": share[1],
        "p_improvement_high": share[2],
        "resolution": claim.resolution,
        "verdict": verdict,
        "why": why,
        "seeds_needed": np.nan,
        **{f"chance_{v.replace(' ', '_')}": np.nan for v in DECISIONS},
    }


def claim_verdict(
    metrics: pd.DataFrame,
    claim: Claim,
    confidence: float = 0.95,
    ranges: Mapping[str, tuple[float, float]] | None = None,
) -> dict[str, object]:
    """One claim's row of the verdicts table, as a family of one (see VERDICT_COLUMNS)."""
    return verdict_table(metrics, [claim], confidence, ranges=ranges).iloc[0].to_dict()
