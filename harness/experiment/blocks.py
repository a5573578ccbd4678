"""A grid as seed blocks: the unit of work a machine runs, that merges into the grid's results and lets it grow.

Block k of a grid holds every condition × the grid's seeds at positions [k·b, (k+1)·b) of its seed list (the last
block possibly partial), b = `seeds_per_block(spec)`. The layout follows from the grid alone, never from the machine
or how many seeds have run so far, so every full block has one shape (one compiled program serves them all) and a
block's results depend only on (grid, block index). A block is the grid restricted to its seeds, run by
`harness.experiment.runner.execute` into `blocks/<k>/` of the run directory (its grid.json, metrics.csv.gz, checkpoint
after every outer iteration, manifest.json) beside `block.json`: its seeds, whether it finished, and every attempt
(host, start, end, iteration resumed from, seconds per phase). `harness.experiment.merge` joins finished blocks.

Running the pending blocks is a backend's job (`Backend`): a function of the grid, the run directory, the pending
block indices and a `BlockRunner` (`run_block`: a pure function of (spec, block index, run_dir) apart from the files
it writes under blocks/<k>/), so a distributed backend (e.g. Ray, one task per block over a shared file system) can
submit each block as it is. `in_process` runs them one after another in this process.
"""

from __future__ import annotations

import datetime as dt
import math
import shutil
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from harness.common.integrity import RunDirectoryError, read_manifest, run_entries, verify_listed, write_manifest
from harness.common.locks import LOCK_SUFFIX, holding
from harness.common.run_files import (
    BLOCK_FILE,
    BLOCKS_DIR,
    GRID_FILE,
    MANIFEST_FILE,
    atomic_write_bytes,
    atomic_write_text,
    metrics_file,
)
from harness.common.run_tables import table_files
from harness.experiment.checkpoint import has_checkpoint
from harness.experiment.runner import Progress, execute, load_spec
from harness.grid.grid_file import read_grid_file, write_grid_file
from harness.grid.spec import GridSpec, grid_tables

# Runs per block from which a run's cost stops falling as a grid grows (artifacts/bench/bench.md: flat from ~360).
BLOCK_RUNS = 360


class BlockError(ValueError):
    """A block request that does not fit the run directory or the grid (exit code 2 on the command line)."""


ModelT = TypeVar("ModelT", bound=BaseModel)


class Attempt(BaseModel):
    """One process's go at a block: where and when it ran, the iteration it resumed from, its phases' seconds
    (empty while running or if it was stopped)."""

    model_config = ConfigDict(extra="forbid")

    host: str
    started: str
    finished: str | None = None
    resumed_from_iteration: int | None = None
    seconds: dict[str, float] = {}


class BlockRecord(BaseModel):
    """blocks/<k>/block.json: the block's seeds, whether its metrics.csv.gz is complete, and its attempts in order."""

    model_config = ConfigDict(extra="forbid")

    block: int
    seeds: tuple[int, ...]
    finished: bool = False
    attempts: list[Attempt] = []


BlockRunner = Callable[[GridSpec, int, Path], BlockRecord]


class Backend(Protocol):
    """Runs the pending blocks of `spec` into `run_dir`, each by `run_one(spec, block, run_dir)`, in any order and
    anywhere that sees `run_dir`; returns when all of them have finished (or raises)."""

    def __call__(self, spec: GridSpec, run_dir: Path, pending: Sequence[int], run_one: BlockRunner) -> None: ...


def in_process(spec: GridSpec, run_dir: Path, pending: Sequence[int], run_one: BlockRunner) -> None:
    """The default backend: the blocks one after another in this process (compiled programs are reused)."""
    for block in pending:
        run_one(spec, block, run_dir)


def seeds_per_block(spec: GridSpec) -> int:
    """Seeds per block: [run] block_seeds, or else max(1, ceil(BLOCK_RUNS / conditions)).

    The default gives a block enough runs (conditions × seeds ≥ BLOCK_RUNS where one seed does not already exceed
    it) that the cost per run has stopped falling, so running a grid in blocks costs no more per run than running it
    whole; a grid of fewer seeds than that is one block.
    """
    if spec.run.block_seeds is not None:
        return spec.run.block_seeds
    return max(1, math.ceil(BLOCK_RUNS / len(spec.conditions)))


