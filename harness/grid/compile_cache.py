"""Compiled programs that outlive the process, so a rerun of a grid skips tracing and XLA.

`enable_compilation_cache()` points JAX's persistent cache at a directory and caches
every program, however quick its compile or small its executable (our grid programs are
few and large). JAX still traces and lowers a program before it can look it up there,
which for a grid's programs takes seconds; `exported()` keeps the traced and lowered
program itself (`jax.export`) beside it, and `compile_exported()` compiles a program through
it, so a rerun of the grid's iteration, diagnostics and pretraining goes straight to loading
their executables.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import filelock
import jax
import jaxlib
import numpy as np
from jax import export
from jax.experimental.compilation_cache import compilation_cache

CACHE_DIR_ENV = "COEVOLAB_CACHE_DIR"
# Reported (`jax.monitoring`) after each program `compile_exported` compiles, with its name (`program`, "jit(<name>)"),
# a digest of what it was compiled for (`key`) and that by part (`parts`, a JSON object of texts): a profile can tell
# a program compiled again for the same shape from one compiled for another, and which parts set them apart
# (tools/test_profile.py).
COMPILED_EVENT = "/coevolab/compile_exported"
DEFAULT_CACHE_DIR = Path("~/.cache/coevolab/jax")
CACHE_MAX_BYTES = 8 * 2**30


def default_cache_dir() -> Path:
    """$COEVOLAB_CACHE_DIR if set, else ~/.cache/coevolab/jax."""
    override = os.environ.get(CACHE_DIR_ENV)
    return Path(override).expanduser() if override else DEFAULT_CACHE_DIR.expanduser()


def enable_compilation_cache(path: Path | None = None) -> Path | None:
    """Persist every compiled program under `path` (default: `default_cache_dir()`); returns the directory.

    JAX binds its cache to a directory on first use, so the cache is reset here: calling
    this again with another path re-points it, even after programs were compiled.

    A location that cannot be used (an unwritable home, a read-only file system, a file in the way) costs only
    speed: one warning line on stderr, the cache off (`disable_compilation_cache`), and None returned.
    """
    directory = (Path(path) if path is not None else default_cache_dir()).expanduser().resolve()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=directory, prefix=".probe-")
        os.close(handle)
        os.unlink(probe)
        remove_orphaned_entries(directory)
    except OSError as error:
        print(
            f"coevolab: warning: the compile cache at {directory} cannot be used ({error.strerror or error}); "
            "running without it (every program compiles afresh)",
            file=sys.stderr,
        )
        disable_compilation_cache()
        return None
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # -1: no size threshold
    # A size cap is what turns on JAX's file lock around every read and write of an entry (least recently used
    # entries go past it): processes that share one cache (two test processes, a job array's tasks or Ray workers
    # on one machine) never read an entry another is half-way through writing.
    jax.config.update("jax_compilation_cache_max_size", CACHE_MAX_BYTES)
    compilation_cache.reset_cache()
    return directory


def disable_compilation_cache() -> None:
    """Keep no compiled program on disk and read none, whatever JAX's own settings say: JAX turns its cache on by
    itself where $JAX_COMPILATION_CACHE_DIR is set, which a command told not to cache must not follow."""
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()


# JAX's cache keeps an entry as KEY-cache beside KEY-atime (its last use), written in that order under LOCK_FILE.
CACHE_SUFFIX, ATIME_SUFFIX, LOCK_FILE = "-cache", "-atime", ".lockfile"


def remove_orphaned_entries(directory: Path) -> list[str]:
    """Delete every entry of JAX's cache in `directory` that has no access time, under the cache's lock; returns
    their keys.

    A process killed while writing an entry (a SIGKILLed run, a lost job-array task) leaves its executable, perhaps
    half-written, without the access time written after it. JAX's eviction reads every entry's access time before
    each write, so one such orphan makes every later write in that cache fail (a warning, and the program is
    compiled afresh by every later process).
    """
    with filelock.FileLock(directory / LOCK_FILE):
        orphans = [
            path
            for path in directory.glob(f"*{CACHE_SUFFIX}")
            if not path.with_name(path.name.removesuffix(CACHE_SUFFIX) + ATIME_SUFFIX).exists()
        ]
        for path in orphans:
            path.unlink(missing_ok=True)
    return [path.name.removesuffix(CACHE_SUFFIX) for path in orphans]


EXPORTED_SUBDIR = "exported"


PACKAGE = Path(__file__).resolve().parents[1]


def source_digest(package: Path) -> str:
    """Hash of every module under `package`, with their paths relative to it."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@functools.cache
def harness_source_digest() -> str:
    """Hash of every module of the harness package, in every layer's folder: an exported program is only reused by
    the code that traced it (an edit of a mechanism in harness/engine must miss the cache as surely as one here)."""
    return source_digest(PACKAGE)


def exported_dir() -> Path | None:
    """Where traced programs are kept (`exported/` in JAX's cache directory), or None while the cache is off."""
    directory = jax.config.jax_compilation_cache_dir
    if not jax.config.jax_enable_compilation_cache or not directory:
        return None
    return Path(directory) / EXPORTED_SUBDIR


