"""Where the policy's reward comes from: the loop's REINFORCE step, with every mechanism's reward hooks in turn.

A run's policy samples a batch and is rewarded by its judges: each judge slot's rows (the judges' own, unless a
mechanism's ``reward_row`` hook picks others), their scores aggregated over the run's judges (from the members'
mean, every ``aggregate`` hook in mechanism order), then shaped per sample by every ``shape_reward`` hook in
mechanism order. Every ``update_policy`` hook then sets the step's weight on mean log π in the loss and its Adam
learning rate (`PolicyUpdate`). Only the mechanisms some run of the grid uses take part (`GridShape.used_mechanisms`).
The same pieces make the grid's batched step (`policy_step`) and one run's step
(`run_policy_step`, what a look-ahead copy of a policy trains with). The diagnostics' reward table (what judge-perceived
quality and judge alignment measure) is the judges' reward: it goes through ``reward_row`` and ``aggregate`` but not
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
from harness.grid.contract import (
    GridConstants,
    GridShape,
    JudgeContext,
    Mechanism,
    MemberScores,
    PolicyBatch,
    PolicyUpdate,
)
from harness.grid.judge_slots import run_judge_slots
from harness.grid.knobs import RunKnobs


def reward_judges(shape: GridShape, constants: GridConstants, knobs: RunKnobs, slots: SlotState) -> jax.Array:
    """The judge row each slot rewards its run's policy with, (J, P): each `reward_row` hook in turn, per slot, from
    the judges' own rows (returned as they are where no mechanism of the grid takes the hook)."""
    rows = slots.judge.params
    hooks = registry.checked_hooks(shape.used_mechanisms, "reward_row", given_at=0)
    if not hooks:
        return rows
    judges = JudgeContext(jax.tree.map(lambda knob: knob[constants.slot_run], knobs), constants.pretrained_judges)
    for name, hook in hooks:
        rows = jax.vmap(hook)(rows, judges, slots.mechanisms.get(name))
    return rows


def mean_of_members(scores: jax.Array, members: jax.Array) -> jax.Array:
    """One run's judges' scores (M, X) averaged over its real members: its reward where no mechanism aggregates."""
    weight = members.astype(scores.dtype)[:, None]
    return jnp.sum(weight * scores, axis=0) / jnp.sum(weight)


def aggregated(mechanisms: Sequence[Mechanism], scores: jax.Array, members: jax.Array, knobs: RunKnobs) -> jax.Array:
    """One run's reward (X,) from its judges' scores (M, X): the real members' mean, then every `aggregate` hook in
    mechanism order, each given the reward the ones before it left and the run's `MemberScores`."""
    reward, judges = mean_of_members(scores, members), MemberScores(scores, members, knobs)
    for _, hook in registry.checked_hooks(mechanisms, "aggregate", given_at=0):
        reward = hook(reward, judges)
    return reward


def run_rewards(shape: GridShape, constants: GridConstants, knobs: RunKnobs, slot_scores: jax.Array) -> jax.Array:
    """Each run's reward from its judges' scores: slot_scores (J, X) -> (R, X), by the run's aggregation rule."""
    slots, members = run_judge_slots(shape, constants)
    return jax.vmap(partial(aggregated, shape.used_mechanisms))(slot_scores[slots], members, knobs)


def _own_hook_calls(
    mechanisms: Sequence[Mechanism], hook_name: str, value: Any, batch: PolicyBatch, own: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """`value` after every mechanism's `hook_name` hook in mechanism order, each given the batch with its own key
    (`batch.key` folded with its stream number) and its own per-run state from `own` (None where it keeps none);
    returns the value and `own` with each hook's state as it returned it. Every hook reads the others' states in
    `batch.mechanisms`, as the step found them."""
    own = dict(own)
    for name, hook in registry.checked_hooks(mechanisms, hook_name, given_at=(0, 2)):
        value, changed = hook(value, batch.replace(key=streams.own_key(batch.key, name)), own.get(name))
        if name in own:
            own[name] = changed
    return value, own


def shaped_rewards(mechanisms: Sequence[Mechanism], rewards: jax.Array, batch: PolicyBatch) -> tuple[jax.Array, Any]:
    """One run's rewards (B,) after every `shape_reward` hook, in mechanism order, and its mechanisms' per-run states
    (by name, as `batch.mechanisms`) with each hook's own as its hook returned it."""
    return _own_hook_calls(mechanisms, "shape_reward", rewards, batch, batch.mechanisms)


def policy_update(
    mechanisms: Sequence[Mechanism], batch: PolicyBatch, own: dict[str, Any]
) -> tuple[PolicyUpdate, dict[str, Any]]:
    """One run's `PolicyUpdate` after every `update_policy` hook, in mechanism order, from a weight of 0 and a NaN
    learning rate; and the mechanisms' per-run states `own` with each hook's as it returned it."""
    start = PolicyUpdate(log_prob_weight=jnp.zeros((), jnp.float32), learning_rate=jnp.full((), jnp.nan, jnp.float32))
    return _own_hook_calls(mechanisms, "update_policy", start, batch, own)


def _loss_cotangent(
    mechanisms: Sequence[Mechanism], rewards: jax.Array, batch: PolicyBatch
) -> tuple[jax.Array, jax.Array, Any]:
    """d loss / d log π of one run's batch, from its rewards as the judges gave them; its learning rate; and its
    mechanisms' per-run states after the reward and update hooks (`shaped_rewards`, `policy_update`)."""
    rewards, own = shaped_rewards(mechanisms, rewards, batch)
    update, own = policy_update(mechanisms, batch, own)
    return learning.reinforce_cotangent(rewards, update.log_prob_weight), update.learning_rate, own


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
    cotangents, learning_rate, own = jax.vmap(partial(_loss_cotangent, mechanisms))(rewards, batches)
    (grads,) = pullback(cotangents)
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
    rewards = aggregated(mechanisms, scores, members, knobs)
    log_pi = jax.lax.stop_gradient(log_pi)
    batch = PolicyBatch(tokens, log_pi, initial_policy, q_star, vocab, model, run_state, knobs, key)
    cotangent, learning_rate, _ = _loss_cotangent(mechanisms, rewards, batch)
    (grads,) = pullback(cotangent)
    return adam_step(policy, grads, learning_rate)
