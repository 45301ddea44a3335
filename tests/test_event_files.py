"""agents.event_files: what a run folder's TensorBoard events show at a step, for --resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from agents.event_files import RECORD, logged_at, mark_events

TAG = "latency/per_sample"


def write(run_dir: Path, name: str, steps: range, purge_step: int | None = None) -> Path:
    """A session's events file, named `name` (TensorBoard reads a folder's files by name: a
    SummaryWriter's own names order two of one second by process id and a per-process
    count), its `steps` of TAG after a restart marker at `purge_step`."""
    made = run_dir / "made"
    writer = SummaryWriter(str(made), purge_step=purge_step)
    for step in steps:
        writer.add_scalar(TAG, float(step), step)
    writer.close()
    (path,) = made.iterdir()
    path.rename(run_dir / name)
    made.rmdir()
    return run_dir / name


def shown(run_dir: Path) -> list[int]:
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return [e.step for e in acc.Scalars(TAG)]


def test_a_step_is_logged_as_tensorboards_reader_shows_it(tmp_path: Path) -> None:
    """Two sessions: one logged 0-9, the next restarted at 5 (purge_step) and logged 5-7;
    TensorBoard drops the first's 5-9 and shows 0-7, each once."""
    write(tmp_path, "events.out.tfevents.1", range(10))
    write(tmp_path, "events.out.tfevents.2", range(5, 8), purge_step=5)
    assert shown(tmp_path) == list(range(8))
    assert [step for step in range(12) if logged_at(tmp_path, TAG, step)] == list(range(8))
    assert not logged_at(tmp_path, "latency/mean", 3)


def test_a_marker_past_a_step_keeps_it(tmp_path: Path) -> None:
    """A resume from step 5 marks a restart past it (6): the stopped run's point at 5 stays,
    and a resumed run that wrote its own would show 5 twice."""
    write(tmp_path, "events.out.tfevents.1", range(10))
    write(tmp_path, "events.out.tfevents.2", range(6, 8), purge_step=6)
    assert shown(tmp_path) == list(range(8))
    assert logged_at(tmp_path, TAG, 5) and not logged_at(tmp_path, TAG, 8)


def test_noise_in_a_recorded_file_leaves_the_later_files_points(tmp_path: Path) -> None:
    """A record naming the first file, whose bytes up to the recorded size are then made
    noise: the points of the later file are found, whether the record is of the step, of
    another or unreadable, nothing raises, and the noise shows no point. The later file's
    points are not behind the noise, so this passes reading every file whole too: that
    reading starts at the recorded size is checked, with noise and point in one file, by
    test_the_record_size_is_where_reading_starts_in_that_file."""
    first = write(tmp_path, "events.out.tfevents.1", range(3))
    size = first.stat().st_size
    (tmp_path / RECORD).write_text(json.dumps({"num_timesteps": 4, "sizes": {first.name: size}}))
    write(tmp_path, "events.out.tfevents.2", range(4, 6))
    first.write_bytes(b"\xff" * size)
    assert logged_at(tmp_path, TAG, 4)
    # a record of another step, or an unreadable one
    (tmp_path / RECORD).write_text(json.dumps({"num_timesteps": 3, "sizes": {first.name: size}}))
    assert logged_at(tmp_path, TAG, 4)
    (tmp_path / RECORD).write_text("{not json")
    assert logged_at(tmp_path, TAG, 5) and not logged_at(tmp_path, TAG, 1)


@pytest.mark.parametrize("cut", [1, 7, 13])
def test_a_record_cut_short_ends_the_file(tmp_path: Path, cut: int) -> None:
    """A process killed while it wrote an event left it cut short: the events before it count,
    and nothing raises."""
    path = write(tmp_path, "events.out.tfevents.1", range(5))
    path.write_bytes(path.read_bytes()[:-cut])
    assert [step for step in range(5) if logged_at(tmp_path, TAG, step)] == [0, 1, 2, 3]


