"""JAX's compile-cache settings kept across code that changes them for the process (an in-process `coevolab run`
turns the cache on, as the command does for itself), so later tests in the same worker do not inherit them; and how
many memory mappings a test process holds against Linux's limit, which its compiled programs count towards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache

# The test processes keep only their long compiles in the session's shared cache (the grid programs, seconds each):
# thousands of small ones would cost more to write than the few that another process needs again would save.
LONG_COMPILE_SECONDS = 1.0

SETTINGS = (
    "jax_enable_compilation_cache",
    "jax_compilation_cache_dir",
    "jax_compilation_cache_max_size",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


@contextlib.contextmanager
def compile_cache_settings_restored() -> Iterator[None]:
    """Run the block, then put every compile-cache setting back as it was and let JAX bind its cache afresh."""
    saved = {name: getattr(jax.config, name) for name in SETTINGS}
    try:
        yield
    finally:
        for name, value in saved.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()


def map_count_limit() -> int:
    """Linux's limit on one process's memory mappings (vm.max_map_count; its default where it cannot be read): each
    program XLA:CPU compiled holds mappings of its own for as long as it is kept."""
    try:
        return int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return 65_530


def memory_mappings() -> int:
    """How many memory mappings this process holds (the lines of /proc/self/maps; 0 where there is none)."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return 0
