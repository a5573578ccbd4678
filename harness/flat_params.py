"""Stacks of networks as flat parameter rows: (N, ...) pytrees <-> (N, P) arrays.

The training loop keeps each network's parameters (and each Adam moment) as one row of
one array instead of a dozen leaves. Gathering, scattering and selecting a subset of
judges, and every Adam step, then compile to one kernel instead of one per leaf: the
published grid's iteration program went from 20.5 s to 15.4 s of cold compile. This is
exact only for optimizers that act on each parameter on its own, as Adam does.
The canonical state (checkpoints, diagnostics, tests) stays a pytree; `train_iteration`
converts on the way in and out, once per outer iteration.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from harness.models import Params, init_judge, init_policy


class RowLayout(NamedTuple):
    """Where one network's parameters lie in its flat row (the order of `jax.flatten_util.ravel_pytree`)."""

    unravel: Callable[[jax.Array], Params]  # one row (P,) -> the network's parameter pytree
    structure: jax.tree_util.PyTreeDef  # of that pytree
    width: int  # P


def _layout_of(init: Callable[[jax.Array, int, int], Params], vocab_size: int) -> RowLayout:
    """The row layout of `init`'s parameters. Their shapes depend on the vocabulary only
    (widths are module constants, and a GRU's weights do not depend on the sequence
    length), so one sequence position stands in for any."""
    shapes = jax.eval_shape(lambda key: init(key, vocab_size, 1), jax.random.PRNGKey(0))
    row, unravel = ravel_pytree(jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes))
    return RowLayout(unravel, jax.tree.structure(shapes), row.shape[0])


@functools.cache
def policy_layout(vocab_size: int) -> RowLayout:
    return _layout_of(init_policy, vocab_size)


@functools.cache
def judge_layout(vocab_size: int) -> RowLayout:
    return _layout_of(init_judge, vocab_size)


def ravel_rows(tree: Params) -> jax.Array:
    """Networks stacked on a leading axis (N, ...) -> rows (N, P) of their leaves' dtype, leaves in pytree order."""
    return jax.vmap(lambda network: ravel_pytree(network)[0])(tree)


def unravel_rows(layout: RowLayout, rows: jax.Array) -> Params:
    """Inverse of `ravel_rows`: rows (N, P) -> networks stacked on a leading axis."""
    chex.assert_shape(rows, (None, layout.width))
    return jax.vmap(layout.unravel)(rows)


def _is_params(structure: jax.tree_util.PyTreeDef) -> Callable[[object], bool]:
    return lambda node: jax.tree.structure(node) == structure


def ravel_optimizer_rows(opt_state: chex.ArrayTree, params: Params) -> chex.ArrayTree:
    """An optimizer state of the stacked networks `params`, with every part shaped like
    them (Adam's moments) as rows (N, P) and the other parts (the step count) as they are."""
    is_params = _is_params(jax.tree.structure(params))
    return jax.tree.map(lambda node: ravel_rows(node) if is_params(node) else node, opt_state, is_leaf=is_params)


def unravel_optimizer_rows(layout: RowLayout, rows: chex.ArrayTree, like: chex.ArrayTree) -> chex.ArrayTree:
    """Inverse of `ravel_optimizer_rows`; `like` is a pytree-shaped state of the same optimizer."""
    is_params = _is_params(layout.structure)
    return jax.tree.map(
        lambda part, flat: unravel_rows(layout, flat) if is_params(part) else flat, like, rows, is_leaf=is_params
    )
