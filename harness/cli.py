"""The `coevolab` command: run a grid (whole, or one seed block of it: --block K), merge a run's blocks, re-render a
report, list a file's conditions.

Exit codes: 0 success; 1 failure (a file that could not be written, e.g. on a full disk, is named; the last
checkpoint stays as it was); 2 bad input (condition file, arguments, output directory, a block out of range or of
another grid, a merge with blocks missing: nothing is written); 3 the grid finished but some runs diverged; 130
interrupted by Ctrl-C, 143 stopped by SIGTERM (a scheduler preempting the job): both stop the same way and are
resumable.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from harness.common.wording import plural
from harness.experiment.ray_backend import add_ray_arguments
from harness.grid.compile_cache import CACHE_DIR_ENV, DEFAULT_CACHE_DIR
from harness.inference.sequential import SPENDING_FUNCTIONS

if TYPE_CHECKING:
    import pandas as pd

    from harness.grid.layout import GridSpec

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 3, 130, 143
# The published grid, found beside the package (this repository), so `coevolab list` works from any directory.
REPOSITORY = Path(__file__).resolve().parents[1]
DEFAULT_CONDITIONS = REPOSITORY / "conditions" / "paper.toml"
DEFAULT_RUNS_ROOT = Path("artifacts/runs")
LIST_WIDTH = 100
# A seed list longer than this is a typo (0-99999), not a grid: refuse it rather than build it.
MAX_SEEDS = 10_000

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
    if count < 1:
        raise argparse.ArgumentTypeError(f"a seed count must be at least 1, got {count}")
    return count


def seed_list(text: str) -> tuple[int, ...]:
    """--seed-list SPEC: comma-separated seeds and inclusive ranges A-B, distinct and non-negative, in order given."""
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


def _version() -> str:
    try:
        return importlib.metadata.version("coevolab")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def existing_directory(path: Path, what: str) -> Path:
    """`path` if it is a directory; otherwise a UsageError that says what is wrong with it."""
    if not path.exists():
        raise UsageError(f"{what} {path}: no such directory")
    if not path.is_dir():
        raise UsageError(f"{what} {path}: not a directory")
    return path


def _prepare_run_dir(args: argparse.Namespace, grid_name: str) -> Path:
    from harness.common.run_files import METRICS_FILE, fresh_run_dir
    from harness.experiment.checkpoint import has_checkpoint

    if args.resume:
        run_dir = existing_directory(Path(args.resume), "--resume")
        if not (run_dir / "grid.json").is_file():
            raise UsageError(f"--resume {run_dir}: not a run directory (no grid.json); nothing to resume")
        if (run_dir / METRICS_FILE).is_file() and not has_checkpoint(run_dir) and not _blocks_pending(run_dir):
            raise UsageError(f"--resume {run_dir}: run already finished (grow it with --resume {run_dir} --seeds N)")
        return run_dir
    try:
        if args.out is None:
            return fresh_run_dir(DEFAULT_RUNS_ROOT, grid_name)
        run_dir = Path(args.out)
        if run_dir.exists() and not run_dir.is_dir():
            raise UsageError(f"--out {run_dir}: exists and is not a directory")
        if run_dir.exists() and any(run_dir.iterdir()) and not args.force:
            raise UsageError(
                f"--out {run_dir} already holds files; use --force to overwrite, or --resume {run_dir} to continue it"
            )
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        where = args.out if args.out is not None else DEFAULT_RUNS_ROOT
        raise UsageError(f"output directory {where}: cannot create or read it: {error.strerror or error}") from None
    return run_dir


def _blocks_pending(run_dir: Path) -> bool:
    """Whether a run directory in seed blocks has blocks left to run (a grown or interrupted run)."""
    from harness.experiment.blocks import pending_blocks, uses_blocks
    from harness.experiment.runner import load_spec

    return uses_blocks(run_dir) and bool(pending_blocks(load_spec(run_dir), run_dir))


def _block_run_dir(args: argparse.Namespace, spec: GridSpec) -> Path:
    """--out DIR of `--block K` (see harness.experiment.blocks.block_run_dir)."""
    from harness.experiment.blocks import block_run_dir

    if args.out is None:
        raise UsageError("--block K needs --out DIR: the run directory that every block of the grid writes into")
    if args.force:
        raise UsageError("--block adds one block to --out DIR and overwrites no other; --force does not apply")
    return block_run_dir(spec, args.block, Path(args.out))


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt, so that a preempted run stops the same way."""


