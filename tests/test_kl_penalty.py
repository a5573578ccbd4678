"""The KL penalty toward π₀ (harness/mechanisms/kl_penalty.py): one run's REINFORCE step against a flax/optax
reference, β = 0 exactly the step without it, the grid's use of it, and the exact KL to π₀ falling with β."""

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
from harness.engine.models import Judge, Policy
from harness.engine.state import fresh_network
from harness.engine.streams import sampling_noise
from harness.grid import registry
from harness.grid.contract import PolicyBatch
from harness.grid.knobs import Knobs, stack_knobs
from harness.grid.layout import layout_grid
from harness.grid.reward import run_policy_step
from harness.grid.spec import Condition, GridSpec, RunSettings
from harness.grid.trainer import GridTrainer
from harness.mechanisms import kl_penalty
from tests.networks import idle_run_states, init_judge, init_policy, perturbed
from tests.worlds import TWO_POSITIONS

K, L, B = TWO_POSITIONS["vocab_size"], TWO_POSITIONS["seq_len"], 16
Q_STAR = jnp.zeros(K**L)  # no hook of these tests reads q*
LR = 1e-2
# Adam's first step moves each parameter by about ±LR whatever its gradient's size (see tests/test_mechanisms.py).
STEP_TOLERANCE = LR / 100
ALL = registry.active()
WITHOUT = tuple(m for m in ALL if m.name != "kl_penalty")


def _row(tree: chex.ArrayTree) -> jax.Array:
    return ravel_rows(jax.tree.map(lambda x: x[None], tree))[0]


def _one_run(knobs: Knobs):
    return jax.tree.map(lambda x: x[0], stack_knobs([knobs], [m.name for m in ALL]))


@pytest.fixture(scope="module")
def networks() -> tuple[chex.ArrayTree, chex.ArrayTree, chex.ArrayTree]:
    """(policy, its π₀ a perturbation away, judge) as flax parameter trees."""
    initial = perturbed(init_policy(jax.random.PRNGKey(3), K, L), 4)
    policy = perturbed(initial, 5)
    return policy, initial, perturbed(init_judge(jax.random.PRNGKey(1), K, L), 2)


def _step(policy, initial, judge, knobs: Knobs, mechanisms) -> jax.Array:
    noise = sampling_noise("coevolab", jax.random.PRNGKey(5), B, K, L)
    step = jax.jit(functools.partial(run_policy_step, vocab=K, model=DEFAULT_MODEL, mechanisms=mechanisms))
    after = step(
        fresh_network(_row(policy)),
        _row(judge)[None],
        jnp.array([True]),
        noise,
        _one_run(knobs),
        _row(initial),
        Q_STAR,
        idle_run_states(K**L),
        jax.random.PRNGKey(5),  # the key the batch's noise was drawn from
    )
    return np.asarray(after.params)


def _reference(policy, initial, judge, beta: float, entropy_bonus: float) -> jax.Array:
    """One optax Adam step on the penalised REINFORCE loss, with flax's modules on trees: rewards
    J(x) − β (log π(x) − log π₀(x)), both log-probabilities constants of the step."""
    noise = sampling_noise("coevolab", jax.random.PRNGKey(5), B, K, L)
    tokens, _ = learning.sample(_row(policy), noise, K)

    def log_prob(tree: chex.ArrayTree) -> jax.Array:
        log_probs = jax.nn.log_softmax(Policy(K).apply(tree, tokens), axis=-1)
        return jnp.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0].sum(axis=1)

    rewards = Judge(K).apply(judge, tokens) - beta * (log_prob(policy) - log_prob(initial))

    def loss(tree: chex.ArrayTree) -> jax.Array:
        log_pi = log_prob(tree)
        advantage = rewards - rewards.mean()
        return -jnp.mean(advantage * log_pi) + entropy_bonus * jnp.mean(log_pi)

    optimizer = optax.adam(LR)
    updates, _ = optimizer.update(jax.grad(loss)(policy), optimizer.init(policy), policy)
    return np.asarray(_row(optax.apply_updates(policy, updates)))


@pytest.mark.parametrize("beta", [0.5, 3.0])
def test_the_penalised_step_is_reinforce_on_the_penalised_reward(networks, beta: float) -> None:
    policy, initial, judge = networks
    knobs = Knobs(lr_policy=LR, entropy_bonus=0.05, kl_penalty=beta)
    penalised = _step(policy, initial, judge, knobs, ALL)
    np.testing.assert_allclose(penalised, _reference(policy, initial, judge, beta, 0.05), rtol=0, atol=STEP_TOLERANCE)
    # The penalty changes the step by far more than the tolerance, so the comparison above can tell them apart.
    unpenalised = _reference(policy, initial, judge, 0.0, 0.05)
    assert np.max(np.abs(penalised - unpenalised)) > 10 * STEP_TOLERANCE


def test_beta_zero_is_the_step_without_the_penalty(networks) -> None:
    """β = 0 leaves every reward as it was, bit for bit; the step then differs from the program without the hook
    only by XLA's rounding of another fusion (a grid whose runs all have β = 0 compiles without it: `uses`)."""
    policy, initial, judge = networks
    knobs = Knobs(lr_policy=LR, kl_penalty=0.0)
    rewards = jnp.linspace(-1.0, 1.0, B)
    tokens = jnp.zeros((B, L), jnp.int32)
    batch = PolicyBatch(tokens, jnp.linspace(-5.0, -1.0, B), _row(initial), Q_STAR, K, DEFAULT_MODEL)
    np.testing.assert_array_equal(kl_penalty.penalised(rewards, batch.replace(knobs=_one_run(knobs)), None)[0], rewards)
    with_hook, without = _step(policy, initial, judge, knobs, ALL), _step(policy, initial, judge, knobs, WITHOUT)
    np.testing.assert_allclose(with_hook, without, rtol=0, atol=1e-6)


def test_log_pi0_is_the_initial_policy_teacher_forced(networks) -> None:
    _, initial, _ = networks
    tokens = jax.random.randint(jax.random.PRNGKey(7), (B, L), 0, K)
    batch = PolicyBatch(tokens, jnp.zeros(B), _row(initial), Q_STAR, K, DEFAULT_MODEL)
    log_probs = jax.nn.log_softmax(Policy(K).apply(initial, tokens), axis=-1)
    expected = jnp.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0].sum(axis=1)
    np.testing.assert_allclose(kl_penalty.initial_log_prob(batch), expected, rtol=1e-5, atol=1e-5)


BETAS = (0.0, 0.1, 1.0)
SPEC = GridSpec(
    name="kl-penalty",
    run=RunSettings(seeds=(0, 1), iterations=2, steps_per_iteration=40, batch_size=32),
    world=TWO_POSITIONS,
    conditions=tuple(Condition(name=f"beta={b}", knobs=Knobs(kl_penalty=b, freeze_judge=True)) for b in BETAS),
)


def test_a_grid_uses_the_penalty_only_where_a_run_has_beta_above_zero() -> None:
    assert "kl_penalty" in layout_grid(SPEC).shape.used
    assert "kl_penalty" not in layout_grid(SPEC.only(["beta=0.0"])).shape.used


def test_the_exact_kl_to_the_initial_policy_falls_with_beta() -> None:
    metrics = GridTrainer(SPEC).run()
    final = metrics[metrics["iteration"] == SPEC.run.iterations]
    kl = final.pivot(index="seed", columns="condition", values="kl_from_initial")[[f"beta={b}" for b in BETAS]]
    assert (kl.to_numpy() > 0).all()
    assert (np.diff(kl.to_numpy(), axis=1) < 0).all(), kl
