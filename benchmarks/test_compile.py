"""Compile time of the grid program, cold and warm from JAX's persistent compilation cache.

The figure is GridTrainer.times.compile: `iteration_program(shape, devices).lower(...).compile()`,
i.e. tracing + lowering + XLA compilation (cold) or tracing + lowering + loading the
executable from the cache (warm). Before every compile the process's in-memory caches
are cleared (`harness.grid.executables.clear_program_caches()`).
"""

from __future__ import annotations

from benchmarks import profiling, support
from harness.grid.pretrain import PretrainResult
from harness.grid.spec import GridSpec


def _compile_afresh(spec: GridSpec, pool: PretrainResult) -> float:
    support.clear_in_memory_caches()
    program, _ = support.started(spec, pool)
    return program.times.compile


def _describe(spec: GridSpec) -> str:
    conditions, seeds = support.plural(len(spec.conditions), "condition"), support.plural(len(spec.run.seeds), "seed")
    return f"{conditions} × {seeds}, steps_per_iteration={spec.run.steps_per_iteration}"


def test_compile_cold(benchmark, sizes, judge_pool, figures):
    spec = support.published_grid(sizes)
    with support.persistent_cache(None):
        seconds = support.measure(
            benchmark, lambda: _compile_afresh(spec, judge_pool), sizes, rounds=sizes.compile_rounds, warmup=0
        )
    figures.add(
        benchmark,
        "compile: cold",
        support.median(seconds),
        "s",
        f"published grid ({_describe(spec)}); persistent cache disabled, in-memory caches cleared; "
        f"median of {len(seconds)}",
    )


def test_compile_warm(benchmark, sizes, judge_pool, figures, tmp_path):
    spec = support.published_grid(sizes)
    cache_dir = tmp_path / "jax-cache"
    with support.persistent_cache(cache_dir):
        fill = _compile_afresh(spec, judge_pool)
        entries = sum(1 for path in cache_dir.rglob("*") if path.is_file())
        seconds = support.measure(
            benchmark, lambda: _compile_afresh(spec, judge_pool), sizes, rounds=sizes.compile_rounds, warmup=0
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
