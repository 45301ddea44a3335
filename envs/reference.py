"""Reference latencies for a step: the best static placement and the per-step oracle.

* best static: the single-device-per-stage placement with the lowest mean
  latency on a calibration workload of the scenario, simulated with the
  *nominal* figures (what a planner can know before deployment), among the placements
  whose devices hold each stage on most of its tasks (`static_candidates`). Searched once
  per (scenario, hardware, variant) and kept for the process (the
  `BEST_STATIC_MEMO` most recently used).
* oracle: every placement tried for this task on a copy of the current state
  with the *true* figures and the task's own noise; the lowest latency wins.
  It is myopic -- best for this task now, not for the stream.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from envs.workload import file_digest, file_version, generate_episode
from inference.checks import equal
from inference.simulator import Shares, Simulator
from inference.task import STAGES
from inference.variants import cost_params, resolve_variant

if TYPE_CHECKING:
    from envs.inference_alloc import InferenceAllocEnv
    from envs.scenario import Scenario

CALIBRATION_TASKS = 300
CALIBRATION_SEED = 20231116
#: Most configurations whose best static placement the process keeps, least recently used
#: forgotten first: each key is the whole scenario, hardware and model as text (~3.4 kB), and a
#: sweep over many configurations grew the memo for the whole process. A run uses a handful; a
#: forgotten one is searched again, with the same result (the search is deterministic).
BEST_STATIC_MEMO = 256
#: The share of the calibration tasks on which a placement's device must hold each stage for
#: the placement to count as static (`static_candidates`).
MIN_HELD_SHARE = 0.5
#: The search's rules, in `best_static_key`: a result saved to a file before they changed is
#: searched again. 2: only placements whose devices hold each stage on most tasks
#: (`static_candidates`; an 8 GB NPU's saved [npu, npu, npu], a failover, was read back).
#: Raise it with any change to what the search may return.
SEARCH_RULES = 2
# in order of use, the most recent last; keyed by `best_static_key` and the stages' classes
_BEST_STATIC: dict[tuple[str, tuple[type, ...]], tuple[int, ...]] = {}


def all_placements(n_devices: int) -> list[tuple[int, int, int]]:
    return list(itertools.product(range(n_devices), repeat=3))  # type: ignore[arg-type]


def as_shares(placement: tuple[int, ...]) -> Shares:
    return tuple(((int(dev), 1.0),) for dev in placement)


def dispatch(shares: Shares, masks: Any, busy: Any, targets: Any = None) -> tuple[Shares, int]:
    """The env's failed-dispatch rule: a share on a masked device moves to the allowed device
    with the smallest backlog (`busy`: each device's busy-until time; a tie goes to the lowest
    device id, i.e. the device listed first in the hardware). Returns the shares run and how
    many failed. `targets` (default `masks`): per stage, the devices a failed share may move
    to, where they differ from the devices a share may run on (the Split env's per-share
    check allows a device a share that fits it, but moves failed shares only to a device
    that holds the whole stage)."""
    failed = 0
    out: list[tuple[tuple[int, float], ...]] = []
    for s, stage_shares in enumerate(shares):
        row = masks[s]
        if len(stage_shares) == 1 and row[stage_shares[0][0]]:
            out.append(stage_shares)   # the common case: a whole stage on an allowed device
            continue
        to = row if targets is None else targets[s]
        fixed: dict[int, float] = {}
        for dev, frac in stage_shares:
            if not row[dev]:
                failed += 1
                dev = min((i for i in range(len(to)) if to[i]), key=lambda i: (busy[i], i))
            fixed[dev] = fixed.get(dev, 0.0) + frac
        out.append(tuple(sorted(fixed.items())))
    return tuple(out), failed


def static_candidates(n_devices: int, masks: list[Any]) -> list[tuple[int, int, int]]:
    """The placements a static allocator may hold, of `all_placements`: those whose devices
    hold each stage on at least `MIN_HELD_SHARE` of the tasks `masks` (``memory_masks``)
    are of, or every one if none does. A stage refused where the placement puts it runs
    where the env's failover sends it, the device with the least backlog, which is a dynamic
    placement: on hardware whose NPU never holds the weights (8 GB), [npu, npu, npu] failed
    over on every task, was searched as the best static placement, and every "over
    best-static" figure was one over that failover (heft-calibrated 0.84 where a fixed
    placement gives 0.73)."""
    placements = all_placements(n_devices)
    if not masks:
        return placements
    held = np.asarray(masks, dtype=bool).mean(axis=0)       # (stage, device): share of tasks
    kept = [p for p in placements
            if all(held[stage, device] >= MIN_HELD_SHARE for stage, device in enumerate(p))]
    return kept or placements


def memory_masks(env: InferenceAllocEnv, tasks: Any) -> list[Any]:
    """Per task, which device may hold each stage, every device online: the env's own masks
    (``_fitting_masks``) of the task's work records."""
    online = [True] * env.n_devices
    return [env._fitting_masks(env._task_works(task), online) for task in tasks]


