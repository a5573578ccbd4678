"""Network parameters moved off flax's initial values, for comparisons with a reference: zero biases and unit
LayerNorm scales would hide a mistake in the terms they multiply or add."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np


def perturbed(params: chex.ArrayTree, seed: int, scale: float = 0.2) -> chex.ArrayTree:
    """`params` with Gaussian noise of standard deviation `scale` added to every leaf, drawn by numpy (host values
    need no program compiled for each tree's leaf shapes, as jax.random would)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda leaf: jnp.asarray(np.asarray(leaf) + scale * rng.standard_normal(leaf.shape).astype(leaf.dtype)), params
    )
