"""How much memory a grid needs, estimated from its shapes before anything is compiled."""

from __future__ import annotations

from pathlib import Path

from harness.engine.models import EMBED_DIM, HIDDEN_DIM
from harness.grid.layout import GridShape

FLOAT_BYTES = 4
# Live copies of the parameter-sized state during a step: params, Adam's two moments,
# gradients, the updated copies and the kept-back copies for masked selects.
STATE_COPIES = 8
# Activations kept for the backward pass of one GRU step, in units of (batch × 3H) floats.
ACTIVATION_FACTOR = 6


def parameter_count(vocab_size: int) -> tuple[int, int]:
    """(policy, judge) parameter counts of the networks in harness.engine.models."""
    gru = 3 * (EMBED_DIM * HIDDEN_DIM + HIDDEN_DIM) + 3 * HIDDEN_DIM * HIDDEN_DIM + HIDDEN_DIM
    policy = (vocab_size + 1) * EMBED_DIM + gru + HIDDEN_DIM * vocab_size + vocab_size
    judge = vocab_size * EMBED_DIM + gru + HIDDEN_DIM + 1
    return policy, judge


def estimate_bytes(shape: GridShape) -> int:
    """Peak bytes of one outer iteration of a grid, from its static shape (a deliberate over-estimate)."""
    n_outputs = shape.vocab_size**shape.seq_len
    policy, judge = parameter_count(shape.vocab_size)
    state = STATE_COPIES * (shape.n_runs * policy + 2 * shape.n_slots * judge)  # judges: live + pretrained
    state += shape.n_runs * (shape.history_depth + 1) * policy  # checkpoints for past sides, and π₀ rows
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
    return FLOAT_BYTES * (state + per_step + holdout + diagnostics)


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
