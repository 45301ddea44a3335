"""One writer at a time for an output: a lock file the operating system releases with its holder.

Two ``evaluate.py`` runs given the same ``--out`` each replaced the files whole, but the
folder ended up holding one's summary.csv beside the other's plots; a ``train.py --resume``
of a run another process was still training interleaved two writers' checkpoints, events and
config.yaml in one folder. Each job now holds ``<folder>/.<name>.lock`` while it writes there,
and a second job of the same name is refused at once, with the holder's pid, before it
writes anything. Jobs of other names (the article table and the online study in one
``results/``) write other files and go on side by side.

The lock is the OS's (``flock`` on POSIX, ``msvcrt.locking`` on Windows), not the file's
presence: a holder killed outright (SIGKILL, a power cut) leaves the file behind unlocked,
and the next job takes it over instead of being refused by a stale lock.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from agents.files import WriteFailed

try:
    import fcntl
except ImportError:     # Windows
    fcntl = None        # type: ignore[assignment]

# the byte msvcrt locks, past the holder's pid: a Windows lock is mandatory, and a lock on the
# pid's bytes kept the refused job from reading whose it was
_WINDOWS_LOCK_OFFSET = 4096


# what a refused lock says when another process holds it (flock: EWOULDBLOCK, which is EAGAIN;
# msvcrt: EACCES or EDEADLOCK), as against a file system that has no locks at all
HELD_ELSEWHERE = {errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES,
                  getattr(errno, "EDEADLOCK", errno.EDEADLK)}


class FolderBusy(RuntimeError):
    """Another process holds the folder's lock of that name; the message names the folder,
    the job and the holder's pid (where it could be read)."""


def lock_file(folder: str | os.PathLike[str], name: str) -> Path:
    """The lock file of the job `name` in `folder`."""
    return Path(folder) / f".{name}.lock"


@contextlib.contextmanager
def holding(folder: str | os.PathLike[str], name: str, busy: str,
            option: str = "") -> Iterator[None]:
    """Hold `folder`'s lock of `name` within the block (`folder` made if absent, and removed
    after where the block left it empty or the lock was not taken). Held elsewhere:
    FolderBusy, "`busy` (pid N)"; a folder the file system will not write in (read-only, not
    ours): WriteFailed naming it, and for a path over the system's limit, "give a shorter
    `option`" (the flag that named `folder`, where there is one)."""
    folder = Path(folder)
    made = not folder.exists()
    path = lock_file(folder, name)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = _acquire(path, busy)
    except OSError as exc:      # not FolderBusy, a RuntimeError: it goes on as it is
        if made:    # as the block leaves it: a folder just short of PATH_MAX is made, and
            with contextlib.suppress(OSError):      # its lock file is then too long
                folder.rmdir()
        # a traceback before the job began, where its own first write said it in one line
        hint = (f"; give a shorter {option}" if option and exc.errno == errno.ENAMETOOLONG
                else "")
        raise WriteFailed(f"cannot write {path}: {exc.strerror or exc}{hint}") from exc
    try:
        yield
    finally:
        _release(path, handle)
        if made:
            with contextlib.suppress(OSError):     # not empty: the job wrote there
                folder.rmdir()


def _acquire(path: Path, busy: str) -> IO[str]:
    # a holder unlinks its file as it lets go: one opened just before that is locked in vain
    # (no later job opens it), so a lock counts only on the file the path still names
    for _ in range(100):
        handle = open(path, "a+", encoding="utf-8")     # noqa: SIM115 (held past this function)
        try:
            _lock(handle)
        except OSError as exc:
            if exc.errno not in HELD_ELSEWHERE:
                # a file system without locks (some network mounts: ENOLCK) refused them all,
                # every job as busy: the job goes on unguarded, as before there were locks
                return handle
            holder = _holder(path)
            handle.close()
            raise FolderBusy(f"{busy}{f' (pid {holder})' if holder else ''}") from None
        if _still_named(path, handle):
            # the pid is for a refused job's message; the lock is the OS's, and holds without
            # it: on a full disk the job goes on, and its own first write says what failed
            with contextlib.suppress(OSError):
                handle.seek(0)
                handle.truncate()
                handle.write(f"{os.getpid()}\n")
                handle.flush()
            return handle
        handle.close()
    raise FolderBusy(f"{busy} (its lock file {path} kept changing)")


def _release(path: Path, handle: IO[str]) -> None:
    # unlinked while still locked, so no job ever finds an unlocked file another still names
    # as held; Windows cannot remove an open file, and a file left there is taken over later
    if fcntl is not None:
        with contextlib.suppress(OSError):
            path.unlink()
    # the OS lets the lock go with the handle; a pid left unwritten on a full disk fails its
    # flush again here, which would replace the job's own error
    with contextlib.suppress(OSError):
        handle.close()


def _lock(handle: IO[str]) -> None:
    """The lock, or an OSError where another process holds it."""
    if fcntl is not None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    import msvcrt
    handle.seek(_WINDOWS_LOCK_OFFSET)
    msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)


def _still_named(path: Path, handle: IO[str]) -> bool:
    try:
        named = path.stat()
    except FileNotFoundError:
        return False
    mine = os.fstat(handle.fileno())
    return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)


def _holder(path: Path) -> int | None:
    """The pid the holder wrote in `path`, or None (not yet written, unreadable)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
