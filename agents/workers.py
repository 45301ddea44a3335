"""Spawned worker processes: what ``train.py --jobs`` (``agents.parallel_runs``) and
``evaluate.py --jobs`` (``computed_in_order`` below) share.

A worker is spawned, not forked (a fork of a process with torch's threads may hang), is born
with SIGINT ignored (the job, not each worker, answers a terminal's Ctrl-C) and writes each
line of its output whole.

``computed_in_order(fn, items, jobs)`` is ``[fn(item) for item in items]`` with `jobs` items
computed at once: the pieces of a study that seed all they draw from (an evaluation's held-out
seeds), so each value, and the list in the items' order, is the one a loop in this process
gives. Such a piece writes nothing, so a stop has nothing to wait for: the workers are
terminated at once, as SIGTERM ends them, and the stop goes on up as a ``KeyboardInterrupt``
(``Terminated`` for SIGTERM). A worker stopped by itself (its PID signalled) stops the job, as
a stop of the job does; one that raises or dies otherwise (the out-of-memory killer) fails the
whole computation with ``WorkerFailed``, naming its item: a study missing a seed is not the
study asked for. A worker whose job has gone (killed, with no chance to end it) ends too.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar, cast

from agents.interrupts import Terminated, signals_handled_here, stops_held

T = TypeVar("T")
R = TypeVar("R")

# how long a terminated worker is given to end before it is killed
END_WAIT_S = 5.0
# how often a worker looks whether its job is still there
JOB_CHECK_S = 0.5


class WorkerFailed(RuntimeError):
    """A worker of ``computed_in_order`` raised, or died without its value."""


def cores() -> int:
    """The cores this process may run on (its affinity, where the system tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def spawn_context() -> Any:
    return multiprocessing.get_context("spawn")


@contextlib.contextmanager
def born_ignoring_sigint() -> Iterator[None]:
    """Within it, a process started is born with SIGINT ignored (an ignored signal stays so
    through exec; a blocked one did not, and a Ctrl-C as the worker imported torch was its
    traceback), and a Ctrl-C to this process waits, blocked, for its own handler after.
    Outside the main thread, where signals cannot be set, it does nothing."""
    if not signals_handled_here():
        yield
        return
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    previous = signal.getsignal(signal.SIGINT)
    try:
        if previous is not None:    # None: a handler not Python's, which it cannot set back
            signal.signal(signal.SIGINT, signal.SIG_IGN)    # kept pending: it is blocked
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def whole_lines(stream: Any) -> Any:
    """`stream` writing each line whole, in one write: a print wrote its text and its newline
    apart where the stream is unbuffered (``python -u``), and two workers stopped at once wrote
    their lines into each other. Lines of up to 4 KiB reach a pipe whole (PIPE_BUF)."""
    try:
        raw = io.FileIO(stream.fileno(), "w", closefd=False)
    except (AttributeError, OSError, ValueError):  # no descriptor: left as it is
        return stream
    return io.TextIOWrapper(io.BufferedWriter(raw, buffer_size=1 << 16), encoding=stream.encoding,
                            errors=stream.errors, line_buffering=True)


def ended_how(code: int | None) -> str:
    """A process's end, said: "was killed by SIGKILL", "ended with status 1"."""
    if code is not None and code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"ended with status {code}"


def stopped(code: int | None) -> bool:
    """Whether a process's exit code is a stop's (SIGTERM, SIGINT)."""
    return code in (-signal.SIGTERM, -signal.SIGINT)


def computed_in_order(fn: Callable[..., R], items: Sequence[T], jobs: int,
                      name: Callable[[T], str] = str,
                      tick: Callable[[], None] | None = None, ticks_inside: bool = False
                      ) -> list[R]:
    """``[fn(item) for item in items]``, `jobs` (0: one per core) at once in spawned workers
    where more than one would run. `tick` is called as each item's value comes in, or, with
    `ticks_inside`, each time `fn` calls the ``tick`` it is then given (``fn(item, tick=...)``:
    a progress bar's steps within an item, in a worker as here). `fn` and the items travel
    pickled (`fn` a module's function, or a ``functools.partial`` of one); `name` says an item
    in an error ("seed 10003")."""
    workers = min(jobs or cores(), len(items))
    if workers <= 1:
        values = []
        for item in items:
            if ticks_inside:
                values.append(fn(item, tick=tick or _no_tick))
                continue
            values.append(fn(item))
            if tick is not None:
                tick()
        return values
    try:
        pickle.dumps((fn, list(items)))
    except Exception as exc:    # pickle raises several kinds, and what a value's reduce raises
        raise WorkerFailed(f"--jobs {jobs} sends the work to processes of their own, and it does "
                           f"not pickle ({type(exc).__name__}: {exc}): compute it one at a time "
                           f"(--jobs 1)") from None
    return _Pool(fn, workers, ticks_inside).run(list(items), name, tick)


def _no_tick() -> None:
    pass


class _Slot:
    """A worker that computes the items it is given, one at a time, until its pipe closes."""

    def __init__(self, fn: Callable[..., Any], ticks_inside: bool) -> None:
        context = spawn_context()
        self.results, results_end = context.Pipe(duplex=False)
        items_end, self.items = context.Pipe(duplex=False)
        self.process = context.Process(target=_serve, args=(fn, ticks_inside, items_end,
                                                            results_end, os.getpid()),
                                       name="evaluate worker")
        with born_ignoring_sigint():
            self.process.start()
        results_end.close()     # the worker's ends: its pipe reads EOF once it ends
        items_end.close()
        self.index = -1

    def give(self, index: int, item: Any) -> None:
        self.index = index
        # a worker that has died meanwhile is said as such by its reply (None), not by this
        with contextlib.suppress(OSError):
            self.items.send(item)

    def reply(self) -> tuple[str, Any] | None:
        try:
            return cast(tuple[str, Any], self.results.recv())
        except (EOFError, OSError):
            return None

    def let_go(self, now: bool) -> None:
        """Its pipe closed (an idle worker then returns); `now`: terminated too."""
        self.items.close()
        if now and self.process.is_alive():
            self.process.terminate()

    def reap(self) -> None:
        """Waited for, and killed if it has not ended in END_WAIT_S."""
        self.process.join(END_WAIT_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.results.close()


class _Pool:
    def __init__(self, fn: Callable[..., Any], workers: int, ticks_inside: bool) -> None:
        self.fn, self.workers, self.ticks_inside = fn, workers, ticks_inside

    def run(self, items: list[Any], name: Callable[[Any], str],
            tick: Callable[[], None] | None) -> list[Any]:
        values: dict[int, Any] = {}
        waiting = list(enumerate(items))
        slots: list[_Slot] = []
        ended_well = False
        try:
            busy: dict[Connection, _Slot] = {}
            for _ in range(self.workers):
                with stops_held():      # a stop raised once the worker is counted
                    slots.append(_Slot(self.fn, self.ticks_inside))
                slots[-1].give(*waiting.pop(0))
                busy[slots[-1].results] = slots[-1]
            while busy:
                for ready in wait(list(busy)):
                    slot = busy.pop(cast(Connection, ready))
                    reply = slot.reply()
                    if reply is None:
                        _raise_death(slot, name(items[slot.index]))
                    kind, payload = cast(tuple[str, Any], reply)
                    if kind == "tick":      # a step within the item, which goes on
                        if tick is not None:
                            tick()
                        busy[slot.results] = slot
                        continue
                    if kind == "failed":
                        raise WorkerFailed(f"computing {name(items[slot.index])} raised "
                                           f"{payload} (its traceback is above)")
                    values[slot.index] = payload
                    if tick is not None and not self.ticks_inside:
                        tick()
                    if waiting:
                        slot.give(*waiting.pop(0))
                        busy[slot.results] = slot
            ended_well = True
        finally:
            with stops_held():      # a second stop meanwhile could leave workers running
                for slot in slots:
                    slot.let_go(now=not ended_well)
                for slot in slots:
                    slot.reap()
        return [values[index] for index in range(len(items))]


def _raise_death(slot: _Slot, what: str) -> None:
    slot.process.join(END_WAIT_S)
    code = slot.process.exitcode
    if stopped(code):
        raise Terminated    # signalled by itself: a stop of the job, as the job's own
    raise WorkerFailed(f"the process computing {what} {ended_how(code)} before it sent its "
                       f"value (what it printed is above)")


def _serve(fn: Callable[..., Any], ticks_inside: bool, items: Connection, results: Connection,
           job: int) -> None:
    """A worker's body: each item it is given computed, and its value (or what it raised,
    said, its traceback printed here) sent back, until the job closes its pipe or ends; with
    `ticks_inside`, each tick of `fn`'s sent as it comes."""
    sys.stdout, sys.stderr = whole_lines(sys.stdout), whole_lines(sys.stderr)
    threading.Thread(target=_end_with, args=(job,), daemon=True).start()

    def tick() -> None:
        _send(results, ("tick", None))

    while True:
        try:
            item = items.recv()
        except (EOFError, OSError):
            return
        try:
            value = fn(item, tick=tick) if ticks_inside else fn(item)
        except Exception as exc:
            traceback.print_exc()
            _send(results, ("failed", f"{type(exc).__name__}: {exc}"))
            return
        _send(results, ("done", value))


def _send(results: Connection, reply: tuple[str, Any]) -> None:
    try:
        results.send(reply)
    except OSError:     # the job has gone (killed): no one to tell
        os._exit(1)


def _end_with(job: int) -> None:
    """The worker ended within JOB_CHECK_S of its job (killed, say, so that it could not end
    it): its item's value would go nowhere, and it would hold a core meanwhile."""
    while os.getppid() == job:
        time.sleep(JOB_CHECK_S)
    os._exit(1)
