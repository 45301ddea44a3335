"""A run folder's TensorBoard events files, read as TensorBoard reads them, for ``--resume``.

A run resumed from its checkpoint at step S may find events past S in the folder: a run stopped
(killed, crashed) after that checkpoint had logged them. Its new events file starts with a
restart marker (``agents.callbacks.drop_events_past``) so that TensorBoard drops the old ones
past S; what it keeps at S itself, a resume must not log again (``logged_at``).

Finding that out reads the events written since the checkpoint, not the whole folder: each
save of a model a resume can start from (a checkpoint, model.zip) first flushes the run's
events and records each file's size (``mark_events``, in ``RECORD``), and ``logged_at`` reads
the files from there. Where the record is of another step (a folder from before it, a save
that failed after it) it reads them whole, a few seconds a million events.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stable_baselines3.common.logger import TensorBoardOutputFormat

from agents.files import write_text
from agents.tfrecords import events_files, records

RECORD = "tensorboard.json"     # in the run folder: the events files' sizes at the newest save


def tensorboard_writer(logger: Any) -> Any:
    """The SummaryWriter behind an SB3 logger (None if it does not write TensorBoard)."""
    for fmt in getattr(logger, "output_formats", ()):
        if isinstance(fmt, TensorBoardOutputFormat):
            return fmt.writer
    return None


def mark_events(logger: Any, run_dir: Path, steps: int) -> None:
    """Before the model of `steps` steps is saved in `run_dir`: the events `logger` holds, all
    on disk (those of the steps before it, which a run killed after the save keeps), and each
    events file's size then, in ``RECORD``. A logger without TensorBoard records nothing."""
    writer = tensorboard_writer(logger)
    if writer is None:
        return
    writer.flush()
    sizes = {p.name: p.stat().st_size for p in events_files(run_dir)}
    write_text(run_dir / RECORD, json.dumps({"num_timesteps": steps, "sizes": sizes}) + "\n")


def logged_at(run_dir: Path, tag: str, step: int) -> bool:
    """Whether TensorBoard shows a point of `tag` at `step` from the events files in `run_dir`,
    the model of `step` steps being the newest saved. TensorBoard reads the files by name, and
    a restart marker (``SessionLog.START`` at step P, as SummaryWriter's ``purge_step`` writes)
    drops the points it has read at steps from P on, of every tag.

    Only the events written since that model was saved are read: one of `step` logged before
    it is of a stretch of training that a later resume from an earlier step replaced, and that
    resume's marker, written before the save, dropped it."""
    from tensorboard.compat.proto.event_pb2 import SessionLog

    start = _sizes_at(run_dir, step)
    logged = False
    for path in events_files(run_dir):
        for event in _events(path, start.get(path.name, 0)):
            if event.HasField("session_log"):
                if event.session_log.status == SessionLog.START and event.step <= step:
                    logged = False
            elif event.step == step and any(v.tag == tag for v in event.summary.value):
                logged = True
    return logged


def _sizes_at(run_dir: Path, step: int) -> dict[str, int]:
    """``RECORD``'s sizes where it was written for the model of `step` steps; else none (every
    file is read from its start)."""
    try:
        record = json.loads((run_dir / RECORD).read_text(encoding="utf-8"))
        sizes = record["sizes"]
        if record["num_timesteps"] == step and all(
                isinstance(n, int) and not isinstance(n, bool) for n in sizes.values()):
            return {str(name): n for name, n in sizes.items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass    # no record, or a damaged one: the files are read whole, as without one
    return {}


def _events(path: Path, offset: int) -> Iterator[Any]:
    """The events of an events file from byte `offset`, a record's start
    (``agents.tfrecords.records``); a record that does not parse ends the file, as a record
    whose checksum fails ends it for TensorBoard."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto.event_pb2 import Event

    for data in records(path, offset):
        try:
            yield Event.FromString(data)
        except DecodeError:
            return
