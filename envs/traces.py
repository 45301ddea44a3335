"""Real production workloads: the Azure LLM inference traces (2023), replayed as task streams.

Two traces ship with the package (see ``envs/data/README.md`` for the attribution, CC-BY 4.0,
Patel et al., "Splitwise", ISCA 2024): ``"azure-code"`` (code completion, 8,819 requests) and
``"azure-conv"`` (conversation, 19,366 requests), each about an hour long.

Format
    CSV with the header ``TIMESTAMP,ContextTokens,GeneratedTokens`` and one request per row, in
    arrival order. ``TIMESTAMP`` looks like ``2023-11-16 18:17:03.9799600`` (7 fractional digits,
    which ``datetime.strptime``'s ``%f`` rejects, so it is parsed here by hand, to the nanosecond).
    A UTC offset after it (``+00:00``, ``-0500`` or ``Z``, as pandas writes time-zone-aware
    times) is taken into account; a file must give one on every row or on none, since a time
    without one could be in any zone.
    The 2024 Azure traces (``AzureLLMInferenceTrace_{code,conv}_1week.csv``, DynamoLLM) read as
    they are: the same header, times like ``2024-05-10 00:00:00.009930+00:00`` (a whole second
    without its fraction), 17-27 million rows a week. The reader streams the file into int64
    arrays, about 55 bytes a row at its peak (``bench/bench_traces.py``), so such a week takes
    1-2 GB and a couple of minutes, once per process for each time scale, window and batch cap
    the environment replays it with (``envs.workload`` keeps the batches of the last 8).
    :func:`read_trace` returns a :class:`Trace` of numpy arrays with times in seconds since the
    first request. Both token counts must be integers >= 1: the real traces contain no zero, so a
    zero is treated as a corrupt row and rejected rather than silently patched; and at most 10^9
    (``MAX_TOKENS``, the cap a scenario puts on a size).

Batching rule (:func:`batch_requests`)
    The environment's unit of work is a static-shape batch (a :class:`inference.task.Task`), so
    requests are grouped the way a simple time-window batcher would group them:

    1. arrivals are replayed at ``time_s / time_scale`` (``time_scale > 1`` compresses time and
       raises the load; ``2`` means twice the request rate);
    2. a batch opens at the arrival of the first request not yet batched, at time ``t0``;
    3. it collects, in order, every request arriving at or before ``t0 + window_s``, up to
       ``max_batch`` requests;
    4. it is dispatched as soon as it is full (at the arrival of its ``max_batch``-th request),
       otherwise when its window closes at ``t0 + window_s`` -- the batcher cannot know that no
       other request will come before then. Dispatch times are therefore non-decreasing.

    A batch becomes ``Task(batch=len, prompt_tokens=max context, output_tokens=max generated,
    domain=0, arrival=dispatch time)``: sequences are padded to the longest prompt, and the batch
    decodes until its longest sequence is done. Domains are left at 0 for the environment to assign.
"""

from __future__ import annotations

import math
import os
import re
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import BinaryIO

import numpy as np

from inference.checks import is_integer, is_number
from inference.messages import did_you_mean, shown
from inference.task import MAX_SIZE, Task
from inference.yamlio import cannot_read, not_a_file, unusable_path

_DATA_DIR = Path(__file__).resolve().parent / "data"

#: Packaged traces, by name.
TRACES: dict[str, Path] = {
    "azure-code": _DATA_DIR / "AzureLLMInferenceTrace_code.csv",
    "azure-conv": _DATA_DIR / "AzureLLMInferenceTrace_conv.csv",
}

HEADER: tuple[str, str, str] = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")

_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(Z|[+-]\d{2}:?\d{2})?", re.ASCII
)
_NS_PER_S = 1_000_000_000
_NS_PER_DAY = 86_400 * _NS_PER_S


