"""The training state of a grid, in its one representation: networks as flat parameter rows.

Every network (a policy or a judge) is one row of floats (`harness.engine.flat_params`) with its
Adam state of the same width; models unravel a row only where they read it. The state
splits into a per-run part (leading axis R) and a per-judge-slot part (leading axis J),
so sharding, regrouping, checkpoints and resets are tree maps over those two parts. Each
part holds the loop's own networks and, by name, the state of every mechanism that keeps
one: a mechanism declares its state in its own module, and it exists only there.
"""

from __future__ import annotations

from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import optax

# Bumped whenever the fields or row layouts below change: a checkpoint written under
# another layout is refused instead of being misread.
LAYOUT_VERSION = 6


@flax.struct.dataclass
class Network:
    """Networks stacked on a leading axis: params float32 (N, P) and their Adam state (moments (N, P), count (N,))."""

    params: jax.Array
    adam: optax.OptState


@flax.struct.dataclass
class RunState:
    """Per run (leading axis R): its policy, its random stream, and each mechanism's own state.

    mechanisms: mechanism name -> that mechanism's per-run state (a pytree of arrays with leading axis R), for the
    mechanisms that keep one (`harness.grid.contract.Mechanism.run_state`).
    """

    policy: Network
    stream_key: jax.Array  # uint32 (R, 2): the key its draws come from (`harness.engine.streams`)
    mechanisms: dict[str, Any]

    def of(self, mechanism: str) -> Any:
        """The per-run state of `mechanism`."""
        return self.mechanisms[mechanism]

    def with_state(self, mechanism: str, value: Any) -> RunState:
        """These runs with `mechanism`'s per-run state replaced by `value`."""
        return self.replace(mechanisms={**self.mechanisms, mechanism: value})


@flax.struct.dataclass
class SlotState:
    """Per judge slot (leading axis J): the judge, and each mechanism's own per-judge state. A run owns as many
    consecutive slots as it has judges.

    mechanisms: mechanism name -> that mechanism's per-judge state (leading axis J), for the mechanisms that keep one
    (`harness.grid.contract.Mechanism.slot_state`).
    """

    judge: Network
    mechanisms: dict[str, Any]

    def of(self, mechanism: str) -> Any:
        """The per-judge state of `mechanism`."""
        return self.mechanisms[mechanism]

    def with_state(self, mechanism: str, value: Any) -> SlotState:
        """These slots with `mechanism`'s per-judge state replaced by `value`."""
        return self.replace(mechanisms={**self.mechanisms, mechanism: value})


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
    policies: jax.Array,
    judges: jax.Array,
    stream_keys: jax.Array,
    run_states: dict[str, Any] | None = None,
    slot_states: dict[str, Any] | None = None,
) -> CoevolutionState:
    """Policy rows (R, Pp) and judge rows (J, Pj), each with fresh Adam, and stream keys (R, 2), at step 0; each
    mechanism's per-run and per-judge state as given (leading axes R and J)."""
    return CoevolutionState(
        runs=RunState(policy=fresh_networks(policies), stream_key=stream_keys, mechanisms=dict(run_states or {})),
        slots=SlotState(judge=fresh_networks(jnp.copy(judges)), mechanisms=dict(slot_states or {})),
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
