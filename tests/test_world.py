"""The enumerable world: output enumeration order, its inverse and the ground-truth quality q*."""

from __future__ import annotations

import itertools

import chex
import jax
import numpy as np
import pydantic
import pytest

from harness.engine.world import MAX_OUTPUTS, World, WorldConfig, enumerate_outputs, output_index


@pytest.fixture(scope="module")
def world() -> World:
    return World()


def _numpy_q_star(config: WorldConfig) -> tuple[np.ndarray, np.ndarray]:
    """q* recomputed in float64 numpy from the same jax.random draws, over itertools' lexicographic product."""
    k_position, k_token, k_pair = jax.random.split(jax.random.PRNGKey(config.q_star_seed), 3)
    w_position = np.asarray(jax.random.normal(k_position, (config.seq_len,)), np.float64)
    w_token = np.asarray(jax.random.normal(k_token, (config.vocab_size,)), np.float64)
    w_pair = config.pair_scale * np.asarray(jax.random.normal(k_pair, (config.seq_len, config.vocab_size)), np.float64)
    outputs = np.array(list(itertools.product(range(config.vocab_size), repeat=config.seq_len)), dtype=np.int64)
    q = np.zeros(len(outputs))
    for i in range(config.seq_len):
        q += w_position[i] * w_token[outputs[:, i]] + w_pair[i, outputs[:, i]]
    return outputs, q


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


@pytest.mark.parametrize(
    "config",
    [WorldConfig(), WorldConfig(vocab_size=3, seq_len=5, pair_scale=1.5, q_star_seed=7), WorldConfig(pair_scale=0.0)],
    ids=["default", "k3-l5", "no-pair"],
)
def test_q_star_matches_numpy(config: WorldConfig) -> None:
    world = World(config)
    outputs, reference = _numpy_q_star(config)
    np.testing.assert_array_equal(np.asarray(world.outputs), outputs)
    np.testing.assert_allclose(np.asarray(world.q_star), reference, rtol=0, atol=1e-5)


def test_too_large_world_is_rejected() -> None:
    assert WorldConfig(vocab_size=32, seq_len=4).n_outputs == MAX_OUTPUTS  # exactly at the limit: allowed
    with pytest.raises(pydantic.ValidationError, match="outputs"):
        WorldConfig(vocab_size=64, seq_len=4)
    with pytest.raises(pydantic.ValidationError):
        WorldConfig(vocab_size=4, seq_len=11)
    with pytest.raises(ValueError):  # a ValidationError is a ValueError
        WorldConfig(vocab_size=33, seq_len=4)
