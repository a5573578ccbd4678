"""Where every random stream comes from.

A seed's streams are shared by all conditions, so conditions of one seed are paired
comparisons: same initial policy, same pretrained judges, same sampling noise.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

_POLICY_INIT, _JUDGES, _TRAINING = 0, 1, 2
# The held-out meta pairs are one fixed set for every seed and condition.
HOLDOUT_KEY = 20240719


def policy_init_key(seed: jax.Array) -> jax.Array:
    return jax.random.fold_in(jax.random.PRNGKey(seed), _POLICY_INIT)


def training_key(seed: jax.Array) -> jax.Array:
    """Root of the per-step sampling keys; fold in the global inner-step count to use."""
    return jax.random.fold_in(jax.random.PRNGKey(seed), _TRAINING)


def judge_keys(seed: jax.Array, member: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(init key, pretraining-data key) of judge `member` of `seed`; independent of ensemble size."""
    member_key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), _JUDGES), member)
    init_key, data_key = jax.random.split(member_key)
    return init_key, data_key


@jax.jit
def judge_keys_batch(seeds: jax.Array, members: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`judge_keys` of many judges, seeds and members int32 (n,) each: init keys and data keys (n, 2) each."""
    return jax.vmap(judge_keys)(seeds, members)


@functools.partial(jax.jit, static_argnums=(1, 2))
def distinct_pairs(key: jax.Array, n_pairs: int, n_outputs: int) -> jax.Array:
    """Pairs (a, b) of output indices with a != b, uniform over ordered pairs: int32 (n_pairs, 2)."""
    k_first, k_offset = jax.random.split(key)
    first = jax.random.randint(k_first, (n_pairs,), 0, n_outputs)
    second = (first + jax.random.randint(k_offset, (n_pairs,), 1, n_outputs)) % n_outputs
    return jnp.stack([first, second], axis=1).astype(jnp.int32)
