"""What the benchmarks share: sizes per mode, grids, pretrained judges, timing (FLOP counts: benchmarks/flops.py;
the machine: benchmarks/machine.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental.compilation_cache import compilation_cache

from harness.common.wording import plural
from harness.engine import keys
from harness.engine.models import init_judges
from harness.engine.world import WorldConfig
from harness.grid.compile_cache import enable_compilation_cache
from harness.grid.conditions import load_grid
from harness.grid.executables import clear_program_caches
from harness.grid.knobs import Knobs
from harness.grid.layout import layout_grid
from harness.grid.pretrain import PretrainResult
from harness.grid.spec import Condition, GridSpec
from harness.grid.trainer import GridTrainer

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "conditions" / "paper.toml"
QUICK_ENV = "COEVOLAB_BENCH_QUICK"


# --- sizes -----------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How big each benchmark is in one mode.

    untimed: benchmarks disabled (`make test-all`): every body runs once, as small as it goes:
      the baseline condition only, in a 2-token × 1-position world, with freshly
      initialised (not pretrained) judges, so the whole folder compiles few, small programs.
    quick: enabled with COEVOLAB_BENCH_QUICK=1: real code paths, small grids, few rounds.
    full: enabled (`make bench`): the sizes the figures are quoted at.
    """

    mode: str
    steps_per_iteration: int  # inner steps per timed program.step() call
    grid_seeds: int  # seeds of the published grid
    grid_conditions: tuple[str, ...] | None  # None: all 18 published conditions
    scaling_runs: tuple[int, ...]  # baseline runs per program in the scaling benchmark
    batched_runs: int  # runs in the batched vs one-at-a-time comparison
    flops_runs: int  # baseline runs of the program whose FLOPs are counted
    rounds: int  # timed program.step() calls (after warm-up)
    warmup_rounds: int  # untimed calls first (the first call of an executable pays one-off costs)
    compile_rounds: int  # cold / warm compiles
    world: tuple[int, int] | None = None  # (vocab_size, seq_len) instead of the published world
    pretrain_judges: bool = True  # False: judges start from their initialisation (untimed mode only)


SMOKE = Sizes(
    mode="untimed",
    steps_per_iteration=2,
    grid_seeds=1,
    grid_conditions=("baseline",),
    scaling_runs=(1, 2),
    batched_runs=2,
    flops_runs=1,
    rounds=1,
    warmup_rounds=0,
    compile_rounds=1,
    world=(2, 1),
    pretrain_judges=False,
)
QUICK = Sizes(
    mode="quick",
    steps_per_iteration=10,
    grid_seeds=1,
    grid_conditions=None,
    scaling_runs=(1, 2, 4),
    batched_runs=2,
    flops_runs=2,
    rounds=3,
    warmup_rounds=1,
    compile_rounds=1,
)
FULL = Sizes(
    mode="full",
    steps_per_iteration=100,
    grid_seeds=5,
    grid_conditions=None,
    scaling_runs=(1, 5, 20, 90, 360, 1800),
    batched_runs=10,
    flops_runs=90,
    rounds=5,
    warmup_rounds=1,
    compile_rounds=3,
)


def benchmarks_disabled(config: Any) -> bool:
    """Whether pytest-benchmark runs each benchmark body once, untimed (`--benchmark-disable`)."""
    session = getattr(config, "_benchmarksession", None)
    if session is not None:
        return bool(session.disabled)
    return bool(config.getoption("benchmark_disable", False)) and not config.getoption("benchmark_enable", False)


def sizes_for(config: Any) -> Sizes:
    if benchmarks_disabled(config):
        return SMOKE
    return QUICK if os.environ.get(QUICK_ENV, "").strip() not in ("", "0") else FULL


# --- grids -----------------------------------------------------------------------------------------------------------


@functools.cache
def paper_grid() -> GridSpec:
    return load_grid(PAPER)


