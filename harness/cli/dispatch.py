"""The `coevolab` command's parser and its dispatch to a command's handler, with every refusal and failure turned
into one line and its exit code (see `harness.cli`)."""

from __future__ import annotations

import argparse
import sys

from harness.cli.arguments import (
    DEFAULT_GRID,
    DEFAULT_RUNS_ROOT,
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    SEEDS_HELP,
    SET_HELP,
    Parser,
    UsageError,
    builtin_grids,
    knob_override,
    seed_count,
    seed_list,
)
from harness.cli.commands import command_list, command_merge, command_report, command_verify
from harness.cli.run import command_run
from harness.common.version import __version__
from harness.experiment.ray_backend import add_ray_arguments
from harness.grid.compile_cache import CACHE_DIR_ENV, DEFAULT_CACHE_DIR
from harness.inference.sequential import SPENDING_FUNCTIONS

__all__ = ["build_parser", "dispatch"]


def _add_figures_argument(parser: argparse.ArgumentParser, later: str) -> None:
    parser.add_argument(
        "--no-figures",
        dest="figures",
        action="store_false",
        help=f"write the report's text and tables alone, no figures (most of a small grid's report time){later}",
    )


def _add_set_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        type=knob_override,
        metavar="KEY=VALUE",
        help="set a key of the condition file, checked as the file's are (repeatable; see Overrides below)",
    )


def _conditions_help() -> str:
    return f"a condition file, or a built-in grid's name ({', '.join(builtin_grids())}; default {DEFAULT_GRID})"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="coevolab", description="Judge–policy co-evolution grids as one compiled JAX program.")
    parser.add_argument("--version", action="version", version=f"coevolab {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    run = commands.add_parser(
        "run",
        help="run a grid of conditions × seeds and write its report",
        epilog=f"{SEEDS_HELP}\n\n{SET_HELP}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("conditions", nargs="?", help=_conditions_help())
    chosen = run.add_mutually_exclusive_group()
    chosen.add_argument("--seeds", type=seed_count, metavar="N", help="run seeds 0..N-1")
    chosen.add_argument(
        "--seed-list",
        type=seed_list,
        metavar="SEEDS",
        help='run these seeds, e.g. "3", "0-4,7"; with --until-decided, a range S-E: the first look\'s seeds (the '
        "looks after it take the seeds that follow)",
    )
    _add_set_argument(run)
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
    _add_figures_argument(run, "; coevolab report DIR draws them later")
    run.add_argument(
        "--no-compile-cache",
        action="store_true",
        help=f"do not keep compiled programs on disk (default: ${CACHE_DIR_ENV} or {DEFAULT_CACHE_DIR})",
    )
    run.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write each finished iteration's per-condition means as TensorBoard events in DIR/tensorboard "
        "(needs coevolab[tensorboard]; progress.csv is written either way)",
    )
    # Adding seeds until the grid's claims are decided (harness.experiment.until_decided).
    until = run.add_argument_group("adding seeds until the claims are decided")
    until.add_argument(
        "--until-decided",
        action="store_true",
        help="grow the grid in seed blocks, only the conditions of undecided claims, until every claim is decided "
        "or --max-seeds is spent (looks and their α planned before the first); the grid's seeds (--seeds N or a "
        "range --seed-list S-E, e.g. 1000-1099 for seeds no earlier verdict saw) are the first look's; with --resume "
        "DIR, continue such a run, or grow a finished run whose claims were never judged (no claims.csv)",
    )
    until.add_argument(
        "--max-seeds",
        type=seed_count,
        metavar="N",
        help="the seed budget of --until-decided: the last look's seed count (seeds S..S+N-1 from the first seed S)",
    )
    until.add_argument(
        "--spending",
        choices=SPENDING_FUNCTIONS,
        default="pocock",
        help="how --until-decided spends α over its looks (default: pocock); anytime: a look after every block of "
        "the first look's seeds, mean claims judged by e-values valid at any look",
    )
    run.set_defaults(handler=command_run)

    merge = commands.add_parser("merge", help="merge the finished seed blocks of a run directory and write its report")
    merge.add_argument("run_dir", help="a run directory whose blocks ran with coevolab run --block K")
    merge.add_argument("--quiet", action="store_true", help="no progress output")
    _add_figures_argument(merge, "; coevolab report DIR draws them later")
    merge.set_defaults(handler=command_merge)

    report = commands.add_parser("report", help="re-render a run's report from its metrics.csv.gz (no training)")
    report.add_argument("run_dir", help="a run directory")
    _add_figures_argument(report, "")
    report.set_defaults(handler=command_report)

    verify = commands.add_parser(
        "verify",
        help="check a finished run directory: every file against its manifest (size, SHA-256), every metrics table "
        "read back against its grid (exit 0: intact; 2: the first problem, in one line)",
    )
    verify.add_argument("run_dir", help="a run directory")
    verify.set_defaults(handler=command_verify)

    listing = commands.add_parser("list", help="show the conditions a file defines and the knobs they change")
    listing.add_argument("conditions", nargs="?", help=_conditions_help())
    listing.add_argument("--all", action="store_true", help="every resolved knob of every condition (wide)")
    _add_set_argument(listing)
    listing.set_defaults(handler=command_list)
    return parser


def dispatch(argv: list[str] | None, started: float) -> int:
    """Parse `argv` and run its command (`started`: when the process began, for the run's phases); its exit code."""
    args = build_parser().parse_args(argv)
    args.started = started
    from harness.grid.sharding import use_every_cpu_core

    use_every_cpu_core()  # before JAX starts: one shard per core
    from harness.common.integrity import RunDirectoryError
    from harness.common.locks import DirectoryBusy
    from harness.common.run_files import ArtifactWriteError
    from harness.engine.metrics import MechanismShapeError
    from harness.experiment.blocks import BlockError
    from harness.experiment.checkpoint import CheckpointMismatch
    from harness.experiment.live import TensorBoardMissing
    from harness.experiment.ray_backend import BlockLost, RaySetupError
    from harness.grid.conditions import ConditionFileError
    from harness.grid.memory import GridTooLarge
    from harness.grid.registry import MechanismError, plugin_error
    from harness.grid.trainer import PretrainingFailed

    try:
        return args.handler(args)
    except (
        ConditionFileError,
        UsageError,
        GridTooLarge,
        CheckpointMismatch,
        BlockError,
        RaySetupError,
        MechanismError,
        MechanismShapeError,
        RunDirectoryError,
        DirectoryBusy,
        TensorBoardMissing,
    ) as error:
        print(f"coevolab: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ArtifactWriteError as error:
        # A full disk or a file size limit: the file it would have replaced (the last checkpoint) is intact.
        print(f"coevolab: error: could not write {error.filename}: {error.strerror}", file=sys.stderr)
        return EXIT_FAILURE
    except (PretrainingFailed, BlockLost) as error:
        print(f"coevolab: error: {error}", file=sys.stderr)
        return EXIT_FAILURE
    except OSError as error:  # a file or directory that went away or became unwritable under a command
        where = f"{error.filename}: " if error.filename else ""
        print(f"coevolab: error: {where}{error.strerror or error}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as error:
        # A mistake in a lab's own mechanism (a wrong shape in a hook, a typo): one line naming its file, line and
        # hook. Anything else is a fault of this package, and keeps its traceback.
        line = plugin_error(error)
        if line is None:
            raise
        print(f"coevolab: error: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
