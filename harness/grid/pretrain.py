"""Judge pretraining: regress scores on noisy q* until the exact rank correlation reaches a target.

Every judge trains in one vmapped program and stops at its own first check that meets
its own target (later periods leave it unchanged), so results do not depend on which
judges share the batch. Judges from the same keys with different targets follow one
trajectory and stop at different checks.

Two random streams are available. ``"coevolab"`` (ours): the judge is initialised as in
`harness.engine.models` and step s draws its batch from fold_in(data key, s). ``"original"``: the
original lab's (see `harness.original.streams`): its initialisation, and a key chain that
every step splits three ways, (next key, batch-index key, label-noise key).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import PartitionSpec as P

from harness.engine.architecture import DEFAULT_NETWORK, NetworkConfig
from harness.engine.models import Params, init_judges, judge_score_table, judge_scores
from harness.engine.rank_stats import spearman
from harness.engine.streams import Streams
from harness.engine.world import World, WorldConfig
from harness.grid.compile_cache import compile_exported
from harness.grid.pretrain_data import JudgeData, no_dataset, pretraining_batch, pretraining_dataset
from harness.grid.sharding import SHARD_AXIS, from_shards, shard_mesh, to_shards
from harness.grid.spec import PretrainSettings
from harness.original.streams import init_original_judges, pretrain_step_keys


class PretrainResult(NamedTuple):
    """Per judge (leading axis P): params, steps taken, Spearman at the last check, and whether it was pretrained as
    asked (its target reached, or its fixed steps taken)."""

    params: Params
    steps: jax.Array
    spearman: jax.Array
    reached: jax.Array


class _PretrainState(NamedTuple):
    target: jax.Array  # the Spearman this judge stops at, float32
    params: Params
    opt_state: optax.OptState
    steps: jax.Array
    spearman: jax.Array
    done: jax.Array
    chain: jax.Array  # "original" streams: the key the next step splits; "coevolab": the data key, unused
    cap: jax.Array  # the most steps this judge takes, int32
    data: JudgeData  # what it is pretrained on (`harness.grid.pretrain_data`)


class DataFeatures(NamedTuple):
    """What of `harness.grid.pretrain_data` a pretraining program needs (static): per_judge, whether it takes each
    judge's step cap, example count and corruption share as arguments (else every judge draws afresh, uncorrupted,
    to the grid's cap); dataset_size, the largest dataset (0: none); corrupts, whether any judge corrupts labels."""

    per_judge: bool = False
    dataset_size: int = 0
    corrupts: bool = False


# Every judge draws afresh, uncorrupted, to the grid's cap: the program of grids without data choices.
FRESH_DRAWS = DataFeatures()


def pretrain_program(
    world: World,
    settings: PretrainSettings,
    n_shards: int,
    streams: Streams = "coevolab",
    network: NetworkConfig = DEFAULT_NETWORK,
    features: DataFeatures = FRESH_DRAWS,
) -> Callable:
    """The jitted pretraining of `n_shards` shards of judges side by side, one per device.

    (init_keys, data_keys (S, Q, 2), targets (S, Q), max_steps (int32 scalar), the world's outputs (N, L) and
    q* (N,)) -> every judge's final params, steps, spearman and done, a dict of (S, Q, ...), with S = n_shards and
    Q judges per shard (`judges_per_shard`); with features.per_judge three more arguments (S, Q) follow: each
    judge's step cap (int32, replacing max_steps), example count (int32) and corruption share (float32). Each shard
    loops over check periods until its own judges are done. `streams` as in the module docstring. One program per
    world, settings other than the step cap, shard count, streams, network and features, kept for the process: a
    grid's seed blocks, or a rerun with another cap, pretrain without compiling again.
    """
    return _pretrain_program(*_program_key(world, settings, n_shards, streams, network, features))


