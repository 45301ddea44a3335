"""train.py --jobs: a plan's runs trained at once, a process each (agents.parallel_runs): the
same runs and table as one at a time, a failed or killed run reported while the others go on,
and a stop, however it comes, ending every worker at a safe point with its folder kept."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import zipfile
from multiprocessing import Pipe
from pathlib import Path

import pytest
from test_cli_scripts import ROOT, TINY

from agents import parallel_runs, workers
from agents.config import MAX_JOBS, TrainConfig
from agents.run_records import RunFailed

pytestmark = pytest.mark.skipif(os.name != "posix", reason="signals and process groups: POSIX")

# a user callback (--callbacks) that says which process trains each run, and does to a seed's
# run what the file `act` names for it ("1=raise,2=KILL"): raise, kill its own process, or stop
# it with SIGTERM
CALLBACKS = '''
import os
import signal
import time
from pathlib import Path

from stable_baselines3.common.callbacks import BaseCallback


class Probe(BaseCallback):
    def _on_step(self) -> bool:
        if self.num_timesteps != 40:
            return True
        run = Path(self.logger.dir).name
        Path("seen", run).write_text(str(os.getpid()))
        acts = dict(pair.split("=") for pair in Path("act").read_text().split(",") if pair)
        act = acts.get(run.split("__")[2], "")
        if act == "raise":
            raise RuntimeError("boom in seed " + run.split("__")[2])
        if act in ("KILL", "TERM"):
            for _ in range(600):    # another run at its step 40 too: past its checkpoint
                if len(list(Path("seen").iterdir())) >= 2:
                    break
                time.sleep(0.1)
            os.kill(os.getpid(), getattr(signal, "SIG" + act))
        return True
'''


def train(tmp_path: Path, *args: str, acts: dict[int, str] | None = None, timesteps: int = 64
          ) -> subprocess.Popen[str]:
    """train.py in `tmp_path`, in a process group of its own (a terminal's Ctrl-C reaches the
    group), with SIGINT's default handler whatever the test runner inherited."""
    (tmp_path / "probe.py").write_text(CALLBACKS)
    (tmp_path / "seen").mkdir(exist_ok=True)
    (tmp_path / "act").write_text(",".join(f"{seed}={act}" for seed, act in (acts or {}).items()))
    # unbuffered, as under `python -u`: a print writes its text and its newline apart
    return started(tmp_path, "train.py", "--timesteps", str(timesteps), "--checkpoint-interval",
                   "32", "--callbacks", "probe:Probe", *TINY, *args, unbuffered=True)


