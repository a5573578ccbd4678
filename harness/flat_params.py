"""Stacks of networks as flat parameter rows: (N, ...) pytrees <-> (N, P) arrays.

The training loop keeps each network's parameters (and each Adam moment) as one row of
one array instead of a dozen leaves. Gathering, scattering and selecting a subset of
judges, and every Adam step, then compile to one kernel instead of one per leaf, which
roughly halves the XLA:CPU kernels of the iteration program (and its compile time).
The canonical state (checkpoints, diagnostics, tests) stays a pytree; `train_iteration`
converts on the way in and out, once per outer iteration.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import chex
import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from harness.models import Params, init_judge, init_policy

Unravel = Callable[[jax.Array], Params]


def _unravel_of(init: Callable[[jax.Array, int, int], Params], vocab_size: int) -> Unravel:
    shapes = jax.eval_shape(lambda key: init(key, vocab_size, 1), jax.random.PRNGKey(0))
    _, unravel = ravel_pytree(jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes))
    return unravel


@functools.cache
def policy_unravel(vocab_size: int) -> Unravel:
    """One policy's flat row (P,) -> its parameter pytree (the layout of `jax.flatten_util.ravel_pytree`)."""
    return _unravel_of(init_policy, vocab_size)


@functools.cache
def judge_unravel(vocab_size: int) -> Unravel:
    """One judge's flat row (P,) -> its parameter pytree."""
    return _unravel_of(init_judge, vocab_size)


def ravel_rows(tree: Params) -> jax.Array:
    """Networks stacked on a leading axis (N, ...) -> float32 rows (N, P)."""
    return jax.vmap(lambda row: ravel_pytree(row)[0])(tree)


def unravel_rows(unravel: Unravel, rows: jax.Array) -> Params:
    """Inverse of `ravel_rows`: rows (N, P) -> networks stacked on a leading axis."""
    chex.assert_rank(rows, 2)
    return jax.vmap(unravel)(rows)


def _is_params(structure: jax.tree_util.PyTreeDef) -> Callable[[object], bool]:
    return lambda node: jax.tree.structure(node) == structure


def ravel_optimizer_rows(opt_state: chex.ArrayTree, params: Params) -> chex.ArrayTree:
    """An optimizer state of stacked networks with every parameter-shaped part (Adam's
    moments) as rows (N, P); other parts (the step count) as they are."""
    is_params = _is_params(jax.tree.structure(params))
    return jax.tree.map(lambda node: ravel_rows(node) if is_params(node) else node, opt_state, is_leaf=is_params)


def unravel_optimizer_rows(
    unravel: Unravel, rows: chex.ArrayTree, like: chex.ArrayTree, params: Params
) -> chex.ArrayTree:
    """Inverse of `ravel_optimizer_rows`; `like` is the pytree-shaped state it was made from."""
    is_params = _is_params(jax.tree.structure(params))
    parts, structure = jax.tree.flatten(like, is_leaf=is_params)
    flat_parts = jax.tree.leaves(rows)
    restored = [
        unravel_rows(unravel, flat) if is_params(part) else flat for part, flat in zip(parts, flat_parts, strict=True)
    ]
    return jax.tree.unflatten(structure, restored)
