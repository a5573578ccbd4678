"""Finished seed blocks joined into the grid's results (metrics.csv.gz, the report, the top manifest); a grid run as
blocks by a backend and merged (`run_in_blocks`).

The merged metrics.csv.gz is the blocks' rows, text for text as each block wrote them (`coevolab run`'s format), sorted
in the grid's condition order, then seed, then iteration: it is the same bytes whatever process ran a block and
whatever order blocks finished in, and for a one-block grid the same bytes as the block's own table.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import socket
import time
from pathlib import Path

import pandas as pd

from harness import report
from harness.common.integrity import read_manifest, verify_listed, write_manifest
from harness.common.run_files import (
    GRID_FILE,
    LEGACY_METRICS_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    manifest,
    metrics_file,
    remove_figures,
    write_metrics_text,
)
from harness.common.run_tables import blocks_table, table_files
from harness.common.wording import plural
from harness.experiment.blocks import (
    BLOCKS_DIR,
    Backend,
    BlockError,
    BlockRecord,
    block_count,
    block_dir,
    block_seeds,
    block_spec,
    in_process,
    pending_blocks,
    ran_another_grid,
    read_record,
    run_block,
    seeds_per_block,
    uses_blocks,
)
from harness.experiment.checkpoint import has_checkpoint
from harness.experiment.runner import ExperimentOutcome, Progress, SilentProgress, diverged_runs, load_spec
from harness.experiment.validation import metrics_text, validated_metrics
from harness.grid.grid_file import MECHANISMS_DIR, write_grid_file
from harness.grid.spec import GridSpec, grid_tables

# How the blocks of a run were run, as the manifest and the report name it.
IN_PROCESS = "in-process"
SEPARATE = "separate processes"


def merged_metrics_text(spec: GridSpec, run_dir: Path) -> str:
    """The grid's metrics.csv.gz text from its finished blocks under `run_dir`, each checked against its manifest and
    read back against its grid first.

    Raises:
        BlockError: some blocks are not finished (named), or were run for another grid.
        RunDirectoryError: a block's files differ from its manifest, or its table does not read back as its runs.
    """
    foreign = [k for k in range(block_count(spec)) if ran_another_grid(spec, run_dir, k)]
    if foreign:
        raise BlockError(
            f"{run_dir}: {'blocks' if len(foreign) > 1 else 'block'} {', '.join(map(str, foreign))} "
            f"{'were' if len(foreign) > 1 else 'was'} run for another grid than its grid.json's '{spec.name}'; "
            "remove them, or merge them in their own run directory"
        )
    missing = pending_blocks(spec, run_dir)
    if missing:
        raise BlockError(
            f"{run_dir}: {plural(len(missing), 'block')} of {block_count(spec)} not finished: "
            f"{', '.join(map(str, missing))}; run them (coevolab run FILE --out {run_dir} --block K), then merge"
        )
    tables = []
    for k in range(block_count(spec)):
        path = metrics_file(block_dir(run_dir, k))
        text = metrics_text(path)
        validated_metrics(text, block_spec(spec, k), path)
        # Read as text, so that every value is written back exactly as its block wrote it.
        tables.append(pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False))
        if list(tables[-1].columns) != list(tables[0].columns):
            raise BlockError(f"block {k} in {run_dir} has other metrics than block 0 (another version of coevolab?)")
    return ordered_metrics_text(spec, tables)


def ordered_metrics_text(spec: GridSpec, tables: list[pd.DataFrame]) -> str:
    """metrics.csv.gz text of `tables` (read as text, so every value is written back as it was) joined and sorted in
    the grid's condition order, then seed, then iteration: the same bytes whatever order the tables come in."""
    order = {c.name: i for i, c in enumerate(spec.conditions)}
    merged = pd.concat(tables, ignore_index=True)
    keys = pd.DataFrame(
        {
            "condition": merged["condition"].map(order),
            "seed": merged["seed"].astype(int),
            "iteration": merged["iteration"].astype(int),
        }
    )
    merged = merged.loc[keys.sort_values(["condition", "seed", "iteration"], kind="stable").index]
    text = io.StringIO()
    merged.to_csv(text, index=False)
    return text.getvalue()


