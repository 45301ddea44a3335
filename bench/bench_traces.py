"""Trace reading: rows per second and peak memory per row of ``read_trace`` and the batching.

    python bench/bench_traces.py [--rows 300000] [--repeats 3]

A week of a 2024 Azure LLM trace is 17-27 million rows, so a reader's cost per row is what
decides whether such a file can be replayed at all. The script writes a synthetic trace in
that format (``2024-05-10 00:00:00.009930+00:00``; some rows without fractional seconds, as
in the real files) to a temporary folder and reports, as ratios against references in the
same process:

- time: ``read_trace`` against a bare ``csv.reader`` pass over the same file (which checks
  and converts nothing), and ``batch_columns`` (the env's batching) against ``read_trace``;
- memory: ``read_trace``'s peak allocation (tracemalloc) per row against the 24 bytes per row
  its three int64/float64 result arrays need. Targets: time <= 12x the bare pass (every field
  is checked, in Python); peak memory <= 4x the result. Reading the whole file into a list of
  lines and the times into a list of Python ints, as read_trace did before, took ~10x the
  result's memory and ~1.4x the time it takes now.

Exit status (as every bench/ script's): 0 when both targets are met, 1 when one is missed, 2
for a bad option (before anything is timed).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):   # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from agents.docstrings import module_docstring  # noqa: E402
from agents.interrupts import run_stoppable  # noqa: E402
from envs.traces import HEADER, batch_columns, read_trace  # noqa: E402
from inference.messages import ShortErrorParser  # noqa: E402

TARGET_TIME_RATIO = 12.0
TARGET_MEMORY_RATIO = 4.0
RESULT_BYTES_PER_ROW = 24   # time_s float64 + two int64 token columns


# The most rows timed: a week of the real trace and more, about 3 GB at the peak (the generated
# columns and the reader's ~57 B a row).
MAX_ROWS = 30_000_000


def write_trace(path: Path, rows: int, seed: int = 0) -> None:
    """A synthetic trace in the 2024 format: ~30 requests/s, one row in ten on a whole second."""
    rng = np.random.default_rng(seed)
    micros = np.cumsum(rng.exponential(33_000, rows)).astype(np.int64)
    micros[::10] = micros[::10] // 1_000_000 * 1_000_000
    # back in order by sorting: lifting each rounded row to the row before it (a running
    # maximum) gave it that row's fraction again, leaving ~1 row in 300 on a whole second
    micros.sort()
    stamps = np.datetime64("2024-05-10T00:00:00", "us") + micros.astype("timedelta64[us]")
    context = rng.integers(1, 8000, rows)
    generated = rng.integers(1, 500, rows)
    with path.open("w", encoding="utf-8") as out:
        out.write(",".join(HEADER) + "\n")
        for stamp, c, g in zip(stamps.astype(str), context, generated, strict=True):
            text = stamp.replace("T", " ")
            if text.endswith(".000000"):
                text = text[:-7]
            out.write(f"{text}+00:00,{c},{g}\n")


def median_seconds(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bare_csv_pass(path: Path) -> int:
    with path.open(newline="", encoding="utf-8") as file:
        return sum(1 for _ in csv.reader(file))


def peak_bytes(work: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main(argv: list[str] | None = None) -> int:
    parser = ShortErrorParser(description=module_docstring(__doc__, __file__).split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rows", type=int, default=300_000, help="rows of the synthetic trace")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each; the median")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.repeats < 1:
        parser.error("--rows and --repeats must be >= 1")
    if args.rows > MAX_ROWS:
        # 1e12 rows was numpy's memory error, a traceback, as the trace was generated
        parser.error(f"--rows must be at most {MAX_ROWS:,} (a week of the 2024 trace is 17-27 "
                     f"million rows), got {args.rows:,}")

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.csv"
        write_trace(path, args.rows)
        bare = median_seconds(lambda: bare_csv_pass(path), args.repeats)
        read = median_seconds(lambda: read_trace(path), args.repeats)
        trace = read_trace(path)
        batch = median_seconds(lambda: batch_columns(trace), args.repeats)
        peak = peak_bytes(lambda: read_trace(path))
    per_row = peak / args.rows
    time_ratio, memory_ratio = read / bare, per_row / RESULT_BYTES_PER_ROW
    time_ok, memory_ok = time_ratio <= TARGET_TIME_RATIO, memory_ratio <= TARGET_MEMORY_RATIO
    print(f"{args.rows:,} rows, median of {args.repeats}")
    print(f"  read_trace: {args.rows / read:,.0f} rows/s, {time_ratio:.1f}x a bare csv.reader "
          f"pass (target <= {TARGET_TIME_RATIO:g}x): {'ok' if time_ok else 'MISSED'}")
    print(f"  batch_columns: {batch / read:.2f}x read_trace's time ({len(batch_columns(trace)):,} batches)")
    print(f"  peak memory: {per_row:.0f} B/row, {memory_ratio:.1f}x the result's "
          f"{RESULT_BYTES_PER_ROW} B/row (target <= {TARGET_MEMORY_RATIO:g}x): "
          f"{'ok' if memory_ok else 'MISSED'}")
    return 0 if time_ok and memory_ok else 1


if __name__ == "__main__":
    # Ctrl-C and SIGTERM end it in one line, a temporary folder removed on the way out
    sys.exit(run_stoppable(Path(__file__).name, main))
