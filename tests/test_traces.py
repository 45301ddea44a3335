"""Tests for envs.traces: the packaged Azure traces, their validation, and the batching rule."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np
import pytest

from envs.traces import TRACES, Trace, batch_columns, batch_requests, read_trace, trace_percentiles
from inference.task import MAX_SIZE

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
SHARED = Path("/work/shared/data/azure-llm-2023")

# Row counts (header excluded) and the percentile table from envs/data/README.md.
EXPECTED = {
    "azure-code": (8819, (1469, 5187, 7436), (13, 55, 251)),
    "azure-conv": (19366, (1020, 2734, 4142), (129, 424, 601)),
}


@pytest.fixture(scope="module")
def traces() -> dict[str, Trace]:
    return {name: read_trace(name) for name in TRACES}


def write_csv(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


# --- the packaged data -------------------------------------------------------------------------


def test_packaged_files_and_readme_exist() -> None:
    assert set(TRACES) == {"azure-code", "azure-conv"}
    for path in TRACES.values():
        assert path.is_file()
    readme = (next(iter(TRACES.values())).parent / "README.md").read_text(encoding="utf-8")
    for needle in ("Splitwise", "ISCA 2024", "CC-BY 4.0", "Azure Public Dataset", "unchanged"):
        assert needle in readme


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared source copy not available")
def test_packaged_files_are_unchanged_copies() -> None:
    for path in TRACES.values():
        shared = SHARED / path.name
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert digest == hashlib.sha256(shared.read_bytes()).hexdigest(), path.name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_trace_loads_with_expected_rows_and_times(traces: dict[str, Trace], name: str) -> None:
    trace = traces[name]
    rows = EXPECTED[name][0]
    assert len(trace) == rows
    assert trace.time_s.shape == trace.context_tokens.shape == trace.generated_tokens.shape
    assert trace.time_s[0] == 0.0
    assert np.all(np.diff(trace.time_s) >= 0)
    assert 3000 < trace.duration_s < 3700  # "about an hour"
    assert trace.context_tokens.min() >= 1 and trace.generated_tokens.min() >= 1
    with pytest.raises(ValueError):
        trace.time_s[0] = 1.0  # read-only


def test_first_times_are_parsed_to_the_sub_millisecond() -> None:
    # code trace rows 2-3: 18:17:03.9799600 and 18:17:04.0319600 -> 0.052 s apart.
    trace = read_trace("azure-code")
    assert trace.time_s[1] == pytest.approx(0.052, abs=1e-9)
    assert trace.context_tokens[:2].tolist() == [4808, 3180]
    assert trace.generated_tokens[:2].tolist() == [10, 8]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_percentiles_match_readme(traces: dict[str, Trace], name: str) -> None:
    _, context, generated = EXPECTED[name]
    result = trace_percentiles(traces[name])
    assert list(result["context_tokens"]) == [50, 90, 99]
    for field, expected in (("context_tokens", context), ("generated_tokens", generated)):
        values = [result[field][q] for q in (50, 90, 99)]
        assert values == pytest.approx(expected, abs=1.0), field


def test_read_trace_accepts_a_path(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "2023-11-16 23:59:59.5,10,2", "2023-11-17 00:00:00.75,20,3")
    trace = read_trace(path)
    assert trace.time_s.tolist() == pytest.approx([0.0, 1.25])
    assert read_trace(str(path)).context_tokens.tolist() == [10, 20]


# --- validation --------------------------------------------------------------------------------


def test_unknown_name_lists_known_names() -> None:
    with pytest.raises(ValueError, match="azure-code.*azure-conv"):
        read_trace("azure-chat")


@pytest.mark.parametrize("name", ["azure-chat", "", "  "])
def test_unknown_name_message_in_full(name: str) -> None:
    """Both places that refuse a name (blank, and neither packaged nor path-like) say it alike."""
    expected = (f"unknown trace {name!r}; known names: azure-code, azure-conv "
                "(or pass the path of a CSV file)")
    with pytest.raises(ValueError) as caught:
        read_trace(name)
    assert str(caught.value) == expected


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    with pytest.raises(ValueError, match="nope.csv"):
        read_trace(missing)


def test_a_file_that_cannot_be_read_is_a_value_error_naming_it(tmp_path: Path,
                                                             unreadable) -> None:
    """Not a PermissionError traceback out of train.py, which reports ValueErrors in one line."""
    path = unreadable(write_csv(tmp_path, GOOD))
    with pytest.raises(ValueError, match=f"^{re.escape(str(path))} cannot be read: "
                                         f"Permission denied$"):
        read_trace(path)


def test_wrong_header_names_expected_header(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "2023-11-16 18:17:03.9799600,1,1", header="time,ctx,gen")
    with pytest.raises(ValueError, match=HEADER):
        read_trace(path)


def test_empty_trace_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty"):
        read_trace(write_csv(tmp_path))


GOOD = "2023-11-16 18:17:03.9799600,4808,10"


@pytest.mark.parametrize(
    ("bad_row", "field"),
    [
        ("2023-11-16 18:17:04.0000000,4808", "expected 3 fields"),
        ("2023-11-16 18:17:04.0000000,4808,10,7", "expected 3 fields"),
        ("", "expected 3 fields"),
        ("yesterday,4808,10", "TIMESTAMP"),
        ("2023-11-16 18:17:04.0000000000,4808,10", "TIMESTAMP"),  # 10 fractional digits
        ("2023-02-30 18:17:04.0,4808,10", "TIMESTAMP"),  # no such date
        ("2023-11-16 24:00:00.0,4808,10", "TIMESTAMP"),
        ("2023-11-16 18:17:04.0,48.5,10", "ContextTokens"),
        ("2023-11-16 18:17:04.0,0,10", "ContextTokens"),
        ("2023-11-16 18:17:04.0,-3,10", "ContextTokens"),
        ("2023-11-16 18:17:04.0,4808,", "GeneratedTokens"),
        ("2023-11-16 18:17:04.0,4808,0", "GeneratedTokens"),
        ("2023-11-16 18:17:04.0,4808,ten", "GeneratedTokens"),
        ("2023-11-16 18:17:03.0,4808,10", "backwards"),
    ],
)
def test_malformed_row_names_file_line_and_field(tmp_path: Path, bad_row: str, field: str) -> None:
    path = write_csv(tmp_path, GOOD, GOOD, bad_row, GOOD)
    with pytest.raises(ValueError) as info:
        read_trace(path)
    message = str(info.value)
    assert "line 4" in message
    assert field in message
    assert str(path) in message



def test_a_bad_field_is_quoted_as_it_stands_in_the_file(tmp_path: Path) -> None:
    path = write_csv(tmp_path, GOOD, "2023-11-16 18:17:04.0,4808,ten")
    with pytest.raises(ValueError, match=r"line 3, GeneratedTokens: must be an integer >= 1, "
                                         r"got 'ten'$"):
        read_trace(path)


def test_utc_offsets_are_converted_to_utc(tmp_path: Path) -> None:
    """Time-zone-aware times (pandas writes ``+00:00``): the same instant in any zone is 0 s."""
    path = write_csv(tmp_path,
                     "2024-05-10 00:00:00.009930+00:00,10,2",
                     "2024-05-10 02:00:00.509930+02:00,10,2",   # 0.5 s later, in UTC
                     "2024-05-09T19:00:01.009930-0500,10,2",    # 1 s, the day before locally
                     "2024-05-10 00:00:01.5Z,10,2")
    assert read_trace(path).time_s.tolist() == pytest.approx([0.0, 0.5, 1.0, 1.49007])


def test_rows_of_one_second_with_and_without_fractions(tmp_path: Path) -> None:
    """The 2024 Azure traces' own rows: a whole second is written without its fraction, so
    one second's rows differ in length; the reader's per-second cache must not care."""
    path = write_csv(tmp_path,
                     "2024-05-12 00:00:00+00:00,1452,3",
                     "2024-05-12 00:00:00.001163+00:00,584,3",
                     "2024-05-12 00:00:00.041683+00:00,862,38",
                     "2024-05-12T00:00:00.5+00:00,1,1",       # the same second, the other separator
                     "2024-05-12 00:00:01+00:00,1569,3",
                     "2024-05-12 00:00:01.25+00:00,617,104",
                     "2024-05-13 00:00:01+00:00,10,2")        # the same time of day, a day later
    assert read_trace(path).time_s.tolist() == pytest.approx(
        [0.0, 0.001163, 0.041683, 0.5, 1.0, 1.25, 86_401.0], abs=1e-9)


def test_a_bad_time_is_refused_after_a_good_one_of_the_same_minute(tmp_path: Path) -> None:
    # The per-second cache is keyed by the text: a new second is checked, not assumed.
    path = write_csv(tmp_path, "2024-05-12 00:00:59+00:00,1,1", "2024-05-12 00:00:60+00:00,1,1")
    with pytest.raises(ValueError, match="line 3, TIMESTAMP: time of day out of range"):
        read_trace(path)


def test_a_trace_spanning_more_than_int64_nanoseconds_is_refused(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "1700-01-01 00:00:00,1,1", "2024-05-12 00:00:00,1,1")
    with pytest.raises(ValueError, match="line 3, TIMESTAMP: more than 292 years after"):
        read_trace(path)


def test_a_blank_first_line_is_named_as_a_missing_header(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(f"\n{HEADER}\n{GOOD}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="on line 1, got ''"):
        read_trace(path)
    path.write_text("\n \n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="got an empty file"):
        read_trace(path)


def test_windows_line_ends_are_read_as_lines(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(f"{HEADER}\r\n{GOOD}\r\n{GOOD}\r\n\r\n".encode())
    assert read_trace(path).context_tokens.tolist() == [4808, 4808]


def test_an_offset_makes_a_later_local_time_earlier(tmp_path: Path) -> None:
    path = write_csv(tmp_path, "2024-05-10 00:00:00+00:00,10,2", "2024-05-10 00:30:00+01:00,10,2")
    with pytest.raises(ValueError, match="line 3, TIMESTAMP: timestamps go backwards"):
        read_trace(path)


@pytest.mark.parametrize(("first", "second"), [
    ("2024-05-10 00:00:00+00:00", "2024-05-10 00:00:01"),
    ("2024-05-10 00:00:00", "2024-05-10 00:00:01Z"),
])
def test_offsets_on_some_rows_only_are_refused(tmp_path: Path, first: str, second: str) -> None:
    path = write_csv(tmp_path, f"{first},10,2", f"{second},10,2")
    with pytest.raises(ValueError, match=r"line 3, TIMESTAMP: a UTC offset on some rows and not "
                                         r"on others"):
        read_trace(path)


@pytest.mark.parametrize(("offset", "problem"), [
    ("+24:00", r"UTC offset \+24:00 out of range"), ("+01:60", r"UTC offset \+01:60 out of range"),
    ("-0060", "UTC offset -0060 out of range"), ("+1:00", "not a timestamp"),
    ("+01:0", "not a timestamp"), ("UTC", "not a timestamp")])
def test_a_malformed_utc_offset_is_refused(tmp_path: Path, offset: str, problem: str) -> None:
    # each for its own fault: a positive offset out of range also puts the row before the
    # previous one, which was refused in its place ("timestamps go backwards")
    path = write_csv(tmp_path, "2024-05-10 00:00:00+00:00,10,2", f"2024-05-10 00:00:01{offset},10,2")
    with pytest.raises(ValueError, match=f"line 3, TIMESTAMP: {problem}"):
        read_trace(path)


def test_blank_lines_at_the_end_are_not_requests(tmp_path: Path) -> None:
    path = write_csv(tmp_path, GOOD, GOOD)
    path.write_text(path.read_text() + "\n  \n\n")
    assert len(read_trace(path)) == 2


def test_a_trace_of_unequal_arrays_is_refused() -> None:
    for context, generated in (([1], [1, 1]), ([1, 1], [1])):
        with pytest.raises(ValueError, match="'t': arrays must all have the same length"):
            Trace("t", [0.0, 1.0], context, generated)


@pytest.mark.parametrize(("time_s", "context", "generated", "message"), [
    ([0.0, 5.0, 1.0], [1, 1, 1], [1, 1, 1], "time_s must be finite, >= 0 and non-decreasing"),
    ([0.0, np.nan, 1.0], [1, 1, 1], [1, 1, 1], "time_s must be finite"),
    ([-3.0, 0.0, 1.0], [1, 1, 1], [1, 1, 1], "time_s must be finite, >= 0"),
    ([0.0, 1.0, 2.0], [1, 0, 1], [1, 1, 1], "context_tokens must all be >= 1"),
    ([0.0, 1.0, 2.0], [1, 1, 1], [1, -5, 1], "generated_tokens must all be >= 1"),
    ([0.0, 1.0, 2.0], [1.9, 2.7, 3.0], [1, 1, 1], "context_tokens must hold integers"),
    ([0.0, 1.0, 2.0], [1, 1, 1], [True, True, True], "generated_tokens must hold integers"),
])
def test_a_trace_built_by_hand_keeps_the_invariants_it_promises(
    time_s: list[float], context: list[float], generated: list[float], message: str
) -> None:
    # batch_requests turns a Trace into tasks without Task's checks (Task.many_trusted): it
    # returned tasks of 0 or -5 tokens, NaN or negative arrivals, and 2.7 tokens read as 2.
    with pytest.raises(ValueError, match=f"'t': {message}"):
        Trace("t", time_s, context, generated)
    # Integral floats and duplicate times are fine.
    trace = Trace("t", [0.0, 0.0, 2.0], [1.0, 2.0, 3.0], [1, 1, 1])
    assert trace.context_tokens.tolist() == [1, 2, 3]

# --- batching ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize(("window_s", "max_batch"), [(0.5, 32), (2.0, 8), (0.0, 4), (10.0, 1)])
def test_batching_conserves_requests_and_respects_limits(
    traces: dict[str, Trace], name: str, window_s: float, max_batch: int
) -> None:
    trace = traces[name]
    tasks = batch_requests(trace, window_s=window_s, max_batch=max_batch)
    sizes = [task.batch for task in tasks]
    assert sum(sizes) == len(trace)
    assert max(sizes) <= max_batch
    assert all(task.domain == 0 for task in tasks)
    arrivals = np.array([task.arrival for task in tasks])
    assert np.all(np.diff(arrivals) >= 0)

    # Walk the batches over the requests: span, dispatch time, and padding to the longest.
    bounds = np.cumsum([0, *sizes])
    for task, lo, hi in zip(tasks, bounds[:-1], bounds[1:], strict=True):
        times = trace.time_s[lo:hi]
        assert times[-1] - times[0] <= window_s + 1e-9
        assert times[-1] <= task.arrival + 1e-9 <= times[0] + window_s + 2e-9
        assert task.prompt_tokens == trace.context_tokens[lo:hi].max()
        assert task.output_tokens == trace.generated_tokens[lo:hi].max()


def test_batching_rule_on_a_small_trace(tmp_path: Path) -> None:
    rows = [
        f"2023-11-16 00:00:{s:09.6f},{c},{g}"
        for s, c, g in [
            (0.0, 10, 5),
            (0.2, 30, 1),
            (0.5, 20, 2),
            (0.6, 1, 1),
            (0.7, 1, 1),
            (0.71, 1, 9),
        ]
    ]
    trace = read_trace(write_csv(tmp_path, *rows))
    # Window 0.5 s, room for 3: the first batch takes 0.0, 0.2, 0.5 (0.5 is inside the window,
    # inclusive) and is full on the third arrival, so it leaves at 0.5; the second opens at 0.6,
    # takes 0.6, 0.7, 0.71 and is also full at 0.71.
    tasks = batch_requests(trace, window_s=0.5, max_batch=3)
    assert [(t.batch, t.prompt_tokens, t.output_tokens) for t in tasks] == [(3, 30, 5), (3, 1, 9)]
    assert [t.arrival for t in tasks] == pytest.approx([0.5, 0.71])
    # With room for 10 nothing fills up: batches leave when their window closes.
    tasks = batch_requests(trace, window_s=0.5, max_batch=10)
    assert [t.batch for t in tasks] == [3, 3]
    assert [t.arrival for t in tasks] == pytest.approx([0.5, 1.1])
    # time_scale=2 halves the gaps: 0, .1, .25, .3, .35, .355 all fall in one 0.5 s window.
    tasks = batch_requests(trace, time_scale=2.0, window_s=0.5, max_batch=10)
    assert [(t.batch, t.arrival) for t in tasks] == [(6, 0.5)]


def test_time_scale_two_halves_the_arrival_span(traces: dict[str, Trace]) -> None:
    trace = traces["azure-conv"]

    def span(tasks: list) -> float:
        return tasks[-1].arrival - tasks[0].arrival

    # With no window and batches of one, arrivals are exactly the scaled request times.
    real = batch_requests(trace, window_s=0.0, max_batch=1)
    fast = batch_requests(trace, window_s=0.0, max_batch=1, time_scale=2.0)
    assert len(real) == len(fast) == len(trace)
    assert [t.arrival for t in fast] == pytest.approx([t.arrival / 2 for t in real])
    assert span(fast) == pytest.approx(trace.duration_s / 2)
    # With the default window, the span halves up to one window's worth of slack.
    default = batch_requests(trace, time_scale=2.0)
    assert abs(span(default) - trace.duration_s / 2) <= 0.5 + 1e-9


def test_batch_requests_accepts_a_name() -> None:
    assert sum(t.batch for t in batch_requests("azure-code")) == EXPECTED["azure-code"][0]


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"time_scale": 0.0}, "time_scale"),
        ({"time_scale": -1.0}, "time_scale"),
        ({"time_scale": float("inf")}, "time_scale"),
        ({"time_scale": float("nan")}, "time_scale"),
        ({"time_scale": True}, "time_scale"),
        ({"window_s": -0.1}, "window_s"),
        ({"window_s": float("inf")}, "window_s"),
        ({"window_s": "0.5"}, "window_s"),
        ({"max_batch": 0}, "max_batch"),
        ({"max_batch": 2.0}, "max_batch"),
        ({"max_batch": True}, "max_batch"),
    ],
)
def test_bad_arguments_name_the_argument(
    traces: dict[str, Trace], kwargs: dict, argument: str
) -> None:
    with pytest.raises(ValueError, match=argument):
        batch_requests(traces["azure-code"], **kwargs)


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_non_utf8_file_names_file_and_line(tmp_path: Path, bom: bytes) -> None:
    path = tmp_path / "latin1.csv"
    rows = [HEADER, GOOD, "2023-11-16 18:17:04.0,4808,10 caf\u00e9"]
    path.write_bytes(bom + "\n".join(rows).encode("latin-1"))
    with pytest.raises(ValueError) as info:
        read_trace(path)
    message = str(info.value)
    assert str(path) in message
    assert "line 3" in message
    assert "not UTF-8" in message


INT64_MAX = 2**63 - 1
CAP = int(MAX_SIZE)   # the scenarios' cap on a size


@pytest.mark.parametrize(
    ("row", "field"),
    [
        # up to int64's largest were taken, where a scenario caps every size at 1e9
        pytest.param(f"2023-11-16 18:17:04.0,{CAP + 1},10", "ContextTokens", id="cap+1"),
        pytest.param(f"2023-11-16 18:17:04.0,4808,{CAP + 1}", "GeneratedTokens", id="cap+1-gen"),
        pytest.param(f"2023-11-16 18:17:04.0,{INT64_MAX},10", "ContextTokens", id="int64-max"),
        pytest.param(f"2023-11-16 18:17:04.0,{INT64_MAX + 1},10", "ContextTokens", id="2**63"),
        pytest.param(f"2023-11-16 18:17:04.0,4808,{10**30}", "GeneratedTokens", id="10**30"),
        # past int()'s limit of 4,300 digits, which raises a ValueError of its own
        pytest.param("2023-11-16 18:17:04.0,4808," + "9" * 5000, "GeneratedTokens", id="5000-digits"),
    ],
)
def test_token_count_above_the_scenarios_cap_names_file_line_field_and_cap(
        tmp_path: Path, row: str, field: str) -> None:
    path = write_csv(tmp_path, GOOD, row)
    with pytest.raises(ValueError) as info:
        read_trace(path)
    message = str(info.value)
    assert str(path) in message
    assert "line 3" in message
    assert field in message
    assert f"<= {CAP} (the scenarios' cap on a size)" in message
    assert len(message) < len(str(path)) + 200        # a long value is quoted in part


def test_token_count_at_the_scenarios_cap_is_accepted(tmp_path: Path) -> None:
    trace = read_trace(write_csv(tmp_path, GOOD, f"2023-11-16 18:17:04.0,{CAP},000{CAP}"))
    assert trace.context_tokens[1] == trace.generated_tokens[1] == CAP


@pytest.mark.parametrize("field", ["context_tokens", "generated_tokens"])
def test_a_trace_built_by_hand_is_held_to_the_scenarios_cap_too(field: str) -> None:
    columns = {"context_tokens": [5, 5], "generated_tokens": [7, 7], field: [5, CAP + 1]}
    with pytest.raises(ValueError, match=rf"^trace 'mine': {field} must all be <= {CAP} "):
        Trace("mine", np.array([0.0, 1.0]), **columns)
    columns[field] = [5, CAP]
    assert getattr(Trace("mine", np.array([0.0, 1.0]), **columns), field)[1] == CAP


def test_env_replays_a_rewritten_trace_as_it_is_now(tmp_path: Path, monkeypatch) -> None:
    """The parsed batches are cached per file version (path, inode, size, times), not per path
    string: a CSV rewritten or deleted, or a relative path read from another folder, is read
    again rather than replayed as it was when first read."""
    import gymnasium as gym

    import envs  # noqa: F401  (registers the env ids)

    def first_task(trace: str) -> dict:
        env = gym.make("InferenceAlloc-v0", trace=trace)
        env.reset(seed=0)
        return env.step([0, 1, 1])[4]["task"]

    path = write_csv(tmp_path, "2023-11-16 18:17:03,1000,5")
    assert first_task(str(path))["prompt_tokens"] == 1000
    write_csv(tmp_path, "2023-11-16 18:17:03,20000,5")
    assert first_task(str(path))["prompt_tokens"] == 20000
    path.unlink()
    with pytest.raises(ValueError, match="trace.csv"):
        first_task(str(path))
    other = tmp_path / "other"
    other.mkdir()
    write_csv(other, "2023-11-16 18:17:03,4000,5")
    write_csv(tmp_path, "2023-11-16 18:17:03,50000,5")
    monkeypatch.chdir(tmp_path)
    assert first_task("trace.csv")["prompt_tokens"] == 50000
    monkeypatch.chdir(other)
    assert first_task("trace.csv")["prompt_tokens"] == 4000


def test_a_folder_is_named_as_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / "runs.csv"
    folder.mkdir()
    for spec in (folder, str(folder), str(tmp_path)):
        with pytest.raises(ValueError, match="is a folder, not a CSV file"):
            read_trace(spec)


def test_a_gzip_file_is_named_as_compressed(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "trace.csv.gz"
    path.write_bytes(gzip.compress(f"{HEADER}\n{GOOD}\n".encode()))
    with pytest.raises(ValueError, match="gzip-compressed.*decompress"):
        read_trace(path)


@pytest.mark.parametrize("header", ["ContextTokens,TIMESTAMP,GeneratedTokens", f"{HEADER},Extra", ""])
def test_wrong_header_shows_the_header_found(tmp_path: Path, header: str) -> None:
    path = write_csv(tmp_path, GOOD, header=header)
    with pytest.raises(ValueError, match=f"got {header!r}"):
        read_trace(path)


@pytest.mark.parametrize(("header", "hint"), [
    (f",{HEADER}", "an unnamed index column first, as pandas' to_csv writes one: save with "
                   "index=False"),
    ('"","TIMESTAMP","ContextTokens","GeneratedTokens"',
     "an unnamed index column first, as pandas' to_csv writes one: save with index=False; "
     "fields in quotes: write them without quotes"),
    (HEADER.replace(",", ";"), "columns separated by ';': separate them by commas"),
    (HEADER.replace(",", "\t"), "columns separated by tabs: separate them by commas"),
    (f"id,{HEADER}", "a column 'id' first: leave it out"),
    (HEADER.lower(), f"names in another case: write them as {HEADER}"),
    (f"{HEADER},", "a comma at the end of the line: leave it out, on the rows too"),
    (f"{HEADER.upper()};".replace(",", ";"), f"columns separated by ';': separate them by "
     f"commas; names in another case: write them as {HEADER}; a ';' at the end of the line: "
     f"leave it out, on the rows too"),
])
def test_a_header_a_common_exporter_wrote_says_how_to_write_it(tmp_path: Path, header: str,
                                                                hint: str) -> None:
    """pandas' index column, R's or a spreadsheet's quotes, ';' and tab separators: each was
    "expected the header" alone, showing a header that holds the expected one."""
    path = write_csv(tmp_path, GOOD, header=header)
    with pytest.raises(ValueError) as info:
        read_trace(path)
    assert str(info.value).endswith(f"on line 1, got {header!r} ({hint})"), info.value


@pytest.mark.parametrize(("row", "message"), [
    ('"2023-11-16 18:17:04.0",4808,10', "line 3, TIMESTAMP: not a timestamp like 2023-11-16 "
     "18:17:03.9799600, got '\"2023-11-16 18:17:04.0\"' (in quotes: write the fields without "
     "quotes)"),
    ('2023-11-16 18:17:04.0,"4,808",10', "line 3: expected 3 fields (TIMESTAMP,ContextTokens,"
     "GeneratedTokens), got 4 (it holds quotes: write the fields without quotes, and numbers "
     "without thousands separators)"),
    ("2023-11-16 18:17:03.0,4808,10", "line 3, TIMESTAMP: timestamps go backwards (2023-11-16 "
     "18:17:03.0 is earlier than the previous row's): sort the rows by TIMESTAMP"),
])
def test_a_row_a_common_exporter_wrote_says_how_to_write_it(tmp_path: Path, row: str,
                                                             message: str) -> None:
    path = write_csv(tmp_path, "2023-11-16 18:17:03.9799600,4808,10", row)
    with pytest.raises(ValueError) as info:
        read_trace(path)
    assert str(info.value) == f"{path}, {message}"


def test_batch_columns_are_batch_requests_tasks_read_only(traces: dict[str, Trace]) -> None:
    columns = batch_columns(traces["azure-code"], window_s=2.0, max_batch=8)
    tasks = batch_requests(traces["azure-code"], window_s=2.0, max_batch=8)
    assert len(columns) == len(tasks)
    assert columns.batch.tolist() == [t.batch for t in tasks]
    assert columns.arrival.tolist() == [t.arrival for t in tasks]
    with pytest.raises(ValueError):
        columns.prompt_tokens[0] = 1   # shared by every reset through the env's cache


def test_a_device_is_named_as_not_a_regular_file() -> None:
    with pytest.raises(ValueError, match="trace file /dev/null is not a regular file"):
        read_trace("/dev/null")     # was "trace file not found"


def test_batching_a_request_per_batch_holds_no_python_object_per_batch() -> None:
    """At a slowed replay (trace_time_scale 0.05, the README's advice for the Azure traces)
    nearly every request is a batch of its own. The batching kept each batch's start and
    dispatch time in Python lists, ~70 bytes a request on top of its arrays: a week-long trace
    of 27 million requests peaked near 3 GB where the README says 1-2 GB. In compact arrays its
    peak is ~40 bytes a request (its arrays' own), under half of the ~128 it took."""
    import tracemalloc

    n = 100_000
    times = np.arange(n, dtype=np.float64)      # a second apart: one request a batch
    trace = Trace("spread", times, np.full(n, 7), np.full(n, 3))
    tracemalloc.start()
    try:
        columns = batch_columns(trace, time_scale=1.0, window_s=0.5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(columns) == n
    assert peak / n <= 64