def block_count(spec: GridSpec) -> int:
    return math.ceil(len(spec.run.seeds) / seeds_per_block(spec))


def check_block(spec: GridSpec, block: int) -> None:
    """Raises BlockError unless `block` is one of the grid's block indices."""
    count = block_count(spec)
    if not 0 <= block < count:
        raise BlockError(f"block {block} is out of range: the grid '{spec.name}' has blocks 0..{count - 1}")


def block_seeds(spec: GridSpec, block: int) -> tuple[int, ...]:
    """The grid's seeds at positions [k·b, (k+1)·b) of its seed list, k = block."""
    check_block(spec, block)
    size = seeds_per_block(spec)
    return spec.run.seeds[block * size : (block + 1) * size]


def block_spec(spec: GridSpec, block: int) -> GridSpec:
    """The grid restricted to one block's seeds (everything else as it is)."""
    run = spec.run.model_copy(update={"seeds": block_seeds(spec, block)})
    return spec.model_copy(update={"run": run})


def block_dir(run_dir: Path, block: int) -> Path:
    return Path(run_dir) / BLOCKS_DIR / str(block)


def uses_blocks(run_dir: Path) -> bool:
    """Whether a run directory holds its results as blocks (else it is a one-block grid run flat, as before blocks)."""
    return (Path(run_dir) / BLOCKS_DIR).is_dir()


def block_run_dir(spec: GridSpec, block: int, run_dir: Path) -> Path:
    """The run directory a job array's task runs block `block` of `spec` into: created if absent, with the grid's
    grid.json (every task may write it at once: the same bytes, each write atomic).

    Raises:
        BlockError: `block` is out of range, or run_dir holds files but not a run of this very grid (nothing is
            written then).
    """
    check_block(spec, block)
    run_dir = Path(run_dir)
    grid_file = run_dir / GRID_FILE
    try:
        existing = read_grid_file(grid_file) if grid_file.is_file() else None
    except ValueError:
        raise BlockError(f"{run_dir}: its grid.json is not a grid; give this grid a directory of its own") from None
    if existing is not None and existing != spec:
        raise BlockError(
            f"{run_dir} holds a run of another grid ('{existing.name}', {len(existing.run.seeds)} seeds); give this "
            f"grid ('{spec.name}', {len(spec.run.seeds)} seeds) a directory of its own"
        )
    if run_dir.exists() and not run_dir.is_dir():
        raise BlockError(f"{run_dir}: exists and is not a directory")
    if existing is None and run_dir.is_dir() and run_entries(run_dir):
        raise BlockError(f"{run_dir} holds files but no run of this grid; give it a directory of its own")
    try:
        (run_dir / BLOCKS_DIR).mkdir(parents=True, exist_ok=True)
        if existing is None:
            write_grid_file(grid_file, spec)
    except OSError as error:
        raise BlockError(f"{run_dir}: cannot create or write it: {error.strerror or error}") from None
    return run_dir


def _read_model(path: Path, model: type[ModelT]) -> ModelT | None:
    """The JSON file at `path` as `model`, or None where it is missing or does not parse (a block not yet written)."""
    try:
        return model.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_record(run_dir: Path, block: int) -> BlockRecord | None:
    """A block's block.json, or None where it has none or one that does not parse."""
    return _read_model(block_dir(run_dir, block) / BLOCK_FILE, BlockRecord)


def _block_grid(run_dir: Path, block: int) -> GridSpec | None:
    try:
        return read_grid_file(block_dir(run_dir, block) / GRID_FILE)
    except (OSError, ValueError):
        return None


def ran_another_grid(spec: GridSpec, run_dir: Path, block: int) -> bool:
    """Whether blocks/<block>/ holds a grid.json of another grid than this block of `spec` (other seeds of this grid,
    a partial last block before growth, count as this grid's)."""
    path = block_dir(run_dir, block) / GRID_FILE
    if not path.is_file():
        return False
    try:
        theirs = read_grid_file(path)
    except ValueError:
        return True
    ours = block_spec(spec, block)
    return theirs.model_copy(update={"run": ours.run}) != ours


