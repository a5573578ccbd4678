"""The perfect proxy (harness/mechanisms/gold_reward.py) and entropy regularisation with the true gradient
(harness/mechanisms/entropy_regularization.py) against references written with flax's modules and optax on trees,
and the original lab's entropy bonus shown to have zero expected gradient, exactly, over all outputs."""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from harness.engine import learning
from harness.engine.architecture import DEFAULT_MODEL
from harness.engine.flat_params import ravel_rows
from harness.engine.models import Policy
from harness.engine.state import fresh_network
from harness.engine.streams import sampling_noise
from harness.engine.world import enumerate_outputs
from harness.grid import registry
from harness.grid.contract import PolicyBatch
from harness.grid.knobs import Knobs, stack_knobs
from harness.grid.reward import run_policy_step, shaped_rewards
from harness.mechanisms import entropy_regularization, gold_reward
from harness.mechanisms.noisy_gold_reward import NoisyProxy
from tests.networks import idle_run_states, init_judge, init_policy, perturbed
from tests.worlds import TWO_POSITIONS

K, L, B = TWO_POSITIONS["vocab_size"], TWO_POSITIONS["seq_len"], 16
LR = 1e-2
STEP_TOLERANCE = LR / 100  # Adam's first step moves each parameter by about ±LR (see tests/test_mechanisms.py)
OUTPUTS = enumerate_outputs(K, L)
Q_STAR = jax.random.normal(jax.random.PRNGKey(99), (K**L,))
ALL = registry.active()


def _row(tree: chex.ArrayTree) -> jax.Array:
    return ravel_rows(jax.tree.map(lambda x: x[None], tree))[0]


def _one_run(knobs: Knobs):
    return jax.tree.map(lambda x: x[0], stack_knobs([knobs], [m.name for m in ALL]))


def _log_pi(tree: chex.ArrayTree, tokens: jax.Array) -> jax.Array:
    log_probs = jax.nn.log_softmax(Policy(K).apply(tree, tokens), axis=-1)
    return jnp.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0].sum(axis=1)


@pytest.fixture(scope="module")
def policy_tree() -> chex.ArrayTree:
    return perturbed(init_policy(jax.random.PRNGKey(3), K, L), 4)


def test_the_perfect_proxy_step_is_reinforce_on_q_star(policy_tree) -> None:
    """One step with reward_from_q_star: the judge's scores are ignored, each sample rewarded by its q*."""
    judge = _row(perturbed(init_judge(jax.random.PRNGKey(1), K, L), 2))
    noise = sampling_noise("coevolab", jax.random.PRNGKey(5), B, K, L)
    step = jax.jit(functools.partial(run_policy_step, vocab=K, model=DEFAULT_MODEL, mechanisms=ALL))
    knobs = _one_run(Knobs(lr_policy=LR, entropy_bonus=0.0, reward_from_q_star=True))
    row = _row(policy_tree)
    states, key = idle_run_states(K**L), jax.random.PRNGKey(5)  # the key the noise was drawn from
    after = step(fresh_network(row), judge[None], jnp.array([True]), noise, knobs, row, Q_STAR, states, key)

    tokens, _ = learning.sample(row, noise, K)
    index = np.asarray(tokens) @ (K ** np.arange(L - 1, -1, -1))
    rewards = Q_STAR[index]

    def loss(tree: chex.ArrayTree) -> jax.Array:
        return -jnp.mean((rewards - rewards.mean()) * _log_pi(tree, tokens))

    optimizer = optax.adam(LR)
    updates, _ = optimizer.update(jax.grad(loss)(policy_tree), optimizer.init(policy_tree), policy_tree)
    expected = _row(optax.apply_updates(policy_tree, updates))
    np.testing.assert_allclose(np.asarray(after.params), np.asarray(expected), rtol=0, atol=STEP_TOLERANCE)


