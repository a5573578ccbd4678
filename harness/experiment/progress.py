"""How an experiment's progress is shown on a console: plain lines for logs and pipes, a progress bar on a terminal."""

from __future__ import annotations

import sys
import time

from harness.experiment.runner import Progress, SilentProgress


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


def console_progress(quiet: bool = False) -> Progress:
    """How the command line shows an experiment: nothing (quiet), a progress bar on a terminal, else plain lines."""
    if quiet:
        return SilentProgress()
    return RichProgress() if sys.stdout.isatty() else PlainProgress()