def is_finished(spec: GridSpec, run_dir: Path, block: int) -> bool:
    """Whether blocks/<k>/ holds block k of `spec` complete: finished by its record, with its metrics, for this grid,
    every file its manifest lists as the manifest lists it.

    Raises:
        RunDirectoryError: a block finished by its record whose files differ from its manifest (not run again: a
            damaged result is named, never silently replaced).
    """
    record = read_record(run_dir, block)
    if not (
        record is not None
        and record.finished
        and record.seeds == block_seeds(spec, block)
        and _block_grid(run_dir, block) == block_spec(spec, block)
    ):
        return False
    directory = block_dir(run_dir, block)
    manifest = read_manifest(directory)
    if manifest is None:
        # Its record says finished, and a block writes its manifest before that record: the manifest went since.
        raise RunDirectoryError(
            f"{directory / MANIFEST_FILE}: missing, though {directory / BLOCK_FILE} says the block finished: its "
            f"files cannot be checked, so it is not merged; run it again (remove {directory}, then coevolab run "
            f"--resume {run_dir})"
        )
    verify_listed(directory, manifest)
    return metrics_file(directory).is_file()


def kept_work(spec: GridSpec, run_dir: Path) -> str:
    """What a stopped run of `spec`'s blocks keeps for a resume, from the files alone: e.g. "block 0 checkpointed;
    blocks 2, 3 finished" (a block is finished by its record, checkpointed by its checkpoint file)."""
    checkpointed = [k for k in range(block_count(spec)) if has_checkpoint(block_dir(run_dir, k))]
    done = [k for k in range(block_count(spec)) if (record := read_record(run_dir, k)) is not None and record.finished]
    parts = [
        f"{'blocks' if len(blocks) > 1 else 'block'} {', '.join(map(str, blocks))} {what}"
        for blocks, what in ((checkpointed, "checkpointed"), (done, "finished"))
        if blocks
    ]
    return "; ".join(parts) or "no block's work"


def pending_blocks(spec: GridSpec, run_dir: Path) -> list[int]:
    """The grid's blocks not finished in `run_dir`, in index order."""
    return [k for k in range(block_count(spec)) if not is_finished(spec, run_dir, k)]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _write_record(run_dir: Path, record: BlockRecord) -> None:
    atomic_write_text(block_dir(run_dir, record.block) / BLOCK_FILE, record.model_dump_json(indent=2) + "\n")


def block_lock(run_dir: Path, block: int) -> Path:
    """blocks/<k>.lock: beside the block's folder, not in it, so that starting the block over (which removes the
    folder) never removes the lock file its holder has open."""
    return Path(run_dir) / BLOCKS_DIR / f"{block}{LOCK_SUFFIX}"


def run_block(
    spec: GridSpec,
    block: int,
    run_dir: Path,
    progress: Progress | None = None,
    wait: bool = False,
    tensorboard: bool = False,
) -> BlockRecord:
    """Run block `block` of `spec` into run_dir/blocks/<block>/ and return its record (block.json).

    A finished block is left as it is. A block with a checkpoint of these seeds continues from it; one whose files
    belong to other seeds (a partial last block of a grid since grown) or another grid starts again from nothing.
    Each call is recorded as an attempt in block.json before training starts, and completed when it ends. The block
    has one writer at a time: its lock (`block_lock`, naming the holder's host and pid) is held throughout.

    Args:
        wait: wait for another process's hold on the block to end (a Ray retry beside a worker thought lost), rather
            than refuse at once.
        tensorboard: the block writes its per-iteration means as TensorBoard events too (`harness.experiment.live`).

    Raises:
        BlockError: `block` is not one of the grid's blocks, or blocks/<block>/ holds another grid's block.
        DirectoryBusy: another process works on the block (and `wait` is False).
        RunDirectoryError: the block is finished but its files differ from its manifest.
        CheckpointMismatch: its checkpoint is of another run, or damaged.
        KeyboardInterrupt: Ctrl-C or SIGTERM (the command line's `Terminated`); the checkpoint stays for a resume.
    """
    check_block(spec, block)
    lock = block_lock(run_dir, block)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with holding(lock, wait=wait, busy=f"block {block} of {run_dir}"):
        return _run_block(spec, block, Path(run_dir), progress, tensorboard)


