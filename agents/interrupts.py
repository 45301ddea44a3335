"""SIGTERM handled as Ctrl-C: what a scheduler sends to stop a job (SLURM's scancel and time
limit, docker stop, systemd, Kubernetes) stops train.py and evaluate.py as a KeyboardInterrupt
does, so that the same clean-up runs. Unhandled, it killed the process where it stood: a run
folder without a checkpoint left behind, a temp file beside the file being written, no word
of what was kept.
"""

from __future__ import annotations

import atexit
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

SIGINT_STATUS = 130        # 128 + the signal's number, as a shell reports a job it stopped
SIGTERM_STATUS = 143
STOPS = (signal.SIGINT, signal.SIGTERM)     # the signals that stop a job: Ctrl-C, a scheduler's


def signals_handled_here() -> bool:
    """Whether this thread is the main one: Python runs signal handlers there alone, and sets
    them from there alone."""
    return threading.current_thread() is threading.main_thread()


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, as Ctrl-C raises KeyboardInterrupt."""


_stop_came = False      # whether a stop was handed to a handler of this module's


def stop_seen() -> bool:
    """Whether a stop came to one of this module's handlers in this process (a run's worker
    told by its job to stop asks first: the same stop may have come to it straight, from a
    scheduler that signals every process, ``agents.parallel_runs``)."""
    return _stop_came


def _saw_stop() -> None:
    global _stop_came
    _stop_came = True


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    _saw_stop()
    raise Terminated


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within it SIGTERM raises Terminated; its earlier handler is restored after. Outside the
    main thread, where Python runs no signal handler, it leaves SIGTERM as it is."""
    if not signals_handled_here():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _SafePoints:
    """The stop noted inside one `stops_at_safe_points`, and the handlers it stands in for."""

    def __init__(self, previous: dict[signal.Signals, Callable[[int, FrameType | None], Any]]):
        self.previous = previous
        self.asked: signal.Signals | None = None

    def note(self, signum: int, frame: FrameType | None) -> None:
        _saw_stop()
        if self.asked is not None:      # a second stop: the user insists, it is raised here
            self.raise_asked()
        self.asked = signal.Signals(signum)

    def raise_asked(self) -> None:
        """The noted stop raised (its earlier handler run) here, and forgotten."""
        asked, self.asked = self.asked, None
        if asked is not None:
            self.previous[asked](asked, None)


_safe_points: list[_SafePoints] = []


@contextlib.contextmanager
def stops_at_safe_points() -> Iterator[None]:
    """Within it, a first Ctrl-C or SIGTERM is noted, and raised (its handler run) where
    `stop_if_asked` is next called, at points where no library is half-way through its own
    work; a second is raised at once, and one still noted as the block ends is raised there.
    Python raises a signal's exception between any two bytecodes: one raised inside
    ``threading.Condition.__enter__`` just after it took its lock, or in its ``__exit__``
    before it gave the lock back, leaves the lock held. TensorBoard's events writer puts each
    write on a ``queue.Queue``, whose lock that is: a stop there left its thread waiting for
    ever, and closing the logger, as a stopped run does, hung the process until SIGKILL. Of
    stops that came during writes, about 1% hung so, killed the writer's thread or raised a
    RuntimeError in place of the stop (tests/test_interrupts.py's random stops).
    A signal whose handler is not Python's (ignored, or the default that ends the process)
    is left as it is, as is every signal outside the main thread, where Python runs none."""
    if not signals_handled_here():
        yield
        return
    points = _SafePoints({signum: handler for signum in STOPS
                          if callable(handler := signal.getsignal(signum))})
    for signum in points.previous:
        signal.signal(signum, points.note)
    _safe_points.append(points)
    try:
        yield
    finally:
        _safe_points.remove(points)
        for signum, handler in points.previous.items():
            signal.signal(signum, handler)
        points.raise_asked()


def stop_if_asked() -> None:
    """A safe point of `stops_at_safe_points`: the stop noted there, if any, raised here."""
    if _safe_points:
        _safe_points[-1].raise_asked()


def _ignore_stops_at_exit() -> None:
    """Ctrl-C and SIGTERM ignored as the interpreter exits, a CLI's job done. Its teardown (about
    a second with torch loaded) ran with their default handlers: a stop then, after every file
    and line of the job, killed it silently, status -15 (-2) where its own was 0 or 143. It now
    ends with the job's own status."""
    if signals_handled_here():
        for signum in STOPS:
            signal.signal(signum, signal.SIG_IGN)


def run_stoppable(script: str, body: Callable[[], int], kept: str = "") -> int:
    """A CLI's `body`, with SIGTERM as Ctrl-C; either, while the modules load too (before there
    is anything to keep), ends in one line, ``{script}: interrupted{kept}``, and 130 (143).
    A stdout whose reader went away (``train.py | head``) or whose file is full does not end
    the job: it goes on and writes its files (``agents.lost_output``). From the interpreter's
    exit on, a stop is ignored (``_ignore_stops_at_exit``)."""
    from agents.lost_output import discard_stream, outliving_output, pipe_reader_gone

    atexit.unregister(_ignore_stops_at_exit)    # once, however many jobs the process runs
    atexit.register(_ignore_stops_at_exit)
    with sigterm_as_interrupt():
        helped = False      # argparse's SystemExit(0), after --help: raised again below
        with outliving_output(script) as output:
            try:
                status = body()
            except SystemExit as exc:
                if exc.code not in (0, None):
                    raise
                helped, status = True, 0
            except Terminated:
                print(f"{script}: terminated (SIGTERM){kept}", file=sys.stderr)
                return SIGTERM_STATUS
            except KeyboardInterrupt:
                print(f"{script}: interrupted{kept}", file=sys.stderr)
                return SIGINT_STATUS
            except BrokenPipeError:
                # another pipe's (a worker's the job did not name) is a bug's: its traceback
                if not pipe_reader_gone(sys.stdout):
                    raise
                # a write that passed by the guarded stdout (a handle kept from before it):
                # nowhere to say more, and Python's flush of stdout at exit would raise it
                # again as a second traceback, so what is left of stdout goes nowhere
                discard_stream(sys.stdout)
                return 1
        # after the guard's last flush, which may be the write a full disk refuses: a help
        # lost so fails as a job's output does
        status = output.status(status)
        if helped:
            raise SystemExit(status) from None
        return status


@contextlib.contextmanager
def stops_held() -> Iterator[None]:
    """Within it, Ctrl-C and SIGTERM wait: each is raised (or, where no Python handler is set,
    delivered) as the block ends, as it would have been where it came. For a few renames that
    must land together, a model and the files a resume reads beside it. Outside the main
    thread, where Python runs no signal handler, it holds nothing."""
    if not signals_handled_here():
        yield
        return
    came: list[signal.Signals] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        _saw_stop()
        came.append(signal.Signals(signum))

    previous = {signum: signal.signal(signum, hold) for signum in STOPS}
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
