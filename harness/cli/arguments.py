"""What every `coevolab` command shares: exit codes, the seed arguments, the parser's one-line errors, the
condition file and the paths it is given, and the closing lines of a command that trained or merged a grid."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    import pandas as pd

    from harness.grid.overrides import Override
    from harness.grid.spec import GridSpec

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_DIVERGED = 0, 1, 2, 3
# The built-in grids (the repository's conditions/*.toml), found beside the package so that a name works from any
# directory: an installed wheel ships them as package data in harness/conditions/ (pyproject's package-dir), a
# checkout or editable install reads the repository's conditions/ folder itself.
_PACKAGE = Path(__file__).resolve().parents[1]
BUILTIN_GRIDS = next(
    (folder for folder in (_PACKAGE / "conditions", _PACKAGE.parent / "conditions") if folder.is_dir()),
    _PACKAGE / "conditions",
)
DEFAULT_GRID = "paper"
DEFAULT_RUNS_ROOT = Path("artifacts/runs")
LIST_WIDTH = 100

SEEDS_HELP = """Seeds: --seeds N runs seeds 0..N-1; --seed-list picks seeds by number: "3" (only seed 3),
"3,7", "0-4" (0 to 4 inclusive), "0-4,7". Without either, the condition file's [run] seeds are used."""


class UsageError(Exception):
    """Bad arguments or paths on the command line: exit code 2."""


def seed_count(text: str) -> int:
    """--seeds N: a positive count of seeds, 0..N-1."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count of seeds (a whole number ≥ 1), got {text!r}") from None
    from harness.grid.spec import MAX_SEEDS

    if count < 1:
        raise argparse.ArgumentTypeError(f"a seed count must be at least 1, got {count}")
    if count > MAX_SEEDS:
        raise argparse.ArgumentTypeError(f"a seed count must be at most {MAX_SEEDS:,}, got {count:,}")
    return count


def seed_list(text: str) -> tuple[int, ...]:
    """--seed-list SPEC: comma-separated seeds and inclusive ranges A-B, distinct and non-negative, in order given."""
    from harness.grid.spec import MAX_SEEDS

    seeds: list[int] = []
    given: set[int] = set()
    for part in text.split(","):
        piece = part.strip()
        low, dash, high = piece.partition("-")
        try:
            span = range(int(low), int(high) + 1) if dash else range(int(piece), int(piece) + 1)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected seeds like 3, 3,7 or 0-4,7 (non-negative whole numbers), got {text!r}"
            ) from None
        if dash and int(high) < int(low):
            raise argparse.ArgumentTypeError(f"the range {piece!r} is empty (write the smaller seed first)")
        if len(seeds) + len(span) > MAX_SEEDS:
            raise argparse.ArgumentTypeError(f"more than {MAX_SEEDS} seeds in {text!r}")
        repeated = given.intersection(span)
        if repeated:
            raise argparse.ArgumentTypeError(f"seed {min(repeated)} is given twice in {text!r}")
        seeds.extend(span)
        given.update(span)
    return tuple(seeds)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors that say they come from the command line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: command line: {message} (see {self.prog} --help)\n")


def existing_directory(path: Path, what: str) -> Path:
    """`path` if it is a directory; otherwise a UsageError that says what is wrong with it."""
    if not path.exists():
        raise UsageError(f"{what} {path}: no such directory")
    if not path.is_dir():
        raise UsageError(f"{what} {path}: not a directory")
    return path


@contextlib.contextmanager
def writing(run_dir: Path, shared: bool = False) -> Iterator[None]:
    """Inside: this process is a writer of `run_dir` (see `harness.common.locks.holding_run_dir`), taken before
    anything is written there and held to the end.

    Raises:
        DirectoryBusy: another writer holds it (exit code 2).
        UsageError: nothing can be written in it (permissions, a read-only file system, a full disk).
    """
    from harness.common.locks import holding_run_dir

    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(holding_run_dir(run_dir, shared=shared))
        except OSError as error:
            raise UsageError(
                f"{run_dir}: cannot write there ({error.strerror or error}); give a directory this user can write"
            ) from None
        yield


def knob_override(text: str) -> Override:
    """--set KEY=VALUE (harness.grid.overrides): its form checked here, its key and value with the file's."""
    from harness.grid.overrides import OverrideError, parse_override

    try:
        return parse_override(text)
    except OverrideError as error:
        raise argparse.ArgumentTypeError(f"{error.key}: {error}") from None


SET_HELP = """Overrides: --set KEY=VALUE (repeatable) sets a key of the condition file before it is checked, as if
written there: run.iterations=3, world.q_star=rugged, conditions.baseline.KNOB=VALUE (one condition),
conditions.*.KNOB=VALUE (every condition); `coevolab list --all` gives each condition's knobs, docs/reference/knobs.md
every knob. The grid.json of the run records the result; --resume refuses an override that changes it."""


def grid_and_warnings(
    path: Path, seeds: int | tuple[int, ...] | None = None, overrides: Sequence[Override] = ()
) -> GridSpec:
    from harness.grid.conditions import duplicate_conditions, load_grid

    spec = load_grid(path, seeds=seeds, overrides=overrides)
    for condition, same_as in duplicate_conditions(spec):
        print(
            f"coevolab: warning: condition '{condition}' resolves to the same knobs as '{same_as}' (duplicate runs)",
            file=sys.stderr,
        )
    return spec


def builtin_grids() -> list[str]:
    """The names of the built-in grids (their files' stems), sorted."""
    return sorted(path.stem for path in BUILTIN_GRIDS.glob("*.toml"))


def conditions_path(given: str | None) -> Path:
    """The condition file a command reads: `given` if it is a file, else the built-in grid of that name (a bare name
    such as "paper"); without one, the published grid."""
    if given is None:
        name = DEFAULT_GRID
    elif Path(given).is_file() or Path(given).name != given or Path(given).suffix:
        return Path(given)  # a path (a folder or a suffix in it): read, or refused by the condition file's own error
    else:
        name = given
    builtin = BUILTIN_GRIDS / f"{name}.toml"
    if not builtin.is_file():
        raise UsageError(
            f"{name!r} is neither a condition file nor a built-in grid (built-in: {', '.join(builtin_grids())})"
        )
    return builtin


def finished(run_dir: Path, diverged: pd.DataFrame) -> int:
    """Print the diverged runs, if any, and where the results are; the exit code."""
    if not diverged.empty:
        print("runs that diverged (non-finite parameters):")
        print(diverged.to_string(index=False))
    print(run_dir, flush=True)  # the line that says the run is complete reaches a reader as the command returns
    return EXIT_DIVERGED if not diverged.empty else EXIT_OK