def _run_block(
    spec: GridSpec, block: int, run_dir: Path, progress: Progress | None, tensorboard: bool = False
) -> BlockRecord:
    if is_finished(spec, run_dir, block):
        record = read_record(run_dir, block)
        assert record is not None
        return record
    if ran_another_grid(spec, run_dir, block):
        raise BlockError(f"{block_dir(run_dir, block)} holds a block of another grid than '{spec.name}'; not touched")
    own = block_spec(spec, block)
    directory = block_dir(run_dir, block)
    record = read_record(run_dir, block)
    if directory.exists() and (_block_grid(run_dir, block) != own or record is None or record.seeds != own.run.seeds):
        # Other seeds' block of this grid (the partial last block before growth), or one stopped before its first
        # write: nothing to continue from.
        shutil.rmtree(directory)
        record = None
    directory.mkdir(parents=True, exist_ok=True)
    resuming = has_checkpoint(directory)
    record = record or BlockRecord(block=block, seeds=own.run.seeds)
    attempt = Attempt(host=socket.gethostname(), started=_now())
    record = record.model_copy(update={"finished": False, "attempts": [*record.attempts, attempt]})
    _write_record(run_dir, record)
    outcome = execute(
        own, directory, progress, resume=resuming, write_report=False, block=block, tensorboard=tensorboard
    )
    done = attempt.model_copy(
        update={"finished": _now(), "resumed_from_iteration": outcome.resumed_from_iteration, "seconds": outcome.times}
    )
    record = record.model_copy(update={"finished": True, "attempts": [*record.attempts[:-1], done]})
    _write_record(run_dir, record)
    return record


def grown_spec(spec: GridSpec, seeds: int) -> GridSpec:
    """`spec` grown to seeds 0..seeds-1.

    Raises:
        BlockError: the grid's seeds are not 0..N-1, or `seeds` is fewer than it has.
    """
    count = len(spec.run.seeds)
    if spec.run.seeds != tuple(range(count)):
        raise BlockError(f"only a run of seeds 0..N-1 can grow; this one has seeds {list(spec.run.seeds)}")
    if seeds < count:
        raise BlockError(f"the run has {count} seeds; growing cannot take it down to {seeds}")
    return spec.model_copy(update={"run": spec.run.model_copy(update={"seeds": tuple(range(seeds))})})


def adopt_flat_run(spec: GridSpec, run_dir: Path) -> None:
    """Make a finished flat (one-block) run directory of a grid into block 0 of its blocks, for growth.

    The flat run's metrics become blocks/0/'s when its seeds are exactly block 0's of `spec` (the grown grid);
    otherwise its one block was partial and block 0 runs again, at full size. Its top files stay until the merge
    replaces them.

    Raises:
        BlockError: the flat run has not finished (resume it first).
    """
    run_dir = Path(run_dir)
    if uses_blocks(run_dir):
        return
    flat = load_spec(run_dir)
    ran = read_manifest(run_dir)
    if has_checkpoint(run_dir) or not metrics_file(run_dir).is_file() or ran is None:
        raise BlockError(f"{run_dir} has not finished; finish it first (coevolab run --resume {run_dir}), then grow it")
    (run_dir / BLOCKS_DIR).mkdir()
    if flat != block_spec(spec, 0):
        return
    directory = block_dir(run_dir, 0)
    directory.mkdir()
    # Every per-run table with the metrics (best_of_n.parquet, ...), so that the grown run's tables join as a
    # block's do: the grown run equals the grid run at its new size from the start.
    tables = [path.name for table in grid_tables(flat) for path in table_files(run_dir, table.name)]
    for name in (metrics_file(run_dir).name, *tables):
        if (run_dir / name).is_file():
            atomic_write_bytes(directory / name, (run_dir / name).read_bytes())
    write_grid_file(directory / GRID_FILE, flat)
    # The flat run's manifest, listing the block's files (the caller has checked the flat run's against it).
    write_manifest(directory, ran)
    attempt = Attempt(
        host="(a run before seed blocks)",
        started=ran.get("started", ""),
        finished=ran.get("finished"),
        resumed_from_iteration=ran.get("resumed_from_iteration"),
        seconds=ran.get("wall_seconds", {}),
    )
    _write_record(run_dir, BlockRecord(block=0, seeds=flat.run.seeds, finished=True, attempts=[attempt]))
