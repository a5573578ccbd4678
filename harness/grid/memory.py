"""How much memory a grid needs, estimated from its shapes before anything is compiled."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from harness.engine.models import EMBED_DIM, HIDDEN_DIM
from harness.engine.state import initial_state
from harness.grid.layout import GridShape

FLOAT_BYTES = 4
# Live copies of the training state during a step: the state itself, gradients, the updated
# copies and the kept-back copies for masked selects.
STATE_COPIES = 4
# Activations kept for the backward pass of one GRU step, in units of (batch × 3H) floats.
ACTIVATION_FACTOR = 6


def parameter_count(vocab_size: int) -> tuple[int, int]:
    """(policy, judge) parameter counts of the networks in harness.engine.models."""
    gru = 3 * (EMBED_DIM * HIDDEN_DIM + HIDDEN_DIM) + 3 * HIDDEN_DIM * HIDDEN_DIM + HIDDEN_DIM
    policy = (vocab_size + 1) * EMBED_DIM + gru + HIDDEN_DIM * vocab_size + vocab_size
    judge = vocab_size * EMBED_DIM + gru + HIDDEN_DIM + 1
    return policy, judge


def state_bytes(shape: GridShape) -> int:
    """Bytes of a grid's training state (`harness.engine.state.CoevolutionState`), from its fields' shapes: every
    field counts, so a new piece of state needs no term here."""
    policy, judge = parameter_count(shape.vocab_size)
    state = jax.eval_shape(
        lambda policies, judges, keys: initial_state(policies, judges, keys, shape.history_depth),
        jax.ShapeDtypeStruct((shape.n_runs, policy), jnp.float32),
        jax.ShapeDtypeStruct((shape.n_slots, judge), jnp.float32),
        jax.ShapeDtypeStruct((shape.n_runs, 2), jnp.uint32),
    )
    return sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in jax.tree.leaves(state))


def estimate_bytes(shape: GridShape) -> int:
    """Peak bytes of one outer iteration of a grid, from its static shape (a deliberate over-estimate)."""
    n_outputs = shape.vocab_size**shape.seq_len
    policy, judge = parameter_count(shape.vocab_size)
    constants = shape.n_slots * judge + shape.n_runs * policy  # pretrained judges, π₀ rows
    per_step = (
        ACTIVATION_FACTOR * 3 * HIDDEN_DIM * shape.seq_len * 2 * shape.batch_size * (shape.n_runs + shape.n_slots)
    )
    holdout = (
        shape.slots_of("meta_correction")
        * (n_outputs // shape.vocab_size + 2 * shape.max_holdout_pairs)
        * 3
        * HIDDEN_DIM
        * 3
    )
    # Exact diagnostics: every run's distribution and every judge's score table over all outputs,
    # plus the prefix-tree hidden states behind them.
    diagnostics = (shape.n_runs + shape.n_slots) * n_outputs * (4 + 2 * HIDDEN_DIM)
    return STATE_COPIES * state_bytes(shape) + FLOAT_BYTES * (constants + per_step + holdout + diagnostics)


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
