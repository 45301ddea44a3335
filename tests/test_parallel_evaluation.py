"""evaluate.py --jobs: the held-out seeds of the online study and of the article's reproduction
computed at once, a process each (agents.workers.computed_in_order): the same values in the
same order as one at a time, a worker that raises or dies failing the whole computation by
name, and a stop ending every worker at once with no file written."""

from __future__ import annotations

import functools
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_cli_scripts import ROOT
from test_parallel_runs import gone, started, two_workers_of
from worker_probe import square_where, ticking

from agents import workers
from agents.config import MAX_JOBS, ConfigError, EvalConfig
from agents.interrupts import Terminated

pytestmark = pytest.mark.skipif(os.name != "posix", reason="signals and process groups: POSIX")


def test_values_come_in_the_items_order_from_other_processes() -> None:
    items = list(range(7))
    ticks: list[int] = []
    fn = functools.partial(square_where, job=os.getpid())
    values = workers.computed_in_order(fn, items, 2, tick=lambda: ticks.append(1))
    assert [v for v, _ in values] == [i * i for i in items]
    assert len(ticks) == len(items)
    pids = {pid for _, pid in values}
    assert len(pids) == 2 and -1 not in pids     # two workers, neither the job
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("jobs, here", [(1, True), (2, False)])
def test_ticks_inside_an_item_reach_the_job_as_they_come(jobs: int, here: bool) -> None:
    """With ticks_inside, the job's tick is called for each of fn's own ticks (a bar's step
    per agent of a seed), from a worker too, and not once more per item."""
    ticks: list[int] = []
    values = workers.computed_in_order(functools.partial(ticking, job=os.getpid()), [2, 3, 1],
                                       jobs, tick=lambda: ticks.append(1), ticks_inside=True)
    assert values == ([-1, -1, -1] if here else [2, 3, 1])
    assert len(ticks) == 6


@pytest.mark.parametrize("jobs, items", [(1, 3), (4, 1), (2, 0)])
def test_one_worker_or_fewer_computes_in_this_process(jobs: int, items: int) -> None:
    fn = functools.partial(square_where, job=os.getpid())
    values = workers.computed_in_order(fn, list(range(items)), jobs)
    assert values == [(i * i, -1) for i in range(items)]


def test_jobs_0_is_one_per_core(monkeypatch) -> None:
    monkeypatch.setattr(workers, "cores", lambda: 1)
    values = workers.computed_in_order(functools.partial(square_where, job=os.getpid()), [2, 3], 0)
    assert values == [(4, -1), (9, -1)]


@pytest.mark.parametrize("bad, why", [
    ("raise", r"^computing item raise raised ValueError: no square of 'raise' \(its traceback "
              r"is above\)$"),
    ("KILL", r"^the process computing item KILL was killed by SIGKILL before it sent its value "
             r"\(what it printed is above\)$"),
])
def test_a_worker_that_raises_or_dies_fails_the_whole_computation(bad: str, why: str,
                                                                  tmp_path: Path, capfd) -> None:
    fn = functools.partial(square_where, job=os.getpid())
    slow = tmp_path / "slow"
    with pytest.raises(workers.WorkerFailed, match=why):
        workers.computed_in_order(fn, [f"slow:{slow}", bad, 2, 3], 2,
                                  name=lambda item: f"item {item}")
    assert multiprocessing.active_children() == []
    time.sleep(3)
    assert not slow.exists()    # the other worker was ended, not left to finish its item
    if bad == "raise":      # the worker's own traceback
        assert "Traceback" in capfd.readouterr().err


def test_a_worker_stopped_by_itself_stops_the_job(tmp_path: Path) -> None:
    fn = functools.partial(square_where, job=os.getpid())
    slow = tmp_path / "slow"
    with pytest.raises(Terminated):
        workers.computed_in_order(fn, [f"slow:{slow}", "TERM", 2], 2)
    assert multiprocessing.active_children() == []
    time.sleep(3)
    assert not slow.exists()


def test_an_item_given_to_a_worker_that_died_is_its_death_not_a_broken_pipe() -> None:
    """A worker killed between two items: the next one sent to it raised BrokenPipeError, a
    traceback, where its end is the error that names its item."""
    slot = workers._Slot(functools.partial(square_where, job=os.getpid()), ticks_inside=False)
    slot.process.kill()
    slot.process.join()
    slot.give(0, 1)
    assert slot.reply() is None
    slot.let_go(now=True)
    slot.reap()


def test_work_that_does_not_pickle_is_refused_before_any_worker() -> None:
    with pytest.raises(workers.WorkerFailed, match=r"^--jobs 2 sends the work to processes of "
                                                   r"their own, and it does not pickle \(.*\): "
                                                   r"compute it one at a time \(--jobs 1\)$"):
        workers.computed_in_order(lambda x: x, [1, 2], 2)
    assert multiprocessing.active_children() == []


@pytest.mark.slow
def test_the_online_study_at_once_is_the_study_one_at_a_time() -> None:
    from agents.evaluation import online_study

    ticks: list[int] = []
    studies = [online_study(["ppo", "heft-calibrated", "best-static"], [10000, 10001, 10002], 60,
                            jobs=jobs, tick=lambda: ticks.append(1)) for jobs in (1, 2)]
    assert len(ticks) == 2 * 3 * 3      # one per agent and stream, each way
    assert list(studies[0].curves) == list(studies[1].curves) == ["ppo", "heft-calibrated",
                                                                  "best-static"]
    for agent, curves in studies[0].curves.items():
        assert len(curves) == 3
        for one, other in zip(curves, studies[1].curves[agent], strict=True):
            np.testing.assert_array_equal(one, other)
    np.testing.assert_equal(studies[0].metrics, studies[1].metrics)    # NaN as NaN


