"""JAX's persistent compilation cache: compiled programs outlive the process, so a rerun skips XLA.

`enable_compilation_cache()` points JAX at a cache directory and caches every program,
however quick its compile or small its executable (our grid programs are few and large).
"""

from __future__ import annotations

import os
from pathlib import Path

import jax
from jax.experimental.compilation_cache import compilation_cache

CACHE_DIR_ENV = "COEVOLAB_CACHE_DIR"
DEFAULT_CACHE_DIR = Path("~/.cache/coevolab/jax")


def default_cache_dir() -> Path:
    """$COEVOLAB_CACHE_DIR if set, else ~/.cache/coevolab/jax."""
    override = os.environ.get(CACHE_DIR_ENV)
    return Path(override).expanduser() if override else DEFAULT_CACHE_DIR.expanduser()


def enable_compilation_cache(path: Path | None = None) -> Path:
    """Persist every compiled program under `path` (default: `default_cache_dir()`); returns the directory.

    JAX binds its cache to a directory on first use, so the cache is reset here: calling
    this again with another path re-points it, even after programs were compiled.
    """
    directory = (Path(path) if path is not None else default_cache_dir()).expanduser().resolve()
    directory.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # -1: no size threshold
    compilation_cache.reset_cache()
    return directory
