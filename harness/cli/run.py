"""`coevolab run`: a grid whole, one seed block of it, all its blocks on a backend (in this process or Ray), a
resumed or grown run, or a grid grown until its claims are decided. Ctrl-C and SIGTERM (`harness.common.stop_signals`)
stop each at a clean point."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli.arguments import (
    DEFAULT_RUNS_ROOT,
    EXIT_FAILURE,
    UsageError,
    conditions_path,
    existing_directory,
    finished,
    grid_and_warnings,
    writing,
)
from harness.common import stop_signals

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd

    from harness.experiment.runner import Progress
    from harness.grid.spec import GridSpec


def _prepare_run_dir(args: argparse.Namespace, grid_name: str) -> Path:
    """The run directory of `coevolab run` (created where new): --resume DIR, --out DIR or a fresh one. Read-only
    checks alone: the caller takes the directory's lock (`writing`) before anything is written, and then, with
    --force, `_replace_earlier_run`."""
    from harness.common.integrity import run_entries
    from harness.common.run_files import fresh_run_dir
    from harness.experiment.merge import run_finished
    from harness.experiment.verify import is_run_directory, replaceable_entries

    if args.resume:
        run_dir = existing_directory(Path(args.resume), "--resume")
        if not (run_dir / "grid.json").is_file():
            raise UsageError(f"--resume {run_dir}: not a run directory (no grid.json); nothing to resume")
        if run_finished(run_dir):
            raise UsageError(f"--resume {run_dir}: run already finished (grow it with --resume {run_dir} --seeds N)")
        return run_dir
    try:
        if args.out is None:
            return fresh_run_dir(DEFAULT_RUNS_ROOT, grid_name)
        run_dir = Path(args.out)
        if run_dir.exists() and not run_dir.is_dir():
            raise UsageError(f"--out {run_dir}: exists and is not a directory")
        if run_dir.exists() and run_entries(run_dir):
            if not args.force:
                raise UsageError(
                    f"--out {run_dir} already holds files; use --force to overwrite, or --resume {run_dir} to "
                    "continue it"
                )
            if not is_run_directory(run_dir):
                raise UsageError(
                    f"--out {run_dir} holds files but no coevolab run; --force replaces a run directory only: give "
                    "an empty or new directory"
                )
            foreign = replaceable_entries(run_dir).foreign
            if foreign:
                raise UsageError(
                    f"--out {run_dir} holds {', '.join(entry.name for entry in foreign[:3])}"
                    f"{' and more' if len(foreign) > 3 else ''}, which no coevolab run writes; --force removes a "
                    "run's own files only: move them out first, or give another directory"
                )
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        where = args.out if args.out is not None else DEFAULT_RUNS_ROOT
        raise UsageError(f"output directory {where}: cannot create or read it: {error.strerror or error}") from None
    return run_dir


def _replace_earlier_run(args: argparse.Namespace, run_dir: Path) -> None:
    """--force: remove every file of the run the directory held (checkpoints, results, blocks, stages, shapes)
    before this run writes anything, so that nothing of it is resumed or merged into this one. Under the lock."""
    from harness.common.integrity import discard_contents
    from harness.experiment.verify import replaceable_entries

    if args.force:
        discard_contents(run_dir, replaceable_entries(run_dir).owned)


def _block_run_dir(args: argparse.Namespace, spec: GridSpec) -> Path:
    """--out DIR of `--block K`, created where new (its checks: harness.experiment.blocks.block_run_dir, which the
    caller runs again under the directory's lock, shared with the other blocks' processes)."""
    from harness.experiment.blocks import check_block

    if args.out is None:
        raise UsageError("--block K needs --out DIR: the run directory that every block of the grid writes into")
    if args.force:
        raise UsageError("--block adds one block to --out DIR and overwrites no other; --force does not apply")
    check_block(spec, args.block)
    run_dir = Path(args.out)
    if run_dir.exists() and not run_dir.is_dir():
        raise UsageError(f"--out {run_dir}: exists and is not a directory")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"output directory {run_dir}: cannot create or read it: {error.strerror or error}") from None
    return run_dir


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
    return (
        f"\n{how} before the first iteration finished; nothing is checkpointed in {run_dir}. Start it again with:\n"
        f"  coevolab run --resume {run_dir}"
    )


def _unchanged_mechanisms(spec: GridSpec) -> GridSpec:
    """The grid, once its mechanisms' modules are found unchanged since it started (`grid_file.check_sources`)."""
    from harness.grid.grid_file import check_sources

    check_sources(spec)
    return spec


