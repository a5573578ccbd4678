"""Padding overhead: the published grid as one program vs the same runs grouped by shape.

One program pads every run to the grid's shape-level work: anchor and meta branches run
for the slots that use them, but the grid-level conds and the largest ensemble set the
batch of work per step. The grouped alternative runs one program per shape class
(ensemble size, anchor on/off, meta on/off); its cost is the sum of the groups' step times.
"""

from __future__ import annotations

from benchmarks import support


def test_padding(benchmark, sizes, judge_pool, figures):
    spec = support.published_grid(sizes)
    grid = support.Stepper(*support.started(spec, judge_pool))
    groups = {name: support.Stepper(*support.started(g, judge_pool)) for name, g in support.shape_groups(spec).items()}

    def one_round() -> dict[str, float]:
        return {"grid": grid(), **{name: stepper() for name, stepper in groups.items()}}

    results = support.measure(benchmark, one_round, sizes)
    steps = sizes.steps_per_iteration
    grid_seconds = support.median([r["grid"] for r in results])
    group_seconds = {name: support.median([r[name] for r in results]) for name in groups}
    run_steps = grid.run_steps
    grid_us = support.us_per_run_step(grid_seconds, run_steps)
    grouped_us = support.us_per_run_step(sum(group_seconds.values()), run_steps)
    for name, stepper in groups.items():
        figures.add(
            benchmark,
            f"padding: µs per run-step, group '{name}'",
            support.us_per_run_step(group_seconds[name], stepper.run_steps),
            "µs",
            f"{stepper.program.shape.n_runs} runs, {stepper.program.shape.n_slots} judge slots",
        )
    figures.add(
        benchmark,
        "padding: grid µs per run-step",
        grid_us,
        "µs",
        f"{grid.program.shape.n_runs} runs in one program; steps_per_iteration={steps}",
    )
    figures.add(
        benchmark,
        "padding: grouped µs per run-step",
        grouped_us,
        "µs",
        f"sum of {len(groups)} group programs' step times ÷ the same {grid.program.shape.n_runs} runs × {steps} steps",
    )
    figures.add(
        benchmark,
        "padding: overhead (grid / grouped)",
        grid_us / grouped_us,
        "×",
        ">1: one program costs more than running its shape groups separately; each round times all back to back",
    )
