"""agents.lost_output: a CLI's job outlives a stdout or stderr that stops taking writes (a
pipe's reader gone, a full disk), says so once, and ends with a status that tells a full disk
from a reader that had read its fill."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.interrupts import run_stoppable
from agents.lost_output import (
    OutlivingStream,
    lost_message,
    outliving_output,
    pipe_reader_gone,
    reader_left,
)

ROOT = Path(__file__).resolve().parent.parent


def refusal(kind: str) -> OSError:
    """A pipe whose reader went away ("gone") or a full disk ("full"), as the OS says them.
    Made per test: an exception object kept for the session would count among the
    BrokenPipeErrors another test asserts are freed (tests/test_env_training.py)."""
    if kind == "gone":
        return BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class Refusing(io.StringIO):
    """A text stream that takes `room` characters, then raises `refusal` on every write and
    flush, as a pipe whose reader left or a full disk does."""

    def __init__(self, room: int, refusal: OSError):
        super().__init__()
        self.room = room
        self.refusal = refusal
        self.tries = 0

    def write(self, text: str) -> int:
        self.tries += 1
        if len(self.getvalue()) + len(text) > self.room:
            raise self.refusal
        return super().write(text)

    def flush(self) -> None:
        if len(self.getvalue()) >= self.room:
            raise self.refusal


def test_writes_pass_until_the_first_refusal_and_then_go_nowhere_told_once() -> None:
    told: list[OutlivingStream] = []
    full = refusal("full")
    inner = Refusing(room=6, refusal=full)
    stream = OutlivingStream(inner, "stdout", told.append)
    assert stream.write("hello\n") == 6 and inner.getvalue() == "hello\n"
    assert stream.write("more\n") == 5          # refused: counted as written, job goes on
    assert stream.write("and more\n") == 9
    stream.writelines(["x\n", "y\n"])
    stream.flush()
    assert inner.getvalue() == "hello\n" and inner.tries == 2   # no write tried after the first refused
    assert told == [stream] and stream.lost is full
    assert stream.getvalue() == "hello\n"       # the rest is the stream's own


@pytest.mark.parametrize(("kind", "zero_becomes"), [("gone", 0), ("full", 1)])
def test_a_gone_reader_leaves_the_status_and_a_full_file_fails_a_job_that_ended_well(
        monkeypatch, capsys, kind: str, zero_becomes: int) -> None:
    refused = refusal(kind)
    assert reader_left(refused) == (kind == "gone") and reader_left(OSError(errno.EPIPE, "x"))
    monkeypatch.setattr(sys, "stdout", Refusing(room=0, refusal=refused))
    with outliving_output("job.py") as output:
        print("refused")
    assert output.status(0) == zero_becomes
    assert output.status(130) == 130            # a job's own failure is its own
    assert capsys.readouterr().err.count("job.py: ") == 1


def test_output_still_buffered_meets_its_file_as_the_block_ends(monkeypatch, capsys) -> None:
    """A print whose text waits in the buffer is refused at the block's last flush, not by
    Python's flush at exit (a traceback after the job's status): it is told and counted."""
    inner = Refusing(room=0, refusal=refusal("full"))
    inner.write = io.StringIO.write.__get__(inner)     # takes the text, refuses the flush
    monkeypatch.setattr(sys, "stdout", inner)
    with outliving_output("job.py") as output:
        print("buffered")
    assert sys.stdout is inner and output.status(0) == 1
    assert capsys.readouterr().err == lost_message("job.py", "stdout", inner.refusal) + "\n"


def test_the_streams_are_put_back_and_a_missing_one_is_left_missing(monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdout", None)
    stderr = sys.stderr
    with outliving_output("job.py") as output:
        assert sys.stdout is None and isinstance(sys.stderr, OutlivingStream)
        assert [s.name for s in output.streams] == ["stderr"]
    assert sys.stderr is stderr


@pytest.mark.parametrize(("kind", "status"), [("gone", 0), ("full", 1)])
def test_a_cli_body_runs_to_its_end_past_a_refused_stdout(monkeypatch, capsys, kind: str,
                                                          status: int) -> None:
    """The job's files come after its prints (evaluate.py prints its table first): a print
    refused ended the body there, with a traceback or, for a pipe, silently, status 1."""
    refused = refusal(kind)
    monkeypatch.setattr(sys, "stdout", Refusing(room=0, refusal=refused))
    reached = []

    def body() -> int:
        print("the table")
        reached.append("the files")
        return 0

    assert run_stoppable("job.py", body) == status
    assert reached == ["the files"]
    err = capsys.readouterr().err
    assert err == lost_message("job.py", "stdout", refused) + "\n"
    assert ("the reader of stdout has gone (Broken pipe)" in err) == (kind == "gone")
    assert ("cannot write to stdout (No space left on device)" in err) == (kind == "full")


def test_a_refused_stderr_is_told_to_nobody_and_fails_nothing(monkeypatch) -> None:
    refusing = Refusing(room=0, refusal=refusal("gone"))
    monkeypatch.setattr(sys, "stderr", refusing)

    def body() -> int:
        print("progress", file=sys.stderr)
        return 0

    assert run_stoppable("job.py", body) == 0 and refusing.getvalue() == ""


@pytest.mark.parametrize(("kind", "status"), [("gone", 0), ("full", 1)])
def test_a_help_lost_to_a_full_disk_exits_1_as_argparse_exits(monkeypatch, capsys, kind: str,
                                                             status: int) -> None:
    """argparse ends --help with SystemExit(0), which passed the status check by: a help lost
    to a full disk exited 0. It is still a SystemExit, with the status a job would end with;
    argparse's refusal (2) is its own."""
    monkeypatch.setattr(sys, "stdout", Refusing(room=0, refusal=refusal(kind)))

    def helped() -> int:
        print("usage: job.py [-h]")
        raise SystemExit(0)

    with pytest.raises(SystemExit) as exit_:
        run_stoppable("job.py", helped)
    assert exit_.value.code == status and capsys.readouterr().err.count("job.py: ") == 1

    def refused() -> int:
        raise SystemExit(2)

    with pytest.raises(SystemExit) as exit_:
        run_stoppable("job.py", refused)
    assert exit_.value.code == 2