def base_grid(sizes: Sizes) -> GridSpec:
    """The published grid, in this mode's world."""
    spec = paper_grid()
    if sizes.world is not None:
        vocab_size, seq_len = sizes.world
        spec = spec.model_copy(update={"world": WorldConfig(vocab_size=vocab_size, seq_len=seq_len)})
    return spec


def with_run(spec: GridSpec, seeds: tuple[int, ...], steps_per_iteration: int) -> GridSpec:
    run = spec.run.model_copy(update={"seeds": seeds, "steps_per_iteration": steps_per_iteration, "iterations": 1})
    return spec.model_copy(update={"run": run})


def published_grid(sizes: Sizes, steps_per_iteration: int | None = None) -> GridSpec:
    """The published grid (the baseline alone in untimed mode) at this mode's seeds and steps per iteration."""
    spec = base_grid(sizes)
    if sizes.grid_conditions is not None:
        spec = spec.only(sizes.grid_conditions)
    steps = sizes.steps_per_iteration if steps_per_iteration is None else steps_per_iteration
    return with_run(spec, tuple(range(sizes.grid_seeds)), steps)


def baseline_grid(sizes: Sizes, n_runs: int, steps_per_iteration: int | None = None) -> GridSpec:
    """The baseline condition alone with seeds 0..n_runs-1."""
    steps = sizes.steps_per_iteration if steps_per_iteration is None else steps_per_iteration
    return with_run(base_grid(sizes).only(["baseline"]), tuple(range(n_runs)), steps)


def single_run_grid(sizes: Sizes, seed: int) -> GridSpec:
    return with_run(base_grid(sizes).only(["baseline"]), (seed,), sizes.steps_per_iteration)


def shape_groups(spec: GridSpec) -> dict[str, GridSpec]:
    """The grid split into sub-grids whose runs need no padding: same ensemble size, anchor on/off, meta on/off."""
    groups: dict[str, list[str]] = {}
    for condition in spec.conditions:
        knobs = condition.knobs
        name = f"{knobs.n_judges} judge{'s' if knobs.n_judges > 1 else ''}"
        name += " + anchor" if knobs.anchor_fraction > 0 else ""
        name += " + meta" if knobs.meta_holdout_fraction > 0 else ""
        groups.setdefault(name, []).append(condition.name)
    return {name: spec.only(names) for name, names in groups.items()}


# --- pretrained judges -----------------------------------------------------------------------------------------------


def judge_pool(sizes: Sizes) -> PretrainResult:
    """Judges (seed, member) for the published grid's seeds and largest ensemble, pretrained once.

    Smoke mode skips pretraining (its compile alone would dominate): every judge keeps
    the initial weights pretraining would have started from.
    """
    grid = published_grid(sizes)
    seeds, members = grid.run.seeds, max(c.knobs.n_judges for c in grid.conditions)
    if sizes.pretrain_judges:
        pool_spec = grid.model_copy(update={"conditions": (Condition(name="pool", knobs=Knobs(n_judges=members)),)})
        # Its judge sources are (seed, member), seed-major.
        flat = GridTrainer(pool_spec).pretrain()
        return jax.tree.map(lambda x: x.reshape(len(seeds), members, *x.shape[1:]), flat)
    world, member_ids = grid.world, jnp.arange(members)
    init_keys = jax.vmap(lambda s: jax.vmap(lambda m: keys.judge_keys(s, m)[0])(member_ids))(jnp.asarray(seeds))
    shape = (len(seeds), members)
    params = init_judges(init_keys.reshape(-1, 2), world.vocab_size, world.seq_len)
    params = jax.tree.map(lambda x: x.reshape(*shape, *x.shape[1:]), params)
    return PretrainResult(
        params, jnp.zeros(shape, jnp.int32), jnp.full(shape, jnp.nan, jnp.float32), jnp.ones(shape, jnp.bool_)
    )