def mean_latency(sim: Simulator, tasks: Any, placement: tuple[int, ...],
                 masks: Any = None, failed_dispatch_s: float = 0.0) -> float:
    """Mean latency of a fixed placement over a task stream, from a fresh cluster. With
    `masks` (``memory_masks``), a stage a task does not fit where the placement puts it
    fails over and pays `failed_dispatch_s`, as in the env."""
    sim.reset()
    shares = as_shares(placement)
    total = 0.0
    for i, task in enumerate(tasks):
        if masks is None:
            total += sim.run(task, shares).latency
            continue
        run, failed = dispatch(shares, masks[i], sim.state.busy_until)
        total += sim.run(task, run, extra_overhead=failed * failed_dispatch_s).latency
    sim.reset()
    return total / max(len(tasks), 1)


def _searched_scenario(env: InferenceAllocEnv) -> Scenario:
    # The search reads the scenario with no noise and its own number of tasks: envs that
    # differ only in noise or episode length share it (the key held both, and searched again).
    return dataclasses.replace(env.scenario, noise=0.0, episode_tasks=CALIBRATION_TASKS)


def best_static_key(env: InferenceAllocEnv) -> str:
    """Everything the best-static search depends on, as text: the scenario as searched, and
    what its names point to now: the hardware's figures (a name or path gives other figures
    once its file is edited), the model, the variant, the replayed trace's version (a CSV
    rewritten at the same path; see `generate_episode`'s own trace cache), the variant's
    implementations' constructor arguments (COST_PARAMS), the calibration workload and the
    search's own rules (`SEARCH_RULES`). A result saved to a file keys on it
    (`agents.static.search_best_static`)."""
    return f"rules {SEARCH_RULES}\n{_key_of(env, _searched_scenario(env))}"


def setting_key(env: InferenceAllocEnv) -> tuple[str, tuple[type, ...]]:
    """Everything an episode of `env` depends on besides its seed and policy: as the
    best-static memo's key, with the env's own scenario (its noise and length too). A cache of
    episodes keyed on the names instead answered from a file's first version after it was
    rewritten at the same path (a sweep's trial.yaml)."""
    return _memo_key(env, env.scenario)


def _memo_key(env: InferenceAllocEnv, scenario: Scenario) -> tuple[str, tuple[type, ...]]:
    # The classes too, not only their names: a class registered anew under a name
    # (IMPLEMENTATIONS, a notebook cell run again) was answered with the first class's placement.
    return _key_of(env, scenario), tuple(type(stage) for stage in env.sim.stages)


def _key_of(env: InferenceAllocEnv, scenario: Scenario) -> str:
    """`best_static_key` of `env` with its scenario as searched, `scenario`."""
    return repr(tuple(_setting(env, scenario, file_version).values()))