def exported(name: str, function: Callable, args: Sequence[jax.Array], static_key: str) -> export.Exported:
    """`function` (jitted, flat arrays in and out) traced and lowered for `args`, from the cache when it is there.

    The cache key covers `static_key` (whatever the caller's trace depends on besides the
    arguments), the arguments' shapes, dtypes and shardings, the JAX version, the
    devices and this package's source, so a changed program is never served stale.
    """
    directory = exported_dir()
    if directory is None:
        return export.export(function)(*args)
    key = hashlib.sha256(
        "\n".join(
            [
                static_key,
                *(f"{arg.shape} {arg.dtype} {getattr(arg, 'sharding', None)}" for arg in args),
                f"jax {jax.__version__} jaxlib {jaxlib.__version__}",
                " ".join(f"{d.platform}:{d.device_kind}" for d in jax.local_devices()),
                harness_source_digest(),
            ]
        ).encode()
    ).hexdigest()
    path = directory / f"{name}-{key[:32]}.jaxexport"
    if path.is_file():
        try:
            return export.deserialize(bytearray(path.read_bytes()))
        except Exception:  # a damaged entry (cut, overwritten), whatever it raises: traced again and replaced
            with contextlib.suppress(OSError):
                path.unlink()
    program = export.export(function)(*args)
    partial = path.with_suffix(".partial")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(program.serialize())
        partial.replace(path)  # atomic: a concurrent or interrupted run never reads half a file
    except OSError:  # a cache that became unusable (full, read-only): the program is kept in memory alone
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
    return program


@dataclass(frozen=True)
class Executable:
    """A compiled program, called like the function it was compiled from: pytrees in, pytrees out.

    The compiled program itself takes flat lists of arrays, so that its traced form can be exported to disk and
    reloaded (see `exported`); it returns `out_tree`'s leaves, or, where `out_tree` is None, its
    output as it is (a pytree of plain containers, which an exported program carries itself).
    """

    compiled: jax.stages.Compiled
    in_tree: jax.tree_util.PyTreeDef
    out_tree: jax.tree_util.PyTreeDef | None

    def __call__(self, *args: object) -> object:
        leaves, in_tree = jax.tree.flatten(args)
        if in_tree != self.in_tree:
            raise ValueError(f"arguments do not match the compiled program: {in_tree} vs {self.in_tree}")
        # A compiled program takes its arguments laid out as they were when it was compiled; a leaf laid out otherwise
        # (an output that XLA chose to keep replicated, host data) is moved there, as a jitted call would.
        layouts = self.compiled.input_shardings[0]
        leaves = [
            leaf if getattr(leaf, "sharding", None) == layout else jax.device_put(leaf, layout)
            for leaf, layout in zip(leaves, layouts, strict=True)
        ]
        outputs = self.compiled(*leaves)
        return outputs if self.out_tree is None else jax.tree.unflatten(self.out_tree, outputs)

    def as_text(self) -> str:
        return self.compiled.as_text()

    def cost_analysis(self) -> object:
        return self.compiled.cost_analysis()


def compile_exported(
    name: str,
    program: Callable,
    args: tuple,
    static_key: str,
    out_tree: jax.tree_util.PyTreeDef | None = None,
    donate: tuple[int, ...] = (),
    parts: Mapping[str, str] | None = None,
) -> Executable:
    """Compile `program` (jitted) for `args`, its traced form from disk when the cache holds it (tracing and
    lowering a grid's program is seconds that a rerun of the same shape would otherwise pay again).

    static_key: whatever the trace depends on besides the arguments' shapes and dtypes (`exported`).
    out_tree: the output's structure where it holds nodes of the package's own (a state), flattened to its leaves
    (known without tracing, so a cache hit traces nothing); None where it is made of plain containers (a dict).
    donate: the positions in `args` whose buffers the program may reuse for its outputs.
    parts: what `static_key` holds, by part, as text (e.g. `GridShape.parts()`), sent with `COMPILED_EVENT` so that a
    profile can tell which parts set two compiled shapes apart; `static_key` alone decides the program.
    The compile log names the program `jit(<name>)`. Compiled once per process for each name, static key and the
    arguments' structure, shapes, dtypes and shardings (`forget_compiled` empties that store)."""
    leaves, in_tree = jax.tree.flatten(args)
    signature = tuple((leaf.shape, leaf.dtype, getattr(leaf, "sharding", None)) for leaf in leaves)
    key = (name, static_key, in_tree, signature, out_tree, donate)
    if key in _COMPILED:
        return _COMPILED[key]

    def flat(*leaves: jax.Array) -> object:
        outputs = program(*jax.tree.unflatten(in_tree, leaves))
        if out_tree is None:
            return outputs
        assert jax.tree.structure(outputs) == out_tree, f"the output of {name} changed structure"
        return jax.tree.leaves(outputs)

    traced = exported(name, jax.jit(flat), leaves, f"{static_key} {in_tree}")
    bounds = np.cumsum([0, *(len(jax.tree.leaves(arg)) for arg in args)])
    donated = tuple(leaf for position in donate for leaf in range(bounds[position], bounds[position + 1]))

    def call(*leaves: jax.Array) -> object:
        return traced.call(*leaves)

    call.__name__ = call.__qualname__ = name
    start = time.perf_counter()
    compiled = jax.jit(call, donate_argnums=donated).lower(*leaves).compile()
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
    jax.monitoring.record_event_duration_secs(
        COMPILED_EVENT,
        time.perf_counter() - start,
        program=f"jit({name})",
        key=digest,
        parts=json.dumps(dict(parts or {}), sort_keys=True),
    )
    _COMPILED[key] = Executable(compiled, in_tree, out_tree)
    return _COMPILED[key]


# Executables of this process by what `compile_exported` compiled them for.
_COMPILED: dict[tuple, Executable] = {}


def forget_compiled() -> None:
    """Drop every executable `compile_exported` kept (e.g. to measure a cold compile)."""
    _COMPILED.clear()
