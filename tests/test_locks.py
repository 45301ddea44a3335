"""One writer at a time per output (agents/locks.py): a second evaluate.py on the same --out,
or a resume of a run another process still trains, is refused before it writes anything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agents import reporting, resume, run_training, training
from agents.config import ConfigError
from agents.locks import FolderBusy, holding, lock_file

ROOT = Path(__file__).resolve().parent.parent
POSIX = pytest.mark.skipif(os.name != "posix", reason="SIGKILL and flock: POSIX")


def test_a_second_holder_of_one_name_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    with holding(tmp_path, "job", "busy"):
        with pytest.raises(FolderBusy, match=rf"^busy \(pid {os.getpid()}\)$"), \
                holding(tmp_path, "job", "busy"):
            pass
        with holding(tmp_path, "other", "busy"):    # another name: other files, no conflict
            pass
    assert not lock_file(tmp_path, "job").exists()     # let go and removed
    with holding(tmp_path, "job", "busy"):              # and free again
        pass


def test_a_folder_made_for_the_lock_alone_is_removed_and_one_written_to_is_kept(
        tmp_path: Path) -> None:
    empty, used = tmp_path / "a" / "b", tmp_path / "c"
    with holding(empty, "job", "busy"):
        assert lock_file(empty, "job").is_file()
    assert not empty.exists() and (tmp_path / "a").is_dir()
    with holding(used, "job", "busy"):
        (used / "out.txt").write_text("x", encoding="utf-8")
    assert sorted(p.name for p in used.iterdir()) == ["out.txt"]


def _holder_process(folder: Path) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import sys, time
        from agents.locks import holding
        with holding({str(folder)!r}, "job", "busy"):
            print("held", flush=True)
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@POSIX
def test_another_process_holds_it_until_killed_and_its_stale_file_is_taken_over(
        tmp_path: Path) -> None:
    proc = _holder_process(tmp_path)
    try:
        with pytest.raises(FolderBusy, match=rf"\(pid {proc.pid}\)"), \
                holding(tmp_path, "job", "busy"):
            pass
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    # killed outright: its file is left, unlocked, and no reason to refuse the next job
    assert lock_file(tmp_path, "job").is_file()
    with holding(tmp_path, "job", "busy"):
        assert lock_file(tmp_path, "job").read_text(encoding="utf-8") == f"{os.getpid()}\n"


def test_the_evaluations_locks_cover_every_file_it_writes() -> None:
    from agents.article import ARTICLE_FILE

    locked = [name for files in reporting.OUTPUT_LOCKS.values() for name in files]
    assert sorted(locked) == sorted({*reporting.SUMMARY_OUTPUTS, *reporting.ONLINE_OUTPUTS,
                                     ARTICLE_FILE})


def test_an_evaluation_is_refused_only_by_one_writing_the_same_files(tmp_path: Path) -> None:
    with holding(tmp_path, "stabilization", "the study"):
        with reporting._writing(tmp_path, reporting.SUMMARY_OUTPUTS):     # others: fine
            pass
        with reporting._writing(tmp_path, ("article.md",)):
            pass
        with pytest.raises(ConfigError, match=rf"^{tmp_path} is being written by another "
                           r"evaluation \(stabilization.png, stabilization.md\) "
                           rf"\(pid {os.getpid()}\): wait for it to end, or give another --out"), \
                reporting._writing(tmp_path, ("summary.csv", "stabilization.md")):
            pass
    # the summary's lock, taken before the refusal, was let go with it
    assert not lock_file(tmp_path, "summary").exists()


def test_evaluate_py_on_an_out_being_written_exits_2_before_writing(tmp_path: Path,
                                                                    capsys) -> None:
    from agents.evaluate_cli import main

    out = tmp_path / "results"
    with holding(out, "summary", "x"):
        code = main(["--out", str(out), "--no-online", "--baselines", "best-static",
                     "--seeds", "1", "--episode-tasks", "5", "--no-progress-bar"])
        assert code == 2
        err = capsys.readouterr().err
        assert f"{out} is being written by another evaluation" in err and "--out" in err
        assert sorted(p.name for p in out.iterdir()) == [".summary.lock"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agents.train_cli import main

    runs = tmp_path_factory.mktemp("runs")
    assert main(["--agents", "ppo", "--warmup", "none", "--timesteps", "32",
                 "--hp", "n_steps=16", "batch_size=16", "n_epochs=1", "--episode-tasks", "20",
                 "--eval-tasks", "0", "--log-dir", str(runs), "--no-progress-bar"]) == 0
    (run,) = runs.iterdir()
    return run


def test_resuming_a_run_another_process_trains_exits_2_and_leaves_it_as_it_was(
        finished_run: Path, capsys) -> None:
    from agents.train_cli import main

    before = {p.name: p.read_bytes() for p in finished_run.iterdir() if p.is_file()}
    with holding(finished_run, "train", "x"):
        assert main(["--resume", finished_run.name, "--log-dir", str(finished_run.parent),
                     "--timesteps", "48", "--no-progress-bar"]) == 2
    err = capsys.readouterr().err
    assert (f"run {finished_run.name} is being trained by another process (pid {os.getpid()}"
            f"): wait for it to end" in err)
    after = {p.name: p.read_bytes() for p in finished_run.iterdir() if p.is_file()}
    assert after == before


def test_a_run_holds_its_folders_lock_while_it_trains(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from agents.config import TrainConfig

    seen: list[str] = []
    run = run_training.train_and_score

    def spy(agent, run_dir, *args, **kwargs):
        try:
            with holding(run_dir, "train", "taken"):
                seen.append("free")
        except FolderBusy as exc:
            seen.append(str(exc))
        return run(agent, run_dir, *args, **kwargs)

    monkeypatch.setattr(run_training, "train_and_score", spy)
    cfg = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=16, episode_tasks=20,
                      eval_tasks=0, log_dir=str(tmp_path), progress_bar=False,
                      hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1})
    (result,) = training.train(cfg, report=lambda line: None)
    assert seen == [f"taken (pid {os.getpid()})"]
    assert not lock_file(result.run_dir, "train").exists()
    # and resume_run takes the same lock
    with pytest.raises(ConfigError, match="being trained by another process"), \
            holding(result.run_dir, "train", "x"):
        resume.resume_run(TrainConfig(resume=result.run_dir.name, log_dir=str(tmp_path),
                                      timesteps=32), {"resume", "timesteps"})


def test_a_file_system_without_locks_lets_the_job_go_on_unguarded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Some network mounts refuse every lock (ENOLCK): each job was refused as if another held
    it. The job goes on, as it did before there were locks; a lock held elsewhere still stops it."""
    import errno

    from agents import locks

    def no_locks(handle) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(locks, "_lock", no_locks)
    with holding(tmp_path, "job", "busy"), holding(tmp_path, "job", "busy"):
        pass

    def held(handle) -> None:
        raise OSError(errno.EWOULDBLOCK, os.strerror(errno.EWOULDBLOCK))

    monkeypatch.setattr(locks, "_lock", held)
    with pytest.raises(FolderBusy), holding(tmp_path, "job", "busy"):
        pass


