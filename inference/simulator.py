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
  * weight residency: a device that computes prefill/decode without the weights
    first copies them over the fastest link (then keeps them);
  * prefetch: with ``prefetch_depth`` k >= 1 the disk reads a task's input while
    the devices work, up to k tasks ahead; with 0 reading blocks the load device;
  * contention: devices in one memory domain share its bandwidth while they overlap;
  * re-placement overhead: a placement that differs from the previous task's
    pays ``replacement_overhead_s`` (device contexts, graph capture, re-sharding);
  * caches: a ``cached`` loader hits when the task's domain is in the precomputed
    set; an ``adaptive`` loader keeps the ``capacity`` most requested domains
    (exponentially decayed counts);
  * noise: a multiplicative factor per stage, drawn by the caller's Generator.

Placements are either a device id per stage or, per stage, the fraction of the
batch each device takes (the stage ends when its slowest share does).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from inference.hardware import OP_CLASSES, PATTERNS, Hardware, Link
from inference.model_config import ModelConfig
from inference.task import STAGES, Task
from inference.work import StageWork

Shares = tuple[tuple[tuple[int, float], ...], ...]   # per stage: ((device, fraction), ...)


class StageImpl(Protocol):
    stage: str
    name: str

    def work(self, task: Task, model: ModelConfig) -> StageWork: ...


class LoadImpl(StageImpl, Protocol):
    cache_kind: str | None   # None (no cache), "precomputed" or "adaptive"

    def load_work(self, task: Task, model: ModelConfig, hit: bool | None) -> StageWork: ...


