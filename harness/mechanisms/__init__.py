"""The built-in mechanisms, one module each (`harness.grid.contract.Mechanism`).

`BUILT_IN` is their order: the order of their knobs, of their rows within a stage, of their hooks and of
their metrics' columns. A mechanism of a lab's own is a module of the same form, loaded by a condition file
(`[mechanisms] modules = [...]`) or registered from Python (`harness.register_mechanism`); it comes after these.
"""

from __future__ import annotations

from harness.grid.registry import register_built_ins
from harness.mechanisms import (
    anchor,
    best_of_n,
    ensemble,
    entropy_bonus,
    entropy_regularization,
    gold_reward,
    judge_data,
    judge_ema,
    judge_strength,
    judge_update,
    kl_penalty,
    learning_rates,
    meta_correction,
    noisy_gold_reward,
    pair_audit,
    pair_sources,
    referee,
    reset,
)

BUILT_IN = (
    judge_update.MECHANISM,
    ensemble.MECHANISM,
    reset.MECHANISM,
    anchor.MECHANISM,
    meta_correction.MECHANISM,
    pair_sources.MECHANISM,
    pair_audit.MECHANISM,
    referee.MECHANISM,
    judge_ema.MECHANISM,
    entropy_bonus.MECHANISM,
    entropy_regularization.MECHANISM,
    learning_rates.MECHANISM,
    judge_strength.MECHANISM,
    gold_reward.MECHANISM,
    noisy_gold_reward.MECHANISM,
    kl_penalty.MECHANISM,
    judge_data.MECHANISM,
    best_of_n.MECHANISM,
)

# Importing this package is what puts the built-ins in the catalog, first and in this order.
register_built_ins(BUILT_IN, __name__)
