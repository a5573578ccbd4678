"""Splitting a grid's runs into shards that run side by side, one per device.

One training step is a long chain of small kernels, and XLA:CPU runs most of them on a
single core however many runs are batched into them. A second core is only used when a
second program runs beside the first. So the runs are split into shards of identical
shape, one per CPU device (JAX is given one device per core, see `use_every_cpu_core`),
and `shard_map` runs the same per-shard program on every device at once.

Shards need identical shapes. Runs are dealt to shards kind by kind (`GroupMembership`: runs of
one kind are interchangeable for shape), and a shard that is short of a run of some kind
gets a filler: a copy of a real run of that kind, computed alongside and then ignored. Where the
grid has a seed per device or more, a shard holds as many runs of each kind as s seeds of the grid
have (`seeds_per_shard`), so beyond a few seeds per device its shape, and the program compiled for
it, does not depend on the grid's seed count. A seed's runs of each kind (its conditions of that kind), or a shard's
where the grid is split by work, are rounded up to a rung of the same ladder (`runs_rung`), so grids whose conditions
differ only in how many of them share a kind (5 or 6 slow-judge values) run one program too.
On a CPU a device runs its shards in turns of a few runs each, which keeps a shard's working set in cache; an
accelerator runs all of its runs as one shard (`piece_work_for`).
The static sizes mechanisms declare (pair counts, a history's depth, a look-ahead's length) are
padded to the largest shard's, as within a grid.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import warnings
from collections.abc import Mapping, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from harness.common.wording import plural
from harness.grid.layout import GridLayout, GridShape, GroupMembership, group_membership, layout_runs

SHARD_AXIS = "shards"


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def use_every_cpu_core() -> None:
    """Give JAX one CPU device per usable core, so a grid can run one shard per core.

    Leaves JAX alone where the user chose a device count (JAX_NUM_CPU_DEVICES or
    XLA_FLAGS=--xla_force_host_platform_device_count). The count can only be set before JAX's
    first operation: once JAX has started with fewer CPU devices than usable cores, this warns
    (RuntimeWarning) and keeps the devices JAX has, so grids still run, in fewer shards.

    Warns:
        RuntimeWarning: JAX's backend was initialised before this call, with fewer CPU devices than cores.
    """
    if jax.config.jax_num_cpu_devices >= 0:
        return
    if re.search(r"xla_force_host_platform_device_count", os.environ.get("XLA_FLAGS", "")):
        return
    cores = usable_cores()
    try:
        # JAX's own check refuses the setting once its backend exists: the one reliable sign that it has started.
        jax.config.update("jax_num_cpu_devices", cores)
    except RuntimeError:
        devices = len(jax.devices("cpu"))
        if devices < cores:
            warnings.warn(
                f"use_every_cpu_core() came after JAX started, so JAX keeps {plural(devices, 'CPU device')} for "
                f"{plural(cores, 'usable core')} and grids run in fewer shards. Call it before anything "
                "initialises JAX (first thing in a notebook, before any JAX operation), or set JAX_NUM_CPU_DEVICES "
                f"(or XLA_FLAGS=--xla_force_host_platform_device_count={cores}) before starting Python.",
                RuntimeWarning,
                stacklevel=2,
            )


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """Where a grid's runs sit on its shards.

    shards: one layout per shard, all of `shape` (fillers included).
    shard_runs int (S, Rs), shard_slots int (S, Js): the grid run (judge slot) that each
    shard run (slot) computes. run_at int (R,), slot_at int (J,): the index into the
    flattened shard runs (S * Rs) or slots (S * Js) that holds each grid run's (slot's) own result.
    """

    shape: GridShape
    shards: tuple[GridLayout, ...]
    shard_runs: np.ndarray
    shard_slots: np.ndarray
    run_at: np.ndarray
    slot_at: np.ndarray
    devices: int = 1

    @property
    def n_shards(self) -> int:
        return len(self.shards)

    @property
    def pieces(self) -> int:
        """Shards per device, run one after another by each device."""
        return self.n_shards // self.devices

    def piece(self, piece: int) -> np.ndarray:
        """The shards that run in turn `piece` (one per device, in device order): device d runs shards
        d * pieces ... (d + 1) * pieces - 1, one per turn."""
        return np.arange(self.devices) * self.pieces + piece

    @property
    def fillers(self) -> int:
        """Runs computed only to pad shards to one shape."""
        return self.shard_runs.size - self.run_at.size


def _runs_of_kind(layout: GridLayout) -> dict[GroupMembership, list[int]]:
    """The grid's runs grouped by work kind, in run order."""
    mechanisms, n_outputs = layout.shape.mechanisms, layout.spec.world.n_outputs
    condition_kinds = [group_membership(c.knobs, n_outputs, mechanisms) for c in layout.spec.conditions]
    runs_of_kind: dict[GroupMembership, list[int]] = {}
    for run, condition in enumerate(layout.run_condition):
        runs_of_kind.setdefault(condition_kinds[condition], []).append(run)
    return runs_of_kind