def started(cwd: Path, script: str, *args: str, unbuffered: bool = False
            ) -> subprocess.Popen[str]:
    """The repository's `script` run in `cwd`, in a process group of its own (a terminal's
    Ctrl-C reaches the group), with SIGINT's default handler whatever the test runner
    inherited."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return subprocess.Popen(
        [sys.executable, str(ROOT / script), *args], cwd=cwd, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def table(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("|")]


def gone(pid: int) -> bool:
    """Whether process `pid` has ended (and been reaped), waiting up to 10 s."""
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_runs_at_once_are_the_runs_one_at_a_time(tmp_path: Path) -> None:
    """Two runs, each in a process of its own (neither the job's), give the table one at a
    time gives, line for line, and the same weights."""
    outputs = {}
    for jobs in ("1", "2"):
        folder = tmp_path / jobs
        folder.mkdir()
        job = train(folder, "--jobs", jobs, "--warmup", "none", "all")
        out, err = job.communicate(timeout=600)
        assert job.returncode == 0, err
        pids = {p.name.split("__")[1]: int(p.read_text()) for p in (folder / "seen").iterdir()}
        assert sorted(pids) == ["ppo", "ppo-warm"]
        outputs[jobs] = out
        if jobs == "1":
            assert set(pids.values()) == {job.pid}
        else:
            assert len(set(pids.values())) == 2 and job.pid not in pids.values()
    assert len(table(outputs["2"])) == 8
    assert table(outputs["1"]) == table(outputs["2"])
    for label in ("ppo", "ppo-warm"):     # and the same weights, bit for bit
        weights = [policy_bytes(next((tmp_path / jobs / "runs").glob(f"*__{label}__0__*")))
                   for jobs in ("1", "2")]
        assert weights[0] == weights[1]


def policy_bytes(run: Path) -> bytes:
    with zipfile.ZipFile(run / "model.zip") as model:
        return model.read("policy.pth")


def test_a_failed_or_killed_run_is_reported_and_the_others_go_on(tmp_path: Path) -> None:
    """Three runs at once: seed 1's raises, seed 2's process is killed; each is reported as it
    comes, and seed 0's finishes into the table."""
    job = train(tmp_path, "--jobs", "3", "--warmup", "none", "--seeds", "0", "1", "2",
                acts={1: "raise", 2: "KILL"})
    out, err = job.communicate(timeout=600)
    assert job.returncode == 1
    for why in (r"failed \(RuntimeError: boom in seed 1\)",
                r"the process training ppo seed 2 was killed by SIGKILL before it reported"):
        assert re.search(why + r".*; going on with the other runs\n", err), err
    assert err.endswith("\n") and err.splitlines()[-1].startswith(
        "train.py: error: 2 of 3 runs failed")
    assert re.search(r"^finished ppo seed 0: ", out, re.M)
    assert "seed 1:" not in out and "seed 2:" not in out
    assert len(table(out)) == 7     # the finished run's row, the baselines'
    # the raise's traceback, from the worker: the cause does not travel
    assert "RuntimeError: boom in seed 1" in err.split("error: run")[0]


# A SIGTERM to the job's process alone (docker stop, kill PID) is not a case of its own: the
# workers, ignoring SIGINT, learn of a Ctrl-C only from the job, as they would of that SIGTERM,
# and the job answers a SIGTERM with its line below whoever else got it
@pytest.mark.parametrize("stop, who, line, code", [
    (signal.SIGINT, "group", "interrupted", 130),       # Ctrl-C at a terminal
    (signal.SIGTERM, "group", "terminated (SIGTERM)", 143),     # SLURM, timeout: every process
    (signal.SIGTERM, "worker", "terminated (SIGTERM)", 143),    # one worker's PID
])
def test_a_stop_ends_every_worker_with_its_run_kept(stop: signal.Signals, who: str, line: str,
                                                   code: int, tmp_path: Path) -> None:
    """Workers ignore the terminal's Ctrl-C and take the job's stop from the job; a SIGTERM
    that came to them straight as well is one stop, not two."""
    job = train(tmp_path, "--jobs", "2", "--warmup", "none", "--seeds", "0", "1",
                acts={1: "TERM"} if who == "worker" else None, timesteps=10**6)
    seen = tmp_path / "seen"
    deadline = time.monotonic() + 300
    while len(list(seen.iterdir())) < 2 and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if who == "group":
        os.killpg(job.pid, stop)
    out, err = job.communicate(timeout=300)
    assert (job.returncode, err.splitlines()[-1]) == (code, f"train.py: {line}"), err
    assert "Traceback" not in err and table(out) == []
    kept = re.findall(r"^run (\S+) interrupted; kept (\S+) \(continue it with: python train.py "
                      r"--resume \1 --log-dir runs\)$", err, re.M)
    assert len(kept) == 2 and len(err.splitlines()) == 3, err
    for _, folder in kept:
        assert list((tmp_path / folder / "checkpoints").glob("model_*_steps.zip"))
    for pid in (int(p.read_text()) for p in seen.iterdir()):
        assert gone(pid)


def two_workers_of(job: subprocess.Popen[str]) -> list[int]:
    """The spawned workers of `job`, once it has two (or has ended, or 60 s have gone by)."""
    deadline = time.monotonic() + 60
    while len(workers_of(job.pid)) < 2 and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return workers_of(job.pid)


def workers_of(pid: int) -> list[int]:
    """The spawned workers among the children of process `pid` (Linux's /proc)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            spawned = b"spawn_main" in (proc / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and spawned:
            found.append(int(proc.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds workers in /proc")
def test_a_ctrl_c_as_the_workers_load_their_modules_is_one_line(tmp_path: Path) -> None:
    """A spawned worker did not keep the SIGINT blocked across its start: a Ctrl-C while it
    imported torch was a KeyboardInterrupt traceback of each worker's."""
    job = train(tmp_path, "--jobs", "2", "--warmup", "none", "--seeds", "0", "1")
    workers = two_workers_of(job)
    os.killpg(job.pid, signal.SIGINT)
    out, err = job.communicate(timeout=120)
    assert len(workers) == 2
    assert (job.returncode, err) == (130, "train.py: interrupted\n")
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())
    assert all(gone(pid) for pid in workers)


@pytest.mark.parametrize("seen, told", [(False, True), (True, False)])
def test_a_worker_raises_the_jobs_stop_unless_one_came_to_it_already(
        seen: bool, told: bool, monkeypatch) -> None:
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(parallel_runs, "stop_seen", lambda: seen)
    monkeypatch.setattr(parallel_runs.signal, "pthread_kill", lambda *args: sent.append(args))
    reader, writer = Pipe(duplex=False)
    watcher = threading.Thread(target=parallel_runs._stop_when_told, args=(reader,))
    watcher.start()
    time.sleep(0.1)
    assert sent == []   # nothing before the job says so
    writer.send(parallel_runs.STOP)
    watcher.join(10)
    assert sent == ([(threading.main_thread().ident, signal.SIGTERM)] if told else [])


