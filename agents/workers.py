"""Spawned worker processes: what ``train.py --jobs`` (``agents.parallel_runs``) and
``evaluate.py --jobs`` (``computed_in_order`` below) share.

A worker (``Spawned``) is spawned, not forked (a fork of a process with torch's threads may
hang), is born with SIGINT ignored (the job, not each worker, answers a terminal's Ctrl-C),
takes its orders and sends its results by a pipe each, and writes each line of its output
whole. ``processes_for`` says how many a job starts, ``unpicklable`` what cannot travel.

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


def processes_for(jobs: int, count: int) -> int:
    """How many processes `count` pieces of work take under ``--jobs`` `jobs` (0: one per
    core): never more than there are pieces; 1 means the job's own process."""
    return min(jobs or cores(), count)


def unpicklable(value: Any) -> str | None:
    """Why `value` cannot travel to a worker ("TypeError: ..."), or None if it can."""
    try:
        pickle.dumps(value)
    except Exception as exc:    # pickle raises several kinds, and what a value's reduce raises
        return f"{type(exc).__name__}: {exc}"
    return None


class Spawned:
    """A spawned worker process, born ignoring SIGINT, and its two pipes: `orders`, which the
    job writes to it, and `results`, which it writes back and which reads EOF once it has
    ended. `target` is called with `args`, then its ends of the two, (orders, results)."""

    def __init__(self, target: Callable[..., None], args: tuple[Any, ...], name: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.results, results_end = context.Pipe(duplex=False)
        orders_end, self.orders = context.Pipe(duplex=False)
        self.process = context.Process(target=target, args=(*args, orders_end, results_end),
                                       name=name)
        with born_ignoring_sigint():
            self.process.start()
        results_end.close()     # the worker's ends: its results read EOF once it ends
        orders_end.close()

    def order(self, message: Any) -> None:
        """`message` sent; to a worker that has ended, nothing (its results say so)."""
        with contextlib.suppress(OSError):
            self.orders.send(message)

    def reply(self) -> Any | None:
        """What the worker sent next; None once it has ended without more."""
        try:
            return self.results.recv()
        except (EOFError, OSError):
            return None

    def close(self) -> None:
        self.results.close()
        self.orders.close()


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
    workers = processes_for(jobs, len(items))
    if workers <= 1:
        values = []
        for item in items:
            values.append(_value(fn, item, ticks_inside, tick or _no_tick))
            if tick is not None and not ticks_inside:
                tick()
        return values
    why = unpicklable((fn, list(items)))
    if why is not None:
        raise WorkerFailed(f"--jobs {jobs} sends the work to processes of their own, and it does "
                           f"not pickle ({why}): compute it one at a time (--jobs 1)")
    return _computed_by_workers(fn, list(items), workers, ticks_inside, name, tick)


def _value(fn: Callable[..., R], item: Any, ticks_inside: bool, tick: Callable[[], None]) -> R:
    """`fn`'s value for `item`, given `tick` where it ticks inside (``computed_in_order``)."""
    return fn(item, tick=tick) if ticks_inside else fn(item)


def _no_tick() -> None:
    pass


class _Slot(Spawned):
    """A worker that computes the items it is given, one at a time, until its pipe closes."""

    def __init__(self, fn: Callable[..., Any], ticks_inside: bool) -> None:
        super().__init__(_serve, (fn, ticks_inside, os.getpid()), "evaluate worker")
        self.index = -1

    def give(self, index: int, item: Any) -> None:
        self.index = index
        self.order(item)    # to a worker that has died meanwhile: its reply (None) says so

    def let_go(self, now: bool) -> None:
        """Its pipe closed (an idle worker then returns); `now`: terminated too."""
        self.orders.close()
        if now and self.process.is_alive():
            self.process.terminate()

    def reap(self) -> None:
        """Waited for, and killed if it has not ended in END_WAIT_S."""
        self.process.join(END_WAIT_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.close()


def _computed_by_workers(fn: Callable[..., Any], items: list[Any], workers: int,
                         ticks_inside: bool, name: Callable[[Any], str],
                         tick: Callable[[], None] | None) -> list[Any]:
    """``computed_in_order``'s work, `workers` processes computing it."""
    values: dict[int, Any] = {}
    waiting = list(enumerate(items))
    slots: list[_Slot] = []
    ended_well = False
    try:
        busy: dict[Connection, _Slot] = {}
        for _ in range(workers):
            with stops_held():      # a stop raised once the worker is counted
                slots.append(_Slot(fn, ticks_inside))
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
                if tick is not None and not ticks_inside:
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


def _serve(fn: Callable[..., Any], ticks_inside: bool, job: int, items: Connection,
           results: Connection) -> None:
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
            value = _value(fn, item, ticks_inside, tick)
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
