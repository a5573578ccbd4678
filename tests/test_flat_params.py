"""Networks as flat parameter rows (harness.engine.flat_params) against numpy concatenation and tree-shaped optax."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from harness.engine.flat_params import judge_layout, policy_layout, ravel_rows, unravel_rows
from harness.engine.models import init_judges, init_policies
from harness.engine.state import adam_step, fresh_networks
from harness.grid.memory import parameter_count

K, L, N = 8, 4, 3
POLICY_WIDTH, JUDGE_WIDTH = parameter_count(K)  # counted by hand from the layer sizes


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


@pytest.mark.parametrize(("kind", "width"), [("policies", POLICY_WIDTH), ("judges", JUDGE_WIDTH)])
def test_rows_are_the_concatenated_leaves_and_unravel_back(request, kind: str, width: int) -> None:
    tree = request.getfixturevalue(kind)
    layout = (policy_layout if kind == "policies" else judge_layout)(K)
    rows = ravel_rows(tree)
    assert rows.shape == (N, width) == (N, layout.width)
    np.testing.assert_array_equal(np.asarray(rows), _numpy_rows(tree))
    chex.assert_trees_all_equal(unravel_rows(layout, rows), tree)


def test_unravel_rejects_rows_of_the_other_network(policies: chex.ArrayTree) -> None:
    with pytest.raises(AssertionError):
        unravel_rows(judge_layout(K), ravel_rows(policies))


def test_adam_on_rows_equals_adam_on_trees(judges: chex.ArrayTree) -> None:
    """Two Adam steps of `state.adam_step` on flat rows equal tree-shaped optax on the networks (per network,
    at per-run learning rates): Adam acts on each parameter on its own, so flattening commutes with it."""
    learning_rates = jnp.array([1e-2, 3e-3, 1e-3])
    grads = [_noisy(jax.tree.map(jnp.zeros_like, judges), seed) for seed in (4, 5)]

    def tree_steps(params: chex.ArrayTree, lr: jax.Array, *step_grads: chex.ArrayTree) -> tuple:
        optimizer = optax.adam(lr)
        opt_state = optimizer.init(params)
        for g in step_grads:
            updates, opt_state = optimizer.update(g, opt_state, params)
            params = optax.apply_updates(params, updates)
        return params, opt_state

    tree_params, tree_state = jax.vmap(tree_steps)(judges, learning_rates, *grads)
    rows = fresh_networks(ravel_rows(judges))
    for g in grads:
        rows = jax.vmap(adam_step)(rows, ravel_rows(g), learning_rates)
    np.testing.assert_allclose(np.asarray(rows.params), _numpy_rows(tree_params), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(rows.adam[0].mu), _numpy_rows(tree_state[0].mu), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(np.asarray(rows.adam[0].nu), _numpy_rows(tree_state[0].nu), rtol=1e-6, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(rows.adam[0].count), [2] * N)
