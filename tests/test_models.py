"""The fused GRU evaluation in harness.engine.models against flax's own modules, and the sampler against exp(log π)."""

from __future__ import annotations

import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from harness.engine import models
from harness.engine.models import EMBED_DIM, HIDDEN_DIM, Judge, Policy
from harness.engine.world import enumerate_outputs
from harness.grid.memory import parameter_count
from tests.networks import init_judge, init_policy, perturbed

# Jitted once per module: eager dispatch would compile every primitive separately.
judge_scores = jax.jit(models.judge_scores, static_argnums=2)
judge_score_table = jax.jit(models.judge_score_table, static_argnums=(1, 2))
judge_scores_of_outputs = jax.jit(models.judge_scores_of_outputs, static_argnums=(2, 3))
policy_log_prob = jax.jit(models.policy_log_prob, static_argnums=2)
policy_log_prob_table = jax.jit(models.policy_log_prob_table, static_argnums=(1, 2))
sample_with_log_prob = jax.jit(models.sample_with_log_prob, static_argnums=(2, 3, 4))
flax_policy_logits = jax.jit(Policy(8).apply)
flax_judge_scores = jax.jit(Judge(8).apply)

K, L = 8, 4
OUTPUTS = enumerate_outputs(K, L)
SEEDS = (0, 1, 2)


def _policy(seed: int) -> chex.ArrayTree:
    return perturbed(init_policy(jax.random.PRNGKey(seed), K, L), seed)


def _judge(seed: int) -> chex.ArrayTree:
    return perturbed(init_judge(jax.random.PRNGKey(100 + seed), K, L), 100 + seed)


def _flax_log_pi(params: chex.ArrayTree, tokens: jax.Array) -> np.ndarray:
    """log π(x) from flax's Policy module: teacher-forced logits, log-softmax, gather, sum (float64)."""
    logits = np.asarray(flax_policy_logits(params, tokens), np.float64)  # (B, L, K)
    log_probs = logits - scipy.special.logsumexp(logits, axis=-1, keepdims=True)
    tokens = np.asarray(tokens)
    return np.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0].sum(axis=1)


