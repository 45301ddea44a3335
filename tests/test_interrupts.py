"""agents.interrupts.stops_at_safe_points: a Ctrl-C or SIGTERM during training is raised where
the trainer says it is safe, never inside a library's own critical section."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from agents.interrupts import (
    SIGTERM_STATUS,
    Terminated,
    sigterm_as_interrupt,
    stop_if_asked,
    stops_at_safe_points,
    stops_held,
)


@pytest.fixture()
def ctrl_c_raises() -> Iterator[None]:
    """Python's own Ctrl-C handler and SIGTERM as train.py sets it (pytest's may differ)."""
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with sigterm_as_interrupt():
            yield
    finally:
        signal.signal(signal.SIGINT, inherited)


@pytest.mark.parametrize(("signum", "stopped"), [(signal.SIGINT, KeyboardInterrupt),
                                                 (signal.SIGTERM, Terminated)])
def test_a_stop_waits_for_the_next_safe_point(ctrl_c_raises: None, signum: signal.Signals,
                                              stopped: type[BaseException]) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    went_on = []
    with pytest.raises(stopped) as caught, stops_at_safe_points():
        signal.raise_signal(signum)
        went_on.append("the work the signal came in")
        stop_if_asked()
        went_on.append("past the safe point")
    assert went_on == ["the work the signal came in"]
    assert type(caught.value) is stopped      # Ctrl-C is not told as a SIGTERM
    assert {s: signal.getsignal(s) for s in before} == before
    stop_if_asked()     # outside the block: nothing noted, nothing raised


def test_a_safe_point_with_no_stop_noted_raises_nothing(ctrl_c_raises: None) -> None:
    with stops_at_safe_points():
        stop_if_asked()
        stop_if_asked()


def test_a_second_stop_is_raised_at_once(ctrl_c_raises: None) -> None:
    went_on = []
    with pytest.raises(KeyboardInterrupt), stops_at_safe_points():
        signal.raise_signal(signal.SIGINT)
        went_on.append("after the first")
        signal.raise_signal(signal.SIGINT)
        went_on.append("after the second")
    assert went_on == ["after the first"]


def test_a_stop_noted_and_not_raised_inside_is_raised_as_the_block_ends(
        ctrl_c_raises: None) -> None:
    went_on = []
    with pytest.raises(Terminated):
        with stops_at_safe_points():
            signal.raise_signal(signal.SIGTERM)
            went_on.append("the rest of the block")
        went_on.append("after the block")
    assert went_on == ["the rest of the block"]


def test_a_stop_raised_at_a_safe_point_is_not_raised_again_as_the_block_ends(
        ctrl_c_raises: None) -> None:
    with pytest.raises(KeyboardInterrupt), stops_at_safe_points():
        signal.raise_signal(signal.SIGINT)
        stop_if_asked()
    with stops_at_safe_points():    # the next block starts with nothing noted
        stop_if_asked()


def test_a_stop_held_over_renames_inside_waits_for_the_next_safe_point(
        ctrl_c_raises: None) -> None:
    went_on = []
    with pytest.raises(Terminated), stops_at_safe_points():
        with stops_held():
            signal.raise_signal(signal.SIGTERM)
            went_on.append("the renames")
        went_on.append("the rest of the step")
        stop_if_asked()
    assert went_on == ["the renames", "the rest of the step"]


def test_an_ignored_ctrl_c_stays_ignored() -> None:
    """A job started in the background by a shell inherits SIGINT ignored: it is not turned
    into a stop."""
    inherited = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stops_at_safe_points():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)
            stop_if_asked()
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_outside_the_main_thread_it_changes_nothing(ctrl_c_raises: None) -> None:
    seen: list[object] = []

    def body() -> None:
        with stops_at_safe_points():
            stop_if_asked()
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]


@pytest.mark.slow
def test_stops_at_random_moments_of_tensorboard_writes_all_end_cleanly(
        ctrl_c_raises: None, tmp_path) -> None:
    """SIGTERM at a random moment of a loop of TensorBoard writes (SB3's logger's writer),
    then the writer closed, as a stopped run closes it. Raised where it came, about 1% of
    such stops (measured: 34 of 2,828) left the writer's queue lock held, so that the close
    hung for ever, or killed its thread, or raised a RuntimeError in place of the stop; at
    the safe points none may."""
    import random

    from torch.utils.tensorboard import SummaryWriter

    rng = random.Random(0)
    # SIGALRM sends SIGTERM, whose handler then runs wherever the process is, as it runs
    # for a SIGTERM from outside
    alarm = signal.signal(signal.SIGALRM, lambda s, f: signal.raise_signal(signal.SIGTERM))
    outcomes: list[str] = []
    try:
        for trial in range(1500):
            writer = SummaryWriter(str(tmp_path / str(trial)), max_queue=10)
            worker = writer._get_file_writer().event_writer._async_writer._worker
            try:
                with stops_at_safe_points():
                    signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-4, 2e-3))
                    while True:
                        writer.add_scalar("x", 1.0, trial)
                        stop_if_asked()
            except Terminated:
                outcome = "stopped"
            except Exception as exc:
                outcome = f"{type(exc).__name__} in place of the stop"
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            closer = threading.Thread(target=writer.close, daemon=True)
            closer.start()
            closer.join(5)
            if closer.is_alive():
                outcome = "the close hung"
            elif worker.exception is not None:
                outcome = f"the writer's thread died ({worker.exception!r})"
            outcomes.append(outcome)
            if outcome == "the close hung":
                break   # its thread waits for ever: no more trials beside it
    finally:
        signal.signal(signal.SIGALRM, alarm)
    assert {o for o in outcomes if o != "stopped"} == set(), outcomes.count("stopped")
    assert len(outcomes) == 1500


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("status", [0, SIGTERM_STATUS])
def test_a_stop_as_the_interpreter_exits_after_the_job_leaves_its_status(
        signum: signal.Signals, status: int) -> None:
    """A stop in the second or so of the interpreter's teardown after a CLI's job returned
    (every file written, every line said) killed the process silently, status -15 or -2 where
    the job's was 0 or 143: a random-stop audit met it in 4 of 104 stops. The stop comes here
    from an exit handler registered before the job's, so run after it, as the teardown runs
    after the exit handlers."""
    script = (
        "import atexit, os, signal, sys\n"
        "from agents.interrupts import run_stoppable\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        f"atexit.register(os.kill, os.getpid(), {int(signum)})\n"
        f"sys.exit(run_stoppable('job', lambda: {status}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (status, "")