class _FullDisk:
    """A lock file's handle on a full disk: its pid never reaches the disk (flush: ENOSPC)."""

    def __init__(self, handle) -> None:
        self.handle = handle

    def __getattr__(self, name: str):
        return getattr(self.handle, name)

    def flush(self) -> None:
        import errno
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def close(self) -> None:
        self.handle.close()
        self.flush()    # as a buffered file's close flushes what is left


def test_a_full_disk_leaves_the_lock_held_without_its_pid(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock is the OS's: a pid the disk has no room for is no reason for a traceback
    before the job begins (its own first write says the disk is full, in its line)."""
    import builtins

    from agents import locks

    def full(*args, **kwargs) -> _FullDisk:
        return _FullDisk(builtins.open(*args, **kwargs))   # noqa: SIM115 (the lock's handle)

    monkeypatch.setattr(locks, "open", full, raising=False)
    with holding(tmp_path, "job", "busy"):
        monkeypatch.undo()
        with pytest.raises(FolderBusy, match=r"^busy$"), holding(tmp_path, "job", "busy"):
            pass
    assert not lock_file(tmp_path, "job").exists()


def test_an_out_the_file_system_will_not_write_in_is_one_line_exit_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """A read-only --out: evaluate.py said so in one line (its first file's WriteFailed); its
    lock file must not turn that into a traceback."""
    import errno

    from agents import locks
    from agents.evaluate_cli import main

    def read_only(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    monkeypatch.setattr(locks, "open", read_only, raising=False)
    out = tmp_path / "results"
    out.mkdir()
    assert main(["--out", str(out), "--no-online", "--baselines", "best-static",
                 "--seeds", "1", "--episode-tasks", "5", "--no-progress-bar"]) == 1
    err = capsys.readouterr().err
    assert err == (f"infer-alloc-evaluate: error: cannot write {out / '.summary.lock'}: "
                   f"{os.strerror(errno.EACCES)}\n")


@POSIX
@pytest.mark.parametrize("room", [len("/.summary.lock") - 1, len("/.summary.lock")])
def test_an_out_whose_files_paths_are_over_the_limit_says_to_shorten_it(
        room: int, tmp_path: Path, capsys) -> None:
    """An --out that fits the path limit whose files do not: its lock file (`room` 13) said
    only "File name too long", and past it (`room` 14) the whole evaluation ran and then
    failed on its first file (summary.csv's temp file, a longer name), again without the hint.
    Refused before anything is computed or made."""
    from agents.evaluate_cli import main
    from tests.test_cli_scripts import folder_of_length

    limit = os.pathconf(tmp_path, "PC_PATH_MAX") - 1
    out = folder_of_length(tmp_path, limit - room)
    assert main(["--out", str(out), "--no-online", "--baselines", "best-static",
                 "--seeds", "1", "--episode-tasks", "5", "--no-progress-bar"]) == 1
    longest = len(f"{out}/.learning_curves.png.{os.getpid()}.tmp")
    out_text, err = capsys.readouterr()
    assert err == (f"infer-alloc-evaluate: error: cannot write in {out}: the paths of the files "
                   f"written there reach {longest} characters, past the system's limit of "
                   f"{limit}; give a shorter --out\n")
    assert "wrote" not in out_text and not out.exists()


@POSIX
def test_a_folder_made_for_a_lock_it_could_not_take_is_removed(tmp_path: Path) -> None:
    """`holding` made the folder and then failed on the lock file (a path over the limit):
    evaluate.py's --out was left behind, empty, where a job that ran removed it."""
    from agents.files import WriteFailed
    from tests.test_cli_scripts import folder_of_length

    limit = os.pathconf(tmp_path, "PC_PATH_MAX") - 1
    made = folder_of_length(tmp_path, limit - len("/.job.lock") + 1)
    with pytest.raises(WriteFailed, match="File name too long; give a shorter --out$"), \
            holding(made, "job", "busy", option="--out"):
        pass
    assert not made.exists() and made.parent.is_dir()


def test_the_default_evaluation_and_online_refuse_each_other_and_no_online_does_not(
        tmp_path: Path) -> None:
    """As the README says: the default evaluation writes the online study's files too."""
    default = (*reporting.SUMMARY_OUTPUTS, *reporting.ONLINE_OUTPUTS)
    with reporting._writing(tmp_path, reporting.ONLINE_OUTPUTS):       # an --online
        with pytest.raises(ConfigError, match="being written by another evaluation"), \
                reporting._writing(tmp_path, default):
            pass
        with reporting._writing(tmp_path, reporting.SUMMARY_OUTPUTS):  # a --no-online
            pass


def test_a_folder_that_was_there_is_kept_even_left_empty(tmp_path: Path) -> None:
    """Only a folder made for the lock is removed after: one the user made (an empty
    results/ given as --out) is theirs."""
    with holding(tmp_path, "job", "busy"):
        pass
    assert tmp_path.is_dir() and not any(tmp_path.iterdir())


@pytest.mark.parametrize("meanwhile", ["unlinked", "replaced"])
def test_a_lock_on_a_file_its_holder_let_go_of_meanwhile_is_taken_on_the_named_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, meanwhile: str) -> None:
    """The holder unlinks its file as it lets go: a job that opened that file just before
    locks a file no later job opens, so it takes the lock again on the file the path names
    (by then absent, or another job's), not two jobs holding "the" lock at once."""
    from agents import locks

    path = lock_file(tmp_path, "job")
    path.write_text("", encoding="utf-8")        # the holder's, opened by the job below
    real, calls = locks._lock, []

    def racing(handle) -> None:
        real(handle)
        calls.append(handle.name)
        if len(calls) == 1:                      # the holder lets go as this job locks
            path.unlink()
            if meanwhile == "replaced":         # and a third job made the path anew
                path.write_text("", encoding="utf-8")

    monkeypatch.setattr(locks, "_lock", racing)
    with holding(tmp_path, "job", "busy"):
        assert len(calls) == 2
        assert path.read_text(encoding="utf-8") == f"{os.getpid()}\n"
        monkeypatch.setattr(locks, "_lock", real)
        with pytest.raises(FolderBusy, match=rf"\(pid {os.getpid()}\)"), \
                holding(tmp_path, "job", "busy"):
            pass


def test_a_holder_let_go_of_meanwhile_at_every_try_is_refused_naming_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agents import locks

    path = lock_file(tmp_path, "job")

    def always_unlinked(handle) -> None:
        path.unlink()

    monkeypatch.setattr(locks, "_lock", always_unlinked)
    with pytest.raises(FolderBusy, match=rf"^busy \(its lock file {path} kept changing\)$"), \
            holding(tmp_path, "job", "busy"):
        pass


def test_the_locks_file_is_closed_as_the_block_ends(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The OS lets the lock go with the handle: closed there, not whenever it is collected."""
    from agents import locks

    handles = []
    real = locks._acquire
    monkeypatch.setattr(locks, "_acquire", lambda path, busy: handles.append(
        real(path, busy)) or handles[-1])
    with holding(tmp_path, "job", "busy"):
        assert not handles[0].closed
    assert handles[0].closed


def test_an_evaluation_without_the_online_study_goes_on_beside_one_writing_it(
        tmp_path: Path) -> None:
    """`evaluate.py --no-online` writes no stabilization file: an `evaluate.py --online` on
    the same --out is no reason to refuse it."""
    from agents.evaluate_cli import main

    out = tmp_path / "results"
    with holding(out, "stabilization", "x"):
        assert main(["--out", str(out), "--no-online", "--baselines", "best-static",
                     "--seeds", "1", "--episode-tasks", "5", "--no-progress-bar"]) == 0
    assert (out / "summary.csv").is_file()


def test_reproducing_the_article_on_an_out_writing_it_exits_2_before_writing(
        tmp_path: Path, capsys) -> None:
    from agents.evaluate_cli import main

    with holding(tmp_path, "article", "x"):
        assert main(["--out", str(tmp_path), "--reproduce-article", "--seeds", "1",
                     "--no-progress-bar"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} is being written by another evaluation (article.md)" in err
    assert not (tmp_path / "article.md").exists()
