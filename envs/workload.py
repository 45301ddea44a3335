"""Task streams for an episode: synthetic from a scenario's distributions, or a replayed trace.

All randomness comes from the Generator passed in (the env's ``np_random``), so
one seed gives one stream. Per task the stream also fixes the three stage
noise factors, so that every placement tried for that task (the oracle, the
static reference) sees the same luck.

Domains: live requests come from ``domains`` data domains with Zipf popularity
(domain 0 most popular). The precomputed loading cache was built offline on a
*training* mix whose ranking is the live one shifted by ``train_shift``; it
holds that mix's ``precomputed_size`` most popular domains — the article's
train/test distribution shift that keeps its hit rate low.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from envs.scenario import Distribution, Scenario, Workload
from envs.traces import TRACES, BatchColumns, batch_columns
from inference.task import Task
from inference.yamlio import path_version


def domain_popularity(workload: Workload) -> np.ndarray:
    ranks = np.arange(1, workload.domains + 1, dtype=float)
    weights = ranks ** (-workload.zipf)
    return weights / weights.sum()


def precomputed_domains(scenario: Scenario) -> tuple[int, ...]:
    """Domains in the precomputed cache: the training mix's most popular ones."""
    k = scenario.workload.domains
    size = min(scenario.cache.precomputed_size, k)
    return tuple((scenario.cache.train_shift + r) % k for r in range(size))


def _draw(dist: Distribution, rng: np.random.Generator, n: int) -> np.ndarray:
    # unshaped: numpy 2.2's stubs (the last numpy for Python 3.10) type np.full as 1-D
    values: np.ndarray
    if dist.dist == "constant":
        values = np.full(n, dist.value)
    elif dist.dist == "normal":
        values = rng.normal(dist.mean, dist.std, n)
    elif dist.dist == "lognormal":
        values = dist.median * np.exp(rng.normal(0.0, dist.sigma, n))
    elif dist.dist == "uniform":
        values = rng.uniform(dist.low, dist.high, n)
    else:  # choice
        p = np.asarray(dist.weights or [1.0] * len(dist.values), dtype=float)
        values = rng.choice(np.asarray(dist.values), size=n, p=p / p.sum())
    return np.clip(np.rint(values), dist.min, dist.max).astype(np.int64)


def file_version(trace: str) -> tuple[object, ...]:
    """What identifies the file a trace name or path reads now (`path_version`). A cache keyed
    by the bare string replayed a CSV as it was when first read, after it had been rewritten or
    deleted, or (a relative path) after the working directory changed."""
    return path_version(TRACES.get(trace, Path(trace)))


def file_digest(trace: str) -> str:
    """A digest of the contents of the file a trace name or path reads now: what a record kept
    across processes holds (`file_version`'s stat changes with a copy or a checkout of the
    same bytes). A file that cannot be read is its path: its loader names what is wrong."""
    path = TRACES.get(trace, Path(trace))
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except (OSError, ValueError):   # ValueError: a NUL byte in the name
        return str(path)


@lru_cache(maxsize=8)
def _cached_batches(trace: str, version: tuple[object, ...], time_scale: float, window_s: float,
                    max_batch: int) -> BatchColumns:
    return batch_columns(trace, time_scale=time_scale, window_s=window_s, max_batch=max_batch)


def _trace_batches(trace: str, time_scale: float, window_s: float, max_batch: int) -> BatchColumns:
    return _cached_batches(trace, file_version(trace), time_scale, window_s, max_batch)


@dataclass(frozen=True)
class Episode:
    tasks: tuple[Task, ...] | list[Task]   # a list when a closed loop rewrites arrivals
    noise: np.ndarray            # (n_tasks, 3) multiplicative stage noise


def span_batches(arrival: np.ndarray, span: tuple[float, float]) -> tuple[int, int]:
    """The batches [first, last) of a trace, by their `arrival` times (in order), that arrive
    in `span` of its duration: [start, end) as fractions, the end included where it is 1."""
    if span == (0.0, 1.0) or not len(arrival):
        return 0, len(arrival)
    t0, duration = float(arrival[0]), float(arrival[-1] - arrival[0])
    first = int(np.searchsorted(arrival, t0 + span[0] * duration, side="left"))
    last = (len(arrival) if span[1] == 1.0
            else int(np.searchsorted(arrival, t0 + span[1] * duration, side="left")))
    return first, last