@dataclass(frozen=True)
class SimConfig:
    """Cluster-level parameters of the simulator.

    Attributes:
        prefetch_depth: tasks the disk may read ahead of the devices (0 = synchronous I/O).
        replacement_overhead_s: seconds charged when a task's placement differs from the previous one.
        contention: fraction of memory bandwidth lost per fully overlapping peer in one memory domain.
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
        if not isinstance(self.prefetch_depth, int) or self.prefetch_depth < 0:
            raise ValueError(f"SimConfig.prefetch_depth must be an integer >= 0, got {self.prefetch_depth!r}")
        for name in ("replacement_overhead_s", "contention"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"SimConfig.{name} must be finite and >= 0, got {value!r}")
        if not isinstance(self.cache_capacity, int) or self.cache_capacity < 1:
            raise ValueError(f"SimConfig.cache_capacity must be an integer >= 1, got {self.cache_capacity!r}")
        if not 0 < self.cache_decay <= 1:
            raise ValueError(f"SimConfig.cache_decay must be in (0, 1], got {self.cache_decay!r}")
        if any(not isinstance(d, int) or d < 0 for d in self.precomputed_domains):
            raise ValueError("SimConfig.precomputed_domains must be non-negative integers")


class TaskResult:
    """Latency of one task, its breakdown and what it used."""

    __slots__ = ("latency", "overhead", "queue", "load", "transfer", "compute", "memory_stall",
                 "attention", "kv_wait", "cache_hit", "busy", "finish", "stage_time", "stage_device",
                 "stage_fraction", "works")

    def __init__(self, n_devices: int) -> None:
        self.latency = self.overhead = self.queue = self.load = self.transfer = 0.0
        self.compute = self.memory_stall = self.attention = self.kv_wait = self.finish = 0.0
        self.cache_hit: bool | None = None
        self.busy = [0.0] * n_devices            # device-seconds this task used, per device
        self.stage_time = [0.0, 0.0, 0.0]        # critical-path duration of each stage
        self.stage_device = [0, 0, 0]            # the device on each stage's critical path
        self.stage_fraction = [1.0, 1.0, 1.0]    # the share of the stage that device took
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

    def copy(self) -> ClusterState:
        return ClusterState(
            list(self.busy_until), list(self.resident), list(self.online), list(self.throttle),
            self.disk_free, deque(self.load_done, self.load_done.maxlen), self.prev_shares,
            set(self.cache_entries), dict(self.cache_counts), self.cache_increment,
            list(self.busy_time), self.lookups, self.hits,
        )


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
        if len(stages) != 3 or [s.stage for s in stages] != list(STAGES):
            raise ValueError(f"stages must be one implementation per stage in order {STAGES}")
        self.hardware = hardware
        self.model = model
        self.stages = tuple(stages)
        self.config = config or SimConfig()
        self.n_devices = len(hardware.devices)
        devs = hardware.devices
        # Per-device reciprocal throughputs, so the hot path multiplies instead of looking up.
        self._inv_flops = [[1.0 / (d.peak_flops * d.op_efficiency[o]) for o in OP_CLASSES] for d in devs]
        self._inv_bw = [[1.0 / (d.mem_bandwidth * d.pattern_efficiency[p]) for p in PATTERNS] for d in devs]
        self._launch = [d.launch_overhead for d in devs]
        self._peers = [[j for j, e in enumerate(devs) if j != i and e.memory_domain == d.memory_domain]
                       for i, d in enumerate(devs)]
        # The diagonal is never read (a stage's output stays on its device): a free placeholder.
        free = Link(math.inf, 0.0)
        self._link = [[hardware.links.get((a, b), free) for b in range(self.n_devices)]
                      for a in range(self.n_devices)]
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
            busy_time=[0.0] * self.n_devices,
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
        if getattr(self.stages[0], "cache_kind", None) is None:
            return None
        return task.domain in self.state.cache_entries

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
                if isinstance(dev, (bool, np.bool_)) or not isinstance(dev, (int, np.integer)):
                    raise ValueError(f"placement[{stage}] must be a device id or name, got {dev!r}")
                if not 0 <= dev < self.n_devices:
                    raise ValueError(f"placement[{stage}] = {dev} is not a device id in 0..{self.n_devices - 1}")
                out.append(((int(dev), 1.0),))
            return tuple(out)
        fractions = np.asarray(placement, dtype=float)
        if fractions.shape != (3, self.n_devices):
            raise ValueError(f"fraction placement must have shape (3, {self.n_devices}), got {fractions.shape}")
        if not np.all(np.isfinite(fractions)) or np.any(fractions < 0):
            raise ValueError("fraction placement entries must be finite and >= 0")
        sums = fractions.sum(axis=1)
        for stage, total in zip(STAGES, sums, strict=True):
            if total <= 0:
                raise ValueError(f"fraction placement for stage {stage!r} is all zero")
        fractions = fractions / sums[:, None]
        return tuple(tuple((d, float(f)) for d, f in enumerate(row) if f > 0) for row in fractions)

    def execute(self, task: Task, placement: Any, rng: np.random.Generator | None = None,
                noise_sigma: float = 0.0) -> TaskResult:
        """Book `task` under `placement` (validated), drawing stage noise from `rng`."""
        noise: Sequence[float] = (1.0, 1.0, 1.0)
        if rng is not None and noise_sigma > 0:
            noise = np.exp(rng.normal(0.0, noise_sigma, 3)).tolist()
        return self.run(task, self.shares(placement), noise)

    # ---------------------------------------------------------------- the hot path
    def run(self, task: Task, shares: Shares, noise: Sequence[float] = (1.0, 1.0, 1.0),
            commit: bool = True, state: ClusterState | None = None,
            extra_overhead: float = 0.0) -> TaskResult:
        """Book a task with pre-validated shares. With ``commit=False`` nothing changes.

        ``extra_overhead`` (seconds) delays the task's start and counts as overhead: the
        environment charges failed dispatches this way.
        """
        st = state if state is not None else self.state
        if not commit:
            st = st.copy()
        cfg, model = self.config, self.model
        res = TaskResult(self.n_devices)
        busy, throttle = st.busy_until, st.throttle
        t = task.arrival + extra_overhead
        res.overhead = extra_overhead
        if cfg.replacement_overhead_s and st.prev_shares is not None and shares != st.prev_shares:
            res.overhead += cfg.replacement_overhead_s
            t += cfg.replacement_overhead_s
        # -- work records; the loader's depends on the cache
        load_impl = self.stages[0]
        hit = None
        if load_impl.cache_kind is not None:
            hit = task.domain in st.cache_entries
        works = (load_impl.load_work(task, model, hit), self.stages[1].work(task, model),
                 self.stages[2].work(task, model))
        res.cache_hit = hit
        res.works = works
        # -- disk read: asynchronous with prefetch (overlaps device work), else it blocks the device
        io_time = works[0].io_bytes / self._disk_bw
        read_start = max(t, st.disk_free)
        if cfg.prefetch_depth:
            if len(st.load_done) == st.load_done.maxlen:
                read_start = max(read_start, st.load_done[0])   # at most k reads ahead of loading
            read_end = read_start + io_time
            st.disk_free = read_end
        else:
            read_end = read_start
        prev_end = t
        prev_devices: tuple[tuple[int, float], ...] = ()
        prev_end_of: dict[int, float] = {}
        prev_output = 0.0
        for s in range(3):
            work = works[s]
            end_of: dict[int, float] = {}
            stage_end = -1.0
            crit = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)  # transfer, queue, duration, stall, attn, kv
            for dev, frac in shares[s]:
                # input arrival: the disk for loading, else every device of the previous stage
                if s == 0:
                    ready = read_end
                else:
                    ready = 0.0
                    for a, fa in prev_devices:
                        arrive = prev_end_of[a]
                        if a != dev:
                            link = self._link[a][dev]
                            arrive += link.latency + prev_output * fa * frac / link.bandwidth
                        if arrive > ready:
                            ready = arrive
                if work.needs_weights and not st.resident[dev]:
                    ready += self._migration_time(st, dev)
                    st.resident[dev] = True
                free = busy[dev]
                start = free if free > ready else ready
                duration, stall, attn, kv = self._stage_time(work, dev, frac, start, st)
                duration = duration * noise[s] / throttle[dev]
                stall = stall * noise[s] / throttle[dev]
                attn, kv = attn * noise[s] / throttle[dev], kv * noise[s] / throttle[dev]
                if s == 0 and not cfg.prefetch_depth:
                    duration += io_time
                    st.disk_free = start + io_time
                end = start + duration
                busy[dev] = end
                st.busy_time[dev] += duration
                res.busy[dev] += duration
                if s == 0:
                    if end > stage_end:
                        stage_end = end
                        # the read counts as loading; waiting for the disk or device as queueing
                        # (prefetch hides the part of the read done while the device was busy)
                        visible = min(io_time, max(0.0, read_end - max(t, free)))
                        if not cfg.prefetch_depth:
                            visible = 0.0   # synchronous: the read is inside `duration`
                        waited = start - t - visible
                        crit = (0.0, waited, end - t - waited, 0.0, 0.0, 0.0)
                elif end > stage_end:
                    stage_end = end
                    crit = (ready - prev_end, start - ready, duration, stall, attn, kv)
                if end >= stage_end:
                    res.stage_device[s] = dev
                    res.stage_fraction[s] = frac
                end_of[dev] = end
            transfer, queue, duration, stall, attn, kv = crit
            res.transfer += transfer
            res.queue += queue
            res.stage_time[s] = duration
            if s == 0:
                res.load = duration
                st.load_done.append(stage_end)   # once per task: prefetch depth counts tasks
            else:
                res.compute += duration - stall
                res.memory_stall += stall
                res.attention += attn
                res.kv_wait += kv
            prev_end = stage_end
            prev_devices = shares[s]
            prev_output = work.output_bytes
            prev_end_of = end_of
        res.finish = prev_end
        res.latency = prev_end - task.arrival
        st.prev_shares = shares
        if hit is not None:
            st.lookups += 1
            st.hits += hit
            if load_impl.cache_kind == "adaptive":
                self._track(st, task.domain)
        return res

    def stage_seconds(self, work: StageWork, dev: int, frac: float = 1.0) -> float:
        """Compute time of `frac` of a stage on `dev` with these figures: no queue, noise or contention."""
        inv_f, inv_b = self._inv_flops[dev], self._inv_bw[dev]
        total = 0.0
        for p in work.parts:
            comp = p.flops * frac * inv_f[p.op]
            mem = (p.nbytes * frac + p.fixed_bytes) * inv_b[p.pattern]
            total += (comp if comp > mem else mem) + p.launches * self._launch[dev]
        return total

    def _stage_time(self, work: StageWork, dev: int, frac: float, start: float,
                    st: ClusterState) -> tuple[float, float, float, float]:
        """(duration, memory stall, attention time, KV-read wait) of `frac` of a stage on `dev`."""
        inv_f, inv_b = self._inv_flops[dev], self._inv_bw[dev]
        slow = 1.0
        if self._peers[dev] and self.config.contention:
            # Overlapping peers in the memory domain take a share of its bandwidth.
            est = 0.0
            for p in work.parts:
                est += (p.nbytes * frac + p.fixed_bytes) * inv_b[p.pattern]
            if est > 0:
                for q in self._peers[dev]:
                    overlap = st.busy_until[q] - start
                    if overlap > 0:
                        slow += self.config.contention * min(1.0, overlap / est)
        total = stall = attn = kv = 0.0
        for p in work.parts:
            comp = p.flops * frac * inv_f[p.op]
            mem = (p.nbytes * frac + p.fixed_bytes) * inv_b[p.pattern] * slow
            t = (comp if comp > mem else mem) + p.launches * self._launch[dev]
            total += t
            if mem > comp:
                stall += mem - comp
                if p.tag == "kv":
                    kv += mem - comp
            if p.tag == "attention":
                attn += t
        return total, stall, attn, kv

    def _migration_time(self, st: ClusterState, dev: int) -> float:
        """Copy the weights to `dev` over the fastest link from a holder, else from disk."""
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
        coldest = min(entries, key=counts.__getitem__)
        if counts[coldest] < counts[domain]:
            entries.discard(coldest)
            entries.add(domain)
