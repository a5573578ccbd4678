"""The grid program: batching runs together changes nothing, knob values never recompile, work groups, metrics."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest

from harness.grid.conditions import load_grid
from harness.grid.executables import iteration_program
from harness.grid.layout import layout_grid
from harness.grid.pretrain import PretrainResult
from harness.grid.sharding import usable_cores
from harness.grid.spec import GridSpec
from harness.grid.trainer import GridTrainer
from tests.jax_logs import compile_log
from tests.mechanisms_grid import MECHANISMS, RETUNED

ROOT = Path(__file__).resolve().parents[1]
RUN = MECHANISMS.run
# Conditions also run in smaller grids of other shapes: one judge each (no anchor, so no anchor pairs to pad), and
# ensembles beside the anchor alone (padded to its own 3 anchor pairs rather than anchor_wide's 16). Two grids
# rather than one per condition: each is a compile, and these cover every difference of shape one per condition did.
ELSEWHERE = (("baseline", "meta", "frozen"), ("ensemble", "anchor"))
ALONE = tuple(name for names in ELSEWHERE for name in names)


def _compiled_iterate(messages: list[str]) -> list[str]:
    return [m for m in messages if m.startswith("Compiling jit(iterate)")]


@pytest.fixture(scope="module")
def pretrained() -> PretrainResult:
    """Judges (seed, member) for seeds 0..2 and members 0..2, shared by every grid here."""
    return GridTrainer(MECHANISMS).pretrain()


@pytest.fixture(scope="module")
def trained(pretrained: PretrainResult) -> dict:
    grid = GridTrainer(MECHANISMS)  # a seed per shard, two turns of two devices: test_sharding's split too
    with compile_log() as messages:
        state, record = grid.start(pretrained=pretrained)
    records = [record]
    for iteration in range(RUN.iterations):
        state, record = grid.step(state, iteration)
        records.append(record)
    return {
        "grid": grid,
        "records": records,
        "table": grid.metrics_table(records),
        "compiled": messages,
        "final_judges": jax.device_get(grid.judge_params(state.slots.judge.params)),
    }


def _judges_of(pretrained: PretrainResult, seeds: int, members: int) -> PretrainResult:
    """The judges of the first `seeds` seeds' first `members` members: sources are (seed, member), seed-major."""
    return jax.tree.map(
        lambda leaf: leaf.reshape(len(RUN.seeds), -1, *leaf.shape[1:])[:seeds, :members].reshape(-1, *leaf.shape[1:]),
        pretrained,
    )


@pytest.fixture(scope="module")
def alone(pretrained: PretrainResult) -> dict:
    """The conditions of each ELSEWHERE entry as a grid of their own (its own shape), from the same pretrained judges.

    Grids of different shapes started one after another from one call site: a per-definition-site
    retrace guard (chex.assert_max_traces inside iteration_program, as it once was) would raise here.
    """
    tables = {}
    for names in ELSEWHERE:
        grid = GridTrainer(MECHANISMS.only(list(names)))
        grid.pretrained = _judges_of(pretrained, len(RUN.seeds), grid.layout.shape.max_members)
        table = grid.run()  # a retrace of any shape's program would raise here
        for name in names:
            tables[name] = table.query("condition == @name").reset_index(drop=True)
    return {"tables": tables}