def test_both_hooks_leave_a_run_with_their_knobs_off_bit_for_bit() -> None:
    tokens = jax.random.randint(jax.random.PRNGKey(7), (B, L), 0, K)
    batch = PolicyBatch(tokens, jnp.linspace(-5.0, -1.0, B), jnp.zeros(3), Q_STAR, K, DEFAULT_MODEL)
    rewards = jnp.linspace(-1.0, 1.0, B)
    off = batch.replace(knobs=_one_run(Knobs()))
    np.testing.assert_array_equal(gold_reward.gold_rewards(rewards, off, None)[0], rewards)
    np.testing.assert_array_equal(entropy_regularization.soft_rewards(rewards, off, None)[0], rewards)
    tau = batch.replace(knobs=_one_run(Knobs(entropy_regularization=0.3)))
    np.testing.assert_allclose(
        entropy_regularization.soft_rewards(rewards, tau, None)[0], rewards - 0.3 * batch.log_pi, rtol=1e-6
    )


def _expected_update(policy_tree: chex.ArrayTree, per_sample_reward, loss_weight: float = 0.0) -> chex.ArrayTree:
    """The exact expectation over x ~ π of one sample's REINFORCE gradient, summed over all K^L outputs:
    Σ_x π(x) · ∇[−r(x)·log π(x) + loss_weight·log π(x)], r(x) held constant (as the step holds it)."""
    log_pi = jax.lax.stop_gradient(_log_pi(policy_tree, OUTPUTS))
    weight = jnp.exp(log_pi)
    reward = jax.lax.stop_gradient(per_sample_reward(log_pi))

    def surrogate(tree: chex.ArrayTree) -> jax.Array:
        own = _log_pi(tree, OUTPUTS)
        return jnp.sum(weight * (-reward * own + loss_weight * own))

    return jax.grad(surrogate)(policy_tree)


def _entropy_gradient(policy_tree: chex.ArrayTree) -> chex.ArrayTree:
    return jax.grad(lambda tree: -jnp.sum(jnp.exp(_log_pi(tree, OUTPUTS)) * _log_pi(tree, OUTPUTS)))(policy_tree)


def test_entropy_regularisation_climbs_the_exact_entropy_and_the_original_bonus_does_not(policy_tree) -> None:
    """Over every output exactly: the shaped reward −τ·log π has expected gradient −τ·∇H (the loss's, descended:
    the update raises H); the original's weight w on log π in the loss has expected gradient 0."""
    tau, w = 0.3, 0.01
    soft = _expected_update(policy_tree, lambda log_pi: -tau * log_pi)
    true = _entropy_gradient(policy_tree)
    flat_soft, flat_true = np.asarray(_row(soft)), np.asarray(_row(true))
    assert np.linalg.norm(flat_true) > 1e-3  # a policy whose entropy has a gradient to follow
    np.testing.assert_allclose(flat_soft, -tau * flat_true, rtol=1e-4, atol=1e-6)
    bonus = np.asarray(_row(_expected_update(policy_tree, lambda log_pi: 0.0 * log_pi, loss_weight=w)))
    assert np.max(np.abs(w * flat_true)) > 1e-4  # what a bonus of weight w on the true entropy would move
    np.testing.assert_allclose(bonus, 0.0, atol=1e-7)


@pytest.mark.parametrize("replacing", ["reward_from_q_star", "reward_from_noisy_q_star"])
def test_a_replaced_reward_is_still_shaped_by_entropy_regularisation(policy_tree, replacing: str) -> None:
    """Replacing the reward (by q*, or by the noisy proxy) comes before the hooks that shape it, whatever the
    catalog's order: with τ on, each sample's reward is its replacement − τ·log π."""
    tokens = enumerate_outputs(K, L)[jnp.array([3, 9, 40, 63])]
    log_pi = jnp.array([-4.0, -2.5, -1.0, -3.0])
    table = jnp.linspace(-1.0, 1.0, K**L)
    states = {"noisy_gold_reward": NoisyProxy(table, jnp.array(True))}
    knobs = _one_run(Knobs(entropy_regularization=0.3, **{replacing: True}))
    batch = PolicyBatch(
        tokens, log_pi, _row(policy_tree), Q_STAR, K, DEFAULT_MODEL, states, knobs, jax.random.PRNGKey(0)
    )
    replaced = (Q_STAR if replacing == "reward_from_q_star" else table)[jnp.array([3, 9, 40, 63])]
    shaped, own = shaped_rewards(ALL, jnp.zeros(4), batch)
    assert own.keys() == states.keys() and own["noisy_gold_reward"] is states["noisy_gold_reward"]
    np.testing.assert_allclose(shaped, replaced - 0.3 * log_pi, rtol=1e-6)
