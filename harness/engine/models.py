"""The policy and judge networks (flax linen) and the pure functions that use them.

Two families (`harness.engine.architecture`): GRUs, defined here, and self-attention networks
(`harness.engine.attention`). Both use flax's default initializers. The policy is autoregressive over
positions with a learned start token; the judge reads a whole sequence and emits an unbounded scalar
score (a GRU's from its final hidden state). Every public function takes either family's parameters
and dispatches on their structure, which is static under tracing; the GRU's are the defaults.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

from harness.engine import attention
from harness.engine.architecture import DEFAULT_NETWORK, EMBED_DIM, HIDDEN_DIM, NetworkConfig
from harness.engine.world import LARGE_WORLD_OUTPUTS, output_tokens

__all__ = ["EMBED_DIM", "HIDDEN_DIM"]  # today's sizes, re-exported for the original lab's restated networks

Params = chex.ArrayTree


class Policy(nn.Module):
    """Autoregressive GRU policy. Token index `vocab_size` is the learned start token."""

    vocab_size: int
    embed_dim: int = EMBED_DIM
    hidden_dim: int = HIDDEN_DIM

    def setup(self) -> None:
        self.embed = nn.Embed(self.vocab_size + 1, self.embed_dim)
        self.cell = nn.GRUCell(self.hidden_dim)
        self.head = nn.Dense(self.vocab_size)

    def step(self, hidden: jax.Array, token: jax.Array) -> tuple[jax.Array, jax.Array]:
        """One position: hidden (B, H), previous token (B,) -> new hidden (B, H), logits (B, K)."""
        hidden, _ = self.cell(hidden, self.embed(token))
        return hidden, self.head(hidden)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """Teacher-forced next-token logits: tokens int32 (B, L) -> float32 (B, L, K)."""
        batch, seq_len = tokens.shape
        hidden = jnp.zeros((batch, self.hidden_dim))
        previous = jnp.full((batch,), self.vocab_size, dtype=jnp.int32)
        logits = []
        for position in range(seq_len):
            hidden, position_logits = self.step(hidden, previous)
            logits.append(position_logits)
            previous = tokens[:, position]
        return jnp.stack(logits, axis=1)


class Judge(nn.Module):
    """GRU sequence scorer: tokens int32 (B, L) -> unbounded float32 scores (B,)."""

    vocab_size: int
    embed_dim: int = EMBED_DIM
    hidden_dim: int = HIDDEN_DIM

    def setup(self) -> None:
        self.embed = nn.Embed(self.vocab_size, self.embed_dim)
        self.cell = nn.GRUCell(self.hidden_dim)
        self.head = nn.Dense(1)

    def read(self, hidden: jax.Array, tokens: jax.Array) -> jax.Array:
        """Advance hidden (B, H) by one token each (B,)."""
        hidden, _ = self.cell(hidden, self.embed(tokens))
        return hidden

    def score_hidden(self, hidden: jax.Array) -> jax.Array:
        """Final hidden states (B, H) -> scores (B,)."""
        return self.head(hidden)[:, 0]

    def __call__(self, tokens: jax.Array) -> jax.Array:
        hidden = jnp.zeros((tokens.shape[0], self.hidden_dim))
        for position in range(tokens.shape[1]):
            hidden = self.read(hidden, tokens[:, position])
        return self.score_hidden(hidden)


def init_policy(key: jax.Array, vocab_size: int, seq_len: int, network: NetworkConfig = DEFAULT_NETWORK) -> Params:
    """A policy's parameters with flax's default initialisers.

    Args:
      key: PRNG key (2,).
      vocab_size: K, the number of tokens (the start token is one more embedding row).
      seq_len: L; a GRU's parameters do not depend on it (its weights are shared over positions), an attention
        network's position embeddings do.
      network: the family and sizes.

    Returns:
      The parameter pytree; a GRU's: embed (K + 1, E), cell (GRU, E -> H), head (H -> K).
    """
    if network.family == "attention":
        return attention.init_policy(key, vocab_size, seq_len, network)
    policy = Policy(vocab_size, network.embed_dim, network.hidden_dim)
    return policy.init(key, jnp.zeros((1, seq_len), jnp.int32))


def init_judge(key: jax.Array, vocab_size: int, seq_len: int, network: NetworkConfig = DEFAULT_NETWORK) -> Params:
    """A judge's parameters with flax's default initialisers.

    Args:
      key: PRNG key (2,).
      vocab_size: K, the number of tokens.
      seq_len: L; as in `init_policy`.
      network: the family and sizes.

    Returns:
      The parameter pytree; a GRU's: embed (K, E), cell (GRU, E -> H), head (H -> 1).
    """
    if network.family == "attention":
        return attention.init_judge(key, vocab_size, seq_len, network)
    return Judge(vocab_size, network.embed_dim, network.hidden_dim).init(key, jnp.zeros((1, seq_len), jnp.int32))


# Batched initialisation goes one key at a time (`lax.map`), never through vmap: flax's
# orthogonal recurrent initializer runs a LAPACK QR, and jaxlib 0.10.2 splits a *batched*
# QR across XLA:CPU's intra-op pool and then blocks on it from inside that same pool. When
# every worker does so at once (two cores are enough) the process deadlocks at 0% CPU. An
# unbatched QR runs inline on its worker. tests/test_models.py checks that no program here
# holds a batched LAPACK call.


def init_policies(keys: jax.Array, vocab_size: int, seq_len: int, network: NetworkConfig = DEFAULT_NETWORK) -> Params:
    """Keys (N, 2) -> N policies' parameters stacked on a leading axis."""
    return jax.lax.map(lambda key: init_policy(key, vocab_size, seq_len, network), keys)


