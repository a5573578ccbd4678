"""The enumerable world: every output sequence and its hidden ground-truth quality q*.

Two recipes for q* (`WorldConfig.q_star`): "separable", the published lab's sum of per-position terms, and
"rugged", an NK landscape whose per-position terms depend on `interaction_order` neighbours too
(`ground_truth_quality` and `rugged_quality` state them).
"""

from __future__ import annotations

from typing import Literal

import chex
import jax
import jax.numpy as jnp
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

TOKEN_GLYPHS = ("↑", "↗", "→", "↘", "↓", "↙", "←", "↖")

# Tables above this many outputs no longer fit comfortably in memory once every
# run keeps exact per-output diagnostics (policy and judge tables, float32).
MAX_OUTPUTS = 2**20

# Worlds of more outputs than this are "large": working memory, not compute, sets their cost, so their score tables
# are computed in chunks and their programs compiled one at a time. Worlds up to it (the published 4,096 and 16^4)
# run exactly as they always have.
LARGE_WORLD_OUTPUTS = 2**16


class WorldConfig(BaseModel):
    """Size of the world and the recipe for its ground truth."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    vocab_size: int = Field(8, ge=2, le=64, description="K: number of tokens")
    seq_len: int = Field(4, ge=1, le=16, description="L: tokens per output")
    pair_scale: float = Field(0.3, ge=0.0, description="scale of the position×token term")
    q_star_seed: int = Field(42, ge=0, description="PRNG seed of the ground truth")
    q_star: Literal["separable", "rugged"] = Field(
        "separable", description="the ground truth's recipe: 'separable' (per-position terms) or 'rugged' (NK)"
    )
    interaction_order: int = Field(
        1, ge=0, le=15, description="rugged only: N, the neighbours each position's term also reads (0: separable)"
    )

    @model_validator(mode="after")
    def _neighbours_fit(self) -> WorldConfig:
        if self.q_star == "rugged" and self.interaction_order >= self.seq_len:
            raise ValueError(
                f"interaction_order = {self.interaction_order} needs more positions than seq_len = {self.seq_len}: "
                "a position's neighbours are the interaction_order positions after it (cyclically), all distinct"
            )
        return self

    @model_validator(mode="after")
    def _enumerable(self) -> WorldConfig:
        if self.n_outputs > MAX_OUTPUTS:
            raise ValueError(
                f"vocab_size**seq_len = {self.vocab_size}**{self.seq_len} = {self.n_outputs:,} outputs; "
                f"exact diagnostics enumerate every output, so at most {MAX_OUTPUTS:,} are supported"
            )
        return self

    @property
    def n_outputs(self) -> int:
        return self.vocab_size**self.seq_len


class World:
    """Precomputed tables of one world.

    Attributes:
      config: the WorldConfig it was built from.
      outputs: int32 (N, L), all N = K**L sequences in lexicographic order,
        position 0 most significant.
      q_star: float32 (N,), ground-truth quality of each output.
    """

    def __init__(self, config: WorldConfig | None = None) -> None:
        self.config = config or WorldConfig()
        self.outputs = enumerate_outputs(self.config.vocab_size, self.config.seq_len)
        self.q_star = ground_truth_quality(self.config, self.outputs)
        chex.assert_shape(self.outputs, (self.config.n_outputs, self.config.seq_len))
        chex.assert_shape(self.q_star, (self.config.n_outputs,))
        chex.assert_tree_all_finite(self.q_star)

    @property
    def n_outputs(self) -> int:
        return self.config.n_outputs

    def render(self, index: int) -> str:
        """Glyphs of output `index` (digits past the 8 compass glyphs)."""
        tokens = np.asarray(self.outputs[index])
        glyphs = TOKEN_GLYPHS if self.config.vocab_size <= len(TOKEN_GLYPHS) else None
        return " ".join(glyphs[t] if glyphs else str(t) for t in tokens)


def enumerate_outputs(vocab_size: int, seq_len: int) -> jax.Array:
    """Every output sequence of the world.

    Args:
      vocab_size: K.
      seq_len: L.

    Returns:
      int32 (N, L), N = K**L: all sequences in lexicographic order, position 0 most significant, so that
      output i is the base-K digits of i.
    """
    index = np.arange(vocab_size**seq_len, dtype=np.int64)
    powers = vocab_size ** np.arange(seq_len - 1, -1, -1, dtype=np.int64)
    return jnp.asarray((index[:, None] // powers[None, :]) % vocab_size, dtype=jnp.int32)


def output_tokens(output_ids: jax.Array, vocab_size: int, seq_len: int) -> jax.Array:
    """The tokens of outputs named by their enumeration index, int32 (n,) -> int32 (n, L): `enumerate_outputs`'s rows.

    Indices are non-negative, so lax's truncating division and remainder give floor's results without the sign
    handling jnp's // and % compile to, written out in every judge loss that scores outputs by index.
    """
    ids, places = jnp.broadcast_arrays(
        output_ids.astype(jnp.int32)[:, None], jnp.asarray(vocab_size ** np.arange(seq_len - 1, -1, -1), jnp.int32)
    )
    return jax.lax.rem(jax.lax.div(ids, places), vocab_size)


def output_index(tokens: jax.Array, vocab_size: int) -> jax.Array:
    """The inverse of `enumerate_outputs`.

    Args:
      tokens: int32 (..., L) sequences.
      vocab_size: K.

    Returns:
      int32 (...): each sequence's index in the enumeration.
    """
    seq_len = tokens.shape[-1]
    powers = vocab_size ** jnp.arange(seq_len - 1, -1, -1, dtype=jnp.int32)
    return jnp.sum(tokens * powers, axis=-1).astype(jnp.int32)


def ground_truth_quality(config: WorldConfig, outputs: jax.Array) -> jax.Array:
    """The hidden ground truth by the world's recipe.

    "separable" (the default, the published lab's): q*(x) = sum_i w_position[i] * w_token[x_i] + sum_i w_pair[i, x_i],
    the weights standard normal draws from `config.q_star_seed` (w_pair scaled by `config.pair_scale`).
    "rugged": `rugged_quality`.

    Args:
      config: the world's settings.
      outputs: int32 (N, L), as `enumerate_outputs` gives them.

    Returns:
      float32 (N,): q* of each output.
    """
    if config.q_star == "rugged":
        return rugged_quality(config, outputs)
    k_position, k_token, k_pair = jax.random.split(jax.random.PRNGKey(config.q_star_seed), 3)
    w_position = jax.random.normal(k_position, (config.seq_len,))
    w_token = jax.random.normal(k_token, (config.vocab_size,))
    w_pair = config.pair_scale * jax.random.normal(k_pair, (config.seq_len, config.vocab_size))
    positions = jnp.arange(config.seq_len)[None, :]
    return jnp.sum(w_position[None, :] * w_token[outputs], axis=1) + jnp.sum(w_pair[positions, outputs], axis=1)


def rugged_tables(config: WorldConfig) -> jax.Array:
    """The rugged world's per-position tables: float32 (L, K**(N+1)), standard normal from `config.q_star_seed`.

    Entry [i, c] is position i's contribution when its neighbourhood (x_i, x_{i+1}, ..., x_{i+N}, positions mod L)
    reads the base-K digits of c, x_i most significant.
    """
    width = config.vocab_size ** (config.interaction_order + 1)
    return jax.random.normal(jax.random.PRNGKey(config.q_star_seed), (config.seq_len, width))


def rugged_quality(config: WorldConfig, outputs: jax.Array) -> jax.Array:
    """An NK landscape: q*(x) = sum_i T[i, (x_i, x_{i+1}, ..., x_{i+N})], N = `config.interaction_order`.

    Each position's term reads its own token and the N positions after it, cyclically (position i + j mod L), from
    a table of independent standard normal draws per position (`rugged_tables`). N = 0 gives a separable world
    (a sum of per-position terms, q*(x) = sum_i T[i, x_i]); each further neighbour makes the landscape more rugged:
    more local optima under single-token changes, and a per-position view of quality less informative.

    Args:
      config: the world's settings (q_star = "rugged"; pair_scale is not used).
      outputs: int32 (N_out, L), as `enumerate_outputs` gives them.

    Returns:
      float32 (N_out,): q* of each output.
    """
    seq_len, order = config.seq_len, config.interaction_order
    neighbourhood = (np.arange(seq_len)[:, None] + np.arange(order + 1)[None, :]) % seq_len  # (L, N+1)
    digits = config.vocab_size ** np.arange(order, -1, -1)  # x_i most significant
    codes = jnp.sum(outputs[:, neighbourhood] * digits, axis=-1)  # (N_out, L)
    return jnp.sum(rugged_tables(config)[np.arange(seq_len), codes], axis=1)