@pytest.mark.parametrize("seed", SEEDS)
def test_policy_log_prob_matches_flax_module(seed: int) -> None:
    params = _policy(seed)
    reference = _flax_log_pi(params, OUTPUTS)
    np.testing.assert_allclose(np.asarray(policy_log_prob(params, OUTPUTS, K)), reference, rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(policy_log_prob_table(params, K, L)), reference, rtol=0, atol=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
def test_policy_table_is_a_distribution(seed: int) -> None:
    for params in (_policy(seed), init_policy(jax.random.PRNGKey(seed), K, L)):
        table = np.asarray(policy_log_prob_table(params, K, L), np.float64)
        chex.assert_shape(table, (K**L,))
        assert np.all(table <= 0)
        assert np.exp(table).sum() == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("seed", SEEDS)
def test_policy_table_equals_teacher_forced_log_prob(seed: int) -> None:
    params = _policy(seed)
    chex.assert_trees_all_close(
        policy_log_prob_table(params, K, L), policy_log_prob(params, OUTPUTS, K), rtol=0, atol=1e-5
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_judge_matches_flax_module(seed: int) -> None:
    params = _judge(seed)
    reference = np.asarray(flax_judge_scores(params, OUTPUTS), np.float64)
    np.testing.assert_allclose(np.asarray(judge_scores(params, OUTPUTS, K)), reference, rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(judge_score_table(params, K, L)), reference, rtol=0, atol=1e-5)
    rng = np.random.default_rng(seed)
    # Few ids read each output from the start; many ids (with repeats) share the prefix tree.
    for n in (1, 50, 1000):
        ids = rng.integers(0, K**L, size=n)
        scores = judge_scores_of_outputs(params, jnp.asarray(ids, jnp.int32), K, L)
        np.testing.assert_allclose(np.asarray(scores), reference[ids], rtol=0, atol=1e-5, err_msg=f"n={n}")


def _lapack_batch_dims(lowered_text: str) -> list[int]:
    """Number of batch dimensions of every LAPACK custom call in a lowered program."""
    calls = [line for line in lowered_text.splitlines() if "custom_call @lapack_" in line]
    return [int(re.search(r'num_batch_dims = "(\d+)"', line).group(1)) for line in calls]


def test_large_world_score_table_runs_in_chunks_of_leading_tokens() -> None:
    # The published world and 16^4 in one pass; beyond 2^16 outputs, chunks of the outputs under j leading tokens.
    worlds = ((8, 4), (16, 4), (8, 6), (2, 17), (4, 9))
    assert [models.score_table_chunks(*world) for world in worlds] == [1, 1, 8, 2, 4]


@pytest.mark.parametrize(("vocab", "length"), [(2, 17), (4, 9)])
def test_large_world_score_table_in_chunks_matches_flax_module(vocab: int, length: int) -> None:
    params = perturbed(init_judge(jax.random.PRNGKey(7), vocab, length), 7)
    outputs = enumerate_outputs(vocab, length)
    reference = np.asarray(jax.jit(Judge(vocab).apply)(params, outputs), np.float64)
    np.testing.assert_allclose(np.asarray(judge_score_table(params, vocab, length)), reference, rtol=0, atol=1e-5)


@pytest.mark.parametrize("initialise", [models.init_policies, models.init_judges])
def test_batched_initialisation_equals_one_at_a_time_without_batched_lapack(initialise) -> None:
    """Batched LAPACK deadlocks jaxlib 0.10.2's CPU pool (see harness.engine.models), so the
    batched initialisers must hold only unbatched QR calls, and still equal one-at-a-time
    flax initialisation key by key."""
    keys = jax.random.split(jax.random.PRNGKey(5), 3)
    lowered = jax.jit(initialise, static_argnums=(1, 2)).lower(keys, K, L).as_text()
    assert _lapack_batch_dims(lowered) and set(_lapack_batch_dims(lowered)) == {0}
    # The check can see a batched call: vmapping flax's init does produce one.
    vmapped = jax.jit(jax.vmap(lambda key: models.init_judge(key, K, L))).lower(keys).as_text()
    assert max(_lapack_batch_dims(vmapped)) == 1

    one = init_policy if initialise is models.init_policies else init_judge
    batched = jax.jit(initialise, static_argnums=(1, 2))(keys, K, L)
    for index, key in enumerate(keys):
        chex.assert_trees_all_close(jax.tree.map(lambda x, i=index: x[i], batched), one(key, K, L), atol=1e-6)


def _leaf_shapes(tree: chex.ArrayTree) -> dict[str, tuple[int, ...]]:
    return {jax.tree_util.keystr(path): leaf.shape for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def test_networks_are_the_gru_they_are_said_to_be() -> None:
    # A GRU cell with reset, update and candidate gates (r, z, n): input kernels E×H with biases, recurrent kernels
    # H×H, flax's only recurrent bias the candidate's. E = 16, H = 32.
    E, H = EMBED_DIM, HIDDEN_DIM
    assert (E, H) == (16, 32)
    cell = {f"['params']['cell']['i{g}']['{p}']": s for g in "rzn" for p, s in (("kernel", (E, H)), ("bias", (H,)))}
    cell |= {f"['params']['cell']['h{g}']['kernel']": (H, H) for g in "rzn"} | {
        "['params']['cell']['hn']['bias']": (H,)
    }
    # The policy embeds K tokens and the start token and has a K-way head; the judge embeds K tokens, one score.
    policy = cell | {"['params']['embed']['embedding']": (K + 1, E), "['params']['head']['kernel']": (H, K)}
    policy |= {"['params']['head']['bias']": (K,)}
    judge = cell | {"['params']['embed']['embedding']": (K, E), "['params']['head']['kernel']": (H, 1)}
    judge |= {"['params']['head']['bias']": (1,)}
    assert _leaf_shapes(init_policy(jax.random.PRNGKey(0), K, L)) == policy
    assert _leaf_shapes(init_judge(jax.random.PRNGKey(0), K, L)) == judge
    # Counted by hand for K = 8: cell 3·(16·32 + 32) + 3·32·32 + 32 = 4,736; policy 9·16 + 4,736 + 32·8 + 8;
    # judge 8·16 + 4,736 + 32 + 1.
    assert parameter_count(K) == (5144, 4897)


@pytest.mark.parametrize("vocab_size", [2, 8, 13])
def test_parameter_count_is_what_flax_initialises(vocab_size: int) -> None:
    """harness.grid.memory.parameter_count (which sizes memory estimates and flat parameter vectors) against the
    leaves of the initialised networks."""

    def count(tree: chex.ArrayTree) -> int:
        return sum(leaf.size for leaf in jax.tree.leaves(tree))

    policy, judge = init_policy(jax.random.PRNGKey(0), vocab_size, L), init_judge(jax.random.PRNGKey(0), vocab_size, L)
    assert parameter_count(vocab_size) == (count(policy), count(judge))


@pytest.fixture(scope="module")
def peaky_samples() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A low-entropy policy, its exact log π table and 200k samples with their returned log-probs."""
    params = jax.tree.map(lambda x: 3.0 * x, _policy(7))
    table = np.asarray(policy_log_prob_table(params, K, L), np.float64)
    tokens, log_prob = sample_with_log_prob(params, jax.random.PRNGKey(123), 200_000, K, L)
    return table, np.asarray(tokens), np.asarray(log_prob)


def test_samples_are_peaky_enough(peaky_samples: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    table, tokens, _ = peaky_samples
    pi = np.exp(table)
    entropy = -np.sum(pi * table)
    assert 1.0 < entropy < 6.0, entropy  # far from uniform (ln 4096 ≈ 8.3): a wrong sampler shows
    assert tokens.dtype == np.int32
    assert tokens.shape == (200_000, L)
    assert tokens.min() >= 0
    assert tokens.max() < K


def test_sample_frequencies_match_policy(peaky_samples: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    table, tokens, _ = peaky_samples
    n = len(tokens)
    pi = np.exp(table)
    pi /= pi.sum()
    index = np.ravel_multi_index(tuple(tokens.T), (K,) * L)
    counts = np.bincount(index, minlength=K**L)

    # Full sequences: every output expected >= 5 times gets its own bin, the rest are pooled.
    expected = n * pi
    big = expected >= 5
    assert big.sum() > 50
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(expected[big], expected[~big].sum())
    assert scipy.stats.chisquare(observed, expected).pvalue > 1e-3

    # First-token marginal.
    first = pi.reshape(K, -1).sum(axis=1)
    assert scipy.stats.chisquare(np.bincount(tokens[:, 0], minlength=K), n * first).pvalue > 1e-3

    # Last token given the most probable 3-token prefix: tests that sampled tokens are fed back.
    prefix = np.argmax(pi.reshape(-1, K).sum(axis=1))
    rows = index // K == prefix
    conditional = pi.reshape(-1, K)[prefix] / pi.reshape(-1, K)[prefix].sum()
    observed = np.bincount(index[rows] % K, minlength=K)
    keep = rows.sum() * conditional >= 5
    observed = np.append(observed[keep], observed[~keep].sum())
    expected = rows.sum() * np.append(conditional[keep], conditional[~keep].sum())
    assert scipy.stats.chisquare(observed, expected).pvalue > 1e-3


def test_sampled_log_probs_equal_table(peaky_samples: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    table, tokens, log_prob = peaky_samples
    index = np.ravel_multi_index(tuple(tokens.T), (K,) * L)
    np.testing.assert_allclose(log_prob, table[index], rtol=0, atol=1e-5)


def test_samples_are_the_draws_of_jax_random_categorical() -> None:
    """Position p's token is jax.random.categorical(split(key, L)[p], logits): the sampler's
    up-front noise keeps the random stream of drawing position by position."""
    params, key = _policy(4), jax.random.PRNGKey(11)
    tokens, _ = sample_with_log_prob(params, key, 4096, K, L)
    logits = flax_policy_logits(params, tokens)  # teacher-forced on the sampled prefixes, (B, L, K)
    position_keys = jax.random.split(key, L)
    expected = np.stack([np.asarray(jax.random.categorical(position_keys[p], logits[:, p])) for p in range(L)], axis=1)
    # flax's logits differ from the fused GRU's in the last bits, which can flip a near tie.
    assert np.mean(np.asarray(tokens) != expected) <= 1e-3


def test_sample_log_prob_gradient_is_score_function() -> None:
    """d/dθ of the returned log π equals the teacher-forced gradient on the same sampled tokens."""
    params = _policy(3)
    key = jax.random.PRNGKey(5)

    def sampled(p: chex.ArrayTree) -> jax.Array:
        return jnp.sum(models.sample_with_log_prob(p, key, 64, K, L)[1])

    tokens, _ = sample_with_log_prob(params, key, 64, K, L)

    def flax_log_pi(p: chex.ArrayTree) -> jax.Array:
        log_probs = jax.nn.log_softmax(Policy(K).apply(p, tokens), axis=-1)
        return jnp.sum(jnp.take_along_axis(log_probs, tokens[..., None], axis=-1))

    grads, reference = jax.jit(lambda p: (jax.grad(sampled)(p), jax.grad(flax_log_pi)(p)))(params)
    chex.assert_trees_all_close(grads, reference, rtol=1e-4, atol=1e-4)
