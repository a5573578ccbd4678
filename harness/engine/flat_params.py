"""Networks as flat parameter rows: one network's parameter pytree <-> one row (P,).

The training state keeps each network's parameters (and each Adam moment) as one row of
one array instead of a dozen leaves. Gathering, scattering and selecting a subset of
judges, and every Adam step, then compile to one kernel instead of one per leaf (the
published grid's iteration program went from 20.5 s to 15.4 s of cold compile when this
was introduced). Models unravel a row where they read it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from harness.engine.architecture import DEFAULT_NETWORK, NetworkConfig
from harness.engine.models import Params, init_judge, init_policy


class RowLayout(NamedTuple):
    """Where one network's parameters lie in its flat row (the order of `jax.flatten_util.ravel_pytree`)."""

    unravel: Callable[[jax.Array], Params]  # one row (P,) -> the network's parameter pytree
    structure: jax.tree_util.PyTreeDef  # of that pytree
    width: int  # P


def _layout_of(init: Callable[..., Params], vocab_size: int, seq_len: int, network: NetworkConfig) -> RowLayout:
    """The row layout of `init`'s parameters. Their shapes depend on the vocabulary and the network's settings, and
    for attention on the sequence length (its position embeddings); a GRU's weights do not depend on the length, so
    one position stands in for any."""
    length = seq_len if network.family == "attention" else 1
    shapes = jax.eval_shape(lambda key: init(key, vocab_size, length, network), jax.random.PRNGKey(0))
    row, unravel = ravel_pytree(jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes))
    return RowLayout(unravel, jax.tree.structure(shapes), row.shape[0])


@functools.cache
def policy_layout(vocab_size: int, seq_len: int = 1, network: NetworkConfig = DEFAULT_NETWORK) -> RowLayout:
    """The row layout of a policy for K = vocab_size tokens, L = seq_len positions and `network` (all static)."""
    return _layout_of(init_policy, vocab_size, seq_len, network)


@functools.cache
def judge_layout(vocab_size: int, seq_len: int = 1, network: NetworkConfig = DEFAULT_NETWORK) -> RowLayout:
    """The row layout of a judge for K = vocab_size tokens, L = seq_len positions and `network` (all static)."""
    return _layout_of(init_judge, vocab_size, seq_len, network)


@jax.jit
def ravel_rows(tree: Params) -> jax.Array:
    """Networks stacked on a leading axis (N, ...) -> rows (N, P) of their leaves' dtype, leaves in pytree order."""
    return jax.vmap(lambda network: ravel_pytree(network)[0])(tree)


def unravel_rows(layout: RowLayout, rows: jax.Array) -> Params:
    """Inverse of `ravel_rows`: rows (N, P) -> networks stacked on a leading axis."""
    chex.assert_shape(rows, (None, layout.width))
    return jax.vmap(layout.unravel)(rows)
