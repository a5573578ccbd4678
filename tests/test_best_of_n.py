"""harness.engine.best_of_n against exact enumeration of every draw, brute-force sampling, a float64 reference at
large N and n, and the properties the module docstring derives (n = 1, Gao's bound, ties, monotone proxy)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.engine.best_of_n import best_of_n, kl_bound, log_n_grid

run = jax.jit(best_of_n)
# One best-of-n per one-hot gold vector: E_{π_n}[1{x}] = π_n(x) for every output x.
per_one_hot = jax.jit(jax.vmap(best_of_n, in_axes=(None, None, 0, None)))


def probabilities(log_probs: np.ndarray, scores: np.ndarray, n: float) -> np.ndarray:
    """π_n per output from the module itself: E_{π_n}[one-hot of x] for every x (vmapped over the one-hots)."""
    one_hots = jnp.eye(len(scores), dtype=jnp.float32)
    result = per_one_hot(
        jnp.asarray(log_probs), jnp.asarray(scores, jnp.float32), one_hots, jnp.array([n], jnp.float32)
    )
    return np.asarray(result.gold[:, 0])


def enumerated(pi: np.ndarray, scores: np.ndarray, n: int) -> np.ndarray:
    """π_n by enumerating all N^n draws: keep the highest-scored draw, each tied draw equally likely (float64)."""
    out = np.zeros(len(pi))
    for draw in itertools.product(range(len(pi)), repeat=n):
        chance = np.prod(pi[list(draw)])
        drawn = scores[list(draw)]
        tied = np.flatnonzero(drawn == drawn.max())
        for k in tied:
            out[draw[k]] += chance / len(tied)
    return out


def reference(pi: np.ndarray, scores: np.ndarray, gold: np.ndarray, ns: np.ndarray) -> np.ndarray:
    """(gold, proxy, KL) per n, directly in float64: block masses, F_hi^n − F_lo^n, no logarithmic care."""
    levels, block = np.unique(scores, return_inverse=True)
    mass = np.bincount(block, pi, len(levels))
    f_hi = np.cumsum(mass)
    f_lo = f_hi - mass
    block_gold = np.bincount(block, pi * gold, len(levels)) / np.where(mass > 0, mass, 1.0)
    rows = []
    for n in ns:
        mass_n = f_hi**n - f_lo**n
        with np.errstate(divide="ignore", invalid="ignore"):
            kl = np.sum(np.where(mass_n > 0, mass_n * np.log(mass_n / mass), 0.0))
        rows.append((mass_n @ block_gold, mass_n @ levels, kl))
    return np.array(rows)


# Tiny worlds: ties (several outputs per score), an output π never draws (also at the top score), one output only.
TINY = {
    "distinct": (np.array([0.1, 0.2, 0.3, 0.25, 0.15]), np.array([0.5, -1.0, 2.0, 0.0, 1.0])),
    "ties": (np.array([0.3, 0.05, 0.2, 0.15, 0.1, 0.2]), np.array([1.0, 1.0, 0.0, 2.0, 2.0, 0.0])),
    "all-tied": (np.array([0.5, 0.3, 0.2]), np.array([3.0, 3.0, 3.0])),
    "never-drawn": (np.array([0.4, 0.0, 0.35, 0.25, 0.0]), np.array([1.0, 5.0, 1.0, 0.0, -1.0])),
    "one-output": (np.array([1.0]), np.array([0.0])),
}


@pytest.mark.parametrize("world", TINY.values(), ids=TINY.keys())
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_matches_exact_enumeration(world: tuple[np.ndarray, np.ndarray], n: int) -> None:
    pi, scores = world
    gold = np.linspace(-1.0, 2.0, len(pi)) ** 2
    expected = enumerated(pi, scores, n)
    with np.errstate(divide="ignore"):
        log_pi = np.log(pi).astype(np.float32)
    np.testing.assert_allclose(probabilities(log_pi, scores, n), expected, atol=1e-6)
    result = run(jnp.asarray(log_pi), jnp.asarray(scores), jnp.asarray(gold), jnp.array([n]))
    drawn = pi > 0
    kl = np.sum(expected[drawn] * np.log(np.where(expected[drawn] > 0, expected[drawn], 1.0) / pi[drawn]))
    np.testing.assert_allclose(
        [result.gold[0], result.proxy[0], result.kl[0]], [expected @ gold, expected @ scores, kl], atol=2e-6
    )


def _sampled_counts(pi: np.ndarray, scores: np.ndarray, n: int, draws: int, per_sample: bool) -> np.ndarray:
    """Counts of the kept output over `draws` best-of-n samples. per_sample: ties broken uniformly among the tied
    draws (the module's definition); otherwise uniformly among the distinct tied outputs drawn (a different rule)."""
    rng = np.random.default_rng(20240)
    samples = rng.choice(len(pi), size=(draws, n), p=pi)
    drawn = scores[samples]
    top = drawn == drawn.max(axis=1, keepdims=True)
    if per_sample:
        key = np.where(top, rng.random(samples.shape), -1.0)
    else:
        # One uniform key per distinct output in each row, so every tied output is equally likely however often drawn.
        per_output = rng.random((draws, len(pi)))
        key = np.where(top, np.take_along_axis(per_output, samples, axis=1), -1.0)
    kept = samples[np.arange(draws), key.argmax(axis=1)]
    return np.bincount(kept, minlength=len(pi))


def test_matches_brute_force_sampling_with_ties() -> None:
    """200,000 sampled best-of-5 draws against π_5 by a chi-square test (fixed seed; p-value far above the 1e-4
    threshold), and the same test rejects breaking ties among distinct outputs instead of among draws."""
    pi = np.array([0.3, 0.02, 0.18, 0.1, 0.25, 0.05, 0.1])
    scores = np.array([2.0, 2.0, 1.0, 0.0, 1.0, 3.0, 0.0])
    draws, n = 200_000, 5
    expected = probabilities(np.log(pi).astype(np.float32), scores, n).astype(np.float64)
    assert expected.sum() == pytest.approx(1.0, abs=1e-6)
    counts = _sampled_counts(pi, scores, n, draws, per_sample=True)
    assert scipy.stats.chisquare(counts, draws * expected / expected.sum()).pvalue > 1e-4
    other_rule = _sampled_counts(pi, scores, n, draws, per_sample=False)
    assert scipy.stats.chisquare(other_rule, draws * expected / expected.sum()).pvalue < 1e-12


def test_gold_and_proxy_match_sampled_means() -> None:
    """Sampled means of q* and J over 100,000 best-of-50 draws within 5 standard errors of the exact values."""
    rng = np.random.default_rng(7)
    size, n, draws = 300, 50, 100_000
    pi = rng.dirichlet(np.full(size, 0.5))
    scores = np.round(rng.normal(size=size), 1)  # about 50 levels: many ties
    gold = scores + rng.normal(size=size)
    samples = rng.choice(size, size=(draws, n), p=pi)
    drawn = scores[samples]
    key = np.where(drawn == drawn.max(axis=1, keepdims=True), rng.random(samples.shape), -1.0)
    kept = samples[np.arange(draws), key.argmax(axis=1)]
    result = run(jnp.asarray(np.log(pi), jnp.float32), jnp.asarray(scores), jnp.asarray(gold), jnp.array([n]))
    for exact, values in ((result.gold[0], gold[kept]), (result.proxy[0], scores[kept])):
        assert abs(float(exact) - values.mean()) < 5 * values.std() / np.sqrt(draws)


def test_n_one_is_the_base_distribution() -> None:
    rng = np.random.default_rng(1)
    log_pi = rng.normal(size=64) * 2.0
    scores = rng.integers(0, 8, size=64).astype(np.float32)
    gold = rng.normal(size=64)
    pi = np.exp(log_pi - np.logaddexp.reduce(log_pi))
    np.testing.assert_allclose(probabilities(log_pi.astype(np.float32), scores, 1), pi, rtol=2e-6, atol=1e-9)
    result = run(jnp.asarray(log_pi, jnp.float32), jnp.asarray(scores), jnp.asarray(gold), jnp.array([1.0]))
    np.testing.assert_allclose([result.gold[0], result.proxy[0]], [pi @ gold, pi @ scores], atol=2e-6)
    assert result.kl[0] == pytest.approx(0.0, abs=1e-6)
    assert result.kl_bound[0] == 0.0


@pytest.mark.parametrize(("size", "spread"), [(4096, 1.0), (65_536, 4.0), (65_536, 40.0)])
def test_large_worlds_and_n_match_a_float64_reference(size: int, spread: float) -> None:
    """float32 with logarithmic care against plain float64, n up to 10⁶ and π from flat to spanning e^±100."""
    rng = np.random.default_rng(size + int(spread))
    log_pi = (rng.normal(size=size) * spread).astype(np.float32)
    scores = np.round(rng.normal(size=size), 3).astype(np.float32)  # ties
    gold = (scores + rng.normal(size=size)).astype(np.float32)
    ns = np.concatenate([log_n_grid(), [10**5, 10**6]]).astype(np.float32)
    result = run(jnp.asarray(log_pi), jnp.asarray(scores), jnp.asarray(gold), jnp.asarray(ns))
    pi = np.exp(log_pi.astype(np.float64) - np.logaddexp.reduce(log_pi.astype(np.float64)))
    expected = reference(pi, scores.astype(np.float64), gold.astype(np.float64), ns.astype(np.float64))
    got = np.stack([result.gold, result.proxy, result.kl], axis=1)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_vmapped_over_runs_equals_one_run_at_a_time() -> None:
    rng = np.random.default_rng(3)
    log_pi, scores, gold = (jnp.asarray(rng.normal(size=(4, 50)), jnp.float32) for _ in range(3))
    ns = jnp.asarray(log_n_grid(6, 100))
    batched = jax.jit(jax.vmap(best_of_n, in_axes=(0, 0, 0, None)))(log_pi, scores, gold, ns)
    for k in range(4):
        one = run(log_pi[k], scores[k], gold[k], ns)
        for field in ("gold", "proxy", "kl"):
            np.testing.assert_allclose(getattr(batched, field)[k], getattr(one, field), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("n", [2, 10])
def test_kl_approaches_the_bound_as_atoms_vanish(n: int) -> None:
    """Uniform π over N distinct scores: bound − KL is positive and shrinks with N, as the float64 sum says."""
    gaps = []
    for size in (16, 64, 256):
        k = np.arange(1, size + 1)
        mass_n = (k / size) ** n - ((k - 1) / size) ** n
        expected_gap = np.log(n) - (n - 1) / n - np.sum(mass_n * np.log(mass_n * size))
        result = run(jnp.zeros(size), jnp.arange(size, dtype=jnp.float32), jnp.zeros(size), jnp.array([n]))
        gap = float(result.kl_bound[0] - result.kl[0])
        assert gap == pytest.approx(expected_gap, abs=1e-6)
        gaps.append(gap)
    assert gaps[0] > gaps[1] > gaps[2] > 0.0


def test_log_n_grid() -> None:
    grid = log_n_grid()
    assert grid.dtype == np.int32 and len(grid) == 20
    assert grid[0] == 1 and grid[-1] == 10_000 and np.all(np.diff(grid) > 0)
    np.testing.assert_allclose(np.diff(np.log(grid[5:])), np.log(10_000) / 19, rtol=0.1)
    np.testing.assert_allclose(kl_bound(jnp.asarray(grid)), np.log(grid) - (grid - 1) / grid, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="points >= 2"):
        log_n_grid(1)


SIZE = 12
N_GRID = jnp.asarray([1.0, 1.5, 2.0, 3.0, 7.0, 30.0, 300.0, 10_000.0])


@settings(max_examples=60, deadline=None)
@given(
    log_pi=st.lists(st.floats(-8.0, 8.0), min_size=SIZE, max_size=SIZE),
    levels=st.lists(st.integers(0, 4), min_size=SIZE, max_size=SIZE),
    gold=st.lists(st.floats(-3.0, 3.0), min_size=SIZE, max_size=SIZE),
)
def test_properties(log_pi: list[float], levels: list[int], gold: list[float]) -> None:
    """For random π and scores with ties, over real n from 1 to 10⁴: π_n sums to 1; 0 ≤ KL ≤ log n − (n−1)/n; the
    proxy never falls as n grows; breaking the ties (a finer partition) never lowers the KL (data processing)."""
    log_pi_array = jnp.asarray(log_pi, jnp.float32)
    scores = jnp.asarray(levels, jnp.float32)
    result = run(log_pi_array, scores, jnp.asarray(gold, jnp.float32), N_GRID)
    ones = run(log_pi_array, scores, jnp.ones(SIZE), N_GRID).gold
    np.testing.assert_allclose(ones, 1.0, atol=1e-5)
    kl = np.asarray(result.kl)
    assert np.all(kl >= 0.0)
    assert np.all(kl <= np.asarray(result.kl_bound) + 1e-5)
    assert np.all(np.diff(np.asarray(result.proxy)) >= -1e-5)
    untied = run(log_pi_array, scores + jnp.arange(SIZE) * 1e-3, jnp.zeros(SIZE), N_GRID)
    assert np.all(kl <= np.asarray(untied.kl) + 1e-5)
