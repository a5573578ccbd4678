"""Ctrl-C (SIGINT) and SIGTERM end `coevolab` at any moment with 130 / 143 and at most one line on stderr, never a
traceback and never an exit 0 (harness.common.stop_signals): at start-up (while JAX's native modules load), during a
run's report phase, during `coevolab report` and `coevolab merge`; and the run directory stays one that the same
command, or `--resume`, finishes.

The report-phase check is the issue's at 20 tries per signal behind the heavy marker (make test-all); make test
sends each signal once there, and once at start-up. The grid is tests/run_directories.py's shape, whose programs
the session's compile cache holds."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import cli
from harness.common import stop_signals
from tests.run_directories import grid_file, in_process
from tests.stop_handlers import wait_for_stop_handlers

ROOT = Path(__file__).resolve().parent.parent
STOPS = {"SIGINT": (signal.SIGINT, cli.EXIT_INTERRUPTED), "SIGTERM": (signal.SIGTERM, cli.EXIT_TERMINATED)}


@pytest.fixture(autouse=True)
def _compile_cache(subprocess_compile_cache: Path) -> Path:
    return subprocess_compile_cache


def _start(*args: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", *map(str, args)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _read_stdout(process: subprocess.Popen, seconds: float, says: str | None = None) -> str:
    """What `process` writes to stdout for `seconds`, or until a line with `says`: read from the pipe as it comes (never
    through the file object's buffer, which reads ahead, so `communicate` gets the rest)."""
    assert process.stdout is not None
    descriptor, came, deadline = process.stdout.fileno(), b"", time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and not (says and says.encode() in came.rpartition(b"\n")[0]):
        if select.select([descriptor], [], [], left)[0]:
            chunk = os.read(descriptor, 65536)
            if not chunk:  # the process closed its stdout: it has ended
                break
            came += chunk
    return came.decode()


def _wait_for_line(process: subprocess.Popen, says: str) -> str:
    came = _read_stdout(process, 300, says)
    assert says in came, f"ended before a line with {says!r}: {came} {process.communicate()}"
    return came


def _stopped(process: subprocess.Popen, name: str, finished_first: bool = False) -> tuple[str, str]:
    """Send `name` to `process`; its exit must be that signal's code, with no traceback and one line at most.
    finished_first: the process had printed its last line (the command finished) before the signal was sent; it may
    then also exit as the command did (0), where the signal came too late for any code of its own to run."""
    signum, code = STOPS[name]
    os.kill(process.pid, signum)
    stdout, stderr = process.communicate(timeout=300)
    allowed = (code, cli.EXIT_OK) if finished_first else (code,)
    assert process.returncode in allowed, (process.returncode, finished_first, stdout, stderr)
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert len(stderr.strip().splitlines()) <= 1, stderr
    return stdout, stderr


def _stop_in_report_phase(root: Path, name: str, delay: float) -> None:
    grid = grid_file(root, "grid", iterations=2)
    out = root / "run"
    run = _start("run", grid, "--out", out)  # figures drawn: a report phase of seconds
    came = _wait_for_line(run, "] report: ")
    # The run's last line is its directory, printed as the command returns (flushed at once).
    came += _read_stdout(run, delay)
    stdout, _ = _stopped(run, name, finished_first=str(out) in came.splitlines())
    stdout = came + stdout
    # Stopped before its manifest, the run resumes and finishes; stopped after it, it verifies.
    if "--resume" in stdout:
        code, _, err = in_process("run", "--resume", out, "--quiet", "--no-figures")
        assert code == cli.EXIT_OK, err
    code, _, err = in_process("verify", out)
    assert code == cli.EXIT_OK, err


@pytest.mark.parametrize(("name", "delay"), [("SIGINT", 0.2), ("SIGTERM", 1.5)])
def test_a_stop_in_the_report_phase_ends_the_run_resumably(tmp_path: Path, name: str, delay: float) -> None:
    _stop_in_report_phase(tmp_path, name, delay)


@pytest.mark.heavy
@pytest.mark.parametrize("name", list(STOPS))
def test_a_stop_in_the_report_phase_twenty_times(tmp_path: Path, name: str) -> None:
    for attempt in range(20):
        root = tmp_path / str(attempt)
        root.mkdir()
        _stop_in_report_phase(root, name, delay=0.25 * attempt)


@pytest.mark.parametrize(("name", "delay"), [("SIGINT", 0.0), ("SIGTERM", 0.3)])
def test_a_stop_at_start_up_is_one_line(tmp_path: Path, name: str, delay: float) -> None:
    """While the command's modules (JAX's among them) load: a stop is raised once they have, never inside them."""
    listing = _start("list", "tiny")
    wait_for_stop_handlers(listing)  # then `delay` into the imports of the command's modules
    time.sleep(delay)
    if listing.poll() is not None:
        pytest.skip("the command finished before the signal")  # a fast machine
    _, stderr = _stopped(listing, name)
    assert stderr.startswith("coevolab: ") and "run the same command again" in stderr


@pytest.mark.parametrize("name", ["SIGINT"])
def test_a_stop_during_coevolab_report_leaves_it_to_be_run_again(tmp_path: Path, name: str) -> None:
    out = tmp_path / "run"
    code, _, err = in_process("run", grid_file(tmp_path, "grid", iterations=2), "--out", out, "--quiet")
    assert code == cli.EXIT_OK, err
    report = _start("report", out)
    wait_for_stop_handlers(report)
    time.sleep(4.0)  # past start-up: drawing figures
    if report.poll() is None:
        _stopped(report, name)
    code, _, err = in_process("report", out, "--no-figures")
    assert code == cli.EXIT_OK, err
    assert in_process("verify", out)[0] == cli.EXIT_OK


def test_a_stop_that_a_callback_swallowed_is_raised_again() -> None:
    """A KeyboardInterrupt raised inside a garbage-collection callback is printed and dropped by Python; the
    command's handler sends it again, so the main thread raises it in its own code."""
    import gc

    def swallowing_callback(phase: str, info: dict) -> None:
        del info
        if phase == "start":
            gc.callbacks.remove(swallowing_callback)
            os.kill(os.getpid(), signal.SIGINT)  # handled in this callback: raised here, and ignored by Python
            for _ in range(1000):  # bytecode, so that the handler runs inside the callback
                pass

    with stop_signals.caught(), pytest.raises(KeyboardInterrupt):
        gc.callbacks.append(swallowing_callback)
        gc.collect()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.01)
    assert stop_signals.received[:2] == [signal.SIGINT, signal.SIGINT]


