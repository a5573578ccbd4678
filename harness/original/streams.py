"""The original lab's random streams, so its published runs can serve as run-for-run oracles.

The original (github.com/jmamath/co-evolution-lab, commit 4b1e799) threads one PRNG key
through each seed by repeated `split`, and its two entry scripts do so differently:

- ``"baseline"`` (scripts/run_baseline.py): from PRNGKey(seed) it splits off the judge's
  init key, then its pretraining key, then the co-evolution run key, one `split` each.
- ``"variants"`` (scripts/run_variants.py): from PRNGKey(seed) it splits three ways once
  per ensemble member, in member order (chain, init, pretraining), then splits off the
  run key. A member's keys do not depend on the ensemble size; the run key does.

The co-evolution loop then splits the run key once more: (loop key, policy init key).

Its networks compute the same functions as ours (`harness.engine.models`) but name their
submodules differently (``gru``/``proj`` where ours say ``cell``/``head``), and flax
derives each parameter's init key from its module path, so the original's initial
parameters come from modules with its names, then are renamed into our layout.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from harness.engine.models import EMBED_DIM, HIDDEN_DIM, Params

Script = Literal["baseline", "variants"]
SCRIPTS: tuple[Script, ...] = ("baseline", "variants")

# The original's held-out meta pairs come from PRNGKey(this), for every seed and condition.
ORIGINAL_HOLDOUT_SEED = 0

# Its submodule names -> ours.
_RENAME = {"embed": "embed", "gru": "cell", "proj": "head"}


class SeedKeys(NamedTuple):
    """Every key the original derives for one seed before its co-evolution loop starts.

    judge_init, judge_pretrain: (n_judges, 2), one row per ensemble member in member order.
    run: (2,) the key handed to the co-evolution loop; policy_init: (2,) the policy's init
    key split off it; loop: (2,) what the loop goes on splitting for its inner steps.
    """

    judge_init: jax.Array
    judge_pretrain: jax.Array
    run: jax.Array
    policy_init: jax.Array
    loop: jax.Array


def seed_keys(script: Script, seed: int | jax.Array, n_judges: int = 1) -> SeedKeys:
    """The keys of `seed` under the original's `script`; vmappable over `seed` (n_judges is static)."""
    key = jax.random.PRNGKey(seed)
    if script == "baseline":
        if n_judges != 1:
            raise ValueError(f"the baseline script pretrains a single judge, not {n_judges}")
        key, init = jax.random.split(key)
        key, pretrain = jax.random.split(key)
        inits, pretrains = [init], [pretrain]
    elif script == "variants":
        inits, pretrains = [], []
        for _ in range(n_judges):
            key, init, pretrain = jax.random.split(key, 3)
            inits.append(init)
            pretrains.append(pretrain)
    else:
        raise ValueError(f"unknown script {script!r}; expected one of {SCRIPTS}")
    key, run = jax.random.split(key)
    loop, policy_init = jax.random.split(run)
    return SeedKeys(jnp.stack(inits), jnp.stack(pretrains), run, policy_init, loop)


def holdout_pair_count(fraction: float, n_outputs: int) -> int:
    """The original's held-out size: max(1, int(n_outputs * fraction)), in Python float arithmetic."""
    return max(1, int(n_outputs * fraction))


def holdout_pairs(n: int, n_outputs: int, seed: int = ORIGINAL_HOLDOUT_SEED) -> jax.Array:
    """The original's held-out pairs, n of them drawn from PRNGKey(seed): int32 (n, 2) output indices.

    Both columns are drawn with replacement (a pair may repeat an output) from the two
    halves of split(PRNGKey(seed)); the original uses seed 0 and n = `holdout_pair_count`.
    With threefry's partitionable bits (jax's default) the draw of n pairs is a prefix of
    the draw of more, so the 5% set is the first half of the 10% set. Label a pair 1.0
    where q*(first) > q*(second).
    """
    key_first, key_second = jax.random.split(jax.random.PRNGKey(seed))
    first = jax.random.randint(key_first, (n,), 0, n_outputs)
    second = jax.random.randint(key_second, (n,), 0, n_outputs)
    return jnp.stack([first, second], axis=1).astype(jnp.int32)


class _OriginalPolicy(nn.Module):
    """The original policy's parameter tree (its module names); only ever initialised, never applied."""

    vocab_size: int

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        batch = tokens.shape[0]
        embedded = nn.Embed(self.vocab_size + 1, EMBED_DIM, name="embed")(tokens)
        hidden, _ = nn.GRUCell(HIDDEN_DIM, name="gru")(jnp.zeros((batch, HIDDEN_DIM)), embedded[:, 0])
        return nn.Dense(self.vocab_size, name="proj")(hidden)


class _OriginalJudge(nn.Module):
    """The original judge's parameter tree (its module names); only ever initialised, never applied."""

    vocab_size: int

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        batch = tokens.shape[0]
        embedded = nn.Embed(self.vocab_size, EMBED_DIM, name="embed")(tokens)
        hidden, _ = nn.GRUCell(HIDDEN_DIM, name="gru")(jnp.zeros((batch, HIDDEN_DIM)), embedded[:, 0])
        return nn.Dense(1, name="proj")(hidden)[:, 0]


def _to_our_layout(params: Params) -> Params:
    return {"params": {_RENAME[name]: module for name, module in params["params"].items()}}


def init_original_policy(key: jax.Array, vocab_size: int, seq_len: int) -> Params:
    """The original's initial policy for init key `key`, in our `harness.engine.models.Policy` layout."""
    return _to_our_layout(_OriginalPolicy(vocab_size).init(key, jnp.zeros((1, seq_len), jnp.int32)))


def init_original_judge(key: jax.Array, vocab_size: int, seq_len: int) -> Params:
    """The original's initial judge for init key `key`, in our `harness.engine.models.Judge` layout."""
    return _to_our_layout(_OriginalJudge(vocab_size).init(key, jnp.zeros((1, seq_len), jnp.int32)))


def init_original_policies(keys: jax.Array, vocab_size: int, seq_len: int) -> Params:
    """Keys (N, 2) -> N policies stacked on a leading axis; one key at a time (cf. `engine.models.init_policies`)."""
    return jax.lax.map(lambda key: init_original_policy(key, vocab_size, seq_len), keys)


def init_original_judges(keys: jax.Array, vocab_size: int, seq_len: int) -> Params:
    """Keys (N, 2) -> N judges stacked on a leading axis; one key at a time (cf. `engine.models.init_judges`)."""
    return jax.lax.map(lambda key: init_original_judge(key, vocab_size, seq_len), keys)


def pretrain_step_keys(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One step of the original's pretraining chain: key -> (next key, batch-index key, label-noise key)."""
    next_key, index_key, noise_key = jax.random.split(key, 3)
    return next_key, index_key, noise_key
