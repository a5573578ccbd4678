"""The original lab's co-evolution loop, restated one run at a time under its own random streams.

A slow, plain reference (a Python loop over inner steps, one jitted step each), not a
training engine: it exists so the compiled grid can be checked run for run against
the original. It follows src/coevolution/train.py of the original (commit 4b1e799):

- every inner step splits the loop key once for the policy batch; a step with a judge
  update splits it three ways (next, x_a, x_b), and each judge with anchors splits it
  three ways again, in member order;
- sampling splits its key once per position (next, draw) and draws
  `categorical(draw, logits)`;
- losses keep the judge's head bias (pairwise logits are differences of full scores);
- the meta check runs per judge on held-out pairs drawn once from PRNGKey(0), with one
  full-set step where accuracy is below threshold; resets come after the inner steps,
  before the iteration's metrics.

Its networks are ours applied through flax, which evaluates them in the same order as the
original's modules, so a baseline run reproduces the original's published metrics.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import scipy.stats

from harness.engine.models import HIDDEN_DIM, Judge, Params, Policy
from harness.engine.world import World
from harness.grid.knobs import Knobs
from harness.grid.pretrain import pretrain_judges
from harness.grid.spec import PretrainSettings
from harness.original import streams as original_streams


class OriginalRunSettings(NamedTuple):
    """The original's run sizes and its fixed hyperparameters (TrainingConfig defaults)."""

    iterations: int = 10
    steps_per_iteration: int = 200
    batch_size: int = 64


class _Networks(NamedTuple):
    policy: Params
    policy_opt: optax.OptState
    judges: tuple[Params, ...]
    judge_opts: tuple[optax.OptState, ...]


