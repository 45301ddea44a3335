"""Device profiles, links and hardware presets.

Every device has *nominal* figures (what a spec sheet, and so a heuristic, sees)
and *true* figures (what the simulator charges). A YAML profile gives the
nominal figures and, under ``true_figures:``, only the fields that differ; the
difference is the article's "underestimated NPU utilization by 15%".

YAML schema, with the figures of ``inference/presets/server.yaml`` (its GPU and one link;
the file is the full example)::

    name: server
    disk_bandwidth: 6.9e9            # bytes/s, sequential read of the data disk
    devices:
      - name: gpu                    # unique, no comma, not all digits; placements name it
        kind: gpu                    # cpu | gpu | npu
        peak_flops: 3.12e14          # dense bf16 FLOP/s
        mem_bandwidth: 2.039e12      # bytes/s
        memory: 8.0e10               # bytes
        memory_domain: gpu-hbm       # devices sharing a domain contend for bandwidth
        launch_overhead: 5.0e-6      # seconds per kernel launch
        setup_s: 0.5                 # optional: set-up for a stage the device did not just run
        op_efficiency: {dense: 0.60, attention: 0.09, dynamic: 0.04, preprocess: 1.0e-6}
        pattern_efficiency: {sequential: 0.85, strided: 0.60, random: 0.44}
        cache_hit_rate: {sequential: 0.97, strided: 0.85, random: 0.62}
        true_figures: {peak_flops: ...}  # optional: true figures that differ
        source: "..."                # where the figures come from
    links:
      - {between: [cpu, gpu], bandwidth: 3.15e10, latency: 1.0e-5}   # bytes/s, seconds

A key the schema does not list, at any level, is an error (ValueError naming it).

Op classes: ``dense`` (static-shape matmuls), ``attention`` (fused,
static-shape attention), ``dynamic`` (data-dependent shapes: pairwise token
selection, gathers), ``preprocess`` (branchy byte-level text work).
Access patterns: ``sequential``, ``strided``, ``random``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from inference.checks import check_as_loaded, check_utf8, is_integer, is_number
from inference.messages import did_you_mean, shown
from inference.yamlio import load_yaml_file, not_a_file, unusable_path

DEVICE_KINDS = ("cpu", "gpu", "npu")
OP_CLASSES = ("dense", "attention", "dynamic", "preprocess")
PATTERNS = ("sequential", "strided", "random")
PRESET_DIR = Path(__file__).parent / "presets"
_TRUE_FIELDS = ("peak_flops", "mem_bandwidth", "launch_overhead")
# The keys each mapping of the YAML schema may hold. Anything else is refused: a misspelt
# optional key (`true_figure`, `setup_S`, `memory_domian`) would otherwise be dropped in silence
# and its default used instead.
_HARDWARE_KEYS = ("name", "disk_bandwidth", "devices", "links")
_DEVICE_KEYS = ("name", "kind", "peak_flops", "mem_bandwidth", "memory", "memory_domain",
                "launch_overhead", "setup_s", "op_efficiency", "pattern_efficiency",
                "cache_hit_rate", "true_figures", "source")
_LINK_KEYS = ("between", "bandwidth", "latency")


@dataclass(frozen=True)
class DeviceProfile:
    """One device: the figures the simulator uses to turn work into time.

    ``peak_flops``, ``mem_bandwidth`` and ``launch_overhead`` are the figures in
    force (nominal or true, see ``Hardware.nominal_view``); ``nominal`` keeps the
    spec-sheet triple so that ``speed_ratio`` can tell how far truth departs.
    """

    name: str
    kind: str
    peak_flops: float
    mem_bandwidth: float
    memory: float
    memory_domain: str
    launch_overhead: float
    op_efficiency: dict[str, float]
    pattern_efficiency: dict[str, float]
    cache_hit_rate: dict[str, float]
    nominal: tuple[float, float, float]
    source: str = ""
    setup_s: float = 0.0     # seconds to set the device up for a stage it did not just run


    @property
    def speed_ratio(self) -> float:
        """True compute speed over nominal (1.15 means 15% faster than the spec sheet)."""
        return self.peak_flops / self.nominal[0]

    def as_nominal(self) -> DeviceProfile:
        flops, bandwidth, launch = self.nominal
        return replace(self, peak_flops=flops, mem_bandwidth=bandwidth, launch_overhead=launch)


@dataclass(frozen=True)
class Link:
    """A link between two devices: ``bandwidth`` in bytes/s, ``latency`` in seconds."""

    bandwidth: float
    latency: float

    def time(self, nbytes: float) -> float:
        return self.latency + nbytes / self.bandwidth


@dataclass(frozen=True)
class Hardware:
    """A set of devices, the links between them and the disk the data comes from."""

    name: str
    devices: tuple[DeviceProfile, ...]
    links: dict[tuple[int, int], Link]
    disk_bandwidth: float
    index: dict[str, int] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        # of the devices there are: what is no device is `check_hardware`'s to name
        devices = self.devices if isinstance(self.devices, (tuple, list)) else ()
        object.__setattr__(self, "index", {d.name: i for i, d in enumerate(devices)
                                           if isinstance(d, DeviceProfile)})

    @property
    def device_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices)

    @property
    def most_memory(self) -> DeviceProfile:
        """The device with the most memory (the first of a tie): where the envs run a stage
        that fits nowhere, and the bound on the weights a model may have."""
        return max(self.devices, key=lambda device: device.memory)

    def device_id(self, name: str) -> int:
        try:
            return self.index[name]
        except KeyError:
            raise ValueError(
                f"unknown device {shown(name)}{did_you_mean([name], self.index, ignore_case=True)} "
                f"in hardware {shown(self.name)}; devices: {', '.join(self.index)}"
            ) from None

    def link(self, a: int, b: int) -> Link:
        return self.links[(a, b)]

    def nominal_view(self) -> Hardware:
        """The same hardware as a spec sheet describes it (what heuristics believe)."""
        return Hardware(
            self.name, tuple(d.as_nominal() for d in self.devices), self.links, self.disk_bandwidth
        )

    def with_device(self, name: str, **changes: Any) -> Hardware:
        """A copy with one device's figures changed (used by tests and fault injection)."""
        i = self.device_id(name)
        devices = list(self.devices)
        devices[i] = replace(devices[i], **changes)
        return Hardware(self.name, tuple(devices), self.links, self.disk_bandwidth)


