"""Shared test set-up."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session", autouse=True)
def sb3_logs_in_a_test_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tests that drive SB3 models directly (not through SB3Agent.learn, which logs nowhere)
    would leave an empty SB3-<date> folder in the system temp dir per learn(); SB3 puts them
    under $SB3_LOGDIR instead, here pytest's own temp folder."""
    with pytest.MonkeyPatch.context() as session:
        session.setenv("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3_logs")))
        yield


@pytest.fixture(scope="session", autouse=True)
def help_wrapped_at_80_columns() -> Iterator[None]:
    """argparse wraps --help to $COLUMNS, in this process and in the scripts the tests run:
    under COLUMNS=40 a usage line broke after the program's name and "heft-calibrated" at its
    hyphen, and tests that read the help failed by the terminal they ran in. A test of another
    width sets its own."""
    with pytest.MonkeyPatch.context() as session:
        session.setenv("COLUMNS", "80")
        yield


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Every test runs torch on one thread, whichever files were collected. Four test files
    set it as they were imported, so a file run alone (``pytest tests/test_sac.py``) ran its
    torch code on every core and in the suite on one; ``make_sb3`` sets one thread too, so a
    test that ran before the first model was built ran on as many threads as the order made."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def unreached_fault_warnings_as_in_a_fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The env gives each `UnreachedFaultWarning` once per process, so which test saw one
    depended on the order; pyproject.toml makes the warning an error, and a test that means to
    run a scenario past its faults says so (``filterwarnings("ignore::...")``)."""
    monkeypatch.setattr("envs.inference_alloc._WARNED", set())


@pytest.fixture(autouse=True)
def in_a_folder_of_its_own(tmp_path_factory: pytest.TempPathFactory,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test runs in an empty working folder of its own. train.py's and evaluate.py's
    folders default to runs/ and results/ in it: run from the checkout, a test that evaluated
    with the default --runs evaluated the models of the user's own main job there too, and
    one saved under other library versions (numpy 2's pickles under numpy 1.24) failed it."""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))


@pytest.fixture(scope="session", autouse=True)
def events_files_sort_as_made() -> Iterator[None]:
    """The TensorBoard events files this process makes sort by name in the order it made them.

    TensorBoard names one ``events.out.tfevents.<second>.<host>.<pid>.<count>``, the count
    per process, and reads a folder's files in name order: of two made in one second, the
    10th writer's sorts before the 9th's ("...10" < "...9"). A test that resumes a run in its
    own process, often within the second its first session began, read the sessions in the
    wrong order (the resumed one's restart marker before the points it drops) whenever the
    count crossed 10 or 100 there, which the writers of every test before it decide.
    ``train.py --resume`` is a new process, seconds later. The count is zero-padded here."""
    from tensorboard.summary.writer import event_file_writer

    counter = getattr(event_file_writer, "_global_uid", None)
    if counter is None:     # TensorBoard names its files otherwise now: nothing to pad
        yield
        return

    class Padded:
        def get(self) -> str:
            return f"{counter.get():09d}"

    event_file_writer._global_uid = Padded()
    try:
        yield
    finally:
        event_file_writer._global_uid = counter


@pytest.fixture
def cpu_npu_hardware(tmp_path: Path) -> str:
    """A hardware profile of two devices, no GPU: the edge preset without its GPU (a user's
    own machine that the presets lack)."""
    import yaml

    from inference.hardware import PRESET_DIR

    raw = yaml.safe_load((PRESET_DIR / "edge.yaml").read_text(encoding="utf-8"))
    raw["devices"] = [d for d in raw["devices"] if d["name"] != "gpu"]
    raw["links"] = [link for link in raw["links"] if "gpu" not in link["between"]]
    path = tmp_path / "cpu-npu.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return str(path)


@pytest.fixture
def unreadable(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], Path]:
    """Make a file unreadable: opening it raises PermissionError, as it does for a file the
    user may not read (a chmod 000 file cannot be made so for root, who runs some CI)."""
    import builtins
    import errno
    import io

    refused: set[str] = set()
    real_open = io.open

    def guarded_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, os.PathLike)) and os.path.abspath(file) in refused:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(io, "open", guarded_open)
    monkeypatch.setattr(builtins, "open", guarded_open)
    # Python 3.10's Path.open calls the io.open its accessor bound at import, past the patch
    real_path_open = Path.open

    def guarded_path_open(self: Path, *args: Any, **kwargs: Any) -> Any:
        if os.path.abspath(self) in refused:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(self))
        return real_path_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", guarded_path_open)

    def refuse(path: Path) -> Path:
        refused.add(os.path.abspath(path))
        return path

    return refuse
