"""Exact best-of-n (harness.engine.best_of_n): cost per run of gold, proxy and KL over a 20-point grid of n (1 …
10⁴), jitted and vmapped over 90 runs in one call, at 4,096 and 262,144 outputs.

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