# Plausible ranges, wide enough for any real device and narrow enough that no latency the
# simulator sums can overflow to inf: a rate (FLOP/s, B/s, bytes) of at least 1, a time
# (launch overhead, link latency) of at most an hour.
RATE_RANGE = (1.0, 1e30)
SECONDS_MAX = 3600.0
FRACTION_MIN = 1e-12       # efficiencies and hit rates (server.yaml's preprocess: 1e-6)


def _positive(value: Any, where: str, low: float = 0.0, high: float = math.inf) -> float:
    if value is None:
        raise ValueError(f"{where} is missing (a number > 0 is required)")
    if not is_number(value):
        raise ValueError(f"{where} must be a number, got {shown(value)}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where} must be a finite number > 0, got {shown(value)}")
    if value < low or value > high:
        bounds = f"[{low:g}, {high:g}]" if low > 0 else f"(0, {high:g}]"   # 0 itself is refused
        raise ValueError(f"{where} must lie in {bounds}, got {shown(value)}")
    return float(value)


def _figure(value: Any, where: str, key: str) -> float:
    """A device or link figure, in its plausible range (a time when it is an overhead)."""
    if key in ("launch_overhead", "latency"):
        return _positive(value, where, high=SECONDS_MAX)
    return _positive(value, where, *RATE_RANGE)


def _non_negative(value: Any, where: str, high: float = math.inf) -> float:
    if not is_number(value):
        raise ValueError(f"{where} must be a number, got {shown(value)}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{where} must be a finite number >= 0, got {shown(value)}")
    if value > high:
        raise ValueError(f"{where} must be at most {high:g}, got {shown(value)}")
    return float(value)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {shown(value)}")
    return value


def _known_keys(raw: dict, keys: tuple[str, ...], where: str) -> None:
    """Refuse keys of `raw` outside `keys`, naming them, where they are and the valid ones."""
    unknown = set(raw) - set(keys)
    if unknown:
        names = ", ".join(repr(k) for k in sorted(unknown, key=str))   # keys may be non-strings
        raise ValueError(f"{where} has unknown key(s) {names}"
                         f"{did_you_mean(sorted(unknown, key=str), keys)}; valid keys: "
                         f"{', '.join(keys)}")


