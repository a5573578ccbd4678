"""Runs split into shards of one shape: the deal, its padding, results independent of the split, no collectives."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from harness.engine.world import World
from harness.grid.conditions import load_grid
from harness.grid.contract import GridShape
from harness.grid.knobs import Knobs
from harness.grid.layout import group_membership, layout_grid
from harness.grid.pretrain import pretrain_program
from harness.grid.sharding import (
    PIECE_OVERHEAD,
    PIECE_WORK,
    SEED_PADDING,
    SEEDS_PER_SHARD,
    SHARD_AXIS,
    deal_runs,
    piece_work_for,
    plan_shards,
    runs_rung,
    seeds_per_shard,
    shard_mesh,
)
from harness.grid.spec import Condition, GridSpec, RunSettings
from harness.grid.trainer import GridTrainer
from tests.mechanisms_grid import MECHANISMS, RETUNED

ROOT = Path(__file__).resolve().parents[1]
PAPER = load_grid(ROOT / "conditions" / "paper.toml")

# Collective operations in XLA's HLO text. XLA:CPU runs them through a rendezvous of the
# devices' threads, which can hang when the thread pool is busy: shards must never talk.
COLLECTIVE = re.compile(r"\b(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)(-start)?\(")

needs_two_devices = pytest.mark.skipif(len(jax.local_devices()) < 2, reason="needs two JAX devices (cores)")


def test_published_grid_on_two_shards() -> None:
    # Its runs by kind (5 seeds per condition): every-step judges: single 15 (baseline and
    # two resets), ensembles of 3 and of 5 (5 each), anchored 10, meta checked every step
    # 10, meta on a cadence 10; slower judges: single 20 (frozen, k = 2, 5, 10), meta on
    # a cadence 15. Each shard takes ceil(count / 2) of every kind.
    plan = deal_runs(layout_grid(PAPER), 2)
    assert plan.shape.n_runs == 8 + 3 + 3 + 5 + 5 + 5 + 10 + 8 == 47
    assert plan.shape.n_slots == 8 + 3 * 3 + 3 * 5 + 5 + 5 + 5 + 10 + 8 == 65
    assert plan.fillers == 2 * 47 - 90 == 4  # one per kind with an odd count
    # Planned by seeds: both devices, each running three shards of 18 runs in turn, a seed's worth of every kind
    # each; the sixth shard is all fillers (5 seeds in 6 seed-shards), 12% more work than two shards.
    planned = plan_shards(layout_grid(PAPER), 2)
    assert (planned.devices, planned.pieces, planned.shape.n_runs) == (2, 3, 18)
    assert planned.fillers == 6 * 18 - 90
    assert planned.n_shards * (planned.shape.n_runs + planned.shape.n_slots) <= PIECE_OVERHEAD * 2 * (47 + 65)


@pytest.mark.parametrize("n_seeds", [1, 2, 5, 20, 90, 360, 1800])
def test_shards_hold_whole_seeds_and_stay_small_as_the_grid_grows(n_seeds: int) -> None:
    layout = layout_grid(_grid(Knobs(), seeds=n_seeds))  # one baseline run per seed: two networks
    plan = plan_shards(layout, 2)
    assert plan.devices == min(2, n_seeds)
    assert plan.n_shards == plan.devices * plan.pieces
    seeds = plan.shape.n_runs
    assert seeds in SEEDS_PER_SHARD and 2 * seeds <= PIECE_WORK
    assert n_seeds + plan.fillers <= max(SEED_PADDING * n_seeds, plan.devices * seeds)
    # Each shard computes whole seeds: the first shards are the grid's runs in order, fillers come last.
    computed = plan.shard_runs.reshape(-1)
    np.testing.assert_array_equal(computed[:n_seeds], np.arange(n_seeds))
    assert plan_shards(layout, 2, pieces=1).pieces == 1


def test_few_seeds_on_many_devices_are_split_by_work() -> None:
    # The published grid's 5 seeds on 4 devices: a seed per shard (one seed's runs are 44 networks) would compute 8
    # seeds' worth in two turns, more than SEED_PADDING allows, so the split by work takes over with fewer fillers.
    # Light seeds may take one turn whatever its padding (5 seeds of 2 networks: 2 per shard, every device busy).
    assert seeds_per_shard(5, 4, 44) is None and seeds_per_shard(8, 4, 44) == 1 and seeds_per_shard(5, 4, 2) == 2
    planned = plan_shards(layout_grid(PAPER), 4)
    assert planned.fillers < 8 * 18 - 90


def test_grids_of_many_seed_counts_share_a_few_shard_shapes() -> None:
    # From 16 seeds on two devices up, the shard's size comes from the conditions (here a baseline and a frozen run
    # per seed, 4 networks: 4 seeds, PIECE_WORK networks), stepped down only where padding to it would cost more
    # than SEED_PADDING.
    rungs = [seeds_per_shard(n, 2, 4) for n in range(16, 1001)]
    assert len(set(rungs)) <= 3 and rungs.count(4) >= 0.8 * len(rungs)
    plans = [plan_shards(layout_grid(_grid(Knobs(), Knobs(freeze_judge=True), seeds=n)), 2) for n in (16, 50, 200)]
    assert all(plan.shape == plans[0].shape for plan in plans) and plans[0].shape.n_runs == 2 * 4
    assert [plan.pieces for plan in plans] == [2, 7, 25]


def test_grids_of_another_condition_count_on_one_rung_share_a_shard_shape() -> None:
    assert [runs_rung(n) for n in range(1, 18)] == [1, 2, 3, 4, 6, 6, 8, 8, 12, 12, 12, 12, 16, 16, 16, 16, 24]
    assert runs_rung(2**16) == 2**16 and runs_rung(2**16 + 1) == 2**16 + 1  # above the ladder: the count itself

    def shape(conditions: int, seeds: int, devices: int, piece_work: int | None = PIECE_WORK) -> GridShape:
        """The shard shape of `conditions` slow-judge conditions (one kind: k = 2, 3, ...) at `seeds`."""
        knobs = [Knobs(judge_update_every=2 + c) for c in range(conditions)]
        return plan_shards(layout_grid(_grid(*knobs, seeds=seeds)), devices, None, piece_work).shape

    # Split by seeds (a seed per shard) and on an accelerator: 5 and 6 conditions of a kind share a rung, so a shape;
    # 4 and 7 are on rungs of their own.
    for seeds, devices, piece_work in ((2, 2, PIECE_WORK), (3, 1, None)):
        shapes = {n: shape(n, seeds, devices, piece_work) for n in (4, 5, 6, 7)}
        assert shapes[5] == shapes[6] and len({shapes[4], shapes[6], shapes[7]}) == 3
    assert shape(5, 2, 2).n_runs == 6 and shape(1, 1, 2).n_runs == 1
    # Split by work (one seed on two devices): a shard's even share, 5 runs of 9 conditions and 6 of 12, is rounded
    # up to the same rung; 8 conditions' 4 are on a rung of their own.
    assert shape(9, 1, 2) == shape(12, 1, 2) != shape(8, 1, 2)
    # The turns are those of the kind that needs most: 9 conditions at 5 seeds, each seed's 9 runs rounded up to 12,
    # fill two turns of two devices (3 fillers), not the three turns that 5 seeds at a seed per shard would take.
    nine = plan_shards(layout_grid(_grid(*(Knobs(judge_update_every=2 + c) for c in range(9)), seeds=5)), 2)
    assert (nine.devices, nine.pieces, nine.shape.n_runs, nine.fillers) == (2, 2, 12, 2 * 2 * 12 - 45)


def test_an_accelerator_runs_its_runs_as_one_shard() -> None:
    assert piece_work_for("cpu") == PIECE_WORK and piece_work_for("gpu") is None and piece_work_for("tpu") is None
    # The published grid's 5 seeds on one GPU: one shard of the rung of 6 seeds (a CPU takes five turns of one).
    layout = layout_grid(PAPER)
    on_a_cpu = plan_shards(layout, 1)
    assert (on_a_cpu.pieces, on_a_cpu.shape.n_runs) == (5, 18)
    paper = plan_shards(layout, 1, piece_work=None)
    assert (paper.n_shards, paper.shape.n_runs, paper.fillers) == (1, 6 * 18, 18)
    # Past 128 seeds too, where the ladder used to end (a layout of thousands of runs takes seconds to build).
    for n_seeds, devices in [(1, 1), (90, 1), (200, 1), (300, 2), (3, 4)]:
        plan = plan_shards(layout_grid(_grid(Knobs(), Knobs(freeze_judge=True), seeds=n_seeds)), devices, None, None)
        assert plan.pieces == 1 and plan.n_shards == plan.devices == min(devices, n_seeds)
        assert 2 * n_seeds + plan.fillers <= max(SEED_PADDING * 2 * n_seeds, 2 * plan.devices)
    # Rungs of one shard shape: 193 to 256 seeds share the 200-seed grid's program.
    shapes = {plan_shards(layout_grid(_grid(Knobs(), seeds=n)), 1, None, None).shape for n in (193, 200, 256)}
    assert len(shapes) == 1


@pytest.mark.parametrize("n_shards", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("grid", ["paper", "smoke", "example"])
def test_every_run_and_slot_computed_once_in_shards_of_one_shape(grid: str, n_shards: int) -> None:
    layout = layout_grid(load_grid(ROOT / "conditions" / f"{grid}.toml"))
    plan = deal_runs(layout, n_shards)
    assert plan.n_shards == n_shards
    assert all(shard.shape == plan.shape for shard in plan.shards)
    assert plan.shard_runs.shape == (n_shards, plan.shape.n_runs)
    assert plan.shard_slots.shape == (n_shards, plan.shape.n_slots)
    # Each grid run (slot) is read back from a shard position that computes that run (slot).
    np.testing.assert_array_equal(plan.shard_runs.reshape(-1)[plan.run_at], np.arange(layout.shape.n_runs))
    np.testing.assert_array_equal(plan.shard_slots.reshape(-1)[plan.slot_at], np.arange(layout.shape.n_slots))
    assert len(set(plan.run_at)) == layout.shape.n_runs
    for shard, runs, slots in zip(plan.shards, plan.shard_runs, plan.shard_slots, strict=True):
        np.testing.assert_array_equal(shard.run_condition, layout.run_condition[runs])
        np.testing.assert_array_equal(shard.run_seed_index, layout.run_seed_index[runs])
        # A shard slot is its shard run's judge of the same member.
        np.testing.assert_array_equal(layout.slot_run[slots], runs[shard.slot_run])
        np.testing.assert_array_equal(layout.slot_member[slots], shard.slot_member)
    # Shards only add runs: never fewer than an even split, never more than one extra per kind.
    mechanisms, n_outputs = layout.shape.mechanisms, layout.spec.world.n_outputs
    run_kinds = [group_membership(layout.spec.conditions[c].knobs, n_outputs, mechanisms) for c in layout.run_condition]
    kinds = collections.Counter(run_kinds)
    assert -(-layout.shape.n_runs // n_shards) <= plan.shape.n_runs <= layout.shape.n_runs // n_shards + len(kinds)
    # The plan picks the split whose laid-out shard, each kind's runs rounded up to a rung of the ladder, has the
    # least runs + slots (fewer shards on ties).
    costs = {
        n: deal_runs(layout, n, per_shard={kind: runs_rung(-(-count // n)) for kind, count in kinds.items()}).shape
        for n in range(1, n_shards + 1)
    }
    best = plan_shards(layout, n_shards, pieces=1)
    assert best.shape.n_runs + best.shape.n_slots == min(s.n_runs + s.n_slots for s in costs.values())
    assert all(
        count in SEEDS_PER_SHARD for count in collections.Counter(run_kinds[r] for r in best.shard_runs[0]).values()
    )


def _grid(*knobs: Knobs, seeds: int = 1) -> GridSpec:
    conditions = tuple(Condition(name=f"c{i}", knobs=k) for i, k in enumerate(knobs))
    return GridSpec(conditions=conditions, run=RunSettings(seeds=seeds, iterations=1, steps_per_iteration=4))


def test_plan_takes_fewer_shards_when_more_would_only_add_fillers() -> None:
    # Two runs of different kinds: two shards would each compute both kinds (one a filler).
    two_kinds = layout_grid(_grid(Knobs(), Knobs(freeze_judge=True)))
    assert deal_runs(two_kinds, 2).shape.n_runs == 2
    assert plan_shards(two_kinds, 2).n_shards == 1
    # Four runs of one kind split evenly.
    one_kind = layout_grid(_grid(Knobs(), seeds=4))
    assert plan_shards(one_kind, 4).devices == 4
    assert plan_shards(one_kind, 4).n_shards == 4
    assert plan_shards(one_kind, 4).fillers == 0
    with pytest.raises(ValueError, match="at least 1"):
        plan_shards(one_kind, 0)


@pytest.fixture(scope="module")
def split_runs() -> dict[int, tuple[GridTrainer, pd.DataFrame]]:
    """tests/mechanisms_grid.py's RETUNED grid (judge updates on a cadence, resets, meta-correction on every check)
    run on one device in two shards of half the runs one after another, and on two devices side by side in shards
    of one seed each, two turns (the program test_grid_program compiled for its shape). Every kind has an odd run
    count, so both splits have fillers."""
    programs = {}
    for max_shards, pieces in ((1, 2), (2, None)):
        program = GridTrainer(RETUNED, max_shards=max_shards, pieces=pieces)
        programs[max_shards] = program, program.run()
    return programs


@needs_two_devices
def test_results_do_not_depend_on_the_split(split_runs: dict[int, tuple[GridTrainer, pd.DataFrame]]) -> None:
    (whole, whole_table), (split, split_table) = split_runs[1], split_runs[2]
    assert (whole.plan.devices, whole.plan.n_shards) == (1, 2) and whole.plan.fillers > 0
    assert (split.plan.devices, split.plan.n_shards) == (2, 4) and split.plan.fillers > 0
    # The anchor counts (3 and 16 pairs) were padded to one width across the shards.
    assert split.shard_shape.size("anchor_pairs") == 16
    numeric = whole_table.select_dtypes("number").columns
    pd.testing.assert_frame_equal(whole_table.drop(columns=numeric), split_table.drop(columns=numeric))
    np.testing.assert_allclose(
        split_table[numeric].to_numpy(float), whole_table[numeric].to_numpy(float), rtol=0, atol=1e-4
    )
    for a, b in zip(jax.tree.leaves(whole.final_state.slots), jax.tree.leaves(split.final_state.slots), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)
    # The iteration counted its judge updates and corrections per run through the shards: 20 steps, k = 1 or 10,
    # and every meta check corrects (threshold 1).
    last = split_table.query("iteration == 2").set_index("condition")
    assert (last["judge_updates"].drop("frozen") == 20).all() and (last.loc["frozen", "judge_updates"] == 2).all()
    assert (last.loc["meta", "meta_corrections"] == 20).all()


@needs_two_devices
def test_sharded_programs_hold_no_collectives(split_runs: dict[int, tuple[GridTrainer, pd.DataFrame]]) -> None:
    iteration = split_runs[2][0]._executable.as_text()
    assert "while" in iteration  # the text is the real program
    assert not COLLECTIVE.search(iteration)

    # The pretraining of MECHANISMS's 9 judges (3 seeds × up to 3 members) in 2 shards of 8 (`judges_per_shard`):
    # the program test_grid_program's `pretrained` ran, so its compile is the session cache's.
    world, split = World(MECHANISMS.world), NamedSharding(shard_mesh(2), P(SHARD_AXIS))
    key_shape = jax.ShapeDtypeStruct((2, 8, 2), jnp.uint32, sharding=split)
    target_shape = jax.ShapeDtypeStruct((2, 8), jnp.float32, sharding=split)
    pretraining = (
        pretrain_program(world, MECHANISMS.pretrain, 2)
        .lower(key_shape, key_shape, target_shape, jax.ShapeDtypeStruct((), jnp.int32), world.outputs, world.q_star)
        .compile()
        .as_text()
    )
    assert "while" in pretraining
    assert not COLLECTIVE.search(pretraining)

    # Positive control: the pattern finds the collective a cross-shard sum compiles to.
    spread = jax.device_put(jnp.ones((2, 3)), NamedSharding(shard_mesh(2), P(SHARD_AXIS)))
    assert COLLECTIVE.search(jax.jit(lambda x: x.sum(0)).lower(spread).compile().as_text())
