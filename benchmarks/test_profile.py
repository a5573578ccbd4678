"""What one inner step of the published grid executes: kernels per step and the share of its time by kind of op.

Two programs of the published grid that differ only in steps_per_iteration (S and 2S) are
each traced for one step() call; their difference is S inner steps with the per-iteration
diagnostics cancelled, so every figure here is per inner step. The kernels are summed over
the devices (one per core), each of which runs its shards' steps.
"""

from __future__ import annotations

from benchmarks import support
from benchmarks.profiling import profile_call


def test_inner_step_profile(benchmark, sizes, judge_pool, figures):
    steps = sizes.steps_per_iteration // 10 or 1
    steppers = [
        support.Stepper(*support.started(support.published_grid(sizes, steps_per_iteration=s), judge_pool))
        for s in (steps, 2 * steps)
    ]
    for stepper in steppers:
        stepper()  # warm-up: the first call of an executable pays one-off costs

    def traced() -> tuple:
        return tuple(profile_call(stepper) for stepper in steppers)

    short, long = support.measure(benchmark, traced, sizes, rounds=1, warmup=0)[0]
    per_step = long - short
    devices, program = steppers[0].program.plan.devices, steppers[0].program
    kernels = sum(per_step.count.values()) / steps
    where = f"published grid, {support.sharding(program)}; trace of S={2 * steps} minus S={steps} inner steps"
    figures.add(benchmark, "profile: kernels executed per inner step", kernels / devices, "per device", where)
    figures.add(
        benchmark,
        "profile: µs per kernel",
        sum(per_step.micros.values()) / max(sum(per_step.count.values()), 1),
        "µs",
        f"mean traced duration of one kernel in the inner step; {where}",
    )
    total = sum(per_step.micros.values()) or 1.0
    for kind, micros in per_step.micros.most_common(6):
        figures.add(
            benchmark,
            f"profile: share of the inner step, {kind}",
            100 * micros / total,
            "%",
            f"{per_step.count[kind] / steps / devices:,.0f} kernels per step per device; {where}",
        )
