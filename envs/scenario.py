"""Scenarios: named YAML files that fix the workload, hardware, pipeline and faults.

Schema (every field optional except where noted), with the values of
``envs/scenarios/article.yaml`` where it sets them (the others are the optional parts it
leaves out: clients, bursts, a trace, faults)::

    name: article
    description: "..."
    hardware: server                 # preset name, YAML path or an inline mapping of the hardware schema
    variant: glm-5.3-flash           # recipe name, load+prefill+decode or {load:, prefill:, decode:}
    model: glm-9b
    episode_tasks: 200
    noise: 0.05                      # sigma of the multiplicative log-normal stage noise (median 1)
    failed_dispatch_s: 0.5           # charged when an action picks a masked device
    workload:
      arrival_rate: 0.022            # tasks per second (Poisson)
      clients: 0                     # > 0: closed loop, K clients (see Workload)
      burst: {period: 40, length: 12, rate_multiplier: 6.0}   # optional: bursts of arrivals
      batch: {dist: choice, values: [4, 8, 12, 16, 24, 32], weights: [0.08, 0.12, 0.10, 0.25, 0.25, 0.20]}
      prompt_tokens: {dist: normal, mean: 5000, std: 800, min: 2048, max: 8192}
      output_tokens: {dist: lognormal, median: 160, sigma: 0.9, min: 16, max: 2048}
      domains: 64                    # data domains the requests come from
      zipf: 1.1                      # skew of the live domain popularity
      trace: null                    # azure-code | azure-conv | CSV path: replaces the synthetic sizes
      trace_time_scale: 1.0          # > 1 replays the trace faster (more load); ~0.05 for one server
      trace_window_s: 0.5            # batching window (see envs/traces.py)
      trace_max_batch: 32            # these trace_ settings, if not default, need a trace
      trace_span: [0.0, 1.0]         # the part of the trace's time episodes are drawn from
    cache:
      precomputed_size: 12           # domains the precomputed cache holds ...
      train_shift: 24                # ... taken from a training mix shifted this many ranks
      capacity: 12                   # adaptive cache entries
      decay: 0.98
    simulator: {prefetch_depth: 1, replacement_overhead_s: 0.2, contention: 1.0}
    faults:                          # each needs device, kind, start_task, end_task (excluded)
      - {device: npu, kind: offline, start_task: 60, end_task: 120}
      - {device: gpu, kind: throttle, factor: 0.6, start_task: 100, end_task: 180}   # factor in [1e-12, 1]

Distributions (``batch``, ``prompt_tokens``, ``output_tokens``): a number is a constant; a
constant's ``value``, a choice's ``values`` and the clamps are whole numbers (a normal,
lognormal or uniform draw is rounded to one); a mapping takes only its dist's keys (see ``DIST_PARAMS``), all of which it needs but ``weights``,
plus the clamps ``min``/``max`` (default 1 and 1e9), and ``dist`` itself (default ``constant``)::

    constant: value               normal: mean, std             lognormal: median, sigma
    uniform: low, high (low <= high)                            choice: values [, weights]

Relative paths: in a scenario loaded from a YAML file, a relative ``hardware`` or
``workload.trace`` path names a file next to that YAML when such a file exists there; otherwise
it is left as written (so it resolves against the working directory, as before). Preset names
(``server``, ``edge``, ``azure-code``, ``azure-conv``) and absolute paths are never rewritten:
a preset name is the preset even where a file of that name lies next to the YAML or in the
working directory (write ``./server`` for such a file; see `inference.hardware.preset_file`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from envs.traces import TRACES
from inference.checks import check_as_loaded, check_utf8, compared_fields, is_number
from inference.hardware import (
    FRACTION_MIN,
    PRESET_DIR,
    Hardware,
    check_hardware,
    hardware_from_dict,
    hardware_to_dict,
    load_named_yaml,
    preset_file,
    require_usable_spec,
)
from inference.messages import did_you_mean, shown
from inference.simulator import MAX_CONTENTION, MAX_OVERHEAD_S, MAX_PREFETCH_DEPTH, MIN_CACHE_DECAY
from inference.task import MAX_SIZE
from inference.yamlio import unusable_path, with_text_number_hint

SCENARIO_DIR = Path(__file__).parent / "scenarios"
#: dist -> (parameters it needs, parameters it may have), as envs.workload._draw reads them;
#: every dist also takes the clamps `min` and `max`.
DIST_PARAMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "normal": (("mean", "std"), ()),
    "lognormal": (("median", "sigma"), ()),
    "uniform": (("low", "high"), ()),
    "choice": (("values",), ("weights",)),
    "constant": (("value",), ()),
}
DISTRIBUTIONS = tuple(DIST_PARAMS)


def scenario_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


# Plausible bounds, far beyond any real workload, that keep every drawn size inside int64 and
# every interval and latency finite (beyond them numpy overflowed and reset() failed naming
# no field), and an episode's arrays in memory. (A size, tokens or a batch, is capped at
# inference.task.MAX_SIZE.)
MAX_EPISODE_TASKS = 1_000_000
MAX_DOMAINS = 1_000_000
MIN_RATE = 1e-6             # requests/s, burst multiplier, trace time scale
MAX_SIGMA = 10.0            # a log-normal's sigma: e^(4 sigma) ~ 2e17x the median at most
MAX_NOISE = 2.0             # sigma of log-normal noise: e^(4 sigma) = 3000x at most
MAX_SECONDS = MAX_OVERHEAD_S  # a dispatch penalty or replacement overhead
# A throttle's speed factor, a fraction of the device's speed as an efficiency is: a stage's
# time is divided by it, and 5e-324 made that inf (step() then raised a RuntimeError).
MIN_THROTTLE = FRACTION_MIN


def _number(raw: Any, where: str, *, low: float | None = 0.0, strict: bool = True,
            integer: bool = False, high: float | None = None) -> float:
    if not is_number(raw) or not math.isfinite(raw):
        raise ValueError(f"scenario field {where} must be a finite number, got {shown(raw)}")
    if integer and int(raw) != raw:
        raise ValueError(f"scenario field {where} must be an integer, got {shown(raw)}")
    if low is not None and (raw <= low if strict else raw < low):
        # bounds as docs/WORKLOADS.md writes them ("> 0", ">= 1"), not as floats ("> 0.0"); a count
        # above an integer bound starts at the next integer
        bound = (f">= {math.floor(low) + 1}" if integer and strict
                 else f"{'>' if strict else '>='} {low:g}")
        raise ValueError(f"scenario field {where} must be {bound}, got {shown(raw)}")
    if high is not None and raw > high:
        raise ValueError(f"scenario field {where} must be <= {high:g}, got {shown(raw)}")
    return float(raw)


@dataclass(frozen=True)
class Distribution:
    """A positive integer quantity drawn per task (clipped to [min, max])."""

    dist: str = "constant"
    value: float = 1.0
    mean: float = 1.0
    std: float = 0.0
    median: float = 1.0
    sigma: float = 0.0
    low: float = 1.0
    high: float = 1.0
    values: tuple[float, ...] = ()
    weights: tuple[float, ...] = ()
    min: float = 1.0
    max: float = 1e9

    def to_dict(self) -> dict[str, Any]:
        """The mapping `parse` reads back: `dist`, its parameters and the clamps. Only those:
        `parse` refuses the parameters of other dists, which this one never reads. (A `dist`
        of none of them is written alone, with the clamps, for `parse` to refuse by name.)"""
        needed, optional = DIST_PARAMS[self.dist] if self.dist in DISTRIBUTIONS else ((), ())
        out: dict[str, Any] = {"dist": self.dist}
        for key in (*needed, *optional, "min", "max"):
            value = getattr(self, key)
            if key == "weights" and not value:   # none given: uniform over the values
                continue
            out[key] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def parse(cls, raw: Any, where: str) -> Distribution:
        if is_number(raw):
            raw = {"dist": "constant", "value": raw}
        if not isinstance(raw, dict):
            raise ValueError(f"scenario field {where} must be a number or a mapping with `dist`")
        kind = raw.get("dist", "constant")
        if kind not in DISTRIBUTIONS:
            raise ValueError(f"scenario field {where}.dist must be one of {', '.join(DISTRIBUTIONS)}, got {shown(kind)}")
        # Only the keys this dist reads: a key of another dist (`mean` for a lognormal, `values`
        # without `dist: choice`) used to be ignored, and the dist then drew with a default of 1.
        needed, optional = DIST_PARAMS[kind]
        valid = ("dist", *needed, *optional, "min", "max")
        implied = "" if "dist" in raw else " (the default when `dist` is omitted)"
        for key in raw:
            if key not in valid:
                raise ValueError(f"scenario field {where}.{key} is not a parameter of dist: {kind}{implied}; "
                                 f"valid keys: {', '.join(valid)}")
        missing = [key for key in needed if key not in raw]
        if missing:
            raise ValueError(f"scenario field {where} (dist: {kind}) needs {' and '.join(missing)}")
        args: dict[str, Any] = {"dist": kind}
        for key, value in raw.items():
            if key == "dist":
                continue
            if key in ("values", "weights"):
                if not isinstance(value, list) or not value:
                    raise ValueError(f"scenario field {where}.{key} must be a non-empty list")
                # a value is a size (>= 1: 0.2 drew as 0, clipped to 1); a weight may be 0
                args[key] = tuple(_number(v, f"{where}.{key}", low=0.0,
                                          strict=False, high=MAX_SIZE,
                                          integer=key == "values") for v in value)
            else:
                # a size given outright is a whole one: 2.5 (a constant or a choice's value)
                # drew as 2 without a word; a continuous dist's parameters are not sizes
                # a log-normal's median scales every draw: at 0 each one was 0, clipped to min
                args[key] = _number(value, f"{where}.{key}", low=1.0 if key == "value" else 0.0,
                                    strict=key == "median", high=MAX_SIZE,
                                    integer=key in ("value", "min", "max"))   # 1.5..1.7 drew 1
        out = cls(**args)
        if kind == "choice" and out.weights and (len(out.weights) != len(out.values) or sum(out.weights) <= 0):
            raise ValueError(f"scenario field {where}.weights must match values and sum to > 0")
        if kind == "uniform" and out.low > out.high:
            raise ValueError(f"scenario field {where}: dist: uniform needs low <= high, got {out.low}..{out.high}")
        if out.min < 1 or out.max < out.min:
            raise ValueError(f"scenario field {where}: need 1 <= min <= max, got {out.min}..{out.max}")
        # Values a dist draws by construction must lie in min..max: clipping them piles the
        # mass onto a bound (uniform low: 0.5 drew zeros, clipped to 1) without a word.
        inside = {"constant": (out.value,), "uniform": (out.low, out.high),
                  "choice": out.values}.get(kind, ())
        for v in inside:
            if not out.min <= v <= out.max:
                raise ValueError(f"scenario field {where}: {v:g} lies outside "
                                 f"min..max {out.min:g}..{out.max:g}")
        if out.sigma > MAX_SIGMA:   # e^(4 sigma) overflows float64 past ~175
            raise ValueError(f"scenario field {where}.sigma must be <= {MAX_SIGMA:g}, got {out.sigma:g}")
        return out


@dataclass(frozen=True)
class Burst:
    period: int = 40            # tasks per burst cycle
    length: int = 10            # tasks of each cycle that arrive in the burst
    rate_multiplier: float = 5.0


@dataclass(frozen=True)
class Workload:
    """The task stream. ``clients``: 0 for an open loop (Poisson arrivals at ``arrival_rate``);
    K > 0 for a closed loop, as a benchmark's load generator runs: K clients, each submitting
    its next request when its previous one finishes (the first K at time 0). The queues then
    stay bounded whatever the allocator does, and a job's makespan measures throughput.
    ``arrival_rate`` still sets the stream best-static is searched on."""

    arrival_rate: float = 0.1
    clients: int = 0
    burst: Burst | None = None
    batch: Distribution = field(default_factory=lambda: Distribution(value=16))
    prompt_tokens: Distribution = field(default_factory=lambda: Distribution(value=4096))
    output_tokens: Distribution = field(default_factory=lambda: Distribution(value=128))
    domains: int = 64
    zipf: float = 1.1
    trace: str | None = None
    trace_time_scale: float = 1.0
    trace_window_s: float = 0.5
    trace_max_batch: int = 32
    # [start, end) of the trace's duration, as fractions, that episode windows are drawn
    # from: [0, 0.8] to train on and [0.8, 1] to evaluate on keep held-out episodes unseen
    trace_span: tuple[float, float] = (0.0, 1.0)


@dataclass(frozen=True)
class CacheSpec:
    precomputed_size: int = 12
    train_shift: int = 24
    capacity: int = 12
    decay: float = 0.98


@dataclass(frozen=True)
class SimulatorSpec:
    prefetch_depth: int = 1
    replacement_overhead_s: float = 0.0
    contention: float = 1.0


FAULT_NEEDS = ("device", "kind", "start_task", "end_task")   # factor defaults to 1


@dataclass(frozen=True)
class Fault:
    device: str
    kind: str                   # offline | throttle
    start_task: int
    end_task: int
    factor: float = 1.0         # throttle: speed multiplier in [MIN_THROTTLE, 1]

    def to_dict(self) -> dict[str, Any]:
        """The mapping a scenario's `faults` entry gives; an offline fault has no factor."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.kind == "offline":
            del out["factor"]
        return out


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str = ""
    # A preset name or YAML path; or a Hardware (given inline, as a mapping of the hardware
    # schema, or as the env's `hardware=` argument), which `to_dict` writes as that mapping.
    hardware: str | Hardware = "server"
    variant: Any = "glm-5.3-flash"
    model: str = "glm-9b"
    episode_tasks: int = 200
    noise: float = 0.05
    failed_dispatch_s: float = 0.5
    workload: Workload = field(default_factory=Workload)
    cache: CacheSpec = field(default_factory=CacheSpec)
    simulator: SimulatorSpec = field(default_factory=SimulatorSpec)
    faults: tuple[Fault, ...] = ()
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The scenario as plain data (str, numbers, None, lists, dicts: JSON and YAML write
        it), in the schema of this module's docstring plus `source`; `load_scenario` reads it
        back to an equal Scenario. Every field is written out, so the mapping does not depend
        on the defaults of the version that reads it.

        gymnasium's ``EnvSpec.to_json`` needs it: it writes a dataclass as
        ``dataclasses.asdict``, whose Distributions carry every dist's parameters, a mapping
        no scenario reader accepts (the env keeps this form in its spec instead)."""
        return _plain(self)


def _plain(value: Any) -> Any:
    """`value`, a part of a Scenario, as the plain data `Scenario.to_dict` documents."""
    if isinstance(value, (Distribution, Fault)):
        return value.to_dict()
    if isinstance(value, Hardware):     # as a dataclass its links are keyed by tuples
        return hardware_to_dict(value)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):      # a variant's {load:, prefill:, decode:}
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    return value


def _section(raw: Any, where: str, allowed: set[str]) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"scenario field {where} must be a mapping")
    unknown = set(raw) - allowed
    if unknown:
        homes = _homes()
        misplaced = [f"{key} {homes[key]}" for key in sorted(unknown, key=str)
                     if isinstance(key, str) and key in homes]
        hint = f" ({', '.join(misplaced)})" if misplaced else ""
        typos = [key for key in sorted(unknown, key=str) if key not in homes]
        raise ValueError(f"scenario field {where} has unknown keys "
                         f"{sorted(unknown, key=str)}{hint}{did_you_mean(typos, allowed)}; "
                         f"allowed: {sorted(allowed)}")
    return raw


def _homes() -> dict[str, str]:
    """Where each scenario field belongs, for the error of one written in the wrong section
    (e.g. `trace`, an env argument, at the YAML's top level instead of under `workload:`).
    No field name is used in two sections."""
    homes = {f.name: "at the top level" for f in fields(Scenario) if f.name != "source"}
    for section, cls in (("workload", Workload), ("cache", CacheSpec), ("simulator", SimulatorSpec)):
        homes.update({f.name: f"belongs under {section}:" for f in fields(cls)})
    return homes


def _int(raw: Any, where: str, low: float = 0.0, strict: bool = True,
         high: float | None = None) -> int:
    return int(_number(raw, where, low=low, strict=strict, integer=True, high=high))


def _near(value: str, base_dir: Path | None, preset: bool) -> str:
    """`value` as the path of a file next to the scenario YAML, where one exists there; else as is."""
    if base_dir is None or preset or Path(value).is_absolute():
        return value
    candidate = base_dir / value
    if unusable_path(candidate) is not None:   # its loader names what is wrong with it
        return value
    return str(candidate) if candidate.is_file() else value


def _distribution(section: dict[str, Any], key: str, default: Distribution) -> Distribution:
    """``section[key]`` parsed, or the dataclass's default when the key is absent."""
    return Distribution.parse(section[key], f"workload.{key}") if key in section else default


def scenario_from_dict(raw: Any, origin: str, base_dir: Path | None = None) -> Scenario:
    """Validate a parsed YAML mapping into a Scenario; errors name `origin` (the file it came
    from) and the offending field.

    ``base_dir``: the folder of the YAML file it came from, against which relative ``hardware``
    and ``workload.trace`` paths resolve (see the module docstring); None leaves them as given.
    """
    try:
        return _scenario(raw, origin, base_dir)
    except ValueError as exc:
        raise ValueError(f"{origin}: {exc}") from None


def _scenario(raw: Any, origin: str, base_dir: Path | None) -> Scenario:
    top = _section(raw, "<top level>", {f.name for f in fields(Scenario)} - {"source"})
    if not top and not isinstance(raw, dict):
        raise ValueError("scenario top level must be a mapping")
    d = Scenario(name=str(top.get("name", Path(origin).stem)))
    if isinstance(top.get("name"), str):    # it names the scenario in logs and summaries
        check_utf8(top["name"], "scenario field name")
    workload = _workload(top.get("workload"), base_dir)
    cache = _cache(top.get("cache"))
    sim = _simulator(top.get("simulator"))
    faults = _faults(top.get("faults"))
    for key in ("name", "description", "model"):   # str() made [1, 2] a name
        if key in top and not isinstance(top[key], str):
            raise ValueError(f"scenario field {key} must be a string, got {shown(top[key])}")
    hardware = _hardware_field(top.get("hardware", d.hardware), base_dir)
    variant = top.get("variant", d.variant)
    if not isinstance(variant, (str, dict)):
        raise ValueError(f"scenario field variant must be a recipe name or a mapping, got {shown(variant)}")
    return Scenario(
        name=d.name,
        description=str(top.get("description", "")),
        hardware=hardware,
        variant=variant,
        model=str(top.get("model", d.model)),
        episode_tasks=_int(top.get("episode_tasks", d.episode_tasks), "episode_tasks",
                           high=MAX_EPISODE_TASKS),
        noise=_number(top.get("noise", d.noise), "noise", strict=False, high=MAX_NOISE),
        failed_dispatch_s=_number(top.get("failed_dispatch_s", d.failed_dispatch_s), "failed_dispatch_s",
                                  strict=False, high=MAX_SECONDS),
        workload=workload, cache=cache, simulator=sim, faults=faults, source=origin,
    )


#: The default name of a hardware given inline (a mapping without `name`), as its errors name it.
INLINE_HARDWARE_ORIGIN = "<inline hardware>"


def _hardware_field(raw: Any, base_dir: Path | None) -> str | Hardware:
    """The ``hardware`` field: a preset name or a YAML path (a relative one resolved as `_near`
    does), or a mapping of the hardware schema (`inference.hardware`), read as its YAML is."""
    if isinstance(raw, dict):
        try:
            return hardware_from_dict(raw, INLINE_HARDWARE_ORIGIN)
        except ValueError as exc:   # its own "hardware <origin>: " prefix said nothing more
            detail = str(exc).removeprefix(f"hardware {INLINE_HARDWARE_ORIGIN}: ")
            raise ValueError(f"scenario field hardware (an inline mapping of the hardware "
                             f"schema): {detail}") from None
    if not isinstance(raw, str):   # str() made [1, 2] a name
        raise ValueError(f"scenario field hardware must be a preset name, a YAML path or a "
                         f"mapping of the hardware schema, got {shown(raw)}")
    require_usable_spec(raw, PRESET_DIR, "scenario field hardware")
    # A preset name is the preset, never a file next to the YAML (the rule load_hardware reads
    # it by: see inference.hardware.preset_file).
    return _near(raw, base_dir, preset=preset_file(raw, PRESET_DIR) is not None)


def _workload(raw: Any, base_dir: Path | None) -> Workload:
    """The ``workload`` section; a relative trace path resolved as `_near` does."""
    w_raw = _section(raw, "workload", {f.name for f in fields(Workload)})
    w = Workload()
    burst = None if w_raw.get("burst") is None else _burst(w_raw["burst"])
    trace = w_raw.get("trace")
    if trace is not None and not isinstance(trace, str):
        raise ValueError(f"scenario field workload.trace must be a trace name or path, got {shown(trace)}")
    if trace is not None:
        trace = _near(trace, base_dir, preset=trace in TRACES)
    workload = Workload(
        arrival_rate=_number(w_raw.get("arrival_rate", w.arrival_rate), "workload.arrival_rate",
                             low=MIN_RATE, strict=False, high=1 / MIN_RATE),
        clients=_int(w_raw.get("clients", w.clients), "workload.clients", strict=False),
        burst=burst,
        batch=_distribution(w_raw, "batch", w.batch),
        prompt_tokens=_distribution(w_raw, "prompt_tokens", w.prompt_tokens),
        output_tokens=_distribution(w_raw, "output_tokens", w.output_tokens),
        domains=_int(w_raw.get("domains", w.domains), "workload.domains", high=MAX_DOMAINS),
        zipf=_number(w_raw.get("zipf", w.zipf), "workload.zipf", strict=False),
        trace=trace,
        trace_time_scale=_number(w_raw.get("trace_time_scale", w.trace_time_scale), "workload.trace_time_scale",
                                 low=MIN_RATE, strict=False, high=1 / MIN_RATE),
        trace_window_s=_number(w_raw.get("trace_window_s", w.trace_window_s), "workload.trace_window_s", strict=False),
        trace_max_batch=_int(w_raw.get("trace_max_batch", w.trace_max_batch), "workload.trace_max_batch"),
        trace_span=_span(w_raw.get("trace_span", w.trace_span), "workload.trace_span"),
    )
    if trace is None:
        _check_no_trace_settings(workload, w)
    return workload


TRACE_SETTINGS = ("trace_time_scale", "trace_window_s", "trace_max_batch", "trace_span")


def _span(raw: Any, where: str) -> tuple[float, float]:
    """A [start, end] pair of fractions, 0 <= start < end <= 1."""
    # (NaN and inf fail the order's comparisons)
    if not (isinstance(raw, (list, tuple)) and len(raw) == 2 and all(map(is_number, raw))
            ) or not 0 <= raw[0] < raw[1] <= 1:
        raise ValueError(f"scenario field {where} must be [start, end], fractions of the "
                         f"trace's duration with 0 <= start < end <= 1, got {shown(raw)}")
    return float(raw[0]), float(raw[1])


def _check_no_trace_settings(workload: Workload, default: Workload) -> None:
    """Refuse a trace setting set without a trace to read it: it was silently ignored (as the
    env's ``trace_time_scale=`` without ``trace=`` is refused). Its default is let through,
    since it changes nothing and `Scenario.to_dict` writes every field, trace or none."""
    for key in TRACE_SETTINGS:
        value = getattr(workload, key)
        if value != getattr(default, key):
            shown_value = list(value) if isinstance(value, tuple) else f"{value:g}"
            raise ValueError(f"scenario field workload.{key} ({shown_value}) is read only with a "
                             f"replayed trace; give workload.trace too, or leave {key} out")


def _burst(raw: Any) -> Burst:
    db = Burst()
    b = _section(raw, "workload.burst", {"period", "length", "rate_multiplier"})
    burst = Burst(
        _int(b.get("period", db.period), "workload.burst.period", high=MAX_EPISODE_TASKS),
        _int(b.get("length", db.length), "workload.burst.length"),
        _number(b.get("rate_multiplier", db.rate_multiplier), "workload.burst.rate_multiplier",
                low=MIN_RATE, strict=False, high=1 / MIN_RATE),
    )
    if burst.length > burst.period:
        raise ValueError("scenario field workload.burst.length must be <= workload.burst.period")
    return burst


def _cache(raw: Any) -> CacheSpec:
    c_raw = _section(raw, "cache", {f.name for f in fields(CacheSpec)})
    c = CacheSpec()
    cache = CacheSpec(
        precomputed_size=_int(c_raw.get("precomputed_size", c.precomputed_size), "cache.precomputed_size", strict=False),
        train_shift=_int(c_raw.get("train_shift", c.train_shift), "cache.train_shift", strict=False),
        capacity=_int(c_raw.get("capacity", c.capacity), "cache.capacity"),
        decay=_number(c_raw.get("decay", c.decay), "cache.decay"),
    )
    if not MIN_CACHE_DECAY <= cache.decay <= 1:
        raise ValueError(f"scenario field cache.decay must be in [{MIN_CACHE_DECAY:g}, 1], got "
                         f"{shown(c_raw.get('decay', c.decay))}")
    return cache


def _simulator(raw: Any) -> SimulatorSpec:
    s_raw = _section(raw, "simulator", {f.name for f in fields(SimulatorSpec)})
    s = SimulatorSpec()
    return SimulatorSpec(
        prefetch_depth=_int(s_raw.get("prefetch_depth", s.prefetch_depth), "simulator.prefetch_depth", strict=False,
                            high=MAX_PREFETCH_DEPTH),
        replacement_overhead_s=_number(s_raw.get("replacement_overhead_s", s.replacement_overhead_s),
                                       "simulator.replacement_overhead_s", strict=False,
                                       high=MAX_SECONDS),
        contention=_number(s_raw.get("contention", s.contention), "simulator.contention", strict=False,
                           high=MAX_CONTENTION),
    )


def _faults(raw: Any) -> tuple[Fault, ...]:
    if raw is None:      # absent or null: none (`or []` read faults: 0 as none too)
        raw = []
    if not isinstance(raw, list):
        raise ValueError(f"scenario field faults must be a list, got {shown(raw)}")
    return tuple(_fault(f_raw, f"faults[{i}]") for i, f_raw in enumerate(raw))


def _fault(raw: Any, where: str) -> Fault:
    f = _section(raw, where, {"device", "kind", "start_task", "end_task", "factor"})
    missing = [key for key in FAULT_NEEDS if key not in f]
    if missing:   # each check below would read the absent key as None: "got None"
        raise ValueError(f"scenario field {where} is missing {', '.join(missing)} (a fault "
                         f"needs {', '.join(FAULT_NEEDS)})")
    if f.get("kind") not in ("offline", "throttle"):
        raise ValueError(f"scenario field {where}.kind must be offline or throttle, got {shown(f.get('kind'))}")
    if not isinstance(f.get("device"), str):
        raise ValueError(f"scenario field {where}.device must name a device, got {shown(f.get('device'))}")
    fault = Fault(
        device=f["device"], kind=f["kind"],
        start_task=_int(f.get("start_task"), f"{where}.start_task", strict=False),
        end_task=_int(f.get("end_task"), f"{where}.end_task"),
        factor=_number(f.get("factor", 1.0), f"{where}.factor"),
    )
    if fault.end_task <= fault.start_task:
        raise ValueError(f"scenario field {where}: need start_task < end_task (end_task is "
                         f"excluded), got {fault.start_task}..{fault.end_task}")
    if not MIN_THROTTLE <= fault.factor <= 1:
        raise ValueError(f"scenario field {where}.factor must be in {MIN_THROTTLE:g}..1 (the "
                         f"share of its speed a throttled device keeps), got {shown(f['factor'])}")
    if fault.kind == "offline" and "factor" in f:
        raise ValueError(f"scenario field {where}.factor is for kind: throttle; an offline "
                         f"device runs nothing")
    return fault


@contextmanager
def naming_field(scenario: Scenario, field: str, given: bool = False) -> Iterator[None]:
    """Name `scenario`'s source and `field` in a ValueError raised inside: for the names a
    scenario holds that only the env resolves (its hardware, model, variant, trace, a fault's
    device), whose errors named neither ("unknown device 'tpu' in hardware 'server'"). As
    raised when the value was `given` as an env argument instead of read from the scenario."""
    try:
        yield
    except ValueError as exc:
        if given:
            raise
        raise ValueError(f"{scenario.source or scenario.name}: scenario field {field}: "
                         f"{exc}") from None


#: The origin (and default name) of a scenario given as a mapping, as errors name it.
MAPPING_ORIGIN = "<scenario mapping>"


def _from_mapping(spec: Mapping[str, Any], origin: str) -> Scenario:
    """The scenario of a mapping as `Scenario.to_dict` writes it, its `source` key kept;
    errors name `origin`."""
    raw = dict(spec)
    source = raw.pop("source", MAPPING_ORIGIN)
    if not isinstance(source, str):
        raise ValueError(f"{origin}: scenario field source must be a string, got {source!r}")
    return replace(scenario_from_dict(raw, origin), source=source)


def _written_fields(part: Any) -> Iterable[str]:
    """The fields of a part of a Scenario that `Scenario.to_dict` writes (`check_as_loaded`)."""
    return part.to_dict() if isinstance(part, (Distribution, Fault)) else compared_fields(part)


def load_scenario(spec: str | Path | Scenario | Mapping[str, Any]) -> Scenario:
    """A scenario by preset name (``article``, ``bursty``, ...), by YAML path, as is, or from a
    mapping: the schema of this module's docstring, as `Scenario.to_dict` writes it (its
    `source` key, where the scenario was first read from, is kept; paths are not rewritten).
    A YAML file may hold that mapping as it is: its `source` key is read over, the file
    being the source.
    A mapping that is not a valid scenario is a ValueError naming the field, and so is a
    Scenario (`dataclasses.replace` checks nothing) whose mapping is not, or which holds
    another type than the mapping reads back as (`inference.checks.check_as_loaded`: a
    number where a Distribution belongs, 200.0 episode tasks); a valid one is returned as it
    is, itself."""
    if isinstance(spec, Scenario):
        origin = f"Scenario {shown(spec.name)} (an object)"
        if isinstance(spec.hardware, Hardware):
            # checked as the env's `hardware=` is, its errors naming the object's fields;
            # `to_dict` below could not write some of what it refuses
            try:
                check_hardware(spec.hardware)
            except ValueError as exc:
                raise ValueError(f"{origin}: scenario field hardware: {exc}") from None
        loaded = _from_mapping(spec.to_dict(), origin)
        try:
            check_as_loaded(spec, loaded, "scenario field ", _written_fields)
        except ValueError as exc:
            raise ValueError(f"{origin}: {exc}") from None
        return spec
    if isinstance(spec, Mapping):
        try:
            return _from_mapping(spec, MAPPING_ORIGIN)
        except ValueError as exc:   # yaml.safe_load's '1e3' says how to read it
            raise ValueError(with_text_number_hint(str(exc))) from None
    raw, origin, read = load_named_yaml(spec, SCENARIO_DIR, "scenario")
    if isinstance(raw, dict) and "source" in raw:
        # `to_dict`'s mapping dumped to a file as it is (it was refused as an unknown key): a
        # file's source is the file itself, so the key is read over
        raw = dict(raw)
        if not isinstance(raw.pop("source"), str):
            raise ValueError(f"{origin}: scenario field source (where Scenario.to_dict's "
                             f"scenario was read from) must be a string")
    # Relative paths in it resolve against the folder of the file read (a preset's: the
    # presets'); absolute, so that they stay right if the working directory changes before
    # the env reads them.
    return scenario_from_dict(raw, origin, read.absolute().parent)