def trace_batches(workload: Workload) -> BatchColumns:
    """The batches `workload`'s trace replays (read once per file version and settings)."""
    assert workload.trace is not None
    return _trace_batches(workload.trace, workload.trace_time_scale, workload.trace_window_s,
                          workload.trace_max_batch)


def check_span(workload: Workload, n_tasks: int) -> None:
    """Refuse a `workload.trace_span` of fewer batches than an episode's `n_tasks`: every seed
    would replay the one window it holds, cut short (the whole trace, the default span, may
    hold fewer: its episodes are the whole trace, as before)."""
    if workload.trace is None or workload.trace_span == (0.0, 1.0):
        return
    arrival = trace_batches(workload).arrival
    first, last = span_batches(arrival, workload.trace_span)
    if last - first < n_tasks:
        duration = float(arrival[-1] - arrival[0]) if len(arrival) else 0.0
        raise ValueError(f"the span {list(workload.trace_span)} holds {last - first} of the "
                         f"{len(arrival)} batches of trace {workload.trace} (over {duration:g} s), "
                         f"fewer than an episode's {n_tasks} tasks, so every seed would replay the "
                         f"same window: widen it, or shorten the episodes (the scenario's "
                         f"episode_tasks; train.py --eval-tasks; evaluate.py --episode-tasks, "
                         f"and --online-samples or --no-online for its online study)")


def generate_episode(scenario: Scenario, rng: np.random.Generator, n_tasks: int) -> Episode:
    """Draw one episode's task stream (at most n_tasks; a trace may hold fewer)."""
    w = scenario.workload
    if w.trace is not None:
        batches = trace_batches(w)
        first, last = span_batches(batches.arrival, w.trace_span)
        n = min(n_tasks, last - first)
        start = first + int(rng.integers(0, last - first - n + 1))
        window = slice(start, start + n)
        arrivals = batches.arrival[window] - batches.arrival[start]
        batch = batches.batch[window]
        prompt = batches.prompt_tokens[window]
        output = batches.output_tokens[window]
    else:
        n = n_tasks
        rates: np.ndarray = np.full(n, w.arrival_rate)   # unshaped, as in _draw
        if w.burst is not None:
            in_burst = (np.arange(n) % w.burst.period) < w.burst.length
            rates = np.where(in_burst, rates * w.burst.rate_multiplier, rates)
        gaps = rng.exponential(1.0, n) / rates
        gaps[0] = 0.0
        arrivals = np.cumsum(gaps)
        batch = _draw(w.batch, rng, n)
        prompt = _draw(w.prompt_tokens, rng, n)
        output = _draw(w.output_tokens, rng, n)
    # unshaped, untyped dtype: numpy 2.5's stubs reject `domains.min() < 0` on an int64 array
    domains: np.ndarray = rng.choice(w.domains, size=n, p=domain_popularity(w))
    noise = np.exp(rng.normal(0.0, scenario.noise, (n, 3))) if scenario.noise > 0 else np.ones((n, 3))
    # The columns are checked here as arrays, once, so that the tasks can skip `Task`'s
    # per-task validation (`Task.many_trusted`): with it, building them dominated a reset.
    arrivals = np.asarray(arrivals, dtype=float)
    if n and (min(batch.min(), prompt.min(), output.min()) < 1 or domains.min() < 0
              or not np.isfinite(arrivals).all() or arrivals.min() < 0):
        raise ValueError("generated task sizes must be >= 1, domains >= 0, arrivals finite and >= 0")
    # .tolist() gives plain ints and floats, the types `Task(int(b), ..., float(a))` would hold.
    tasks = Task.many_trusted(np.asarray(batch, dtype=np.int64).tolist(),
                              np.asarray(prompt, dtype=np.int64).tolist(),
                              np.asarray(output, dtype=np.int64).tolist(),
                              np.asarray(domains, dtype=np.int64).tolist(), arrivals.tolist())
    return Episode(tasks, noise)
