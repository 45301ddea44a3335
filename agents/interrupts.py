"""SIGTERM handled as Ctrl-C: what a scheduler sends to stop a job (SLURM's scancel and time
limit, docker stop, systemd, Kubernetes) stops train.py and evaluate.py as a KeyboardInterrupt
does, so that the same clean-up runs. Unhandled, it killed the process where it stood: a run
folder without a checkpoint left behind, a temp file beside the file being written, no word
of what was kept.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

SIGINT_STATUS = 130        # 128 + the signal's number, as a shell reports a job it stopped
SIGTERM_STATUS = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, as Ctrl-C raises KeyboardInterrupt."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within it SIGTERM raises Terminated; its earlier handler is restored after. Outside the
    main thread, where Python runs no signal handler, it leaves SIGTERM as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_stoppable(script: str, body: Callable[[], int], kept: str = "") -> int:
    """A CLI's `body`, with SIGTERM as Ctrl-C; either, while the modules load too (before there
    is anything to keep), ends in one line, ``{script}: interrupted{kept}``, and 130 (143).
    A reader of stdout that went away (``train.py | head``) ends it silently, status 1."""
    with sigterm_as_interrupt():
        try:
            return body()
        except Terminated:
            print(f"{script}: terminated (SIGTERM){kept}", file=sys.stderr)
            return SIGTERM_STATUS
        except KeyboardInterrupt:
            print(f"{script}: interrupted{kept}", file=sys.stderr)
            return SIGINT_STATUS
        except BrokenPipeError:
            # nowhere to say more; Python's flush of stdout at exit would raise it again, as a
            # second traceback, so what is left of stdout goes nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1


@contextlib.contextmanager
def stops_held() -> Iterator[None]:
    """Within it, Ctrl-C and SIGTERM wait: each is raised (or, where no Python handler is set,
    delivered) as the block ends, as it would have been where it came. For a few renames that
    must land together, a model and the files a resume reads beside it. Outside the main
    thread, where Python runs no signal handler, it holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[signal.Signals] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        came.append(signal.Signals(signum))

    held = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, hold) for signum in held}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if came:
            handler = previous[came[0]]
            if callable(handler):
                handler(came[0], None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(came[0])