def _fractions(raw: Any, keys: tuple[str, ...], where: str) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a mapping with keys {', '.join(keys)}")
    _known_keys(raw, keys, where)
    out = {}
    for key in keys:
        if key not in raw:
            raise ValueError(f"{where}.{key} is missing")
        value = _positive(raw[key], f"{where}.{key}")
        if value > 1 or value < FRACTION_MIN:   # a near-zero efficiency makes a rate ~0, times inf
            raise ValueError(f"{where}.{key} must be a fraction in [{FRACTION_MIN:g}, 1], got {value}")
        out[key] = value
    return out


def _device(raw: Any, i: int) -> DeviceProfile:
    where = f"devices[{i}]"
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a mapping")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        _known_keys(raw, _DEVICE_KEYS, where)   # first, so that a misspelt `name` is named
        raise ValueError(f"{where}.name must be a non-empty string")
    check_utf8(name, f"{where}.name")
    if "," in name or name != name.strip():
        # placements list devices by name, comma-separated (static:cpu,gpu,gpu, --placement),
        # and their parsers strip each entry: such a device could not be named in one
        raise ValueError(f"{where}.name must hold no comma and no surrounding spaces (placements "
                         f"list devices by name, comma-separated), got {shown(name)}")
    if name.isdecimal():
        # `python -m inference --placement 2,gpu,gpu` reads a number as a device id (another
        # device than one named '2'), evaluate.py's static:2,gpu,gpu as a name
        raise ValueError(f"{where}.name must not be all digits: a placement takes a device's id "
                         f"(its index) as well as its name, got {shown(name)}")
    where = f"devices[{name}]"
    _known_keys(raw, _DEVICE_KEYS, where)
    kind = raw.get("kind")
    if kind not in DEVICE_KINDS:
        raise ValueError(f"{where}.kind must be one of {', '.join(DEVICE_KINDS)}, got {shown(kind)}")
    nominal = {k: _figure(raw.get(k), f"{where}.{k}", k) for k in _TRUE_FIELDS}
    true_raw = raw.get("true_figures")
    if true_raw is None:        # absent or null: the nominal figures (`or {}` took 0 so too)
        true_raw = {}
    if not isinstance(true_raw, dict):
        raise ValueError(f"{where}.true_figures must be a mapping that may set "
                         f"{', '.join(_TRUE_FIELDS)}, got {shown(true_raw)}")
    _known_keys(true_raw, _TRUE_FIELDS, f"{where}.true_figures")
    true = {k: _figure(true_raw.get(k, nominal[k]), f"{where}.true_figures.{k}", k)
            for k in _TRUE_FIELDS}
    domain = raw.get("memory_domain", name)
    if not isinstance(domain, str) or not domain:
        raise ValueError(f"{where}.memory_domain must be a non-empty string")
    return DeviceProfile(
        name=name,
        kind=kind,
        peak_flops=true["peak_flops"],
        mem_bandwidth=true["mem_bandwidth"],
        memory=_figure(raw.get("memory"), f"{where}.memory", "memory"),
        memory_domain=domain,
        launch_overhead=true["launch_overhead"],
        op_efficiency=_fractions(raw.get("op_efficiency"), OP_CLASSES, f"{where}.op_efficiency"),
        pattern_efficiency=_fractions(
            raw.get("pattern_efficiency"), PATTERNS, f"{where}.pattern_efficiency"
        ),
        cache_hit_rate=_fractions(raw.get("cache_hit_rate"), PATTERNS, f"{where}.cache_hit_rate"),
        nominal=(nominal["peak_flops"], nominal["mem_bandwidth"], nominal["launch_overhead"]),
        source=_text(raw.get("source", ""), f"{where}.source"),
        setup_s=_non_negative(raw.get("setup_s", 0.0), f"{where}.setup_s", high=SECONDS_MAX),
    )


def hardware_from_dict(raw: Any, origin: str = "<dict>") -> Hardware:
    """Build and validate a Hardware from the YAML schema in this module's docstring; errors
    name `origin` (the file it came from) and the offending field."""
    try:
        return _hardware(raw, origin)
    except ValueError as exc:
        raise ValueError(f"hardware {origin}: {exc}") from None