def _alone_and_together(trained: dict, alone: dict, name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    together = trained["table"].query("condition == @name").reset_index(drop=True)
    by_itself = alone["tables"][name]
    assert len(by_itself) == len(together) == len(RUN.seeds) * (RUN.iterations + 1)
    assert by_itself[["seed", "iteration"]].equals(together[["seed", "iteration"]])
    return by_itself, together


@pytest.mark.parametrize("name", ALONE)
def test_condition_alone_matches_condition_in_grid(trained: dict, alone: dict, name: str) -> None:
    by_itself, together = _alone_and_together(trained, alone, name)
    for metric in ("policy_quality", "judge_alignment", "policy_entropy", "meta_accuracy"):
        np.testing.assert_allclose(
            by_itself[metric].to_numpy(float), together[metric].to_numpy(float), rtol=0, atol=1e-4, err_msg=metric
        )
    for metric in ("judge_updates", "meta_corrections", "mode_index"):
        np.testing.assert_array_equal(by_itself[metric].to_numpy(), together[metric].to_numpy(), err_msg=metric)


@pytest.mark.parametrize("name", ALONE)
def test_perceived_quality_alone_matches_grid(trained: dict, alone: dict, name: str) -> None:
    by_itself, together = _alone_and_together(trained, alone, name)
    np.testing.assert_allclose(
        by_itself["judge_perceived_quality"].to_numpy(float),
        together["judge_perceived_quality"].to_numpy(float),
        rtol=0,
        atol=1e-4,
    )


@pytest.mark.parametrize("name", ALONE)
def test_judge_head_bias_does_not_drift(trained: dict, name: str) -> None:
    """Every judge loss depends on score differences only, so d loss / d head bias is exactly 0: it must not move."""
    grid = trained["grid"]
    runs = [i for i, (condition, _) in enumerate(grid.layout.run_labels()) if condition == name]
    slots = np.flatnonzero(np.isin(grid.layout.slot_run, runs))
    final = np.asarray(trained["final_judges"]["params"]["head"]["bias"])[slots]
    start = np.asarray(grid.judge_params(grid.constants.pretrained_judges)["params"]["head"]["bias"])[slots]
    np.testing.assert_allclose(final, start, rtol=0, atol=1e-6)


def test_the_mechanisms_grid_trains(trained: dict) -> None:
    """A sanity check that the comparison above compares runs that moved."""
    table = trained["table"]
    first, last = table.query("iteration == 0"), table.query(f"iteration == {RUN.iterations}")
    assert np.all(np.abs(last["policy_entropy"].to_numpy() - first["policy_entropy"].to_numpy()) > 1e-4)
    updates = table.query("iteration > 0").groupby("condition")["judge_updates"].unique()
    assert updates.to_dict() == {
        "baseline": [20],
        "ensemble": [20],
        "anchor": [20],
        "meta": [20],
        "frozen": [0],
        "anchor_wide": [20],
    }


def test_changing_knob_values_within_a_shape_never_recompiles(trained: dict, pretrained: PretrainResult) -> None:
    first = trained["grid"]
    assert layout_grid(RETUNED).shape == first.shape
    # Positive control: this file is the first to train MECHANISMS's shape (test_sharding, which also does, runs after
    # it in the same process), so its first start did compile, and the log shows it.
    assert len(_compiled_iterate(trained["compiled"])) == 1

    retuned = GridTrainer(RETUNED)
    with compile_log() as messages:
        # iteration_program raises here if its program is traced again.
        state, _ = retuned.start(pretrained=pretrained)
        records = []
        for iteration in range(RUN.iterations):
            state, record = retuned.step(state, iteration)
            records.append(jax.device_get(record))
    assert _compiled_iterate(messages) == []
    assert not any("jit(iterate)" in m for m in messages)
    assert retuned.shard_shape == first.shard_shape
    assert iteration_program(retuned.shard_shape, retuned.plan.devices) is iteration_program(
        first.shard_shape, first.plan.devices
    )
    assert retuned._executable is first._executable

    # The new values did take effect through the same executable.
    runs = {name: i for i, (name, seed) in enumerate(retuned.layout.run_labels()) if seed == 0}
    for record in records:
        assert int(record["judge_updates"][runs["frozen"]]) == 20 // 10  # unfrozen, on a cadence
        assert int(record["meta_corrections"][runs["meta"]]) == 20  # threshold 1.0: every check corrects
        assert int(record["judge_updates"][runs["anchor_wide"]]) == 20
    ensemble_slots = np.flatnonzero(np.isin(retuned.layout.slot_run, np.flatnonzero(retuned.layout.run_condition == 1)))
    for got, want in zip(
        jax.tree.leaves(state.slots.judge.params), jax.tree.leaves(retuned.constants.pretrained_judges), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(got)[ensemble_slots], np.asarray(want)[ensemble_slots])


def test_other_step_and_iteration_counts_share_the_program(trained: dict, pretrained: PretrainResult) -> None:
    # Steps per iteration and the iteration count are values passed to the program, not sizes: a grid that differs
    # only in them runs on the executable already compiled, with the new count taking effect.
    first = trained["grid"]
    run = RUN.model_copy(update={"steps_per_iteration": 13, "iterations": 1})
    shorter = GridTrainer(MECHANISMS.model_copy(update={"run": run}))
    with compile_log() as messages:
        state, _ = shorter.start(pretrained=pretrained)
        _, record = shorter.step(state, 0)
    assert not any("jit(iterate)" in m or "jit(diagnose_shards)" in m for m in messages)
    assert shorter._executable is first._executable
    updates = dict(zip(shorter.layout.run_labels(), np.asarray(record["judge_updates"]).tolist(), strict=True))
    assert updates[("baseline", 0)] == 13 and updates[("frozen", 0)] == 0


def test_another_seed_count_shares_the_program_and_each_seed_its_bits(
    trained: dict, pretrained: PretrainResult
) -> None:
    # A shard holds a seed's worth of runs of every kind here, so a grid of two of the three seeds runs on the same
    # programs, in one turn instead of two; each of its runs computes, byte for byte, what it did beside a third (the
    # anchor kind's two conditions are dealt condition by condition, so its runs' shard partners differ: not a cause
    # of other rounding here).
    first = trained["grid"]
    fewer = GridTrainer(MECHANISMS.model_copy(update={"run": RUN.model_copy(update={"seeds": (0, 1)})}))
    assert fewer.plan.pieces == 1 and first.plan.pieces == 2
    # Sources are (seed, member), seed-major: the first two seeds' judges.
    sources = len(fewer.origins.judge_sources)
    fewer.pretrained = jax.tree.map(lambda leaf: leaf[:sources], pretrained)
    with compile_log() as messages:
        table = fewer.run()
    assert not any("jit(iterate)" in m or "jit(diagnose_shards)" in m for m in messages)
    assert fewer._executable is first._executable
    together = trained["table"].query("seed in (0, 1)").reset_index(drop=True)
    pd.testing.assert_frame_equal(table, together, check_exact=True)


@pytest.mark.skipif(usable_cores() > 2, reason="the seed counts are chosen for one or two devices (one per core)")
def test_another_condition_count_of_one_shard_shape_shares_the_program_and_each_run_its_bits(
    alone: dict, pretrained: PretrainResult
) -> None:
    # Baseline, meta and frozen at 3 seeds are dealt 2 seeds to a shard (2 runs of each kind, a shard of fillers for
    # seed 2); each of them twice at 2 seeds, a seed to a shard: again 2 runs of each kind. So the grid of twice the
    # conditions runs on the programs the first compiled (`alone`), and the runs they have in common keep their bytes.
    first = MECHANISMS.only(list(ELSEWHERE[0]))
    twice = tuple(
        copy
        for condition in first.conditions
        for copy in (condition, condition.model_copy(update={"name": f"{condition.name}-again"}))
    )
    doubled = GridTrainer(
        first.model_copy(update={"conditions": twice, "run": RUN.model_copy(update={"seeds": (0, 1)})})
    )
    assert doubled.shard_shape == GridTrainer(first).shard_shape and len(doubled.spec.conditions) == 6
    doubled.pretrained = _judges_of(pretrained, seeds=2, members=1)
    with compile_log() as messages:
        table = doubled.run()
    assert not any("jit(iterate)" in m or "jit(diagnose_shards)" in m for m in messages)
    for name in ELSEWHERE[0]:
        for copy in (name, f"{name}-again"):
            here = table[table["condition"] == copy].drop(columns="condition").reset_index(drop=True)
            there = alone["tables"][name].query("seed in (0, 1)").drop(columns="condition").reset_index(drop=True)
            pd.testing.assert_frame_equal(here, there, check_exact=True)


def test_metrics_table(trained: dict) -> None:
    table = trained["table"]
    n_records = RUN.iterations + 1
    assert len(table) == len(MECHANISMS.conditions) * len(RUN.seeds) * n_records
    keys = table[["condition", "seed", "iteration"]]
    assert not keys.duplicated().any()
    expected = [(c.name, s, i) for c in MECHANISMS.conditions for s in RUN.seeds for i in range(n_records)]
    assert list(keys.itertuples(index=False, name=None)) == expected
    assert set(trained["grid"].metric_names) <= set(table.columns)
    for column in ("policy_quality", "judge_alignment", "policy_entropy", "judge_perceived_quality", "mode_quality"):
        assert np.all(np.isfinite(table[column].to_numpy(float))), column
    meta_on = table["condition"] == "meta"
    assert np.all(np.isfinite(table.loc[meta_on, "meta_accuracy"].to_numpy(float)))
    assert np.all(np.isnan(table.loc[~meta_on, "meta_accuracy"].to_numpy(float)))
    assert table["boundary"].dtype == bool
    assert table["diverged"].dtype == bool
    assert table["boundary"].tolist() == (table["condition"] == "frozen").tolist()
    assert not table["diverged"].any()
    assert table["finite"].all()
    assert np.all(table.query("iteration == 0")["judge_updates"] == 0)
    # mode_sequence renders mode_index with the world's glyphs.
    outputs = np.asarray(trained["grid"].world.outputs)
    glyphs = "↑↗→↘↓↙←↖"
    for index, rendered in zip(table["mode_index"], table["mode_sequence"], strict=True):
        assert rendered == " ".join(glyphs[t] for t in outputs[index])


def test_diverged_is_sticky(trained: dict) -> None:
    """A run is diverged from its first non-finite record on, even if a later record is finite again."""
    grid, records = trained["grid"], trained["records"]
    bad = np.ones(grid.shape.n_runs, bool)
    bad[grid.layout.run_labels().index(("ensemble", 1))] = False  # non-finite at record 1 only
    patched = [records[0], {**records[1], "finite": jax.numpy.asarray(bad)}, records[2]]
    table = grid.metrics_table(patched)
    run = table.query("condition == 'ensemble' and seed == 1")
    assert run["diverged"].tolist() == [False, True, True]
    assert run["finite"].tolist() == [True, False, True]
    assert table["diverged"].sum() == 2


def test_work_groups_of_the_published_grid() -> None:
    """Each scheduled mechanism's groups: runs due on every step apart from slower ones, frozen runs in none;
    every group lists exactly its runs' judge slots."""
    layout = layout_grid(load_grid(ROOT / "conditions" / "paper.toml"))
    knobs = [layout.spec.conditions[c].knobs for c in layout.run_condition]
    groups = {(g.row, g.cadence): ids for g, ids in zip(layout.shape.groups, layout.groups, strict=True)}
    for ids in groups.values():
        np.testing.assert_array_equal(ids.slot_ids, np.flatnonzero(np.isin(layout.slot_run, ids.run_ids)))
        np.testing.assert_array_equal(ids.slot_run, layout.slot_run[ids.slot_ids])
        np.testing.assert_array_equal(ids.run_ids[ids.slot_position], ids.slot_run)

    def runs(predicate: object) -> set[int]:
        return {i for i, k in enumerate(knobs) if predicate(k)}

    # Frozen runs are never due; they share the slower group, so freezing keeps the shape.
    every_step = runs(lambda k: not k.freeze_judge and k.judge_update_every == 1)
    assert set(groups["judge_update", "every_step"].run_ids) == every_step
    assert set(groups["judge_update", "slower"].run_ids) == set(range(len(knobs))) - every_step
    assert set(groups["anchor", "every_step"].run_ids) == every_step & runs(lambda k: k.anchor_fraction > 0)
    assert ("anchor", "slower") not in groups
    # 5 seeds x (meta k=1, slow-meta k=1) every step; the rest on a cadence, one of them with 10% held out.
    every_step_meta, slower_meta = groups["meta_correction", "every_step"], groups["meta_correction", "slower"]
    assert {knobs[r].meta_update_every for r in every_step_meta.run_ids} == {1}
    assert {knobs[r].meta_update_every for r in slower_meta.run_ids} == {10, 200}
    # Each meta group is padded only to its own held-out count.
    meta_shapes = [(g.slots, g.size) for g in layout.shape.groups if g.row == "meta_correction"]
    assert meta_shapes == [(10, 4096 // 20), (25, 4096 // 10)]
    assert (every_step_meta.slot_ids.size, slower_meta.slot_ids.size) == (10, 25)

    # Other knob values keep the shape (the same program); moving a run across a group boundary does not.
    def with_baseline(**values: object) -> GridSpec:
        conditions = tuple(
            c.model_copy(update={"knobs": c.knobs.model_copy(update=values)}) if c.name == "baseline" else c
            for c in layout.spec.conditions
        )
        return layout.spec.model_copy(update={"conditions": conditions})

    assert layout_grid(with_baseline(lr_judge=1e-3, entropy_bonus=0.1)).shape == layout.shape
    assert layout_grid(with_baseline(judge_update_every=2)).shape != layout.shape
