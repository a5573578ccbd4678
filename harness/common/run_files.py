"""Files of a run directory: atomic writes, fresh directory names, and the manifest."""

from __future__ import annotations

import datetime as dt
import gzip
import importlib.metadata
import json
import os
import platform
import re
import secrets
import shutil
import subprocess
import zlib
from pathlib import Path
from typing import Any

import jax

from harness.common.version import __version__

PACKAGES = ("coevolab", "jax", "jaxlib", "flax", "optax", "chex", "numpy", "scipy", "pandas", "seaborn", "pydantic")

# The metrics table: CSV text, gzip-compressed (pandas, R and zcat read it as it is), a quarter of its plain size.
METRICS_FILE = "metrics.csv.gz"
LEGACY_METRICS_FILE = "metrics.csv"  # the plain CSV of coevolab 0.3 and earlier, still read
GRID_FILE = "grid.json"
MANIFEST_FILE = "manifest.json"
CHECKPOINT_FILE = "checkpoint.msgpack"
FIGURES_DIR = "figures"  # the report's PNGs
CLAIMS_FILE = "claims.csv"  # the verdicts on a grid's claims, written by the report
BLOCK_FILE = "block.json"  # a seed block's record of its attempts (harness.experiment.blocks)
BLOCKS_DIR = "blocks"  # a run in seed blocks: block k's own run directory is blocks/<k> (harness.experiment.blocks)

# atomic_write_bytes writes `.<name>.<8 hex digits>.tmp` beside `<name>`.
_TEMPORARY_PREFIX, _TEMPORARY_SUFFIX = ".", ".tmp"
_TEMPORARY_NAME = re.compile(r"\..+\.[0-9a-f]{8}\.tmp")


class ArtifactWriteError(OSError):
    """An artifact could not be written (full disk, file size limit, ...); `filename` is the artifact's path, and
    the file it replaces, if any, is left as it was."""


