"""The attention family: a small self-attention policy and judge (flax linen), and the pure functions that use them.

One block is pre-norm: x + Attention(LayerNorm(x)), then x + MLP(LayerNorm(x)) with a ReLU MLP of width H; the
stack is token embeddings plus learned position embeddings, one or two blocks, and a final LayerNorm. Every
initialiser is flax's default.

- The policy is autoregressive: the stack is causal over [start token, x_0 .. x_{L-2}] and a linear head at
  position p gives the logits of x_p (token K is the learned start token).
- The judge reads the whole sequence (no mask), mean-pools the positions and scores with a linear head.

A network's settings (`NetworkConfig`) are carried by its parameter shapes (widths, heads, blocks, positions), so the
functions here take parameters only, as `harness.engine.models`'s GRU functions do.

Exact tables: the policy's log π over all K**L outputs is one causal pass over the K**(L-1) prefixes of length L-1
(causality makes the logits of each position depend on the tokens before it only, so every output's L factors are
read off its prefix's pass): K**(L-1) sequences of L positions, K times cheaper than scoring every output, and the
same work as the GRU's prefix tree's last level. The judge's table is a plain batched evaluation of every output
(it is not causal): K**L sequences of L positions, attention costing L² per head per output.
"""

from __future__ import annotations

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from harness.engine.architecture import NetworkConfig
from harness.engine.world import enumerate_outputs, output_tokens

Params = chex.ArrayTree


class _Block(nn.Module):
    """One pre-norm block: (B, T, E) -> (B, T, E)."""

    hidden_dim: int
    heads: int
    causal: bool

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        embed_dim = x.shape[-1]
        head_dim = embed_dim // self.heads
        normed = nn.LayerNorm(name="attention_norm")(x)
        query, key, value = (
            nn.DenseGeneral((self.heads, head_dim), name=name)(normed) for name in ("query", "key", "value")
        )
        logits = jnp.einsum("bqhd,bkhd->bhqk", query, key) / np.sqrt(head_dim).astype(np.float32)
        if self.causal:
            length = x.shape[1]
            logits = jnp.where(jnp.tril(jnp.ones((length, length), bool)), logits, -jnp.inf)
        attended = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, axis=-1), value)
        x = x + nn.DenseGeneral(embed_dim, axis=(-2, -1), name="out")(attended)
        normed = nn.LayerNorm(name="mlp_norm")(x)
        return x + nn.Dense(embed_dim, name="mlp_out")(nn.relu(nn.Dense(self.hidden_dim, name="mlp_in")(normed)))


class _Stack(nn.Module):
    """Token and position embeddings, the blocks, a final norm: tokens int32 (B, T), T <= seq_len -> (B, T, E)."""

    n_tokens: int
    seq_len: int
    network: NetworkConfig
    causal: bool

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        embed_dim = self.network.embed_dim
        x = nn.Embed(self.n_tokens, embed_dim, name="embed")(tokens)
        x = x + nn.Embed(self.seq_len, embed_dim, name="position")(jnp.arange(tokens.shape[1]))[None]
        for layer in range(self.network.layers):
            x = _Block(self.network.hidden_dim, self.network.heads, self.causal, name=f"block_{layer}")(x)
        return nn.LayerNorm(name="final_norm")(x)


class AttentionPolicy(nn.Module):
    """Causal policy: inputs int32 (B, T) (the start token K, then tokens) -> next-token logits float32 (B, T, K)."""

    vocab_size: int
    seq_len: int
    network: NetworkConfig

    @nn.compact
    def __call__(self, inputs: jax.Array) -> jax.Array:
        hidden = _Stack(self.vocab_size + 1, self.seq_len, self.network, causal=True, name="stack")(inputs)
        return nn.Dense(self.vocab_size, name="head")(hidden)


class AttentionJudge(nn.Module):
    """Sequence scorer: tokens int32 (B, L) -> scores float32 (B,); `features`: the pooled (B, E) the head reads."""

    vocab_size: int
    seq_len: int
    network: NetworkConfig

    def setup(self) -> None:
        self.stack = _Stack(self.vocab_size, self.seq_len, self.network, causal=False)
        self.head = nn.Dense(1)

    def features(self, tokens: jax.Array) -> jax.Array:
        return jnp.mean(self.stack(tokens), axis=1)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        return self.head(self.features(tokens))[:, 0]


def is_attention(params: Params) -> bool:
    """Whether a parameter pytree is this family's (static: it reads the tree's structure, not its values)."""
    return "stack" in params["params"]


def init_policy(key: jax.Array, vocab_size: int, seq_len: int, network: NetworkConfig) -> Params:
    """A policy's parameters: embed (K + 1, E), position (L, E), the blocks, head (E -> K)."""
    return AttentionPolicy(vocab_size, seq_len, network).init(key, jnp.zeros((1, seq_len), jnp.int32))


