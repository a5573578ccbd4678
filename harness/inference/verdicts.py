"""Test claims (`harness.inference.claims`) against a metrics table: effect, interval, tests, verdict.

Every claim compares a side with one or more others, paired by seed (`rule.judge` states the verdict rule). A
condition file's claims form one family by default (a claim may name its own `family`); within a family the
claims' p-values are adjusted (Holm by default, Benjamini–Hochberg as an option: `multiplicity`), and each claim's
interval is built at the level its adjusted test uses, so that interval and test agree as far as they can. With
fewer than MIN_SEEDS paired seeds a claim is "untested" (effect, interval and tests still shown from 2 seeds on).
An undecided claim gets an estimate of the seeds that would decide it (`seeds_needed`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import scipy.stats

from harness.inference.claims import Claim
from harness.inference.intervals import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, paired_bootstrap_ci, share_interval
from harness.inference.multiplicity import ADJUSTMENT_NAMES, adjust, levels
from harness.inference.paired_tests import PERMUTATIONS, mode_counts
from harness.inference.rule import MIN_SEEDS, VERDICTS, ClaimData, claim_p, decide, judge, rival_tests
from harness.inference.seeds_needed import seeds_needed, simulation_resamples

__all__ = ["BOOTSTRAP_RESAMPLES", "MIN_SEEDS", "VERDICTS", "claim_verdict", "decide", "paired_bootstrap_ci"]

DEFAULT_FAMILY = "condition file"

VERDICT_COLUMNS = [
    "claim",
    "statement",
    "metric",
    "side",
    "other_side",
    "statistic",
    "seeds",
    "side_mean",
    "other_mean",
    "side_iqm",
    "other_iqm",
    "effect",
    "ci_low",
    "ci_high",
    "ci_level",
    "seeds_up",
    "seeds_down",
    "exact_test",
    "exact_p",
    "test",
    "p_value",
    "family",
    "adjustment",
    "p_adjusted",
    "p_improvement",
    "p_improvement_low",
    "p_improvement_high",
    "resolution",
    "verdict",
    "why",
    "seeds_needed",
]


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


def claim_data(metrics: pd.DataFrame, claim: Claim) -> tuple[ClaimData, str, str, int]:
    """(data, side label, other label, iteration) of a claim: its sides over the seeds every side shares.

    Rivals (the conditions a pattern names) whose per-seed values are identical are one rival, labelled with all
    their names. A comparison with a fixed value has one other side, None, and the side's values minus the value.
    """
    last = int(metrics["iteration"].max())
    iteration = _resolve(claim.iteration, last)
    side = _values(metrics, claim.metric, claim.condition, iteration)
    side_label = f"{claim.condition} @ {iteration}"
    if claim.than_value is not None:
        data = ClaimData(side.to_numpy() - claim.than_value, (None,), (f"the value {claim.than_value:g}",))
        return data, side_label, f"the value {claim.than_value:g}", iteration
    other_iteration = _resolve(claim.than_iteration if claim.than_iteration is not None else iteration, last)
    names = claim.other_conditions(list(dict.fromkeys(metrics["condition"])))
    others = {name: _values(metrics, claim.metric, name, other_iteration) for name in names}
    seeds = side.index
    for values in others.values():
        seeds = seeds.intersection(values.index)  # paired: only seeds every side has
    groups: dict[bytes, tuple[np.ndarray, list[str]]] = {}
    for name, values in others.items():
        array = values[seeds].to_numpy()
        groups.setdefault(array.tobytes(), (array, []))[1].append(name)
    labels = tuple(
        f"{named[0]} @ {other_iteration}" + (f" (= {', '.join(named[1:])})" if len(named) > 1 else "")
        for _, named in groups.values()
    )
    data = ClaimData(side[seeds].to_numpy(), tuple(array for array, _ in groups.values()), labels)
    return data, side_label, labels[0], iteration


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


def verdict_table(
    metrics: pd.DataFrame, claims: Sequence[Claim], confidence: float = 0.95, estimate_seeds: bool = True
) -> pd.DataFrame:
    """The verdicts table: one row per claim, in the given order (columns VERDICT_COLUMNS).

    effect, ci_low, ci_high: Δ and its BCa interval at confidence ci_level (the claim's adjusted level), against
    other_side (the worst-case rival of a pattern). seeds_up / seeds_down: seeds whose Δ exceeds ± the resolution
    (spread: escapes from the dominant end mode), exact_test and exact_p the exact test on them. test: which
    permutation test gave p_value; p_adjusted: p_value adjusted within family by adjustment (NaN where untested).
    p_improvement with p_improvement_low/high: P(better) and its 95% interval. seeds_needed: for undecided
    claims, the seeds that would decide them with chance 0.8 (inf: more than the ladder's top), NaN otherwise.

    α = 1 − confidence is each family's error rate. estimate_seeds: give undecided claims a seeds_needed (the
    costly part); NaN otherwise. Raises ValueError where one family's claims ask for different adjustments.
    """
    alpha = 1 - confidence
    prepared = [claim_data(metrics, claim) for claim in claims]
    tests = [
        rival_tests(data, claim, PERMUTATIONS, np.random.default_rng(BOOTSTRAP_SEED))
        for claim, (data, *_) in zip(claims, prepared, strict=True)
    ]
    raw = np.array([claim_p(found) for found in tests])
    tested = np.array([len(data.side) >= MIN_SEEDS for data, *_ in prepared])
    adjusted, level = np.full(len(claims), np.nan), np.full(len(claims), alpha)
    for family in dict.fromkeys(_family(c) for c in claims):
        members = np.array([_family(c) == family for c in claims])
        methods = {c.adjustment for c, member in zip(claims, members, strict=True) if member}
        if len(methods) > 1:
            raise ValueError(f"claims of family {family!r} ask for different adjustments: {sorted(methods)}")
        method = methods.pop()
        p = np.where(tested[members], raw[members], np.nan)  # untested claims are left out of the family
        adjusted[members], level[members] = adjust(p, method), levels(p, method, alpha)
    rows = []
    for index, claim in enumerate(claims):
        data, side_label, _, _ = prepared[index]
        adjusted_p = adjusted[index] if tested[index] else raw[index]
        factor = adjusted_p / raw[index] if raw[index] > 0 else 1.0  # the adjustment, applied to every rival
        outcome = judge(data, claim, tests[index], factor, level[index], alpha, BOOTSTRAP_RESAMPLES)
        rows.append(
            _row(claim, data, side_label, outcome, raw[index], adjusted[index], level[index], tested[index], alpha)
        )
        if rows[-1]["verdict"] == "undecided" and estimate_seeds:
            rows[-1]["seeds_needed"] = _seeds_needed(data, claim, factor, level[index], alpha)
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def _seeds_needed(data: ClaimData, claim: Claim, factor: float, level: float, alpha: float) -> float:
    """seeds_needed through `judge` at the claim's current level and adjustment, with fewer resamples."""
    resamples = simulation_resamples(level)

    def decided(rows: np.ndarray, rng: np.random.Generator) -> bool:
        resampled = data.take(rows)
        found = rival_tests(resampled, claim, resamples, rng, fast=True)
        outcome = judge(resampled, claim, found, factor, level, alpha, resamples, rng)
        return outcome.verdict != "undecided"

    return seeds_needed(decided, len(data.side), single_test=len(data.others) == 1)


def _row(claim, data, side_label, outcome, raw_p, adjusted_p, level, tested, alpha) -> dict[str, object]:  # noqa: ANN001
    rival = outcome.rival
    other = data.others[rival]
    side_values = data.side + (claim.than_value or 0.0) if other is None else data.side
    other_values = np.full(len(data.side), claim.than_value) if other is None else other
    differences = side_values - other_values
    up, down, exact, exact_p = mode_counts(data.side, other, claim.statistic, claim.resolution)
    share = (
        share_interval(_improvement_scores(claim, differences), 1 - alpha)
        if claim.statistic == "mean"
        else (np.nan,) * 3
    )
    rivals = len(data.others)
    other_label = data.labels[rival] + (f" (worst of {rivals} distinct rivals)" if rivals > 1 else "")
    verdict, why = outcome.verdict, outcome.why
    if not tested:
        verdict, why = "untested", f"too few seeds ({len(data.side)} < {MIN_SEEDS}) for a verdict"
    return {
        "claim": claim.name,
        "statement": claim.statement,
        "metric": claim.metric,
        "side": side_label,
        "other_side": other_label,
        "statistic": claim.statistic,
        "seeds": len(data.side),
        "side_mean": float(np.mean(side_values)) if len(side_values) else np.nan,
        "other_mean": float(np.mean(other_values)) if len(other_values) else np.nan,
        "side_iqm": _interquartile_mean(side_values),
        "other_iqm": _interquartile_mean(other_values),
        "effect": outcome.effect,
        "ci_low": outcome.low,
        "ci_high": outcome.high,
        "ci_level": outcome.confidence,
        "seeds_up": up,
        "seeds_down": down,
        "exact_test": exact,
        "exact_p": exact_p,
        "test": outcome.test + (f", intersection–union over {rivals} rivals" if rivals > 1 else ""),
        "p_value": raw_p,
        "family": _family(claim),
        "adjustment": ADJUSTMENT_NAMES[claim.adjustment] if tested else "none (untested)",
        "p_adjusted": adjusted_p if tested else np.nan,
        "p_improvement": share[0],
        "p_improvement_low": share[1],
        "p_improvement_high": share[2],
        "resolution": claim.resolution,
        "verdict": verdict,
        "why": why,
        "seeds_needed": np.nan,
    }


def claim_verdict(metrics: pd.DataFrame, claim: Claim, confidence: float = 0.95) -> dict[str, object]:
    """One claim's row of the verdicts table, as a family of one (see VERDICT_COLUMNS)."""
    return verdict_table(metrics, [claim], confidence).iloc[0].to_dict()
