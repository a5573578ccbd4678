"""Ctrl-C (SIGINT) and SIGTERM end a command wherever they arrive: one exception, raised in the main thread, that
every command's clean-up already handles, and an exit code (130 / 143) that never turns back into 0.

Python raises KeyboardInterrupt for SIGINT where the main thread is; SIGTERM would kill the process without clean-up,
so it raises `Terminated` (a KeyboardInterrupt) the same way. Two ways a raised stop can get lost are closed here:
- An exception raised while Python runs a garbage-collection callback (JAX registers one) or a finaliser is printed
  as "Exception ignored in ..." and dropped. `sys.unraisablehook` sees it, and the stop is sent again a moment later,
  when the main thread is back in the command's own code.
- Library code that catches the exception and goes on (or raises a plain KeyboardInterrupt for a SIGTERM) cannot
  hide that a signal came: `received` keeps it, and `exit_code` gives the command's exit code from it.
Libraries that install handlers of their own (Ray's ray.init makes SIGTERM exit with 15) are followed by `catch`
again, and a call that runs under such a handler for a while (ray.init: seconds) goes inside `under_library_handler`,
which turns the library's SIGTERM exit into ours.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended
EXIT_TERMINATED = 143  # 128 + SIGTERM
# How long a stop that a callback swallowed waits before it is sent again: the callback has returned by then.
_RESEND_SECONDS = 0.05


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt, so that a preempted command stops the same way."""


# Every stop signal this process has received since `caught` began, in order.
received: list[int] = []
# returned_at: how many stops had come when the command returned (`returned`), None before.
# library: inside `under_library_handler`, the descriptor its wakeup bytes are read from (else None), and
# library_signals the bytes read so far.
_state: dict[str, Any] = {
    "handling": False,
    "resend": None,
    "active": False,
    "returned_at": None,
    "library": None,
    "library_signals": b"",
}
# Held while a resend decides and sends, and while `caught` ends: a stop is never sent again once the command handles
# one or has put the handlers before it back (where it would end the process by Python's own handler, exit -2).
_resend_lock = threading.Lock()


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    del frame
    received.append(signum)
    if not _state["handling"]:  # a second Ctrl-C during the clean-up of the first is only recorded
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def _resend_swallowed(unraisable: Any) -> None:
    """sys.unraisablehook: a stop raised inside a callback, which Python ignores, is sent again from another thread
    once the callback has returned, so that the main thread raises it in the command's own code. A library's SIGTERM
    exit inside `under_library_handler` is such a stop too."""
    library_sigterm = _is_library_sigterm(unraisable.exc_value)
    if library_sigterm:
        received.append(signal.SIGTERM)  # the library's handler records nothing of its own
    if (library_sigterm or isinstance(unraisable.exc_value, KeyboardInterrupt)) and received and not _state["handling"]:
        pending = _state["resend"]
        if pending is None or not pending.is_alive():  # one resend at a time: a second could cut the clean-up
            timer = threading.Timer(_RESEND_SECONDS, _resend, (received[-1],))
            timer.daemon = True
            timer.start()
            _state["resend"] = timer
        return
    sys.__unraisablehook__(unraisable)


def _is_library_sigterm(error: BaseException | None) -> bool:
    return isinstance(error, SystemExit) and _library_sigterm_came()


def _resend(signum: int) -> None:
    """Send the stop again, unless by now the command is handling one or has left `caught`."""
    with _resend_lock:
        if _state["active"] and not _state["handling"]:
            os.kill(os.getpid(), signum)


def _install() -> None:
    signal.signal(signal.SIGINT, _raise_stop)
    signal.signal(signal.SIGTERM, _raise_stop)
    sys.unraisablehook = _resend_swallowed


def catch() -> None:
    """Inside `caught` (a `coevolab` command), the handlers again, after a library replaced them (ray.init makes
    SIGTERM exit with 15). Elsewhere (a lab's own program calling the API) nothing: its handlers are its own."""
    if _state["active"] and threading.current_thread() is threading.main_thread():
        _install()


@contextlib.contextmanager
def under_library_handler() -> Iterator[None]:
    """Around a library call that installs a SIGTERM handler of its own and runs under it, and whose handler exits
    (ray.init's exits with 15 while it joins a cluster for seconds; the local node it starts exits with 1): a SIGTERM
    inside is recorded and raised as `Terminated`, as ours would raise it, and our handlers are back however the call
    ends (`catch`). The signal is seen by the interpreter's wakeup descriptor, which gets one byte per signal whatever
    handler runs, so an exit for another reason goes through unchanged. Outside `caught` (a lab's program calling the
    API) nothing changes: the library's handlers are the program's."""
    if not _state["active"] or threading.current_thread() is not threading.main_thread():
        yield
        return
    reader, writer = os.pipe()
    for end in (reader, writer):
        os.set_blocking(end, False)  # the interpreter writes from its C handler; never block there or here
    earlier_descriptor = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    _state.update(library=reader, library_signals=b"")
    try:
        yield
    except SystemExit:
        if not _library_sigterm_came():
            raise
        received.append(signal.SIGTERM)
        raise Terminated from None
    finally:
        signal.set_wakeup_fd(earlier_descriptor)
        _state["library"] = None
        os.close(reader)
        os.close(writer)
        catch()


