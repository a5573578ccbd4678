"""`coevolab merge`, `coevolab report` and `coevolab list`: the commands that train nothing."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

from harness.cli.arguments import (
    EXIT_OK,
    LIST_WIDTH,
    UsageError,
    conditions_path,
    existing_directory,
    finished,
    grid_and_warnings,
)
from harness.common.wording import plural


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
    outcome = merge_blocks(spec, run_dir, SEPARATE, console_progress(args.quiet), figures=args.figures)
    return finished(run_dir, outcome.diverged)


def command_report(args: argparse.Namespace) -> int:
    import json

    import pandas as pd

    from harness.common.run_files import MANIFEST_FILE, METRICS_FILE
    from harness.experiment.merge import how_run_line_of
    from harness.experiment.study import is_study, load_study_spec, write_study_files
    from harness.experiment.until_decided import is_sequential, render_report
    from harness.report import read_run_grid, write_run_report

    run_dir = existing_directory(Path(args.run_dir), "report")
    if is_study(run_dir):  # a study's report is re-rendered from its shapes' files
        study = load_study_spec(run_dir)
        how = json.loads((run_dir / MANIFEST_FILE).read_text(encoding="utf-8"))["execution"]["backend"]
        write_study_files(study, run_dir, how, figures=args.figures)
        print(run_dir / "report.md")
        return EXIT_OK
    if is_sequential(run_dir):  # its verdicts are the looks', read back rather than judged again at one level
        try:
            render_report(run_dir, figures=args.figures)
        except (OSError, ValueError, KeyError, pd.errors.ParserError) as error:
            raise UsageError(f"report {run_dir}: {error}") from None
        print(run_dir / "report.md")
        return EXIT_OK
    metrics_path = run_dir / METRICS_FILE
    if not metrics_path.is_file():
        raise UsageError(f"report {run_dir}: no {METRICS_FILE} to report on (the run has not finished)")
    try:
        metrics = pd.read_csv(metrics_path)
        # The run titles and describes its report from its grid; recover it so the re-render is the same bytes.
        grid = read_run_grid(run_dir)
    except (OSError, ValueError, KeyError, pd.errors.ParserError) as error:
        raise UsageError(f"report {run_dir}: cannot read the run's files: {error}") from None
    write_run_report(
        run_dir,
        metrics,
        grid.name if grid else run_dir.name,
        grid,
        how_run=how_run_line_of(run_dir),
        figures=args.figures,
    )
    print(run_dir / "report.md")
    return EXIT_OK


def _knob_changes(knobs: dict, defaults: dict) -> str:
    changed = [f"{k}={v}" for k, v in knobs.items() if v != defaults.get(k)]
    return ", ".join(changed) if changed else "(all defaults)"


def command_list(args: argparse.Namespace) -> int:
    import pandas as pd

    from harness.grid.knobs import Knobs

    spec = grid_and_warnings(conditions_path(args.conditions))
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
