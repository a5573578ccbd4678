"""The rugged (NK) ground truth against a brute-force evaluation in numpy, K = 0 separable, the default unchanged."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from harness.engine.world import World, WorldConfig, rugged_tables
from harness.grid.conditions import ConditionFileError, grid_from_mapping


def _brute_force(config: WorldConfig) -> np.ndarray:
    """q* of every output, one output at a time, in lexicographic order: position i's term is its table's entry
    for the tokens at positions i, i+1, ..., i+N (cyclically), read as a base-K number."""
    tables = np.asarray(rugged_tables(config), np.float64)
    k, length, order = config.vocab_size, config.seq_len, config.interaction_order
    values = []
    for output in itertools.product(range(k), repeat=length):
        total = 0.0
        for i in range(length):
            code = 0
            for j in range(order + 1):
                code = code * k + output[(i + j) % length]
            total += tables[i, code]
        values.append(total)
    return np.array(values)


@pytest.mark.parametrize(("vocab_size", "seq_len", "order"), [(3, 3, 0), (3, 3, 1), (3, 3, 2), (2, 5, 3), (4, 2, 1)])
def test_rugged_q_star_is_the_nk_sum(vocab_size: int, seq_len: int, order: int) -> None:
    config = WorldConfig(vocab_size=vocab_size, seq_len=seq_len, q_star="rugged", interaction_order=order)
    np.testing.assert_allclose(np.asarray(World(config).q_star), _brute_force(config), rtol=1e-5, atol=1e-5)


def test_order_zero_is_separable() -> None:
    """q* decomposes into per-position terms: every output's q* is the sum of its tokens' per-position values,
    which a least-squares fit over one-hot position×token features recovers exactly."""
    config = WorldConfig(vocab_size=3, seq_len=4, q_star="rugged", interaction_order=0)
    world = World(config)
    outputs = np.asarray(world.outputs)
    features = np.zeros((len(outputs), config.seq_len * config.vocab_size))
    for i in range(config.seq_len):
        features[np.arange(len(outputs)), i * config.vocab_size + outputs[:, i]] = 1.0
    q = np.asarray(world.q_star, np.float64)
    fit = features @ np.linalg.lstsq(features, q, rcond=None)[0]
    np.testing.assert_allclose(fit, q, atol=1e-5)
    # One neighbour makes it not separable: the same fit leaves a residual.
    rugged = World(config.model_copy(update={"interaction_order": 1}))
    q1 = np.asarray(rugged.q_star, np.float64)
    assert np.abs(features @ np.linalg.lstsq(features, q1, rcond=None)[0] - q1).max() > 0.1


def test_default_world_is_the_separable_recipe() -> None:
    """The default is the separable world; the rugged settings leave it alone (its values are pinned by the golden
    metrics and the original lab's runs)."""
    default = WorldConfig()
    assert default.q_star == "separable"
    with_order = World(WorldConfig(interaction_order=3))
    np.testing.assert_array_equal(np.asarray(World(default).q_star), np.asarray(with_order.q_star))


def test_world_table_parses_and_refuses_too_many_neighbours() -> None:
    grid = grid_from_mapping(
        {"world": {"vocab_size": 3, "seq_len": 3, "q_star": "rugged", "interaction_order": 2}, "conditions": {"a": {}}},
        "w.toml",
    )
    assert (grid.world.q_star, grid.world.interaction_order) == ("rugged", 2)
    with pytest.raises(ConditionFileError, match="interaction_order"):
        grid_from_mapping(
            {"world": {"seq_len": 3, "q_star": "rugged", "interaction_order": 3}, "conditions": {"a": {}}}, "w.toml"
        )
