"""Every mechanism as a function of one run or one judge, written as if the grid did not exist.

Arguments that differ per network come first, shared ones (keyword-only) after, so
`functools.partial(mechanism, **shared)` is what the grid vmaps.

The grid program (`harness.grid.training_step`) batches these with `harness.grid.batching`: it
gathers the runs or judge slots a mechanism applies to, vmaps the function, keeps the
old values where the mechanism is not due, and scatters back. Networks are flat rows
(`harness.engine.state.Network`); a function unravels a row where a model reads it, by the grid's `model`
settings (`harness.engine.architecture.ModelConfig`, static; today's GRUs by default).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from harness.engine.architecture import DEFAULT_MODEL, ModelConfig
from harness.engine.flat_params import judge_layout, policy_layout
from harness.engine.knobs import RunKnobs, choices
from harness.engine.models import judge_scores, judge_scores_of_outputs, sample_from_noise
from harness.engine.state import Network, adam_step, fresh_network

_AGGREGATIONS = choices("ensemble_aggregation")
_REJECTED_SIDES = choices("rejected_from")


# --------------------------------------------------------------------------------------------------------------------
# The policy


def sample(
    policy: jax.Array, noise: jax.Array, vocab: int, model: ModelConfig = DEFAULT_MODEL
) -> tuple[jax.Array, jax.Array]:
    """B sequences from one policy row with Gumbel noise (L, B, K) (`harness.engine.streams`): tokens int32 (B, L)
    and log π (B,), differentiable in the row."""
    return sample_from_noise(policy_layout(vocab, noise.shape[0], model.policy).unravel(policy), noise)


def reinforce_cotangent(rewards: jax.Array, entropy_bonus: jax.Array) -> jax.Array:
    """d loss / d log π(x_b) of one run's REINFORCE loss on a batch with rewards (B,).

    loss = -mean((r - mean r) · log π) + entropy_bonus · mean(log π): a mean baseline, and
    a bonus that lowers log π of what is sampled (raising entropy).
    """
    advantage = rewards - jnp.mean(rewards)
    return (entropy_bonus - advantage) / rewards.shape[0]


def aggregate_scores(scores: jax.Array, members: jax.Array, rule: jax.Array, std_weight: jax.Array) -> jax.Array:
    """One run's reward from its judges' scores (M, X); members bool (M,) marks real judges (the rest is padding).

    rule: code of `Knobs.ensemble_aggregation`: the members' mean, their minimum (the
    worst case over the ensemble), or mean − std_weight · std (population std).
    """
    weight = members.astype(scores.dtype)[:, None]
    count = jnp.sum(weight)
    mean = jnp.sum(weight * scores, axis=0) / count
    minimum = jnp.min(jnp.where(members[:, None], scores, jnp.inf), axis=0)
    std = jnp.sqrt(jnp.sum(weight * (scores - mean) ** 2, axis=0) / count)
    by_rule = {"mean": mean, "min": minimum, "mean_minus_std": mean - std_weight * std}
    return jnp.select([rule == code for code in range(len(_AGGREGATIONS))], [by_rule[n] for n in _AGGREGATIONS])


def judge_reward(judge: jax.Array, tokens: jax.Array, vocab: int, model: ModelConfig = DEFAULT_MODEL) -> jax.Array:
    """One judge's scores of a batch (B, L) -> (B,), as the policy is rewarded with them."""
    return judge_scores(judge_layout(vocab, tokens.shape[1], model.judge).unravel(judge), tokens, vocab)


def policy_step(
    policy: Network,
    judges: jax.Array,
    members: jax.Array,
    noise: jax.Array,
    knobs: RunKnobs,
    vocab: int,
    model: ModelConfig = DEFAULT_MODEL,
) -> Network:
    """One REINFORCE step of one run: sample a batch with `noise` (L, B, K), reward it with the run's judges
    (rows (M, P), members marking the real ones), step Adam. The grid batches the same pieces (see
    `harness.grid.training_step.policy_step`)."""

    def log_prob(row: jax.Array) -> tuple[jax.Array, jax.Array]:
        tokens, log_pi = sample(row, noise, vocab, model)
        return log_pi, tokens

    _, pullback, tokens = jax.vjp(log_prob, policy.params, has_aux=True)
    scores = jax.vmap(judge_reward, (0, None, None, None))(judges, tokens, vocab, model)
    rewards = aggregate_scores(scores, members, knobs.ensemble_aggregation, knobs.ensemble_std_weight)
    (grads,) = pullback(reinforce_cotangent(rewards, knobs.entropy_bonus))
    return adam_step(policy, grads, knobs.lr_policy)


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


def judge_pair_update(
    judge: Network,
    first: jax.Array,
    second: jax.Array,
    ordered: jax.Array,
    lr: jax.Array,
    *,
    vocab: int,
    model: ModelConfig = DEFAULT_MODEL,
) -> Network:
    """One Bradley–Terry step of one judge on sequence pairs (first[i], second[i]), each (B, L): labelled
    chosen > rejected where `ordered`, else by the judge itself (`pair_bce_labelled`)."""
    return adam_step(judge, jax.grad(pair_bce_labelled)(judge.params, first, second, ordered, vocab, model), lr)


