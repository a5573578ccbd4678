"""The reward hook (`shape_reward`) in the contract's one form, (rewards, batch, own) -> (rewards, own): it is given
its mechanism's own key and per-run state, what the policy's own step returns of that state is kept, and what a
look-ahead copy's steps return is dropped with the copy."""

from __future__ import annotations

import zlib

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from harness.engine.architecture import DEFAULT_MODEL
from harness.grid import registry
from harness.grid.contract import Mechanism, PolicyBatch
from harness.grid.knobs import Knobs
from harness.grid.reward import shaped_rewards
from harness.grid.spec import Condition, GridSpec, MechanismSource, RunSettings
from harness.grid.trainer import GridTrainer
from tests.worlds import TWO_POSITIONS


@flax.struct.dataclass
class Calls:
    """Per run: reward-hook calls counted, the last key the hook was given, what it read of the other's state."""

    count: jax.Array
    key: jax.Array
    seen: jax.Array


def _calls(shape: object, policy: jax.Array) -> Calls:
    return Calls(jnp.zeros((), jnp.int32), jnp.zeros(2, jnp.uint32), jnp.zeros((), jnp.int32))


def _counting(other: str):
    def shape_reward(rewards: jax.Array, batch: PolicyBatch, own: Calls) -> tuple[jax.Array, Calls]:
        return rewards + 1.0, Calls(own.count + 1, batch.key, batch.mechanisms[other].count)

    return shape_reward


FIRST = Mechanism(
    "first_counter", "counts its reward-hook calls", run_state=_calls, shape_reward=_counting("second_counter")
)
SECOND = Mechanism("second_counter", "counts too", run_state=_calls, shape_reward=_counting("first_counter"))


def test_each_hook_gets_its_own_key_and_state_and_reads_the_others_as_the_step_found_them() -> None:
    key = jax.random.PRNGKey(11)
    states = {
        "first_counter": Calls(jnp.int32(3), jnp.zeros(2, jnp.uint32), jnp.int32(0)),
        "second_counter": Calls(jnp.int32(5), jnp.zeros(2, jnp.uint32), jnp.int32(0)),
    }
    tokens = jnp.zeros((4, 2), jnp.int32)
    batch = PolicyBatch(tokens, jnp.zeros(4), jnp.zeros(3), jnp.zeros(64), 8, DEFAULT_MODEL, states, None, key)
    rewards, own = shaped_rewards((FIRST, SECOND), jnp.zeros(4), batch)
    np.testing.assert_array_equal(rewards, 2.0)  # both hooks, in turn
    first, second = own["first_counter"], own["second_counter"]
    assert (int(first.count), int(second.count)) == (4, 6)
    # Each read the other's count as the step found it, whichever ran first.
    assert (int(first.seen), int(second.seen)) == (5, 3)
    # Each key is the batch's folded with the CRC-32 of the mechanism's name: its own, and not the other's.
    for name, calls in own.items():
        np.testing.assert_array_equal(calls.key, jax.random.fold_in(key, zlib.crc32(name.encode())))
    assert not np.array_equal(first.key, second.key)


STEPS = 5


def test_the_policy_steps_state_is_kept_and_a_look_ahead_copys_is_dropped() -> None:
    """Two iterations of 5 steps: every run's hook counts 10 calls, a run whose judge's pairs come from a look-ahead
    copy trained 2 steps per update (whose steps call the hook too) included."""
    with registry.restored_catalog():
        sources = []
        for mechanism in (FIRST, SECOND):
            registry.register(mechanism, module=f"{mechanism.name}.py", digest="0" * 64)
            sources.append(MechanismSource(name=mechanism.name, module=f"{mechanism.name}.py", digest="0" * 64))
        spec = GridSpec(
            mechanisms=tuple(sources),
            run=RunSettings(seeds=(0,), iterations=2, steps_per_iteration=STEPS, batch_size=16),
            world=TWO_POSITIONS,
            conditions=(
                Condition(name="baseline"),
                Condition(name="lookahead", knobs=Knobs(chosen_from="lookahead", lookahead_steps=2)),
            ),
        )
        trainer = GridTrainer(spec)
        trainer.run()
    state = trainer.final_state
    for name in ("first_counter", "second_counter"):
        np.testing.assert_array_equal(state.runs.of(name).count, [2 * STEPS, 2 * STEPS])
