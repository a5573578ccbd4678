"""The learning signals every mechanism builds on, each for one network, written as if the grid did not exist.

Sampling a batch from a policy row, the REINFORCE cotangent of its loss, a judge's scores of a batch, and the
Bradley–Terry losses a judge trains on. Arguments that differ per network come first, shared ones after, so
`functools.partial(function, **shared)` is what the grid vmaps. Networks are flat rows
(`harness.engine.state.Network`); a function unravels a row where a model reads it, by the grid's `model` settings
(`harness.engine.architecture.ModelConfig`, static; today's GRUs by default).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from harness.engine.architecture import DEFAULT_MODEL, ModelConfig
from harness.engine.flat_params import judge_layout, policy_layout
from harness.engine.models import judge_scores, judge_scores_of_outputs, sample_from_noise

# --------------------------------------------------------------------------------------------------------------------
# The policy


def sample(
    policy: jax.Array, noise: jax.Array, vocab: int, model: ModelConfig = DEFAULT_MODEL
) -> tuple[jax.Array, jax.Array]:
    """B sequences from one policy row with Gumbel noise (L, B, K) (`harness.engine.streams`): tokens int32 (B, L)
    and log π (B,), differentiable in the row."""
    return sample_from_noise(policy_layout(vocab, noise.shape[0], model.policy).unravel(policy), noise)


def reinforce_cotangent(rewards: jax.Array, log_prob_weight: jax.Array) -> jax.Array:
    """d loss / d log π(x_b) of one run's REINFORCE loss on a batch with rewards (B,).

    loss = -mean((r - mean r) · log π) + log_prob_weight · mean(log π): a mean baseline, and a weight on mean log π
    (the original lab's entropy bonus: it lowers log π of what is sampled, and its expected gradient is zero).
    """
    advantage = rewards - jnp.mean(rewards)
    return (log_prob_weight - advantage) / rewards.shape[0]


def judge_reward(judge: jax.Array, tokens: jax.Array, vocab: int, model: ModelConfig = DEFAULT_MODEL) -> jax.Array:
    """One judge's scores of a batch (B, L) -> (B,), as the policy is rewarded with them."""
    return judge_scores(judge_layout(vocab, tokens.shape[1], model.judge).unravel(judge), tokens, vocab)


# --------------------------------------------------------------------------------------------------------------------
# A judge


def pair_bce(
    judge: jax.Array,
    pairs: jax.Array,
    labels: jax.Array,
    mask: jax.Array,
    vocab: int,
    seq_len: int,
    model: ModelConfig = DEFAULT_MODEL,
) -> tuple:
    """Masked Bradley–Terry loss of one judge on pairs of outputs given by enumeration index.

    pairs int32 (P, 2); labels (P,) say whether the first should outscore the second;
    mask (P,) marks real pairs (the rest is padding). Returns (loss, accuracy on the mask).
    Pairwise losses leave out the head's bias (see `models.judge_scores`).
    """
    params = judge_layout(vocab, seq_len, model.judge).unravel(judge)
    scores = judge_scores_of_outputs(params, pairs.T.reshape(-1), vocab, seq_len, include_bias=False)
    margin = scores[: pairs.shape[0]] - scores[pairs.shape[0] :]
    weight = mask / jnp.maximum(jnp.sum(mask), 1.0)
    loss = jnp.sum(weight * optax.sigmoid_binary_cross_entropy(margin, labels))
    accuracy = jnp.sum(weight * ((margin > 0) == (labels > 0.5)))
    return loss, accuracy


def pair_margins(
    judge: jax.Array, first: jax.Array, second: jax.Array, vocab: int, model: ModelConfig = DEFAULT_MODEL
) -> jax.Array:
    """J(first[i]) − J(second[i]) of one judge row on sequence pairs, each (B, L): the Bradley–Terry logits."""
    params = judge_layout(vocab, first.shape[1], model.judge).unravel(judge)
    scores = judge_scores(params, jnp.concatenate([first, second]), vocab, include_bias=False)
    return scores[: first.shape[0]] - scores[first.shape[0] :]


def pair_bce_labelled(
    judge: jax.Array,
    first: jax.Array,
    second: jax.Array,
    ordered: jax.Array,
    vocab: int,
    model: ModelConfig = DEFAULT_MODEL,
) -> jax.Array:
    """Bradley–Terry loss of one judge on pairs labelled first > second where `ordered` (contrast pairs),
    else by its own current preference 1[J(a) > J(b)] (self-labelled pairs)."""
    margin = pair_margins(judge, first, second, vocab, model)
    own = jax.lax.stop_gradient((margin > 0).astype(jnp.float32))
    labels = jnp.where(ordered, jnp.ones_like(own), own)
    return jnp.mean(optax.sigmoid_binary_cross_entropy(margin, labels))
