"""Shared fixtures: grids that several test files train once per session."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import jax
import pandas as pd
import pytest
from hypothesis import settings
from xdist.scheduler import LoadFileScheduling

import harness.mechanisms  # noqa: F401  (registers the built-in mechanisms, which every grid uses)
from harness.grid.compile_cache import CACHE_DIR_ENV, enable_compilation_cache
from harness.grid.conditions import load_grid
from harness.grid.executables import clear_program_caches
from harness.grid.sharding import use_every_cpu_core
from harness.grid.trainer import GridTrainer
from tests.compile_cache_settings import (
    LONG_COMPILE_SECONDS,
    SETTINGS,
    compile_cache_settings_restored,
    map_count_limit,
    memory_mappings,
)
from tests.original_streams_grid import FILES as ORIGINAL_STREAMS_FILES
from tests.original_streams_grid import TrainedGrid, original_streams_spec

# The test process starts here: one CPU device per core, before any JAX operation, as the command line does.
use_every_cpu_core()

# Property-based tests draw the same examples on every run of the suite (derandomize), so that a test cannot pass on
# one run and fail on the next; HYPOTHESIS_PROFILE=explore draws afresh each time, to look for new failing inputs.
settings.register_profile("suite", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))

ROOT = Path(__file__).resolve().parents[1]

# The units that take longest (cold compiles of grids of their own, `coevolab` subprocesses), longest first, as
# `make test-profile` measured them (a fresh clone, 2026-12-02; a unit is a file, or the files of a shared grid, listed
# together). `make test` deals whole units to two processes in collection order (--dist loadfile
# --no-loadscope-reorder): started first, they run beside the many short files instead of leaving one process alone
# with a long file at the end.
LONGEST_FIRST = (
    "test_original_engine.py",  # with test_paper_claims.py: one unit (tests/original_streams_grid.py), 110 s
    "test_paper_claims.py",
    "test_run_directories.py",  # with the damaged and tampered runs: one unit (tests/run_directories.py), 109 s
    "test_damaged_run_directories.py",
    "test_tampered_runs.py",
    "test_cli.py",  # 89 s
    "test_ray_backend.py",  # 84 s
    "test_grid_program.py",  # with test_sharding.py: one unit (tests/mechanisms_grid.py), 81 s
    "test_sharding.py",
    "test_plugins.py",  # 72 s
    "test_api.py",  # with test_golden_metrics, test_live and test_notebook: one unit (the smoke grid's shape), 65 s
    "test_kl_penalty.py",  # with test_mechanism_uses.py: one unit (one pretraining shape), 55 s
    "test_mechanism_uses.py",
    "test_checkpoint.py",  # with test_blocks.py: one unit (the smoke grid at one seed), 47 s
    "test_blocks.py",
    "test_reward_hook_state.py",  # 44 s
    "test_pair_sources.py",  # 41 s
    "test_study.py",  # 41 s
    "test_knobs.py",  # 36 s
    "test_model_settings.py",  # 35 s
    "test_replay_example.py",  # 33 s
)


# Test files that share a session grid, or a grid shape through the compile cache -> the name of the unit they run in
# (one process, in collection order, so the shape compiles once): test_api trains the shape of conditions/smoke.toml,
# whose programs the golden metrics' grid, test_live's command and the notebook's kernel load; test_checkpoint's
# commands compile that grid at one seed, the shape of test_blocks' blocks; test_sharding trains
# tests/mechanisms_grid.py after test_grid_program; the two run-directory files train test_cli's shape in this process;
# test_kl_penalty and test_mechanism_uses pretrain judges of one shape (two processes once compiled it side by side).
SHARED_GRID_FILES = (
    dict.fromkeys(ORIGINAL_STREAMS_FILES, "original-streams-grid")
    | dict.fromkeys(("test_api.py", "test_golden_metrics.py", "test_live.py", "test_notebook.py"), "smoke-shape")
    | dict.fromkeys(("test_checkpoint.py", "test_blocks.py"), "smoke-one-seed-shape")
    | dict.fromkeys(("test_kl_penalty.py", "test_mechanism_uses.py"), "two-position-judges")
    | dict.fromkeys(("test_grid_program.py", "test_sharding.py"), "mechanisms-grid")
    | dict.fromkeys(
        ("test_run_directories.py", "test_damaged_run_directories.py", "test_tampered_runs.py"), "run-directories"
    )
)


class SharedGridScheduling(LoadFileScheduling):
    """xdist's --dist loadfile (each file to one process, whole), except that the files that share a session grid
    (`SHARED_GRID_FILES`) are one unit: the grid's process trains it once for all of them."""

    def _split_scope(self, nodeid: str) -> str:
        scope = super()._split_scope(nodeid)
        return SHARED_GRID_FILES.get(Path(scope).name, scope)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LoadFileScheduling | None:
    """`make test`'s scheduler (it runs --dist loadfile): `SharedGridScheduling`."""
    return SharedGridScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the files of LONGEST_FIRST first, in that order; every other file keeps its place (a stable sort)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def paper_metrics() -> pd.DataFrame:
    """Metrics of the published grid (18 conditions × 5 seeds × 10 iterations × 200 steps)."""
    return GridTrainer(load_grid(ROOT / "conditions" / "paper.toml")).run()


