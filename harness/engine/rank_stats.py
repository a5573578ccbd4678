"""Rank statistics in JAX, so alignment can be measured inside the compiled program."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def average_ranks(values: jax.Array) -> jax.Array:
    """1-based ranks of a 1-D array, ties sharing the mean of the ranks they span.

    What jax.scipy.stats.rankdata(method="average") computes; written out because that
    function fails to trace inside shard_map on jax 0.10.2 ("pvary is a invariant->variant
    collective"), and the grid program runs under shard_map.
    """
    ordered = jnp.sort(values)
    below = jnp.searchsorted(ordered, values, side="left")
    through = jnp.searchsorted(ordered, values, side="right")
    return (below + through + 1).astype(jnp.float32) / 2.0


def pearson(x: jax.Array, y: jax.Array) -> jax.Array:
    """Pearson correlation of two float arrays (N,); NaN if one is constant."""
    x = x - jnp.mean(x)
    y = y - jnp.mean(y)
    return jnp.sum(x * y) / jnp.sqrt(jnp.sum(x * x) * jnp.sum(y * y))


def spearman(x: jax.Array, y: jax.Array) -> jax.Array:
    """Spearman rank correlation, ties taking average ranks (as scipy.stats.spearmanr).

    Args:
      x: float (N,).
      y: float (N,).

    Returns:
      float32 (): the correlation; NaN if either is constant.
    """
    return pearson(average_ranks(x), average_ranks(y))