def _hardware(raw: Any, origin: str) -> Hardware:
    if not isinstance(raw, dict):
        raise ValueError("top level must be a mapping")
    _known_keys(raw, _HARDWARE_KEYS, "top level")
    name = _text(raw.get("name", origin), "name")
    devices_raw = raw.get("devices")
    if not isinstance(devices_raw, list) or not devices_raw:
        raise ValueError("devices must be a non-empty list")
    devices = tuple(_device(d, i) for i, d in enumerate(devices_raw))
    names = [d.name for d in devices]
    for i, device_name in enumerate(names):
        if device_name in names[:i]:
            raise ValueError(f"devices[{i}].name {shown(device_name)} is "
                             f"devices[{names.index(device_name)}]'s already; device names must "
                             f"be unique")
    index = {n: i for i, n in enumerate(names)}
    links: dict[tuple[int, int], Link] = {}
    links_raw = raw.get("links")
    if links_raw is None:       # `or []` took links: 0 for none, named as a missing link
        links_raw = []
    if not isinstance(links_raw, list):
        # A mapping here would be iterated by its keys and reported as a bad `links[0].between`.
        raise ValueError(f"links must be a list of mappings "
                         f"({{between: [a, b], bandwidth: ..., latency: ...}}), "
                         f"got a {type(links_raw).__name__}")
    for j, link_raw in enumerate(links_raw):
        where = f"links[{j}]"
        if not isinstance(link_raw, dict):
            raise ValueError(f"{where} must be a mapping with keys "
                             f"{', '.join(_LINK_KEYS)}, got {shown(link_raw)}")
        _known_keys(link_raw, _LINK_KEYS, where)
        pair = link_raw.get("between")
        if not isinstance(pair, list) or len(pair) != 2 or pair[0] == pair[1]:
            raise ValueError(f"{where}.between must name two different devices")
        for end in pair:
            if not isinstance(end, str) or end not in index:   # a list is unhashable
                # the devices, and the one meant: 'CPU' for cpu named neither
                raise ValueError(f"{where}.between names unknown device {shown(end)}"
                                 f"{did_you_mean([end], index, ignore_case=True)}; devices: "
                                 f"{', '.join(index)}")
        link = Link(
            _figure(link_raw.get("bandwidth"), f"{where}.bandwidth", "bandwidth"),
            _figure(link_raw.get("latency"), f"{where}.latency", "latency"),
        )
        a, b = index[pair[0]], index[pair[1]]
        if (a, b) in links:   # the second used to replace the first, unnoticed
            raise ValueError(f"{where} links {pair[0]} and {pair[1]} again; "
                             f"give each pair of devices one link")
        links[(a, b)] = links[(b, a)] = link
    for a in range(len(devices)):
        for b in range(len(devices)):
            if a != b and (a, b) not in links:
                raise ValueError(
                    f"no link between {names[a]} and {names[b]}; "
                    "every pair of devices needs one"
                )
    disk = _figure(raw.get("disk_bandwidth"), "disk_bandwidth", "disk_bandwidth")
    return Hardware(name, devices, links, disk)


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))




def unusable_spec(spec: str | Path, preset_dir: Path) -> str | None:
    """Why `spec` can name neither a YAML file nor a preset in `preset_dir` (see
    `inference.yamlio.unusable_path`), or None."""
    return unusable_path(spec) or unusable_path(preset_dir / f"{spec}.yaml")


def require_usable_spec(spec: str | Path, preset_dir: Path, what: str) -> None:
    """A ValueError, naming `what` (``scenario``, ``scenario field hardware``), where `spec`
    can name neither a YAML file nor a preset in `preset_dir` (`unusable_spec`)."""
    problem = unusable_spec(spec, preset_dir)
    if problem is not None:
        raise ValueError(f"{what} {shown(spec)} is neither a preset nor a usable path: "
                         f"{problem}")


def preset_file(spec: str | Path, preset_dir: Path) -> Path | None:
    """The preset file in `preset_dir` that `spec` names, or None: read `spec` as a path.

    The one rule every reader follows (``--hardware``/``--scenario``, ``hardware=`` and
    ``scenario=``, a scenario's ``hardware:`` field, a run's saved config): a bare preset name
    -- a string with no folder part and no YAML suffix, such as ``server`` -- is the preset,
    even where the working directory (or a scenario's folder) holds a file or folder of that
    name. So a preset name means the same thing from every directory, as a packaged trace
    name does (``envs.traces``), and a scenario or a run's config.yaml reads the same wherever
    it is run; a file of that name is still read when written as a path (``./server``) or
    with its suffix. A Path is always a path. The name is spelt as the folder lists its file:
    on Windows and macOS, whose file systems find server.yaml for SERVER.yaml, "SERVER" was
    the preset (and so named in a run's config.yaml) where Linux refused it.
    """
    if not isinstance(spec, str) or not _bare_name(spec):
        return None
    preset = preset_dir / f"{spec}.yaml"
    return preset if (unusable_path(preset) is None and preset.is_file()
                      and preset.name in os.listdir(preset_dir)) else None