def _raise_terminated(signum: int, frame: object) -> NoReturn:
    del signum, frame
    raise Terminated


def _interrupted_message(run_dir: Path, how: str, block: int | None = None) -> str:
    from harness.experiment.blocks import BLOCKS_DIR, block_dir
    from harness.experiment.checkpoint import has_checkpoint

    if block is not None:
        kept = "finished iterations are checkpointed" if has_checkpoint(block_dir(run_dir, block)) else "nothing kept"
        return f"\n{how}; block {block}: {kept}. Run the same command again to continue it."
    blocks = run_dir / BLOCKS_DIR
    if has_checkpoint(run_dir) or (blocks.is_dir() and any(has_checkpoint(path) for path in blocks.iterdir())):
        return f"\n{how}; finished iterations are checkpointed. Resume with:\n  coevolab run --resume {run_dir}"
    if blocks.is_dir() and any((path / "block.json").is_file() for path in blocks.iterdir()):
        return f"\n{how}; finished blocks are kept. Resume with:\n  coevolab run --resume {run_dir}"
    return f"\n{how} before the first iteration finished; nothing is checkpointed in {run_dir}. Start again."


def _grid_and_warnings(path: Path, seeds: int | tuple[int, ...] | None = None) -> GridSpec:
    from harness.grid.conditions import duplicate_conditions, load_grid

    spec = load_grid(path, seeds=seeds)
    for condition, same_as in duplicate_conditions(spec):
        print(
            f"coevolab: warning: condition '{condition}' resolves to the same knobs as '{same_as}' (duplicate runs)",
            file=sys.stderr,
        )
    return spec


def _conditions_path(given: str | None) -> Path:
    if given is not None:
        return Path(given)
    if not DEFAULT_CONDITIONS.is_file():
        raise UsageError(f"no condition file given, and the default {DEFAULT_CONDITIONS} is absent; pass one")
    return DEFAULT_CONDITIONS


def _resumed(args: argparse.Namespace) -> tuple[Path, GridSpec]:
    """The run directory and grid of `--resume DIR` (grown to --seeds N if given; a flat run becomes blocks)."""
    from harness.experiment.blocks import adopt_flat_run, grown_spec
    from harness.experiment.runner import load_spec

    if args.conditions or args.seed_list is not None or args.block is not None:
        raise UsageError(
            "--resume continues a run as it was, or grows it with --seeds N; do not pass a condition file, "
            "--seed-list or --block"
        )
    if args.seeds is None:
        run_dir = _prepare_run_dir(args, "")
        return run_dir, load_spec(run_dir)
    run_dir = existing_directory(Path(args.resume), "--resume")
    if not (run_dir / "grid.json").is_file():
        raise UsageError(f"--resume {run_dir}: not a run directory (no grid.json); nothing to grow")
    spec = grown_spec(load_spec(run_dir), args.seeds)
    adopt_flat_run(spec, run_dir)
    return run_dir, spec