def referee_update(
    judge: Network,
    first: jax.Array,
    second: jax.Array,
    referee: jax.Array,
    margin: jax.Array,
    lr: jax.Array,
    *,
    vocab: int,
    model: ModelConfig = DEFAULT_MODEL,
) -> Network:
    """Meta-judging of one judge: the pairs of two distinct outputs in its batch on which it is least certain,
    |J(a) − J(b)| < margin, are re-judged by a frozen referee row (its pretrained self), and the judge takes one
    Bradley–Terry step toward the referee's labels on them. No step where no pair is that uncertain."""
    # A pair of one output has margin 0 but nothing to judge: it is never re-judged (it would only dilute the step).
    distinct = jnp.any(first != second, axis=1)
    uncertain = (distinct & (jnp.abs(pair_margins(judge.params, first, second, vocab, model)) < margin)).astype(
        jnp.float32
    )
    labels = (pair_margins(referee, first, second, vocab, model) > 0).astype(jnp.float32)

    def loss(row: jax.Array) -> jax.Array:
        bce = optax.sigmoid_binary_cross_entropy(pair_margins(row, first, second, vocab, model), labels)
        return jnp.sum(uncertain * bce) / jnp.maximum(jnp.sum(uncertain), 1.0)

    stepped = adam_step(judge, jax.grad(loss)(judge.params), lr)
    return jax.tree.map(lambda new, old: jnp.where(jnp.any(uncertain > 0), new, old), stepped, judge)


def anchor_update(
    judge: Network,
    pairs: jax.Array,
    count: jax.Array,
    lr: jax.Array,
    *,
    q_star: jax.Array,
    vocab: int,
    seq_len: int,
    model: ModelConfig = DEFAULT_MODEL,
) -> Network:
    """One q*-labelled step of one judge on the first `count` of `pairs` (int32 (P, 2) output indices,
    drawn uniformly by `harness.engine.streams.anchor_pairs`; the rest is padding)."""
    labels = (q_star[pairs[:, 0]] > q_star[pairs[:, 1]]).astype(jnp.float32)
    mask = (jnp.arange(pairs.shape[0]) < count).astype(jnp.float32)
    grads, _ = jax.grad(pair_bce, has_aux=True)(judge.params, pairs, labels, mask, vocab, seq_len, model)
    return adam_step(judge, grads, lr)


def holdout_correction(
    judge: Network,
    pairs: jax.Array,
    labels: jax.Array,
    mask: jax.Array,
    lr: jax.Array,
    *,
    vocab: int,
    seq_len: int,
    model: ModelConfig = DEFAULT_MODEL,
) -> Network:
    """Meta-correction of one judge: one Bradley–Terry step on the held-out q*-labelled pairs (`pair_bce`'s
    arguments; its accuracy on them, a forward pass, decides whether the step is due)."""
    grads, _ = jax.grad(pair_bce, has_aux=True)(judge.params, pairs, labels, mask, vocab, seq_len, model)
    return adam_step(judge, grads, lr)


# --------------------------------------------------------------------------------------------------------------------
# Where a judge's training pairs come from


def rejected_side(
    current: jax.Array, history: jax.Array, initial: jax.Array, rejected_from: jax.Array, gap: jax.Array
) -> jax.Array:
    """The policy row (P,) one run draws the rejected side of contrast pairs from: its current row, its checkpoint
    `gap` ago (history (D, P), latest first; gap 0 is the current row) or its initial row, by the code of
    `Knobs.rejected_from`."""
    past = current if history.shape[0] == 0 else jnp.where(gap > 0, history[jnp.clip(gap - 1, 0)], current)
    codes = {name: code for code, name in enumerate(_REJECTED_SIDES)}
    return jnp.select([rejected_from == codes["past"], rejected_from == codes["initial"]], [past, initial], current)


def lookahead_side(
    current: jax.Array,
    policy: Network,
    judges: jax.Array,
    members: jax.Array,
    noise: jax.Array,
    steps: jax.Array,
    knobs: RunKnobs,
    *,
    vocab: int,
    model: ModelConfig = DEFAULT_MODEL,
) -> jax.Array:
    """The chosen side's policy row for future-guided pairs: a copy of one run's policy (with its Adam state)
    trained `steps` more REINFORCE steps against the run's current judges (rows (M, P), members marking the real
    ones), step i with noise[i] (S, L, B, K), S ≥ steps; the copy's row is returned, the run's policy is untouched."""
    del current  # the side it replaces: always the policy's own row

    def step(copy: Network, inputs: tuple[jax.Array, jax.Array]) -> tuple[Network, None]:
        index, step_noise = inputs
        stepped = policy_step(copy, judges, members, step_noise, knobs, vocab, model)
        return jax.tree.map(lambda new, old: jnp.where(index < steps, new, old), stepped, copy), None

    copy, _ = jax.lax.scan(step, policy, (jnp.arange(noise.shape[0]), noise))
    return copy.params


def ema_update(average: jax.Array, judge: jax.Array, decay: jax.Array) -> jax.Array:
    """One step of a judge's exponential moving average (rows (P,)): decay · average + (1 − decay) · judge."""
    return decay * average + (1.0 - decay) * judge


def reset(judge: Network, pretrained: jax.Array) -> Network:
    """A judge returned to its pretrained row, with a fresh Adam state."""
    del judge
    return fresh_network(pretrained)