def _bce(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Binary cross-entropy from logits, in the original's formula."""
    return jnp.maximum(logits, 0) - logits * labels + jnp.log(1 + jnp.exp(-jnp.abs(logits)))


class OriginalLoop:
    """One world and one condition (`Knobs`); `run(script, seed)` gives the original's metrics for that seed."""

    def __init__(self, knobs: Knobs, world: World | None = None, settings: OriginalRunSettings | None = None) -> None:
        self.knobs = knobs
        self.world = world or World()
        self.settings = settings or OriginalRunSettings()
        self.vocab, self.seq_len = self.world.config.vocab_size, self.world.config.seq_len
        self.policy_net, self.judge_net = Policy(self.vocab), Judge(self.vocab)
        self.policy_adam, self.judge_adam = optax.adam(knobs.lr_policy), optax.adam(knobs.lr_judge)
        batch = self.settings.batch_size
        self.n_anchor = max(1, int(batch * knobs.anchor_fraction)) if knobs.anchor_fraction > 0 else 0
        self.holdout: tuple[jax.Array, jax.Array, jax.Array] | None = None
        if knobs.meta_holdout_fraction > 0:
            n_outputs = self.world.n_outputs
            count = original_streams.holdout_pair_count(knobs.meta_holdout_fraction, n_outputs)
            pairs = original_streams.holdout_pairs(count, n_outputs, knobs.meta_holdout_seed)
            q_star, outputs = self.world.q_star, self.world.outputs
            labels = (q_star[pairs[:, 0]] > q_star[pairs[:, 1]]).astype(jnp.float32)
            self.holdout = (outputs[pairs[:, 0]], outputs[pairs[:, 1]], labels)

    def sample(self, params: Params, key: jax.Array, n: int) -> jax.Array:
        """n sequences, int32 (n, L): each position splits the key (next, draw) and draws categorical(draw, logits)."""
        hidden = jnp.zeros((n, HIDDEN_DIM))
        token = jnp.full((n,), self.vocab, jnp.int32)
        tokens = []
        for _ in range(self.seq_len):
            hidden, logits = self.policy_net.apply(params, hidden, token, method=Policy.step)
            key, draw = jax.random.split(key)
            token = jax.random.categorical(draw, logits)
            tokens.append(token)
        return jnp.stack(tokens, axis=1)

    def log_prob(self, params: Params, tokens: jax.Array) -> jax.Array:
        """Teacher-forced log π of each sequence (B,)."""
        log_probs = jax.nn.log_softmax(self.policy_net.apply(params, tokens), axis=-1)
        return jnp.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0].sum(-1)

    def _judge_step(
        self, params: Params, opt: optax.OptState, first: jax.Array, second: jax.Array, labels: jax.Array
    ) -> tuple[Params, optax.OptState]:
        def loss(p: Params) -> jax.Array:
            return jnp.mean(_bce(self.judge_net.apply(p, first) - self.judge_net.apply(p, second), labels))

        updates, opt = self.judge_adam.update(jax.grad(loss)(params), opt)
        return optax.apply_updates(params, updates), opt

    @functools.partial(jax.jit, static_argnames=("self", "update_due", "meta_due"))
    def inner_step(
        self, nets: _Networks, key: jax.Array, update_due: bool, meta_due: bool
    ) -> tuple[_Networks, jax.Array, jax.Array]:
        """One inner step: policy, then every judge's update (and anchor step), then the meta check.

        Returns the networks, the next loop key and each judge's held-out accuracy before
        correction (n_judges,), NaN where no meta check ran.
        """
        batch, outputs, q_star = self.settings.batch_size, self.world.outputs, self.world.q_star
        key, sample_key = jax.random.split(key)
        tokens = self.sample(nets.policy, sample_key, batch)
        rewards = jnp.stack([self.judge_net.apply(j, tokens) for j in nets.judges]).mean(axis=0)

        def policy_loss(p: Params) -> jax.Array:
            log_prob = self.log_prob(p, tokens)
            advantage = jax.lax.stop_gradient(rewards - rewards.mean())
            return -jnp.mean(advantage * log_prob) + self.knobs.entropy_bonus * jnp.mean(log_prob)

        updates, policy_opt = self.policy_adam.update(jax.grad(policy_loss)(nets.policy), nets.policy_opt)
        policy = optax.apply_updates(nets.policy, updates)
        judges, judge_opts = list(nets.judges), list(nets.judge_opts)

        if update_due:
            key, key_first, key_second = jax.random.split(key, 3)
            first, second = self.sample(policy, key_first, batch), self.sample(policy, key_second, batch)
            for m in range(len(judges)):
                labels = (self.judge_net.apply(judges[m], first) > self.judge_net.apply(judges[m], second)).astype(
                    jnp.float32
                )
                judges[m], judge_opts[m] = self._judge_step(judges[m], judge_opts[m], first, second, labels)
                if self.n_anchor:
                    key, key_a, key_b = jax.random.split(key, 3)
                    index_a = jax.random.randint(key_a, (self.n_anchor,), 0, outputs.shape[0])
                    index_b = jax.random.randint(key_b, (self.n_anchor,), 0, outputs.shape[0])
                    anchor_labels = (q_star[index_a] > q_star[index_b]).astype(jnp.float32)
                    judges[m], judge_opts[m] = self._judge_step(
                        judges[m], judge_opts[m], outputs[index_a], outputs[index_b], anchor_labels
                    )

        accuracy = jnp.full((len(judges),), jnp.nan)
        if meta_due and self.holdout is not None:
            first, second, labels = self.holdout
            for m in range(len(judges)):
                correct = (self.judge_net.apply(judges[m], first) > self.judge_net.apply(judges[m], second)) == (
                    labels > 0.5
                )
                accuracy = accuracy.at[m].set(jnp.mean(correct))
                corrected = self._judge_step(judges[m], judge_opts[m], first, second, labels)
                below = accuracy[m] < self.knobs.meta_accuracy_threshold
                judges[m], judge_opts[m] = jax.tree.map(
                    lambda new, old, below=below: jnp.where(below, new, old), corrected, (judges[m], judge_opts[m])
                )
        return _Networks(policy, policy_opt, tuple(judges), tuple(judge_opts)), key, accuracy

    def pretrained_judges(self, script: original_streams.Script, seed: int) -> list[Params]:
        keys = original_streams.seed_keys(script, seed, self.knobs.n_judges)
        settings = PretrainSettings()  # the original's fixed pretraining, unless the condition sets its own target
        if self.knobs.judge_pretrain_target is not None:
            settings = settings.model_copy(update={"target_spearman": self.knobs.judge_pretrain_target})
        result = pretrain_judges(keys.judge_init, keys.judge_pretrain, self.world, settings, streams="original")
        if not bool(np.all(np.asarray(result.reached))):
            raise RuntimeError(f"pretraining of {script} seed {seed} did not reach its target")
        return [jax.tree.map(lambda leaf, m=m: leaf[m], result.params) for m in range(self.knobs.n_judges)]

    def metrics(self, policy: Params, judges: tuple[Params, ...]) -> dict[str, float]:
        """The original's four metrics (src/coevolution/diagnostics.py), computed its way."""
        outputs, q_star = self.world.outputs, self.world.q_star
        probs = jnp.exp(self.log_prob(policy, outputs))
        scores = jnp.stack([self.judge_net.apply(j, outputs) for j in judges]).mean(axis=0)
        safe_log = jnp.where(probs > 0, jnp.log(jnp.where(probs > 0, probs, 1.0)), 0.0)
        return {
            "policy_quality": float(jnp.sum(probs * q_star)),
            "judge_alignment": float(scipy.stats.spearmanr(np.asarray(scores), np.asarray(q_star)).statistic),
            "policy_entropy": float(-jnp.sum(probs * safe_log)),
            "judge_perceived_quality": float(jnp.sum(probs * scores)),
        }

    def run(
        self, script: original_streams.Script, seed: int, pretrained: tuple[Params, ...] | None = None
    ) -> list[dict[str, float]]:
        """One record per outer iteration, as the original writes them (its `iteration` t is after t + 1 iterations).

        pretrained: the run's judges, one per member, where they are at hand (a grid's, from the same keys and the
        same `pretrain_judges`); pretrained here if absent.
        """
        knobs = self.knobs
        keys = original_streams.seed_keys(script, seed, knobs.n_judges)
        if pretrained is None:
            pretrained = tuple(self.pretrained_judges(script, seed))
        assert len(pretrained) == knobs.n_judges
        policy = original_streams.init_original_policy(keys.policy_init, self.vocab, self.seq_len)
        nets = _Networks(
            policy, self.policy_adam.init(policy), pretrained, tuple(self.judge_adam.init(j) for j in pretrained)
        )
        key, history = keys.loop, []
        for iteration in range(self.settings.iterations):
            last_accuracy = None
            for step in range(self.settings.steps_per_iteration):
                update_due = not knobs.freeze_judge and (step + 1) % knobs.judge_update_every == 0
                meta_due = self.holdout is not None and (step + 1) % knobs.meta_update_every == 0
                nets, key, accuracy = self.inner_step(nets, key, update_due, meta_due)
                if meta_due:
                    last_accuracy = float(np.mean(np.asarray(accuracy, np.float64)))
            if knobs.reset_every > 0 and (iteration + 1) % knobs.reset_every == 0:
                nets = nets._replace(judges=pretrained, judge_opts=tuple(self.judge_adam.init(j) for j in pretrained))
            record = {"iteration": iteration, "seed": seed, **self.metrics(nets.policy, nets.judges)}
            if last_accuracy is not None:
                record["meta_judge_accuracy"] = last_accuracy
            history.append(record)
        return history
