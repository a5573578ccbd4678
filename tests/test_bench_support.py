"""The benchmark harness's measuring code (benchmarks/support.py, flops.py, conftest.py, accelerator.py), cheaply.

`make test` does not run the benchmarks themselves: `make test-all` runs each body once at untimed size, `make bench`
times them. What they all rely on is checked here without compiling a grid: the timing wrapper, the switch between
modes, XLA's FLOP count, and the figures derived from the scaling benchmark.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pandas as pd
import pytest

from benchmarks import accelerator, flops, support
from benchmarks.conftest import FigureBook, _markdown


def test_measure_runs_the_body_once_when_benchmarks_are_disabled(benchmark, request: pytest.FixtureRequest) -> None:
    # pyproject's addopts disable benchmarks: without --benchmark-enable, the untimed sizes.
    assert support.benchmarks_disabled(request.config)
    assert support.sizes_for(request.config) is support.SMOKE
    calls: list[int] = []

    def body() -> int:
        calls.append(len(calls))
        return 10 * len(calls)

    # Disabled, rounds and warm-up are ignored: one untimed call, whose result is kept (not dropped as a warm-up).
    assert support.measure(benchmark, body, support.SMOKE, rounds=5, warmup=2) == [10]
    assert calls == [0]


def test_per_run_step_arithmetic() -> None:
    assert support.us_per_run_step(0.5, 1000) == pytest.approx(500.0)
    assert support.median([3.0, 1.0, 2.0, 100.0]) == 2.5


def test_xla_flops_reads_the_cost_analysis() -> None:
    # One (4, 8) @ (8, 16) product: 4 · 16 outputs, each 8 multiply-adds of 2 FLOPs.
    compiled = jax.jit(jnp.dot).lower(jnp.ones((4, 8)), jnp.ones((8, 16))).compile()
    assert flops.xla_flops(compiled) == 2 * 4 * 8 * 16


def test_shape_groups_partition_a_grid_without_padding() -> None:
    groups = support.shape_groups(support.paper_grid())
    assert sorted(groups) == ["1 judge", "1 judge + anchor", "1 judge + meta", "3 judges", "5 judges"]
    names = [c.name for spec in groups.values() for c in spec.conditions]
    assert sorted(names) == sorted(c.name for c in support.paper_grid().conditions)


# These use the fixture only as the figures' recorder (its extra_info), never to time anything.
UNTIMED = pytest.mark.filterwarnings("ignore:Benchmark fixture was not used")


@UNTIMED
def test_scaling_figures_say_where_batching_saturates(benchmark) -> None:
    book = FigureBook()
    for runs, micros in ((1, 10.0), (2, 6.0), (4, 5.0), (8, 5.4)):
        book.add(benchmark, f"scaling: µs per run-step, runs={runs}", micros, "µs")
    book.add(benchmark, "grid: µs per run-step", 7.0, "µs", "not a scaling figure")
    assert book.scaling() == {1: 10.0, 2: 6.0, 4: 5.0, 8: 5.4}
    assert benchmark.extra_info["scaling: µs per run-step, runs=8"] == 5.4

    book.derive()
    # The fewest runs within 1/0.9 of the best (5.0 µs, so at most 5.56 µs): 4; the best is 2× one run's speed.
    saturated = book.figures["scaling: runs to reach 90% of best throughput"]
    assert saturated.value == 4 and "2.0×" in saturated.note
    assert book.figures["scaling: runs=4 over the best size"].value == 1.0
    assert book.figures["scaling: runs=8 over the best size"].value == pytest.approx(1.08)


@UNTIMED
def test_markdown_has_a_row_per_figure(benchmark) -> None:
    book = FigureBook()
    book.add(benchmark, "compile: cold", 1234.5678, "s", "a | b")
    book.add(benchmark, "flops: XLA / analytic", 0.123456, "×")
    peak = {"cores": 2, "derivation": "2 cores × 2.00 GHz × 32 = 128.0 GFLOP/s"}
    payload = {
        "mode": "quick",
        "complete": True,
        "date": "2026-01-01T00:00:00+00:00",
        "machine": {"cpu": "Test CPU", "fp32_peak": peak},
        "jax_devices": ["cpu:0", "cpu:1"],
        "packages": {"jax": "1", "jaxlib": "1"},
        "command": "python -m pytest benchmarks",
        "figures": [vars(figure) for figure in book.figures.values()],
    }
    text = _markdown(payload)
    assert text.startswith("# Benchmarks — QUICK MODE (reduced sizes)\n")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows == ["| compile: cold | 1,235 | s | a \\| b |", "| flops: XLA / analytic | 0.1235 | × |  |"]


def test_accelerator_comparison_finds_the_gap_and_the_verdict_that_moved(tmp_path) -> None:
    # The published grid's CPU reference against a copy with one mean moved by 0.01 and one verdict changed.
    summary = pd.read_csv(accelerator.REFERENCE / "summary.csv")
    claims = pd.read_csv(accelerator.REFERENCE / "claims.csv")
    summary.loc[summary["condition"] == "frozen", "policy_quality_mean"] += 0.01
    claims.loc[0, "verdict"] = "moved"
    summary.to_csv(tmp_path / "summary.csv", index=False)
    claims.to_csv(tmp_path / "claims.csv", index=False)
    record = accelerator.compare(tmp_path)
    quality = record["policy_quality_mean"]
    assert quality["at"] == "frozen" and quality["max_abs_difference"] == pytest.approx(0.01, abs=1e-9)
    assert quality["equal"] == len(summary) - 1 and quality["median_abs_difference"] == 0
    assert record["judge_alignment_mean"]["max_abs_difference"] == 0
    assert (record["claims"], record["verdicts_equal"]) == (len(claims), len(claims) - 1)