def _resumed(args: argparse.Namespace, stack: contextlib.ExitStack) -> tuple[Path, GridSpec]:
    """The run directory and grid of `--resume DIR` (grown to --seeds N if given; a flat run becomes blocks), its
    lock taken in `stack` and its files checked before anything is read from them."""
    from harness.experiment.blocks import adopt_flat_run, grown_spec
    from harness.experiment.runner import load_spec

    if args.conditions or args.seed_list is not None or args.block is not None:
        raise UsageError(
            "--resume continues a run as it was, or grows it with --seeds N; do not pass a condition file, "
            "--seed-list or --block"
        )
    _unchanged_by_overrides(args, existing_directory(Path(args.resume), "--resume"))
    if args.seeds is None:
        run_dir = _prepare_run_dir(args, "")
    else:
        run_dir = existing_directory(Path(args.resume), "--resume")
        if not (run_dir / "grid.json").is_file():
            raise UsageError(f"--resume {run_dir}: not a run directory (no grid.json); nothing to grow")
    stack.enter_context(writing(run_dir))
    _check_earlier_results(run_dir)
    if args.seeds is None:
        return run_dir, _unchanged_mechanisms(load_spec(run_dir))
    spec = grown_spec(_unchanged_mechanisms(load_spec(run_dir)), args.seeds)
    adopt_flat_run(spec, run_dir)
    return run_dir, spec


def _unchanged_by_overrides(args: argparse.Namespace, run_dir: Path) -> None:
    """--resume DIR with --set: refuse, before anything is read or written, an override that changes the grid the run
    records (a run continues as it started); one that sets what the grid already has is no change."""
    from harness.experiment.runner import load_spec
    from harness.grid.overrides import changes

    if args.overrides:
        changed = changes(load_spec(run_dir), args.overrides)
        if changed:
            raise UsageError(
                f"--resume {run_dir}: --set changes the grid it runs ({'; '.join(changed)}); a run continues as it "
                "started: run the changed grid into another directory"
            )


def _seeds_given_once(args: argparse.Namespace) -> None:
    if (args.seeds is not None or args.seed_list is not None) and any(o.key == "run.seeds" for o in args.overrides):
        raise UsageError("--set run.seeds and --seeds / --seed-list both set the seeds; give them once")


def _check_earlier_results(run_dir: Path) -> None:
    """Before a run continues or grows a directory: where it holds a finished run's manifest, every file that
    manifest lists but the top's own results (which the run writes anew) is as listed, and its metrics read back.

    Raises:
        RunDirectoryError: the first that is not.
    """
    from harness.common.run_files import MANIFEST_FILE
    from harness.experiment.verify import check_finished, report_outputs

    if (run_dir / MANIFEST_FILE).is_file():
        check_finished(run_dir, report_outputs(run_dir))


