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
    judge_layout,
    policy_layout,
    ravel_optimizer_rows,
    ravel_rows,
    unravel_optimizer_rows,
    unravel_rows,
)
from harness.grid import GridShape
from harness.memory import parameter_count
from harness.models import init_judges, init_policies

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


def _stepped_adam(
    params: chex.ArrayTree, seed: int
) -> tuple[optax.GradientTransformation, chex.ArrayTree, chex.ArrayTree]:
    """Adam, its state after one step on random gradients (so the moments are non-zero and
    differ between rows and between mu and nu), and fresh random gradients for the next."""
    optimizer = optax.adam(1e-2)
    grads = _noisy(jax.tree.map(jnp.zeros_like, params), seed)
    _, state = jax.vmap(optimizer.update)(grads, jax.vmap(optimizer.init)(params), params)
    return optimizer, state, _noisy(grads, seed + 1)


def test_adam_on_rows_equals_adam_on_trees(judges: chex.ArrayTree) -> None:
    """Moments flatten like the parameters, the step count stays, and an Adam step commutes with flattening."""
    optimizer, state, grads = _stepped_adam(judges, 4)
    rows_state = ravel_optimizer_rows(state, judges)
    adam = rows_state[0]
    np.testing.assert_array_equal(np.asarray(adam.count), np.asarray(state[0].count))
    np.testing.assert_array_equal(np.asarray(adam.mu), _numpy_rows(state[0].mu))
    np.testing.assert_array_equal(np.asarray(adam.nu), _numpy_rows(state[0].nu))
    chex.assert_trees_all_equal(unravel_optimizer_rows(judge_layout(K), rows_state, like=state), state)

    tree_updates, tree_next = jax.vmap(optimizer.update)(grads, state, judges)
    row_updates, row_next = jax.vmap(optimizer.update)(ravel_rows(grads), rows_state, ravel_rows(judges))
    np.testing.assert_allclose(np.asarray(row_updates), _numpy_rows(tree_updates), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(np.asarray(row_next[0].nu), _numpy_rows(tree_next[0].nu), rtol=1e-6, atol=1e-12)


def test_training_state_round_trips(policies: chex.ArrayTree, judges: chex.ArrayTree) -> None:
    state = coevolution.CoevolutionState(
        policy_params=policies,
        policy_opt_state=_stepped_adam(policies, 5)[1],
        judge_params=judges,
        judge_opt_state=_stepped_adam(judges, 6)[1],
        step=jnp.int32(7),
        judge_updates=jnp.arange(N, dtype=jnp.int32),
        meta_corrections=jnp.zeros(N, jnp.int32),
    )
    flat = coevolution.flat_state(state)
    assert flat.policy_params.shape == (N, POLICY_WIDTH)
    assert flat.judge_params.shape == (N, JUDGE_WIDTH)
    np.testing.assert_array_equal(np.asarray(flat.policy_opt_state[0].nu), _numpy_rows(state.policy_opt_state[0].nu))
    np.testing.assert_array_equal(np.asarray(flat.judge_opt_state[0].mu), _numpy_rows(state.judge_opt_state[0].mu))
    chex.assert_trees_all_equal(coevolution.tree_state(_shape(), flat, like=state), state)


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
