"""Networks as flat parameter rows (harness.flat_params) against numpy concatenation and tree-shaped optax."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from harness import coevolution
from harness.flat_params import (
    judge_unravel,
    policy_unravel,
    ravel_optimizer_rows,
    ravel_rows,
    unravel_optimizer_rows,
    unravel_rows,
)
from harness.grid import GridShape
from harness.models import init_judges, init_policies

K, L, N = 8, 4, 3


def _noisy(tree: chex.ArrayTree, seed: int) -> chex.ArrayTree:
    """Distinct values in every leaf and row, so a misplaced slice cannot go unnoticed."""
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
    return jax.tree.unflatten(treedef, [x + jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)])


@pytest.fixture(scope="module")
def judges() -> chex.ArrayTree:
    return _noisy(init_judges(jax.random.split(jax.random.PRNGKey(0), N), K, L), 1)


@pytest.fixture(scope="module")
def policies() -> chex.ArrayTree:
    return _noisy(init_policies(jax.random.split(jax.random.PRNGKey(2), N), K, L), 3)


def _numpy_rows(tree: chex.ArrayTree) -> np.ndarray:
    """Reference: each network's leaves, in pytree order, flattened and concatenated."""
    leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(tree)]
    return np.stack([np.concatenate([leaf[i].ravel() for leaf in leaves]) for i in range(N)])


@pytest.mark.parametrize(("kind", "width"), [("policies", 5144), ("judges", 4897)])
def test_rows_are_the_concatenated_leaves_and_unravel_back(request, kind: str, width: int) -> None:
    tree = request.getfixturevalue(kind)
    unravel = (policy_unravel if kind == "policies" else judge_unravel)(K)
    rows = ravel_rows(tree)
    assert rows.shape == (N, width)  # the parameter counts test_models derives by hand
    np.testing.assert_array_equal(np.asarray(rows), _numpy_rows(tree))
    chex.assert_trees_all_equal(unravel_rows(unravel, rows), tree)


def test_unravel_rejects_rows_of_the_other_network(policies: chex.ArrayTree) -> None:
    with pytest.raises(ValueError):
        unravel_rows(judge_unravel(K), ravel_rows(policies))


def test_adam_on_rows_equals_adam_on_trees(judges: chex.ArrayTree) -> None:
    """Moments flatten like the parameters, the step count stays, and an Adam step commutes with flattening."""
    optimizer = optax.adam(1e-2)
    state = jax.vmap(optimizer.init)(judges)
    grads = _noisy(jax.tree.map(jnp.zeros_like, judges), 4)
    # One step first, so the moments are non-zero and differ between rows.
    _, state = jax.vmap(optimizer.update)(grads, state, judges)

    rows_state = ravel_optimizer_rows(state, judges)
    adam = rows_state[0]
    np.testing.assert_array_equal(np.asarray(adam.count), np.asarray(state[0].count))
    np.testing.assert_array_equal(np.asarray(adam.mu), _numpy_rows(state[0].mu))
    np.testing.assert_array_equal(np.asarray(adam.nu), _numpy_rows(state[0].nu))
    chex.assert_trees_all_equal(unravel_optimizer_rows(judge_unravel(K), rows_state, state, judges), state)

    tree_updates, tree_next = jax.vmap(optimizer.update)(grads, state, judges)
    row_updates, row_next = jax.vmap(optimizer.update)(ravel_rows(grads), rows_state, ravel_rows(judges))
    np.testing.assert_allclose(np.asarray(row_updates), _numpy_rows(tree_updates), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(np.asarray(row_next[0].nu), _numpy_rows(tree_next[0].nu), rtol=1e-6, atol=1e-12)


def test_training_state_round_trips(policies: chex.ArrayTree, judges: chex.ArrayTree) -> None:
    state = coevolution.CoevolutionState(
        policy_params=policies,
        policy_opt_state=jax.vmap(coevolution.init_opt_state)(policies),
        judge_params=judges,
        judge_opt_state=jax.vmap(coevolution.init_opt_state)(judges),
        step=jnp.int32(7),
        judge_updates=jnp.arange(N, dtype=jnp.int32),
        meta_corrections=jnp.zeros(N, jnp.int32),
    )
    rows = coevolution.flat_state(state)
    assert rows.policy_params.shape == (N, 5144)
    assert rows.judge_params.shape == (N, 4897)
    assert rows.judge_opt_state[0].mu.shape == (N, 4897)
    chex.assert_trees_all_equal(coevolution.tree_state(_shape(), rows, like=state), state)


def _shape() -> GridShape:
    return GridShape(
        n_runs=N,
        n_slots=N,
        n_seeds=1,
        max_members=1,
        max_anchor_pairs=0,
        update_groups=(),
        meta_groups=(),
        batch_size=4,
        steps_per_iteration=1,
        vocab_size=K,
        seq_len=L,
    )
