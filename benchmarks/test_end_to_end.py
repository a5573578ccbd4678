"""The command a researcher runs, timed whole: `coevolab run` in a fresh process, cold and warm caches.

Each run is a subprocess (imports, pretraining, compiles, training, report, all of it) with
its compile cache in a fresh folder: the first finds it empty (cold), the second finds what the
first wrote (warm). Wall time is the parent's clock; peak memory is the child's maximum resident
set, from the kernel's accounting of that one process (`os.wait4`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import support


def run_command(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run `coevolab run` with `args`; returns (wall seconds, peak resident memory in GiB). Raises if it fails."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", *args], env=env, cwd=support.ROOT)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if child.returncode != 0:
        raise subprocess.CalledProcessError(child.returncode, args)
    return seconds, usage.ru_maxrss / 2**20  # KiB on Linux


def _environment(cache: Path) -> dict[str, str]:
    return {**os.environ, "COEVOLAB_CACHE_DIR": str(cache), "PYTHONPATH": str(support.ROOT)}


def _grid(sizes: support.Sizes, hundred: bool) -> list[str]:
    if sizes.mode == "untimed":
        return [str(support.ROOT / "conditions" / "smoke.toml"), "--seed-list", "0"]
    return [str(support.ROOT / "conditions" / ("paper-100.toml" if hundred else "paper.toml"))]


def _cache(sizes: support.Sizes, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh compile cache for each measurement. At untimed sizes (`make test-all`) both tests run the same small grid
    and only check that the measuring works, so they share one: that grid is compiled cold once, not twice."""
    return tmp_path_factory.getbasetemp() / "untimed-compile-cache" if sizes.mode == "untimed" else tmp_path / "cache"


def test_published_grid_end_to_end(benchmark, sizes, figures, tmp_path, tmp_path_factory):
    args = [*_grid(sizes, hundred=False), "--quiet", "--force"]
    env = _environment(_cache(sizes, tmp_path, tmp_path_factory))

    def cold_then_warm() -> dict[str, tuple[float, float]]:
        return {
            run: run_command([*args, "--out", str(tmp_path / run)], env)  # the second finds the first's cache
            for run in ("cold", "warm")
        }

    results = support.measure(benchmark, cold_then_warm, sizes, rounds=1, warmup=0)[0]
    what = " ".join(Path(a).name if a.endswith(".toml") else a for a in args)
    for run, (seconds, memory) in results.items():
        figures.add(
            benchmark,
            f"end to end: published grid, {run} caches",
            seconds,
            "s",
            f"`coevolab run {what}` in a fresh process, {run} compile cache; peak memory {memory:.2f} GiB",
        )


def test_hundred_seeds_end_to_end(benchmark, sizes, figures, tmp_path, tmp_path_factory):
    """The published grid at 100 seeds (1,800 runs), cold caches: wall time and peak memory."""
    args = [*_grid(sizes, hundred=True), "--quiet", "--force", "--out", str(tmp_path / "run")]
    cache = _cache(sizes, tmp_path, tmp_path_factory)
    seconds, memory = support.measure(
        benchmark, lambda: run_command(args, _environment(cache)), sizes, rounds=1, warmup=0
    )[0]
    what = " ".join(Path(a).name if a.endswith(".toml") else a for a in args[:3])
    note = f"`coevolab run {what}` in a fresh process, cold compile cache"
    figures.add(benchmark, "end to end: 100 seeds", seconds, "s", note)
    figures.add(benchmark, "end to end: 100 seeds, peak memory", memory, "GiB", note)


def test_large_world_end_to_end(benchmark, sizes, figures, tmp_path):
    """The tiny smoke grid (3 conditions × 2 seeds, 2 iterations × 20 steps) in a world of 8^6 = 262,144 outputs, cold
    caches: the peak memory of a large world, whose exact diagnostics dominate (target: under 2 GiB)."""
    vocab_size, seq_len = (2, 2) if sizes.mode == "untimed" else (8, 6)
    grid = tmp_path / "large-world.toml"
    grid.write_text(
        f'extends = "{support.ROOT / "conditions" / "smoke.toml"}"\n\n'
        f"[world]\nvocab_size = {vocab_size}\nseq_len = {seq_len}\n"
    )
    args = [str(grid), "--quiet", "--force", "--out", str(tmp_path / "run")]
    env = _environment(tmp_path / "cache")
    seconds, memory = support.measure(benchmark, lambda: run_command(args, env), sizes, rounds=1, warmup=0)[0]
    note = f"`coevolab run` of smoke.toml at {vocab_size}^{seq_len} outputs in a fresh process, cold compile cache"
    figures.add(benchmark, "end to end: tiny grid in a large world", seconds, "s", note)
    figures.add(benchmark, "end to end: tiny grid in a large world, peak memory", memory, "GiB", note)
