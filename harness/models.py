"""The policy and judge networks (flax linen) and the pure functions that use them.

Both are GRUs with flax's default initializers. The policy is autoregressive over
positions with a learned start token; the judge reads a whole sequence and emits an
unbounded scalar score from its final hidden state.
"""

from __future__ import annotations

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp

EMBED_DIM = 16
HIDDEN_DIM = 32

Params = chex.ArrayTree


class Policy(nn.Module):
    """Autoregressive GRU policy. Token index `vocab_size` is the learned start token."""

    vocab_size: int

    def setup(self) -> None:
        self.embed = nn.Embed(self.vocab_size + 1, EMBED_DIM)
        self.cell = nn.GRUCell(HIDDEN_DIM)
        self.head = nn.Dense(self.vocab_size)

    def step(self, hidden: jax.Array, token: jax.Array) -> tuple[jax.Array, jax.Array]:
        """One position: hidden (B, H), previous token (B,) -> new hidden (B, H), logits (B, K)."""
        hidden, _ = self.cell(hidden, self.embed(token))
        return hidden, self.head(hidden)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """Teacher-forced next-token logits: tokens int32 (B, L) -> float32 (B, L, K)."""
        batch, seq_len = tokens.shape
        hidden = jnp.zeros((batch, HIDDEN_DIM))
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

    def setup(self) -> None:
        self.embed = nn.Embed(self.vocab_size, EMBED_DIM)
        self.cell = nn.GRUCell(HIDDEN_DIM)
        self.head = nn.Dense(1)

    def read(self, hidden: jax.Array, tokens: jax.Array) -> jax.Array:
        """Advance hidden (B, H) by one token each (B,)."""
        hidden, _ = self.cell(hidden, self.embed(tokens))
        return hidden

    def score_hidden(self, hidden: jax.Array) -> jax.Array:
        """Final hidden states (B, H) -> scores (B,)."""
        return self.head(hidden)[:, 0]

    def __call__(self, tokens: jax.Array) -> jax.Array:
        hidden = jnp.zeros((tokens.shape[0], HIDDEN_DIM))
        for position in range(tokens.shape[1]):
            hidden = self.read(hidden, tokens[:, position])
        return self.score_hidden(hidden)


def init_policy(key: jax.Array, vocab_size: int, seq_len: int) -> Params:
    return Policy(vocab_size).init(key, jnp.zeros((1, seq_len), jnp.int32))


def init_judge(key: jax.Array, vocab_size: int, seq_len: int) -> Params:
    return Judge(vocab_size).init(key, jnp.zeros((1, seq_len), jnp.int32))


def judge_scores(params: Params, tokens: jax.Array, vocab_size: int) -> jax.Array:
    """Scores of a batch: tokens int32 (B, L) -> float32 (B,)."""
    return Judge(vocab_size).apply(params, tokens)


def policy_log_prob(params: Params, tokens: jax.Array, vocab_size: int) -> jax.Array:
    """Teacher-forced log π(x): tokens int32 (B, L) -> float32 (B,)."""
    log_probs = jax.nn.log_softmax(Policy(vocab_size).apply(params, tokens), axis=-1)
    return jnp.sum(jnp.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0], axis=-1)


def sample_with_log_prob(
    params: Params, key: jax.Array, batch_size: int, vocab_size: int, seq_len: int
) -> tuple[jax.Array, jax.Array]:
    """Draw sequences autoregressively, feeding each sampled token back.

    Returns tokens int32 (B, L) and their log π (B,). The tokens are discrete, so
    differentiating the log-probability through this function gives the REINFORCE
    score function with a single forward pass.
    """
    policy = Policy(vocab_size)
    hidden = jnp.zeros((batch_size, HIDDEN_DIM))
    previous = jnp.full((batch_size,), vocab_size, dtype=jnp.int32)
    tokens, log_prob = [], jnp.zeros((batch_size,))
    for position_key in jax.random.split(key, seq_len):
        hidden, logits = policy.apply(params, hidden, previous, method=Policy.step)
        log_probs = jax.nn.log_softmax(logits, axis=-1)
        previous = jax.random.categorical(position_key, jax.lax.stop_gradient(logits), axis=-1)
        log_prob = log_prob + jnp.take_along_axis(log_probs, previous[:, None], axis=-1)[:, 0]
        tokens.append(previous)
    return jnp.stack(tokens, axis=1).astype(jnp.int32), log_prob


def policy_log_prob_table(params: Params, vocab_size: int, seq_len: int) -> jax.Array:
    """log π(x) for every output, in enumeration order: float32 (K**L,).

    Walks the prefix tree (K + K**2 + ... cell evaluations instead of L * K**L), so
    the exact distribution is cheap enough to recompute every iteration.
    """
    policy = Policy(vocab_size)
    hidden = jnp.zeros((1, HIDDEN_DIM))
    previous = jnp.full((1,), vocab_size, dtype=jnp.int32)
    prefix_log_prob = jnp.zeros((1,))
    for position in range(seq_len):
        hidden, logits = policy.apply(params, hidden, previous, method=Policy.step)
        # Prefix p followed by token t becomes output p * K + t: lexicographic order.
        prefix_log_prob = (prefix_log_prob[:, None] + jax.nn.log_softmax(logits, -1)).reshape(-1)
        if position + 1 < seq_len:
            n_prefixes = hidden.shape[0]
            hidden = jnp.repeat(hidden, vocab_size, axis=0)
            previous = jnp.tile(jnp.arange(vocab_size, dtype=jnp.int32), n_prefixes)
    return prefix_log_prob


def judge_score_table(params: Params, vocab_size: int, seq_len: int) -> jax.Array:
    """Judge score of every output, in enumeration order: float32 (K**L,), via the prefix tree."""
    judge = Judge(vocab_size)
    hidden = jnp.zeros((1, HIDDEN_DIM))
    for _ in range(seq_len):
        n_prefixes = hidden.shape[0]
        hidden = jnp.repeat(hidden, vocab_size, axis=0)
        tokens = jnp.tile(jnp.arange(vocab_size, dtype=jnp.int32), n_prefixes)
        hidden = judge.apply(params, hidden, tokens, method=Judge.read)
    return judge.apply(params, hidden, method=Judge.score_hidden)