def _setting(env: InferenceAllocEnv, scenario: Scenario,
             trace_version: Callable[[str], object]) -> dict[str, object]:
    """What `env` with `scenario` depends on, part by part: the keys' text (`_key_of`, in this
    order) and a run's record of its setting (`setting_digests`). `trace_version`: what
    stands for the replayed trace (a stat within a process, its contents across them)."""
    trace = scenario.workload.trace
    recipe = resolve_variant(scenario.variant)
    # an implementation's constructor arguments as registered now (COST_PARAMS, or the entry
    # it takes from a class it derives from): a name's arguments changed in one process were
    # answered with the first arguments' placement
    params = tuple(cost_params(stage, recipe[stage]) for stage in STAGES)
    # which implementation each stage runs, by name and by class: a recipe remapped to another
    # implementation with the same arguments (hierarchical -> prefetched decode) kept the key
    implementations = tuple((recipe[stage], f"{type(impl).__module__}.{type(impl).__qualname__}")
                            for stage, impl in zip(STAGES, env.sim.stages, strict=True))
    return {"scenario": scenario, "trace": trace and trace_version(trace),
            "hardware": env.hardware, "model": env.model, "variant": env.variant,
            "stage_arguments": params, "implementations": implementations,
            "calibration_tasks": CALIBRATION_TASKS, "calibration_seed": CALIBRATION_SEED}


#: Fields that the record of a setting leaves out, at any depth: text about the thing itself
#: (a scenario's description, a device's citation), which no step reads.
_NOT_RECORDED = ("description", "source")
#: The record's name of each part of `_setting` but the scenario, whose fields it records one
#: by one (its hardware, model and variant as it names them; these, what they name now).
_PARTS = {"trace": "trace", "hardware": "hardware_figures", "model": "model_figures",
          "variant": "stages", "stage_arguments": "stages", "implementations": "stages",
          "calibration_tasks": "calibration", "calibration_seed": "calibration"}