def init_judges(keys: jax.Array, vocab_size: int, seq_len: int, network: NetworkConfig = DEFAULT_NETWORK) -> Params:
    """Keys (N, 2) -> N judges' parameters stacked on a leading axis."""
    return jax.lax.map(lambda key: init_judge(key, vocab_size, seq_len, network), keys)


class _GRUTables(NamedTuple):
    """A flax GRUCell's weights rearranged for fused evaluation."""

    token_inputs: jax.Array  # (V, 3H): embedding @ [W_ir | W_iz | W_in] + [b_ir | b_iz | b_in]
    recurrent_kernel: jax.Array  # (H, 3H): [W_hr | W_hz | W_hn]
    recurrent_bias: jax.Array  # (H,): b_hn


def _gru_tables(params: Params) -> _GRUTables:
    """Fold the embedding into the cell's input kernels; stack the recurrent kernels."""
    cell = params["params"]["cell"]
    gates = ("r", "z", "n")
    input_kernel = jnp.concatenate([cell[f"i{g}"]["kernel"] for g in gates], axis=1)
    input_bias = jnp.concatenate([cell[f"i{g}"]["bias"] for g in gates])
    return _GRUTables(
        token_inputs=params["params"]["embed"]["embedding"] @ input_kernel + input_bias,
        recurrent_kernel=jnp.concatenate([cell[f"h{g}"]["kernel"] for g in gates], axis=1),
        recurrent_bias=cell["hn"]["bias"],
    )


