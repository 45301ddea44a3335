"""``train.py --jobs N``: a plan's runs trained N at once, each in a process of its own.

A run is one core's work (SB3's updates of a small MLP, torch on one thread), so two runs on
two cores take about the time of one. Each worker is spawned, not forked (a fork of a process
with torch's threads may hang), and trains its run with ``train_run`` as the job's own process
would: a run seeds all it draws from, so it is the same run, and the table, in plan order,
the same table. A worker sends back its ``RunResult``, or the failure ``train`` reports and
goes on from (its traceback printed by the worker, as the cause does not travel). A worker
that ends without either (a bug's traceback, the out-of-memory killer) is a failed run too,
and the others go on. The config travels to each worker pickled, so an ``hp`` value that does
not pickle (a lambda) is refused before any run starts.

Stops. Ctrl-C reaches every process of the terminal's group, a scheduler's SIGTERM either the
job's process alone (``docker stop``, ``kill PID``) or every process (SLURM, systemd,
``timeout``). Each worker ignores SIGINT from its start, and the job tells each one of its own
stop, which the worker raises as a SIGTERM of its own unless one came to it straight: one
stop, however it came, waits for the run's next safe point (``agents.interrupts``), keeps or
removes the run's folder and says which. A second stop of the job is passed on as SIGTERM,
which a worker raises at once; a third kills them. A worker stopped by itself (its PID
signalled) stops the job, as a stop does one run at a time.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait
from typing import Any, cast

from agents.commands import Form
from agents.config import ConfigError, TrainConfig
from agents.files import WriteFailed
from agents.interrupts import Terminated, stop_seen, stops_held
from agents.run_records import FinishedUnrecorded, Outcome, RunFailed, RunResult, RunSpec, ends_plan
from agents.workers import Spawned, ended_how, stopped, unpicklable, whole_lines

STOP = "stop"


class Worker(Spawned):
    """One run's process: its outcome comes back on its results, its stop goes by its orders."""

    def __init__(self, index: int, spec: RunSpec, config: TrainConfig, form: Form) -> None:
        super().__init__(_train_in_worker, (config, spec, form),
                         f"train {spec.label} seed {spec.seed}")
        self.index, self.spec = index, spec

    def outcome(self) -> Outcome | None:
        """The run's outcome (None: the worker was stopped), once its process has ended. A
        process that ended without one (killed by the system's out-of-memory killer, say) is a
        failed run: the others go on."""
        kind, payload = self.reply() or ("ended", None)
        self.process.join()
        self.close()
        code = self.process.exitcode
        if kind != "ended":
            return payload
        if stopped(code):
            return None     # a stop before its handlers were set: as a stop after
        return RunFailed(f"the process training {self.spec.label} seed {self.spec.seed} "
                         f"{ended_how(code)} "
                         f"before it reported (what it printed is above); a run folder it made "
                         f"is left as it was, and --resume continues one with a checkpoint")

    def stop(self) -> None:
        self.order(STOP)


def trained_at_once(config: TrainConfig, specs: list[RunSpec], jobs: int, form: Form
                    ) -> Iterator[tuple[int, Outcome]]:
    """(plan index, outcome) of each run, as each ends, `jobs` trained at once. After a write
    refused before a run's training (a ``WriteFailed``, which would meet every run to come) no
    further run starts, and those training finish. A stop, or the caller's leaving early, stops
    the workers and waits for each to keep or remove its folder."""
    why = unpicklable(config)
    if why is not None:
        raise ConfigError(f"--jobs {jobs} sends the config to a process per run, and it does not "
                          f"pickle ({why}): give hp values that do (no lambdas), or train the "
                          f"runs one at a time (--jobs 1)")
    waiting = list(enumerate(specs))
    running: dict[Connection, Worker] = {}
    refused = False
    try:
        while running or (waiting and not refused):
            while waiting and not refused and len(running) < jobs:
                with stops_held():      # a stop raised after the worker is counted
                    index, spec = waiting.pop(0)
                    worker = Worker(index, spec, config, form)
                    running[worker.results] = worker
            for ready in wait(list(running)):
                worker = running.pop(cast(Connection, ready))
                outcome = worker.outcome()
                if outcome is None:     # stopped, not by the job: as the job's own stop
                    raise Terminated
                refused = refused or ends_plan(outcome)
                yield worker.index, outcome
    except BaseException:
        _stop_all(list(running.values()))
        raise


def _stop_all(workers: list[Worker]) -> None:
    """Each worker told to stop, and waited for; a further stop of the job meanwhile is
    passed on as SIGTERM, and a third kills them."""
    for worker in workers:
        worker.stop()
    insisted = 0
    left = {w.results: w for w in workers}
    while left:
        try:
            for ready in wait(list(left)):
                worker = left.pop(cast(Connection, ready))
                _tell_late(worker.outcome())
        except KeyboardInterrupt:       # Terminated too
            insisted += 1
            for worker in left.values():
                if insisted == 1:
                    worker.process.terminate()
                else:
                    worker.process.kill()


def _tell_late(outcome: Outcome | None) -> None:
    """A run that ended as the job stopped, said as one that ended before would be: its
    folder is whole, or its failure was told above."""
    from agents.run_scores import finished_line

    if isinstance(outcome, RunResult):
        print(finished_line(outcome))
    elif outcome is not None:
        print(f"error: {outcome}", file=sys.stderr)


def _train_in_worker(config: TrainConfig, spec: RunSpec, form: Form, stops: Connection,
                     results: Connection) -> None:
    """A worker's body: its run trained as ``train`` trains one, its outcome sent back."""
    from agents.commands import invoked_as
    from agents.files import quiet_refused_writes_in_threads
    from agents.interrupts import sigterm_as_interrupt
    from agents.run_training import train_run
    from agents.training import print_cause
    from inference.messages import printable_stdout

    sys.stdout, sys.stderr = whole_lines(sys.stdout), whole_lines(sys.stderr)
    outcome: Any
    try:
        with sigterm_as_interrupt():
            with stops_held():      # a stop inside a thread's start left its lock half taken
                threading.Thread(target=_stop_when_told, args=(stops,), daemon=True).start()
            with invoked_as(form), printable_stdout(), quiet_refused_writes_in_threads():
                try:
                    outcome = ("done", train_run(config, spec))
                except (RunFailed, FinishedUnrecorded) as exc:
                    print_cause(exc)
                    outcome = ("failed", _without_cause(exc))
                except WriteFailed as exc:
                    outcome = ("failed", _without_cause(exc))
    except KeyboardInterrupt:       # Terminated too: the job's stop, or one of its own
        outcome = ("stopped", None)
    results.send(outcome)


def _without_cause(exc: BaseException) -> BaseException:
    """`exc` as it pickles: its cause's traceback, which may hold what does not pickle, left
    behind (the worker printed it)."""
    exc.__cause__ = exc.__context__ = None
    exc.__traceback__ = None
    return exc


def _stop_when_told(stops: Connection) -> None:
    """The job's stop raised in the worker's main thread as a SIGTERM of its own, unless a stop
    came to it already; the job's end (its pipe closed, the job killed) stops it too."""
    with contextlib.suppress(EOFError, OSError):
        stops.recv()
    if not stop_seen() and threading.main_thread().ident is not None:
        signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)  # type: ignore[arg-type]