def command_run(args: argparse.Namespace) -> int:
    from harness.common.run_files import metrics_file
    from harness.experiment.blocks import (
        block_count,
        block_dir,
        block_run_dir,
        block_spec,
        run_block,
        seeds_per_block,
        uses_blocks,
    )
    from harness.experiment.merge import IN_PROCESS, run_in_blocks
    from harness.experiment.ray_backend import RAY, RayBackend
    from harness.experiment.runner import diverged_runs, execute
    from harness.experiment.validation import read_metrics_frame
    from harness.grid.layout import layout_grid
    from harness.grid.memory import check_fits

    _seeds_given_once(args)
    if args.tensorboard:  # an optional part missing is refused before any work, leaving nothing behind
        from harness.experiment.live import check_tensorboard

        check_tensorboard()
    if args.until_decided or args.max_seeds is not None:
        return command_until_decided(args)
    if _is_study(args):
        return command_study(args)
    seeds = args.seeds if args.seeds is not None else args.seed_list
    with contextlib.ExitStack() as stack:
        ray = RayBackend.from_arguments(args)  # before anything is written: an unreachable cluster leaves nothing
        if ray:
            stack.callback(ray.close)
        if args.resume:
            run_dir, spec = _resumed(args, stack)
            in_blocks = uses_blocks(run_dir)
            if ray and not in_blocks:
                raise UsageError(f"--resume {run_dir}: a grid run whole (not in seed blocks) resumes without --ray")
        else:
            spec = grid_and_warnings(conditions_path(args.conditions), seeds, args.overrides)
            largest = block_spec(spec, 0)  # every block is the size of the first or smaller
            check_fits(layout_grid(largest).shape, len(largest.run.seeds))  # refuse before writing anything
            if args.block is not None:
                run_dir = _block_run_dir(args, spec)
                stack.enter_context(writing(run_dir, shared=True))  # the grid's other blocks may run beside it
                block_run_dir(spec, args.block, run_dir)
            else:
                run_dir = _prepare_run_dir(args, spec.name)
                stack.enter_context(writing(run_dir))
                _replace_earlier_run(args, run_dir)
            # A one-block grid keeps the flat layout of a run before blocks (its files at the top of run_dir).
            in_blocks = args.block is not None or ray is not None or block_count(spec) > 1

        def work(progress: Progress) -> tuple[Path, pd.DataFrame]:
            if args.block is not None:
                run_block(spec, args.block, run_dir, progress, tensorboard=args.tensorboard)
                progress.close()
                done = block_dir(run_dir, args.block)
                return done, diverged_runs(read_metrics_frame(metrics_file(done)))
            if in_blocks:
                backend = (ray, RAY) if ray else ()
                blocks = run_in_blocks(
                    spec, run_dir, progress, *backend, figures=args.figures, tensorboard=args.tensorboard
                )
                return run_dir, blocks.diverged
            whole = {"execution": {"backend": IN_PROCESS, "blocks": 1, "seeds_per_block": seeds_per_block(spec)}}
            outcome = execute(
                spec,
                run_dir,
                progress,
                resume=bool(args.resume),
                started=args.started,
                manifest_extra=whole,
                figures=args.figures,
                tensorboard=args.tensorboard,
            )
            return run_dir, outcome.diverged

        return _run_until_stopped(args, work, lambda how: _interrupted_message(run_dir, how, args.block))


def command_until_decided(args: argparse.Namespace) -> int:
    """`coevolab run [FILE] [--seeds N | --seed-list S-E] --until-decided --max-seeds N`, or `--resume DIR
    --until-decided` (see harness.experiment.until_decided). The grid's seeds (the file's, --seeds N: 0..N-1, or a
    consecutive --seed-list S-E) are the first look's; the looks after it take the seeds that follow."""
    from harness.experiment.blocks import block_spec
    from harness.experiment.ray_backend import RAY, RayBackend
    from harness.experiment.until_decided import first_seed_of, run_until_decided
    from harness.grid.layout import layout_grid
    from harness.grid.memory import check_fits

    if not args.until_decided:
        raise UsageError("--max-seeds is the budget of --until-decided; pass both")
    if args.block is not None:
        raise UsageError("--until-decided runs each look's seed blocks itself; do not pass --block")
    with contextlib.ExitStack() as stack:
        ray = RayBackend.from_arguments(args)  # before anything is written: an unreachable cluster leaves nothing
        if ray:
            stack.callback(ray.close)
        if args.resume:
            if args.conditions or args.seeds is not None or args.seed_list is not None:
                raise UsageError(
                    "--resume DIR --until-decided continues the grid in DIR; do not pass a file, --seeds or --seed-list"
                )
            spec, run_dir = None, existing_directory(Path(args.resume), "--resume")
            if not (run_dir / "grid.json").is_file():
                raise UsageError(f"--resume {run_dir}: not a run directory (no grid.json); nothing to resume")
            _unchanged_by_overrides(args, run_dir)
            stack.enter_context(writing(run_dir))
            _check_earlier_results(run_dir)
        else:
            seeds = args.seeds if args.seeds is not None else args.seed_list
            spec = grid_and_warnings(conditions_path(args.conditions), seeds, args.overrides)
            first_seed_of(spec.run.seeds)  # refuse a gap before writing anything
            largest = block_spec(spec, 0)
            check_fits(layout_grid(largest).shape, len(largest.run.seeds))  # refuse before writing anything
            run_dir = _prepare_run_dir(args, spec.name)
            stack.enter_context(writing(run_dir))
            _replace_earlier_run(args, run_dir)  # --force starts the grid over, not from an earlier plan's stages

        def work(progress: Progress) -> tuple[Path, pd.DataFrame]:
            backend = {"backend": ray, "how": RAY} if ray else {}
            outcome = run_until_decided(
                spec, run_dir, args.max_seeds, args.spending, progress, **backend, figures=args.figures
            )
            return run_dir, outcome.diverged

        kept = f"finished blocks are kept. Resume with:\n  coevolab run --resume {run_dir} --until-decided"
        return _run_until_stopped(args, work, lambda how: f"\n{how}; {kept}")


