"""What the Ray backend costs over one process, and what it would give on many machines (a projection).

The published grid at 10 seeds in two blocks of 5 runs twice by `coevolab run` in a fresh process, each with a fresh
compile cache: in this process (the blocks share compiled programs), and with --ray on a Ray instance of this
machine (each block a fresh worker process: Ray's start, the worker's start and imports and a compile per block are
the price). Ray's daemons share this machine's cores with the blocks. From the blocks' records (block.json) the
per-block and per-run costs follow, and from them `tools.ray_projection` projects the grid at 100 and 1,000 seeds
on 1 to 64 machines of this kind. A timed run (`make bench`, or this file with --benchmark-enable) writes
artifacts/bench/ray.json and ray.md; `python -m tools.ray_projection docs/how-to/ray.md` renders the Ray page's table
from it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import machine, support
from benchmarks.conftest import BENCH_DIR, write_atomically
from harness.common.run_files import METRICS_FILE
from harness.experiment.blocks import BLOCK_RUNS
from harness.experiment.ray_backend import LOCAL, RayBackend
from tools.ray_projection import MACHINES, SEEDS, BlockCosts, machines_needed, projected_seconds, projection_block

# (seeds, seeds per block) of the published grid by mode: two blocks, so that the second finds the first's compiles.
MEASURED = {"full": (10, 5), "quick": (2, 1)}
# `make test-all`: the same measuring at the smallest size (the baseline in a 2-token world, a few steps).
UNTIMED_GRID = """
[run]
seeds = 2
iterations = 2
steps_per_iteration = 2
block_seeds = 1

[world]
vocab_size = 2
seq_len = 1