# Pieces: a grid of more shards than devices runs them in turns, each shard through the whole iteration, so that
# one shard's working set stays in cache. The turns are calls of one program made by the host (`to_pieces`),
# dispatched in order without waiting, so the program depends on the shard's shape and the device count, never on
# how many shards the grid has. Measured against the `lax.map` over a device's shards inside one program that it
# replaced: the published grid's metrics bit for bit the same (3 turns), its training time within this machine's
# run-to-run spread (83-96 s over seven runs, against 87-89 s over three before), its peak memory 1.34 GB against 1.42.
# Measured on 2 cores (baseline runs, 100 steps, with that `lax.map`): 360 runs in shards of 5 cost 347 µs per
# run-step against 674 µs as two shards of 180; at 90 runs shards of 3-9 runs are within noise of one another. A
# shard's work is counted in networks (runs + judge slots); a baseline run is 2.
PIECE_WORK = 16  # networks per shard the piece count aims at (about 8 baseline runs)
PIECE_OVERHEAD = 1.15  # the most total work (fillers included) that more pieces may add


def piece_work_for(platform: str) -> int | None:
    """Networks per shard that a device's turns aim at on `platform` (a JAX device's `platform`): `PIECE_WORK` on
    CPUs; None elsewhere, for no turns: each device runs all of its runs as one shard.

    An accelerator runs a step's kernels over the whole batch at once, so turns only add launches. On one NVIDIA
    H200 (JAX 0.11.2, steps_per_iteration=100, `python -m benchmarks.accelerator`), the published grid at 5 seeds
    took 63.1 µs per run-step in a CPU's five turns of 18 runs and 41.5 µs as this plan's one shard of 6 seeds'
    worth (108 runs, 18 of them fillers); one shard of exactly its 90 runs took 35.5 µs (against 68.0 in turns,
    measured on another such machine), so on that GPU the fillers of the seed ladder cost their share of the time:
    the price of one program for every seed count of a rung, where a compile there took 27-43 s.
    """
    return PIECE_WORK if platform == "cpu" else None


# Seeds per shard, where a grid has at least as many seeds as devices: each shard holds this many seeds' worth of
# runs of every kind (a kind's runs are dealt in the grid's condition-major order, so a shard's runs of a kind of
# several conditions are not always whole seeds), so grids of one set of conditions share their shard shape (and so
# their programs) whatever their seed count, beyond a few seeds per device.
# Powers of two and their halfway steps (3 * 2**k), far enough for one shard of a grid of many thousands of seeds.
# The same ladder rounds up a grid's runs of each kind (`runs_rung`).
SEEDS_PER_SHARD = tuple(sorted({2**k for k in range(16)} | {3 * 2**k for k in range(15)}))
SEED_PADDING = 4 / 3  # the most seeds' worth of runs (fillers included) per seed of the grid, above one per device


