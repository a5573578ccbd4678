"""Steady-state speed: µs per run-step (one inner step of one (condition, seed) run).

Each figure is the median wall time of program.step() calls after the first (warm-up),
divided by runs × steps_per_iteration. A step() call is one outer iteration: the scan
of inner steps (one program), then the per-iteration exact diagnostics (a second one),
which steps_per_iteration=100 makes a small share.
"""

from __future__ import annotations

import time

import jax

from benchmarks import support


def pytest_generate_tests(metafunc):
    if "n_runs" in metafunc.fixturenames:
        metafunc.parametrize("n_runs", support.sizes_for(metafunc.config).scaling_runs)


def _diagnostics_seconds(stepper: support.Stepper, repeats: int) -> float:
    """Median wall time of the per-iteration diagnostics alone (`program.diagnose`: what step() runs after its
    iteration program)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(stepper.program.diagnose(stepper.state))
        times.append(time.perf_counter() - start)
    return support.median(times)


def test_grid_step(benchmark, sizes, judge_pool, figures):
    spec = support.published_grid(sizes)
    stepper = support.Stepper(*support.started(spec, judge_pool))
    seconds = support.median(support.measure(benchmark, stepper, sizes))
    shape = stepper.program.shape
    benchmark.extra_info["steps_per_iteration"] = spec.run.steps_per_iteration
    diagnostics = _diagnostics_seconds(stepper, repeats=sizes.rounds)
    figures.add(
        benchmark,
        "grid: µs per run-step",
        support.us_per_run_step(seconds, stepper.run_steps),
        "µs",
        f"published grid: {shape.n_runs} runs ({support.plural(len(spec.conditions), 'condition')} × "
        f"{support.plural(len(spec.run.seeds), 'seed')}), "
        f"{shape.n_slots} judge slots, {support.sharding(stepper.program)}; "
        f"steps_per_iteration={spec.run.steps_per_iteration}; "
        f"median of {sizes.rounds} step() calls after {sizes.warmup_rounds} warm-up",
    )
    figures.add(
        benchmark,
        "grid: s per outer iteration",
        seconds,
        "s",
        f"one program.step() at steps_per_iteration={spec.run.steps_per_iteration}, diagnostics included",
    )
    figures.add(
        benchmark,
        "grid: diagnostics share of a step() call",
        100 * diagnostics / seconds,
        "%",
        f"the exact per-iteration diagnostics timed alone ({diagnostics * 1e3:.1f} ms, median of {sizes.rounds})",
    )


def test_shards_vs_one_device(benchmark, sizes, judge_pool, figures):
    """The published grid split into one shard per device vs the same grid on one device, back to back."""
    spec = support.published_grid(sizes)
    sharded = support.Stepper(*support.started(spec, judge_pool))
    whole = support.Stepper(*support.started(spec, judge_pool, max_shards=1))

    def one_round() -> dict[str, float]:
        return {"sharded": sharded(), "one device": whole()}

    results = support.measure(benchmark, one_round, sizes)
    ratio = support.median([r["one device"] / r["sharded"] for r in results])
    figures.add(
        benchmark,
        "sharding speedup (one device / sharded)",
        ratio,
        "×",
        f"published grid, {support.sharding(sharded.program)} vs one program on one device; "
        f"median over {len(results)} rounds of back-to-back step() calls",
    )


def test_pieces_vs_one_shard_per_device(benchmark, sizes, judge_pool, figures):
    """A large scaling grid in planned turns (a device's shards one after another, one call each) vs one shard per
    device, back to back.

    The second-largest size: the largest (1,800 runs) would spend a quarter of an hour on this comparison alone."""
    spec = support.baseline_grid(sizes, sorted(sizes.scaling_runs)[-2])
    pieces = support.Stepper(*support.started(spec, judge_pool))
    whole = support.Stepper(*support.started(spec, judge_pool, pieces=1))

    def one_round() -> dict[str, float]:
        return {"pieces": pieces(), "whole": whole()}

    results = support.measure(benchmark, one_round, sizes)
    figures.add(
        benchmark,
        "pieces speedup (one shard per device / planned pieces)",
        support.median([r["whole"] / r["pieces"] for r in results]),
        "×",
        f"baseline × {support.plural(len(spec.run.seeds), 'seed')}: "
        f"{support.sharding(pieces.program)} vs {support.sharding(whole.program)}; "
        f"median over {len(results)} rounds of back-to-back step() calls",
    )


def test_scaling(benchmark, sizes, judge_pool, figures, n_runs):
    stepper = support.Stepper(*support.started(support.baseline_grid(sizes, n_runs), judge_pool))
    seconds = support.median(support.measure(benchmark, stepper, sizes))
    us = support.us_per_run_step(seconds, stepper.run_steps)
    benchmark.extra_info["run-steps per second"] = 1e6 / us
    figures.add(
        benchmark,
        f"scaling: µs per run-step, runs={n_runs}",
        us,
        "µs",
        f"baseline condition × {support.plural(n_runs, 'seed')} in one program, {support.sharding(stepper.program)}; "
        f"steps_per_iteration={sizes.steps_per_iteration}; {1e6 / us:,.0f} run-steps/s",
    )


def test_batched_vs_one_at_a_time(benchmark, sizes, judge_pool, figures):
    """The same runs as a loop over single-run programs (all compiled; only step() timed) vs one batched program."""
    n_runs, steps = sizes.batched_runs, sizes.steps_per_iteration
    singles = [support.Stepper(*support.started(support.single_run_grid(sizes, s), judge_pool)) for s in range(n_runs)]
    batched = support.Stepper(*support.started(support.baseline_grid(sizes, n_runs), judge_pool))

    def one_round() -> dict[str, float]:
        return {"one at a time": sum(single() for single in singles), "batched": batched()}

    results = support.measure(benchmark, one_round, sizes)
    loop_us = support.us_per_run_step(support.median([r["one at a time"] for r in results]), n_runs * steps)
    batched_us = support.us_per_run_step(support.median([r["batched"] for r in results]), n_runs * steps)
    where = f"baseline seeds 0..{n_runs - 1}, steps_per_iteration={steps}"
    figures.add(
        benchmark, "one-at-a-time: µs per run-step", loop_us, "µs", f"loop of {n_runs} single-run programs; {where}"
    )
    figures.add(
        benchmark,
        "batched: µs per run-step",
        batched_us,
        "µs",
        f"one program of {n_runs} runs, {support.sharding(batched.program)}; {where}",
    )
    figures.add(
        benchmark,
        "batching speedup (one-at-a-time / batched)",
        loop_us / batched_us,
        "×",
        f"{n_runs} runs; each round times the loop and the batched call back to back",
    )
