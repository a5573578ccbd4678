"""Random streams as a grid setting: every random draw of a training step, under either kind.

``"coevolab"`` (ours, the default): a run's draws at global step s come from
fold_in(training key of its seed, s), split four ways by what they draw, so every
condition of a seed sees the same noise (paired comparisons) and a step's draws do not
depend on earlier ones.

``"original"``: the original lab's (github.com/jmamath/co-evolution-lab, commit 4b1e799;
tests/data/original_lab/STREAMS.md): each run carries one key that every draw splits in
turn, so how far it has advanced depends on the run's own schedule:

- every step: (key, policy batch) = split(key);
- a step with a judge update: (key, x_a, x_b) = split(key, 3), two batches of B;
- then, where the run's judges draw keys of their own on the update (the original's q*-labelled pairs), per judge
  in member order: (key, first, second) = split(key, 3);
- sampling splits its key once per position, (key, draw) = split(key), a chain.

Both kinds are written for one run and carried in `RunState.stream_key`: coevolab's
never changes (the seed's training key), the original's advances. Drawing is split from
key bookkeeping so that the expensive draws run only for the runs that use them.
"""

from __future__ import annotations

import zlib
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp

from harness.engine.models import position_gumbel_noise

Streams = Literal["coevolab", "original"]
STREAMS: tuple[Streams, ...] = ("coevolab", "original")

# coevolab's per-step keys, by what they draw.
_POLICY_SAMPLE, _JUDGE_PAIRS, _MEMBER_DRAWS, _CONTRAST = range(4)
# The original lab has no contrast pairs: their key folds this into its judge-pair key, leaving its chain as it was.
_ORIGINAL_CONTRAST_FOLD = 0x7E5A


class StepKeys(NamedTuple):
    """One run's keys for one inner step (each (2,) unless said).

    policy: draws the policy batch; judge_pairs: the judge's pair batch; members (M, 2): member m's own key for
    what a row draws per judge on the update (M = the grid's largest ensemble); contrast: the key of a step's
    contrast pairs and of any look-ahead's batches; next: the run's stream key after the step.
    """

    policy: jax.Array
    judge_pairs: jax.Array
    members: jax.Array
    contrast: jax.Array
    next: jax.Array


def step_keys(
    streams: Streams,
    stream_key: jax.Array,
    step: jax.Array,
    update_due: jax.Array,
    member_draws: jax.Array,
    max_members: int,
) -> StepKeys:
    """The keys of one run's step `step` (global count) from its stream key.

    update_due: whether this step updates the judge; member_draws: int32, how many of the run's judges draw keys of
    their own on an update (its judge count where a row it runs draws per judge, else 0). Only the original's keys
    depend on it: its chain splits once more per such judge, in member order.
    """
    if streams == "coevolab":
        keys = jax.random.split(jax.random.fold_in(stream_key, step), 4)
        members = jnp.broadcast_to(keys[_MEMBER_DRAWS], (max_members, 2))  # a run's judges share its draws
        return StepKeys(keys[_POLICY_SAMPLE], keys[_JUDGE_PAIRS], members, keys[_CONTRAST], stream_key)
    if streams != "original":
        raise ValueError(f"unknown streams {streams!r}; expected one of {STREAMS}")
    after_policy, policy = jax.random.split(stream_key)
    after_pairs = jax.random.split(after_policy, 3)[0]

    def member_key(key: jax.Array, member: jax.Array) -> tuple[jax.Array, jax.Array]:
        # Member m's draws split the key m-th; members that draw nothing leave it alone.
        advanced = jax.random.split(key, 3)[0]
        return jnp.where(member < member_draws, advanced, key), key

    after_update, members = jax.lax.scan(member_key, after_pairs, jnp.arange(max_members))
    contrast = jax.random.fold_in(after_policy, _ORIGINAL_CONTRAST_FOLD)
    return StepKeys(policy, after_policy, members, contrast, jnp.where(update_due, after_update, after_policy))


def mechanism_stream(name: str) -> int:
    """A mechanism's stream number: the CRC-32 of its name, what its own keys are folded with (`own_keys`)."""
    return zlib.crc32(name.encode())


def own_key(key: jax.Array, name: str) -> jax.Array:
    """Mechanism `name`'s own key (2,) from one key of the loop: `key` folded with the mechanism's stream number."""
    return jax.random.fold_in(key, mechanism_stream(name))


def own_keys(judge_pair_keys: jax.Array, name: str) -> jax.Array:
    """Mechanism `name`'s own key of a step, one per run: each run's judge-pair key of the step (R, 2) folded with
    the mechanism's stream number. A draw from it is independent of every draw the loop makes from that key and of
    every other mechanism's (another name folds another number)."""
    return jax.vmap(lambda key: own_key(key, name))(judge_pair_keys)


def _position_chain(key: jax.Array, seq_len: int) -> jax.Array:
    """The original sampler's per-position draw keys: (key, draw_p) = split(key) for p = 0..L-1 -> (L, 2)."""

    def position(key: jax.Array, _: None) -> tuple[jax.Array, jax.Array]:
        key, draw = jax.random.split(key)
        return key, draw

    return jax.lax.scan(position, key, None, length=seq_len)[1]


def sampling_noise(streams: Streams, key: jax.Array, batch: int, vocab: int, seq_len: int) -> jax.Array:
    """Gumbel noise of one batch of B sequences, float32 (L, B, K): position p's token is argmax(logits + noise[p])."""
    position_keys = jax.random.split(key, seq_len) if streams == "coevolab" else _position_chain(key, seq_len)
    return position_gumbel_noise(position_keys, batch, vocab)


def judge_pair_noise(streams: Streams, key: jax.Array, batch: int, vocab: int, seq_len: int) -> jax.Array:
    """Noise of the judge's pair batch, (L, 2B, K): rows :B are the first of each pair, B: the second."""
    if streams == "coevolab":
        return sampling_noise(streams, key, 2 * batch, vocab, seq_len)
    _, first, second = jax.random.split(key, 3)
    return jnp.concatenate(
        [sampling_noise(streams, first, batch, vocab, seq_len), sampling_noise(streams, second, batch, vocab, seq_len)],
        axis=1,
    )