def _library_sigterm_came() -> bool:
    """Inside `under_library_handler`: whether a SIGTERM has come since it began (the wakeup bytes; read once)."""
    reader = _state["library"]
    if reader is None:
        return False
    with contextlib.suppress(BlockingIOError):
        _state["library_signals"] = _state["library_signals"] + os.read(reader, 4096)
    return signal.SIGTERM in _state["library_signals"]


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    """A stop after the command ended, while the process shuts down (JAX's and the interpreter's teardown take a
    moment): the stop's exit code at once, not a process killed by the signal (-15) or a KeyboardInterrupt in the
    teardown. The command writes nothing more by then; only the exit code says a stop came."""
    del frame
    earlier = exit_code()  # a command that a stop already ended has said so in its line
    code = earlier or (EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED)
    if earlier is None:
        with contextlib.suppress(Exception):
            print(f"coevolab: {stop_name(code == EXIT_TERMINATED)} after the command ended", file=sys.stderr)
    _flush_standard_streams()
    os._exit(code)


def _flush_standard_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


@contextlib.contextmanager
def caught(whole_process: bool = False) -> Iterator[None]:
    """Inside: stop signals raise as `catch` makes them (`received` starts empty); after, the handlers before it, or
    where the command is the whole process (`coevolab` on the command line: whole_process), handlers that end the
    process at once with the stop's exit code (`_exit_at_once`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), sys.unraisablehook
    received.clear()
    _state.update(handling=False, resend=None, active=True, returned_at=None)
    _install()
    try:
        yield
    finally:
        with _resend_lock:  # a resend under way has sent its signal; none is sent after this
            _state["active"] = False
        if _state["resend"] is not None:
            _state["resend"].cancel()
        # signal.signal runs the handlers of signals already delivered (ours: a stop while handling is only recorded)
        # before it replaces them.
        after = (_exit_at_once, _exit_at_once) if whole_process else before[:2]
        signal.signal(signal.SIGINT, after[0])
        signal.signal(signal.SIGTERM, after[1])
        sys.unraisablehook = before[2]


# The exit code the `coevolab` program ends with once Python's exit handlers have run (`ending_with`).
_ending: dict[str, int | None] = {"code": None}


def end_after_exit_handlers() -> None:
    """For the `coevolab` program, first thing: once Python's exit handlers (atexit: Ray's shutdown, JAX's, logging's)
    have run, the process ends at once with the command's exit code (`ending_with`), without the interpreter's
    teardown. That teardown (freeing modules, JAX's native runtime) takes most of a second, and a stop that lands in
    it is never handled: twice in forty report-phase stops it killed a process whose command had finished (-2, -15).
    Registered before any library's handler, so it runs after all of them. Nothing is written in the teardown: a
    command's files are closed when it returns, and the standard streams are flushed here."""
    _ending["code"] = None
    atexit.register(_end_now)


def ending_with(code: int) -> None:
    """The exit code the process ends with after its exit handlers (`end_after_exit_handlers`)."""
    _ending["code"] = code


def _end_now() -> None:
    code = _ending["code"]
    if code is None:  # the command never returned (an error's traceback): Python ends the process its own way
        return
    _flush_standard_streams()
    os._exit(code)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Inside: a stop is recorded, not raised; on leaving, the first one recorded is raised. For code that an
    exception must not cut (a native extension's import: jaxlib's aborts the process when one lands in its init)."""
    was = _state["handling"]
    _state["handling"] = True
    try:
        yield
    finally:
        _state["handling"] = was
    if received and not was:
        raise Terminated if signal.SIGTERM in received else KeyboardInterrupt


def returned() -> None:
    """The command has returned: a stop from here on is recorded (so the exit code is still the stop's), never raised
    where nothing would catch it (as `caught` hands the handlers back)."""
    if _state["returned_at"] is None:
        _state["returned_at"] = len(received)
    _state["handling"] = True


def stopped_after_return() -> bool:
    """Whether every stop received came after the command returned (`returned`)."""
    at = _state["returned_at"]
    return at is not None and 0 == at < len(received)


def handling() -> None:
    """A stop is being handled (the command is cleaning up to exit 130 / 143): later signals are recorded, not
    raised, so that the clean-up finishes."""
    _state["handling"] = True


def terminated(stop: BaseException | None = None) -> bool:
    """Whether the stop being handled (or the last received) is a SIGTERM: the exception says so, or the signal
    does where code between raised a KeyboardInterrupt of its own (Ray's wait does)."""
    return isinstance(stop, Terminated) or signal.SIGTERM in received


def stop_name(terminated: bool) -> str:
    """How a stop is named in a command's closing line."""
    return "terminated (SIGTERM)" if terminated else "interrupted (Ctrl-C)"


def exit_code() -> int | None:
    """130 or 143 where a stop signal came (SIGTERM wins), else None: the exit code of a command that received one,
    whatever it went on to do."""
    if not received:
        return None
    return EXIT_TERMINATED if terminated() else EXIT_INTERRUPTED
