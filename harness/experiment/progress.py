"""How an experiment's progress is shown on a console: plain lines for logs and pipes, a progress bar on a terminal.

No phase is silent for long: while one runs (pretraining, a compile of minutes, an outer iteration of a large grid), a
line says how long it has run every HEARTBEAT_SECONDS, from a daemon thread that the phase's end stops.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

from harness.experiment.runner import Progress, SilentProgress

HEARTBEAT_SECONDS = 10.0
JOIN_SECONDS = 1.0  # how long stopping a heartbeat waits for its thread


class Heartbeat:
    """Calls say(seconds since it started) every `every` seconds until stopped."""

    def __init__(self, say: Callable[[float], None], every: float) -> None:
        self._stopped = threading.Event()
        self._began = time.perf_counter()
        self._thread = threading.Thread(target=self._beat, args=(say, every), daemon=True)
        self._thread.start()

    def _beat(self, say: Callable[[float], None], every: float) -> None:
        while not self._stopped.wait(every):
            say(time.perf_counter() - self._began)

    def stop(self) -> None:
        self._stopped.set()
        # Bounded: a stop signal that lands in the main thread between a lock's acquire and the `with` block that
        # releases it leaves the lock held, and a heartbeat waiting on it would never end; the thread is a daemon.
        self._thread.join(timeout=JOIN_SECONDS)


class PlainProgress:
    """One line per phase and per iteration, for logs and pipes, and one every `heartbeat` seconds while a phase or
    an iteration runs."""

    def __init__(self, heartbeat: float = HEARTBEAT_SECONDS, started: float | None = None) -> None:
        self.start = time.perf_counter() if started is None else started  # lines give the time since this
        self.total = 0
        self.every = heartbeat
        self._beating: Heartbeat | None = None
        self._lock = threading.RLock()  # re-entrant: the main thread still prints if a stop left it held

    def _print(self, text: str) -> None:
        with self._lock:  # the heartbeat's thread prints too: one whole line at a time
            print(f"[{time.perf_counter() - self.start:7.1f}s] {text}", flush=True)

    def _beat(self, what: str) -> None:
        """Stop the running heartbeat; start one for `what`."""
        self._quiet()
        self._beating = Heartbeat(lambda seconds: self._print(f"{what}: running for {seconds:.0f}s"), self.every)

    def _quiet(self) -> None:
        if self._beating is not None:
            self._beating.stop()
            self._beating = None

    def phase(self, name: str, detail: str = "") -> None:
        self._print(f"{name}: {detail}" if detail else name)
        self._beat(name)

    def phase_done(self, name: str, seconds: float) -> None:
        self._quiet()
        self._print(f"{name} done in {seconds:.1f}s")

    def iterations(self, done: int, total: int) -> None:
        self.total, self.train_start, self.first = total, time.perf_counter(), done
        self._print(f"train: iterations {done + 1}..{total}")
        self._beat(f"iteration {done + 1}/{total}")

    def iteration_done(self, iteration: int) -> None:
        finished = iteration + 1 - self.first
        elapsed = time.perf_counter() - self.train_start
        remaining = elapsed / finished * (self.total - iteration - 1)
        self._quiet()
        self._print(f"iteration {iteration + 1}/{self.total} ({elapsed:.0f}s elapsed, ETA {remaining:.0f}s)")
        if iteration + 1 < self.total:
            self._beat(f"iteration {iteration + 2}/{self.total}")

    def close(self) -> None:
        self._quiet()


class RichProgress(PlainProgress):
    """Phases as status lines and a progress bar over outer iterations, on a terminal."""

    def __init__(self, heartbeat: float = HEARTBEAT_SECONDS, started: float | None = None) -> None:
        super().__init__(heartbeat, started)
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
        with self._lock:
            self.console.print(f"[dim]{time.perf_counter() - self.start:7.1f}s[/dim] {text}")

    def iterations(self, done: int, total: int) -> None:
        self._quiet()  # the bar shows the time from here on
        self.bar.start()
        self.task = self.bar.add_task("train", total=total, completed=done)

    def iteration_done(self, iteration: int) -> None:
        self.bar.update(self.task, completed=iteration + 1)

    def phase_done(self, name: str, seconds: float) -> None:
        if name == "train":
            self.bar.stop()
        super().phase_done(name, seconds)

    def close(self) -> None:
        self._quiet()
        self.bar.stop()


def console_progress(quiet: bool = False, started: float | None = None) -> Progress:
    """How the command line shows an experiment: nothing (quiet), a progress bar on a terminal, else plain lines;
    times counted from `started` (the process's start, by time.perf_counter), else from now."""
    if quiet:
        return SilentProgress()
    return RichProgress(started=started) if sys.stdout.isatty() else PlainProgress(started=started)
