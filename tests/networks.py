"""Networks for comparisons with a reference: flax's initialisers compiled once per network (op by op, every
primitive of an initialisation would compile on its own), and parameters moved off their initial values (zero biases
and unit LayerNorm scales would hide a mistake in the terms they multiply or add)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np

from harness.engine import models
from harness.mechanisms.noisy_gold_reward import NoisyProxy

# (key, vocab_size, seq_len[, network]) -> parameters, as harness.engine.models' own.
init_policy = jax.jit(models.init_policy, static_argnums=(1, 2, 3))
init_judge = jax.jit(models.init_judge, static_argnums=(1, 2, 3))
init_judges = jax.jit(models.init_judges, static_argnums=(1, 2, 3))


def perturbed(params: chex.ArrayTree, seed: int, scale: float = 0.2) -> chex.ArrayTree:
    """`params` with Gaussian noise of standard deviation `scale` added to every leaf, drawn by numpy (host values
    need no program compiled for each tree's leaf shapes, as jax.random would)."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(
        lambda leaf: jnp.asarray(np.asarray(leaf) + scale * rng.standard_normal(leaf.shape).astype(leaf.dtype)), params
    )


def idle_run_states(n_outputs: int) -> dict:
    """One run's own state of each built-in mechanism whose reward hook reads one (`PolicyBatch.mechanisms`), as a
    run starts: what `run_policy_step` is given for a run whose knobs leave those mechanisms off."""
    return {"noisy_gold_reward": NoisyProxy(jnp.zeros((n_outputs,), jnp.float32), jnp.zeros((), jnp.bool_))}
