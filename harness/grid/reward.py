"""Where the policy's reward comes from: the loop's REINFORCE step, with every mechanism's reward hooks in turn.

A run's policy samples a batch and is rewarded by its judges: each judge slot's rows (the judges' own, unless a
mechanism's ``reward_rows`` hook picks others), their scores aggregated over the run's judges (the ``aggregate``
hook; the members' mean where no mechanism takes it), then shaped per sample by every ``shape_reward`` hook in
mechanism order. The loss puts the summed ``log_prob_weight`` of the mechanisms on mean log π, and Adam steps at the
``policy_learning_rate``. Only the mechanisms some run of the grid uses take part (`GridShape.used_mechanisms`).
The same pieces make the grid's batched step (`policy_step`) and one run's step
(`run_policy_step`, what a look-ahead copy of a policy trains with). The diagnostics' reward table (what judge-perceived
quality and judge alignment measure) is the judges' reward: it goes through ``reward_rows`` and ``aggregate`` but not
``shape_reward``, so it is the reward the policy trains on only where no mechanism shapes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from harness.engine import learning, streams
from harness.engine.architecture import ModelConfig
from harness.engine.state import CoevolutionState, Network, SlotState, adam_step
from harness.grid import registry
from harness.grid.contract import GridConstants, GridShape, Mechanism, PolicyBatch
from harness.grid.knobs import RunKnobs
from harness.grid.step_table import run_judge_slots


def reward_judges(shape: GridShape, constants: GridConstants, knobs: RunKnobs, slots: SlotState) -> jax.Array:
    """The judge row each slot rewards its run's policy with, (J, P): each `reward_rows` hook in turn, from the
    judges' own rows (returned as they are where no hook changes them)."""
    rows = slots.judge.params
    for hook in registry.hooks(shape.used_mechanisms, "reward_rows"):
        rows = hook(shape, constants, knobs, slots, rows)
    return rows


def mean_of_members(scores: jax.Array, members: jax.Array, knobs: RunKnobs) -> jax.Array:
    """One run's reward from its judges' scores (M, X) where no mechanism aggregates them: the real members' mean."""
    del knobs
    weight = members.astype(scores.dtype)[:, None]
    return jnp.sum(weight * scores, axis=0) / jnp.sum(weight)


def _aggregate(mechanisms: Sequence[Mechanism]) -> object:
    return registry.single_hook(mechanisms, "aggregate") or mean_of_members


def run_rewards(shape: GridShape, constants: GridConstants, knobs: RunKnobs, slot_scores: jax.Array) -> jax.Array:
    """Each run's reward from its judges' scores: slot_scores (J, X) -> (R, X), by the run's aggregation rule."""
    slots, members = run_judge_slots(shape, constants)
    return jax.vmap(_aggregate(shape.used_mechanisms))(slot_scores[slots], members, knobs)


def shaped_rewards(mechanisms: Sequence[Mechanism], rewards: jax.Array, batch: PolicyBatch) -> tuple[jax.Array, Any]:
    """One run's rewards (B,) after every `shape_reward` hook, in mechanism order, and its mechanisms' per-run states
    (by name, as `batch.mechanisms`) with each hook's own as its hook returned it.

    Each hook is given the batch with its mechanism's own key (`batch.key` folded with its stream number) and its own
    state; every hook reads the others' states in `batch.mechanisms` as the step found them."""
    own = dict(batch.mechanisms)
    for name, hook in registry.checked_hooks(mechanisms, "shape_reward", given_at=(0, 2)):
        rewards, changed = hook(rewards, batch.replace(key=streams.own_key(batch.key, name)), own.get(name))
        if name in own:
            own[name] = changed
    return rewards, own


def log_prob_weight(mechanisms: Sequence[Mechanism], knobs: RunKnobs) -> jax.Array:
    """One run's weight on mean log π in its policy's loss: the mechanisms' weights summed (0 where none has one)."""
    weights = [hook(knobs) for hook in registry.hooks(mechanisms, "log_prob_weight")]
    if not weights:
        return jnp.zeros((), jnp.float32)
    total = weights[0]  # (summed from the first, not from 0, so one weight passes unchanged, its sign of zero too)
    for weight in weights[1:]:
        total = total + weight
    return total


def policy_learning_rate(mechanisms: Sequence[Mechanism], knobs: RunKnobs) -> jax.Array:
    """One run's policy learning rate, from the mechanism that sets it."""
    hook = registry.single_hook(mechanisms, "policy_learning_rate")
    if hook is None:
        raise registry.MechanismError("no mechanism sets the policy's learning rate (hook 'policy_learning_rate')")
    return hook(knobs)