def pretrained_for(spec: GridSpec, pool: PretrainResult) -> PretrainResult:
    """Judges for every (seed, member) source of `spec` from the pool; seed s gets the pool's seed s mod pool size.

    Exact for seeds inside the pool (the published grid); beyond it, runs share judge
    starting weights but keep their own training keys and policies. Step time does not
    depend on the weight values (except through meta-correction's accuracy check).
    """
    pool_seeds, pool_members = pool.steps.shape
    members = layout_grid(spec).shape.max_members
    if members > pool_members:
        raise ValueError(f"grid needs {members} judges per seed, pool has {pool_members}")
    index = jnp.asarray([seed % pool_seeds for seed in spec.run.seeds])
    # A grid's judge sources are (seed, member), seed-major (harness.grid.origins).
    return jax.tree.map(lambda leaf: leaf[index][:, :members].reshape(-1, *leaf.shape[2:]), pool)


def started(
    spec: GridSpec, pool: PretrainResult, max_shards: int | None = None, pieces: int | None = None
) -> tuple[GridTrainer, Any]:
    """A compiled program and its initial state (compiled once per grid shape and process).

    max_shards, pieces: as GridTrainer's (None: one shard per device where that pays, pieces as planned).
    """
    program = GridTrainer(spec, max_shards=max_shards, pieces=pieces)
    state, _ = program.start(pretrained_for(spec, pool))
    return program, state


def sharding(program: GridTrainer) -> str:
    """How a program splits its runs, for figure notes."""
    plan = program.plan
    if plan.n_shards == 1:
        return "one shard"
    return (
        f"{plan.n_shards} shards of {plan.shape.n_runs} runs ({plural(plan.fillers, 'filler')}): "
        f"{plural(plan.devices, 'device')} side by side, {plural(plan.pieces, 'shard')} in turn on each"
    )


def clear_in_memory_caches() -> None:
    """Forget every compiled program of this process (the persistent cache is untouched)."""
    clear_program_caches()


_CACHE_FLAGS = (
    "jax_enable_compilation_cache",
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


@contextlib.contextmanager
def persistent_cache(path: Path | None) -> Iterator[None]:
    """Inside: JAX's persistent cache at `path` (None: disabled). Restores the previous settings after."""
    saved = {flag: getattr(jax.config, flag) for flag in _CACHE_FLAGS}
    try:
        if path is None:
            jax.config.update("jax_enable_compilation_cache", False)
            compilation_cache.reset_cache()
        else:
            enable_compilation_cache(path)
        yield
    finally:
        for flag, value in saved.items():
            jax.config.update(flag, value)
        compilation_cache.reset_cache()


# --- timing ----------------------------------------------------------------------------------------------------------


class Stepper:
    """Drives one started program: each call runs one outer iteration and returns its wall seconds."""

    def __init__(self, program: GridTrainer, state: Any) -> None:
        self.program, self.state, self.iteration = program, state, 0

    @property
    def run_steps(self) -> int:
        """Run-steps per call: runs × inner steps per iteration."""
        return self.program.shape.n_runs * self.program.spec.run.steps_per_iteration

    def __call__(self) -> float:
        start = time.perf_counter()
        self.state, _ = self.program.step(self.state, self.iteration)  # blocks on the iteration's outputs
        self.iteration += 1
        return time.perf_counter() - start


def measure(
    benchmark: Any, target: Callable[[], Any], sizes: Sizes, rounds: int | None = None, warmup: int | None = None
) -> list[Any]:
    """Run `target` under benchmark.pedantic; returns what it returned in each timed round.

    Enabled: warm-up rounds first (dropped from the result), then the timed rounds.
    Disabled: pytest-benchmark calls it once, and that one result is returned.
    """
    rounds = sizes.rounds if rounds is None else rounds
    warmup = sizes.warmup_rounds if warmup is None else warmup
    results: list[Any] = []
    benchmark.pedantic(lambda: results.append(target()), rounds=rounds, warmup_rounds=warmup, iterations=1)
    return results if benchmark.disabled else results[warmup:]


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def us_per_run_step(seconds: float, run_steps: int) -> float:
    return 1e6 * seconds / run_steps
