"""Cost against the world's size and the networks': µs per run-step and diagnostics time per iteration of a tiny
baseline grid, by number of outputs (K**L) and by model family and size.

Judges start from their initialisation (not pretrained): step time does not depend on the weights' values. Each
case is its own compile; the figures are the median of the timed step() calls, diagnostics timed alone.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import pytest

from benchmarks import support
from harness.engine.architecture import ModelConfig
from harness.engine.models import init_judges
from harness.engine.world import WorldConfig
from harness.grid.pretrain import PretrainResult
from harness.grid.spec import Condition, GridSpec, RunSettings
from harness.grid.trainer import GridTrainer

# (vocab_size, seq_len) by mode: untimed runs each body once in the smallest world.
WORLDS = {"untimed": ((2, 2),), "quick": ((4, 3), (8, 3)), "full": ((4, 3), (8, 3), (8, 4), (6, 5))}


def _both(**settings: object) -> dict[str, object]:
    """The same `[model]` settings for the policy and the judge."""
    return {f"{role}_{key}": value for role in ("policy", "judge") for key, value in settings.items()}


MODELS = {
    "gru-16x32": {},
    "gru-32x64": _both(embed_dim=32, hidden_dim=64),
    "attention-16x32x1": _both(family="attention"),
    "attention-32x64x2": _both(family="attention", embed_dim=32, hidden_dim=64, layers=2, heads=2),
}
SMOKE_MODELS = ("gru-16x32", "attention-16x32x1")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "world_size" in metafunc.fixturenames:
        mode = support.sizes_for(metafunc.config).mode
        models = SMOKE_MODELS if mode == "untimed" else tuple(MODELS)
        cases = [(world, model) for world in WORLDS[mode] for model in models]
        metafunc.parametrize(("world_size", "model_name"), cases, ids=[f"{k}^{n}-{m}" for (k, n), m in cases])


def _grid(sizes: support.Sizes, world_size: tuple[int, int], model_name: str) -> GridSpec:
    vocab_size, seq_len = world_size
    return GridSpec(
        name=f"scale-{vocab_size}^{seq_len}-{model_name}",
        world=WorldConfig(vocab_size=vocab_size, seq_len=seq_len),
        model=ModelConfig(**MODELS[model_name]),
        run=RunSettings(seeds=(0, 1), iterations=10, steps_per_iteration=sizes.steps_per_iteration),
        conditions=(Condition(name="baseline"),),
    )


def _fresh_judges(program: GridTrainer) -> PretrainResult:
    """Every judge source at its initialisation, as if pretraining had stopped at step 0."""
    spec, origins = program.spec, program.origins
    params = init_judges(origins.judge_init_keys, spec.world.vocab_size, spec.world.seq_len, spec.model.judge)
    count = origins.judge_init_keys.shape[0]
    return PretrainResult(params, jnp.zeros(count, jnp.int32), jnp.zeros(count), jnp.ones(count, bool))


def test_model_scale(benchmark, sizes, figures, world_size, model_name):
    program = GridTrainer(_grid(sizes, world_size, model_name))
    state, _ = program.start(_fresh_judges(program))
    stepper = support.Stepper(program, state)
    seconds = support.median(support.measure(benchmark, stepper, sizes))
    diagnostics = []
    for _ in range(max(sizes.rounds, 1)):
        start = time.perf_counter()
        jax.block_until_ready(program.diagnose(stepper.state))
        diagnostics.append(time.perf_counter() - start)
    vocab_size, seq_len = world_size
    case = f"{vocab_size}^{seq_len} = {vocab_size**seq_len:,} outputs, {model_name}"
    figures.add(
        benchmark,
        f"model scale: µs per run-step, {case}",
        support.us_per_run_step(seconds, stepper.run_steps),
        "µs",
        f"{program.shape.n_runs} baseline runs, steps_per_iteration={program.spec.run.steps_per_iteration}",
    )
    figures.add(
        benchmark,
        f"model scale: diagnostics ms per iteration, {case}",
        1e3 * support.median(diagnostics),
        "ms",
        "every metric exact over all outputs, for all runs of the grid",
    )
