"""Exact best-of-n (harness.engine.best_of_n): cost per run of gold, proxy and KL over a 20-point grid of n (1 …
10⁴), jitted and vmapped over 90 runs in one call, at 4,096 and 262,144 outputs; and what the per-run table
best_of_n.csv (harness.mechanisms.best_of_n) costs the published grid per outer iteration.

Each figure is the median wall time of the call after a warm-up call (which compiles), divided by the runs. The
inputs are on the device before timing; one call is one sort per run plus O(N·G) elementwise work.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import support
from harness.engine.best_of_n import best_of_n, log_n_grid
from harness.engine.models import judge_score_table
from harness.mechanisms.best_of_n import N_GRID

# Outputs per world and runs per call, by benchmark mode (untimed: the body once, as small as it goes).
OUTPUTS = {"untimed": (64,), "quick": (4096, 262_144), "full": (4096, 262_144)}
RUNS = {"untimed": 2, "quick": 10, "full": 90}
GRID_POINTS = 20


def pytest_generate_tests(metafunc):
    if "n_outputs" in metafunc.fixturenames:
        metafunc.parametrize("n_outputs", OUTPUTS[support.sizes_for(metafunc.config).mode])


def test_best_of_n(benchmark, sizes, figures, n_outputs):
    runs = RUNS[sizes.mode]
    rng = np.random.default_rng(0)
    log_probs, proxy, gold = (jnp.asarray(rng.normal(size=(runs, n_outputs)), jnp.float32) for _ in range(3))
    log_probs = 3.0 * log_probs  # a policy far from uniform, as trained ones are
    grid = jnp.asarray(log_n_grid(GRID_POINTS, 10_000))
    program = jax.jit(jax.vmap(best_of_n, in_axes=(0, 0, 0, None)))

    def call() -> float:
        start = time.perf_counter()
        jax.block_until_ready(program(log_probs, proxy, gold, grid))
        return time.perf_counter() - start

    seconds = support.median(support.measure(benchmark, call, sizes))
    figures.add(
        benchmark,
        f"best-of-n: ms per run, {n_outputs:,} outputs",
        1e3 * seconds / runs,
        "ms",
        f"{runs} runs vmapped in one jitted call, {len(grid)} values of n (1 … 10⁴); median of {sizes.rounds} calls",
    )


def test_best_of_n_table_per_iteration(benchmark, sizes, judge_pool, figures):
    """What best_of_n.csv costs a grid: its table (two bases per run, `harness.mechanisms.best_of_n`) timed alone on
    the published grid's own arrays, against the whole per-iteration diagnostics it is part of and one outer
    iteration (its inner steps and the diagnostics, `program.step`)."""
    spec = support.published_grid(sizes)
    stepper = support.Stepper(*support.started(spec, judge_pool))
    program = stepper.program
    world = program.world.config
    judges = program.judge_params(program.constants.pretrained_judges[program.constants.run_first_slot])
    reward = jax.vmap(judge_score_table, (0, None, None))(judges, world.vocab_size, world.seq_len)
    initial = program.constants.initial_log_pi
    grid = jnp.asarray(N_GRID, jnp.float32)
    per_run = jax.jit(jax.vmap(best_of_n, in_axes=(0, 0, None, None)))

    def table() -> float:
        start = time.perf_counter()
        # As the diagnostics compute it: from π₀ and from the current policy (here π₀ too: the cost is the same).
        jax.block_until_ready(
            (per_run(initial, reward, program.world.q_star, grid), per_run(initial, reward, program.world.q_star, grid))
        )
        return time.perf_counter() - start

    table_seconds = support.median(support.measure(benchmark, table, sizes))
    diagnostics, iterations = [], []
    for _ in range(max(sizes.rounds, 1)):
        start = time.perf_counter()
        jax.block_until_ready(program.diagnose(stepper.state))
        diagnostics.append(time.perf_counter() - start)
        iterations.append(stepper())
    runs, steps = program.shape.n_runs, program.spec.run.steps_per_iteration
    note = f"{runs} runs of the published grid, {world.n_outputs:,} outputs, {len(N_GRID)} values of n × 2 bases"
    figures.add(benchmark, "best-of-n table: ms per iteration", 1e3 * table_seconds, "ms", note)
    figures.add(
        benchmark,
        "best-of-n table: share of the diagnostics",
        100 * table_seconds / support.median(diagnostics),
        "%",
        f"{note}; the diagnostics (every metric and table, exact) took {1e3 * support.median(diagnostics):.1f} ms",
    )
    figures.add(
        benchmark,
        "best-of-n table: share of one iteration",
        100 * table_seconds / support.median(iterations),
        "%",
        f"{note}; an iteration of {steps} inner steps and its diagnostics took {support.median(iterations):.2f} s",
    )
