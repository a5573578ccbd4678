"""How much memory a grid needs, estimated from its shapes before anything is compiled."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from harness.engine.architecture import DEFAULT_MODEL, ModelConfig, NetworkConfig
from harness.engine.state import initial_state
from harness.grid.contract import GridShape
from harness.grid.training_step import mechanism_states

FLOAT_BYTES = 4
# Live copies of the training state during a step: the state itself, gradients, the updated
# copies and the kept-back copies for masked selects.
STATE_COPIES = 4
# Activations kept for the backward pass of one position of one network, in units of (batch × its
# `activation_width`) floats.
ACTIVATION_FACTOR = 6


def _body_count(network: NetworkConfig, n_tokens: int, seq_len: int) -> int:
    """Parameters of a network without its head: embedding and GRU cell, or embeddings, blocks and final norm."""
    e, h = network.embed_dim, network.hidden_dim
    if network.family == "gru":
        return n_tokens * e + 3 * (e * h + h) + 3 * h * h + h
    # Two norms (scale, bias), query/key/value/out (kernel E×E, bias E), the MLP (E -> H -> E).
    block = 4 * e + 4 * (e * e + e) + (e * h + h) + (h * e + e)
    return (n_tokens + seq_len) * e + network.layers * block + 2 * e


def _feature_width(network: NetworkConfig) -> int:
    """The width the head reads: a GRU's hidden state, an attention stack's residual stream."""
    return network.hidden_dim if network.family == "gru" else network.embed_dim


def parameter_count(vocab_size: int, seq_len: int = 1, model: ModelConfig = DEFAULT_MODEL) -> tuple[int, int]:
    """(policy, judge) parameter counts of the networks in harness.engine.models (GRU) and harness.engine.attention,
    for K = vocab_size tokens, L = seq_len positions (attention's position embeddings; a GRU has none)."""
    policy, judge = model.policy, model.judge
    policy_count = _body_count(policy, vocab_size + 1, seq_len) + _feature_width(policy) * vocab_size + vocab_size
    judge_count = _body_count(judge, vocab_size, seq_len) + _feature_width(judge) + 1
    return policy_count, judge_count


def activation_width(network: NetworkConfig, seq_len: int) -> int:
    """Floats per sequence and position one network keeps for its backward pass, before ACTIVATION_FACTOR: a GRU's
    three gates (3H); an attention block's projections, MLP and attention weights over up to L positions."""
    if network.family == "gru":
        return 3 * network.hidden_dim
    return (
        network.layers * (6 * network.embed_dim + network.hidden_dim + network.heads * seq_len) + 2 * network.embed_dim
    )


def state_bytes(shape: GridShape) -> int:
    """Bytes of a grid's training state (`harness.engine.state.CoevolutionState`), from its fields' shapes: every
    field counts, so a new piece of state needs no term here."""
    policy, judge = parameter_count(shape.vocab_size, shape.seq_len, shape.model)
    state = jax.eval_shape(
        lambda policies, judges, keys: initial_state(
            policies, judges, keys, *mechanism_states(shape, policies, judges)
        ),
        jax.ShapeDtypeStruct((shape.n_runs, policy), jnp.float32),
        jax.ShapeDtypeStruct((shape.n_slots, judge), jnp.float32),
        jax.ShapeDtypeStruct((shape.n_runs, 2), jnp.uint32),
    )
    return sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in jax.tree.leaves(state))


def estimate_bytes(shape: GridShape) -> int:
    """Peak bytes of one outer iteration of a grid, from its static shape (a deliberate over-estimate)."""
    n_outputs = shape.vocab_size**shape.seq_len
    policy, judge = parameter_count(shape.vocab_size, shape.seq_len, shape.model)
    policy_width = activation_width(shape.model.policy, shape.seq_len)
    judge_width = activation_width(shape.model.judge, shape.seq_len)
    constants = shape.n_slots * judge + shape.n_runs * policy  # pretrained judges, π₀ rows
    per_step = (
        ACTIVATION_FACTOR
        * shape.seq_len
        * 2
        * shape.batch_size
        * (shape.n_runs * policy_width + shape.n_slots * judge_width)
    )
    # Exact diagnostics: every run's distribution and every judge's score table over all outputs, plus the
    # activations behind them: a GRU's prefix-tree hidden states (2H per output), an attention network's
    # L positions per output (the policy's pass over prefixes is K times smaller; counted as the judge's).
    diagnostics = n_outputs * (
        shape.n_runs * (4 + 2 * _table_width(shape.model.policy, shape.seq_len))
        + shape.n_slots * (4 + 2 * _table_width(shape.model.judge, shape.seq_len))
    )
    mechanisms = sum(m.extra_bytes(shape) for m in shape.mechanisms if m.extra_bytes is not None)
    return STATE_COPIES * state_bytes(shape) + FLOAT_BYTES * (constants + per_step + diagnostics) + mechanisms


def _table_width(network: NetworkConfig, seq_len: int) -> int:
    """Floats per output behind an exact table, halved: a GRU's hidden width, an attention stack's activations."""
    if network.family == "gru":
        return network.hidden_dim
    return seq_len * activation_width(network, seq_len) // 2


def available_bytes() -> int | None:
    """Memory the OS reports as available now (Linux), else None."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class GridTooLarge(MemoryError):
    """The grid would not fit in memory; the message gives the estimate and what to change."""


def check_fits(shape: GridShape, n_seeds: int, budget: int | None = None, fraction: float = 0.8) -> int:
    """Raise GridTooLarge if the estimate exceeds `fraction` of available memory; returns the estimate."""
    needed = estimate_bytes(shape)
    budget = budget if budget is not None else available_bytes()
    if budget is None:
        return needed
    if needed > fraction * budget:
        per_seed = needed / max(n_seeds, 1)
        fitting = max(int(fraction * budget // per_seed), 0)
        raise GridTooLarge(
            f"the grid needs about {needed / 2**30:.1f} GiB but {budget / 2**30:.1f} GiB is available; "
            f"run fewer seeds per grid (about {fitting} would fit) or fewer conditions"
        )
    return needed
