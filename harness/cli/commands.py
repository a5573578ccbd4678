"""`coevolab merge`, `coevolab report` and `coevolab list`: the commands that train nothing."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from harness.cli.arguments import (
    EXIT_OK,
    LIST_WIDTH,
    UsageError,
    conditions_path,
    existing_directory,
    finished,
    grid_and_warnings,
    writing,
)
from harness.common.wording import plural

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd


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
    with writing(run_dir):
        spec = load_spec(run_dir)
        outcome = merge_blocks(
            spec, run_dir, SEPARATE, console_progress(args.quiet, args.started), figures=args.figures
        )
    return finished(run_dir, outcome.diverged)


def command_report(args: argparse.Namespace) -> int:
    """Re-render a finished run's report from its files: every file it is rendered from checked against the
    manifest and read back first, the manifest's listing of the report's own files brought up to date after."""
    from harness.common.integrity import read_manifest, reseal
    from harness.common.run_files import metrics_file
    from harness.experiment.study import is_study, load_study_spec, shape_dir, write_study_files
    from harness.experiment.until_decided import STAGES_DIR, is_sequential, render_report
    from harness.experiment.verify import (
        check_finished,
        part_report_outputs,
        remove_report_outputs,
        report_outputs,
        resealed_part_manifest,
    )

    run_dir = existing_directory(Path(args.run_dir), "report")
    if not metrics_file(run_dir).is_file():
        raise UsageError(f"report {run_dir}: no {metrics_file(run_dir).name} to report on (the run has not finished)")
    with writing(run_dir):
        rewritten = report_outputs(run_dir)
        checked = check_finished(run_dir, rewritten)  # every input verified, no file added, before any is read
        remove_report_outputs(run_dir, rewritten)
        if is_study(run_dir):  # its shapes' reports, then the study's from its shapes' files and verdicts
            study = load_study_spec(run_dir)
            for shape in study.shapes:
                directory = shape_dir(run_dir, shape.name)
                _render_grid_report(directory, args.figures)  # verified with the whole directory above
                reseal(directory, read_manifest(directory), part_report_outputs())
            how = checked.manifest.get("execution", {}).get("backend", "")
            write_study_files(study, run_dir, how, figures=args.figures)
            rewritten = _either(rewritten, resealed_part_manifest)
        elif is_sequential(run_dir):  # its verdicts are the looks', read back rather than judged again at one level
            stages = [path for path in run_dir.joinpath(STAGES_DIR).iterdir() if path.name.isdigit()]
            for stage in sorted(stages, key=lambda path: int(path.name)):
                # verified with the whole directory above; its claims are the looks', never judged in a stage
                _render_grid_report(stage, figures=False, claims=False)  # the figures are the merged grid's
                reseal(stage, read_manifest(stage), part_report_outputs())
            render_report(run_dir, figures=args.figures)
            rewritten = _either(rewritten, resealed_part_manifest)
        else:
            assert checked.metrics is not None  # check_finished read it
            _render_grid_report(run_dir, args.figures, checked.metrics)
        reseal(run_dir, checked.manifest, rewritten)
    print(run_dir / "report.md")
    return EXIT_OK


def _either(first: Callable[[str], bool], second: Callable[[str], bool]) -> Callable[[str], bool]:
    return lambda relative: first(relative) or second(relative)


def _render_grid_report(run_dir: Path, figures: bool, metrics: pd.DataFrame | None = None, claims: bool = True) -> None:
    """A grid's report from its files (metrics: its table, already read back; None: read here; claims=False: its
    claims not judged, as a stage of a grid grown until decided). The run titles and describes its report from its
    grid; recovered, so the re-render is the same bytes."""
    import pandas as pd

    from harness.common.run_files import metrics_file
    from harness.experiment.merge import how_run_line_of
    from harness.report import read_run_grid, write_run_report

    grid = read_run_grid(run_dir)
    assert grid is not None  # a finished run's grid.json, verified by the caller
    grid = grid if claims else grid.model_copy(update={"claims": ()})
    metrics = pd.read_csv(metrics_file(run_dir)) if metrics is None else metrics
    write_run_report(run_dir, metrics, grid.name, grid, how_run=how_run_line_of(run_dir), figures=figures)


def command_verify(args: argparse.Namespace) -> int:
    """`coevolab verify DIR`: every file against the manifests, every metrics table read back; reads alone."""
    from harness.common.locks import reading_run_dir
    from harness.experiment.verify import verify_run_dir

    run_dir = existing_directory(Path(args.run_dir), "verify")
    with reading_run_dir(run_dir):
        print(verify_run_dir(run_dir))
    return EXIT_OK


def _knob_changes(knobs: dict, defaults: dict) -> str:
    changed = [f"{k}={v}" for k, v in knobs.items() if v != defaults.get(k)]
    return ", ".join(changed) if changed else "(all defaults)"


def command_list(args: argparse.Namespace) -> int:
    import pandas as pd

    from harness.grid.knobs import Knobs

    spec = grid_and_warnings(conditions_path(args.conditions), overrides=args.overrides)
    if args.all:
        # Every knob as set, then the Spearman target each condition's judges are pretrained to, resolved (the grid's
        # own where no mechanism sets another).
        rows = [
            {
                "condition": c.name,
                **c.knobs.model_dump(),
                "pretrain_target": spec.judge_target(c),
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