def _loss_cotangent(mechanisms: Sequence[Mechanism], rewards: jax.Array, batch: PolicyBatch) -> tuple[jax.Array, Any]:
    """d loss / d log π of one run's batch, from its rewards as the judges gave them; and its mechanisms' per-run
    states after the reward hooks (`shaped_rewards`)."""
    rewards, own = shaped_rewards(mechanisms, rewards, batch)
    return learning.reinforce_cotangent(rewards, log_prob_weight(mechanisms, batch.knobs)), own


def policy_step(
    shape: GridShape, constants: GridConstants, knobs: RunKnobs, state: CoevolutionState, keys: jax.Array
) -> CoevolutionState:
    """One REINFORCE step of every run, batched so that each judge scores its run's batch once.

    keys (R, 2): each run's key for its policy batch (`streams.StepKeys.policy`).
    """
    batch, vocab, seq_len, mechanisms = shape.batch_size, shape.vocab_size, shape.seq_len, shape.used_mechanisms
    noise = jax.vmap(partial(streams.sampling_noise, shape.streams, batch=batch, vocab=vocab, seq_len=seq_len))(keys)

    def log_prob(policies: jax.Array) -> tuple[jax.Array, jax.Array]:
        tokens, log_pi = jax.vmap(partial(learning.sample, vocab=vocab, model=shape.model))(policies, noise)
        return log_pi, tokens

    # One forward pass gives both the samples and log π; its VJP is the score function.
    policy = state.runs.policy
    log_pi, pullback, tokens = jax.vjp(log_prob, policy.params, has_aux=True)
    judges = reward_judges(shape, constants, knobs, state.slots)
    judge_reward = partial(learning.judge_reward, vocab=vocab, model=shape.model)
    slot_scores = jax.vmap(judge_reward)(judges, tokens[constants.slot_run])
    rewards = run_rewards(shape, constants, knobs, slot_scores)
    q_star = jnp.broadcast_to(constants.q_star, (shape.n_runs, *constants.q_star.shape))
    batches = PolicyBatch(
        tokens,
        jax.lax.stop_gradient(log_pi),
        constants.initial_policies,
        q_star,
        vocab,
        shape.model,
        state.runs.mechanisms,
        knobs,
        keys,  # what the batch was drawn from; each reward hook gets it folded with its mechanism's number
    )
    cotangents, own = jax.vmap(partial(_loss_cotangent, mechanisms))(rewards, batches)
    (grads,) = pullback(cotangents)
    learning_rate = jax.vmap(partial(policy_learning_rate, mechanisms))(knobs)
    policy = jax.vmap(adam_step)(policy, grads, learning_rate)
    return state.replace(runs=state.runs.replace(policy=policy, mechanisms=own))


def run_policy_step(
    policy: Network,
    judges: jax.Array,
    members: jax.Array,
    noise: jax.Array,
    knobs: RunKnobs,
    initial_policy: jax.Array,
    q_star: jax.Array,
    run_state: dict[str, Any],
    key: jax.Array,
    *,
    vocab: int,
    model: ModelConfig,
    mechanisms: tuple[Mechanism, ...],
) -> Network:
    """One REINFORCE step of one run, as `policy_step` takes it for every run: sample a batch with `noise`
    (L, B, K), reward it with the run's judges (rows (M, P), members marking the real ones) through the same hooks,
    step Adam. initial_policy (P,): the run's π₀ row, q_star (N,) the world's q*, run_state the run's own state of
    each mechanism that keeps one (`RunState.mechanisms` without the run axis), for hooks that read them, and key
    (2,) the key `noise` was drawn from (`PolicyBatch.key`). What the reward hooks return of their own state is
    dropped: a copy of a policy (a look-ahead) changes no mechanism's state."""

    def log_prob(row: jax.Array) -> tuple[jax.Array, jax.Array]:
        tokens, log_pi = learning.sample(row, noise, vocab, model)
        return log_pi, tokens

    log_pi, pullback, tokens = jax.vjp(log_prob, policy.params, has_aux=True)
    scores = jax.vmap(learning.judge_reward, (0, None, None, None))(judges, tokens, vocab, model)
    rewards = _aggregate(mechanisms)(scores, members, knobs)
    log_pi = jax.lax.stop_gradient(log_pi)
    batch = PolicyBatch(tokens, log_pi, initial_policy, q_star, vocab, model, run_state, knobs, key)
    cotangent, _ = _loss_cotangent(mechanisms, rewards, batch)
    (grads,) = pullback(cotangent)
    return adam_step(policy, grads, policy_learning_rate(mechanisms, knobs))
