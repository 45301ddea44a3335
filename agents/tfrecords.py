"""The records of a TensorBoard events file (TFRecord framing), as raw bytes.

A record is its data's length (8 bytes, little-endian), the length's checksum (4), the data and
the data's checksum (4). The checksums are not checked: TensorBoard's Python reader computes
them in Python, most of its time on a large file. A record cut short at the end (a process
killed while writing it) ends the file, as TensorBoard stops reading a file there.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path

_HEADER = 12                     # a record's length (8 bytes) and the length's checksum (4)
_FOOTER = 4                      # the data's checksum
_LENGTH = struct.Struct("<Q")


def is_events_file(name: str) -> bool:
    """Whether TensorBoard reads a file of this name as events (its IsSummaryEventsFile)."""
    return "tfevents" in name and not name.endswith(".profile-empty")


def events_named(run_dir: Path) -> list[Path]:
    """The folder's entries named as events files, files or not, in the order TensorBoard
    reads its events files: by name."""
    return sorted(p for p in run_dir.iterdir() if is_events_file(p.name))


def events_files(run_dir: Path) -> list[Path]:
    """The folder's events files in the order TensorBoard reads them: by name."""
    return [p for p in events_named(run_dir) if p.is_file()]


def records(path: Path, offset: int = 0) -> Iterator[bytes]:
    """The data of each record of the events file at `path`, from byte `offset` (a record's
    start) to the last whole record."""
    with path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size <= offset:
            return      # nothing to read (and an empty file cannot be mapped)
        # mapped, not read: a 10-million-step run's file is gigabytes, and a read per record
        # took twice the time. A file system that cannot map files gets the file read whole.
        try:
            mapped: mmap.mmap | None = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            mapped = None
        with mapped if mapped is not None else contextlib.nullcontext(f.read()) as data:
            unpack, pos = _LENGTH.unpack_from, offset
            size = min(size, len(data))     # the size mapped or read, should the file change
            while pos + _HEADER <= size:
                (length,) = unpack(data, pos)
                start = pos + _HEADER
                pos = start + length + _FOOTER
                if pos > size:      # cut short, or a length that is noise
                    return
                yield data[start:start + length]
