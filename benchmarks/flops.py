"""FLOP counts of one inner step and of the diagnostics: XLA's cost analysis of the compiled programs, and the
matmul FLOPs counted by hand from the networks' shapes, to set against each other and the machine's peak."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from harness.engine.models import EMBED_DIM, HIDDEN_DIM
from harness.grid import training_step
from harness.grid.diagnostics import diagnose
from harness.grid.trainer import GridTrainer


def xla_flops(compiled: Any) -> float:
    """'flops' of XLA's cost analysis (a dict, or a list of dicts on some versions)."""
    analysis = compiled.cost_analysis()
    if isinstance(analysis, dict):
        analysis = [analysis]
    return float(sum(entry.get("flops", 0.0) for entry in analysis))


def abstract(tree: Any) -> Any:
    return jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype), tree)


def inner_step_flops(program: GridTrainer, state: Any) -> float:
    """XLA's FLOPs of one inner step of every run: the loop body, compiled on its own."""
    assert program.constants is not None
    compiled = (
        jax.jit(functools.partial(training_step.inner_step, program.shape))
        .lower(program.constants, program.layout.knobs, abstract(state), jax.ShapeDtypeStruct((), jnp.int32))
        .compile()
    )
    return xla_flops(compiled)


def diagnostics_flops(program: GridTrainer, state: Any) -> float:
    assert program.constants is not None
    # The whole grid's diagnostics in one program (fillers excluded), not the shards step() runs.
    whole_grid = jax.jit(functools.partial(diagnose, program.shape))
    compiled = whole_grid.lower(program.constants, program.layout.knobs, abstract(state)).compile()
    return xla_flops(compiled)


def gru_forward_flops(batch: int, in_width: int, out_width: int, seq_len: int, heads: int) -> int:
    """Matmul FLOPs (2 per multiply-add) of one fused GRU pass over `seq_len` positions,
    as harness.engine.models runs it.

    Per call: the embedding folded into the input kernels, (in_width, E) @ (E, 3H).
    Per position: one-hot (b, in_width) @ (in_width, 3H); hidden (b, H) @ (H, 3H) except at
    the first position, where the hidden state is zero and the code skips the product.
    Heads: (b, H) @ (H, out_width), `heads` times (every position for the policy, once for a judge).
    """
    hidden = HIDDEN_DIM
    fold = 2 * in_width * EMBED_DIM * 3 * hidden
    inputs = seq_len * 2 * batch * in_width * 3 * hidden
    recurrent = (seq_len - 1) * 2 * batch * hidden * 3 * hidden
    head = heads * 2 * batch * hidden * out_width
    return fold + inputs + recurrent + head


def analytic_flops_per_run_step(batch: int, vocab: int, seq_len: int, n_judges: int = 1) -> dict[str, int]:
    """Matmul FLOPs of one inner step of one run that updates its judges (every step for the baseline).

    Policy: input width vocab + 1 (start token), head width vocab; judge: input width vocab, head width 1.
    Backward passes are counted as 2× their forward pass.
    """
    policy = functools.partial(gru_forward_flops, in_width=vocab + 1, out_width=vocab, seq_len=seq_len, heads=seq_len)
    judge = functools.partial(gru_forward_flops, in_width=vocab, out_width=1, seq_len=seq_len, heads=1)
    parts = {
        "policy sample forward (B)": policy(batch),
        "policy backward (2× forward)": 2 * policy(batch),
        "reward: judge forward (B) × judges": n_judges * judge(batch),
        "judge-update sample forward (2B)": policy(2 * batch),
        "judge BT forward + backward (2B) × judges": n_judges * 3 * judge(2 * batch),
    }
    parts["total"] = sum(parts.values())
    return parts