def test_exit_code_never_zero_after_a_stop() -> None:
    """A stop that code caught and went on from still gives the command its exit code."""
    with stop_signals.caught():
        assert stop_signals.exit_code() is None
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        except KeyboardInterrupt as stop:
            assert isinstance(stop, stop_signals.Terminated)
        assert stop_signals.exit_code() == cli.EXIT_TERMINATED


def _exit_as_ray_does(signum: int, frame: object) -> None:
    """The SIGTERM handler ray.init installs first thing and keeps while it joins the cluster."""
    del frame
    sys.exit(signum)


def _under_a_library_handler_until_stopped() -> None:
    with stop_signals.under_library_handler():
        signal.signal(signal.SIGTERM, _exit_as_ray_does)
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.01)


def test_a_sigterm_under_a_library_handler_ends_the_command_as_ours_would() -> None:
    """A SIGTERM while ray.init runs under its own handler (which exits with 15; once in CI a stop 2 s into a Ray
    run's start ended it with 15, not 143) raises `Terminated`, is recorded, and our handlers are back after."""
    with stop_signals.caught():
        with pytest.raises(KeyboardInterrupt) as stop:
            _under_a_library_handler_until_stopped()
        assert isinstance(stop.value, stop_signals.Terminated)
        assert stop_signals.received == [signal.SIGTERM]
        assert stop_signals.exit_code() == cli.EXIT_TERMINATED
        assert signal.getsignal(signal.SIGTERM) is stop_signals._raise_stop