def command_run(args: argparse.Namespace) -> int:
    import shutil

    import pandas as pd

    from harness.common.run_files import METRICS_FILE
    from harness.experiment.blocks import (
        BLOCKS_DIR,
        block_count,
        block_dir,
        block_spec,
        run_block,
        seeds_per_block,
        uses_blocks,
    )
    from harness.experiment.merge import IN_PROCESS, run_in_blocks
    from harness.experiment.progress import console_progress
    from harness.experiment.ray_backend import RAY, RayBackend
    from harness.experiment.runner import diverged_runs, execute
    from harness.grid.compile_cache import enable_compilation_cache
    from harness.grid.layout import layout_grid
    from harness.grid.memory import check_fits

    if args.until_decided or args.max_seeds is not None:
        return command_until_decided(args)
    seeds = args.seeds if args.seeds is not None else args.seed_list
    ray = RayBackend.from_arguments(args)  # before anything is written: an unreachable cluster leaves nothing
    if args.resume:
        run_dir, spec = _resumed(args)
        in_blocks = uses_blocks(run_dir)
        if ray and not in_blocks:
            raise UsageError(f"--resume {run_dir}: a grid run whole (not in seed blocks) resumes without --ray")
    else:
        spec = _grid_and_warnings(_conditions_path(args.conditions), seeds)
        largest = block_spec(spec, 0)  # every block is the size of the first or smaller
        check_fits(layout_grid(largest).shape, len(largest.run.seeds))  # refuse before writing anything
        if args.block is not None:
            run_dir = _block_run_dir(args, spec)
        else:
            run_dir = _prepare_run_dir(args, spec.name)
            if args.force:
                shutil.rmtree(run_dir / BLOCKS_DIR, ignore_errors=True)  # --force starts the grid over
        # A one-block grid keeps the flat layout of a run before blocks (its files at the top of run_dir).
        in_blocks = args.block is not None or ray is not None or block_count(spec) > 1
    if not args.no_compile_cache:
        enable_compilation_cache()
    progress = console_progress(args.quiet)
    previous_handler = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        if args.block is not None:
            run_block(spec, args.block, run_dir, progress)
            progress.close()
            done = block_dir(run_dir, args.block)
            diverged = diverged_runs(pd.read_csv(done / METRICS_FILE))
        elif in_blocks:
            backend = (ray, RAY) if ray else ()
            diverged, done = run_in_blocks(spec, run_dir, progress, *backend).diverged, run_dir
        else:
            whole = {"execution": {"backend": IN_PROCESS, "blocks": 1, "seeds_per_block": seeds_per_block(spec)}}
            outcome = execute(
                spec, run_dir, progress, resume=bool(args.resume), started=args.started, manifest_extra=whole
            )
            diverged, done = outcome.diverged, run_dir
    except KeyboardInterrupt as stop:
        progress.close()
        terminated = isinstance(stop, Terminated)
        print(_interrupted_message(run_dir, "terminated (SIGTERM)" if terminated else "interrupted", args.block))
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        if ray:
            ray.close()
    return _finished(done, diverged)


def command_until_decided(args: argparse.Namespace) -> int:
    """`coevolab run [FILE] --until-decided --max-seeds N`, or `--resume DIR --until-decided` (see
    harness.experiment.until_decided)."""
    import shutil

    from harness.experiment.blocks import block_spec
    from harness.experiment.progress import console_progress
    from harness.experiment.ray_backend import RAY, RayBackend
    from harness.experiment.until_decided import PLAN_FILE, STAGES_DIR, run_until_decided
    from harness.grid.compile_cache import enable_compilation_cache
    from harness.grid.layout import layout_grid
    from harness.grid.memory import check_fits

    if not args.until_decided:
        raise UsageError("--max-seeds is the budget of --until-decided; pass both")
    if args.block is not None or args.seed_list is not None:
        raise UsageError("--until-decided grows seeds 0..N-1 itself; do not pass --block or --seed-list")
    ray = RayBackend.from_arguments(args)  # before anything is written: an unreachable cluster leaves nothing
    if args.resume:
        if args.conditions or args.seeds is not None:
            raise UsageError("--resume DIR --until-decided continues the grid in DIR; do not pass a file or --seeds")
        spec, run_dir = None, existing_directory(Path(args.resume), "--resume")
        if not (run_dir / "grid.json").is_file():
            raise UsageError(f"--resume {run_dir}: not a run directory (no grid.json); nothing to resume")
    else:
        spec = _grid_and_warnings(_conditions_path(args.conditions), args.seeds)
        largest = block_spec(spec, 0)
        check_fits(layout_grid(largest).shape, len(largest.run.seeds))  # refuse before writing anything
        run_dir = _prepare_run_dir(args, spec.name)
        if args.force:  # --force starts the grid over, not from an earlier plan's stages
            (run_dir / PLAN_FILE).unlink(missing_ok=True)
            shutil.rmtree(run_dir / STAGES_DIR, ignore_errors=True)
    if not args.no_compile_cache:
        enable_compilation_cache()
    progress = console_progress(args.quiet)
    previous_handler = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        backend = {"backend": ray, "how": RAY} if ray else {}
        outcome = run_until_decided(spec, run_dir, args.max_seeds, args.spending, progress, **backend)
    except KeyboardInterrupt as stop:
        progress.close()
        terminated = isinstance(stop, Terminated)
        how = "terminated (SIGTERM)" if terminated else "interrupted"
        print(f"\n{how}; finished blocks are kept. Resume with:\n  coevolab run --resume {run_dir} --until-decided")
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
        if ray:
            ray.close()
    return _finished(run_dir, outcome.diverged)