[conditions.baseline]
"""


def _grid(sizes: support.Sizes, directory: Path) -> Path:
    """The published grid at 10 seeds in blocks of 5 (quick: 2 seeds in blocks of 1; untimed: a tiny grid of two
    one-seed blocks)."""
    path = directory / "grid.toml"
    if sizes.mode == "untimed":
        path.write_text(UNTIMED_GRID)
        return path
    seeds, block = MEASURED[sizes.mode]
    text = support.PAPER.read_text(encoding="utf-8")
    path.write_text(text.replace("\nseeds = 5\n", f"\nseeds = {seeds}\nblock_seeds = {block}\n", 1))
    return path


def _run(args: list[str], cache: Path) -> float:
    """Wall seconds of `coevolab run ARGS` in a fresh process with its compile cache at `cache`."""
    env = {**os.environ, "COEVOLAB_CACHE_DIR": str(cache), "PYTHONPATH": str(support.ROOT)}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", *args, "--quiet"], env=env, cwd=support.ROOT, check=True
    )
    return time.perf_counter() - start


def _ray_start_seconds() -> float:
    """A local Ray instance started and stopped, as `--ray` does."""
    start = time.perf_counter()
    RayBackend.connect(LOCAL, quiet=True).close()
    return time.perf_counter() - start


def _blocks(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))["blocks"]


def _merge_seconds(run_dir: Path) -> float:
    return json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))["wall_seconds"]["merge"]


def block_costs(in_process: Path, in_process_seconds: float, ray: Path, ray_seconds: float, start: float) -> BlockCosts:
    """Per-block and per-run costs from the two runs' records.

    Each block's attempt records its phases; what a run's wall clock holds beyond its blocks and its merge is the
    driver's own start (imports, the grid), the same in both runs, and, under Ray, Ray's start and each block's
    scheduling, worker start and imports: that remainder, less Ray's start, per block, is `block_fixed`.
    """
    blocks = _blocks(ray)
    seconds = [block["attempts"][-1]["seconds"] for block in blocks]
    driver = in_process_seconds - sum(sum(b["attempts"][-1]["seconds"].values()) for b in _blocks(in_process))
    driver -= _merge_seconds(in_process)
    outside = ray_seconds - sum(sum(s.values()) for s in seconds) - _merge_seconds(ray) - driver - start
    runs = sum(len(block["seeds"]) for block in blocks)
    spec = json.loads((ray / "grid.json").read_text(encoding="utf-8"))
    conditions = len(spec["conditions"])
    per_run = sum(sum(v for k, v in s.items() if k != "compile") for s in seconds) / (runs * conditions)
    return BlockCosts(
        start=start,
        block_fixed=max(outside, 0.0) / len(blocks),
        compile_cold=seconds[0]["compile"],
        compile_warm=min(s["compile"] for s in seconds[1:]) if len(seconds) > 1 else seconds[0]["compile"],
        per_run=per_run,
        merge=_merge_seconds(ray),
        conditions=conditions,
        # The published grid's own block size (⌈360 / 18⌉ = 20 seeds), which the projection is of.
        block_seeds=math.ceil(BLOCK_RUNS / conditions),
    )


def attributable_overhead(costs: BlockCosts, in_process: list[dict], ray: list[dict]) -> float:
    """Seconds Ray adds by the breakdown: its start, each block's worker start and imports, and the compiles of the
    blocks' fresh processes beyond the in-process run's."""
    compiles = [sum(block["attempts"][-1]["seconds"]["compile"] for block in run) for run in (in_process, ray)]
    return costs.start + costs.block_fixed * len(ray) + compiles[1] - compiles[0]


def test_ray_overhead(benchmark, sizes, tmp_path):
    pytest.importorskip("ray")
    grid = _grid(sizes, tmp_path)
    loads: list[float] = []  # other work on the machine inflates both runs: recorded beside the figures

    def both() -> tuple[float, float, float]:
        loads.append(os.getloadavg()[0])
        in_process = _run([str(grid), "--out", str(tmp_path / "in-process")], tmp_path / "cache-in-process")
        ray = _run([str(grid), "--out", str(tmp_path / "ray"), "--ray"], tmp_path / "cache-ray")
        loads.append(os.getloadavg()[0])
        return in_process, ray, _ray_start_seconds()

    in_process_seconds, ray_seconds, start = support.measure(benchmark, both, sizes, rounds=1, warmup=0)[0]
    in_process, ray = tmp_path / "in-process", tmp_path / "ray"
    assert (in_process / METRICS_FILE).read_bytes() == (ray / METRICS_FILE).read_bytes()
    costs = block_costs(in_process, in_process_seconds, ray, ray_seconds, start)
    ratio = ray_seconds / in_process_seconds
    added = attributable_overhead(costs, _blocks(in_process), _blocks(ray))
    benchmark.extra_info.update(
        {"ray: overhead ratio": ratio, "ray: seconds added": added, **dataclasses.asdict(costs)}
    )
    projection = {seeds: {m: projected_seconds(costs, seeds, m) for m in MACHINES} for seeds in SEEDS}
    assert all(seconds > 0 for row in projection.values() for seconds in row.values())
    grid_seeds, block_seeds = MEASURED.get(sizes.mode, (2, 1))
    payload = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "mode": sizes.mode,
        "machine": f"{machine.cpu_model()} ({os.cpu_count()} cores)",
        "cores": os.cpu_count(),
        "grid": f"the published grid at {grid_seeds} seeds in blocks of {block_seeds}",
        "measured": {
            "in_process_seconds": in_process_seconds,
            "ray_seconds": ray_seconds,
            "overhead_ratio": ratio,
            # Robust to other load, unlike the ratio of two wall clocks: what Ray adds by the breakdown.
            "overhead_attributable_seconds": added,
            "load_average_before_and_after": loads,
            "blocks": {"in-process": _blocks(in_process), "ray": _blocks(ray)},
        },
        "costs": dataclasses.asdict(costs),
        "projection_seconds": projection,
        "machines_for_1000_seeds_in_30_minutes": machines_needed(costs, 1_000),
    }
    report = "# Ray backend: overhead and projection\n\n" + projection_block(payload) + "\n"
    if sizes.mode == "untimed":  # the measuring works; its figures at this size mean nothing
        return
    write_atomically(BENCH_DIR / "ray.json", json.dumps(payload, indent=2) + "\n")
    write_atomically(BENCH_DIR / "ray.md", report)