def test_a_worker_whose_job_is_gone_stops() -> None:
    """The job killed (its pipe closed without a word): the worker stops, its run kept."""
    sent: list[tuple[int, int]] = []
    reader, writer = Pipe(duplex=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(parallel_runs, "stop_seen", lambda: False)
        patch.setattr(parallel_runs.signal, "pthread_kill", lambda *args: sent.append(args))
        writer.close()
        parallel_runs._stop_when_told(reader)
    assert sent == [(threading.main_thread().ident, signal.SIGTERM)]


@pytest.mark.parametrize("jobs, cores, specs, at_once", [
    (0, 1, 2, False), (0, 4, 2, True), (2, 1, 1, False), (1, 8, 3, False), (3, 1, 2, True),
])
def test_jobs_0_is_one_per_core_and_one_run_trains_in_the_jobs_own_process(
        jobs: int, cores: int, specs: int, at_once: bool, monkeypatch) -> None:
    from agents import training
    from agents.run_records import RunSpec

    calls: list[str] = []
    monkeypatch.setattr(workers, "cores", lambda: cores)
    monkeypatch.setattr(training, "train_run", lambda config, spec: calls.append("here"))
    monkeypatch.setattr(parallel_runs, "trained_at_once",
                        lambda config, specs, n, form: iter([calls.append(f"at once {n}")]))
    plan = [RunSpec("ppo", "none", seed) for seed in range(specs)]
    list(training._outcomes(TrainConfig(jobs=jobs), plan))
    n = min(jobs or cores, specs)
    assert calls == ([f"at once {n}"] if at_once else ["here"] * specs)


@pytest.mark.parametrize("jobs", [-1, MAX_JOBS + 1])
def test_jobs_out_of_range_is_refused(jobs: int) -> None:
    from agents.config import ConfigError

    with pytest.raises(ConfigError, match=rf"^--jobs must lie in 0 \.\. {MAX_JOBS} \(0: one per "
                                          rf"core\), got {jobs}$"):
        TrainConfig(jobs=jobs).validate()


def test_a_config_that_does_not_pickle_is_refused_before_any_run(tmp_path: Path) -> None:
    """A value that cannot travel to a worker (hp's checks refuse a lambda learning rate; one
    they leave to SB3 may still hold one) is refused, naming the way out, before a worker
    starts."""
    from agents.config import ConfigError
    from agents.run_records import RunSpec

    config = TrainConfig(hp={"policy_kwargs": {"optimizer_kwargs": {"step": lambda: 0}}},
                         log_dir=str(tmp_path / "runs"))
    runs = parallel_runs.trained_at_once(config, [RunSpec("ppo", "none", 0)] * 2, 2, "script")
    with pytest.raises(ConfigError, match=r"^--jobs 2 sends the config to a process per run, "
                                          r"and it does not pickle \(.*\): give hp values that "
                                          r"do \(no lambdas\), or train the runs one at a time "
                                          r"\(--jobs 1\)$"):
        next(runs)
    assert not (tmp_path / "runs").exists()


class EndedProcess:
    """A worker's process that has ended with `exitcode` (what Worker.outcome reads of it)."""

    def __init__(self, exitcode: int) -> None:
        self.exitcode = exitcode

    def join(self) -> None:
        pass


def ended_worker(seed: int, sent: object, exitcode: int = 0) -> parallel_runs.Worker:
    """A Worker whose run of `seed` sent `sent` (None: nothing) and ended as the job stopped."""
    from agents.run_records import RunSpec

    worker = object.__new__(parallel_runs.Worker)
    worker.index, worker.spec = seed, RunSpec("ppo", "none", seed)
    worker.results, results_end = Pipe(duplex=False)
    orders_end, worker.orders = Pipe(duplex=False)
    if sent is not None:
        results_end.send(sent)
    results_end.close()
    worker.process = EndedProcess(exitcode)     # type: ignore[assignment]
    return worker


def test_a_run_that_ends_as_the_job_stops_is_still_said(capsys) -> None:
    """Told to stop, a worker whose run had just finished (or failed) sends that instead: its
    line is printed, as it would have been a moment before, where it was dropped unsaid. One
    stopped says nothing more (it said what it kept)."""
    from agents.run_records import RunResult, RunSpec

    done = RunResult(run_dir=Path("runs/InferenceAlloc-v0__ppo__0__1"),
                     spec=RunSpec("ppo", "none", 0), steps=64, seconds=2.0)
    workers = [ended_worker(0, ("done", done)),
               ended_worker(1, ("failed", RunFailed("run X failed (boom); removed X"))),
               ended_worker(2, ("stopped", None)), ended_worker(3, None, exitcode=-9)]
    parallel_runs._stop_all(workers)
    out, err = capsys.readouterr()
    assert out == ("finished ppo seed 0: 64 steps in 2 s (32 steps/s) -> "
                   "runs/InferenceAlloc-v0__ppo__0__1\n")
    assert sorted(err.splitlines()) == [    # in the order they are read
        "error: run X failed (boom); removed X",
        "error: the process training ppo seed 3 was killed by SIGKILL before it reported (what "
        "it printed is above); a run folder it made is left as it was, and --resume continues "
        "one with a checkpoint"]
