"""The enumerable world: output enumeration order, its inverse and the ground-truth quality q*."""

from __future__ import annotations

import itertools

import chex
import jax
import numpy as np
import pydantic
import pytest

from harness.engine.world import MAX_OUTPUTS, World, WorldConfig, enumerate_outputs, output_index, output_tokens


@pytest.fixture(scope="module")
def world() -> World:
    return World()


def test_enumeration_order(world: World) -> None:
    outputs = np.asarray(world.outputs)
    assert outputs.dtype == np.int32
    assert outputs.shape == (4096, 4)
    np.testing.assert_array_equal(outputs[0], [0, 0, 0, 0])
    np.testing.assert_array_equal(outputs[1], [0, 0, 0, 1])
    np.testing.assert_array_equal(outputs[7], [0, 0, 0, 7])
    np.testing.assert_array_equal(outputs[8], [0, 0, 1, 0])
    np.testing.assert_array_equal(outputs[64], [0, 1, 0, 0])
    np.testing.assert_array_equal(outputs[512], [1, 0, 0, 0])
    np.testing.assert_array_equal(outputs[-1], [7, 7, 7, 7])
    reference = np.array(list(itertools.product(range(8), repeat=4)))
    np.testing.assert_array_equal(outputs, reference)


@pytest.mark.parametrize(("vocab_size", "seq_len"), [(8, 4), (3, 5), (2, 1), (5, 3)])
def test_enumerate_outputs_matches_itertools(vocab_size: int, seq_len: int) -> None:
    outputs = enumerate_outputs(vocab_size, seq_len)
    chex.assert_shape(outputs, (vocab_size**seq_len, seq_len))
    chex.assert_type(outputs, np.int32)
    reference = np.array(list(itertools.product(range(vocab_size), repeat=seq_len)))
    np.testing.assert_array_equal(np.asarray(outputs), reference)


@pytest.mark.parametrize(("vocab_size", "seq_len"), [(8, 4), (3, 5), (2, 1), (5, 3), (8, 6)])
def test_output_tokens_are_the_enumerations_rows(vocab_size: int, seq_len: int) -> None:
    """Any indices, repeated and in any order, against numpy's mixed-radix unravel."""
    ids = np.random.default_rng(1).integers(0, vocab_size**seq_len, size=257)
    tokens = output_tokens(jax.numpy.asarray(ids, np.int32), vocab_size, seq_len)
    chex.assert_shape(tokens, (ids.size, seq_len))
    chex.assert_type(tokens, np.int32)
    expected = np.stack(np.unravel_index(ids, (vocab_size,) * seq_len), axis=1)
    np.testing.assert_array_equal(np.asarray(tokens), expected)


@pytest.mark.parametrize(("vocab_size", "seq_len"), [(8, 4), (3, 5), (2, 1), (5, 3)])
def test_output_index_inverts_enumeration(vocab_size: int, seq_len: int) -> None:
    outputs = enumerate_outputs(vocab_size, seq_len)
    index = np.asarray(output_index(outputs, vocab_size))
    assert index.dtype == np.int32
    np.testing.assert_array_equal(index, np.arange(vocab_size**seq_len))
    # Arbitrary batches with extra leading axes, against numpy's mixed-radix ravel.
    tokens = np.random.default_rng(0).integers(0, vocab_size, size=(3, 7, seq_len))
    expected = np.ravel_multi_index(tuple(np.moveaxis(tokens, -1, 0)), (vocab_size,) * seq_len)
    np.testing.assert_array_equal(np.asarray(output_index(jax.numpy.asarray(tokens), vocab_size)), expected)


def test_q_star_default_statistics(world: World) -> None:
    q = np.asarray(world.q_star)
    assert q.dtype == np.float32
    assert q.shape == (4096,)
    assert np.all(np.isfinite(q))
    assert q.max() == pytest.approx(3.2656, abs=1e-4)
    np.testing.assert_array_equal(np.asarray(world.outputs)[np.argmax(q)], [1, 4, 0, 1])
    assert world.render(int(np.argmax(q))) == "↗ ↓ ↑ ↗"
    assert q.min() == pytest.approx(-4.2157, abs=1e-4)
    assert q.mean() == pytest.approx(-0.7235, abs=1e-4)
    assert len(np.unique(q)) == 4096


