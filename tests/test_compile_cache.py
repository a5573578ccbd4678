"""Traced programs kept on disk: reused by the same code and arguments, never by different ones."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from harness.grid import compile_cache
from harness.grid.compile_cache import compile_exported, enable_compilation_cache, exported, forget_compiled
from harness.grid.executables import clear_program_caches
from tests.compile_cache_settings import compile_cache_settings_restored, memory_mappings


@pytest.fixture
def cache_dir(tmp_path: Path) -> Iterator[Path]:
    with compile_cache_settings_restored():
        yield enable_compilation_cache(tmp_path / "cache")


def test_exported_program_is_traced_once_then_read_from_disk(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    traces = []

    @jax.jit
    def affine(x: jax.Array, y: jax.Array) -> list[jax.Array]:
        traces.append(1)
        return [2.0 * x + y]

    x, y = jnp.arange(3.0), jnp.ones(3)
    first = exported("affine", affine, [x, y], "affine v1")
    files = list((cache_dir / "exported").glob("affine-*.jaxexport"))
    assert len(files) == 1 and len(traces) == 1

    # Same key: read back without tracing (export would fail here), and it computes the same.
    monkeypatch.setattr(compile_cache.export, "export", lambda *a, **k: pytest.fail("traced again"))
    again = exported("affine", affine, [x, y], "affine v1")
    assert len(traces) == 1
    np.testing.assert_array_equal(again.call(x, y)[0], first.call(x, y)[0])
    np.testing.assert_array_equal(again.call(x, y)[0], 2.0 * np.arange(3.0) + 1.0)
    monkeypatch.undo()

    # A different static key, argument shape or package source is a different program.
    exported("affine", affine, [x, y], "affine v2")
    exported("affine", affine, [jnp.arange(4.0), jnp.ones(4)], "affine v1")
    monkeypatch.setattr(compile_cache, "harness_source_digest", lambda: "edited source")
    exported("affine", affine, [x, y], "affine v1")
    assert len(list((cache_dir / "exported").glob("affine-*.jaxexport"))) == 4
    assert not list((cache_dir / "exported").glob("*.partial"))


@pytest.mark.parametrize("damage", ["cut", "garbage", "empty"])
def test_a_damaged_exported_program_is_traced_again_and_replaced(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """An entry cut short, overwritten or emptied (a full disk, another tool) is never fatal: the program is exported
    again, computes what it should, and the entry is written anew (read back, not exported, on the next call)."""
    exports = []
    real_export = compile_cache.export.export
    monkeypatch.setattr(compile_cache.export, "export", lambda *a, **k: exports.append(1) or real_export(*a, **k))
    affine = jax.jit(lambda x, y: [2.0 * x + y])
    x, y = jnp.arange(3.0), jnp.ones(3)
    exported("affine", affine, [x, y], "affine v1")
    (path,) = (cache_dir / "exported").glob("affine-*.jaxexport")
    whole = path.read_bytes()
    path.write_bytes({"cut": whole[: len(whole) // 3], "garbage": b"\x00not a program" * 64, "empty": b""}[damage])
    again = exported("affine", affine, [x, y], "affine v1")
    assert len(exports) == 2
    np.testing.assert_array_equal(again.call(x, y)[0], 2.0 * np.arange(3.0) + 1.0)
    assert path.read_bytes() == whole
    exported("affine", affine, [x, y], "affine v1")
    assert len(exports) == 2


def test_a_compiled_program_takes_and_returns_pytrees_and_is_compiled_once(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`compile_exported`: a state in (a NamedTuple, a node of our own) and out by its structure, a dict out as the
    exported program carries it; one executable per process for equal arguments; a second process's compile (here:
    after `forget_compiled`) reads the trace from disk."""
    traces = []

    class Pair(NamedTuple):
        low: jax.Array
        high: jax.Array

    @jax.jit
    def widen(pair: Pair, step: jax.Array) -> Pair:
        traces.append(1)
        return Pair(pair.low - step, pair.high + step)

    pair, step = Pair(jnp.zeros(3), jnp.ones(3)), jnp.float32(0.5)
    program = compile_exported("widen", widen, (pair, step), "widen v1", out_tree=jax.tree.structure(pair))
    widened = program(pair, step)
    assert isinstance(widened, Pair)
    np.testing.assert_array_equal(widened.low, -0.5 * np.ones(3))
    np.testing.assert_array_equal(widened.high, 1.5 * np.ones(3))
    assert compile_exported("widen", widen, (pair, step), "widen v1", out_tree=jax.tree.structure(pair)) is program
    assert len(traces) == 1
    with pytest.raises(ValueError, match="do not match"):
        program((pair.low, pair.high), step)

    forget_compiled()
    monkeypatch.setattr(compile_cache.export, "export", lambda *a, **k: pytest.fail("traced again"))
    again = compile_exported("widen", widen, (pair, step), "widen v1", out_tree=jax.tree.structure(pair))
    assert again is not program and len(traces) == 1
    np.testing.assert_array_equal(again(pair, step).high, widened.high)
    monkeypatch.undo()

    summary = compile_exported("summary", jax.jit(lambda x: {"sum": x.sum(), "max": x.max()}), (pair.high,), "v1")
    # Host data (numpy) is laid out where the program was compiled for it, as a jitted call would.
    assert summary(np.arange(3.0, dtype=np.float32)) == {"sum": 3.0, "max": 2.0}