def test_a_library_sigterm_that_a_callback_swallowed_is_raised_again() -> None:
    """The library's SystemExit(15) raised inside a garbage-collection callback (which Python prints and drops) is
    recorded as a SIGTERM and sent again, so the command still ends with 143."""
    import gc

    def swallowing_callback(phase: str, info: dict) -> None:
        del info
        if phase == "start":
            gc.callbacks.remove(swallowing_callback)
            os.kill(os.getpid(), signal.SIGTERM)  # handled by the library's handler inside this callback
            for _ in range(1000):
                pass

    with stop_signals.caught(), pytest.raises(stop_signals.Terminated):
        with stop_signals.under_library_handler():
            signal.signal(signal.SIGTERM, _exit_as_ray_does)
            gc.callbacks.append(swallowing_callback)
            gc.collect()
            time.sleep(2)  # the resend lands here, under the library's handler again
    assert stop_signals.received[:2] == [signal.SIGTERM, signal.SIGTERM]


def _exit_as_a_local_ray_node_does(signum: int, frame: object) -> None:
    """The SIGTERM handler of the local node ray.init starts: it stops Ray's processes and exits with 1."""
    del signum, frame
    sys.exit(1)


def test_a_sigterm_under_a_library_handler_that_exits_with_another_code_is_still_a_sigterm() -> None:
    """Whatever code the library's handler exits with, a SIGTERM that came is the command's 143; an exit of the
    library's own, with no SIGTERM, goes through as it is."""
    with stop_signals.caught():
        with pytest.raises(stop_signals.Terminated), stop_signals.under_library_handler():
            signal.signal(signal.SIGTERM, _exit_as_a_local_ray_node_does)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        assert stop_signals.exit_code() == cli.EXIT_TERMINATED
        stop_signals.received.clear()
        with pytest.raises(SystemExit) as ended, stop_signals.under_library_handler():
            sys.exit(3)
        assert ended.value.code == 3
        assert stop_signals.received == []


def test_a_library_sigterm_outside_a_command_is_the_librarys_own() -> None:
    """Outside `caught` (a lab's program calling the API), the library's handler does what it does: SystemExit(15)."""
    before = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as ended:
            _under_a_library_handler_until_stopped()
        assert ended.value.code == signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_resend_sends_nothing_once_the_stop_is_handled_or_the_command_ended() -> None:
    """A stop that a callback swallowed is sent again from a timer (`test_a_stop_that_a_callback_swallowed_is_raised_
    again`). A timer that fires once the command is handling a stop, or after `caught` has put the handlers back,
    sends nothing: a second stop could cut the clean-up, and one under Python's own handler would end the process
    with -2 instead of 130 (seen once in make test, a stop during `coevolab report`)."""
    with stop_signals.caught():
        stop_signals.received.append(signal.SIGINT)
        stop_signals.handling()
        stop_signals._resend(signal.SIGINT)  # as the timer does when it fires
        time.sleep(0.2)
        assert stop_signals.received == [signal.SIGINT]  # no second stop reached the handler
    stop_signals._resend(signal.SIGINT)
    time.sleep(0.2)  # a stop sent now would raise KeyboardInterrupt here, under the default handler


