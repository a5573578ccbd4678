"""What the run-directory tests share (tests/test_run_directories.py, tests/test_damaged_run_directories.py): their
grid, `coevolab` in this process, and a directory's files.

Every grid here is tests/test_cli.py's shape (one condition, one seed per program, a world of two positions, 10 steps),
so the session's compile cache serves all of them, and one process compiles it once for both files (they are one unit
of tests/conftest.py's SHARED_GRID_FILES). It is also the shape of the built-in grid conditions/tiny.toml, whose run by
the installed wheel (tests/test_wheel.py) loads the programs compiled here."""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

from harness import cli
from tests.compile_cache_settings import compile_cache_settings_restored

GRID = """
[run]
seeds = {seeds}
iterations = {iterations}
steps_per_iteration = 10
batch_size = 16
block_seeds = 1

[world]
vocab_size = 4
seq_len = 2

[conditions.baseline]
{knob}"""


def grid_file(directory: Path, name: str, seeds: int = 1, iterations: int = 3, knob: str = "") -> Path:
    path = directory / f"{name}.toml"
    path.write_text(GRID.format(seeds=seeds, iterations=iterations, knob=knob))
    path.chmod(0o644)
    return path


def in_process(*argv: object) -> tuple[int, str, str]:
    """`coevolab ARGV` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with compile_cache_settings_restored(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([*map(str, argv)])
    return code, out.getvalue(), err.getvalue()


def files(run_dir: Path) -> dict[str, bytes]:
    """Every file under `run_dir` (paths relative to it) and its bytes."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def copy(source: Path, target: Path) -> Path:
    return Path(shutil.copytree(source, target))