def _program_key(
    world: World,
    settings: PretrainSettings,
    n_shards: int,
    streams: Streams,
    network: NetworkConfig,
    features: DataFeatures,
) -> tuple:
    """What a pretraining program depends on (`_pretrain_program`'s arguments): the step cap and the targets are
    arguments of the program, so the settings' cap and target are set to their defaults."""
    if streams == "original" and (features.dataset_size or features.corrupts):
        raise ValueError("the original lab's pretraining streams draw fresh, uncorrupted batches only")
    fields = PretrainSettings.model_fields
    uncapped = settings.model_copy(
        update={"max_steps": fields["max_steps"].default, "target_spearman": fields["target_spearman"].default}
    )
    return world.config, uncapped, n_shards, streams, network, features


@functools.cache
def _pretrain_program(
    world_config: WorldConfig,
    settings: PretrainSettings,
    n_shards: int,
    streams: Streams,
    network: NetworkConfig,
    features: DataFeatures,
) -> Callable:
    world = World(world_config)
    vocab, seq_len = world.config.vocab_size, world.config.seq_len
    optimizer = optax.adam(settings.learning_rate)

    # The world's tables enter as arguments, not constants: XLA would otherwise fold work over every output (sorting
    # q* for the Spearman checks) into the compile, which at 262,144 outputs took over a minute.
    def loss_fn(
        params: Params, data: JudgeData, key: jax.Array, world_tables: tuple[jax.Array, jax.Array]
    ) -> jax.Array:
        k_index, k_noise = jax.random.split(key)
        return batch_loss(params, data, key, k_index, k_noise, world_tables)

    def batch_loss(
        params: Params,
        data: JudgeData,
        step_key: jax.Array,
        k_index: jax.Array,
        k_noise: jax.Array,
        world_tables: tuple[jax.Array, jax.Array],
    ) -> jax.Array:
        outputs, q_star = world_tables
        batch = (settings.batch_size, settings.label_noise, features.corrupts)
        index, label = pretraining_batch(data, step_key, k_index, k_noise, q_star, *batch)
        scores = judge_scores(params, outputs[index], vocab)
        return jnp.mean(optax.squared_error(scores, label))

    def train_step(
        state: tuple[Params, optax.OptState], step_key: jax.Array, data: JudgeData, world_tables: tuple
    ) -> tuple:
        params, opt_state = state
        grads = jax.grad(loss_fn)(params, data, step_key, world_tables)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), None

    def original_step(state: tuple, _: None, data: JudgeData, world_tables: tuple) -> tuple:
        params, opt_state, chain = state
        chain, k_index, k_noise = pretrain_step_keys(chain)
        grads = jax.grad(batch_loss)(params, data, k_index, k_index, k_noise, world_tables)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, chain), None

    def start(
        init_keys: jax.Array, data_keys: jax.Array, targets: jax.Array, caps: jax.Array, data: JudgeData
    ) -> _PretrainState:
        if streams == "original":
            params = init_original_judges(init_keys, vocab, seq_len)
        else:
            params = init_judges(init_keys, vocab, seq_len, network)
        count = init_keys.shape[0]
        return _PretrainState(
            targets,
            params,
            jax.vmap(optimizer.init)(params),
            jnp.zeros(count, jnp.int32),
            jnp.full(count, jnp.nan, jnp.float32),
            jnp.zeros(count, jnp.bool_),
            data_keys,
            caps,
            data,
        )

    def chunk(state: _PretrainState, data_key: jax.Array, world_tables: tuple) -> _PretrainState:
        """One check period: `check_every` steps, then the exact Spearman. A finished judge stays as it is."""
        if streams == "original":
            carry = (state.params, state.opt_state, state.chain)
            step = functools.partial(original_step, data=state.data, world_tables=world_tables)
            (params, opt_state, chain), _ = jax.lax.scan(step, carry, None, length=settings.check_every)
        else:
            step_keys = jax.vmap(lambda s: jax.random.fold_in(data_key, s))(
                state.steps + jnp.arange(settings.check_every)
            )
            step = functools.partial(train_step, data=state.data, world_tables=world_tables)
            (params, opt_state), _ = jax.lax.scan(step, (state.params, state.opt_state), step_keys)
            chain = state.chain
        rho = spearman(judge_score_table(params, vocab, seq_len), world_tables[1])
        trained = state._replace(
            params=params,
            opt_state=opt_state,
            steps=state.steps + settings.check_every,
            spearman=rho,
            done=rho >= state.target,
            chain=chain,
        )
        finished = state.done | (state.steps >= state.cap)
        return jax.tree.map(lambda old, new: jnp.where(finished, old, new), state, trained)

    def judge_data(data_keys: jax.Array, examples: jax.Array, corruption: jax.Array, q_star: jax.Array) -> JudgeData:
        if not features.dataset_size:
            return no_dataset(examples, corruption)
        dataset = functools.partial(
            pretraining_dataset, size=features.dataset_size, q_star=q_star, label_noise=settings.label_noise
        )
        return jax.vmap(dataset)(data_keys, examples, corruption)

    def pretrain_shard(
        init_keys: jax.Array,
        data_keys: jax.Array,
        targets: jax.Array,
        max_steps: jax.Array,
        outputs: jax.Array,
        q_star: jax.Array,
        *per_judge: jax.Array,
    ) -> dict[str, jax.Array]:
        # One loop over check periods for the shard's judges; `chunk` leaves finished ones unchanged.
        init_keys, data_keys, targets = init_keys[0], data_keys[0], targets[0]
        count = init_keys.shape[0]
        if per_judge:
            caps, examples, corruption = (values[0] for values in per_judge)
        else:
            caps, examples, corruption = (jnp.full(count, max_steps), jnp.zeros(count, jnp.int32), jnp.zeros(count))
        data = judge_data(data_keys, examples, corruption, q_star)

        def unfinished(state: _PretrainState) -> jax.Array:
            return jnp.any(~state.done & (state.steps < state.cap))

        def period(state: _PretrainState) -> _PretrainState:
            return jax.vmap(lambda judge, key: chunk(judge, key, (outputs, q_star)))(state, data_keys)

        state = jax.lax.while_loop(unfinished, period, start(init_keys, data_keys, targets, caps, data))
        # What a caller reads of the loop's state, as a dict: an exported program carries that structure itself.
        result = {"params": state.params, "steps": state.steps, "spearman": state.spearman, "done": state.done}
        return jax.tree.map(lambda leaf: leaf[None], result)

    sharded = P(SHARD_AXIS)
    # check_vma=False: shards never communicate, so there is nothing for the check to
    # find, and it would ask that constants in the loop carry be marked per-shard.
    per_judge_specs = (sharded,) * 3 if features.per_judge else ()
    return jax.jit(
        jax.shard_map(
            pretrain_shard,
            mesh=shard_mesh(n_shards),
            in_specs=(sharded, sharded, sharded, P(), P(), P(), *per_judge_specs),
            out_specs=sharded,
            check_vma=False,
        )
    )