def path_text(path: str | os.PathLike[str]) -> str:
    """`path` as a string that `preset_file` still reads as a path: a bare name such as
    Path("server") becomes "./server". (str(Path("server")) is "server", the preset: a Path
    given to the env or kept in its JSON spec turned into the preset of that name.)"""
    text = os.fspath(path)
    return os.path.join(os.curdir, text) if not isinstance(path, str) and _bare_name(text) \
        else text


def _bare_name(text: str) -> bool:
    """Could `text` be a preset's name: no folder part and no YAML suffix (`preset_file`)?"""
    return text == Path(text).name and Path(text).suffix not in (".yaml", ".yml")


def load_named_yaml(spec: str | Path, preset_dir: Path, what: str) -> tuple[Any, str, Path]:
    """(parsed YAML, origin, the file read) for a preset name in `preset_dir` or a path to a
    YAML file; a name that is both is the preset (see `preset_file`). The origin is the name
    as given for a preset, the path for a file."""
    if not isinstance(spec, (str, Path)) or not str(spec).strip():
        names = ", ".join(sorted(p.stem for p in preset_dir.glob("*.yaml")))
        raise ValueError(f"{what} must be a preset name ({names}) or a path to a YAML file, "
                         f"got {shown(spec)}")
    require_usable_spec(spec, preset_dir, what)
    preset = preset_file(spec, preset_dir)
    if preset is not None:
        return load_yaml_file(preset, f"{what} preset"), str(spec), preset
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ValueError(f"{what} file {shown(path, quote=False)} {not_a_file(path, 'a YAML file')}")
        return load_yaml_file(path, f"{what} file"), str(path), path
    presets = sorted(p.stem for p in preset_dir.glob("*.yaml"))
    if isinstance(spec, Path) and preset_file(str(spec), preset_dir) is not None:
        # "not a preset (article, ...)" of Path("article") contradicted itself
        raise ValueError(f"{what} {shown(str(spec))} was given as a Path, which is always read "
                         f"as a file, and there is no such file; for the preset, give its name "
                         f"as a string: {shown(str(spec))}")
    raise ValueError(f"unknown {what} {shown(spec)}{did_you_mean([spec], presets)}: not a preset "
                     f"({', '.join(presets)}) and not a path to a YAML file")


def hardware_to_dict(hardware: Hardware) -> dict[str, Any]:
    """`hardware` as the mapping of this module's schema, which `hardware_from_dict` reads
    back to an equal Hardware: each device's spec-sheet figures (``nominal``) at its top level
    and the figures in force under ``true_figures``, each link once, between its devices'
    names. A part the schema has no place for (a device that is no DeviceProfile, a
    ``nominal`` that is no triple, a link keyed by no pair of device ids, or other than its
    reverse) is a ValueError naming it; any other part is written as it is, for
    `hardware_from_dict` to refuse by name."""
    devices = hardware.devices
    if not isinstance(devices, (tuple, list)):   # "devices must be a non-empty list"
        return {"name": hardware.name, "disk_bandwidth": hardware.disk_bandwidth,
                "devices": devices}
    return {"name": hardware.name, "disk_bandwidth": hardware.disk_bandwidth,
            "devices": [_device_to_dict(device, i) for i, device in enumerate(devices)],
            "links": _links_to_list(hardware.links, [device.name for device in devices])}


def _device_to_dict(device: DeviceProfile, i: int) -> dict[str, Any]:
    if not isinstance(device, DeviceProfile):
        raise ValueError(f"devices[{i}] must be a DeviceProfile, got {shown(device)}")
    nominal = device.nominal
    if not isinstance(nominal, tuple) or len(nominal) != len(_TRUE_FIELDS):
        name = device.name if isinstance(device.name, str) else i
        raise ValueError(f"devices[{name}].nominal must be a tuple of the spec sheet's "
                         f"{', '.join(_TRUE_FIELDS)}, got {shown(nominal)}")

    def plain(fractions: Any) -> Any:
        return dict(fractions) if isinstance(fractions, Mapping) else fractions

    return {"name": device.name, "kind": device.kind, **dict(zip(_TRUE_FIELDS, nominal, strict=True)),
            "memory": device.memory, "memory_domain": device.memory_domain,
            "setup_s": device.setup_s, "op_efficiency": plain(device.op_efficiency),
            "pattern_efficiency": plain(device.pattern_efficiency),
            "cache_hit_rate": plain(device.cache_hit_rate),
            "true_figures": {key: getattr(device, key) for key in _TRUE_FIELDS},
            "source": device.source}


