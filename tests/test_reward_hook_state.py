"""The policy step's hooks in the contract's one form, (value, batch, own) -> (value, own): the reward hook
(`shape_reward`) and the update hook (`update_policy`). Each is given its mechanism's own key and per-run state, what
the policy's own step returns of that state is kept, and what a look-ahead copy's steps return is dropped with the
copy; the update's learning rate and weight on mean log π are what the hooks leave."""

from __future__ import annotations

import zlib

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from harness.engine.architecture import DEFAULT_MODEL
from harness.grid import registry
from harness.grid.contract import Mechanism, PolicyBatch, PolicyUpdate
from harness.grid.knobs import Knobs, RunKnobs
from harness.grid.reward import policy_update, shaped_rewards
from harness.grid.spec import Condition, GridSpec, MechanismSource, RunSettings
from harness.grid.trainer import GridTrainer
from harness.mechanisms import entropy_bonus, learning_rates
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


def _halve_rate(update: PolicyUpdate, batch: PolicyBatch, own: Calls) -> tuple[PolicyUpdate, Calls]:
    """Halves the rate the hooks before it set, adds 1 to the weight, counts its calls and keeps its key."""
    changed = update.replace(learning_rate=update.learning_rate / 2, log_prob_weight=update.log_prob_weight + 1.0)
    return changed, Calls(own.count + 1, batch.key, own.seen)


HALVER = Mechanism("rate_halver", "halves the policy's learning rate", run_state=_calls, update_policy=_halve_rate)


def test_update_hooks_pass_the_update_on_in_mechanism_order_with_their_own_key_and_state() -> None:
    key = jax.random.PRNGKey(5)
    knobs = RunKnobs({"lr_policy": jnp.float32(0.004), "entropy_bonus": jnp.float32(0.25)})
    own = {"rate_halver": Calls(jnp.int32(7), jnp.zeros(2, jnp.uint32), jnp.int32(0))}
    tokens = jnp.zeros((4, 2), jnp.int32)
    batch = PolicyBatch(tokens, jnp.zeros(4), jnp.zeros(3), jnp.zeros(64), 8, DEFAULT_MODEL, own, knobs, key)
    mechanisms = (learning_rates.MECHANISM, entropy_bonus.MECHANISM, HALVER)
    update, returned = policy_update(mechanisms, batch, own)
    # The rate the built-in set (float32 of 0.004), halved after it; the bonus and the halver's 1 added to 0.
    np.testing.assert_array_equal(update.learning_rate, np.float32(0.004) / 2)
    np.testing.assert_array_equal(update.log_prob_weight, np.float32(0.25) + np.float32(1.0))
    assert int(returned["rate_halver"].count) == 8
    np.testing.assert_array_equal(returned["rate_halver"].key, jax.random.fold_in(key, zlib.crc32(b"rate_halver")))
    # With no hook at all the rate is NaN (never a silent step at some default) and the weight 0.
    bare, _ = policy_update((), batch, {})
    assert np.isnan(bare.learning_rate) and float(bare.log_prob_weight) == 0.0


def _trained(halver: bool, lr_policy: float, bonus: float) -> tuple[np.ndarray, np.ndarray]:
    """A grid's final policy rows, and the halver's call counts (None where it is not loaded): a baseline run and one
    whose judge's pairs come from a look-ahead copy trained 2 steps per update (whose steps call the hooks too)."""
    with registry.restored_catalog():
        sources = []
        if halver:
            registry.register(HALVER, module="rate_halver.py", digest="0" * 64)
            sources.append(MechanismSource(name="rate_halver", module="rate_halver.py", digest="0" * 64))
        knobs = {"lr_policy": lr_policy, "entropy_bonus": bonus}
        spec = GridSpec(
            mechanisms=tuple(sources),
            run=RunSettings(seeds=(0,), iterations=2, steps_per_iteration=STEPS, batch_size=16),
            world=TWO_POSITIONS,
            conditions=(
                Condition(name="baseline", knobs=Knobs(**knobs)),
                Condition(name="lookahead", knobs=Knobs(**knobs, chosen_from="lookahead", lookahead_steps=2)),
            ),
        )
        trainer = GridTrainer(spec)
        trainer.run()
        state = trainer.final_state
        counts = np.asarray(state.runs.of("rate_halver").count) if halver else None
    return np.asarray(state.runs.policy.params), counts


def test_a_grid_trains_at_the_rate_and_weight_its_update_hooks_leave() -> None:
    """With the halver loaded, a grid at lr 0.002 and no entropy bonus trains its policies as one without it at lr
    0.001 and an entropy bonus of 1 (halving is exact in floating point, and the halver adds 1 to the weight): the
    same rows to float rounding (two programs), far from the unhalved grid's; its hook ran on each of the 10 policy
    steps of every run and on none of a look-ahead copy's."""
    halved, counts = _trained(halver=True, lr_policy=0.002, bonus=0.0)
    by_knobs, _ = _trained(halver=False, lr_policy=0.001, bonus=1.0)
    unhalved, _ = _trained(halver=False, lr_policy=0.002, bonus=1.0)
    np.testing.assert_allclose(halved, by_knobs, rtol=0, atol=1e-6)
    assert np.max(np.abs(halved - unhalved)) > 1e-3
    np.testing.assert_array_equal(counts, [2 * STEPS, 2 * STEPS])


def test_a_reward_row_hook_in_the_old_grid_wide_form_is_refused_when_it_registers() -> None:
    """`reward_rows` took (shape, constants, knobs, slots, rows) for every slot at once; `reward_row` takes one slot's
    (row, judge, own): a hook of the old form cannot bind those three and is refused in one line."""

    def old_form(shape: object, constants: object, knobs: object, slots: object, rows: jax.Array) -> jax.Array:
        return rows

    with registry.restored_catalog(), pytest.raises(registry.MechanismError) as refused:
        registry.register(Mechanism("old_rows", "the old form", reward_row=old_form), module="old.py", digest="1")
    assert str(refused.value).startswith("mechanism 'old_rows': hook 'reward_row' (")
    assert "is called with (row, judge, own)" in str(refused.value)