# Runs of a kind per seed (split by seeds) or per shard (split by work): rounded up to a rung of the same ladder
# (fillers make up the difference), so that a shard's shape, and with it the compiled program, depends on how many
# conditions share a kind only through the rung their count falls on: 5 and 6 conditions of a kind run one program,
# as do 9 to 12. The ladder holds every count up to 4, so those are never padded; above, a kind computes less than
# half again its runs (17 rounds up to 24). A filler changes the other runs of its shard in their last float bits (a
# vmapped batch of another size rounds differently), so a grid whose counts are on rungs keeps its bits: the
# published grid's (1 to 4 runs of a kind per shard, at 5 seeds and at 100) do.
def runs_rung(count: int) -> int:
    """The smallest rung of `SEEDS_PER_SHARD` that holds `count` runs (`count` itself above the ladder's top)."""
    return next((rung for rung in SEEDS_PER_SHARD if rung >= count), count)


def seeds_per_shard(n_seeds: int, devices: int, seed_work: int, piece_work: int | None = PIECE_WORK) -> int | None:
    """The rung of `SEEDS_PER_SHARD` for a grid of `n_seeds` seeds on `devices` devices whose runs of one seed are
    `seed_work` networks: the largest rung whose shard is at most `piece_work` networks (or 1, where one seed is
    more; any size where `piece_work` is None) and no more than the smallest rung that holds the grid in one turn of
    the devices, stepped down while the seeds' worth of runs computed (fillers included) would be more than
    `SEED_PADDING` times the grid's and more than one turn. None where even one seed per shard pads more than that
    (few seeds on many devices: 5 on 4 would compute 8), for the split by work instead."""

    def padded(rung: int) -> int:
        """Seeds' worth of runs computed, fillers included."""
        return devices * rung * math.ceil(n_seeds / (devices * rung))

    one_turn = next((rung for rung in SEEDS_PER_SHARD if rung * devices >= n_seeds), SEEDS_PER_SHARD[-1])
    rungs = [
        rung
        for rung in SEEDS_PER_SHARD
        if rung <= one_turn and (rung == 1 or piece_work is None or rung * seed_work <= piece_work)
    ]
    within = [rung for rung in rungs if padded(rung) <= max(SEED_PADDING * n_seeds, devices * rung)]
    return within[-1] if within else None