# Judges per shard up to which pretraining pads to a power of two (`judges_per_shard`). A judge's pretrained bits do
# not depend on which judges share its shard, but they can on how many do: XLA rounds a vmapped batch by its size's
# class. Measured on the 2-core AMD EPYC (one judge, 8x2 world, padded to n): n = 1; n = 2-5; n = 6-9, 12 and 16; and
# n = 64 are four different results. The committed references' blocks of 10 to 30 judges per shard pretrain to the
# same steps and Spearman padded to 16 or 32, but for the scale study's attention judges (10 -> 16: regenerated); those
# of 50, 70 and 113, padded to 64 or 128, do not. Up to the limit a compile (5-10 s in the tests' worlds) is much of
# a grid's pretraining; above it the pretraining itself is the cost, and padding could nearly double it, so the count
# is kept, and with it the judges of every larger grid run so far.
PRETRAIN_LADDER_LIMIT = 32


def judges_per_shard(count: int, n_shards: int) -> int:
    """Judges each of `n_shards` shards pretrains for a grid of `count`: the least power of two that holds them, up
    to `PRETRAIN_LADDER_LIMIT`; above it, as many as hold them.

    The program's shape depends on this count (and on what `_program_key` holds), so grids of other seed or condition
    counts that fall on the same rung pretrain with one compiled program.

    Raises:
        ValueError: fewer than one judge or shard.
    """
    if count < 1 or n_shards < 1:
        raise ValueError(f"pretraining needs a judge and a shard, got {count} judges in {n_shards} shards")
    per_shard = math.ceil(count / n_shards)
    if per_shard > PRETRAIN_LADDER_LIMIT:
        return per_shard
    return 1 << (per_shard - 1).bit_length()


