"""Waiting, in a test, until a `coevolab` process catches stop signals (harness.common.stop_signals): only then is a
signal sent to it a test of how the command handles it, not of Python's start-up (whose defaults print a traceback for
Ctrl-C and die silently on SIGTERM), however loaded the machine is."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path


def wait_for_stop_handlers(process: subprocess.Popen, timeout: float = 120.0) -> None:
    """Return once `process` catches SIGTERM (its SigCgt mask in /proc: Python catches SIGINT from the start, and
    SIGTERM only once `coevolab` has set its handlers)."""
    status, deadline = Path(f"/proc/{process.pid}/status"), time.monotonic() + timeout
    bit = 1 << (signal.SIGTERM - 1)
    while time.monotonic() < deadline and process.poll() is None:
        caught = next((line for line in status.read_text().splitlines() if line.startswith("SigCgt:")), "SigCgt: 0")
        if int(caught.split()[1], 16) & bit:
            return
        time.sleep(0.01)
    raise AssertionError(f"{process.args} never caught SIGTERM (exit {process.poll()})")
