"""A grid as seed blocks, through the command line in this process (so the blocks share compiled programs): shuffled
job-array blocks and growth give the same bytes as an in-process run, blocks agree with the grid run whole, an
interrupted block resumes from its checkpoint, a full disk and bad requests fail in one line with nothing lost."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness import cli
from harness.common.run_files import CHECKPOINT_FILE, METRICS_FILE, read_metrics_text, stale_temporaries
from harness.engine.world import World
from harness.experiment.blocks import (
    BLOCK_FILE,
    BlockError,
    BlockRecord,
    block_count,
    block_dir,
    block_seeds,
    grown_spec,
    kept_work,
    read_record,
    seeds_per_block,
)
from harness.experiment.checkpoint import read_checkpoint
from harness.experiment.merge import run_in_blocks
from harness.experiment.runner import SilentProgress, load_spec
from harness.grid.compile_cache import CACHE_DIR_ENV
from harness.grid.conditions import grid_from_mapping, load_grid
from tests.compile_cache_settings import compile_cache_settings_restored

ROOT = Path(__file__).resolve().parents[1]
SMOKE = (ROOT / "conditions" / "smoke.toml").read_text()
# conditions/smoke.toml with one seed per block: every block of every test has one shape, compiled once.
GRID = SMOKE.replace("steps_per_iteration = 20\n", "steps_per_iteration = 20\nblock_seeds = 1\n")
assert "block_seeds = 1" in GRID


def _coevolab(*argv: str) -> int:
    # No test here reads a figure, so the reports are text alone (drawing is most of a small report's time).
    return cli.main([*map(str, argv), "--quiet", "--no-figures"])


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, shared_compile_cache: Path) -> dict[str, Path]:
    """The grid at 2 seeds in this process (kept), grown to 4; and at 4 seeds as a job array's blocks in a shuffled
    order, then merged."""
    root = tmp_path_factory.mktemp("blocks")
    grid = root / "blocks.toml"
    grid.write_text(GRID)
    with compile_cache_settings_restored(), pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_DIR_ENV, str(shared_compile_cache))
        assert _coevolab("run", grid, "--out", root / "two") == cli.EXIT_OK
        shutil.copytree(root / "two", root / "grown")
        assert _coevolab("run", "--resume", root / "grown", "--seeds", 4) == cli.EXIT_OK
        for block in (3, 1, 0):
            assert _coevolab("run", grid, "--seeds", 4, "--out", root / "array", "--block", block) == cli.EXIT_OK
        shutil.copytree(root / "array", root / "array-missing")
        assert _coevolab("run", grid, "--seeds", 4, "--out", root / "array", "--block", 2) == cli.EXIT_OK
        assert _coevolab("merge", root / "array") == cli.EXIT_OK
    names = ("two", "grown", "array", "array-missing")
    return {"grid": grid, **{name: root / name for name in names}}


def test_the_block_layout_follows_from_the_grid_alone() -> None:
    spec = grid_from_mapping({"run": {"seeds": [5, 1, 9, 2, 7]}, "conditions": {f"c{i}": {} for i in range(100)}})
    assert seeds_per_block(spec) == 4  # ceil(360 / 100)
    assert block_count(spec) == 2
    assert [block_seeds(spec, k) for k in range(2)] == [(5, 1, 9, 2), (7,)]  # positions in the list, last partial
    with pytest.raises(BlockError, match="out of range"):
        block_seeds(spec, 2)
    assert seeds_per_block(grid_from_mapping({"conditions": {"a": {}}})) == 360
    assert seeds_per_block(grid_from_mapping({"run": {"block_seeds": 3}, "conditions": {"a": {}}})) == 3
    with pytest.raises(BlockError, match="only a run of seeds"):
        grown_spec(spec, 10)
    with pytest.raises(BlockError, match="down to"):
        grown_spec(grid_from_mapping({"run": {"seeds": 4}, "conditions": {"a": {}}}), 2)


def test_what_a_stopped_run_keeps_is_read_from_its_files(tmp_path: Path) -> None:
    spec = grid_from_mapping({"run": {"seeds": 4, "block_seeds": 1}, "conditions": {"a": {}}})
    assert kept_work(spec, tmp_path) == "no block's work"
    for block in (0, 2):
        block_dir(tmp_path, block).mkdir(parents=True)
    (block_dir(tmp_path, 0) / CHECKPOINT_FILE).write_bytes(b"")
    record = BlockRecord(block=2, seeds=(2,), finished=True)
    (block_dir(tmp_path, 2) / BLOCK_FILE).write_text(record.model_dump_json())
    assert kept_work(spec, tmp_path) == "block 0 checkpointed; block 2 finished"


def test_shuffled_blocks_and_growth_merge_to_the_same_bytes(runs: dict[str, Path]) -> None:
    merged = (runs["array"] / METRICS_FILE).read_bytes()
    assert (runs["grown"] / METRICS_FILE).read_bytes() == merged
    # The first two blocks of the grown run are the 2-seed run's own, not run again.
    for block in (0, 1):
        assert len(read_record(runs["grown"], block).attempts) == 1
        assert _files(block_dir(runs["grown"], block)) == _files(block_dir(runs["two"], block))
    two = read_metrics_text(runs["two"] / METRICS_FILE).splitlines()
    assert set(two) <= set(read_metrics_text(runs["array"] / METRICS_FILE).splitlines()) and len(two) == 1 + 3 * 2 * 3
    table = pd.read_csv(runs["array"] / METRICS_FILE)
    # Rows in the grid's condition order, then seed, then iteration.
    assert list(dict.fromkeys(table["condition"])) == ["baseline", "frozen", "slow-meta"]
    assert (
        table.groupby("condition", sort=False)["iteration"].apply(lambda it: list(it[:3])).tolist() == [[0, 1, 2]] * 3
    )
    assert (table.groupby("condition", sort=False)["seed"].unique().map(list) == [[0, 1, 2, 3]] * 3).all()
    manifest = json.loads((runs["array"] / "manifest.json").read_text())
    assert manifest["execution"]["backend"] == "separate processes" and manifest["execution"]["blocks"] == 4
    assert [block["seeds"] for block in manifest["blocks"]] == [[0], [1], [2], [3]]
    assert all(block["attempts"][0]["host"] for block in manifest["blocks"])
    assert manifest["execution"]["line"] in (runs["array"] / "report.md").read_text()
    grown = json.loads((runs["grown"] / "manifest.json").read_text())["execution"]
    assert grown["backend"] == "in-process"


def test_merge_with_a_missing_block_names_it_and_writes_nothing(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    before = _files(runs["array-missing"])
    assert _coevolab("merge", runs["array-missing"]) == cli.EXIT_BAD_INPUT
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "1 block of 4 not finished: 2" in error[0], error
    assert _files(runs["array-missing"]) == before and not (runs["array-missing"] / METRICS_FILE).exists()


def test_blocks_agree_with_the_grid_run_whole(runs: dict[str, Path]) -> None:
    # The golden metrics are this grid (conditions/smoke.toml) run whole: one program over all its runs.
    whole = pd.read_csv(ROOT / "tests" / "test_golden_metrics" / "smoke_metrics.csv", index_col=0)
    blocks = pd.read_csv(runs["two"] / METRICS_FILE)
    assert blocks[["condition", "seed", "iteration"]].equals(whole[["condition", "seed", "iteration"]])
    # The same end modes: the mode's index (what mode_sequence renders) exactly, and so its rendering.
    np.testing.assert_array_equal(blocks["mode_index"], whole["mode_index"])
    world = World(load_grid(runs["grid"]).world)
    assert blocks["mode_sequence"].tolist() == [world.render(int(i)) for i in whole["mode_index"]]
    floats = [name for name in whole.columns if name in blocks.columns and whole[name].dtype.kind == "f"]
    expected = whole[floats].copy()
    expected["meta_accuracy"] = expected["meta_accuracy"].replace(-1.0, np.nan)  # the golden file's stand-in for NaN
    np.testing.assert_allclose(blocks[floats].to_numpy(float), expected.to_numpy(float), rtol=0, atol=1e-4)


def test_a_one_block_grid_keeps_the_flat_layout_with_the_blocks_bytes(
    runs: dict[str, Path], tmp_path: Path, subprocess_compile_cache: Path
) -> None:
    assert _coevolab("run", runs["grid"], "--seed-list", "0", "--out", tmp_path / "flat") == cli.EXIT_OK
    assert not (tmp_path / "flat" / "blocks").exists()
    assert (tmp_path / "flat" / METRICS_FILE).read_bytes() == (block_dir(runs["two"], 0) / METRICS_FILE).read_bytes()
    # Grown, the flat run becomes block 0 as it is (not run again) and only block 1 runs.
    assert _coevolab("run", "--resume", tmp_path / "flat", "--seeds", 2) == cli.EXIT_OK
    assert read_record(tmp_path / "flat", 0).attempts[0].host == "(a run before seed blocks)"
    assert (tmp_path / "flat" / METRICS_FILE).read_bytes() == (runs["two"] / METRICS_FILE).read_bytes()


class StopAfterFirstIteration(SilentProgress):
    """SIGTERM as the command line raises it (`Terminated`), after the first checkpoint of the first block run."""

    def iteration_done(self, iteration: int) -> None:
        raise cli.Terminated


def test_an_interrupted_block_resumes_from_its_checkpoint_to_the_same_bytes(
    runs: dict[str, Path], tmp_path: Path, subprocess_compile_cache: Path
) -> None:
    out = tmp_path / "run"
    out.mkdir()
    with pytest.raises(cli.Terminated):
        run_in_blocks(load_grid(runs["grid"]), out, StopAfterFirstIteration())
    assert int(read_checkpoint(block_dir(out, 0))["completed_iterations"]) == 1
    full = shutil.copytree(out, tmp_path / "full-disk")

    assert _coevolab("run", "--resume", out) == cli.EXIT_OK
    assert (out / METRICS_FILE).read_bytes() == (runs["two"] / METRICS_FILE).read_bytes()
    attempts = read_record(out, 0).attempts
    assert [a.resumed_from_iteration for a in attempts] == [None, 1] and attempts[0].finished is None
    assert not (block_dir(out, 0) / CHECKPOINT_FILE).exists()

    # The disk fills (a file size limit in a real process) while the resumed block writes its next checkpoint.
    checkpoint = block_dir(full, 0) / CHECKPOINT_FILE
    before = checkpoint.read_bytes()
    limit = len(before) // 2
    wrapper = (
        "import os, resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1]))); "
        "os.execv(sys.executable, [sys.executable, '-m', 'harness.cli', *sys.argv[2:]])"
    )
    result = subprocess.run(
        [sys.executable, "-c", wrapper, str(limit), "run", "--resume", str(full), "--quiet", "--no-figures"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == cli.EXIT_FAILURE, result.stderr
    [line] = result.stderr.strip().splitlines()  # one line: the file, why, what is kept and how to go on
    assert line == (
        f"coevolab: error: could not write {checkpoint}: File too large; the run stopped; finished iterations are "
        f"checkpointed. Resume with: coevolab run --resume {full}"
    ), result.stderr
    assert "Traceback" not in result.stderr
    assert checkpoint.read_bytes() == before and stale_temporaries(full) == []
    assert (block_dir(full, 0) / BLOCK_FILE).is_file() and not (full / METRICS_FILE).exists()


def test_bad_block_requests_fail_in_one_line_and_overwrite_nothing(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], subprocess_compile_cache: Path
) -> None:
    def refused(*argv: object, says: str) -> None:
        assert _coevolab(*argv) == cli.EXIT_BAD_INPUT
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and says in error[0], error

    before = _files(runs["array"])
    refused("run", runs["grid"], "--out", tmp_path / "new", "--block", 2, says="block 2 is out of range")
    assert not (tmp_path / "new").exists()
    # The 4-seed run's directory for the 2-seed grid.
    refused("run", runs["grid"], "--out", runs["array"], "--block", 0, says="holds a run of another grid")
    refused("run", "--resume", runs["array"], says="already finished")
    assert _files(runs["array"]) == before

    # Blocks of two grids in one directory: block 1 of another grid (another knob value) copied in.
    mixed = Path(shutil.copytree(runs["two"], tmp_path / "mixed"))
    other = json.loads((block_dir(mixed, 1) / "grid.json").read_text())
    other["pretrain"]["label_noise"] = 0.2
    (block_dir(mixed, 1) / "grid.json").write_text(json.dumps(other))
    for merged in (METRICS_FILE, "manifest.json"):  # as before any merge: no manifest lists block 1's old grid
        (mixed / merged).unlink()
    before = _files(mixed)
    refused("merge", mixed, says="block 1 was run for another grid")
    refused("run", "--resume", mixed, says="holds a block of another grid")
    assert _files(mixed) == before
    assert load_spec(mixed).run.seeds == (0, 1)