def _gru_step(tables: _GRUTables, hidden: jax.Array | None, tokens: jax.Array) -> jax.Array:
    """flax's GRUCell update, fused: two matmuls per step instead of six, none when hidden is zero.

    hidden (B, H) or None for the all-zero initial state; tokens int32 (B,) -> new hidden (B, H).
    A one-hot product stands in for the embedding gather so its gradient is a matmul,
    not a scatter.
    """
    size = tables.recurrent_bias.shape[0]
    inputs = jax.nn.one_hot(tokens, tables.token_inputs.shape[0]) @ tables.token_inputs
    if hidden is None:
        recurrent = jnp.zeros((tokens.shape[0], 3 * size))
        hidden = jnp.zeros((tokens.shape[0], size))
    else:
        recurrent = hidden @ tables.recurrent_kernel
    # jnp.split rather than slices: its gradient is one concatenate, a slice's is a pad and an add per gate.
    input_reset, input_update, input_candidate = jnp.split(inputs, 3, axis=1)
    recurrent_reset, recurrent_update, recurrent_candidate = jnp.split(recurrent, 3, axis=1)
    reset = jax.nn.sigmoid(input_reset + recurrent_reset)
    update = jax.nn.sigmoid(input_update + recurrent_update)
    candidate = jnp.tanh(input_candidate + reset * (recurrent_candidate + tables.recurrent_bias))
    return (1.0 - update) * candidate + update * hidden


def _head(params: Params, hidden: jax.Array, include_bias: bool = True) -> jax.Array:
    head = params["params"]["head"]
    return hidden @ head["kernel"] + head["bias"] if include_bias else hidden @ head["kernel"]


def judge_scores(params: Params, tokens: jax.Array, vocab_size: int, include_bias: bool = True) -> jax.Array:
    """A judge's scores of a batch of sequences.

    Args:
      params: the judge's parameter pytree.
      tokens: int32 (B, L).
      vocab_size: K (carried by the parameter shapes too).
      include_bias: False drops the head's bias, a constant shift of every score. Pairwise losses use that:
        their true gradient for the bias is exactly zero, but computed as a difference of two sums it is a
        rounding residue, which Adam would normalise into steps of the full learning rate and so random-walk
        the judge's score level.

    Returns:
      float32 (B,): unbounded scores.
    """
    if attention.is_attention(params):
        return attention.judge_scores(params, tokens, include_bias)
    del vocab_size  # carried by the parameter shapes
    tables = _gru_tables(params)
    hidden = None
    for position in range(tokens.shape[1]):
        hidden = _gru_step(tables, hidden, tokens[:, position])
    return _head(params, hidden, include_bias)[:, 0]


def policy_log_prob(params: Params, tokens: jax.Array, vocab_size: int) -> jax.Array:
    """Teacher-forced log-probability of given sequences under a policy.

    Args:
      params: the policy's parameter pytree.
      tokens: int32 (B, L).
      vocab_size: K; token K is the start token.

    Returns:
      float32 (B,): log π(x) of each sequence.
    """
    if attention.is_attention(params):
        return attention.policy_log_prob(params, tokens, vocab_size)
    tables = _gru_tables(params)
    hidden, previous = None, jnp.full((tokens.shape[0],), vocab_size, dtype=jnp.int32)
    log_prob = jnp.zeros((tokens.shape[0],))
    for position in range(tokens.shape[1]):
        hidden = _gru_step(tables, hidden, previous)
        log_probs = jax.nn.log_softmax(_head(params, hidden), axis=-1)
        previous = tokens[:, position]
        log_prob = log_prob + jnp.take_along_axis(log_probs, previous[:, None], axis=-1)[:, 0]
    return log_prob


def position_gumbel_noise(position_keys: jax.Array, batch_size: int, vocab_size: int) -> jax.Array:
    """Gumbel noise (L, B, K) for sampling B sequences, position p's from position_keys[p] ((L, 2) keys).

    jax.random.categorical(k, logits) is argmax(logits + gumbel(k)); drawing every
    position's noise up front is the same numbers from one random-bits kernel instead of L.
    """
    return jax.vmap(lambda k: jax.random.gumbel(k, (batch_size, vocab_size), jnp.float32))(position_keys)


