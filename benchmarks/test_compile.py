"""Compile time of the grid program, cold and warm from JAX's persistent compilation cache.

The figure is GridTrainer.times.compile: the diagnostics and the iteration programs' tracing + lowering + XLA
compilation (cold) or tracing + lowering + loading the executables from the cache (warm); the cold compile is also
split by program (`PhaseTimes.compile_diagnostics`), and given for the baseline condition alone, the smallest
program of the published grid's conditions. Before every compile the process's in-memory caches are cleared
(`harness.grid.executables.clear_program_caches()`).
"""

from __future__ import annotations

from benchmarks import profiling, support
from harness.grid.pretrain import PretrainResult
from harness.grid.spec import GridSpec
from harness.grid.trainer import PhaseTimes


def _compile_afresh(spec: GridSpec, pool: PretrainResult) -> PhaseTimes:
    support.clear_in_memory_caches()
    program, _ = support.started(spec, pool)
    return program.times


def _describe(spec: GridSpec) -> str:
    conditions, seeds = support.plural(len(spec.conditions), "condition"), support.plural(len(spec.run.seeds), "seed")
    return f"{conditions} × {seeds}, steps_per_iteration={spec.run.steps_per_iteration}"


def test_compile_cold(benchmark, sizes, judge_pool, figures):
    spec = support.published_grid(sizes)
    alone = spec.only(["baseline"])
    with support.persistent_cache(None):
        times = support.measure(
            benchmark, lambda: _compile_afresh(spec, judge_pool), sizes, rounds=sizes.compile_rounds, warmup=0
        )
        baseline = [_compile_afresh(alone, judge_pool).compile for _ in times]
    how = f"persistent cache disabled, in-memory caches cleared; median of {len(times)}"
    totals, diagnostics = [t.compile for t in times], [t.compile_diagnostics for t in times]
    figures.add(benchmark, "compile: cold", support.median(totals), "s", f"published grid ({_describe(spec)}); {how}")
    parts = (("iteration", [t - d for t, d in zip(totals, diagnostics, strict=True)]), ("diagnostics", diagnostics))
    for program, seconds in parts:
        note = f"its part of the published grid's cold compile; {how}"
        figures.add(benchmark, f"compile: cold, {program} program", support.median(seconds), "s", note)
    note = f"the published grid's baseline condition alone ({_describe(alone)}), both programs; {how}"
    figures.add(benchmark, "compile: cold, baseline alone", support.median(baseline), "s", note)


def test_compile_warm(benchmark, sizes, judge_pool, figures, tmp_path):
    spec = support.published_grid(sizes)
    cache_dir = tmp_path / "jax-cache"
    with support.persistent_cache(cache_dir):
        fill = _compile_afresh(spec, judge_pool).compile
        entries = sum(1 for path in cache_dir.rglob("*") if path.is_file())
        seconds = support.measure(
            benchmark, lambda: _compile_afresh(spec, judge_pool).compile, sizes, rounds=sizes.compile_rounds, warmup=0
        )
    warm = support.median(seconds)
    benchmark.extra_info["compile: filling the cache (s)"] = fill
    benchmark.extra_info["cache entries"] = entries
    figures.add(
        benchmark,
        "compile: warm (persistent cache)",
        warm,
        "s",
        f"published grid ({_describe(spec)}); a fresh cache dir filled by one compile ({fill:.1f} s, {entries} files), "
        f"in-memory caches cleared before each; median of {len(seconds)}",
    )
    cold = figures.figures.get("compile: cold")
    if cold is not None and warm > 0:
        figures.add(benchmark, "compile: cold / warm", cold.value / warm, "×", "speedup from the persistent cache")


def test_program_size(benchmark, sizes, judge_pool, figures):
    """Where the published grid's compiled programs come from: optimised HLO instructions of the iteration and the
    diagnostics programs, the iteration's by the mechanism (or part of the loop) whose traced code made them
    (`profiling.hlo_sources`, from the named scopes the grid traces under)."""
    spec = support.published_grid(sizes)
    program, _ = support.started(spec, judge_pool)
    names = [m.name for m in program.shape.mechanisms]

    def count() -> tuple:
        return program._executable.as_text(), program._diagnostics.as_text()

    iteration, diagnostics = support.measure(benchmark, count, sizes, rounds=1, warmup=0)[0]
    where = f"published grid ({_describe(spec)}), one shard's program"
    for name, text in (("iteration", iteration), ("diagnostics", diagnostics)):
        instructions = sum(profiling.hlo_sources(text, names).values())
        figures.add(benchmark, f"program size: {name} program, HLO instructions", instructions, "", where)
    sources = profiling.hlo_sources(iteration, names)
    total = sum(sources.values()) or 1
    for source, lines in sources.most_common(8):
        figures.add(
            benchmark,
            f"program size: iteration, share from {source}",
            100 * lines / total,
            "%",
            f"{lines:,} of {total:,} optimised HLO instructions; {where}",
        )