def pretrain_judges(
    init_keys: jax.Array,
    data_keys: jax.Array,
    world: World,
    settings: PretrainSettings,
    max_shards: int = 1,
    streams: Streams = "coevolab",
    targets: jax.Array | None = None,
    network: NetworkConfig = DEFAULT_NETWORK,
    examples: np.ndarray | None = None,
    corruption: np.ndarray | None = None,
    fixed_steps: np.ndarray | None = None,
) -> PretrainResult:
    """Pretrain one judge per key pair. init_keys, data_keys: (P, 2) -> PretrainResult with axis P.

    targets: float (P,), the Spearman each judge stops at (None: settings.target_spearman for all).
    network: the judges' architecture (the grid's `[model]`; the original lab's streams know only the default).
    examples, corruption: int and float (P,), what each judge is pretrained on (`harness.grid.pretrain_data`; None:
    fresh draws, uncorrupted); fixed_steps: int (P,), a judge with a positive count trains exactly that many steps
    (a multiple of settings.check_every), whatever its Spearman, and counts as reached (None or 0: to its target, at
    most settings.max_steps). The other settings are shared: one program pretrains judges of any mix of these.

    The judges are split into min(max_shards, devices) shards, one per device, that train side by side (see
    `harness.grid.sharding`), each padded to `judges_per_shard` (even where there are fewer judges than shards); each
    judge's training depends only on its own keys (its last bits also on its shard's judge count: see
    `PRETRAIN_LADDER_LIMIT`).
    streams="original" follows the original lab: pass its init and pretraining keys
    (`harness.original.streams.seed_keys`) to get its judges.
    """
    chex.assert_equal_shape([init_keys, data_keys])
    count = init_keys.shape[0]
    if targets is None:
        targets = jnp.full(count, settings.target_spearman, jnp.float32)
    targets = np.asarray(targets, np.float32)
    chex.assert_shape(targets, (count,))
    examples = np.zeros(count, np.int32) if examples is None else np.asarray(examples, np.int32)
    corruption = np.zeros(count, np.float32) if corruption is None else np.asarray(corruption, np.float32)
    fixed = np.zeros(count, np.int32) if fixed_steps is None else np.asarray(fixed_steps, np.int32)
    chex.assert_shape([examples, corruption, fixed], (count,))
    features = DataFeatures(
        per_judge=bool(examples.any() or corruption.any() or fixed.any()),
        dataset_size=int(examples.max(initial=0)),
        corrupts=bool(corruption.any()),
    )
    n_shards = min(max_shards, len(jax.local_devices()))
    per_shard = judges_per_shard(count, n_shards)
    # Fillers repeat the last judge (its keys, target and cap). `chunk` freezes each judge once it is done, so a filler
    # can only cost time, never change a judge.
    index = np.minimum(np.arange(n_shards * per_shard), count - 1).reshape(n_shards, per_shard)
    key = _program_key(world, settings, n_shards, streams, network, features)
    tail: tuple = ()
    if features.per_judge:
        # A judge of fixed steps has no target to stop at: it runs to its own cap.
        targets = np.where(fixed > 0, np.inf, targets).astype(np.float32)
        caps = np.where(fixed > 0, fixed, settings.max_steps).astype(np.int32)
        tail = to_shards((caps, examples, corruption), index)
    shards = to_shards((init_keys, data_keys, jnp.asarray(targets)), index)
    args = (*shards, jnp.int32(settings.max_steps), world.outputs, world.q_star, *tail)
    names = ("world", "settings", "shards", "streams", "network", "data")
    parts = dict(zip(names, map(repr, key), strict=True)) | {"judges_per_shard": str(per_shard)}
    pretrain = compile_exported("pretrain_shard", _pretrain_program(*key), args, " ".join(map(repr, key)), parts=parts)
    state = from_shards(pretrain(*args), np.arange(count))
    result = PretrainResult(state["params"], state["steps"], state["spearman"], state["done"] | jnp.asarray(fixed > 0))
    chex.assert_tree_all_finite(result.params)
    return result
