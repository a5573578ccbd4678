"""What a judge is pretrained on: fresh draws every step (the default), or a fixed dataset of its own; with a share of
its labels corrupted.

Pretraining regresses the judge's score on a noisy q* by mean squared error (`harness.grid.pretrain`): an example is
an output x, drawn uniformly from all N outputs, with the label q*(x) + σε (σ = `[pretrain] label_noise`, ε standard
normal). A condition chooses, per judge (`harness.grid.contract.PretrainData`):

- **examples** E: 0 (the default) draws every step's batch afresh, B examples from fold_in(data key, step), as
  before. E > 0 draws a fixed dataset once from the judge's data key, E outputs with their noisy labels, and every
  step's batch picks B of its examples uniformly, with replacement; the judge never sees any other output, so at
  most E distinct outputs (fewer where the draw repeats one).
- **corruption** c: a corrupted example's label is q*(z) + σε for an output z drawn uniformly from all N,
  independently of x (it may be x itself, with chance 1/N): the label of another output. In a dataset exactly
  ⌊c·E + ½⌋ of its E examples are corrupted (a uniformly random subset, fixed with the dataset); with fresh draws
  each example is corrupted with probability c.

What corruption does to the pairwise order. For two examples of independent outputs x, y (ties of q* aside and σ
→ 0), the labels order the pair as q* does when both are clean; when one is corrupted, the pair's label order is
wrong exactly when q*(x) lies between q*(y) and q*(z), which for three independent outputs has chance 1/3; when
both are, the labels are q* of two outputs independent of x and y, wrong with chance 1/2. So a share
2c(1 − c)/3 + c²/2 of random pairs is ordered wrongly (0.185 at c = 0.3). With fresh draws the regression's
population optimum is E[label | x] = (1 − c)·q*(x) + c·mean(q*), which has q*'s order: corruption then only adds
noise to the gradient. In a fixed dataset each output is seen a few times at most, so its corrupted labels are
errors the judge can fit: label corruption orders outputs wrongly only through finite data.

Keys: the dataset comes from fold_in(data key, 2³² − 1) and a step's corruption draws from fold_in(step key,
2³² − 1), values that no step count and no split index reaches (under JAX's partitionable threefry, split(key)[i]
is fold_in(key, i)), so a judge with neither choice draws exactly what it drew before they existed.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

# fold_in data for the streams above: never a step count (pretraining stops far below it) nor a split index.
DATASET_STREAM = 2**32 - 1
CORRUPTION_STREAM = 2**32 - 1


class JudgeData(NamedTuple):
    """One judge's pretraining data choices, as arrays (a leading judge axis where many): examples int32 (0: fresh
    draws), corruption float32 (the share c), and its dataset, padded to the program's largest: index int32 (D,) the
    outputs, label float32 (D,), corrupted bool (D,); entries at and past `examples` are never picked."""

    examples: jax.Array
    corruption: jax.Array
    index: jax.Array
    label: jax.Array
    corrupted: jax.Array


def corrupted_count(examples: jax.Array, corruption: jax.Array) -> jax.Array:
    """⌊c·E + ½⌋: how many of a dataset's E examples are corrupted, int32."""
    return jnp.floor(corruption * examples.astype(jnp.float32) + 0.5).astype(jnp.int32)


def pretraining_dataset(
    data_key: jax.Array, examples: jax.Array, corruption: jax.Array, size: int, q_star: jax.Array, label_noise: float
) -> JudgeData:
    """A judge's fixed dataset: `examples` outputs drawn uniformly with their noisy labels, the corrupted ones (a
    uniform subset of exactly `corrupted_count`) labelled by another uniformly drawn output's q*, padded to `size`
    (static; 0 gives empty arrays). Drawn from fold_in(data_key, DATASET_STREAM)."""
    k_outputs, k_noise, k_subset, k_other = jax.random.split(jax.random.fold_in(data_key, DATASET_STREAM), 4)
    n_outputs = q_star.shape[0]
    index = jax.random.randint(k_outputs, (size,), 0, n_outputs)
    noise = label_noise * jax.random.normal(k_noise, (size,))
    position = jnp.arange(size)
    # A uniform subset of the first E entries: the C with the smallest uniform keys (padding ranks last).
    keys = jnp.where(position < examples, jax.random.uniform(k_subset, (size,)), 2.0)
    rank = jnp.argsort(jnp.argsort(keys))
    corrupted = (rank < corrupted_count(examples, corruption)) & (position < examples)
    other = jax.random.randint(k_other, (size,), 0, n_outputs)
    label = jnp.where(corrupted, q_star[other], q_star[index]) + noise
    return JudgeData(examples, corruption, index, label, corrupted)


def no_dataset(examples: jax.Array, corruption: jax.Array) -> JudgeData:
    """Judges' data choices without a dataset (every judge of the program draws afresh); examples and corruption of
    any leading shape, e.g. one entry per judge."""
    empty = jnp.zeros((*jnp.shape(examples), 0), jnp.int32)
    return JudgeData(examples, corruption, empty, empty.astype(jnp.float32), empty.astype(bool))


def pretraining_batch(
    data: JudgeData,
    step_key: jax.Array,
    k_index: jax.Array,
    k_noise: jax.Array,
    q_star: jax.Array,
    batch_size: int,
    label_noise: float,
    corrupts: bool,
) -> tuple[jax.Array, jax.Array]:
    """One step's batch of one judge: outputs int32 (B,) and labels float32 (B,).

    k_index, k_noise: the step's keys for fresh draws (the pretraining's own split of `step_key`); a dataset's
    examples are picked with k_index. corrupts (static): whether any judge of the program corrupts labels; where
    none does, no further key is drawn.
    """
    n_outputs = q_star.shape[0]
    index = jax.random.randint(k_index, (batch_size,), 0, n_outputs)
    noise = label_noise * jax.random.normal(k_noise, (batch_size,))
    label = q_star[index] + noise
    if corrupts:
        k_which, k_other = jax.random.split(jax.random.fold_in(step_key, CORRUPTION_STREAM))
        which = jax.random.bernoulli(k_which, data.corruption, (batch_size,))
        other = jax.random.randint(k_other, (batch_size,), 0, n_outputs)
        label = jnp.where(which, q_star[other] + noise, label)
    if data.index.shape[-1]:
        pick = jax.random.randint(k_index, (batch_size,), 0, jnp.maximum(data.examples, 1))
        from_dataset = data.examples > 0
        index = jnp.where(from_dataset, data.index[pick], index)
        label = jnp.where(from_dataset, data.label[pick], label)
    return index, label
