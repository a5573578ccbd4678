"""The `coevolab` command: run a grid, re-render a report, list a file's conditions.

Exit codes: 0 success; 1 failure; 2 bad input (condition file, arguments, output
directory); 3 the grid finished but some runs diverged; 130 interrupted (resumable).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness.checkpoint import CheckpointMismatch
from harness.compile_cache import CACHE_DIR_ENV, DEFAULT_CACHE_DIR, enable_compilation_cache
from harness.conditions import ConditionFileError, load_grid
from harness.grid import layout_grid
from harness.memory import GridTooLarge, check_fits
from harness.program import PretrainingFailed
from harness.sharding import use_every_cpu_core

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_DIVERGED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
DEFAULT_CONDITIONS = Path("conditions/paper.toml")
DEFAULT_RUNS_ROOT = Path("artifacts/runs")


class UsageError(Exception):
    """Bad arguments or output directory: exit code 2."""


class PlainProgress:
    """One line per phase and per iteration, for logs and pipes."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.total = 0

    def _print(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.start:7.1f}s] {text}", flush=True)

    def phase(self, name: str, detail: str = "") -> None:
        self._print(f"{name}: {detail}" if detail else name)

    def phase_done(self, name: str, seconds: float) -> None:
        self._print(f"{name} done in {seconds:.1f}s")

    def iterations(self, done: int, total: int) -> None:
        self.total, self.train_start, self.first = total, time.perf_counter(), done
        self._print(f"train: iterations {done + 1}..{total}")

    def iteration_done(self, iteration: int) -> None:
        finished = iteration + 1 - self.first
        elapsed = time.perf_counter() - self.train_start
        remaining = elapsed / finished * (self.total - iteration - 1)
        self._print(f"iteration {iteration + 1}/{self.total} ({elapsed:.0f}s elapsed, ETA {remaining:.0f}s)")

    def close(self) -> None:
        pass


class RichProgress(PlainProgress):
    """Phases as status lines and a progress bar over outer iterations, on a terminal."""

    def __init__(self) -> None:
        super().__init__()
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = Console()
        self.bar = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("iterations"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
        )
        self.task = None

    def _print(self, text: str) -> None:
        self.console.print(f"[dim]{time.perf_counter() - self.start:7.1f}s[/dim] {text}")

    def iterations(self, done: int, total: int) -> None:
        self.bar.start()
        self.task = self.bar.add_task("train", total=total, completed=done)

    def iteration_done(self, iteration: int) -> None:
        self.bar.update(self.task, completed=iteration + 1)

    def phase_done(self, name: str, seconds: float) -> None:
        if name == "train":
            self.bar.stop()
        super().phase_done(name, seconds)

    def close(self) -> None:
        self.bar.stop()


def _progress(quiet: bool):  # noqa: ANN202 - one of three progress classes
    from harness.runner import SilentProgress

    if quiet:
        return SilentProgress()
    return RichProgress() if sys.stdout.isatty() else PlainProgress()