@pytest.mark.parametrize("name", sorted(STOPS))
def test_an_error_that_a_stop_turned_into_ends_with_the_stops_code_and_one_line(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Native code that catches a stop and raises an error of its own (matplotlib's renderer, stopped mid-draw, raises
    "Invalid bounding box") ends the command with the stop's code and one line, not the error's traceback and exit 1;
    the same error with no stop before it stays the command's error."""
    signum, expected = STOPS[name]

    def drawing_stopped_mid_figure() -> int:
        try:
            os.kill(os.getpid(), signum)
            time.sleep(1)
        except KeyboardInterrupt:
            pass  # what a renderer's own clean-up does with it
        raise ValueError("Invalid bounding box")

    assert cli.run_stoppable(drawing_stopped_mid_figure) == expected
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "run the same command again" in lines[0], lines

    def failing() -> int:
        raise ValueError("Invalid bounding box")

    with pytest.raises(ValueError, match="bounding box"):
        cli.run_stoppable(failing)


def _python(program: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`program` run by a Python process of its own, with this package importable."""
    return subprocess.run(
        [sys.executable, "-c", program, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.parametrize("name", sorted(STOPS))
def test_a_stop_after_the_command_ended_exits_with_its_code_and_one_line(name: str) -> None:
    """A stop that lands once the command has returned, while the process shuts down (JAX's teardown takes a moment;
    seen once in twenty report-phase stops as exit -15), exits with the stop's code and one line, as the `coevolab`
    program (`cli.command_line`) runs its command: a real process that stops itself after its command returned."""
    signum, expected = STOPS[name]
    program = (
        "import os, time\n"
        "from harness import cli\n"
        "cli.run_stoppable(lambda: 0, whole_process=True)\n"
        f"os.kill(os.getpid(), {int(signum)})\n"
        "time.sleep(30)\n"
    )
    result = _python(program)
    assert result.returncode == expected, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "after the command ended" in lines[0], lines


# A program that runs a command as the `coevolab` program does (`cli.command_line`), then a library's exit handler
# (registered after the program's own, so it runs before it: as Ray's and JAX's do) and an object that only the
# interpreter's teardown would finalise.
_PROGRAM_ENDING = """
import atexit, os, sys, time
from pathlib import Path
from harness import cli
from harness.common import stop_signals

stop_signals.end_after_exit_handlers()
code = cli.run_stoppable(lambda: 0, whole_process=True)
stop_signals.ending_with(code)

class FinalisedInTeardown:
    # What it needs is bound now: the teardown has already cleared sys.argv and may have cleared Path.
    def __del__(self, write=Path.write_text, marker=Path(sys.argv[1])):
        write(marker, "the interpreter's teardown ran")

kept = FinalisedInTeardown()
if sys.argv[2] != "none":
    atexit.register(lambda: (os.kill(os.getpid(), int(sys.argv[2])), time.sleep(30)))
sys.exit(code)
"""


@pytest.mark.parametrize("name", [*sorted(STOPS), None])
def test_the_program_ends_after_its_exit_handlers_without_the_teardown(tmp_path: Path, name: str | None) -> None:
    """The `coevolab` program ends once Python's exit handlers have run, with its command's exit code, without the
    interpreter's teardown (most of a second after a JAX command, in which a stop can no longer be handled: it killed
    two processes whose command had finished, -2 and -15, in forty report-phase stops). A stop sent from an exit
    handler still exits 130 / 143 with one line."""
    marker = tmp_path / "teardown"
    signum, expected = STOPS[name] if name else (None, cli.EXIT_OK)
    result = _python(_PROGRAM_ENDING, str(marker), str(int(signum)) if signum else "none")
    assert result.returncode == expected, (result.returncode, result.stderr)
    assert not marker.exists()  # the teardown never ran
    lines = result.stderr.strip().splitlines()
    assert lines == [] if name is None else (len(lines) == 1 and "after the command ended" in lines[0]), lines


@pytest.mark.parametrize("name", sorted(STOPS))
def test_a_stop_after_the_command_returned_is_recorded_not_raised(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stop that lands once the command has returned, while `caught` hands the handlers back, is recorded, never
    raised where nothing would catch it: the exit is the stop's, with one line saying the command had finished. The
    command marks its return itself here (as `run_stoppable` does right after it), then stops."""
    signum, expected = STOPS[name]

    def returns_then_stopped() -> int:
        stop_signals.returned()
        os.kill(os.getpid(), signum)
        time.sleep(0.2)  # the handler runs here and, the command having returned, only records the stop
        return cli.EXIT_OK

    assert cli.run_stoppable(returns_then_stopped) == expected
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "after the command finished" in lines[0], lines
