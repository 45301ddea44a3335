"""Discrete-event cost simulator: one task at a time through load -> prefill -> decode.

The cluster has state that outlives a task: when each device is next free
(FIFO queueing), which devices hold the model weights, how far the data disk
has read ahead, the loading cache's contents, the placement of the previous
task. ``Simulator.execute`` books one task under a placement and returns its
latency with a breakdown whose parts add up to the latency exactly:

    latency = overhead + queue + load + transfer + compute + memory_stall

Mechanisms (each a documented ``SimConfig`` field or hardware figure):
  * queueing: a stage starts when its input has arrived and its device is free;
  * transfers: a stage's output crosses a link when the next stage runs elsewhere;
  * weight residency: a device that computes prefill/decode without the weights first
    copies them over the fastest link from a device that held them when the stage began,
    else from disk (in place from a peer in its memory domain that held them), then keeps
    them. The shares of a split stage copy side by side, none from a sibling still
    receiving them, so the hardware file's device order changes nothing; two copies at once
    from one source (or the disk) each get its full bandwidth. By default every device the
    weights fit on holds them from the start: no preset run copies;
  * prefetch: with ``prefetch_depth`` k >= 1 the disk reads a task's input off the
    devices' time, once task i - k has finished loading (k = 1: the read of a task
    overlaps the previous one's prefill and decode, not its loading; k = 2 overlaps
    that too); with 0 reading blocks the load device;
  * contention: devices in one memory domain share its bandwidth while they overlap;
    booked work is not priced again, so a stage is slowed by the peers booked before it,
    not by those booked after. The shares of one split stage are priced symmetrically:
    each beside the earlier bookings and its siblings' spans priced without each other,
    then all booked, so two sharing a domain slow each other alike whatever the hardware
    file's device order (the server preset has no shared domain: no article figure
    depends on it);
  * re-placement overhead: a device that takes a stage it did not run for the
    previous task is first set up for it (graph capture / compilation, allocator,
    KV layout) and stays busy its profile's ``setup_s`` plus
    ``replacement_overhead_s`` doing so;
  * caches: a ``cached`` loader hits when the task's domain is in the precomputed
    set; an ``adaptive`` loader keeps the ``capacity`` most requested domains
    (exponentially decayed counts);
  * noise: a multiplicative factor per stage, drawn by the caller's Generator; ``execute``
    draws it log-normal with median 1, so its mean e^(sigma^2 / 2) > 1 lengthens stages on
    average (+0.1% at sigma 0.05, +13% at 0.5, +65% at 1).

Placements are either a device id per stage or, per stage, the fraction of the
batch each device takes (the stage ends when its slowest share does).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from inference.checks import is_integer, is_number
from inference.hardware import OP_CLASSES, PATTERNS, Hardware, Link, check_hardware
from inference.messages import shown
from inference.model_config import ModelConfig
from inference.task import STAGES, Task
from inference.work import StageWork

Shares = tuple[tuple[tuple[int, float], ...], ...]   # per stage: ((device, fraction), ...)
_span_end = itemgetter(1)    # a booked (start, end) span's end


# The adaptive cache grows its count increment by 1 / decay per request (see `_track`), which
# must stay a finite float: below ~5.6e-309 it is inf, the counts turn NaN and the cache froze
# on its first entries. Any decay near this one forgets all but the newest request.
MIN_CACHE_DECAY = 1e-300
# Plausible bounds, far beyond any real server, that keep every latency finite: an overhead of
# 1e308 s made latencies inf, and a prefetch depth past C's ssize_t an OverflowError in
# Simulator(). A scenario's simulator section has the same ones.
MAX_PREFETCH_DEPTH = 1_000_000     # loads ahead: more than a run's tasks is no limit at all
MAX_OVERHEAD_S = 3600.0            # set-up seconds per re-placement
MAX_CONTENTION = 10.0              # bandwidth share a peer takes: 1 = doubles memory time per peer


@dataclass(frozen=True)
class SimConfig:
    """Cluster-level parameters of the simulator.

    Attributes:
        prefetch_depth: the read of task i may start once task i - k has loaded (0 = synchronous I/O).
        replacement_overhead_s: seconds, beside the device's own ``setup_s``, a device spends
            being set up for a stage it did not run for the previous task (static placements
            never pay it).
        contention: bandwidth sharing in one memory domain: while n peers are busy, a stage's
            memory traffic progresses at 1 / (1 + contention x n) of its own rate (full rate
            once they are done); 1 = a peer busy throughout doubles its memory time (halves
            the bandwidth), 0 = no contention. A peer counts as busy while it runs booked
            work, not while it idles before it (e.g. waiting for its input).
        precomputed_domains: data domains the precomputed (``cached``) loading cache holds.
        cache_capacity: entries the ``adaptive`` cache holds.
        cache_decay: per-request decay of the adaptive cache's domain counts (runtime tracking).
        resident: devices holding the model weights at the start (default: every device they fit on).
    """

    prefetch_depth: int = 1
    replacement_overhead_s: float = 0.0
    contention: float = 1.0
    precomputed_domains: tuple[int, ...] = ()
    cache_capacity: int = 8
    cache_decay: float = 0.98
    resident: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        # Bools are refused where a number is meant (True ran as a prefetch depth of 1), and a
        # value of the wrong type is a ValueError naming the field, not a TypeError from inside
        # a comparison.
        if not is_integer(self.prefetch_depth) or not 0 <= self.prefetch_depth <= MAX_PREFETCH_DEPTH:
            raise ValueError(f"SimConfig.prefetch_depth must be an integer in 0..{MAX_PREFETCH_DEPTH}, "
                             f"got {shown(self.prefetch_depth)}")
        for name, high in (("replacement_overhead_s", MAX_OVERHEAD_S), ("contention", MAX_CONTENTION)):
            value = getattr(self, name)
            if not is_number(value) or not 0 <= value <= high:   # NaN compares false
                raise ValueError(f"SimConfig.{name} must be in [0, {high:g}], got {value!r}")
        if not is_integer(self.cache_capacity) or self.cache_capacity < 1:
            raise ValueError(f"SimConfig.cache_capacity must be an integer >= 1, got {self.cache_capacity!r}")
        if not is_number(self.cache_decay) or not MIN_CACHE_DECAY <= self.cache_decay <= 1:
            raise ValueError(f"SimConfig.cache_decay must be in [{MIN_CACHE_DECAY:g}, 1], "
                             f"got {self.cache_decay!r}")
        if not isinstance(self.precomputed_domains, (tuple, list)) or any(
                not is_integer(d) or d < 0 for d in self.precomputed_domains):
            raise ValueError(f"SimConfig.precomputed_domains must be a tuple of integers >= 0, "
                             f"got {self.precomputed_domains!r}")
        if self.resident is not None and (not isinstance(self.resident, (tuple, list)) or any(
                not isinstance(name, str) for name in self.resident)):
            raise ValueError(f"SimConfig.resident must be None or a tuple of device names, "
                             f"got {self.resident!r}")
        # numpy scalars pass the checks; store plain ones (as the frozen __init__ sets a field)
        for name, kind in (("prefetch_depth", int), ("cache_capacity", int),
                           ("replacement_overhead_s", float), ("contention", float),
                           ("cache_decay", float)):
            object.__setattr__(self, name, kind(getattr(self, name)))
        object.__setattr__(self, "precomputed_domains", tuple(int(d) for d in self.precomputed_domains))


class TaskResult:
    """Latency of one task, its breakdown and what it used."""

    __slots__ = ("latency", "overhead", "queue", "load", "transfer", "compute", "memory_stall",
                 "attention", "kv_wait", "cache_hit", "busy", "finish", "stage_time", "stage_device",
                 "stage_fraction", "stage_base", "works")

    def __init__(self, n_devices: int) -> None:
        self.latency = self.overhead = self.queue = self.load = self.transfer = 0.0
        self.compute = self.memory_stall = self.attention = self.kv_wait = self.finish = 0.0
        self.cache_hit: bool | None = None
        self.busy = [0.0] * n_devices            # device-seconds this task used, per device
        self.stage_time = [0.0, 0.0, 0.0]        # critical-path duration of each stage
        self.stage_device = [0, 0, 0]            # the device on each stage's critical path
        self.stage_fraction = [1.0, 1.0, 1.0]    # the share of the stage that device took
        self.stage_base = [0.0, 0.0, 0.0]        # ... and its time before noise, throttle, set-up
        self.works: tuple[StageWork, ...] = ()

    def breakdown(self) -> dict[str, float]:
        return {"overhead": self.overhead, "queue": self.queue, "load": self.load,
                "transfer": self.transfer, "compute": self.compute, "memory_stall": self.memory_stall}

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}={v:.4g}" for k, v in self.breakdown().items())
        return f"TaskResult(latency={self.latency:.4g}, {parts}, cache_hit={self.cache_hit})"


@dataclass
class ClusterState:
    """Everything about the cluster that carries from one task to the next."""

    busy_until: list[float]
    resident: list[bool]
    online: list[bool]
    throttle: list[float]                     # speed multiplier (1 = healthy, 0.5 = throttled)
    disk_free: float = 0.0
    load_done: deque[float] = field(default_factory=deque)
    prev_shares: Shares | None = None
    cache_entries: set[int] = field(default_factory=set)
    cache_counts: dict[int, float] = field(default_factory=dict)
    cache_increment: float = 1.0
    busy_time: list[float] = field(default_factory=list)
    lookups: int = 0
    hits: int = 0
    # Per device in a shared memory domain: its booked (start, end) spans not yet over, in
    # order; a peer contends only inside them, not while it idles before booked work.
    booked: list[list[tuple[float, float]]] = field(default_factory=list)

    def copy(self, ended_by: float = -math.inf) -> ClusterState:
        """A copy to change freely, less the booked spans that end by `ended_by`."""
        return ClusterState(
            list(self.busy_until), list(self.resident), list(self.online), list(self.throttle),
            self.disk_free, deque(self.load_done, self.load_done.maxlen), self.prev_shares,
            set(self.cache_entries), dict(self.cache_counts), self.cache_increment,
            list(self.busy_time), self.lookups, self.hits,
            [b[bisect_right(b, ended_by, key=_span_end):] for b in self.booked],
        )


def proportions(weights: np.ndarray) -> np.ndarray:
    """Each row (the last axis) of finite, non-negative `weights`, none all zero, over its sum.
    A row whose sum passes the float range (finite weights of 1e308, twice) is scaled by its
    largest weight first: divided by an infinite sum, every weight came out 0."""
    with np.errstate(over="ignore"):    # an infinite sum is dealt with below
        sums = weights.sum(axis=-1, keepdims=True)
    past = np.isinf(sums)
    if past.any():
        weights = np.where(past, weights / weights.max(axis=-1, keepdims=True), weights)
        sums = weights.sum(axis=-1, keepdims=True)
    return weights / sums


class Simulator:
    """Books tasks on a stateful cluster and charges each its latency.

    Args:
        hardware: the devices and links; the simulator charges the figures it is given
            (pass ``hardware.nominal_view()`` to see what a spec-sheet planner believes).
        model: the transformer shape the cost model prices.
        stages: one implementation per stage (load, prefill, decode).
        config: cluster parameters (see ``SimConfig``).
    """

    def __init__(self, hardware: Hardware, model: ModelConfig, stages: Sequence[Any],
                 config: SimConfig | None = None) -> None:
        # Each object checked as it comes in, naming what is wrong: a Hardware as its YAML
        # would be (a NaN memory ran, a str peak_flops was a TypeError deep in the cost model)
        check_hardware(hardware)
        if not isinstance(model, ModelConfig):
            raise ValueError(f"model must be a ModelConfig (inference.get_model gives one), "
                             f"got {shown(model)}")
        if config is not None and not isinstance(config, SimConfig):
            raise ValueError(f"config must be a SimConfig or None, got {shown(config)}")
        if not isinstance(stages, Sequence) or len(stages) != 3:
            raise ValueError(f"stages must be one implementation per stage in order {STAGES}, "
                             f"got {shown(stages)}")
        for want, impl in zip(STAGES, stages, strict=True):
            if getattr(impl, "stage", None) != want:   # which one, and what it is
                raise ValueError(f"stages must be one implementation per stage in order "
                                 f"{STAGES}; the {want} one is a {type(impl).__qualname__}, "
                                 f"whose stage is {shown(getattr(impl, 'stage', None))}")
        self.hardware = hardware
        self.model = model
        self.stages = tuple(stages)
        self.config = config or SimConfig()
        self.n_devices = len(hardware.devices)
        devs = hardware.devices
        # Per device: reciprocal throughputs per op class and per access pattern, so the hot path
        # multiplies instead of looking up, and the launch overhead; one tuple, one lookup.
        self._figures = [([1.0 / (d.peak_flops * d.op_efficiency[o]) for o in OP_CLASSES],
                          [1.0 / (d.mem_bandwidth * d.pattern_efficiency[p]) for p in PATTERNS],
                          d.launch_overhead) for d in devs]
        # Set-up of a stage on a device that did not run it for the previous task.
        self._setup = [self.config.replacement_overhead_s + d.setup_s for d in devs]
        self._any_setup = any(self._setup)
        self._peers = [[j for j, e in enumerate(devs) if j != i and e.memory_domain == d.memory_domain]
                       for i, d in enumerate(devs)]
        # The diagonal is never read (a stage's output stays on its device): a free placeholder.
        free = Link(math.inf, 0.0)
        self._link = [[hardware.links.get((a, b), free) for b in range(self.n_devices)]
                      for a in range(self.n_devices)]
        # ... and its two figures as plain matrices, for the stage-to-stage transfers
        # (`_book_single`, `_book_shares`).
        self._link_latency = [[link.latency for link in row] for row in self._link]
        self._link_bandwidth = [[link.bandwidth for link in row] for row in self._link]
        # Devices whose bandwidth the memory-domain peers can take (see `_stage_time`).
        self._contended = [bool(peers) and bool(self.config.contention) for peers in self._peers]
        self._contended_ids = [d for d, c in enumerate(self._contended) if c]
        self._disk_bw = hardware.disk_bandwidth
        self.state = self.initial_state()

    # ---------------------------------------------------------------- state
    def initial_state(self) -> ClusterState:
        names = self.config.resident
        if names is None:
            resident = [self.fits(i, 0.0) for i in range(self.n_devices)]
        else:
            ids = {self.hardware.device_id(n) for n in names}
            resident = [i in ids for i in range(self.n_devices)]
        state = ClusterState(
            busy_until=[0.0] * self.n_devices, resident=resident,
            online=[True] * self.n_devices, throttle=[1.0] * self.n_devices,
            load_done=deque(maxlen=max(self.config.prefetch_depth, 1)),
            busy_time=[0.0] * self.n_devices, booked=[[] for _ in range(self.n_devices)],
        )
        load = self.stages[0]
        if getattr(load, "cache_kind", None) == "precomputed":
            state.cache_entries = set(self.config.precomputed_domains)
        return state

    def reset(self) -> None:
        self.state = self.initial_state()

    def fits(self, device: int, footprint: float) -> bool:
        """Can the device hold the weights plus `footprint` bytes?"""
        return self.model.weight_bytes + footprint <= self.hardware.devices[device].memory

    def cache_would_hit(self, task: Task) -> bool | None:
        """Would the loader's cache hold `task`'s domain now, as `run` looks it up (None: the
        loader has no cache)?"""
        if self.stages[0].cache_kind is None:
            return None
        return task.domain in self.state.cache_entries

    def task_works(self, task: Task, hit: bool | None) -> tuple[StageWork, StageWork, StageWork]:
        """The work records `run` prices for `task` when the loader's cache lookup gives `hit`."""
        model = self.model
        return (self.stages[0].load_work(task, model, hit), self.stages[1].work(task, model),
                self.stages[2].work(task, model))

    # ---------------------------------------------------------------- placement
    def shares(self, placement: Any) -> Shares:
        """Validate a placement: device ids/names per stage, or a stages x devices fraction matrix."""
        arr = np.asarray(placement, dtype=object if isinstance(placement, (list, tuple)) else None)
        if arr.ndim == 1:
            if len(arr) != 3:
                raise ValueError(f"placement needs one device per stage {STAGES}, got {len(arr)} entries")
            out = []
            for stage, dev in zip(STAGES, arr, strict=True):
                if isinstance(dev, str):
                    dev = self.hardware.device_id(dev)
                if not is_integer(dev):
                    raise ValueError(f"placement[{stage}] must be a device id or name, got {shown(dev)}")
                if not 0 <= dev < self.n_devices:   # str: numpy's repr of an id names its type
                    raise ValueError(f"placement[{stage}] = {shown(dev, quote=False)} is not a device id in 0..{self.n_devices - 1}")
                out.append(((int(dev), 1.0),))
            return tuple(out)
        fractions = np.asarray(placement, dtype=float)
        if fractions.shape != (3, self.n_devices):
            raise ValueError(f"fraction placement must have shape (3, {self.n_devices}), got {fractions.shape}")
        bad = ~np.isfinite(fractions) | (fractions < 0)
        if bad.any():
            row, col = (int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"fraction placement entries must be finite and >= 0, got "
                             f"{fractions[row, col]} for stage {STAGES[row]!r} on device "
                             f"{self.hardware.devices[col].name!r}")
        for stage, row in zip(STAGES, fractions, strict=True):
            if not row.any():
                raise ValueError(f"fraction placement for stage {stage!r} is all zero")
        # (a row past the float range together, 1e308 twice, ran on no device: see proportions)
        return tuple(tuple((d, float(f)) for d, f in enumerate(row) if f > 0)
                     for row in proportions(fractions))

    def execute(self, task: Task, placement: Any, rng: np.random.Generator | None = None,
                noise_sigma: float = 0.0) -> TaskResult:
        """Book `task` under `placement` (validated), drawing stage noise from `rng`: a factor
        exp(N(0, noise_sigma)) per stage, median 1 and mean exp(noise_sigma**2 / 2)."""
        # A negative or NaN sigma, or a sigma without a Generator to draw from, ran without
        # noise and said nothing.
        if not is_number(noise_sigma) or not math.isfinite(noise_sigma) or noise_sigma < 0:
            raise ValueError(f"noise_sigma must be a finite number >= 0, got {noise_sigma!r}")
        if noise_sigma > 0 and rng is None:
            raise ValueError(f"noise_sigma {noise_sigma!r} needs rng, the Generator the noise is "
                             f"drawn from")
        noise: Sequence[float] = (1.0, 1.0, 1.0)
        if rng is not None and noise_sigma > 0:
            noise = np.exp(rng.normal(0.0, noise_sigma, 3)).tolist()
        return self.run(task, self.shares(placement), noise)

    # ---------------------------------------------------------------- the hot path
    def run(self, task: Task, shares: Shares, noise: Sequence[float] = (1.0, 1.0, 1.0),
            commit: bool = True, state: ClusterState | None = None,
            extra_overhead: float = 0.0,
            works: tuple[StageWork, StageWork, StageWork] | None = None) -> TaskResult:
        """Book a task with pre-validated shares. With ``commit=False`` nothing changes.

        ``extra_overhead`` (seconds) delays the task's start and counts as overhead: the
        environment charges failed dispatches this way.
        ``works``: the task's ``task_works(task, hit)`` for the hit this state's cache gives,
        when the caller already has them; building them is a good part of a run's cost, and a
        caller that prices one task several times (masks, references, oracle) needs them once.
        """
        st = state if state is not None else self.state
        t = task.arrival + extra_overhead
        # A booked span that ends by the task's arrival contends with none of it, nor, as a
        # stage on device d starts once d is free, one that ends by the time every contended
        # device is free. A commit drops the first kind for good; a dry run (the references,
        # the oracle's D**3) copies neither: under a backlog the second kind is most of the
        # spans, and copying them all grew each dry run with the episode.
        contended = self._contended_ids
        if commit:
            for d in contended:
                spans = st.booked[d]
                del spans[:bisect_right(spans, t, key=_span_end)]
        else:
            free = min([st.busy_until[d] for d in contended]) if contended else -math.inf
            st = st.copy(max(t, free))
        res = TaskResult(self.n_devices)
        res.overhead = extra_overhead
        # -- work records; the loader's depends on the cache
        load_impl = self.stages[0]
        hit = None
        if load_impl.cache_kind is not None:
            hit = task.domain in st.cache_entries
        if works is None:
            works = self.task_works(task, hit)
        res.cache_hit = hit
        res.works = works
        # -- disk read: asynchronous with prefetch (overlaps device work), else it blocks the device
        io_time = works[0].io_bytes / self._disk_bw
        # (The conditionals below are max() calls written out: cheaper on this path.)
        disk_free = st.disk_free
        read_start = disk_free if disk_free > t else t
        if self.config.prefetch_depth:
            load_done = st.load_done
            if len(load_done) == load_done.maxlen and load_done[0] > read_start:
                read_start = load_done[0]   # at most k reads ahead of loading
            read_end = read_start + io_time
            st.disk_free = read_end
        else:
            read_end = read_start
        # -- the stages on the devices
        if len(shares[0]) == 1 and len(shares[1]) == 1 and len(shares[2]) == 1:
            stage_end = self._book_single(st, res, shares, works, noise, t, read_end, io_time)
        else:
            stage_end = self._book_shares(st, res, shares, works, noise, t, read_end, io_time)
        res.finish = stage_end
        res.latency = stage_end - task.arrival
        st.prev_shares = shares
        if hit is not None:
            st.lookups += 1
            st.hits += hit
            if load_impl.cache_kind == "adaptive":
                self._track(st, task.domain)
        return res

    # `_book_shares` books any shares; `_book_single` is the same booking for placements with
    # one device per stage (every placement of the discrete env, the static reference's and the
    # oracle's), without the per-share bookkeeping: a stage ends when its one share does. It
    # does the same float operations in the same order, so both give the same result to the bit
    # (tests/test_hot_path.py holds them to that).
    # Both fill `res` and return the end of the decode stage. Re-placement: a device that did not
    # run a stage for the previous task must be set up for it first (graph capture /
    # compilation, allocator and KV layout), which keeps that device busy for its set-up time --
    # static placements never pay it.
    def _book_single(self, st: ClusterState, res: TaskResult, shares: Shares,
                     works: Sequence[StageWork], noise: Sequence[float], t: float,
                     read_end: float, io_time: float) -> float:
        busy, throttle, resident, busy_time = st.busy_until, st.throttle, st.resident, st.busy_time
        task_busy, stage_time, stage_base = res.busy, res.stage_time, res.stage_base
        contended = self._contended
        stage_device, stage_fraction = res.stage_device, res.stage_fraction
        # set_ups[s]: the set-up the device of stage s pays, when it ran no share of the stage
        # for the previous task.
        set_ups = [0.0, 0.0, 0.0]
        prev_shares = st.prev_shares
        if self._any_setup and prev_shares is not None and shares != prev_shares:
            for s in range(3):
                dev = shares[s][0][0]
                for prev_dev, _ in prev_shares[s]:
                    if prev_dev == dev:
                        break
                else:
                    set_ups[s] = self._setup[dev]
        # -- load: its input is the disk read
        ((dev, frac),) = shares[0]
        work = works[0]
        set_up = set_ups[0]
        start, free = self._load_start(st, work, dev, frac, read_end, io_time)
        base = self._load_base(work, dev, frac, start, st)
        end, visible = self._book_load(st, res, dev, frac, t, start, free, base, read_end,
                                       io_time, noise[0], set_up)
        waited = start - t - visible
        duration = end - t - waited - set_up
        stage_device[0] = dev
        stage_fraction[0] = frac
        stage_base[0] = base
        queue_sum = res.queue + waited    # loading transfers nothing: its input is the disk read
        stage_time[0] = res.load = duration
        setup_sum = res.overhead + set_up
        st.load_done.append(end)   # once per task: prefetch depth counts tasks
        # -- prefill and decode: the input comes from the previous stage's device
        link_latency, link_bandwidth = self._link_latency, self._link_bandwidth
        transfer_sum = compute_sum = stall_sum = attn_sum = kv_sum = 0.0
        for s in (1, 2):
            prev_dev, prev_frac, prev_end, prev_output = dev, frac, end, work.output_bytes
            ((dev, frac),) = shares[s]
            work = works[s]
            ready = prev_end
            if prev_dev != dev:
                ready += (link_latency[prev_dev][dev]
                          + prev_output * prev_frac * frac / link_bandwidth[prev_dev][dev])
            if not ready > 0.0:
                ready = 0.0
            if work.needs_weights and not resident[dev]:
                ready += self._migration_time(st, dev)
                resident[dev] = True
            free = busy[dev]
            start = free if free > ready else ready
            base, stall_s, attn_s, kv_s = self._stage_time(work, dev, frac, start, st)
            noise_s, speed = noise[s], throttle[dev]
            seconds = base * noise_s / speed
            set_up = set_ups[s]
            seconds += set_up
            end = start + seconds
            busy[dev] = end
            if contended[dev]:
                st.booked[dev].append((start, end))
            busy_time[dev] += seconds
            task_busy[dev] += seconds
            stall = stall_s * noise_s / speed
            transfer_sum += ready - prev_end
            queue_sum += start - ready
            stage_time[s] = seconds - set_up   # the stage's own work, for speed estimates
            setup_sum += set_up
            compute_sum += seconds - stall - set_up
            stall_sum += stall
            attn_sum += attn_s * noise_s / speed
            kv_sum += kv_s * noise_s / speed
            stage_device[s] = dev
            stage_fraction[s] = frac
            stage_base[s] = base
        res.transfer, res.queue, res.overhead = transfer_sum, queue_sum, setup_sum
        res.compute, res.memory_stall = compute_sum, stall_sum
        res.attention, res.kv_wait = attn_sum, kv_sum
        return end

    def _book_shares(self, st: ClusterState, res: TaskResult, shares: Shares,
                     works: Sequence[StageWork], noise: Sequence[float], t: float,
                     read_end: float, io_time: float) -> float:
        busy, throttle, resident = st.busy_until, st.throttle, st.resident
        busy_time, task_busy = st.busy_time, res.busy
        contended = self._contended
        stage_device, stage_fraction = res.stage_device, res.stage_fraction
        # `moved_from[s]`: the devices that ran stage s for the previous task, when the stage
        # moved (its shares differ) and set-up is charged; None when no device pays a set-up.
        setup = self._setup
        prev_shares = st.prev_shares
        moved_from: list[Sequence[int] | None] = [None, None, None]
        if self._any_setup and prev_shares is not None and shares != prev_shares:
            for s in range(3):
                prev = prev_shares[s]
                if shares[s] != prev:
                    moved_from[s] = [d for d, _ in prev]
        # -- load: its input is the disk read
        work = works[0]
        noise_s = noise[0]
        end_of: dict[int, float] = {}
        stage_end = -1.0
        waited = duration = load_setup = 0.0    # the critical share's queueing, duration, set-up
        # Every share is placed and priced before any is booked, so that the shares of a split
        # stage on one memory domain slow each other alike (`_beside_siblings`).
        contending = bool(self._contended_ids)
        moved = moved_from[0]
        loads = []   # per share: (device, fraction, start, when the device was free, set-up, base)
        for dev, frac in shares[0]:
            set_up = setup[dev] if moved is not None and dev not in moved else 0.0
            start, free = self._load_start(st, work, dev, frac, read_end, io_time, alone=False)
            loads.append((dev, frac, start, free, set_up,
                          self._load_base(work, dev, frac, start, st)))
        if work.needs_weights:   # all the shares have priced their copies: now they hold them
            for dev, _ in shares[0]:
                resident[dev] = True
        if contending and len(loads) > 1:
            spans = [(start, start + self._load_seconds(st, dev, frac, base, io_time, noise_s,
                                                        set_up))
                     for dev, frac, start, _, set_up, base in loads]
            for i, timed in self._beside_siblings(work, loads, spans, st):
                loads[i] = (*loads[i][:5], timed[0])
        for dev, frac, start, free, set_up, base in loads:
            end, visible = self._book_load(st, res, dev, frac, t, start, free, base, read_end,
                                           io_time, noise_s, set_up)
            if end > stage_end:
                stage_end = end
                waited = start - t - visible
                duration = end - t - waited
                load_setup = set_up
            if end >= stage_end:
                stage_device[0] = dev
                stage_fraction[0] = frac
                res.stage_base[0] = base
            end_of[dev] = end
        res.queue += waited    # loading transfers nothing: its input is the disk read
        res.stage_time[0] = duration - load_setup
        res.load = duration - load_setup
        res.overhead += load_setup
        st.load_done.append(stage_end)   # once per task: prefetch depth counts tasks
        # -- prefill and decode: the input comes from every device of the previous stage
        link_latency, link_bandwidth = self._link_latency, self._link_bandwidth
        # The breakdown's sums over the two stages, kept in locals and stored once at the end
        # (a slot read-modify-write per stage costs more than a local one).
        # They continue the load stage's queue and overhead, in the same order of additions.
        transfer_sum = compute_sum = stall_sum = attn_sum = kv_sum = 0.0
        queue_sum, setup_sum = res.queue, res.overhead
        for s in (1, 2):
            prev_end, prev_end_of, prev_devices = stage_end, end_of, shares[s - 1]
            prev_output = work.output_bytes
            work = works[s]
            needs_weights = work.needs_weights
            moved = moved_from[s]
            noise_s = noise[s]
            end_of = {}
            stage_end = -1.0
            transfer = queue = duration = stall = attn = kv = crit_setup = 0.0   # critical share
            placed = []   # per share: (device, fraction, start, ready, set-up, `_stage_time`)
            for dev, frac in shares[s]:
                ready = 0.0
                for a, fa in prev_devices:
                    arrive = prev_end_of[a]
                    if a != dev:
                        arrive += (link_latency[a][dev]
                                   + prev_output * fa * frac / link_bandwidth[a][dev])
                    if arrive > ready:
                        ready = arrive
                if needs_weights and not resident[dev]:
                    ready += self._migration_time(st, dev)
                free = busy[dev]
                start = free if free > ready else ready
                set_up = setup[dev] if moved is not None and dev not in moved else 0.0
                placed.append((dev, frac, start, ready, set_up,
                               self._stage_time(work, dev, frac, start, st)))
            if needs_weights:
                # Only now do the shares hold the weights: each copied from a device that held
                # them when the stage began, not from a sibling still receiving them.
                for dev, _ in shares[s]:
                    resident[dev] = True
            if contending and len(placed) > 1:
                spans = [(start, start + timed[0] * noise_s / throttle[dev] + set_up)
                         for dev, _, start, _, set_up, timed in placed]
                for i, timed in self._beside_siblings(work, placed, spans, st):
                    placed[i] = (*placed[i][:5], timed)
            for dev, frac, start, ready, set_up, (base, stall_s, attn_s, kv_s) in placed:
                speed = throttle[dev]
                seconds = base * noise_s / speed
                seconds += set_up
                end = start + seconds
                busy[dev] = end
                if contended[dev]:
                    st.booked[dev].append((start, end))
                busy_time[dev] += seconds
                task_busy[dev] += seconds
                if end > stage_end:
                    stage_end = end
                    transfer, queue, duration = ready - prev_end, start - ready, seconds
                    crit_setup = set_up
                    stall = stall_s * noise_s / speed
                    attn = attn_s * noise_s / speed
                    kv = kv_s * noise_s / speed
                if end >= stage_end:
                    stage_device[s] = dev
                    stage_fraction[s] = frac
                    res.stage_base[s] = base
                end_of[dev] = end
            transfer_sum += transfer
            queue_sum += queue
            res.stage_time[s] = duration - crit_setup   # the stage's own work, for speed estimates
            setup_sum += crit_setup
            compute_sum += duration - stall - crit_setup
            stall_sum += stall
            attn_sum += attn
            kv_sum += kv
        res.transfer = transfer_sum
        res.queue = queue_sum
        res.overhead = setup_sum
        res.compute = compute_sum
        res.memory_stall = stall_sum
        res.attention = attn_sum
        res.kv_wait = kv_sum
        return stage_end

    def _load_start(self, st: ClusterState, work: StageWork, dev: int, frac: float,
                    read_end: float, io_time: float, alone: bool = True) -> tuple[float, float]:
        """(when `frac` of the load stage starts on `dev`, its input read by `read_end` in
        `io_time` seconds, and when the device was free); without prefetch the share holds the
        disk for its part of the read. A share that copies the weights first holds them after
        if it is the stage's only share (`alone`); else the caller marks the stage's devices
        once all its shares are placed, so that none copies from a sibling (`_migration_time`)."""
        resident = st.resident
        ready = read_end
        if work.needs_weights and not resident[dev]:
            ready += self._migration_time(st, dev)
            if alone:
                resident[dev] = True
        free = st.busy_until[dev]
        start = free if free > ready else ready
        if not self.config.prefetch_depth:
            if st.disk_free > start:
                # Synchronous reads share the one disk: a share of a split load reads its part
                # once the other shares' reads are done (a single share never waits here:
                # `ready` is already past the disk's previous reads).
                start = st.disk_free
            read = io_time * frac   # (the whole input per share read a split load 2-3 times)
            if start + read > st.disk_free:
                st.disk_free = start + read
        return start, free

    def _load_base(self, work: StageWork, dev: int, frac: float, start: float,
                   st: ClusterState) -> float:
        """The time of `frac` of the load stage on `dev` from `start`, before noise, throttling
        and set-up."""
        if self._contended[dev]:
            return self._stage_time(work, dev, frac, start, st)[0]
        return self.stage_seconds(work, dev, frac)   # no peer can slow it: the same figure

    def _load_seconds(self, st: ClusterState, dev: int, frac: float, base: float,
                      io_time: float, noise_s: float, set_up: float) -> float:
        """How long `frac` of the load stage keeps `dev` busy, `base` its `_load_base`."""
        seconds = base * noise_s / st.throttle[dev]
        seconds += set_up
        if not self.config.prefetch_depth:   # synchronous: the share reads its part of the input
            seconds += io_time * frac
        return seconds

    def _book_load(self, st: ClusterState, res: TaskResult, dev: int, frac: float, t: float,
                   start: float, free: float, base: float, read_end: float, io_time: float,
                   noise_s: float, set_up: float) -> tuple[float, float]:
        """Book `frac` of the load stage on `dev` from `start` (`_load_start`) for a task that
        may start at `t`, `base` its `_load_base`, and charge it `set_up` seconds: (when the
        share ended, how much of the read counts as loading -- the rest of the wait for the
        disk or the device counts as queueing)."""
        busy = st.busy_until
        seconds = self._load_seconds(st, dev, frac, base, io_time, noise_s, set_up)
        end = start + seconds
        busy[dev] = end
        if self._contended[dev]:
            st.booked[dev].append((start, end))
        st.busy_time[dev] += seconds
        res.busy[dev] += seconds
        # All of the read without prefetch (it is inside `seconds`), else what was left of it
        # when the device was free for the task: prefetch hides the part done while it was busy.
        # min(io_time, max(0.0, read_end - max(t, free))), written out: cheaper on this path.
        if not self.config.prefetch_depth:
            return end, 0.0
        visible = read_end - (free if free > t else t)
        if visible < 0.0:
            visible = 0.0
        elif visible > io_time:
            visible = io_time
        return end, visible

    # A WorkPart is unpacked in the loops below rather than read field by field: tuple unpacking
    # is several times cheaper than NamedTuple attribute access, and these loops run for every
    # share of every stage of every simulated task (the environment's and the oracle's).
    def stage_profile(self, work: StageWork, dev: int, frac: float = 1.0) -> tuple[float, ...]:
        """(seconds, memory stall, attention, KV-read wait) of a stage on an idle cluster."""
        return self._stage_time(work, dev, frac, 0.0, self.initial_state())

    def stage_seconds(self, work: StageWork, dev: int, frac: float = 1.0) -> float:
        """Compute time of `frac` of a stage on `dev` with these figures: no queue, noise or contention."""
        inv_f, inv_b, launch = self._figures[dev]
        total = 0.0
        if frac == 1.0:   # the whole stage: x * 1.0 == x exactly, so skip those products
            for _tag, op, pattern, flops, nbytes, fixed_bytes, launches in work.parts:
                comp = flops * inv_f[op]
                mem = (nbytes + fixed_bytes) * inv_b[pattern]
                total += (comp if comp > mem else mem) + launches * launch
            return total
        for _tag, op, pattern, flops, nbytes, fixed_bytes, launches in work.parts:
            comp = flops * frac * inv_f[op]
            mem = (nbytes * frac + fixed_bytes) * inv_b[pattern]
            total += (comp if comp > mem else mem) + launches * launch
        return total

    def prices_as(self, other: Simulator, dev: int) -> bool:
        """Whether `stage_seconds` on `dev` is, to the bit, the `stage_base` that `other`'s runs
        record there: the same figures, and no memory-domain peer to slow the device down."""
        return self._figures[dev] == other._figures[dev] and not other._contended[dev]

    def _stage_time(self, work: StageWork, dev: int, frac: float, start: float,
                    st: ClusterState, siblings: Sequence[tuple[float, float]] = ()
                    ) -> tuple[float, float, float, float]:
        """(duration, memory stall, attention time, KV-read wait) of `frac` of a stage on `dev`,
        beside its peers' booked spans and `siblings`, the spans of the stage's other shares on
        its peers."""
        inv_f, inv_b, launch = self._figures[dev]
        parts = work.parts
        slow = 1.0
        if self._contended[dev]:
            est = 0.0
            for _tag, _op, pattern, _flops, nbytes, fixed_bytes, _launches in parts:
                est += (nbytes * frac + fixed_bytes) * inv_b[pattern]
            if est > 0:
                # Only a peer's spans that end after `start` can slow the stage. Each device's
                # spans are booked in order, so they are a suffix, found by bisection: under a
                # backlog that never drains, the spans still ahead of the task's arrival grow
                # with the episode, and scanning them all made each step slower than the last.
                peers_booked: list[Sequence[tuple[float, float]]] = []
                for q in self._peers[dev]:
                    spans = st.booked[q]
                    peers_booked.append(spans[bisect_right(spans, start, key=_span_end):])
                if siblings:
                    peers_booked.append(siblings)
                slow = self._contended_slowdown(est, start, peers_booked)
        total = stall = attn = kv = 0.0
        whole = frac == 1.0 and slow == 1.0   # x * 1.0 == x exactly: skip those products
        for tag, op, pattern, flops, nbytes, fixed_bytes, launches in parts:
            if whole:
                comp = flops * inv_f[op]
                mem = (nbytes + fixed_bytes) * inv_b[pattern]
            else:
                comp = flops * frac * inv_f[op]
                mem = (nbytes * frac + fixed_bytes) * inv_b[pattern] * slow
            if mem > comp:   # one comparison for max(comp, mem) and the stall
                t = mem + launches * launch
                stall += mem - comp
                if tag == "kv":
                    kv += mem - comp
            else:
                t = comp + launches * launch
            total += t
            if tag == "attention":
                attn += t
        return total, stall, attn, kv

    def _beside_siblings(self, work: StageWork, placed: Sequence[tuple[Any, ...]],
                         spans: Sequence[tuple[float, float]], st: ClusterState
                         ) -> list[tuple[int, tuple[float, float, float, float]]]:
        """The shares of one stage (`placed`: device, fraction and start first) that share a
        memory domain with a sibling, re-priced beside the siblings' `spans` (priced without
        each other): (index, `_stage_time`). Their own booking cannot slow the siblings, as
        booked work is not priced again, so each is priced beside the others before any is
        booked, whatever the order the shares are listed in."""
        repriced = []
        for i, (dev, frac, start, *_) in enumerate(placed):
            peers = self._peers[dev]
            siblings = [spans[j] for j, (other, *_) in enumerate(placed) if other in peers]
            if siblings and self._contended[dev]:
                repriced.append((i, self._stage_time(work, dev, frac, start, st, siblings)))
        return repriced

    def _contended_slowdown(self, est: float, start: float,
                            peers_booked: Sequence[Sequence[tuple[float, float]]]) -> float:
        """(contended / uncontended) memory time of a stage needing `est` seconds of memory
        traffic alone, from `start`, beside peers busy in their booked (start, end) spans.

        A fluid share of the domain's bandwidth: with n peers busy the stage's memory traffic
        progresses at 1 / (1 + contention x n) of its own rate, and at full rate while none is.
        Integrating that rate, rather than charging each peer's overlap with the start, keeps
        the simulator monotone: a stage that starts earlier, or a device that is faster, never
        finishes later (a per-overlap charge grew by contention x n per second of earlier
        start, so with contention x n > 1 an earlier start finished later). A peer idle before
        its booked work (waiting for its input) takes no bandwidth until that work starts.
        """
        c = self.config.contention
        events = []     # (time, +1 a peer starts / -1 it ends), from `start` on
        for spans in peers_booked:
            for begin, end in spans:
                if end > start:
                    events.append((begin if begin > start else start, 1))
                    events.append((end, -1))
        left, t, busy, slowed = est, start, 0, False
        for when, delta in sorted(events):   # at one time, an end (-1) before a start (+1)
            if when > t:
                rate = 1.0 / (1.0 + c * busy)
                if (when - t) * rate >= left:
                    break
                left -= (when - t) * rate
                slowed = slowed or busy > 0
                t = when
            busy += delta
        if not slowed and busy == 0:
            # no peer busy while the stage ran: exactly 1, which the formula below rounds
            # (start + est - start) / est off
            return 1.0
        return (t + left * (1.0 + c * busy) - start) / est

    def _migration_time(self, st: ClusterState, dev: int) -> float:
        """Copy the weights to `dev` over the fastest link from a holder, else from disk. The
        holders are ``st.resident``: the callers mark the devices of a stage that copy only
        once every share of the stage is priced, so a share copies from (or, in its memory
        domain, reads in place) weights held before the stage began."""
        if any(st.resident[p] for p in self._peers[dev]):
            return 0.0          # a peer in the same memory domain holds them: zero-copy
        weights = self.model.weight_bytes
        best = weights / self._disk_bw
        for src in range(self.n_devices):
            if st.resident[src] and src != dev:
                link = self._link[src][dev]
                best = min(best, link.latency + weights / link.bandwidth)
        return best

    def _track(self, st: ClusterState, domain: int) -> None:
        """Adaptive cache: decayed request counts decide which domains stay cached."""
        # Growing the increment instead of decaying every count keeps this O(capacity).
        st.cache_increment /= self.config.cache_decay
        counts = st.cache_counts
        counts[domain] = counts.get(domain, 0.0) + st.cache_increment
        if st.cache_increment > 1e100:   # renormalise before floats overflow
            counts.update({k: v / st.cache_increment for k, v in counts.items()})
            st.cache_increment = 1.0
        entries = st.cache_entries
        if domain in entries:
            return
        if len(entries) < self.config.cache_capacity:
            entries.add(domain)
            return
        # A tie keeps what is cached (the newcomer must outscore it) and evicts the highest
        # domain of the coldest, as AdaptiveLoad goes by path: by the set's hash order, a
        # bigger cache could evict what a smaller one kept, and hit less often.
        coldest = min(entries, key=lambda e: (counts[e], -e))
        if counts[coldest] < counts[domain]:
            entries.discard(coldest)
            entries.add(domain)