def init_judge(key: jax.Array, vocab_size: int, seq_len: int, network: NetworkConfig) -> Params:
    """A judge's parameters: embed (K, E), position (L, E), the blocks, head (E -> 1)."""
    return AttentionJudge(vocab_size, seq_len, network).init(key, jnp.zeros((1, seq_len), jnp.int32))


def _shape_of(params: Params) -> tuple[int, int, NetworkConfig]:
    """(embedding rows, positions, settings) read back from a parameter pytree's shapes."""
    stack = params["params"]["stack"]
    n_tokens, embed_dim = stack["embed"]["embedding"].shape
    blocks = sorted(name for name in stack if name.startswith("block_"))
    first = stack[blocks[0]]
    network = NetworkConfig(
        "attention", embed_dim, first["mlp_in"]["kernel"].shape[1], len(blocks), first["query"]["kernel"].shape[1]
    )
    return n_tokens, stack["position"]["embedding"].shape[0], network


def policy_logits(params: Params, inputs: jax.Array) -> jax.Array:
    """Next-token logits: inputs int32 (B, T), T <= L, the start token first -> float32 (B, T, K)."""
    n_tokens, seq_len, network = _shape_of(params)
    return AttentionPolicy(n_tokens - 1, seq_len, network).apply(params, inputs)


def _teacher_inputs(tokens: jax.Array, vocab_size: int) -> jax.Array:
    """[start, x_0 .. x_{L-2}] for sequences (B, L)."""
    start = jnp.full((tokens.shape[0], 1), vocab_size, dtype=jnp.int32)
    return jnp.concatenate([start, tokens[:, :-1]], axis=1)


def policy_log_prob(params: Params, tokens: jax.Array, vocab_size: int) -> jax.Array:
    """Teacher-forced log π of sequences int32 (B, L) -> float32 (B,), one causal pass."""
    log_probs = jax.nn.log_softmax(policy_logits(params, _teacher_inputs(tokens, vocab_size)), axis=-1)
    return jnp.sum(jnp.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0], axis=1)


def sample_from_noise(params: Params, noise: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Draw sequences with Gumbel noise (L, B, K), position p's token argmax(logits + noise[p]).

    The draw re-runs the causal stack on the tokens so far at each position (L passes of growing length, no
    gradient: the tokens are discrete); their log π is one teacher-forced pass, differentiable, equal to the
    draw's own log-probabilities (causality: a position's logits do not depend on what follows it).

    Returns:
      tokens int32 (B, L) and their log π float32 (B,).
    """
    seq_len, batch_size, vocab_size = noise.shape
    frozen = jax.lax.stop_gradient(params)
    inputs = jnp.full((batch_size, 1), vocab_size, dtype=jnp.int32)
    for position in range(seq_len):
        logits = policy_logits(frozen, inputs)[:, position]
        token = jnp.argmax(noise[position] + logits, axis=-1).astype(jnp.int32)
        inputs = jnp.concatenate([inputs, token[:, None]], axis=1)
    tokens = inputs[:, 1:]
    return tokens, policy_log_prob(params, tokens, vocab_size)


def policy_log_prob_table(params: Params, vocab_size: int, seq_len: int) -> jax.Array:
    """log π of every output, exactly, in enumeration order: float32 (K**L,).

    One causal pass over every (L-1)-token prefix: position p < L-1 gives the prefix's own p-th factor, the last
    position the factors of its K continuations; output prefix * K + t is lexicographic order.
    """
    prefixes = enumerate_outputs(vocab_size, seq_len - 1)  # (K**(L-1), L-1)
    start = jnp.full((prefixes.shape[0], 1), vocab_size, dtype=jnp.int32)
    log_probs = jax.nn.log_softmax(policy_logits(params, jnp.concatenate([start, prefixes], axis=1)), axis=-1)
    prefix_log_prob = jnp.sum(jnp.take_along_axis(log_probs[:, :-1], prefixes[..., None], axis=-1)[..., 0], axis=1)
    return (prefix_log_prob[:, None] + log_probs[:, -1]).reshape(-1)


def judge_scores(params: Params, tokens: jax.Array, include_bias: bool = True) -> jax.Array:
    """A judge's scores of sequences int32 (B, L) -> float32 (B,); include_bias as in `models.judge_scores`."""
    n_tokens, seq_len, network = _shape_of(params)
    features = AttentionJudge(n_tokens, seq_len, network).apply(params, tokens, method="features")
    head = params["params"]["head"]
    scores = features @ head["kernel"]
    return (scores + head["bias"] if include_bias else scores)[:, 0]


def judge_score_table(params: Params, vocab_size: int, seq_len: int) -> jax.Array:
    """A judge's score of every output, in enumeration order: float32 (K**L,), one batched pass over all of them."""
    return judge_scores(params, enumerate_outputs(vocab_size, seq_len))


def judge_scores_of_outputs(
    params: Params, output_ids: jax.Array, vocab_size: int, seq_len: int, include_bias: bool = True
) -> jax.Array:
    """Scores float32 (n,) of outputs named by their enumeration index, int32 (n,)."""
    return judge_scores(params, output_tokens(output_ids, vocab_size, seq_len), include_bias)
