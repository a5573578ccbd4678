"""A real run of a grid, as `coevolab run` makes it, that a test can kill at a point it knows.

    python tests/killable_run.py RUN_DIR GRID.toml [--cut-write-after K] [--block-after K]
    python tests/killable_run.py RUN_DIR --resume [--cut-write-after K] [--block-after K]
    python tests/killable_run.py RUN_DIR GRID.toml --seed-block B [--block-after K]

The run goes through harness.experiment.runner.execute (with --seed-block, seed block B of the grid through
harness.experiment.blocks.run_block), holding the run directory's lock as the command line's does (shared with other
blocks for a seed block, which also holds its block's own lock). After the checkpoint of iteration K (K complete
iterations) it prints `checkpointed K` and then, as asked:

--block-after K: waits on its standard input, which the test never writes: the process sits between two iterations
  with checkpoint K complete until the test kills it.
--cut-write-after K: prints `limit N`, then lets the kernel kill it in the middle of the next file it writes (the
  next checkpoint's temporary file): a file size limit (RLIMIT_FSIZE) of N bytes, half the size of checkpoint K, and
  SIGXFSZ at its default action (terminate; Python ignores it otherwise). The kernel writes the first N bytes, then
  kills the process on the write past them; no handler, `except` or `finally` of the harness runs, as under SIGKILL.
"""

from __future__ import annotations

import argparse
import resource
import signal
import sys
from pathlib import Path

from harness.grid.sharding import use_every_cpu_core

# As the command line does, before JAX starts: the run's shards (and so its checkpoint's shapes) are the CLI's.
use_every_cpu_core()

from harness.common.locks import holding_run_dir  # noqa: E402  (after the device count is set)
from harness.common.run_files import CHECKPOINT_FILE  # noqa: E402
from harness.experiment.blocks import block_run_dir, run_block  # noqa: E402
from harness.experiment.runner import SilentProgress, execute, load_spec  # noqa: E402
from harness.grid.compile_cache import enable_compilation_cache  # noqa: E402
from harness.grid.conditions import load_grid  # noqa: E402


class StopAfterCheckpoint(SilentProgress):
    """Says when each checkpoint is complete; blocks after one, or has the next write cut, as asked."""

    def __init__(self, run_dir: Path, block_after: int | None, cut_write_after: int | None) -> None:
        self.run_dir, self.block_after, self.cut_write_after = run_dir, block_after, cut_write_after

    def iteration_done(self, iteration: int) -> None:
        completed = iteration + 1  # the runner calls this after saving checkpoint `completed`
        print(f"checkpointed {completed}", flush=True)
        if completed == self.cut_write_after:
            limit = (self.run_dir / CHECKPOINT_FILE).stat().st_size // 2
            print(f"limit {limit}", flush=True)
            resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
            signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        if completed == self.block_after:
            sys.stdin.read()  # until the test kills this process
            raise SystemExit("standard input closed before the test killed this run")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="killable_run", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("grid", nargs="?", type=Path, help="the condition file of a fresh run")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--seed-block", type=int, help="run this seed block of the grid (as coevolab run --block)")
    parser.add_argument("--block-after", type=int)
    parser.add_argument("--cut-write-after", type=int)
    args = parser.parse_args(argv)
    if args.resume == (args.grid is not None):
        parser.error("give a condition file or --resume, not both")
    if args.resume:
        spec = load_spec(args.run_dir)
    else:
        spec = load_grid(args.grid)
        args.run_dir.mkdir(parents=True, exist_ok=args.seed_block is not None)
    enable_compilation_cache()
    progress = StopAfterCheckpoint(args.run_dir, args.block_after, args.cut_write_after)
    with holding_run_dir(args.run_dir, shared=args.seed_block is not None):
        if args.seed_block is None:
            execute(spec, args.run_dir, progress, resume=args.resume)
        else:
            run_block(spec, args.seed_block, block_run_dir(spec, args.seed_block, args.run_dir), progress)


if __name__ == "__main__":
    main()