def test_a_stream_whose_write_returns_none_is_counted_whole_and_a_late_stderr_is_not_used(
        monkeypatch, capsys) -> None:
    """A notebook's stream returns None from write: int(None) would fail the job's first print.
    The loss is said through the stderr guard, not whatever sys.stderr has become (another
    redirect, itself refusing, would raise out of the job's print)."""

    class Quiet(io.StringIO):
        def write(self, text: str) -> None:        # type: ignore[override]
            super().write(text)

    assert OutlivingStream(Quiet(), "stdout", lambda s: None).write("four") == 4
    monkeypatch.setattr(sys, "stdout", Refusing(room=0, refusal=refusal("full")))
    with outliving_output("job.py") as output:
        sys.stderr = Refusing(room=0, refusal=refusal("gone"))   # put back as the block ends
        print("refused")
    assert output.status(0) == 1
    assert capsys.readouterr().err == lost_message("job.py", "stdout",
                                                   output.streams[0].lost) + "\n"


def test_a_pipe_reader_gone_is_told_from_a_live_pipe_a_file_and_a_stream_without_one(
        tmp_path: Path) -> None:
    read, write = os.pipe()
    with open(write, "w") as pipe, open(tmp_path / "out.txt", "w") as file:
        assert not pipe_reader_gone(pipe)
        os.close(read)
        assert pipe_reader_gone(pipe)
        assert not pipe_reader_gone(file)
        assert not pipe_reader_gone(io.StringIO())


# a job whose stdout is a pipe closed before it writes, by a handle kept from before the guard
# (met silently, status 1), or which meets a broken pipe of its own, not stdout's (a bug's
# traceback, status 1; it had ended as silently as the first)
_KEPT = ("import sys\nfrom agents.interrupts import run_stoppable\nkept = sys.stdout\n"
         "def body():\n    for _ in range(64):\n        kept.write('x' * 65536)\n"
         "        kept.flush()\n    return 0\nsys.exit(run_stoppable('job.py', body))\n")
_OWN = ("import errno, os, sys\nfrom agents.interrupts import run_stoppable\n"
        "def body():\n    raise BrokenPipeError(errno.EPIPE, 'a worker pipe')\n"
        "sys.exit(run_stoppable('job.py', body))\n")


@pytest.mark.parametrize("script", ["kept", "own"])
def test_a_broken_pipe_not_stdouts_ends_in_its_traceback(tmp_path: Path, script: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if script == "kept":
        job = subprocess.Popen([sys.executable, "-c", _KEPT], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env)
        assert job.stdout is not None and job.stderr is not None
        job.stdout.close()      # the reader gone before the job's first write
        err = job.stderr.read().decode()
        assert (job.wait(timeout=60), err) == (1, "")
        return
    with open(tmp_path / "out.txt", "w") as out:
        done = subprocess.run([sys.executable, "-c", _OWN], stdout=out,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=60)
    assert done.returncode == 1
    assert done.stderr.rstrip().endswith("BrokenPipeError: [Errno 32] a worker pipe")
    assert "Traceback" in done.stderr