def test_mark_events_puts_the_events_on_disk_and_records_where_they_end(tmp_path: Path) -> None:
    """A checkpoint's save marks the events first: the points written before it are on disk
    (a run killed after the save keeps them), and a resume reads on from the sizes recorded."""
    from agents.callbacks import tensorboard_logger, tensorboard_writer

    logger = tensorboard_logger(str(tmp_path))
    writer = tensorboard_writer(logger)
    for step in range(20):
        writer.add_scalar(TAG, 1.0, step)
    mark_events(logger, tmp_path, 20)
    (path,) = tmp_path.glob("*tfevents*")
    record = json.loads((tmp_path / RECORD).read_text())
    assert record == {"num_timesteps": 20, "sizes": {path.name: path.stat().st_size}}
    assert logged_at(tmp_path, TAG, 19)     # another step's record: the file read whole
    assert not logged_at(tmp_path, TAG, 20)
    writer.add_scalar(TAG, 1.0, 20)
    logger.close()
    assert logged_at(tmp_path, TAG, 20)     # after the recorded size


def test_a_marker_at_the_step_itself_drops_the_earlier_point_there(tmp_path: Path) -> None:
    """A restart at 5 that then logged 6 and 7 only: TensorBoard drops the first session's 5
    and shows no point at 5, so a resume from 5 must log it."""
    write(tmp_path, "events.out.tfevents.1", range(10))
    write(tmp_path, "events.out.tfevents.2", range(6, 8), purge_step=5)
    assert shown(tmp_path) == [0, 1, 2, 3, 4, 6, 7]
    assert not logged_at(tmp_path, TAG, 5) and logged_at(tmp_path, TAG, 4)


def test_the_record_size_is_where_reading_starts_in_that_file(tmp_path: Path) -> None:
    """The bytes before the recorded size are not read, in the file it names: noise there
    (read, it ended the file) leaves the point after it shown."""
    before = write(tmp_path, "before", range(3)).read_bytes()
    after = write(tmp_path, "after", range(4, 6)).read_bytes()
    (tmp_path / "before").unlink(), (tmp_path / "after").unlink()
    path = tmp_path / "events.out.tfevents.1"
    path.write_bytes(b"\xff" * len(before) + after)
    (tmp_path / RECORD).write_text(json.dumps({"num_timesteps": 4,
                                               "sizes": {path.name: len(before)}}))
    assert logged_at(tmp_path, TAG, 4)


@pytest.mark.parametrize("record", [
    "[]", '{"num_timesteps": 4}', '{"num_timesteps": 4, "sizes": [1]}',
    '{"num_timesteps": 4, "sizes": {"events.out.tfevents.1": true}}',
    '{"num_timesteps": 4, "sizes": {"events.out.tfevents.1": "40"}}',
])
def test_a_damaged_record_reads_the_files_whole(tmp_path: Path, record: str) -> None:
    write(tmp_path, "events.out.tfevents.1", range(6))
    (tmp_path / RECORD).write_text(record)
    assert logged_at(tmp_path, TAG, 4)


def _frame(data: bytes) -> bytes:
    """`data` as a TFRecord (checksums left 0: they are not read)."""
    import struct

    return struct.pack("<Q", len(data)) + b"\0" * 4 + data + b"\0" * 4


@pytest.mark.parametrize("tail", ["a record that does not parse", "a header cut short"])
def test_what_tensorboard_cannot_read_ends_the_file(tmp_path: Path, tail: str) -> None:
    """TensorBoard stops reading a file at a record that does not parse: the points after it
    are not shown. A header cut short (a process killed writing it) raises nothing."""
    first = write(tmp_path, "first", range(3)).read_bytes()
    later = write(tmp_path, "later", range(4, 6)).read_bytes()
    (tmp_path / "first").unlink(), (tmp_path / "later").unlink()
    path = tmp_path / "events.out.tfevents.1"
    if tail == "a record that does not parse":
        path.write_bytes(first + _frame(b"\xff" * 16) + later)
        assert logged_at(tmp_path, TAG, 2) and not logged_at(tmp_path, TAG, 4)
    else:
        path.write_bytes(first + b"\0" * 5)
        assert logged_at(tmp_path, TAG, 2)


def test_a_folder_named_as_an_events_file_is_not_read(tmp_path: Path) -> None:
    write(tmp_path, "events.out.tfevents.1", range(3))
    (tmp_path / "events.out.tfevents.0").mkdir()
    assert logged_at(tmp_path, TAG, 2)