@dataclass(frozen=True, eq=False)
class Trace:
    """A request trace as parallel read-only arrays (struct of arrays: fast to load and slice).

    Attributes:
        name: the trace's name, or the path it was read from.
        time_s: arrival times in seconds since the first request (float64, non-decreasing, from 0
            as `read_trace` gives them; a Trace built by hand needs them finite and >= 0).
        context_tokens: prompt length of each request (int64, 1..`MAX_TOKENS`).
        generated_tokens: tokens generated for each request (int64, 1..`MAX_TOKENS`).
    """

    name: str
    time_s: np.ndarray
    context_tokens: np.ndarray
    generated_tokens: np.ndarray

    def __post_init__(self) -> None:
        # Own read-only copies: frozen should mean the data too, not just the attributes.
        for field, dtype in (
            ("time_s", np.float64),
            ("context_tokens", np.int64),
            ("generated_tokens", np.int64),
        ):
            given = np.asarray(getattr(self, field))
            if dtype is np.int64 and given.dtype.kind not in "iu" and not (
                    given.dtype.kind == "f" and np.all(np.isfinite(given))
                    and np.all(given == np.round(given))):
                # The cast below truncates: 2.7 tokens became 2 (and NaN or True a number).
                raise ValueError(f"trace {shown(self.name)}: {field} must hold integers, got "
                                 f"dtype {given.dtype}")
            array = np.array(given, dtype=dtype)
            array.setflags(write=False)
            object.__setattr__(self, field, array)
        n = len(self.time_s)
        if n == 0:
            raise ValueError(f"trace {shown(self.name)} has no requests")
        if len(self.context_tokens) != n or len(self.generated_tokens) != n:
            raise ValueError(f"trace {shown(self.name)}: arrays must all have the same length")
        # The invariants the attributes promise, which `read_trace` guarantees row by row but a
        # Trace built by hand did not: `batch_requests` hands its data to `Task.many_trusted`,
        # which skips Task's checks, so it returned tasks of 0 or -5 prompt tokens and NaN or
        # negative arrivals (and unsorted times broke the window search, which bisects).
        t = self.time_s
        if not (np.all(np.isfinite(t)) and t[0] >= 0 and np.all(t[1:] >= t[:-1])):
            raise ValueError(f"trace {shown(self.name)}: time_s must be finite, >= 0 and "
                             "non-decreasing")
        limit = MAX_TOKENS
        for field in ("context_tokens", "generated_tokens"):
            if getattr(self, field).min() < 1:
                raise ValueError(f"trace {shown(self.name)}: {field} must all be >= 1")
            if getattr(self, field).max() > limit:
                raise ValueError(f"trace {shown(self.name)}: {field} must all be <= {limit} "
                                 "(the scenarios' cap on a size)")

    def __len__(self) -> int:
        return len(self.time_s)

    @property
    def duration_s(self) -> float:
        """Seconds from the first to the last request."""
        return float(self.time_s[-1])


def _unknown(name_or_path: str | os.PathLike[str]) -> ValueError:
    """The error for a name that is neither a packaged trace nor a path: built only when
    raised, as every trace a scenario or env names is resolved on the way to a valid one."""
    return ValueError(f"unknown trace {shown(name_or_path)}"
                      f"{did_you_mean([os.fspath(name_or_path)], TRACES)}; known names: "
                      f"{', '.join(sorted(TRACES))} (or pass the path of a CSV file)")


def _resolve(name_or_path: str | os.PathLike[str]) -> tuple[str, Path]:
    """Map a packaged name or a file path to (display name, path), with errors that say which."""
    if isinstance(name_or_path, str) and name_or_path in TRACES:
        path = TRACES[name_or_path]
        if not path.is_file():
            raise ValueError(f"packaged trace {shown(name_or_path)} is missing: no file at {path}")
        return name_or_path, path
    if isinstance(name_or_path, str) and not name_or_path.strip():
        raise _unknown(name_or_path)   # Path("") is the working folder: "trace file . is a folder"
    problem = unusable_path(name_or_path)
    if problem is not None:
        raise ValueError(f"trace {shown(name_or_path)} is neither a packaged trace nor a "
                         f"usable path: {problem}")
    path = Path(name_or_path)
    if path.is_file():
        return str(path), path
    if path.exists():   # a folder, /dev/null
        raise ValueError(f"trace file {shown(path, quote=False)} {not_a_file(path, 'a CSV file')}")
    looks_like_path = (
        not isinstance(name_or_path, str)
        or "/" in name_or_path
        or os.sep in name_or_path
        or path.suffix.lower() == ".csv"
    )
    if looks_like_path:
        raise ValueError(f"trace file not found: {shown(path, quote=False)}")
    raise _unknown(name_or_path)


