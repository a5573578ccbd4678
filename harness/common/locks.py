"""One writer per run directory (and per seed block): advisory locks that the kernel drops when their process dies.

A lock is `flock` on a file that is never deleted (deleting it would let a process that opened the old file and one
that creates a new one both "hold" it). The holder of an exclusive lock writes `HOST PID` into the file, and empties
it when it lets go, so a process refused the lock can name who holds it; text left in a file nobody holds was left by
a process that died holding it, and the next writer takes the lock over as if it were free (the kernel released it
with the process).

Why flock and not the `filelock` package: a contender must read who holds the lock from the file itself, which
`filelock` truncates when it opens it, and seed blocks of one run take the run directory's lock shared (many block
processes at once) while a run, merge or report takes it exclusive, which `filelock` does not offer.

On NFS, Linux emulates flock with byte-range (POSIX) locks that the server arbitrates, so they exclude writers on
other machines too, provided the file system is mounted with locking (not `nolock` or `local_lock=all`); a lock of a
machine that dies is released by the server once the client's lease expires (NFSv4: about 90 seconds). Because POSIX
locks belong to a process, not to an open file, a process must never open a lock file it holds a second time: closing
that second handle would release its lock on NFS. Nothing of this package reads lock files except to name a holder
it was refused by.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

LOCK_SUFFIX = ".lock"
RUN_DIR_LOCK = ".coevolab.lock"  # the run directory's own lock, inside it


class DirectoryBusy(RuntimeError):
    """Another process holds the lock a writer needs: a one-line message naming it (exit code 2 on the command
    line). Nothing has been written."""


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}"

    def is_gone(self) -> bool:
        """Whether the holder is known to have died: a process of this host that no longer exists."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            return False
        return False


def read_holder(path: Path) -> Holder | None:
    """Who wrote `path` (a lock file) as its holder, or None where it is empty, absent or unreadable."""
    try:
        host, pid = Path(path).read_text(encoding="utf-8").split()
        return Holder(host, int(pid))
    except (OSError, ValueError):
        return None


# The lock files this process holds (resolved path -> holds), so that code holding a lock may call code that takes
# it again: the inner call is part of the same writer.
_held: dict[Path, int] = {}


@contextlib.contextmanager
def holding(path: Path, *, shared: bool = False, wait: bool = False, busy: str | None = None) -> Iterator[None]:
    """Inside: this process holds the lock file `path` (created if absent), exclusive or shared.

    Args:
        shared: many shared holders at once, none beside an exclusive one.
        wait: wait for the lock (else refuse at once).
        busy: how the refusal starts ("DIR is in use"); the holder is added.

    Raises:
        DirectoryBusy: the lock is held elsewhere and `wait` is False.
        OSError: the lock file cannot be created or opened (a directory that cannot be written).
    """
    path = Path(path)
    key = path.resolve()
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = read_holder(path)
            raise DirectoryBusy(
                f"{busy or path} is in use by {holder or 'another process'}: one writer at a time; wait for it to "
                "finish, or stop it, then run this again"
            ) from None
        if not shared:
            os.ftruncate(handle, 0)
            os.pwrite(handle, f"{socket.gethostname()} {os.getpid()}\n".encode(), 0)
        _held[key] = 1
        try:
            yield
        finally:
            del _held[key]
            if not shared:
                os.ftruncate(handle, 0)  # let go cleanly: an empty file names no holder
    finally:
        os.close(handle)  # releases the lock


def check_writable(directory: Path) -> None:
    """Raise the OSError of creating a file in `directory` (permissions, a read-only file system, a full disk), if
    any; creates nothing that stays."""
    handle, name = tempfile.mkstemp(dir=directory, prefix=".coevolab-probe-", suffix=".tmp")
    os.close(handle)
    os.unlink(name)


def run_dir_lock(run_dir: Path) -> Path:
    return Path(run_dir) / RUN_DIR_LOCK


def holders_inside(run_dir: Path) -> list[tuple[Path, Holder]]:
    """The lock files under `run_dir` (its own and its blocks') that name a holder still alive, as far as this
    host can tell."""
    found = []
    for path in sorted(Path(run_dir).rglob(f"*{LOCK_SUFFIX}")):
        holder = read_holder(path)
        if holder is not None and not holder.is_gone():
            found.append((path, holder))
    return found


@contextlib.contextmanager
def holding_run_dir(run_dir: Path, *, shared: bool = False) -> Iterator[None]:
    """Inside: this process is a writer of `run_dir` (which must exist): exclusive for a run, resume, merge or
    report; shared for a seed block (`coevolab run --block K`), of which many run at once, each also holding its
    block's own lock.

    Raises:
        DirectoryBusy: another writer holds it; the message names it (and the blocks being run).
        OSError: nothing can be written in `run_dir` (checked here, before any work).
    """
    run_dir = Path(run_dir)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(holding(run_dir_lock(run_dir), shared=shared))
        except DirectoryBusy:
            holders = [
                f"{'' if path.name == RUN_DIR_LOCK else path.relative_to(run_dir).as_posix() + ' '}by {holder}"
                for path, holder in holders_inside(run_dir)
            ]
            raise DirectoryBusy(
                f"{run_dir} is in use ({'; '.join(holders) or 'by another process'}): one writer at a time; wait for "
                "it to finish, or stop it, then run this again"
            ) from None
        check_writable(run_dir)
        yield


@contextlib.contextmanager
def reading_run_dir(run_dir: Path) -> Iterator[None]:
    """Inside: no writer (a run, merge or report) holds `run_dir` or can take it, so what is read is never a
    half-written report: its lock held shared. Creates nothing: a directory without a lock file, or on a read-only
    mount (where no writer can change it), is read without one.

    Raises:
        DirectoryBusy: a writer holds it; the message names it.
    """
    lock = run_dir_lock(run_dir)
    with contextlib.ExitStack() as stack:
        if lock.is_file():
            try:
                stack.enter_context(holding(lock, shared=True, busy=str(run_dir)))
            except OSError:  # the lock cannot be opened for writing: a read-only mount
                pass
        yield