def _is_study(args: argparse.Namespace) -> bool:
    """Whether `coevolab run` was given a study: a condition file with [shapes], or --resume of a study directory."""
    from harness.experiment.study import is_study
    from harness.grid.study import is_study_file

    if args.resume:
        return is_study(Path(args.resume))
    path = conditions_path(args.conditions)
    return path.is_file() and is_study_file(path)


def command_study(args: argparse.Namespace) -> int:
    """`coevolab run STUDY.toml` or `--resume DIR` of a study: one program per shape (harness.experiment.study)."""
    from harness.experiment.blocks import block_spec
    from harness.experiment.ray_backend import RAY, RayBackend
    from harness.experiment.study import run_study
    from harness.grid.layout import layout_grid
    from harness.grid.memory import check_fits
    from harness.grid.study import load_study

    if args.block is not None:
        raise UsageError("a study runs its shapes one after another; --block applies to a grid file")
    if args.overrides:
        raise UsageError("--set applies to a grid's condition file; a study's shapes are set in the study's file")
    with contextlib.ExitStack() as stack:
        ray = RayBackend.from_arguments(args)  # before anything is written: an unreachable cluster leaves nothing
        if ray:
            stack.callback(ray.close)
        if args.resume:
            if args.conditions or args.seeds is not None or args.seed_list is not None:
                raise UsageError("--resume DIR continues the study in DIR; do not pass a file, --seeds or --seed-list")
            study, run_dir = None, existing_directory(Path(args.resume), "--resume")
            stack.enter_context(writing(run_dir))
            _check_earlier_results(run_dir)
        else:
            seeds = args.seeds if args.seeds is not None else args.seed_list
            study = load_study(conditions_path(args.conditions), seeds)
            for shape in study.shapes:  # refuse before writing anything
                largest = block_spec(shape.grid, 0)
                check_fits(layout_grid(largest).shape, len(largest.run.seeds))
            run_dir = _prepare_run_dir(args, study.name)
            stack.enter_context(writing(run_dir))
            _replace_earlier_run(args, run_dir)  # --force starts the study over

        def work(progress: Progress) -> tuple[Path, pd.DataFrame]:
            backend = {"backend": ray, "how": RAY} if ray else {}
            return run_dir, run_study(study, run_dir, progress, **backend, figures=args.figures).diverged

        kept = f"finished shapes and blocks are kept. Resume with:\n  coevolab run --resume {run_dir}"
        return _run_until_stopped(args, work, lambda how: f"\n{how}; {kept}")


def _run_until_stopped(
    args: argparse.Namespace,
    work: Callable[[Progress], tuple[Path, pd.DataFrame]],
    interrupted: Callable[[str], str],
) -> int:
    """Run `work` (given the console's progress; returns where its results are and its diverged runs) with the
    compile cache on unless --no-compile-cache, and SIGTERM raised where Ctrl-C is: either stops it at a clean
    point, prints `interrupted(how)` (what is kept, and how to resume) and exits 143 or 130. A file that cannot be
    written (a full disk, a file size limit, permissions changed under the run) stops it the same way: one line on
    stderr, naming the file and saying how to resume, exit 1."""
    from harness.experiment.progress import console_progress
    from harness.grid.compile_cache import disable_compilation_cache, enable_compilation_cache

    if args.no_compile_cache:
        disable_compilation_cache()
    else:
        enable_compilation_cache()
    progress = console_progress(args.quiet, args.started)
    stop_signals.catch()  # again: ray.init replaces the handlers (its SIGTERM exits with 15)
    try:
        try:
            done, diverged = work(progress)
        finally:  # whatever ends the work ends the display (a heartbeat's thread) with it
            progress.close()
    except KeyboardInterrupt as stop:
        stop_signals.handling()
        terminated = stop_signals.terminated(stop)
        print(interrupted("terminated (SIGTERM)" if terminated else "interrupted"))
        return stop_signals.EXIT_TERMINATED if terminated else stop_signals.EXIT_INTERRUPTED
    except OSError as error:
        what = f"could not write {error.filename}" if error.filename else "could not go on"
        kept = " ".join(interrupted("the run stopped").replace(":\n  ", ": ").split())
        print(f"coevolab: error: {what}: {error.strerror or error}; {kept}", file=sys.stderr)
        return EXIT_FAILURE
    return finished(done, diverged)