def plan_shards(
    layout: GridLayout, max_shards: int, pieces: int | None = None, piece_work: int | None = PIECE_WORK
) -> ShardPlan:
    """Split `layout` into shards: at most `max_shards` devices side by side, each running `pieces` shards in turn.

    Where the grid has at least `max_shards` seeds (and `pieces` is None), by seeds: every device is used and each
    shard holds `seeds_per_shard` seeds' worth of runs of every kind (a seed's runs of a kind: the kind's conditions,
    rounded up by `runs_rung`), so that, beyond a few seeds per device, the shard's shape depends on the grid's
    kinds of condition and the rungs of their counts, not on its seed count. Otherwise (or where that would pad more
    than `SEED_PADDING` allows) by work: the device count whose busiest device has the
    least work (runs plus judge slots, fillers included; ties go to fewer devices), then pieces (None: chosen here)
    that make shards near `piece_work` networks each, as long as the fillers that more, smaller shards need add at
    most `PIECE_OVERHEAD` to the total work; a shard's runs of each kind are an even share rounded up by `runs_rung`.
    Costs follow from the run counts per kind, so only the chosen split is laid out. `piece_work` None (an
    accelerator's, `piece_work_for`): one turn, each device's runs in one shard.
    """
    if max_shards < 1:
        raise ValueError(f"max_shards must be at least 1, got {max_shards}")
    runs_of_kind = _runs_of_kind(layout)
    n_runs = layout.shape.n_runs
    n_seeds = len(np.unique(layout.run_seed_index))

    def per_shard(n_shards: int) -> dict[GroupMembership, int]:
        """Runs of each kind per shard when the grid is dealt into n_shards shards (or per seed, n_shards the
        seed count), rounded up to a rung."""
        return {kind: runs_rung(math.ceil(len(runs) / n_shards)) for kind, runs in runs_of_kind.items()}

    per_seed = per_shard(n_seeds)
    seed_work = sum(count * (1 + n_judges) for (n_judges, _), count in per_seed.items())
    seeds = (
        seeds_per_shard(n_seeds, max_shards, seed_work, piece_work)
        if pieces is None and n_seeds >= max_shards
        else None
    )
    if seeds is not None:
        shard_kinds = {kind: count * seeds for kind, count in per_seed.items()}
        # As many turns as the kind that needs most: with every kind's count rounded up, its runs fill the shards
        # faster than the seeds do, and a turn by seeds would compute shards of fillers alone.
        turns = max(math.ceil(len(runs) / (shard_kinds[kind] * max_shards)) for kind, runs in runs_of_kind.items())
        return deal_runs(layout, max_shards * turns, devices=max_shards, per_shard=shard_kinds)

    def cost(n_shards: int) -> int:
        """Networks per shard when the grid is dealt into n_shards shards."""
        return sum(count * (1 + n_judges) for (n_judges, _), count in per_shard(n_shards).items())

    devices = min(range(1, min(max_shards, n_runs) + 1), key=lambda n: (cost(n), n))
    if pieces is None and piece_work is None:
        pieces = 1
    if pieces is None:
        least_work = devices * cost(devices)
        affordable = [
            p for p in range(1, n_runs // devices + 1) if devices * p * cost(devices * p) <= PIECE_OVERHEAD * least_work
        ]
        pieces = min(affordable, key=lambda p: (abs(math.log(cost(devices * p) / piece_work)), p))
    pieces = max(1, min(pieces, n_runs // devices))
    return deal_runs(layout, devices * pieces, devices=devices, per_shard=per_shard(devices * pieces))


def deal_runs(
    layout: GridLayout,
    n_shards: int,
    devices: int | None = None,
    per_shard: Mapping[GroupMembership, int] | None = None,
) -> ShardPlan:
    """Split `layout` into `n_shards` shards of one shape: each kind's runs in equal blocks, short blocks filled.

    devices: the devices the shards are spread over, n_shards / devices consecutive shards each (default: one each).
    per_shard: runs of each kind per shard (default: as few as hold the kind's runs); later shards of a kind get
    only fillers where this is more than that.
    """
    devices = n_shards if devices is None else devices
    if n_shards % devices:
        raise ValueError(f"{n_shards} shards do not split evenly over {devices} devices")
    spec = layout.spec
    runs_of_kind = _runs_of_kind(layout)
    shard_runs: list[list[int]] = [[] for _ in range(n_shards)]
    placed_at: dict[int, tuple[int, int]] = {}  # grid run -> (shard, position in shard)
    for kind, runs in runs_of_kind.items():
        count = math.ceil(len(runs) / n_shards) if per_shard is None else per_shard.get(kind, 0)
        if count * n_shards < len(runs):
            raise ValueError(f"{count} runs of a kind per shard cannot hold its {len(runs)} in {n_shards} shards")
        for shard in range(n_shards):
            own = runs[shard * count : (shard + 1) * count]
            for run in own:
                placed_at[run] = (shard, len(shard_runs[shard]))
                shard_runs[shard].append(run)
            shard_runs[shard].extend([runs[0]] * (count - len(own)))  # fillers

    runs = np.asarray(shard_runs, dtype=np.int64)  # (S, Rs): every shard got the same count
    shards = [layout_runs(spec, layout.run_condition[ids], layout.run_seed_index[ids]) for ids in runs]
    shape = _common_shape([s.shape for s in shards])
    shards = [dataclasses.replace(s, shape=shape) for s in shards]

    first_slot = np.searchsorted(layout.slot_run, np.arange(layout.shape.n_runs))
    members = layout.run_judges
    slots = np.asarray([np.concatenate([first_slot[r] + np.arange(members[r]) for r in ids]) for ids in runs])
    run_at = np.array([placed_at[r][0] * shape.n_runs + placed_at[r][1] for r in range(layout.shape.n_runs)])
    shard_first_slot = [np.searchsorted(s.slot_run, np.arange(shape.n_runs)) for s in shards]
    slot_at = np.array(
        [
            placed_at[run][0] * shape.n_slots + shard_first_slot[placed_at[run][0]][placed_at[run][1]] + member
            for run, member in zip(layout.slot_run, layout.slot_member, strict=True)
        ]
    )
    return ShardPlan(shape, tuple(shards), runs, slots, run_at, slot_at, devices)


def _common_shape(shapes: list[GridShape]) -> GridShape:
    """Pad shard shapes that differ only in the mechanisms' static sizes (a grid's and its groups') to their
    maximum, and in the mechanisms their runs use (`GridShape.used`) to the union: every shard runs one program,
    which calls the hooks of a mechanism that any shard's runs use."""
    names = sorted({name for shape in shapes for name, _ in shape.sizes})
    used = {name for shape in shapes for name in shape.used}
    padding = {
        "used": tuple(m.name for m in shapes[0].mechanisms if m.name in used),
        "sizes": tuple((name, max(shape.size(name) for shape in shapes)) for name in names),
        "groups": tuple(
            dataclasses.replace(groups[0], size=max(g.size for g in groups))
            for groups in zip(*(s.groups for s in shapes), strict=True)
        ),
    }
    padded = dataclasses.replace(shapes[0], **padding)
    for shape in shapes:
        assert dataclasses.replace(shape, **padding) == padded, f"shards differ in more than static sizes: {shape}"
    return padded


@functools.cache
def shard_mesh(n_shards: int) -> Mesh:
    """A one-axis mesh over the first `n_shards` devices."""
    devices = jax.local_devices()
    if n_shards > len(devices):
        raise ValueError(f"{n_shards} shards need as many devices; JAX has {len(devices)}")
    return Mesh(np.asarray(devices[:n_shards]), (SHARD_AXIS,))


# Arrays cross between shards and the whole grid through the host, never through a jnp op
# on sharded arrays: that compiles to an XLA:CPU all-gather, whose rendezvous can hang
# when the intra-op pool is busy.


def to_shards(tree: chex.ArrayTree, index: np.ndarray, devices: int | None = None) -> chex.ArrayTree:
    """Leaves with a leading axis -> leaf[index] with index int (S, per shard), split over `devices` (default S)."""
    sharding = NamedSharding(shard_mesh(index.shape[0] if devices is None else devices), P(SHARD_AXIS))
    return jax.device_put(jax.tree.map(lambda leaf: np.asarray(leaf)[index], tree), sharding)


def to_pieces(tree: chex.ArrayTree, index: np.ndarray, plan: ShardPlan) -> tuple[chex.ArrayTree, ...]:
    """Leaves with a leading axis -> one tree per turn (`ShardPlan.piece`): leaf[index[the turn's shards]], with a
    leading axis of one shard per device, split over the devices. index int (S, per shard) as `to_shards`'s."""
    host = jax.tree.map(np.asarray, tree)  # read back from the device once, not once per turn
    return tuple(to_shards(host, index[plan.piece(piece)]) for piece in range(plan.pieces))


def from_pieces(pieces: Sequence[chex.ArrayTree], at: np.ndarray, plan: ShardPlan) -> chex.ArrayTree:
    """`to_pieces`'s inverse for leaves (devices, per shard, ...): the entries at flattened positions `at` (into
    S * per shard, shards in plan order), on one device."""

    def whole(*turns: jax.Array) -> np.ndarray:
        by_device = np.stack([np.asarray(turn) for turn in turns], axis=1)  # (devices, pieces, per shard, ...)
        return by_device.reshape(plan.n_shards, *by_device.shape[2:])  # shard d * pieces + p

    return from_shards(jax.tree.map(whole, *pieces), at)


def from_shards(tree: chex.ArrayTree, at: np.ndarray) -> chex.ArrayTree:
    """Leaves (S, per shard, ...) -> the entries at flattened positions `at` (into S * per shard), on one device."""
    # The flattened size is spelled out: -1 is ambiguous for empty leaves (a run history of depth 0).
    return jax.tree.map(
        lambda leaf: jnp.asarray(np.asarray(leaf).reshape(leaf.shape[0] * leaf.shape[1], *leaf.shape[2:])[at]), tree
    )