class _TimestampParser:
    """UTC nanoseconds since 0001-01-01 for ``YYYY-MM-DD HH:MM:SS[.fffffffff][offset]``, and
    whether the text gave a UTC offset; ValueError if it is not such a timestamp.

    A trace's rows come in time order, many to a second (~30 in the 2024 Azure traces), so the
    last whole second's nanoseconds are kept, and each offset's: working out the calendar on
    every row was most of the time to read a trace.
    """

    def __init__(self) -> None:
        self._second: tuple[str, int] = ("", 0)    # the last "YYYY-MM-DD HH:MM:SS" and its ns
        self._offsets: dict[str, int] = {}

    def __call__(self, text: str) -> tuple[int, bool]:
        match = _TIMESTAMP.fullmatch(text)
        if match is None:
            raise ValueError("not a timestamp like 2023-11-16 18:17:03.9799600")
        fraction, offset = match.group(7, 8)
        key = text[:19]    # the pattern's fields up to the seconds have fixed widths
        if key == self._second[0]:
            ns = self._second[1]
        else:
            ns = self._whole_second_ns(match)
            self._second = (key, ns)
        if fraction is not None:
            ns += int(fraction.ljust(9, "0"))
        if offset is None:
            return ns, False
        offset_ns = self._offsets.get(offset)
        if offset_ns is None:
            offset_ns = self._offsets[offset] = _offset_ns(offset)
        return ns - offset_ns, True

    @staticmethod
    def _whole_second_ns(match: re.Match[str]) -> int:
        year, month, day, hour, minute, second = (int(g) for g in match.group(1, 2, 3, 4, 5, 6))
        if hour > 23 or minute > 59 or second > 59:
            raise ValueError("time of day out of range")
        days = date(year, month, day).toordinal()   # date() validates the calendar
        return days * _NS_PER_DAY + ((hour * 60 + minute) * 60 + second) * _NS_PER_S


def _offset_ns(offset: str) -> int:
    """``Z``, ``+HH:MM`` or ``-HHMM`` in nanoseconds east of UTC."""
    if offset == "Z":
        return 0
    digits = offset[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:])
    if hours > 23 or minutes > 59:
        raise ValueError(f"UTC offset {offset} out of range")
    sign = -1 if offset[0] == "-" else 1
    return sign * (hours * 60 + minutes) * 60 * _NS_PER_S


_INT64_MAX = int(np.iinfo(np.int64).max)


# The most tokens a request of a trace may count: the scenarios' cap on a size, far beyond any
# real request (up to int64's largest, 9.2e18, were taken from a trace).
MAX_TOKENS = int(MAX_SIZE)


def _too_many_tokens(limit: int) -> str:
    return f"must be an integer <= {limit} (the scenarios' cap on a size)"


def _parse_tokens(text: str, limit: int) -> int:
    """A token count: plain ASCII digits, 1..`limit` (int() alone would also take '+3', ' 3',
    '1_0')."""
    if not (text.isascii() and text.isdigit()):
        raise ValueError("must be an integer >= 1")
    # the length test first: int() refuses strings of over 4,300 digits with its own message
    if len(text) > len(str(limit)) and len(text.lstrip("0")) > len(str(limit)):
        raise ValueError(_too_many_tokens(limit))
    value = int(text)
    if value < 1:
        raise ValueError("must be an integer >= 1")
    if value > limit:
        raise ValueError(_too_many_tokens(limit))
    return value