def sample_from_noise(params: Params, noise: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Draw sequences autoregressively with the given Gumbel noise, feeding each token back.

    The tokens are discrete, so differentiating the log-probability through this function gives the
    REINFORCE score function with a single forward pass.

    Args:
      params: the policy's parameter pytree.
      noise: float32 (L, B, K); position p's token is argmax(logits + noise[p]).

    Returns:
      tokens int32 (B, L) and their log π float32 (B,).
    """
    if attention.is_attention(params):
        return attention.sample_from_noise(params, noise)
    tables = _gru_tables(params)
    seq_len, batch_size, vocab_size = noise.shape
    hidden, previous = None, jnp.full((batch_size,), vocab_size, dtype=jnp.int32)
    tokens, log_prob = [], jnp.zeros((batch_size,))
    for position in range(seq_len):
        hidden = _gru_step(tables, hidden, previous)
        logits = _head(params, hidden)
        log_probs = jax.nn.log_softmax(logits, axis=-1)
        previous = jnp.argmax(noise[position] + jax.lax.stop_gradient(logits), axis=-1).astype(jnp.int32)
        log_prob = log_prob + jnp.take_along_axis(log_probs, previous[:, None], axis=-1)[:, 0]
        tokens.append(previous)
    return jnp.stack(tokens, axis=1), log_prob


def sample_with_log_prob(
    params: Params, key: jax.Array, batch_size: int, vocab_size: int, seq_len: int
) -> tuple[jax.Array, jax.Array]:
    """`sample_from_noise` where position p draws jax.random.categorical(split(key, L)[p], logits)."""
    return sample_from_noise(params, position_gumbel_noise(jax.random.split(key, seq_len), batch_size, vocab_size))


def policy_log_prob_table(params: Params, vocab_size: int, seq_len: int) -> jax.Array:
    """log π(x) of every output, exactly.

    A GRU walks the prefix tree (K + K**2 + ... cell evaluations instead of L * K**L), so the exact distribution
    is cheap enough to recompute every iteration; an attention policy makes one causal pass over the K**(L-1)
    prefixes of length L-1 (`harness.engine.attention`).

    Args:
      params: the policy's parameter pytree.
      vocab_size: K.
      seq_len: L.

    Returns:
      float32 (K**L,): log π of each output, in enumeration order (`harness.engine.world.enumerate_outputs`).
    """
    if attention.is_attention(params):
        return attention.policy_log_prob_table(params, vocab_size, seq_len)
    tables = _gru_tables(params)
    hidden, previous = None, jnp.full((1,), vocab_size, dtype=jnp.int32)
    prefix_log_prob = jnp.zeros((1,))
    for position in range(seq_len):
        hidden = _gru_step(tables, hidden, previous)
        # Prefix p followed by token t becomes output p * K + t: lexicographic order.
        log_probs = jax.nn.log_softmax(_head(params, hidden), axis=-1)
        prefix_log_prob = (prefix_log_prob[:, None] + log_probs).reshape(-1)
        if position + 1 < seq_len:
            n_prefixes = hidden.shape[0]
            hidden = jnp.repeat(hidden, vocab_size, axis=0)
            previous = jnp.tile(jnp.arange(vocab_size, dtype=jnp.int32), n_prefixes)
    return prefix_log_prob


@functools.partial(jax.jit, static_argnums=(1, 2))
def policy_log_prob_tables(params: Params, vocab_size: int, seq_len: int) -> jax.Array:
    """`policy_log_prob_table` of policies stacked on a leading axis (V, ...) -> (V, K**L), as one compiled program."""
    return jax.vmap(lambda policy: policy_log_prob_table(policy, vocab_size, seq_len))(params)


def _judge_prefix_hidden(tables: _GRUTables, vocab_size: int, length: int) -> jax.Array:
    """Judge hidden state after every prefix of `length` tokens, lexicographic: (K**length, H)."""
    hidden = None
    for _ in range(length):
        n_prefixes = 1 if hidden is None else hidden.shape[0]
        if hidden is not None:
            hidden = jnp.repeat(hidden, vocab_size, axis=0)
        tokens = jnp.tile(jnp.arange(vocab_size, dtype=jnp.int32), n_prefixes)
        hidden = _gru_step(tables, hidden, tokens)
    return hidden


def judge_score_table(params: Params, vocab_size: int, seq_len: int) -> jax.Array:
    """A judge's score of every output: a GRU's via the prefix tree, an attention judge's one pass over all outputs.

    Args:
      params: the judge's parameter pytree.
      vocab_size: K.
      seq_len: L.

    Returns:
      float32 (K**L,): scores in enumeration order.
    """
    if attention.is_attention(params):
        return attention.judge_score_table(params, vocab_size, seq_len)
    tables = _gru_tables(params)
    prefix_hidden = _judge_prefix_hidden(tables, vocab_size, seq_len - 1)  # (K**(L-1), H); None when L = 1

    def last_level(prefixes: jax.Array | None) -> jax.Array:
        """Scores of every output under the given (L-1)-token prefixes, lexicographic."""
        n_prefixes = 1 if prefixes is None else prefixes.shape[0]
        hidden = None if prefixes is None else jnp.repeat(prefixes, vocab_size, axis=0)
        tokens = jnp.tile(jnp.arange(vocab_size, dtype=jnp.int32), n_prefixes)
        return _head(params, _gru_step(tables, hidden, tokens))[:, 0]

    chunks = score_table_chunks(vocab_size, seq_len)
    if chunks == 1:
        return last_level(prefix_hidden)
    assert prefix_hidden is not None
    by_chunk = prefix_hidden.reshape(chunks, -1, prefix_hidden.shape[-1])  # chunk c: the prefixes c·P/C ... in order
    return jax.lax.map(last_level, by_chunk).reshape(-1)


def score_table_chunks(vocab_size: int, seq_len: int) -> int:
    """How many chunks a GRU score table's last level runs in: K**j for the least j that brings a chunk's outputs
    (K**(L-j)) within LARGE_WORLD_OUTPUTS, so that a chunk is the outputs under j leading tokens.

    The last level of the prefix tree is where a score table's memory goes: (N, 3H) gates for N outputs, once more
    per judge under vmap (0.6 GB for six judges at 8^6); in chunks, one after another, it is a K**j-th of that.
    """
    chunks = 1
    while vocab_size**seq_len // chunks > LARGE_WORLD_OUTPUTS and chunks < vocab_size ** (seq_len - 1):
        chunks *= vocab_size
    return chunks


def judge_scores_of_outputs(
    params: Params, output_ids: jax.Array, vocab_size: int, seq_len: int, include_bias: bool = True
) -> jax.Array:
    """A judge's scores of outputs named by their enumeration index.

    For large n it shares work along the prefix tree: the hidden state after every (L-1)-token prefix once,
    then one cell step per requested output.

    Args:
      params: the judge's parameter pytree.
      output_ids: int32 (n,), indices into the enumeration.
      vocab_size: K.
      seq_len: L.
      include_bias: as in `judge_scores`.

    Returns:
      float32 (n,): the scores.
    """
    if attention.is_attention(params):
        return attention.judge_scores_of_outputs(params, output_ids, vocab_size, seq_len, include_bias)
    tables = _gru_tables(params)
    n_prefixes = vocab_size ** (seq_len - 1)
    if seq_len == 1 or n_prefixes + output_ids.shape[0] >= seq_len * output_ids.shape[0]:
        # The tree would not save work: read each output from the start.
        return judge_scores(params, output_tokens(output_ids, vocab_size, seq_len), vocab_size, include_bias)
    prefix_hidden = _judge_prefix_hidden(tables, vocab_size, seq_len - 1)
    # An output's (L-1)-token prefix and last token: the indices are non-negative, so lax's truncating division
    # and remainder are floor's (see `output_tokens`).
    ids = output_ids.astype(jnp.int32)
    hidden = _gru_step(tables, prefix_hidden[jax.lax.div(ids, vocab_size)], jax.lax.rem(ids, vocab_size))
    return _head(params, hidden, include_bias)[:, 0]
