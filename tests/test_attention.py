"""The attention family against a forward pass written in numpy from the flax parameters, and both families' exact
tables against per-output evaluation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from harness.engine import models
from harness.engine.architecture import NetworkConfig
from harness.engine.attention import policy_logits
from harness.engine.world import enumerate_outputs
from tests.networks import init_judge, init_policy, perturbed

K, L = 3, 3
NETWORKS = {
    "attention-2x2": NetworkConfig("attention", embed_dim=8, hidden_dim=12, layers=2, heads=2),
    "attention-1x1": NetworkConfig("attention", embed_dim=4, hidden_dim=6, layers=1, heads=1),
    "gru-small": NetworkConfig("gru", embed_dim=5, hidden_dim=7),  # today's sizes: tests/test_models.py
}
ATTENTION = {name: net for name, net in NETWORKS.items() if net.family == "attention"}
# Compiled once per network: op by op, every primitive of the stack would compile on its own.
log_prob = jax.jit(models.policy_log_prob, static_argnums=2)
scores_of = jax.jit(models.judge_scores, static_argnums=(2, 3))
log_prob_table = jax.jit(models.policy_log_prob_table, static_argnums=(1, 2))
score_table = jax.jit(models.judge_score_table, static_argnums=(1, 2))
scores_of_outputs = jax.jit(models.judge_scores_of_outputs, static_argnums=(2, 3))
sample = jax.jit(models.sample_from_noise)


def _numpy(tree: dict) -> dict:
    return jax.tree.map(lambda leaf: np.asarray(leaf, np.float64), tree)


def _layer_norm(x: np.ndarray, p: dict) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-6) * p["scale"] + p["bias"]


def _stack(p: dict, tokens: np.ndarray, causal: bool) -> np.ndarray:
    """(B, T) -> (B, T, E): embeddings, pre-norm blocks (attention, ReLU MLP), final norm; loops, no einsum."""
    batch, length = tokens.shape
    x = p["embed"]["embedding"][tokens] + p["position"]["embedding"][:length][None]
    layer = 0
    while f"block_{layer}" in p:
        block = p[f"block_{layer}"]
        h = _layer_norm(x, block["attention_norm"])
        q, k, v = (
            np.tensordot(h, block[name]["kernel"], axes=1) + block[name]["bias"] for name in ("query", "key", "value")
        )  # (B, T, heads, d)
        heads, d = q.shape[2], q.shape[3]
        out = np.zeros_like(q)
        for b in range(batch):
            for head in range(heads):
                for i in range(length):
                    visible = range(i + 1) if causal else range(length)
                    logits = np.array([q[b, i, head] @ k[b, j, head] / np.sqrt(d) for j in visible])
                    weights = np.exp(logits - logits.max())
                    weights /= weights.sum()
                    out[b, i, head] = sum(w * v[b, j, head] for w, j in zip(weights, visible, strict=True))
        x = x + np.tensordot(out, block["out"]["kernel"], axes=2) + block["out"]["bias"]
        h = _layer_norm(x, block["mlp_norm"])
        hidden = np.maximum(h @ block["mlp_in"]["kernel"] + block["mlp_in"]["bias"], 0.0)
        x = x + hidden @ block["mlp_out"]["kernel"] + block["mlp_out"]["bias"]
        layer += 1
    return _layer_norm(x, p["final_norm"])


def _numpy_log_prob(params: dict, tokens: np.ndarray) -> np.ndarray:
    p = _numpy(params)["params"]
    inputs = np.concatenate([np.full((tokens.shape[0], 1), K), tokens[:, :-1]], axis=1)
    logits = _stack(p["stack"], inputs, causal=True) @ p["head"]["kernel"] + p["head"]["bias"]  # (B, L, K)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return np.array([sum(log_probs[b, i, tokens[b, i]] for i in range(L)) for b in range(tokens.shape[0])])


def _numpy_scores(params: dict, tokens: np.ndarray) -> np.ndarray:
    p = _numpy(params)["params"]
    pooled = _stack(p["stack"], tokens, causal=False).mean(axis=1)
    return (pooled @ p["head"]["kernel"] + p["head"]["bias"])[:, 0]


TOKENS = np.array([[0, 1, 2], [2, 2, 0], [1, 0, 1], [2, 1, 1]])


@pytest.mark.parametrize("name", ATTENTION)
def test_attention_policy_log_prob_matches_numpy(name: str) -> None:
    policy = perturbed(init_policy(jax.random.PRNGKey(0), K, L, ATTENTION[name]), 1, 0.3)
    ours = np.asarray(log_prob(policy, jnp.asarray(TOKENS), K))
    np.testing.assert_allclose(ours, _numpy_log_prob(policy, TOKENS), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ATTENTION)
def test_attention_judge_scores_match_numpy(name: str) -> None:
    judge = perturbed(init_judge(jax.random.PRNGKey(2), K, L, ATTENTION[name]), 3, 0.3)
    ours = np.asarray(scores_of(judge, jnp.asarray(TOKENS), K))
    np.testing.assert_allclose(ours, _numpy_scores(judge, TOKENS), rtol=1e-5, atol=1e-5)
    without_bias = np.asarray(scores_of(judge, jnp.asarray(TOKENS), K, False))
    np.testing.assert_allclose(ours - without_bias, float(judge["params"]["head"]["bias"][0]), rtol=1e-5, atol=1e-5)


def test_attention_policy_is_causal() -> None:
    """A position's logits do not depend on later inputs (what the exact table's pass over prefixes rests on)."""
    policy = perturbed(init_policy(jax.random.PRNGKey(4), K, L, ATTENTION["attention-2x2"]), 5, 0.3)
    a = np.asarray(jax.jit(policy_logits)(policy, jnp.array([[K, 0, 1]])))
    b = np.asarray(jax.jit(policy_logits)(policy, jnp.array([[K, 0, 2]])))
    np.testing.assert_array_equal(a[:, :2], b[:, :2])
    assert not np.allclose(a[:, 2], b[:, 2])


@pytest.mark.parametrize("name", NETWORKS)
def test_exact_tables_are_per_output_evaluation(name: str) -> None:
    """log π over all outputs sums to 1 in probability and equals teacher-forced log π of each output; the score
    table equals scoring each output, and scoring outputs by index; sampling's log π is the teacher-forced one."""
    network = NETWORKS[name]
    policy = perturbed(init_policy(jax.random.PRNGKey(6), K, L, network), 7, 0.3)
    judge = perturbed(init_judge(jax.random.PRNGKey(8), K, L, network), 9, 0.3)
    outputs = enumerate_outputs(K, L)
    log_pi = np.asarray(log_prob_table(policy, K, L))
    assert log_pi.shape == (K**L,)
    np.testing.assert_allclose(np.exp(log_pi.astype(np.float64)).sum(), 1.0, atol=1e-5)
    np.testing.assert_allclose(log_pi, np.asarray(log_prob(policy, outputs, K)), atol=1e-5)
    scores = np.asarray(score_table(judge, K, L))
    np.testing.assert_allclose(scores, np.asarray(scores_of(judge, outputs, K)), atol=1e-5)
    some = jnp.array([5, 0, 26, 13, 13], jnp.int32)
    np.testing.assert_allclose(np.asarray(scores_of_outputs(judge, some, K, L)), scores[some], atol=1e-5)
    noise = models.position_gumbel_noise(jax.random.split(jax.random.PRNGKey(10), L), 16, K)
    tokens, sampled_log_pi = sample(policy, noise)
    np.testing.assert_allclose(np.asarray(sampled_log_pi), np.asarray(log_prob(policy, tokens, K)), atol=1e-5)
    if network.family == "attention":
        np.testing.assert_allclose(log_pi[:4], _numpy_log_prob(policy, np.asarray(outputs[:4])), atol=1e-5)
        np.testing.assert_allclose(scores[-4:], _numpy_scores(judge, np.asarray(outputs[-4:])), atol=1e-5)