@pytest.fixture(scope="session")
def smoke_metrics() -> pd.DataFrame:
    return GridTrainer(load_grid(ROOT / "conditions" / "smoke.toml")).run()


@pytest.fixture(scope="session")
def original_streams_grid() -> TrainedGrid:
    """`tests.original_streams_grid`'s grid, trained once for the test files that share it."""
    trainer = GridTrainer(original_streams_spec())
    return TrainedGrid(trainer, trainer.run())


@pytest.fixture(scope="session")
def shared_compile_cache(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """One compile cache for every `coevolab` subprocess of the session (never the user's): a grid shape that
    several tests run compiles once. Under xdist the test processes share it too (their temporary directories have
    one parent, the session's), so a shape compiled by one process is loaded by the other (entries are read and
    written under the cache's file lock: `enable_compilation_cache`). Tests of the cache itself use a private one."""
    if worker_id == "master":
        return tmp_path_factory.mktemp("compile-cache")
    directory = tmp_path_factory.getbasetemp().parent / "compile-cache"
    directory.mkdir(exist_ok=True)
    return directory


def _share_long_compiles(cache: Path) -> dict[str, object]:
    """Point this process's compile cache at `cache`, keeping only long compiles; returns the settings."""
    enable_compilation_cache(cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", LONG_COMPILE_SECONDS)
    return {name: getattr(jax.config, name) for name in SETTINGS}


@pytest.fixture(scope="session", autouse=True)
def test_processes_share_long_compiles(shared_compile_cache: Path) -> Iterator[dict[str, object]]:
    """The test processes use the session's shared compile cache too, for their long compiles: a grid shape that a
    test trains in one process and a `coevolab` subprocess (or the other test process) runs again compiles once.
    Yields the settings, which `long_compiles_stay_shared` puts back after any test that changed them."""
    with compile_cache_settings_restored():
        yield _share_long_compiles(shared_compile_cache)


@pytest.fixture(autouse=True)
def long_compiles_stay_shared(
    test_processes_share_long_compiles: dict[str, object], shared_compile_cache: Path
) -> Iterator[None]:
    """After each test, the session's compile-cache settings, if the test (or a module fixture it set up) changed
    them: an in-process `coevolab run` turns the cache to $COEVOLAB_CACHE_DIR or the user's own (~/.cache), or off
    (--no-compile-cache), for the rest of the process, so that the test process's later compiles would go to the
    user's cache or nowhere, and eager programs that a disk hit serves would compile again."""
    yield
    if any(getattr(jax.config, name) != value for name, value in test_processes_share_long_compiles.items()):
        _share_long_compiles(shared_compile_cache)


# A test process drops its compiled programs once it holds this share of the limit: rarely, since dropping them makes
# later files load or compile again what they would have reused (done after every file, it cost the suite 131 s of
# compile and load here).
RELEASE_SHARE = 0.25


@pytest.fixture(scope="module", autouse=True)
def compiled_programs_released_near_the_mapping_limit() -> Iterator[None]:
    """After a test file, where this process holds a quarter of Linux's limit on memory mappings
    (vm.max_map_count), its compiled programs are dropped (the grid's, every jitted function's), and their code's
    mappings with them. XLA:CPU maps each compiled program's machine code in sections of its own, held as long as the
    program, and a test process compiles thousands: kept for the whole session they reached the limit (65,530 here),
    and the next compile aborted the process ("LLVM ERROR: Unable to allocate section memory", an mmap refused with
    ENOMEM with gigabytes free). A grid that a later file trains again is loaded from the shared compile cache, and a
    session grid's trainer keeps its own programs."""
    yield
    if memory_mappings() >= RELEASE_SHARE * map_count_limit():
        clear_program_caches()
        gc.collect()


@pytest.fixture
def subprocess_compile_cache(shared_compile_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the `coevolab` subprocesses a test starts at the session's shared compile cache."""
    monkeypatch.setenv(CACHE_DIR_ENV, str(shared_compile_cache))
    return shared_compile_cache