def _block_manifest(run_dir: Path, block: int) -> dict:
    """A block's manifest.json (as `execute` wrote it), or {} where it cannot be read."""
    try:
        return json.loads((block_dir(run_dir, block) / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def how_run_line_of(run_dir: Path) -> str | None:
    """The line on how a grid run in seed blocks was run, from its manifest.json (None for a grid run whole), so that
    `coevolab report` re-renders the report the merge wrote."""
    try:
        execution = json.loads((Path(run_dir) / MANIFEST_FILE).read_text(encoding="utf-8")).get("execution")
    except (OSError, ValueError, AttributeError):
        return None
    return execution.get("line") if isinstance(execution, dict) else None


def how_run_line(records: list[BlockRecord], how: str) -> str:
    """One line on how a grid was run, for its report: blocks, their size, the backend and the hosts."""
    hosts = sorted({record.attempts[-1].host for record in records if record.attempts})
    seeds = {len(record.seeds) for record in records}
    size = f"{plural(max(seeds), 'seed')} each" if len(seeds) == 1 else f"up to {plural(max(seeds), 'seed')} each"
    attempts = sum(len(record.attempts) for record in records)
    retried = f", {plural(attempts - len(records), 'retry', 'retries')}" if attempts > len(records) else ""
    return (
        f"Run as {plural(len(records), 'seed block')} ({size}), {how}, on {plural(len(hosts), 'host')} "
        f"({', '.join(hosts)}){retried}."
    )


def _merge_input(relative: str) -> bool:
    """Whether a file of a run directory (its path relative to it) is one a merge reads."""
    return relative == GRID_FILE or relative.startswith((f"{BLOCKS_DIR}/", f"{MECHANISMS_DIR}/"))


def merge_blocks(
    spec: GridSpec, run_dir: Path, how: str, progress: Progress | None = None, figures: bool = True
) -> ExperimentOutcome:
    """Merge the finished blocks of `spec` in `run_dir` into its metrics.csv.gz, report and manifest.json.

    Args:
        how: how the blocks were run (IN_PROCESS, SEPARATE, a distributed backend's name), for the manifest and report.
        figures: False: the report's text and tables alone (`coevolab report` draws them later).

    Returns:
        The merged run (no final state: it lives in no one process).

    Raises:
        BlockError: some blocks are missing, or of another grid; nothing is written then.
        RunDirectoryError: a block's files differ from its manifest or do not read back as its runs (named), or a
            block file that the run directory's manifest lists differs from it; nothing is written then.
    """
    progress = progress or SilentProgress()
    entered = time.perf_counter()
    started_at = dt.datetime.now(dt.UTC)
    run_dir = Path(run_dir)
    earlier = read_manifest(run_dir)  # of an earlier merge: it vouches for the blocks' files too (block.json)
    if earlier is not None:
        # What a merge reads: the blocks and the grid (its mechanisms' sources beside it); it writes the rest anew.
        verify_listed(run_dir, earlier, lambda relative: not _merge_input(relative))
    text = merged_metrics_text(spec, run_dir)  # before any write: a refused merge leaves the directory as it was
    try:  # the blocks' per-run tables are read joined, never stored twice; a mismatch is refused before any write
        for table in grid_tables(spec):
            blocks_table(run_dir, table.name)
    except ValueError as error:
        raise BlockError(str(error)) from None
    records = [record for k in range(block_count(spec)) if (record := read_record(run_dir, k)) is not None]
    # The manifest goes first and comes back last: a merge stopped half-way leaves no manifest vouching for a mix.
    (run_dir / MANIFEST_FILE).unlink(missing_ok=True)
    write_grid_file(run_dir / GRID_FILE, spec)
    write_metrics_text(run_dir, text)
    for table in grid_tables(spec):  # a grown flat run's own copy: its rows are block 0's now
        for path in table_files(run_dir, table.name):
            path.unlink(missing_ok=True)
    metrics = pd.read_csv(run_dir / METRICS_FILE)
    line = how_run_line(records, how)
    progress.phase("report", str(run_dir))
    report_start = time.perf_counter()
    remove_figures(run_dir)
    report.write_run_report(run_dir, metrics, spec.name, spec, how_run=line, figures=figures)
    progress.phase_done("report", time.perf_counter() - report_start)
    phases: dict[str, float] = {}
    for record in records:
        for phase, seconds in record.attempts[-1].seconds.items():
            phases[phase] = phases.get(phase, 0.0) + seconds
    write_manifest(
        run_dir,
        manifest(
            spec.model_dump(mode="json"),
            # The blocks' phases summed (their last attempts'), then this merge's own.
            {**phases, "merge": time.perf_counter() - entered},
            started_at,
            runs=len(spec.conditions) * len(spec.run.seeds),
            execution={
                "backend": how,
                "blocks": len(records),
                "seeds_per_block": seeds_per_block(spec),
                "merged_on": socket.gethostname(),
                "line": line,
            },
            blocks=[record.model_dump(mode="json") for record in records],
            pretrain=[row for k in range(len(records)) for row in _block_manifest(run_dir, k).get("pretrain", [])],
        ),
    )
    progress.close()
    return ExperimentOutcome(run_dir, metrics, diverged_runs(metrics))


def run_finished(directory: Path) -> bool:
    """Whether a run directory holds a finished run: merged metrics sealed by its manifest (written last), no
    checkpoint, and (in seed blocks) no block left to run. Metrics without a manifest are not a finished run: nothing
    vouches for them, and `--resume` writes them again."""
    if not metrics_file(directory).is_file() or not (directory / MANIFEST_FILE).is_file():
        return False
    if has_checkpoint(directory):
        return False
    return not uses_blocks(directory) or not pending_blocks(load_spec(directory), directory)


def run_in_blocks(
    spec: GridSpec,
    run_dir: Path,
    progress: Progress | None = None,
    backend: Backend = in_process,
    how: str = IN_PROCESS,
    figures: bool = True,
    tensorboard: bool = False,
) -> ExperimentOutcome:
    """Run every unfinished block of `spec` into `run_dir` by `backend`, then merge them all (see merge_blocks, whose
    `figures` this passes on). tensorboard: each block run here also writes its means as TensorBoard events (a Ray
    backend carries its own setting).

    Blocks finished earlier (a resumed or grown run) are kept; a block with a checkpoint continues from it. The top
    grid.json is written first, so that an interrupted run resumes as this grid; where it was another grid's (a run
    grown), that grid's merged results go first: nothing in the directory vouches for a mix.
    """
    progress = progress or SilentProgress()
    run_dir = Path(run_dir)
    grid_file = run_dir / GRID_FILE
    if not grid_file.is_file() or grid_file.read_text(encoding="utf-8") != spec.model_dump_json(indent=2) + "\n":
        for stale in (MANIFEST_FILE, METRICS_FILE, LEGACY_METRICS_FILE):
            (run_dir / stale).unlink(missing_ok=True)
    write_grid_file(grid_file, spec)
    (run_dir / BLOCKS_DIR).mkdir(exist_ok=True)
    count = block_count(spec)

    def run_one(spec: GridSpec, block: int, run_dir: Path) -> BlockRecord:
        seeds = block_seeds(spec, block)
        progress.phase("block", f"{block + 1} of {count}: seeds {seeds[0]}..{seeds[-1]}")
        return run_block(spec, block, run_dir, progress, tensorboard=tensorboard)

    backend(spec, run_dir, pending_blocks(spec, run_dir), run_one)
    return merge_blocks(spec, run_dir, how, progress, figures)
