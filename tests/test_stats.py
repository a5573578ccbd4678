"""harness.engine.rank_stats rank statistics against scipy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from harness.engine import rank_stats

spearman = jax.jit(rank_stats.spearman)
average_ranks = jax.jit(rank_stats.average_ranks)


def _cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    cases = []
    for n in (5, 100, 4096):
        x = rng.normal(size=n)
        cases.append((f"continuous-{n}", x, 0.5 * x + rng.normal(size=n)))
    for n in (10, 1000):
        # Ties in one array: a handful of integer levels against continuous values.
        x = rng.integers(0, 4, size=n).astype(np.float64)
        cases.append((f"ties-x-{n}", x, x + rng.normal(size=n)))
        # Ties in both arrays.
        y = rng.integers(-2, 3, size=n).astype(np.float64)
        cases.append((f"ties-both-{n}", x, np.clip(x + y, 0, 5)))
    x = rng.normal(size=200)
    cases.append(("anti", x, -(x**3)))
    cases.append(("two-levels", np.repeat([0.0, 1.0], 50), np.tile([0.0, 1.0, 1.0, 2.0], 25)))
    return cases


CASES = _cases()


@pytest.mark.parametrize(("x", "y"), [(x, y) for _, x, y in CASES], ids=[name for name, _, _ in CASES])
def test_spearman_matches_scipy(x: np.ndarray, y: np.ndarray) -> None:
    expected = scipy.stats.spearmanr(x, y).statistic
    actual = float(spearman(jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)))
    assert actual == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("x", [x for _, x, _ in CASES] + [y for _, _, y in CASES])
def test_average_ranks_match_scipy(x: np.ndarray) -> None:
    ranks = np.asarray(average_ranks(jnp.asarray(x, jnp.float32)))
    np.testing.assert_allclose(ranks, scipy.stats.rankdata(x, method="average"), rtol=0, atol=1e-5)


def test_average_ranks_hand_computed() -> None:
    ranks = np.asarray(average_ranks(jnp.asarray([3.0, 1.0, 3.0, 2.0, 3.0, -1.0])))
    np.testing.assert_array_equal(ranks, [5.0, 2.0, 5.0, 3.0, 5.0, 1.0])


def test_spearman_perfect_and_constant() -> None:
    x = jnp.arange(10.0)
    assert float(spearman(x, x**3)) == pytest.approx(1.0, abs=1e-6)
    assert float(spearman(x, -x)) == pytest.approx(-1.0, abs=1e-6)
    assert np.isnan(float(spearman(x, jnp.ones(10))))