def _file_mode() -> int:
    """The mode a plain `open(path, "w")` would give a new file: 0o666 less the process umask.

    mkstemp creates 0600 files, which would make shared artifacts private; Linux reports the umask in
    /proc/self/status, elsewhere it is read by setting and restoring it.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` so readers see the old file or the new one, never a partial one.

    A temporary file in the same directory is written, flushed to disk (fsync), given the user's normal file
    mode and renamed over `path`. Every artifact of a run directory is written this way. A write that raises
    (KeyboardInterrupt included, wherever it lands) removes its temporary file; only a process killed mid-write
    leaves one (see `stale_temporaries`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        # Named before it exists (not by tempfile.mkstemp), so that an exception at any point after it is created
        # knows what to remove.
        temporary = path.parent / f"{_TEMPORARY_PREFIX}{path.name}.{secrets.token_hex(4)}{_TEMPORARY_SUFFIX}"
        try:
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        break
    else:
        raise FileExistsError(f"no free temporary name beside {path}")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, _file_mode())
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        # A full disk (ENOSPC) or a file size limit fails on the temporary file: name the artifact that was lost.
        raise ArtifactWriteError(error.errno, error.strerror, str(path)) from error
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def metrics_bytes(text: str) -> bytes:
    """The bytes of a metrics table whose CSV text is `text`: gzip at level 9 with no time stamp or file name in its
    header, so the same text always gives the same bytes (a rerun's manifest lists the same digest)."""
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def write_metrics_text(run_dir: Path, text: str) -> None:
    """`text` as the metrics table of `run_dir` (`METRICS_FILE`), written atomically; a plain metrics.csv of an
    earlier coevolab is removed, so that the directory holds one table."""
    atomic_write_bytes(Path(run_dir) / METRICS_FILE, metrics_bytes(text))
    (Path(run_dir) / LEGACY_METRICS_FILE).unlink(missing_ok=True)


def metrics_file(run_dir: Path) -> Path:
    """The metrics table a run directory holds: metrics.csv.gz, or the plain metrics.csv of a directory an earlier
    coevolab wrote (`pd.read_csv` and `read_metrics_text` read either); metrics.csv.gz where it holds neither."""
    compressed, plain = Path(run_dir) / METRICS_FILE, Path(run_dir) / LEGACY_METRICS_FILE
    return plain if plain.is_file() and not compressed.is_file() else compressed


def read_metrics_text(path: Path) -> str:
    """The CSV text of the metrics table at `path` (decompressed where it is gzip).

    Raises:
        FileNotFoundError: there is none.
        OSError: it cannot be read, or its compressed stream is damaged or cut short (the message says which).
        UnicodeDecodeError: its text is not UTF-8.
    """
    data = Path(path).read_bytes()
    if Path(path).name.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except EOFError:
            raise OSError(f"its compressed stream ends early ({len(data)} bytes: cut short?)") from None
        except (gzip.BadGzipFile, zlib.error) as error:
            raise OSError(f"not a readable gzip stream ({error})") from None
    return data.decode("utf-8")


def is_temporary(name: str) -> bool:
    """Whether a file name is that of an atomic write's temporary file."""
    return _TEMPORARY_NAME.fullmatch(name) is not None


def stale_temporaries(run_dir: Path) -> list[Path]:
    """The temporary files of atomic writes under `run_dir` (its subfolders included), sorted.

    A write that finished renamed its temporary file; one that raised removed it. What is left was written by a
    process that died mid-write (SIGKILL, power loss): never a complete artifact, so never read.
    """
    return sorted(
        path
        for path in Path(run_dir).rglob(f"{_TEMPORARY_PREFIX}*{_TEMPORARY_SUFFIX}")
        if path.is_file() and is_temporary(path.name)
    )


def remove_stale_temporaries(run_dir: Path) -> list[Path]:
    """Delete what `stale_temporaries` finds; returns the paths removed.

    Only for a run directory no live process is writing (the run resuming it is the only writer), since a live
    writer's temporary file looks the same.
    """
    stale = stale_temporaries(run_dir)
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def remove_figures(run_dir: Path) -> None:
    """Remove the figures of a report before another is written: a report without figures (--no-figures) links
    none, and one with them draws them all, so none of an earlier report (fewer seeds, another grid) is left."""
    shutil.rmtree(Path(run_dir) / FIGURES_DIR, ignore_errors=True)


def fresh_run_dir(root: Path, grid_name: str) -> Path:
    """A new directory `root/<grid>-<UTC timestamp>` (suffixed if that name is taken)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    root.mkdir(parents=True, exist_ok=True)
    for attempt in range(1000):
        candidate = root / (f"{grid_name}-{stamp}" + (f"-{attempt}" if attempt else ""))
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a fresh run directory under {root}")


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit() -> str | None:
    """The commit of the source tree the harness was loaded from, if it is a git checkout."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() or None if result.returncode == 0 else None


# The vector extensions XLA:CPU compiles for: its float results' last bits follow them, so two machines of one
# model name can write different bits (an AMD EPYC of family 25, model 1, without AVX-512, does not reproduce the
# bits of the 2026-11-22 published-grid reference, made on an "AMD EPYC" at the same commit).
_VECTOR_FLAGS = re.compile(r"^(sse4_[12]|avx\w*|fma|f16c|amx\w*)$")


def machine() -> dict[str, Any]:
    """The machine a run was made on: CPU name and model, cores, platform, Python, and the CPU's vector extensions
    (Linux; empty elsewhere)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if not key.strip():
                break  # the first processor's block is enough: the others are its copies
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    cpu = fields.get("model name") or platform.processor() or platform.machine()
    model = "/".join(fields[key] for key in ("cpu family", "model", "stepping") if key in fields)
    extensions = sorted(flag for flag in fields.get("flags", "").split() if _VECTOR_FLAGS.match(flag))
    return {
        "cpu": cpu,
        "cpu_family_model_stepping": model or None,
        "vector_extensions": extensions,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def manifest(grid: dict[str, Any], times: dict[str, float], started: dt.datetime, **extra: Any) -> dict[str, Any]:
    """Everything needed to know how a run was made."""
    return {
        "grid": grid,
        "coevolab_version": __version__,
        "packages": package_versions(),
        "git_commit": git_commit(),
        "jax_devices": [str(device) for device in jax.devices()],
        "machine": machine(),
        "wall_seconds": times,
        # Where compiled programs were cached (None: off); a cache hit shows as a short compile.
        "compile_cache": jax.config.jax_compilation_cache_dir if jax.config.jax_enable_compilation_cache else None,
        "started": started.isoformat(timespec="seconds"),
        "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **extra,
    }


def write_json(path: Path, payload: Any) -> None:
    atomic_write_text(path, json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")