def read_trace(name_or_path: str | os.PathLike[str]) -> Trace:
    """Read a packaged trace (``"azure-code"``, ``"azure-conv"``) or a CSV file in the same format.

    Every row is checked, because a silently skipped or mangled row would change the workload an
    allocator is evaluated on. Errors are ValueErrors naming the file, the 1-based line number and
    the field.
    """
    name, path = _resolve(name_or_path)
    where = shown(path, quote=False)   # the file, as the errors name it
    try:
        with path.open("rb") as file:
            if file.read(2) == b"\x1f\x8b":  # gzip's magic: it failed as "not UTF-8 text (byte 0x8b)"
                raise ValueError(f"{where}: a gzip-compressed file; decompress it first (gunzip -k)")
            file.seek(0)
            # Row by row from the file, into compact int64 arrays: a week of a 2024 Azure trace
            # is ~27M rows, which as a list of lines and of Python ints took gigabytes.
            times_ns, context, generated = _read_rows(where, file)
    except OSError as exc:   # no permission to read it: a traceback out of train.py
        raise ValueError(f"{where} {cannot_read(exc)}") from None
    return Trace(name, np.frombuffer(times_ns, dtype=np.int64) / _NS_PER_S,
                 np.frombuffer(context, dtype=np.int64), np.frombuffer(generated, dtype=np.int64))


