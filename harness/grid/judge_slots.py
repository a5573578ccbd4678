"""Each run's judge slots, and the judge pair batch a run's judges train on: what the loop, the diagnostics and a
row's member context (`harness.grid.member_context`) share."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from harness.engine import learning, streams
from harness.grid.batching import WorkGroup
from harness.grid.contract import GridConstants, GridShape, PairSides


def run_judge_slots(shape: GridShape, constants: GridConstants) -> tuple[jax.Array, jax.Array]:
    """Each run's judge slots padded to the largest ensemble: slot ids int32 (R, M) and which are real (R, M)."""
    member = jnp.arange(shape.max_members)
    members = member[None, :] < constants.run_judges[:, None]
    slots = jnp.where(members, constants.run_first_slot[:, None] + member[None, :], constants.run_first_slot[:, None])
    return slots, members


def pair_tokens(
    shape: GridShape, sides: PairSides, keys: streams.StepKeys, group: WorkGroup
) -> tuple[jax.Array, jax.Array]:
    """The judge pair batch of each slot of `group`: chosen and rejected tokens (Jg, B, L) each, drawn with the
    run's judge-pair noise from its sides' policy rows (one batch per run, shared by the run's judges)."""
    batch, vocab, seq_len = shape.batch_size, shape.vocab_size, shape.seq_len
    pair_noise = partial(streams.judge_pair_noise, shape.streams, batch=batch, vocab=vocab, seq_len=seq_len)
    sample = jax.vmap(partial(learning.sample, vocab=vocab, model=shape.model))
    runs = group.run_ids
    noise = jax.vmap(pair_noise)(keys.judge_pairs[runs])
    chosen_rows, rejected_rows = sides.chosen[runs], sides.rejected[runs]
    chosen, _ = sample(chosen_rows, noise[:, :, :batch])
    rejected, _ = sample(rejected_rows, noise[:, :, batch:])
    return chosen[group.slot_position], rejected[group.slot_position]