def test_q_star_of_a_two_by_two_world_by_hand() -> None:
    # q*(x) = w_position[0]·w_token[x_0] + w_position[1]·w_token[x_1] + w_pair[0, x_0] + w_pair[1, x_1], written out
    # for each of the four outputs of K = 2 tokens × L = 2 positions, from the recipe's standard normal draws.
    config = WorldConfig(vocab_size=2, seq_len=2, pair_scale=0.5, q_star_seed=3)
    k_position, k_token, k_pair = jax.random.split(jax.random.PRNGKey(3), 3)
    p0, p1 = (float(w) for w in jax.random.normal(k_position, (2,)))
    t0, t1 = (float(w) for w in jax.random.normal(k_token, (2,)))
    (a00, a01), (a10, a11) = (0.5 * np.asarray(jax.random.normal(k_pair, (2, 2)), np.float64)).tolist()
    by_hand = {
        (0, 0): p0 * t0 + p1 * t0 + a00 + a10,
        (0, 1): p0 * t0 + p1 * t1 + a00 + a11,
        (1, 0): p0 * t1 + p1 * t0 + a01 + a10,
        (1, 1): p0 * t1 + p1 * t1 + a01 + a11,
    }
    world = World(config)
    assert [tuple(x) for x in np.asarray(world.outputs).tolist()] == list(by_hand)
    np.testing.assert_allclose(np.asarray(world.q_star), list(by_hand.values()), rtol=0, atol=1e-6)


WORLDS = pytest.mark.parametrize(
    "config",
    [WorldConfig(), WorldConfig(vocab_size=3, seq_len=5, pair_scale=1.5, q_star_seed=7), WorldConfig(pair_scale=0.0)],
    ids=["default", "k3-l5", "no-pair"],
)


@WORLDS
def test_q_star_adds_up_over_positions(config: WorldConfig) -> None:
    """q* is a sum of one term per (position, token): every output's value follows from the all-zeros output's and
    those of the K·L outputs that differ from it at one position. Any interaction between positions, or a term read
    at the wrong position, breaks the sum."""
    world = World(config)
    q, outputs = np.asarray(world.q_star, np.float64), np.asarray(world.outputs)
    K, L = config.vocab_size, config.seq_len
    # Output index of "token t at position i, zeros elsewhere": t · K^(L-1-i) (position 0 most significant).
    change = np.array([[q[t * K ** (L - 1 - i)] - q[0] for t in range(K)] for i in range(L)])
    rebuilt = q[0] + change[np.arange(L)[None, :], outputs].sum(axis=1)
    np.testing.assert_allclose(q, rebuilt, rtol=0, atol=2e-5)
    if config.pair_scale == 0.0:
        # Without the pair term each position's change is w_position[i] · (w_token[t] − w_token[0]): rank one.
        singular = np.linalg.svd(change, compute_uv=False)
        assert singular[1] < 1e-5 * singular[0]
    else:
        assert np.linalg.svd(change, compute_uv=False)[1] > 1e-2


@WORLDS
def test_q_star_is_linear_in_pair_scale_and_fixed_by_its_seed(config: WorldConfig) -> None:
    def q(**changes: float) -> np.ndarray:
        return np.asarray(World(config.model_copy(update=changes)).q_star, np.float64)

    # The same seed draws the same weights; pair_scale multiplies the pair term alone.
    without, unit = q(pair_scale=0.0), q(pair_scale=1.0)
    np.testing.assert_allclose(q(), without + config.pair_scale * (unit - without), rtol=0, atol=5e-5)
    np.testing.assert_array_equal(q(), q())
    assert not np.allclose(q(), q(q_star_seed=config.q_star_seed + 1))


def test_too_large_world_is_rejected() -> None:
    assert WorldConfig(vocab_size=32, seq_len=4).n_outputs == MAX_OUTPUTS  # exactly at the limit: allowed
    with pytest.raises(pydantic.ValidationError, match="outputs"):
        WorldConfig(vocab_size=64, seq_len=4)
    with pytest.raises(pydantic.ValidationError):
        WorldConfig(vocab_size=4, seq_len=11)
    with pytest.raises(ValueError):  # a ValidationError is a ValueError
        WorldConfig(vocab_size=33, seq_len=4)
