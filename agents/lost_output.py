"""A CLI's job outlives its stdout and stderr. A reader that went away (``evaluate.py | head``)
or a file that takes no more (``> /dev/full``, a disk filled while the job ran) raised an
OSError from the next ``print``: evaluate.py prints its table before it writes the files, so
a closed pipe ended it with no results, minutes of work lost, and a full disk with a
traceback. The terminal is a view of the job, not its product: the job now goes on and
writes its files, says once on stderr what became of its output, and ends with its own
status, or 1 where output was lost to a failing file (a reader that left, as ``head`` does,
asked for no more and fails nothing).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import sys
from collections.abc import Callable, Iterator
from typing import Any


class OutlivingStream:
    """`stream` (sys.stdout or sys.stderr) as the job sees it: writes pass through until the
    first that the file refuses; from then on they go nowhere, quietly. The refusal is kept
    in `lost` and told once to `on_lost`. Everything else (encoding, isatty, fileno,
    reconfigure) is the stream's own."""

    def __init__(self, stream: Any, name: str, on_lost: Callable[[OutlivingStream], None]):
        self.stream = stream
        self.name = name
        self.lost: OSError | None = None
        self._on_lost = on_lost

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                written = self.stream.write(text)
            except OSError as exc:
                self._lose(exc)
            else:   # some streams (a notebook's) return None
                return len(text) if written is None else int(written)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self.stream.flush()
            except OSError as exc:
                self._lose(exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

    def _lose(self, exc: OSError) -> None:
        self.lost = exc
        discard_stream(self.stream)
        self._on_lost(self)


def discard_stream(stream: Any) -> None:
    """Points `stream`'s file descriptor at os.devnull, once its file refused a write: what is
    still buffered above it, a C library's writes and Python's own flush at exit find a sink,
    not a second error. Nothing for a stream without a file (a StringIO)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = stream.fileno()
        sink = os.open(os.devnull, os.O_WRONLY)
        os.dup2(sink, fd)
        os.close(sink)


def reader_left(exc: OSError) -> bool:
    """Whether `exc` is a pipe's reader that went away (``| head`` read its fill): nothing the
    user asked for is lost."""
    return isinstance(exc, BrokenPipeError) or exc.errno in (errno.EPIPE, errno.ECONNRESET)


def pipe_reader_gone(stream: Any) -> bool:
    """Whether `stream` writes to a pipe whose reader has gone: poll() marks such a write end
    POLLERR. False for a stream without a file (a StringIO), a file, a live pipe, and where
    poll() is missing (Windows)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    if not hasattr(select, "poll"):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def lost_message(script: str, name: str, exc: OSError) -> str:
    """What `script` says on stderr when its `name` (stdout, stderr) refused a write."""
    reason = exc.strerror or type(exc).__name__
    lost = (f"the reader of {name} has gone" if reader_left(exc)
            else f"cannot write to {name}")
    return f"{script}: {lost} ({reason}); the job carries on without it"


class Outliving:
    """What `outliving_output` installed: the two streams, and the status a job ends with."""

    def __init__(self, script: str):
        self.script = script
        self.streams: list[OutlivingStream] = []

    def told(self, stream: OutlivingStream) -> None:
        """The loss of `stream` said on stderr, through its guard whatever sys.stderr is by
        now: if that one is gone too, nobody hears it, and nothing fails."""
        stderr = next((s for s in self.streams if s.name == "stderr"), None)
        if stderr is not None and stream.lost is not None:
            stderr.write(lost_message(self.script, stream.name, stream.lost) + "\n")
            stderr.flush()

    def status(self, status: int) -> int:
        """The job's own `status`, or 1 for a job that ended well but lost output a file
        refused (a full disk): a script checking the status learns that its log is short."""
        failed = any(s.lost is not None and not reader_left(s.lost) for s in self.streams)
        return 1 if status == 0 and failed else status


@contextlib.contextmanager
def outliving_output(script: str) -> Iterator[Outliving]:
    """Within it, sys.stdout and sys.stderr are `OutlivingStream`s (a missing one, as with
    ``>&-`` at start, is left None); they are flushed as it ends, so output still buffered
    meets its file here and not in Python's exit, and then put back."""
    outliving = Outliving(script)
    originals = {"stdout": sys.stdout, "stderr": sys.stderr}
    for name, stream in originals.items():
        if stream is not None:
            guarded = OutlivingStream(stream, name, outliving.told)
            outliving.streams.append(guarded)
            setattr(sys, name, guarded)
    try:
        yield outliving
    finally:
        for guarded in outliving.streams:
            guarded.flush()
        for name, stream in originals.items():
            setattr(sys, name, stream)
