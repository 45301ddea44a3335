"""Scalar curves out of a run folder's TensorBoard events, as tensorboard's EventAccumulator
shows them, at a fraction of its cost.

EventAccumulator parses every event of a folder and checks each record's checksums in Python,
whatever tag is asked for: a run's ``latency/per_sample`` alone is an event per step, and
reading three curves cost ~45 s a million steps. Here the records are framed
(``agents.tfrecords``) and one is parsed only where its bytes hold what can change the curves
asked for: a wanted tag's name, or the key of a restart marker or a file version (which decide
what TensorBoard drops on a restart), the rest skipped unparsed.
"""

from __future__ import annotations

import os
import re
from array import array
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agents.stats import evenly_spaced
from agents.tfrecords import events_named, is_events_file, records
from inference.yamlio import cannot_read, not_a_file

# The points of a curve kept, as the EventAccumulator of evaluate.py kept them (its
# size_guidance): a line of 10,000 points loses nothing that a plot shows.
MAX_POINTS = 10_000
# An Event's fields that may change a curve without naming its tag, by the byte of their key
# (field number << 3 | 2, a length-delimited field): every record that holds one has the byte.
_FILE_VERSION_KEY = 0x1A        # field 3: its version decides how restarts are seen
_SESSION_LOG_KEY = 0x3A         # field 7: a restart marker (SessionLog.START)
_KEYS_PATTERN = b"[" + bytes([_FILE_VERSION_KEY, _SESSION_LOG_KEY]) + b"]"


def check_events(run_dir: Path) -> list[Path]:
    """The events files EventAccumulator reads for `run_dir`, in its order: a folder's by
    name (``agents.tfrecords.events_named``), a file given itself if its name is an events
    file's. A ValueError names the first of a folder's (every name with "tfevents" in it, as
    TensorBoard's reader takes them) that cannot be read: one without read permission, or a
    folder of that name, was a PermissionError or IsADirectoryError traceback out of the
    reader, after evaluate.py had written its summary."""
    if not run_dir.is_dir():        # a file given itself is read as it is, none as no events
        return [run_dir] if run_dir.is_file() and is_events_file(run_dir.name) else []
    named = events_named(run_dir)
    for path in named:
        if not path.is_file():
            raise ValueError(f"TensorBoard events file {path} {not_a_file(path, 'an events file')}")
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            raise ValueError(f"TensorBoard events file {path} {cannot_read(exc)}") from None
    return named        # each a file: ``agents.tfrecords.events_files``, listed once


class _Curve:
    """A tag's points in the order read: wall time, step and value."""

    def __init__(self) -> None:
        self.wall_times, self.steps, self.values = array("d"), array("q"), array("d")

    def add(self, wall_time: float, step: int, value: float) -> None:
        self.wall_times.append(wall_time)
        self.steps.append(step)
        self.values.append(value)

    def drop_from(self, step: int) -> None:
        """Drops the points at `step` and past it (a restart's purge)."""
        steps = np.frombuffer(self.steps, dtype=np.int64)
        keep = steps < step
        if keep.all():
            return
        for name in ("wall_times", "steps", "values"):
            column = getattr(self, name)
            setattr(self, name, array(column.typecode,
                                      np.frombuffer(column, dtype=column.typecode)[keep]))

    def shown(self) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) by wall time, a step logged again (a resumed run) replacing the
        points at it and past it logged before; more than `MAX_POINTS` thinned evenly."""
        if not self.steps:
            return np.array([]), np.array([])
        order = np.argsort(np.frombuffer(self.wall_times), kind="stable")
        steps = np.frombuffer(self.steps, dtype=np.int64)[order]
        values = np.frombuffer(self.values)[order]
        # kept: a point below the step of every point after it (the stack of the newer
        # winning: each point drops the kept ones at its step and past it)
        later_min = np.minimum.accumulate(steps[::-1])[::-1]
        kept = np.append(steps[:-1] < later_min[1:], True)
        steps, values = steps[kept], values[kept]
        picked = evenly_spaced(len(steps), MAX_POINTS)
        return steps[picked], values[picked]


def read_scalar_tags(run_dir: str | os.PathLike[str], tags: Sequence[str]
                     ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(steps, values) of each of `tags` in the TensorBoard events of `run_dir` (a folder, or
    an events file), empty arrays for a tag it does not hold, the events read once.

    What TensorBoard's EventAccumulator shows, read as it reads them: the folder's events
    files by name, each to its last whole record; the points a restart marker drops (or, in
    files without a version, a step logged out of order) dropped; scalars as written with
    ``simple_value`` (SB3's and SummaryWriter's ``add_scalar``; a tensor-typed scalar is not
    among its scalars either). Then, by wall time, a step logged again (a run resumed from a
    checkpoint) replaces the points at it and past it logged before: the newer win.

    Up to 10,000 points of a curve the result is EventAccumulator's with
    ``size_guidance={"scalars": 10_000}``, point for point. Past that it kept a random sample;
    here 10,000 points evenly spaced over the curve, its first and last among them, the same
    at each read. The record checksums are not checked (``agents.tfrecords``): a record that
    does not parse ends its file, as one whose checksum fails ends it for TensorBoard.

    Cost: every record is framed, and only those that may hold a wanted point parsed: the
    three curves of learning_curves.png in 0.9 s against EventAccumulator's 11.1 s for a
    250,000-step PPO run's 37 MB file (about 4 s against 45 s a million steps; one machine,
    one process; ``bench/bench_events.py``)."""
    from google.protobuf.message import DecodeError
    from tensorboard.backend.event_processing.event_util import ParseFileVersion
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog

    files = check_events(Path(run_dir))
    curves = {tag: _Curve() for tag in tags}
    # one search of the record's bytes: the alternatives of one pattern beat a search each
    may_matter = re.compile(b"|".join([_KEYS_PATTERN, *(re.escape(tag.encode("utf-8"))
                                                         for tag in curves)])).search
    file_version = 0.0              # EventAccumulator's state across the folder's files
    most_recent_step = -1
    for events_file in files:
        for data in records(events_file):
            # what a version-2 reader skips unparsed: no wanted tag, no restart marker and no
            # version in it (an older file's purge needs every event's step)
            if file_version >= 2 and not may_matter(data):
                continue
            try:
                event = Event.FromString(data)
            except DecodeError:
                break
            if event.HasField("file_version"):
                file_version = max(ParseFileVersion(event.file_version), 0.0)
            if file_version >= 2:
                if (event.HasField("session_log")
                        and event.session_log.status == SessionLog.START):
                    for curve in curves.values():
                        curve.drop_from(event.step)
            elif event.step < most_recent_step and event.HasField("summary"):
                for value in event.summary.value:
                    if value.tag in curves:
                        curves[value.tag].drop_from(event.step)
            else:
                most_recent_step = event.step
            for value in event.summary.value:
                if value.tag in curves and value.HasField("simple_value"):
                    curves[value.tag].add(event.wall_time, event.step, value.simple_value)
    return {tag: curve.shown() for tag, curve in curves.items()}