def _links_to_list(links: Any, names: list[str]) -> list[dict[str, Any]]:
    """A Hardware's links, {(a, b): Link} both ways, as the schema's list: each pair once."""
    if not isinstance(links, Mapping):
        raise ValueError(f"links must be a dict of Links keyed by (a, b) pairs of device ids, "
                         f"got {shown(links)}")
    out = []
    for pair, link in links.items():
        if not (isinstance(pair, tuple) and len(pair) == 2 and pair[0] != pair[1]
                and all(is_integer(end) and 0 <= end < len(names) for end in pair)):
            raise ValueError(f"links key {shown(pair)} must be a pair (a, b) of two different "
                             f"device ids in 0..{len(names) - 1}")
        if not isinstance(link, Link):
            raise ValueError(f"links[{pair}] must be a Link, got {shown(link)}")
        a, b = pair
        back = links.get((b, a))
        if back is not link and back != link:   # the schema's one link serves both ways
            raise ValueError(f"links[{(b, a)}] must be links[{pair}], {shown(link)}, as one "
                             f"link joins two devices both ways; got {shown(back)}")
        if a < b:
            out.append({"between": [names[a], names[b]], "bandwidth": link.bandwidth,
                        "latency": link.latency})
    return out


def check_hardware(hardware: Any) -> Hardware:
    """`hardware`, a Hardware built or edited in Python (``dataclasses.replace``,
    ``with_device``), as is, if it is one its YAML could give: a figure out of its range, NaN,
    an unknown kind, a missing link are each the ValueError the YAML gets (its mapping,
    `hardware_to_dict`, is read by `hardware_from_dict`), and a part of another type than that
    reads back as (an int memory is fine, a list nominal is not) one naming the field
    (`inference.checks.check_as_loaded`)."""
    if not isinstance(hardware, Hardware):
        raise ValueError(f"hardware must be a Hardware (inference.load_hardware gives one), "
                         f"got {shown(hardware)}")
    origin = f"{shown(hardware.name)} (an object)"
    try:
        check_as_loaded(hardware, _hardware(hardware_to_dict(hardware), origin))
    except ValueError as exc:
        raise ValueError(f"hardware {origin}: {_object_path(str(exc), hardware)}") from None
    return hardware


def _object_path(message: str, hardware: Hardware) -> str:
    """The loader's refusal of `hardware`'s mapping, its field named as the object names it.
    The loader names a link by its place in the mapping's list, where the object keys it by
    its devices' ids (as `hardware_to_dict` wrote them, in order); and a device's figures in
    force by ``true_figures.peak_flops``, its spec sheet's by ``peak_flops``, where the object
    holds them in ``peak_flops`` and ``nominal``. An edited ``peak_flops=-1`` was refused as
    ``true_figures.peak_flops``, and a bad ``nominal`` as ``mem_bandwidth``."""
    message = re.sub(r"^links\[(\d+)\]", lambda m: f"links[{_written_pairs(hardware)[int(m[1])]}]",
                     message)
    found = re.match(rf"^(devices\[[^\]]+\])\.(true_figures\.)?({'|'.join(_TRUE_FIELDS)})\b", message)
    if found is None:
        return message
    device, in_force, field = found.groups()
    named = (f"{device}.{field}" if in_force
             else f"{device}.nominal[{_TRUE_FIELDS.index(field)}] (the spec sheet's {field})")
    return named + message[found.end():]


def _written_pairs(hardware: Hardware) -> list[tuple[int, int]]:
    """The keys of `hardware`'s links in the order `hardware_to_dict` lists them."""
    return [pair for pair in hardware.links if pair[0] < pair[1]]


def load_hardware(spec: str | Path | Hardware) -> Hardware:
    """A Hardware from a preset name (``server``, ``edge``), a YAML path, or as is (checked:
    `check_hardware`)."""
    if isinstance(spec, Hardware):
        return check_hardware(spec)
    raw, origin, _ = load_named_yaml(spec, PRESET_DIR, "hardware")
    return hardware_from_dict(raw, origin)