def _finished(run_dir: Path, diverged: pd.DataFrame) -> int:
    """Print the diverged runs, if any, and where the results are; the exit code."""
    if not diverged.empty:
        print("runs that diverged (non-finite parameters):")
        print(diverged.to_string(index=False))
    print(run_dir)
    return EXIT_DIVERGED if not diverged.empty else EXIT_OK


def command_merge(args: argparse.Namespace) -> int:
    from harness.experiment.blocks import uses_blocks
    from harness.experiment.merge import SEPARATE, merge_blocks
    from harness.experiment.progress import console_progress
    from harness.experiment.runner import load_spec

    run_dir = existing_directory(Path(args.run_dir), "merge")
    if not (run_dir / "grid.json").is_file():
        raise UsageError(f"merge {run_dir}: not a run directory (no grid.json)")
    if not uses_blocks(run_dir):
        raise UsageError(f"merge {run_dir}: holds no seed blocks (a grid run whole writes its results itself)")
    try:
        spec = load_spec(run_dir)
    except ValueError as error:
        raise UsageError(f"merge {run_dir}: its grid.json is not a grid: {error}") from None
    outcome = merge_blocks(spec, run_dir, SEPARATE, console_progress(args.quiet))
    return _finished(run_dir, outcome.diverged)


def command_report(args: argparse.Namespace) -> int:

    import pandas as pd

    from harness.common.run_files import METRICS_FILE
    from harness.experiment.merge import how_run_line_of
    from harness.report import read_run_grid, write_run_report

    run_dir = existing_directory(Path(args.run_dir), "report")
    metrics_path = run_dir / METRICS_FILE
    if not metrics_path.is_file():
        raise UsageError(f"report {run_dir}: no {METRICS_FILE} to report on (the run has not finished)")
    try:
        metrics = pd.read_csv(metrics_path)
        # The run titles and describes its report from its grid; recover it so the re-render is the same bytes.
        grid = read_run_grid(run_dir)
    except (OSError, ValueError, KeyError, pd.errors.ParserError) as error:
        raise UsageError(f"report {run_dir}: cannot read the run's files: {error}") from None
    write_run_report(run_dir, metrics, grid.name if grid else run_dir.name, grid, how_run=how_run_line_of(run_dir))
    print(run_dir / "report.md")
    return EXIT_OK


def _knob_changes(knobs: dict, defaults: dict) -> str:
    changed = [f"{k}={v}" for k, v in knobs.items() if v != defaults.get(k)]
    return ", ".join(changed) if changed else "(all defaults)"