@pytest.mark.slow
def test_the_reproduction_at_once_is_the_reproduction_one_at_a_time() -> None:
    from agents.article import reproduce_table

    tables = [reproduce_table([3, 4], n_tasks=40, online_samples=80, jobs=jobs)
              for jobs in (1, 2)]
    np.testing.assert_equal(tables[0], tables[1])  # NaN (a row without a CI) as NaN
    assert len({row["figure"] for row in tables[0]}) == len(tables[0]) > 10


@pytest.mark.parametrize("jobs", [-1, MAX_JOBS + 1])
def test_jobs_out_of_range_is_refused(jobs: int) -> None:
    with pytest.raises(ConfigError, match=rf"^--jobs must lie in 0 \.\. {MAX_JOBS} \(0: one per "
                                          rf"core\), got {jobs}$"):
        EvalConfig(jobs=jobs).validate()


def test_jobs_without_the_online_study_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--jobs is not used there: --no-online skips the "
                                          r"online study; drop --jobs$"):
        EvalConfig(jobs=2, no_online=True).validate()


def evaluate(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """evaluate.py's online study in `tmp_path`, two seeds at once (``started``)."""
    return started(tmp_path, "evaluate.py", "--online", "--jobs", "2", "--out", "out",
                   "--online-agents", "ppo", "ppo-warm", "--no-progress-bar", *args)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds workers in /proc")
@pytest.mark.parametrize("stop, who, after, line, code", [
    # Ctrl-C at a terminal, as the workers load torch (the job ends them, as it does below)
    (signal.SIGINT, "group", 0.0, "interrupted", 130),
    # (one to the job's process alone, as docker stop sends it, reaches the workers as the
    # Ctrl-C does: test_parallel_runs.test_a_stop_ends_every_worker_with_its_run_kept)
    (signal.SIGTERM, "group", 5.0, "terminated (SIGTERM)", 143),    # SLURM: every process
    (signal.SIGTERM, "worker", 5.0, "terminated (SIGTERM)", 143),   # one worker's PID
])
def test_a_stop_ends_every_worker_and_writes_nothing(stop: signal.Signals, who: str,
                                                     after: float, line: str, code: int,
                                                     tmp_path: Path) -> None:
    job = evaluate(tmp_path)
    found = two_workers_of(job)
    time.sleep(after)
    if who == "group":
        os.killpg(job.pid, stop)
    else:
        os.kill(found[0], stop)
    out, err = job.communicate(timeout=120)
    assert len(found) == 2
    assert (job.returncode, err) == (
        code, f"evaluate.py: {line} (files already written are complete)\n")
    assert not list(tmp_path.glob("out/stabilization.*"))
    assert all(gone(pid) for pid in found)


MINE = '''
import numpy as np


class FirstDevices:
    """Every stage on device 0, until it raises at its 20th sample."""

    def __init__(self):
        self.calls = 0

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        self.calls += 1
        if self.calls == 20:
            raise RuntimeError("mine broke")
        return np.zeros(3, dtype=np.int64), state


failing = FirstDevices()
'''


@pytest.mark.slow
def test_agents_of_yours_deploy_in_the_workers_and_a_raise_there_is_one_error(
        tmp_path: Path) -> None:
    """A module of yours in the working directory is found by the workers as by the job (its
    agent acts there 20 times before it raises); an agent that raises in a worker ends the
    evaluation with its traceback and one error line naming the seed, and writes nothing. (That
    a worker's study is the job's own is test_the_online_study_at_once_is_the_study_one_at_a_
    time's.)"""
    (tmp_path / "mine.py").write_text(MINE)
    job = subprocess.run(
        [sys.executable, str(ROOT / "evaluate.py"), "--online", "--jobs", "2", "--out", "bad",
         "--online-agents", "mine:failing", "--online-samples", "30", "--no-progress-bar"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert job.returncode == 1
    traceback = job.stderr.split("evaluate.py: error")[0]
    assert "RuntimeError: mine broke" in traceback and "mine.py" in traceback
    assert re.search(r"\nevaluate\.py: error: computing seed 1000\d raised RuntimeError: mine "
                     r"broke \(its traceback is above\)\n$", job.stderr), job.stderr
    assert not (tmp_path / "bad").exists() or not list((tmp_path / "bad").glob("stabil*"))


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds workers in /proc")
def test_workers_end_with_a_job_that_was_killed(tmp_path: Path) -> None:
    """A job killed (SIGKILL, the out-of-memory killer) cannot end its workers: each ends by
    itself within a second, not after the seed it computes (tens of seconds here)."""
    job = evaluate(tmp_path, "--online-samples", "3000")
    found = two_workers_of(job)
    time.sleep(6)   # torch loaded, the seeds begun
    os.kill(job.pid, signal.SIGKILL)
    _, err = job.communicate(timeout=60)
    assert len(found) == 2
    assert all(gone(pid) for pid in found)
    assert "Traceback" not in err
