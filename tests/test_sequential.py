"""Deciding claims as seeds are added (harness.inference.sequential): the spending functions against hand-computed
values, and the rule under repeated looks on simulated experiments with known truth.

The experiments are shaped like the real per-seed differences (tests/test_verdict_simulations.py): mostly exact
ties and a few jumps of ±0.25 / ±0.5 between end modes. Each goes through the real rule (`verdicts.judged`: the
exact sign test, the TOST drawn 999 times instead of refined, to keep the suite fast) and the BCa interval at the
looks a 100-seed first look plans: 100 seeds, 200, 400. An experiment stops
at its first decided look. Wrong verdicts must stay at the nominal 5% plus Monte-Carlo error (3 sd of a binomial
share over the experiments); looking at every look at 5% (no spending) must exceed that same bound, so the test can
fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from harness.inference.claims import Claim
from harness.inference.intervals import paired_bootstrap_ci
from harness.inference.paired_tests import resolved
from harness.inference.rule import ClaimData
from harness.inference.sequential import look_levels, planned_looks, spending_function
from harness.inference.verdicts import judged

RESAMPLES = 999
ALPHA = 0.05
LOOKS = planned_looks(100, 400)  # the reference run's: the committed 100 seeds, grown to at most 400
EXPERIMENTS = 400
CLAIM = Claim(
    name="c", statement="s", metric="policy_quality", condition="a", direction="above", than_value=0.0, resolution=0.01
)


def _differences(rng: np.random.Generator, n: int, up: float, down: float) -> np.ndarray:
    """n seed-paired differences: a jump up (+0.25 or +0.5) with chance `up`, down with chance `down`, else a tie
    up to float noise."""
    jump = rng.choice([0.25, 0.5], size=n)
    draw = rng.random(n)
    return np.where(draw < up, jump, np.where(draw < up + down, -jump, 0.0)) + rng.normal(0, 1e-6, size=n)


def _sequential(
    levels: dict[str, np.ndarray], experiments: int, up: float, down: float, seed: int
) -> dict[str, list[tuple[str, bool, int]]]:
    """Per procedure (a level per look), per experiment: (verdict, its interval covers the true mean, look index)
    at the first look that decides, else at the last. Every procedure sees the same experiments."""
    rng = np.random.default_rng(seed)
    truth = 0.375 * (up - down)
    out: dict[str, list[tuple[str, bool, int]]] = {name: [] for name in levels}
    for _ in range(experiments):
        differences = _differences(rng, LOOKS[-1], up, down)
        for name, per_look in levels.items():
            for look, (n, level) in enumerate(zip(LOOKS, per_look, strict=True)):
                data = ClaimData(differences[:n], (None,), ("0",))
                outcome = judged(data, CLAIM, (1.0, 1.0), level, lambda *_: rng, RESAMPLES)
                if outcome.verdict != "undecided" or look == len(LOOKS) - 1:
                    _, low, high = paired_bootstrap_ci(
                        resolved(differences[:n], CLAIM.resolution), None, "mean", 1 - level, RESAMPLES, rng
                    )
                    out[name].append((outcome.verdict, low <= truth <= high, look))
                    break
    return out


def _sd(share: float, experiments: int) -> float:
    return math.sqrt(share * (1 - share) / experiments)


def test_the_spending_functions_match_hand_computed_values() -> None:
    # Pocock-type at t = 1/2: 0.05 ln(1 + (e − 1)/2) = 0.05 ln(1.8591409) = 0.0310057.
    assert spending_function(0.5, ALPHA, "pocock") == pytest.approx(0.0310057, abs=1e-7)
    # O'Brien–Fleming-type at t = 1/4: 2 − 2Φ(1.959964 / 0.5) = 2 − 2Φ(3.919928) = 8.8574e-5.
    assert spending_function(0.25, ALPHA, "obrien-fleming") == pytest.approx(8.8574e-5, rel=1e-4)
    for spending in ("pocock", "obrien-fleming"):
        assert spending_function(0.0, ALPHA, spending) == 0.0
        assert spending_function(1.0, ALPHA, spending) == pytest.approx(ALPHA)
        levels = look_levels(LOOKS, ALPHA, spending)
        assert levels.sum() == pytest.approx(ALPHA) and np.all(levels > 0)
    # Looks 100, 200, 400: t = 1/4, 1/2, 1; Pocock-type levels 0.05 ln(1 + (e − 1) t) differenced.
    expected = np.diff([0.0, *(ALPHA * np.log(1 + (math.e - 1) * np.array([0.25, 0.5, 1.0])))])
    np.testing.assert_allclose(look_levels(LOOKS, ALPHA, "pocock"), expected)
    assert scipy.stats.norm.isf(ALPHA / 2) == pytest.approx(1.959964, abs=1e-6)


def test_looks_double_up_to_the_budget() -> None:
    assert planned_looks(100, 400) == (100, 200, 400)
    assert planned_looks(20, 100) == (20, 40, 80, 100)
    assert planned_looks(20, 20) == (20,)
    with pytest.raises(ValueError, match="start"):
        planned_looks(40, 20)


def test_repeated_looks_keep_wrong_verdicts_at_the_nominal_level() -> None:
    """No true effect, 12% of seeds jumping either way. With α spent over the looks (Pocock-type), "holds" or
    "contradicted" at most 5% + 3 sd, and the interval at the deciding look covers the truth at least 95% − 3 sd;
    every look at 5% (no spending) errs more than 5% and more than the spent procedure by over 3 sd. Measured with
    these seeds: spent 2.25%; naive 7.25% (the exact sign test is discrete, hence below 5% when spent)."""
    procedures = {"spent": look_levels(LOOKS, ALPHA, "pocock"), "naive": np.full(len(LOOKS), ALPHA)}
    found = _sequential(procedures, EXPERIMENTS, up=0.06, down=0.06, seed=7)
    bound = ALPHA + 3 * _sd(ALPHA, EXPERIMENTS)
    wrong = {name: np.mean([v in ("holds", "contradicted") for v, _, _ in rows]) for name, rows in found.items()}
    covered = np.mean([covers for _, covers, _ in found["spent"]])
    assert wrong["spent"] <= bound, wrong
    assert covered >= 1 - ALPHA - 3 * _sd(ALPHA, EXPERIMENTS), covered
    # looking again and again without spending is caught: above α, and above the spent procedure by 3 sd
    assert wrong["naive"] > ALPHA and wrong["naive"] - wrong["spent"] > 3 * _sd(ALPHA, EXPERIMENTS), wrong


def test_a_clear_effect_is_decided_at_the_first_look() -> None:
    """A third of the seeds jump up, 3% down: "holds" at the first look (100 seeds, level 0.018) nearly always."""
    found = _sequential({"spent": look_levels(LOOKS, ALPHA, "pocock")}, 30, up=0.35, down=0.03, seed=1)["spent"]
    assert np.mean([verdict == "holds" and look == 0 for verdict, _, look in found]) >= 0.9
