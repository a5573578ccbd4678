"""Achieved GFLOP/s of the baseline program against the CPU's FP32 peak.

The iteration program's inner steps are a loop with a run-time trip count (the steps per iteration are a value, not
a size), and XLA's cost analysis counts a loop body once. So the FLOPs of one inner step are taken from
`harness.grid.training_step.inner_step` compiled on its own for all the grid's runs on one device (the loop body,
with the same constants, knobs and state shapes; filler runs of the shards excluded), and one iteration's useful
work is S × inner + diagnostics. The analytic count covers the GRU and dense matmuls only (see
flops.analytic_flops_per_run_step); XLA also counts elementwise work (gates, softmax, Adam, random bits), so its
count is expected to be larger.
"""

from __future__ import annotations

from benchmarks import flops, machine, support


def test_flops(benchmark, sizes, judge_pool, figures):
    n_runs, steps = sizes.flops_runs, sizes.steps_per_iteration
    program, state = support.started(support.baseline_grid(sizes, n_runs), judge_pool)
    shape = program.shape
    f_iteration = flops.xla_flops(program._executable)
    f_inner = flops.inner_step_flops(program, state)
    f_diagnostics = flops.diagnostics_flops(program, state)
    info = benchmark.extra_info
    info["shards (runs per shard, fillers)"] = (
        f"{program.plan.n_shards} ({program.shard_shape.n_runs}, {program.plan.fillers})"
    )
    info["XLA FLOPs: iteration program of one shard (loop body counted once)"] = f_iteration
    info["XLA FLOPs: inner step of all runs"] = f_inner
    info["XLA FLOPs: diagnostics"] = f_diagnostics

    stepper = support.Stepper(program, state)
    seconds = support.median(support.measure(benchmark, stepper, sizes))

    xla_per_run_step = f_inner / n_runs
    analytic = flops.analytic_flops_per_run_step(shape.batch_size, shape.vocab_size, shape.seq_len)
    for part, count in analytic.items():
        info[f"analytic FLOPs per run-step: {part}"] = count
    iteration_flops = steps * f_inner + f_diagnostics
    achieved = iteration_flops / seconds / 1e9
    peak = machine.fp32_peak()
    info["FP32 peak derivation"] = peak["derivation"]
    where = f"baseline × {n_runs} runs, steps_per_iteration={steps}"
    figures.add(
        benchmark,
        "flops: XLA per run-step",
        xla_per_run_step / 1e6,
        "MFLOP",
        f"cost analysis of inner_step (the loop body) compiled alone, ÷ {n_runs} runs; {where}",
    )
    figures.add(
        benchmark,
        "flops: analytic matmuls per run-step",
        analytic["total"] / 1e6,
        "MFLOP",
        f"B={shape.batch_size}, L={shape.seq_len}, K={shape.vocab_size}, H=32: policy sample fwd + bwd (2× fwd), "
        "judge reward fwd, judge-update sample fwd (2B), judge BT fwd + bwd (2B)",
    )
    figures.add(
        benchmark,
        "flops: XLA / analytic",
        xla_per_run_step / analytic["total"],
        "×",
        "XLA also counts elementwise ops (gates, softmax, Adam, RNG)",
    )
    figures.add(
        benchmark,
        "flops: achieved",
        achieved,
        "GFLOP/s",
        f"XLA FLOPs of one iteration ({steps} × inner step + diagnostics, fillers excluded) ÷ median step() time "
        f"({seconds * 1e3:.1f} ms); {where}",
    )
    figures.add(benchmark, "flops: FP32 peak", peak["gflops"], "GFLOP/s", peak["derivation"])
    figures.add(benchmark, "flops: share of FP32 peak", 100 * achieved / peak["gflops"], "%", "achieved ÷ peak")
