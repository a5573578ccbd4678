"""Deciding claims as seeds are added: planned looks and the error level each look may spend.

A grid grown until its claims are decided (`harness.experiment.until_decided`) looks at its claims more than once.
Testing every look at α would let chance decide a claim at one look or another far more often than α (the simulation
in tests/test_sequential.py measures it). So the looks are planned before the first of them: seed counts n_1 < … <
n_K, doubling from the grid's seeds up to the budget (`planned_looks`), and α is spent over them by a Lan–DeMets
spending function f of the information fraction t = n_k / n_K (`spending_function`): look k tests every claim by the
unchanged rule (`harness.inference.verdicts.verdict_table`, Holm or Benjamini–Hochberg within a family) at level
α_k = f(t_k) − f(t_{k−1}), and Σ α_k = f(1) = α. A claim decided at a look keeps that verdict.

Why this bound holds for this rule: a wrong verdict at some look is a wrong verdict at look k for some k, so its
chance is at most Σ_k P(wrong at look k) ≤ Σ_k α_k = α (Bonferroni over the looks). That needs nothing of the
looks' joint distribution, which matters here: the rule pairs a permutation test with a BCa interval on per-seed
differences that are mostly ties and a few jumps between end modes, not the normal z-statistics whose Brownian
joint law the sharper group-sequential boundaries (the ones that spend the same α with larger α_k) are computed
from. The price is conservatism: the looks' overlap in seeds is not used. The "anytime" option judges after every
block instead (`harness.inference.anytime`): each above/below claim's sign test becomes an e-value, valid at any
look, at the cost of leaving spread claims, equal claims and equivalence to planned looks; the spending functions keep
every verdict the rule a fixed-seed grid gets, at a smaller level.

Spending functions (Lan & DeMets 1983; two-sided α):
- "pocock" (Pocock-type): f(t) = α ln(1 + (e − 1) t). It spends about evenly in t, so a claim that is clear at the
  first look is decided there and its conditions stop growing; the default.
- "obrien-fleming" (O'Brien–Fleming-type): f(t) = 2 − 2Φ(z_{1−α/2} / √t). It keeps nearly all of α for the last
  look: little is decided early, but the last look tests almost at α.
- "anytime": no spending; looks after every block of the first look's seeds (`anytime_looks`), each at α, judged by
  e-values (`harness.inference.anytime`).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import scipy.stats

Spending = Literal["pocock", "obrien-fleming", "anytime"]
SPENDING_FUNCTIONS: tuple[Spending, ...] = ("pocock", "obrien-fleming", "anytime")
SPENDING_NAMES = {"pocock": "Pocock-type", "obrien-fleming": "O'Brien–Fleming-type", "anytime": "anytime-valid"}
ANYTIME: Spending = "anytime"  # no spending: e-values judged after every block (`harness.inference.anytime`)
GROWTH = 2  # each planned look has (up to) twice the seeds of the one before


def spending_function(t: np.ndarray | float, alpha: float, spending: Spending) -> np.ndarray:
    """The α spent by information fraction t (0 ≤ t ≤ 1; f(0) = 0, f(1) = α), Lan–DeMets.

    Raises:
        ValueError: an unknown spending function, or t outside [0, 1].
    """
    t = np.asarray(t, dtype=float)
    if np.any((t < 0) | (t > 1)):
        raise ValueError(f"information fractions lie in [0, 1], got {t}")
    if spending == "pocock":
        return alpha * np.log1p((math.e - 1) * t)
    if spending == "obrien-fleming":
        with np.errstate(divide="ignore"):
            z = scipy.stats.norm.isf(alpha / 2) / np.sqrt(t)
        return 2 * scipy.stats.norm.sf(z)
    raise ValueError(f"spending must be one of {', '.join(SPENDING_FUNCTIONS)}, got {spending!r}")


def anytime_looks(start: int, max_seeds: int) -> tuple[int, ...]:
    """Seed counts of the looks of an anytime-valid run: start, then one block of `start` seeds more each time, the
    last capped at max_seeds (a look after every block; the e-values need no plan, but the blocks are fixed so a
    resume finds the same stages)."""
    if start < 1 or max_seeds < start:
        raise ValueError(f"the looks need 1 ≤ start ≤ max seeds, got start {start} and max seeds {max_seeds}")
    return tuple(min(n, max_seeds) for n in range(start, max_seeds + start, start))


def planned_looks(start: int, max_seeds: int, growth: int = GROWTH) -> tuple[int, ...]:
    """Seed counts of the looks: start, then `growth` times the last, the last capped at max_seeds.

    Doubling keeps the number of looks, and with it the α each must give up, logarithmic in the budget, while the
    seeds added at a look (as many as the grid already has) can change a claim's verdict.

    Raises:
        ValueError: start < 1, max_seeds < start, or growth < 2.
    """
    if start < 1 or max_seeds < start:
        raise ValueError(f"the looks need 1 ≤ start ≤ max seeds, got start {start} and max seeds {max_seeds}")
    if growth < 2:
        raise ValueError(f"each look must add seeds (growth ≥ 2), got {growth}")
    looks = [start]
    while looks[-1] < max_seeds:
        looks.append(min(looks[-1] * growth, max_seeds))
    return tuple(looks)


def look_levels(looks: tuple[int, ...], alpha: float, spending: Spending) -> np.ndarray:
    """α_k = f(n_k / n_K) − f(n_{k−1} / n_K) for each planned look (n_0 = 0): they sum to α. Anytime-valid looks
    spend nothing: each is judged at α itself (e-values), recorded as α."""
    if spending == ANYTIME:
        return np.full(len(looks), alpha)
    fractions = np.asarray(looks, dtype=float) / looks[-1]
    spent = spending_function(fractions, alpha, spending)
    return np.diff(spent, prepend=0.0)


def method_text(looks: tuple[int, ...], levels: np.ndarray, alpha: float, spending: Spending) -> str:
    """One paragraph for a report: the planned looks, the spending function and why the error stays at α."""
    if spending == ANYTIME:
        return (
            f"Seeds were added in blocks of {looks[0]} until every claim was decided or the budget of {looks[-1]} "
            f"seeds was spent, the claims judged after every block ({len(looks)} looks at most) by e-values that stay "
            f"valid at any look (α = {alpha:g}; harness.inference.anytime): each above or below claim's jumps "
            "against as many up as down, a Beta(½, ½) mixture whose chance of ever passing 1/α' is at most α' "
            "(Ville's inequality), Bonferroni over the family's such claims. A claim keeps the verdict of the first "
            "look that decides it; conditions that appear only in decided claims stop growing. Spread claims, equal "
            'claims and "not supported" are not judged this way and stay open.'
        )
    schedule = ", ".join(f"{n} seeds at {level:.3g}" for n, level in zip(looks, levels, strict=True))
    return (
        f"Seeds were added until every claim was decided or the budget of {looks[-1]} seeds was spent, looking at the "
        f"claims at {len(looks)} looks planned before the first ({schedule}: α = {alpha:g} spent by a "
        f"{SPENDING_NAMES[spending]} Lan–DeMets spending function of the share of the budget). Each look tests every "
        "claim by the rule below at its spent level (the family's adjustment within it) and a claim keeps the "
        "verdict of the first look that decides it; conditions that appear only in decided claims stop growing. The "
        "chance of any wrong verdict is at most the sum of the levels, α, whatever the looks' dependence "
        "(Bonferroni over the looks): conservative, but valid for permutation tests and bootstrap intervals, where "
        "boundaries computed for normal statistics are not."
    )
