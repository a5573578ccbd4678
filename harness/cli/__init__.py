"""The `coevolab` command: run a grid (whole, or one seed block of it: --block K), merge a run's blocks, re-render a
report, verify a run directory, list a file's conditions.

Exit codes: 0 success (the numbers are the run's); 1 failure during a run (a file that could not be written, e.g. on a
full disk, is named with the command to resume; the last checkpoint stays as it was); 2 refused before anything is
written: bad input (condition file, arguments, a directory that cannot be written, a block out of range or of another
grid, a merge with blocks missing), a run directory whose files do not verify or read back, a checkpoint of another
run, a directory another writer holds; 3 the grid finished but some runs diverged; 130 interrupted by Ctrl-C, 143
stopped by SIGTERM (a scheduler preempting the job), at any moment of any command, start-up included: both stop the
same way and leave the directory as a rerun of the same command continues it. Every failure is one line on stderr.

This module imports nothing heavy: the stop signals are caught before the command's own modules (JAX, pandas) load.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from harness.cli.arguments import (
    EXIT_BAD_INPUT,
    EXIT_DIVERGED,
    EXIT_FAILURE,
    EXIT_OK,
    UsageError,
    seed_count,
    seed_list,
)
from harness.common import stop_signals
from harness.common.stop_signals import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_DIVERGED",
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "Terminated",
    "UsageError",
    "build_parser",
    "command_line",
    "main",
    "run_stoppable",
    "seed_count",
    "seed_list",
]


def build_parser() -> argparse.ArgumentParser:
    """The `coevolab` command's parser (`harness.cli.dispatch`, imported on first use)."""
    from harness.cli.dispatch import build_parser

    return build_parser()


def _shows_progress(argv: list[str]) -> bool:
    """Whether the command shows its progress on the console: `run` (and `merge`) without --quiet."""
    return bool(argv) and argv[0] in ("run", "merge") and not {"--quiet", "--help", "-h"} & set(argv)


def command_line() -> int:
    """The `coevolab` program: `main` of the process's arguments, as the whole process (a stop that arrives after the
    command ended, while the process shuts down, still exits 130 / 143; the interpreter's teardown, where a stop could
    not be handled, is skipped: `stop_signals.end_after_exit_handlers`)."""
    stop_signals.end_after_exit_handlers()
    try:
        code = main(whole_process=True)
    except SystemExit as done:  # argparse's --help and --version end this way
        if not (done.code is None or isinstance(done.code, int)):
            raise
        code = done.code or 0
    stop_signals.ending_with(code)
    return code


def main(argv: list[str] | None = None, *, whole_process: bool = False) -> int:
    """The `coevolab` command line: its exit code (see the module). whole_process: the command is the process
    (`command_line`), not a call inside a longer-lived one."""
    started = time.perf_counter()  # before the heavy imports, so the run's phases account for them
    if _shows_progress(sys.argv[1:] if argv is None else argv):
        # a first line at once: loading JAX and the grid takes seconds before the run's own progress can start
        print(f"[{0.0:7.1f}s] starting: loading JAX and the grid", flush=True)

    def command() -> int:
        with stop_signals.deferred():  # JAX's native extensions abort the process if a stop cuts their import
            from harness.cli.dispatch import dispatch

        return dispatch(argv, started)

    return run_stoppable(command, whole_process)


def _ended_by_stop(terminated: bool) -> int:
    """The exit of a command a stop ended before it finished: later stops only recorded, one line, 143 or 130."""
    stop_signals.handling()
    how = stop_signals.stop_name(terminated)
    print(f"coevolab: {how} before the command finished; run the same command again to finish it", file=sys.stderr)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


def run_stoppable(command: Callable[[], int], whole_process: bool = False) -> int:
    """`command()`'s exit code, or a stop's (130 / 143, with one line on stderr) when Ctrl-C or SIGTERM came while it
    ran: whether the stop reached `command` as KeyboardInterrupt, as an error of another kind that native code made of
    it, or not at all (swallowed on the way); or after it returned, before the handlers are handed back (its code is
    then the stop's, and the line says the command had finished). whole_process: as `stop_signals.caught`'s."""
    try:
        with stop_signals.caught(whole_process):
            try:
                code = command()
                stop_signals.returned()  # from here a stop is recorded, never raised, while `caught` ends
            except KeyboardInterrupt as stop:
                return _ended_by_stop(stop_signals.terminated(stop))
            except Exception:
                stopped = stop_signals.exit_code()
                if stopped is None:
                    raise
                # A stop that native code turned into an error of its own (matplotlib's renderer raises "Invalid
                # bounding box" when a stop lands mid-draw): the stop's exit and one line, not the error's traceback.
                return _ended_by_stop(stopped == EXIT_TERMINATED)
            stopped = stop_signals.exit_code()
            if stopped is not None and code != stopped:
                how = stop_signals.stop_name(stopped == EXIT_TERMINATED)
                if stop_signals.stopped_after_return():
                    print(f"coevolab: {how} after the command finished", file=sys.stderr)
                else:  # a stop that code on the way swallowed (a callback, a library catching it): never exit 0
                    print(f"coevolab: {how} as the command ran; check its files (coevolab verify DIR)", file=sys.stderr)
                return stopped
            return code
    except KeyboardInterrupt as stop:
        # A stop in the moments no handler above covers: as `caught` installs its handlers, or a second stop before
        # the first is marked as handled.
        return _ended_by_stop(stop_signals.terminated(stop))