def _prepare_run_dir(args: argparse.Namespace, grid_name: str) -> Path:
    from harness.artifacts import METRICS_FILE, fresh_run_dir
    from harness.checkpoint import has_checkpoint

    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / "grid.json").is_file():
            raise UsageError(f"{run_dir}: not a run directory (no grid.json); nothing to resume")
        if (run_dir / METRICS_FILE).is_file() and not has_checkpoint(run_dir):
            raise UsageError(f"{run_dir}: run already finished")
        return run_dir
    if args.out is None:
        return fresh_run_dir(DEFAULT_RUNS_ROOT, grid_name)
    run_dir = Path(args.out)
    if run_dir.exists() and any(run_dir.iterdir()) and not args.force:
        raise UsageError(
            f"{run_dir} already holds files; use --force to overwrite, or --resume {run_dir} to continue it"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def command_run(args: argparse.Namespace) -> int:
    from harness.runner import execute, load_spec

    if args.resume:
        if args.conditions or args.seeds:
            raise UsageError("--resume continues a run as it was; do not pass a condition file or --seeds")
        run_dir = _prepare_run_dir(args, "")
        spec = load_spec(run_dir)
    else:
        spec = load_grid(args.conditions or DEFAULT_CONDITIONS, seeds=args.seeds)
        check_fits(layout_grid(spec).shape, len(spec.run.seeds))  # refuse before writing anything
        run_dir = _prepare_run_dir(args, spec.name)
    if not args.no_compile_cache:
        enable_compilation_cache()
    progress = _progress(args.quiet)
    try:
        outcome = execute(spec, run_dir, progress, resume=bool(args.resume))
    except KeyboardInterrupt:
        progress.close()
        print(f"\ninterrupted; finished iterations are checkpointed. Resume with:\n  coevolab run --resume {run_dir}")
        return EXIT_INTERRUPTED
    if not outcome.diverged.empty:
        print("runs that diverged (non-finite parameters):")
        print(outcome.diverged.to_string(index=False))
    print(run_dir)
    return EXIT_DIVERGED if not outcome.diverged.empty else EXIT_OK


def command_report(args: argparse.Namespace) -> int:
    import pandas as pd

    from harness import report
    from harness.artifacts import METRICS_FILE

    run_dir = Path(args.run_dir)
    metrics_path = run_dir / METRICS_FILE
    if not metrics_path.is_file():
        raise UsageError(f"{run_dir}: no {METRICS_FILE} to report on")
    report.write_report(pd.read_csv(metrics_path), run_dir, title=f"coevolab report: {run_dir.name}")
    print(run_dir / "report.md")
    return EXIT_OK


def command_list(args: argparse.Namespace) -> int:
    import pandas as pd

    spec = load_grid(args.conditions or DEFAULT_CONDITIONS)
    rows = [{"condition": c.name, **c.knobs.model_dump(), "boundary": c.boundary} for c in spec.conditions]
    with pd.option_context("display.width", 250, "display.max_columns", None, "display.max_colwidth", 60):
        print(pd.DataFrame(rows).to_string(index=False))
    print(
        f"\n{len(spec.conditions)} conditions × {len(spec.run.seeds)} seeds {list(spec.run.seeds)}; "
        f"{spec.run.iterations} iterations × {spec.run.steps_per_iteration} steps, batch {spec.run.batch_size}"
    )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coevolab", description="Judge–policy co-evolution grids as one compiled JAX program."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run a grid of conditions × seeds and write its report")
    run.add_argument("conditions", nargs="?", help=f"condition file (default {DEFAULT_CONDITIONS})")
    run.add_argument("--seeds", nargs="+", type=int, metavar="N", help="a seed count N, or a list of seeds")
    run.add_argument("--out", help=f"output directory (default: a fresh one under {DEFAULT_RUNS_ROOT}/)")
    run.add_argument("--force", action="store_true", help="write into --out even if it already holds files")
    run.add_argument("--resume", metavar="DIR", help="continue an interrupted run from its last checkpoint")
    run.add_argument("--quiet", action="store_true", help="no progress output")
    run.add_argument(
        "--no-compile-cache",
        action="store_true",
        help=f"do not keep compiled programs on disk (default: ${CACHE_DIR_ENV} or {DEFAULT_CACHE_DIR})",
    )
    run.set_defaults(handler=command_run)

    report = commands.add_parser("report", help="re-render a run's report from its metrics.csv (no training)")
    report.add_argument("run_dir", help="a run directory")
    report.set_defaults(handler=command_report)

    listing = commands.add_parser("list", help="show the conditions a file defines, with resolved knobs")
    listing.add_argument("conditions", nargs="?", help=f"condition file (default {DEFAULT_CONDITIONS})")
    listing.set_defaults(handler=command_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    use_every_cpu_core()  # before JAX starts: one shard per core
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (ConditionFileError, UsageError, GridTooLarge, CheckpointMismatch) as error:
        print(f"coevolab: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except PretrainingFailed as error:
        print(f"coevolab: error: {error}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