def test_entries_are_read_and_written_under_the_caches_file_lock(cache_dir: Path) -> None:
    """Processes sharing one cache (test processes, a job array's tasks, Ray workers on one machine) must never read
    an entry half-written: JAX locks each read and write only when the cache has a size cap."""
    assert jax.config.jax_compilation_cache_max_size == compile_cache.CACHE_MAX_BYTES > 0
    value = jax.jit(lambda x: x * 3.0 - 1.0)(jnp.arange(5.0))  # compiled, so written to the cache
    np.testing.assert_array_equal(value, 3.0 * np.arange(5.0) - 1.0)
    assert (cache_dir / ".lockfile").exists()
    assert list(cache_dir.glob("*-cache"))  # the entry itself


def test_an_entry_left_without_its_access_time_by_a_killed_process_is_removed(tmp_path: Path) -> None:
    """A process killed between writing an entry and its access time leaves an orphan that JAX's eviction cannot
    read, so every later write in that cache fails; enabling the cache removes it and writes work again."""
    directory = tmp_path / "cache"
    directory.mkdir()
    (directory / "jit_killed-0123-cache").write_bytes(b"half an executable")
    kept = directory / "jit_whole-4567-cache"
    kept.write_bytes(b"an executable")
    (directory / "jit_whole-4567-atime").write_bytes((1).to_bytes(8, "little"))
    with compile_cache_settings_restored():
        enable_compilation_cache(directory)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # JAX reports a failed cache write as a warning
            value = jax.jit(lambda x: x * 5.0 + 2.0)(jnp.arange(4.0))
    np.testing.assert_array_equal(value, 5.0 * np.arange(4.0) + 2.0)
    assert not (directory / "jit_killed-0123-cache").exists() and kept.exists()
    written = {path.name.removesuffix("-cache") for path in directory.glob("*-cache")} - {"jit_whole-4567"}
    assert written and all((directory / f"{key}-atime").exists() for key in written)


def test_nothing_is_written_while_the_cache_is_off() -> None:
    # JAX's cache is inactive without a directory. Set here rather than assumed: an in-process `coevolab run` of
    # another test in this worker may have turned it on for the process.
    saved = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", None)
    try:
        assert compile_cache.exported_dir() is None
        program = exported("negate", jax.jit(lambda x: [-x]), [jnp.ones(2)], "negate")
        np.testing.assert_array_equal(program.call(jnp.ones(2))[0], -np.ones(2))
    finally:
        jax.config.update("jax_compilation_cache_dir", saved)


def test_the_source_digest_covers_every_layer_of_the_package(tmp_path: Path) -> None:
    # A copy of the package hashes as the package does; an edit in any layer folder, not only the grid, changes it.
    import shutil

    copy = tmp_path / "harness"
    shutil.copytree(compile_cache.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert compile_cache.source_digest(copy) == compile_cache.harness_source_digest()
    for module in ("engine/learning.py", "grid/training_step.py", "report/tables.py"):
        edited = copy / module
        original = edited.read_text()
        edited.write_text(original + "\n# edited\n")
        assert compile_cache.source_digest(copy) != compile_cache.harness_source_digest(), module
        edited.write_text(original)


def test_a_location_that_cannot_hold_a_cache_is_one_warning_and_no_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cache directory that cannot be made (here a file stands in its way, as an unwritable home or a read-only file
    system would; tests/test_run_directories.py runs the command so as another user) costs speed, not the run."""
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    with compile_cache_settings_restored():
        jax.config.update("jax_enable_compilation_cache", True)
        assert enable_compilation_cache(blocked / "cache") is None
        assert not jax.config.jax_enable_compilation_cache and compile_cache.exported_dir() is None
        value = jax.jit(lambda x: x * 7.0)(jnp.arange(3.0))  # compiles, and keeps nothing
    np.testing.assert_array_equal(value, 7.0 * np.arange(3.0))
    [warning] = capsys.readouterr().err.strip().splitlines()
    assert warning.startswith(f"coevolab: warning: the compile cache at {blocked / 'cache'} cannot be used (")


def test_dropping_the_compiled_programs_releases_their_memory_mappings() -> None:
    """XLA:CPU maps each compiled program's code in sections of its own, held as long as the program is: a process
    that keeps thousands passes Linux's limit on mappings (vm.max_map_count) and its next compile aborts. What
    `clear_program_caches` drops (the programs `compile_exported` kept, every jitted function's) releases them, as
    a test process does once it holds a quarter of the limit (`tests/conftest.py`)."""
    gc.collect()
    before = memory_mappings()
    with compile_cache_settings_restored():
        compile_cache.disable_compilation_cache()
        for width in range(1, 41):
            program = jax.jit(lambda x: [jnp.cumsum(jnp.sin(x) * 3.0) + 1.0])
            compile_exported("sine_sum", program, (jnp.ones(width),), "mappings")  # a program of its own per width
            jax.jit(lambda x: jnp.tanh(x) @ x)(jnp.ones((width, width))).block_until_ready()
    held = memory_mappings() - before
    clear_program_caches()
    gc.collect()
    left = memory_mappings() - before
    assert held >= 80, held  # at least one mapping per program (40 of each kind)
    assert left <= held // 4, (held, left)  # here: 802 held, 75 left (without the clear, all 802)
