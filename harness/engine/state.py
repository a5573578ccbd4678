"""The training state of a grid, in its one representation: networks as flat parameter rows.

Every network (a policy or a judge) is one row of floats (`harness.engine.flat_params`) with its
Adam state of the same width; models unravel a row only where they read it. The state
splits into a per-run part (leading axis R) and a per-judge-slot part (leading axis J),
so sharding, regrouping, checkpoints and resets are tree maps over those two parts.
"""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
import optax

# Bumped whenever the fields or row layouts below change: a checkpoint written under
# another layout is refused instead of being misread.
LAYOUT_VERSION = 5


@flax.struct.dataclass
class Network:
    """Networks stacked on a leading axis: params float32 (N, P) and their Adam state (moments (N, P), count (N,))."""

    params: jax.Array
    adam: optax.OptState


@flax.struct.dataclass
class RunState:
    """Per run (leading axis R): its policy, its checkpoints, its random stream, and this outer iteration's counters."""

    policy: Network
    # float32 (R, D, P): the policy at the start of the last D outer iterations, latest first (π₀ before the
    # first); what a past rejected side is drawn from. D = GridShape.history_depth, 0 where no run needs it.
    policy_history: jax.Array
    stream_key: jax.Array  # uint32 (R, 2): the key its draws come from (`harness.engine.streams`)
    judge_updates: jax.Array  # int32 (R,): steps with a judge update
    meta_corrections: jax.Array  # int32 (R,): meta-correction steps, summed over the run's judges


@flax.struct.dataclass
class SlotState:
    """Per judge slot (leading axis J): the judge. A run owns `n_judges` consecutive slots."""

    judge: Network
    # float32 (J, P): the judge's exponential moving average (`Knobs.judge_ema`), what rewards the policy where
    # the run keeps one; the pretrained row at the start and after a reset, and left so where the run keeps none.
    judge_ema: jax.Array


@flax.struct.dataclass
class CoevolutionState:
    """Everything that changes during training."""

    runs: RunState
    slots: SlotState
    step: jax.Array  # global inner-step count, shared by all runs


def adam_step(network: Network, grads: jax.Array, learning_rate: jax.Array) -> Network:
    """One Adam update of one network (row (P,)) with a traced learning rate, so it can vary per run.

    Adam acts on each parameter on its own, so updating the flat row is exactly updating the tree.
    """
    updates, adam = optax.adam(learning_rate).update(grads, network.adam, network.params)
    return Network(optax.apply_updates(network.params, updates), adam)


def fresh_network(params: jax.Array) -> Network:
    """A network row with a fresh Adam state (its structure does not depend on the learning rate)."""
    return Network(params, optax.adam(1.0).init(params))


def fresh_networks(rows: jax.Array) -> Network:
    """Rows (N, P) with fresh Adam states."""
    return jax.vmap(fresh_network)(rows)


def initial_state(
    policies: jax.Array, judges: jax.Array, stream_keys: jax.Array, history_depth: int = 0
) -> CoevolutionState:
    """Policy rows (R, Pp) and judge rows (J, Pj), each with fresh Adam, and stream keys (R, 2), at step 0;
    `history_depth` checkpoints per run, all π₀."""
    n_runs = policies.shape[0]
    return CoevolutionState(
        runs=RunState(
            policy=fresh_networks(policies),
            policy_history=jnp.repeat(policies[:, None], history_depth, axis=1),
            stream_key=stream_keys,
            judge_updates=jnp.zeros(n_runs, jnp.int32),
            meta_corrections=jnp.zeros(n_runs, jnp.int32),
        ),
        slots=SlotState(judge=fresh_networks(jnp.copy(judges)), judge_ema=jnp.copy(judges)),
        step=jnp.int32(0),
    )


def take(tree: jax.Array, index: jax.Array) -> jax.Array:
    """The entries `index` of every leaf's leading axis."""
    return jax.tree.map(lambda leaf: leaf[index], tree)


def select(mask: jax.Array, new: jax.Array, old: jax.Array) -> jax.Array:
    """Per leading-axis entry of every leaf: new where mask, else old."""

    def pick(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b)

    return jax.tree.map(pick, new, old)