def _lines(where: str, file: BinaryIO) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of each line but the blank ones at the end; a blank line
    before a later line is given as it is, for the row check to refuse."""
    blank: list[tuple[int, str]] = []
    for lineno, raw in enumerate(file, start=1):
        try:
            line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
        except UnicodeDecodeError as error:   # its own message names neither file nor line
            raise ValueError(
                f"{where}, line {lineno}: not UTF-8 text (byte {error.object[error.start]:#04x})"
            ) from None
        line = line.rstrip("\r\n")
        if not line.strip():   # held back: blank lines at the end, as editors leave them, are no rows
            blank.append((lineno, line))
            continue
        yield from blank
        blank.clear()
        yield lineno, line


QUOTE = '"'
# The rows are read as plain comma-separated text, with no CSV quoting: a quoted field was
# refused as a bad value, and a quoted "4,808" as a fourth field.
_QUOTED_VALUE_HINT = " (in quotes: write the fields without quotes)"
_QUOTED_ROW_HINT = (" (it holds quotes: write the fields without quotes, and numbers without "
                    "thousands separators)")


def _header_hint(line: str) -> str:
    """' (...)': what a common exporter did to the header `line`, and how to write it, where
    the expected header is in it: another separator (a spreadsheet's ';' or a TSV's tabs),
    a leading index column (pandas' ``to_csv`` without ``index=False``), quoted fields, names
    in another case, a separator at the end; '' for any other header."""
    separators = [(sep, what) for sep, what in ((";", "';'"), ("\t", "tabs")) if sep in line]
    sep, what = separators[0] if separators and "," not in line else (",", "")
    raw = [f.strip() for f in line.split(sep)]
    trailing = len(raw) > len(HEADER) and raw[-1] == ""      # a trailing separator
    if trailing:
        raw = raw[:-1]
    fields = [f[1:-1] if len(f) >= 2 and f[0] == f[-1] == QUOTE else f for f in raw]
    cased = [f.lower() for f in fields[-len(HEADER):]] == [h.lower() for h in HEADER]
    if not cased or len(fields) > len(HEADER) + 1:
        return ""
    found = [f"columns separated by {what}: separate them by commas"] if what else []
    if fields[-len(HEADER):] != list(HEADER):
        found.append(f"names in another case: write them as {','.join(HEADER)}")
    if trailing:
        found.append(f"a {what or 'comma'} at the end of the line: leave it out, on the rows too")
    if len(fields) > len(HEADER):
        found.append("an unnamed index column first, as pandas' to_csv writes one: save with "
                     "index=False" if fields[0] in ("", "Unnamed: 0")
                     else f"a column {shown(fields[0])} first: leave it out")
    if fields != raw:
        found.append("fields in quotes: write them without quotes")
    return f" ({'; '.join(found)})"


def _read_rows(where: str, file: BinaryIO) -> tuple[array, array, array]:
    """The checked rows: UTC nanoseconds since the first row's time, and both token counts."""
    lines = _lines(where, file)
    first = next(lines, None)
    if first is None or [f.strip() for f in first[1].split(",")] != list(HEADER):
        got = shown(first[1], limit=80) if first else "an empty file"   # columns renamed, reordered, added
        raise ValueError(f"{where}: expected the header {','.join(HEADER)!r} on line 1, got {got}"
                         f"{_header_hint(first[1]) if first else ''}")
    times_ns, context, generated = array("q"), array("q"), array("q")
    parse_timestamp = _TimestampParser()
    limit = MAX_TOKENS
    first_ns = previous_ns = None
    zoned: bool | None = None     # whether the rows give a UTC offset, set by the first row
    for lineno, line in lines:
        fields = line.split(",")
        if len(fields) != len(HEADER):
            raise ValueError(
                f"{where}, line {lineno}: expected {len(HEADER)} fields ({','.join(HEADER)}), "
                f"got {len(fields)}{_QUOTED_ROW_HINT if QUOTE in line else ''}"
            )
        field = HEADER[0]
        try:
            now_ns, has_offset = parse_timestamp(fields[0].strip())
            if zoned is None:
                zoned = has_offset
            elif has_offset != zoned:
                raise ValueError("a UTC offset on some rows and not on others (line 2 "
                                 f"{'has' if zoned else 'has none'}); give it on every row "
                                 "or on none")
            field = HEADER[1]
            context.append(_parse_tokens(fields[1].strip(), limit))
            field = HEADER[2]
            generated.append(_parse_tokens(fields[2].strip(), limit))
        except ValueError as error:
            text = fields[HEADER.index(field)]
            hint = _QUOTED_VALUE_HINT if QUOTE in text else ""
            raise ValueError(f"{where}, line {lineno}, {field}: {error}, got "
                             f"{shown(text, limit=40)}{hint}") from None
        if previous_ns is not None and now_ns < previous_ns:
            raise ValueError(
                f"{where}, line {lineno}, {HEADER[0]}: timestamps go backwards "
                f"({fields[0].strip()} is earlier than the previous row's): sort the rows by "
                f"{HEADER[0]}"
            )
        if first_ns is None:
            first_ns = now_ns
        # Differences from the first row, in exact Python ints: ns since year 1 overflow int64,
        # and float64 seconds since year 1 would lose the microseconds.
        since_first_ns = now_ns - first_ns
        if since_first_ns > _INT64_MAX:
            raise ValueError(f"{where}, line {lineno}, {HEADER[0]}: more than 292 years after "
                             "the first row's time")
        times_ns.append(since_first_ns)
        previous_ns = now_ns
    if not times_ns:
        raise ValueError(f"{where}: empty trace (a header and no requests)")
    return times_ns, context, generated


def _as_trace(trace: Trace | str | os.PathLike[str]) -> Trace:
    return trace if isinstance(trace, Trace) else read_trace(trace)


def _check_real(name: str, value: float, *, positive: bool) -> float:
    if (
        not is_number(value)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
    ):
        need = "a positive finite number" if positive else "a finite number >= 0"
        raise ValueError(f"{name} must be {need}, got {shown(value)}")
    return float(value)


def batch_requests(
    trace: Trace | str | os.PathLike[str],
    *,
    time_scale: float = 1.0,
    window_s: float = 0.5,
    max_batch: int = 32,
) -> list[Task]:
    """Group a trace's requests into batches (tasks) by the time-window rule in the module docstring.

    Args:
        trace: a :class:`Trace`, or a name or path for :func:`read_trace`.
        time_scale: arrivals are replayed at ``time_s / time_scale``; > 1 raises the load.
        window_s: how long (in replayed seconds) a batch waits for more requests after it opens.
        max_batch: the most requests in one batch; a full batch is dispatched at once.

    Returns:
        Tasks in dispatch order; their ``batch`` sizes add up to the number of requests.
    """
    columns = batch_columns(trace, time_scale=time_scale, window_s=window_s, max_batch=max_batch)
    return list(Task.many_trusted(columns.batch.tolist(), columns.prompt_tokens.tolist(),
                                  columns.output_tokens.tolist(), [0] * len(columns),
                                  columns.arrival.tolist()))


@dataclass(frozen=True, eq=False)
class BatchColumns:
    """:func:`batch_requests`'s tasks as parallel arrays (domain 0 for all): what an environment
    replays from, since a week-long trace's millions of Task objects took gigabytes."""

    batch: np.ndarray           # int64 requests per batch
    prompt_tokens: np.ndarray   # int64 longest context in the batch
    output_tokens: np.ndarray   # int64 longest generation in the batch
    arrival: np.ndarray         # float64 dispatch time, non-decreasing

    def __post_init__(self) -> None:
        for array_ in (self.batch, self.prompt_tokens, self.output_tokens, self.arrival):
            array_.setflags(write=False)   # the env's cache hands the same arrays to every reset

    def __len__(self) -> int:
        return len(self.batch)


def batch_columns(
    trace: Trace | str | os.PathLike[str],
    *,
    time_scale: float = 1.0,
    window_s: float = 0.5,
    max_batch: int = 32,
) -> BatchColumns:
    """:func:`batch_requests` as arrays; same arguments, same checks."""
    time_scale = _check_real("time_scale", time_scale, positive=True)
    window_s = _check_real("window_s", window_s, positive=False)
    if not is_integer(max_batch) or max_batch < 1:
        raise ValueError(f"max_batch must be an integer >= 1, got {max_batch!r}")
    max_batch = int(max_batch)
    trace = _as_trace(trace)

    t = trace.time_s / time_scale
    # Each batch's end is found from its start, so the walk is sequential; the padding (the
    # longest prompt and generation of each batch) is then one reduceat per column.
    # One searchsorted over the whole trace gives every request's window end up front.
    window_end = np.searchsorted(t, t + window_s, side="right")
    # Compact arrays, not lists: at a slowed replay (trace_time_scale 0.05) nearly every request
    # is a batch of its own, and a Python int and float per batch took ~70 bytes a request, the
    # most of a week-long trace's peak.
    starts = array("q")
    dispatch = array("d")
    start, n = 0, len(t)
    while start < n:
        end = min(int(window_end[start]), start + max_batch)
        starts.append(start)
        dispatch.append(float(t[end - 1]) if end - start == max_batch else float(t[start]) + window_s)
        start = end
    del window_end, t
    bounds = np.frombuffer(starts, dtype=np.int64).astype(np.intp, copy=False)
    return BatchColumns(
        batch=np.diff(bounds, append=n).astype(np.int64, copy=False),
        prompt_tokens=np.maximum.reduceat(trace.context_tokens, bounds),
        output_tokens=np.maximum.reduceat(trace.generated_tokens, bounds),
        arrival=np.frombuffer(dispatch, dtype=np.float64),
    )


def trace_percentiles(
    trace: Trace | str | os.PathLike[str], q: Iterable[float] = (50, 90, 99)
) -> dict[str, dict[float, float]]:
    """Token-count percentiles (numpy's default linear method), to check and describe a trace.

    Returns ``{"context_tokens": {q: value, ...}, "generated_tokens": {q: value, ...}}``.
    """
    trace = _as_trace(trace)
    qs = list(q)
    return {
        field: dict(zip(qs, np.percentile(getattr(trace, field), qs).tolist(), strict=True))
        for field in ("context_tokens", "generated_tokens")
    }