def command_list(args: argparse.Namespace) -> int:
    import pandas as pd

    from harness.engine.knobs import Knobs

    spec = _grid_and_warnings(_conditions_path(args.conditions))
    if args.all:
        # Resolved: an unset pretraining target is shown as the grid's own.
        rows = [
            {
                "condition": c.name,
                **c.knobs.model_dump(),
                "judge_pretrain_target": spec.judge_target(c),
                "boundary": c.boundary,
            }
            for c in spec.conditions
        ]
        with pd.option_context("display.width", 250, "display.max_columns", None, "display.max_colwidth", 60):
            print(pd.DataFrame(rows).to_string(index=False))
    else:
        defaults = Knobs().model_dump()
        names = [c.name + (" (boundary)" if c.boundary else "") for c in spec.conditions]
        width = min(max(len(n) for n in names), 42)  # longer names take a line of their own
        print(f"{'condition':<{width}}  knobs changed from the defaults (--all: every knob)")
        for name, c in zip(names, spec.conditions, strict=True):
            lines = textwrap.wrap(_knob_changes(c.knobs.model_dump(), defaults), LIST_WIDTH - width - 2) or [""]
            head = name if len(name) <= width else name + "\n" + " " * width
            print(f"{head:<{width}}  {lines[0]}")
            for more in lines[1:]:
                print(f"{'':<{width}}  {more}")
    run = spec.run
    print(
        f"\n{plural(len(spec.conditions), 'condition')} × {plural(len(run.seeds), 'seed')} {list(run.seeds)}; "
        f"{plural(run.iterations, 'iteration')} × {plural(run.steps_per_iteration, 'step')}, batch {run.batch_size}"
    )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="coevolab", description="Judge–policy co-evolution grids as one compiled JAX program.")
    parser.add_argument("--version", action="version", version=f"coevolab {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    run = commands.add_parser(
        "run",
        help="run a grid of conditions × seeds and write its report",
        epilog=SEEDS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("conditions", nargs="?", help=f"condition file (default {DEFAULT_CONDITIONS})")
    chosen = run.add_mutually_exclusive_group()
    chosen.add_argument("--seeds", type=seed_count, metavar="N", help="run seeds 0..N-1")
    chosen.add_argument("--seed-list", type=seed_list, metavar="SEEDS", help='run these seeds, e.g. "3", "0-4,7"')
    run.add_argument("--out", help=f"output directory (default: a fresh one under {DEFAULT_RUNS_ROOT}/)")
    run.add_argument("--force", action="store_true", help="write into --out even if it already holds files")
    run.add_argument(
        "--resume",
        metavar="DIR",
        help="continue an interrupted run from its last checkpoints (unfinished blocks only); with --seeds N, grow a "
        "run of seeds 0..M-1 to 0..N-1, running only the new blocks",
    )
    run.add_argument(
        "--block",
        type=int,
        metavar="K",
        help="run only seed block K of the grid into --out DIR (a job array's task); then coevolab merge DIR",
    )
    add_ray_arguments(run)
    run.add_argument("--quiet", action="store_true", help="no progress output")
    run.add_argument(
        "--no-compile-cache",
        action="store_true",
        help=f"do not keep compiled programs on disk (default: ${CACHE_DIR_ENV} or {DEFAULT_CACHE_DIR})",
    )
    # Adding seeds until the grid's claims are decided (harness.experiment.until_decided).
    until = run.add_argument_group("adding seeds until the claims are decided")
    until.add_argument(
        "--until-decided",
        action="store_true",
        help="grow the grid in seed blocks, only the conditions of undecided claims, until every claim is decided "
        "or --max-seeds is spent (looks planned up front, α spent over them); with --resume DIR, continue such a run "
        "or grow a finished one",
    )
    until.add_argument("--max-seeds", type=seed_count, metavar="N", help="the seed budget of --until-decided")
    until.add_argument(
        "--spending",
        choices=SPENDING_FUNCTIONS,
        default="pocock",
        help="how --until-decided spends α over its looks (default: pocock)",
    )
    run.set_defaults(handler=command_run)

    merge = commands.add_parser("merge", help="merge the finished seed blocks of a run directory and write its report")
    merge.add_argument("run_dir", help="a run directory whose blocks ran with coevolab run --block K")
    merge.add_argument("--quiet", action="store_true", help="no progress output")
    merge.set_defaults(handler=command_merge)

    report = commands.add_parser("report", help="re-render a run's report from its metrics.csv (no training)")
    report.add_argument("run_dir", help="a run directory")
    report.set_defaults(handler=command_report)

    listing = commands.add_parser("list", help="show the conditions a file defines and the knobs they change")
    listing.add_argument("conditions", nargs="?", help=f"condition file (default {DEFAULT_CONDITIONS})")
    listing.add_argument("--all", action="store_true", help="every resolved knob of every condition (wide)")
    listing.set_defaults(handler=command_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()  # before the heavy imports, so the run's phases account for them
    args = build_parser().parse_args(argv)
    args.started = started
    from harness.grid.sharding import use_every_cpu_core

    use_every_cpu_core()  # before JAX starts: one shard per core
    from harness.common.run_files import ArtifactWriteError
    from harness.experiment.blocks import BlockError
    from harness.experiment.checkpoint import CheckpointMismatch
    from harness.experiment.ray_backend import BlockLost, RaySetupError
    from harness.grid.conditions import ConditionFileError
    from harness.grid.memory import GridTooLarge
    from harness.grid.trainer import PretrainingFailed

    try:
        return args.handler(args)
    except (ConditionFileError, UsageError, GridTooLarge, CheckpointMismatch, BlockError, RaySetupError) as error:
        print(f"coevolab: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ArtifactWriteError as error:
        # A full disk or a file size limit: the file it would have replaced (the last checkpoint) is intact.
        print(f"coevolab: error: could not write {error.filename}: {error.strerror}", file=sys.stderr)
        return EXIT_FAILURE
    except (PretrainingFailed, BlockLost) as error:
        print(f"coevolab: error: {error}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