def _plain(value: object) -> object:
    """`value` as plain data for a digest: of a dataclass, the fields whose value is not their
    default (a field that a later version adds with a default that changes nothing keeps every
    run's digests), text about itself left out (`_NOT_RECORDED`); containers item by item;
    any other value its repr (a number's repr is exact; numpy's scalars as Python's)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            default = (f.default if f.default is not dataclasses.MISSING
                       else f.default_factory() if f.default_factory is not dataclasses.MISSING
                       else dataclasses.MISSING)
            if f.name in _NOT_RECORDED or (default is not dataclasses.MISSING
                                           and equal(item, default)):
                continue
            out[f.name] = _plain(item)
        return out
    if isinstance(value, dict):
        return {repr(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    return repr(value)


def setting_digests(env: InferenceAllocEnv) -> dict[str, str]:
    """A digest of each part of everything an episode of `env` depends on besides its seed and
    policy, as `setting_key` holds it, for a record kept across processes: each of the
    scenario's fields (workload, hardware and variant as named, noise, faults, ...), the
    hardware's figures and the model's as named now, the variant's stages (its implementations
    and their arguments), the best-static search's calibration, and the replayed trace's
    contents (not its file's stat, which a copy or a checkout of the same bytes changes); each
    of the values as plain data (`_plain`: fields at their defaults and text about a thing
    itself left out), not of the code that reads them. A
    run folder records them (``agents.run_setting``): its ``--resume`` compares them to the
    setting's now, so an edited scenario, hardware or trace file is named, not trained on."""
    setting = _setting(env, env.scenario, file_digest)
    scenario: Any = setting.pop("scenario")
    parts: dict[str, list[object]] = {
        f.name: [getattr(scenario, f.name)] for f in dataclasses.fields(scenario)
        if f.name not in _NOT_RECORDED}
    for name, value in setting.items():
        parts.setdefault(_PARTS[name], []).append(value)
    return {name: hashlib.sha256(json.dumps(_plain(values), sort_keys=True).encode()
                                 ).hexdigest()[:16]
            for name, values in parts.items()}


def search_best_static(env: InferenceAllocEnv) -> tuple[int, ...]:
    """The best static placement for the env's configuration, by nominal simulation."""
    scenario = _searched_scenario(env)      # once, for the key and, on a miss, the search
    key = _memo_key(env, scenario)
    best = _BEST_STATIC.pop(key, None)
    if best is None:
        tasks = generate_episode(scenario, np.random.default_rng(CALIBRATION_SEED), CALIBRATION_TASKS).tasks
        sim = Simulator(env.nominal_sim.hardware, env.model, env.sim.stages, env.sim.config)
        # Priced as the env runs it: a task a stage's device cannot hold fails over and pays
        # the dispatch penalty. (The first task alone used to decide which placements fit,
        # and the others ran wherever the placement put them, free: GLM-5.3's static put
        # prefill on the NPU, which 4% of the article's tasks do not fit.)
        masks = memory_masks(env, tasks)
        penalty = env.scenario.failed_dispatch_s
        best = min(static_candidates(env.n_devices, masks),
                   key=lambda p: mean_latency(sim, tasks, p, masks, penalty))
    _BEST_STATIC[key] = best     # (re)inserted: the most recently used
    while len(_BEST_STATIC) > BEST_STATIC_MEMO:
        del _BEST_STATIC[next(iter(_BEST_STATIC))]
    return best


class ReferencePlanner:
    """Computes the static and oracle references of the env's current step."""

    def __init__(self, env: InferenceAllocEnv) -> None:
        self.env = env
        self._static: tuple[int, ...] | None = None
        self._static_shares: Shares = ()          # ... its shares and device names, set with it
        self._static_names: tuple[str, ...] = ()
        # Every one-device-per-stage placement with its shares, in `all_placements` order, built
        # once: the oracle tries them all on every step.
        self._candidates = tuple((p, as_shares(p)) for p in all_placements(env.sim.n_devices))

    @property
    def best_static(self) -> tuple[int, ...]:
        if self._static is None:
            self._search()
        assert self._static is not None
        return self._static

    def _search(self) -> None:
        static = search_best_static(self.env)
        self._static_shares = as_shares(static)
        self._static_names = tuple(self.env.device_names[d] for d in static)
        self._static = static

    def references(self, task: Any, noise: Any, masks: Any, works: Any = None) -> dict[str, Any]:
        """`masks`: the env's stage masks (rows of per-device bools); `works`: the task's work
        records for this state (see `Simulator.run`), shared by all the runs priced here.
        The static placement is charged its own failed dispatches (none of the agent's)."""
        env = self.env
        if self._static is None:
            self._search()
        static_shares, failed = env._dispatch(self._static_shares, masks)
        overhead = failed * env.scenario.failed_dispatch_s
        static = env.sim.run(task, static_shares, noise, commit=False, extra_overhead=overhead,
                             works=works)
        out: dict[str, Any] = {"static_latency": static.latency,
                               "static_service": static.latency - static.queue,
                               "static_placement": self._static_names}
        if env.reference:
            best, best_placement = self.oracle(task, noise, masks, works)
            out["oracle_latency"] = best
            out["oracle_placement"] = tuple(env.device_names[d] for d in best_placement)
        return out

    def oracle(self, task: Any, noise: Any, masks: Any, works: Any = None
               ) -> tuple[float, tuple[int, int, int]]:
        """(latency, placement) of the per-step oracle: every allowed placement (`masks`: rows
        of per-stage device bools) run on a copy of the current state with the true figures
        and the task's `noise`; a tie goes to the first in `all_placements` order. `works`:
        the task's work records for this state, as in `references`."""
        run = self.env.sim.run
        best, best_placement = float("inf"), None
        for placement, shares in self._candidates:
            a, b, c = placement
            if not (masks[0][a] and masks[1][b] and masks[2][c]):
                continue
            latency = run(task, shares, noise, commit=False, works=works).latency
            if latency < best:
                best, best_placement = latency, placement
        assert best_placement is not None   # the masks allow >= 1 device per stage
        return best, best_placement
