"""InferenceAlloc-v0: place each stage of each LLM inference task on a CPU, GPU or NPU."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import types
import warnings
from bisect import bisect_left
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from envs.keywords import checked_keywords
from envs.observation import (
    BACKLOG_SCALE_S,
    BATCH_SCALE,
    OUTPUT_SCALE,
    PROMPT_SCALE,
    SPEED_SCALE,
)
from envs.reference import ReferencePlanner, dispatch
from envs.render import draw_frame
from envs.scenario import (
    MAX_EPISODE_TASKS,
    MAX_NOISE,
    MIN_RATE,
    Scenario,
    load_scenario,
    naming_field,
)
from envs.workload import Episode, check_span, generate_episode, precomputed_domains, trace_batches
from inference.checks import is_bool, is_integer, is_number
from inference.hardware import (
    Hardware,
    hardware_from_dict,
    hardware_to_dict,
    load_hardware,
    path_text,
)
from inference.messages import did_you_mean, shown
from inference.model_config import get_model
from inference.simulator import Shares, SimConfig, Simulator, TaskResult
from inference.task import STAGES, Task
from inference.variants import build_stages, resolve_variant, variant_label
from inference.work import StageWork
from inference.yamlio import with_text_number_hint

Masks = tuple[tuple[bool, ...], ...]      # per stage, per device: may it run there?
Works = tuple[StageWork, StageWork, StageWork]
# A placement's info labels, info shares by device name and observed previous placement.
PlacementFacts = tuple[tuple[str, ...], dict[str, float], tuple[float, ...]]

# Each reward, and the static reference in info it divides the latency by (None: none).
REWARD_SCALES = {"latency": None, "relative": "static_latency", "normalised": "static_service"}
REWARDS = tuple(REWARD_SCALES)
SPEED_EMA = 0.2             # weight of the newest observation in the speed-ratio average
HIT_EMA = 0.05              # weight of the newest lookup in the recent cache hit rate
# Entries each placement memo (facts, stage labels) holds before it starts afresh: split
# placements rarely repeat whole, so an unbounded memo would grow with every step.
MEMO_ENTRIES = 4096


class UnreachedFaultWarning(UserWarning):
    """A scenario's fault that episodes shortened by ``episode_tasks=`` end before."""


#: The origin a hardware mapping's errors name (`hardware=` given as `hardware_to_dict` writes it).
HARDWARE_MAPPING_ORIGIN = "<hardware mapping>"
_WARNED: set[str] = set()     # the UnreachedFaultWarning messages given in this process
# Packages whose frames a warning of the env is not reported at: this project's, gymnasium's
# (gym.make's wrappers and checkers call reset for the user) and SB3's (its VecEnvs and
# learners do). By module name, which holds however the files were installed or imported.
_INNER_PACKAGES = ("envs", "agents", "inference", "gymnasium", "stable_baselines3", "sb3_contrib")


def _callers_stacklevel() -> int:
    """The `stacklevel` that reports a warning, given by the function that calls this one, at
    the first frame outside `_INNER_PACKAGES`: the user's line that reset the env, directly,
    through gym.make's wrappers, a VecEnv or our harness (stacklevel=1 reported it at this
    module, so a filter on the user's module missed it). 1 where every frame is inside them."""
    frame: types.FrameType | None = sys._getframe(2)
    level = 2
    while frame is not None and str(frame.f_globals.get("__name__", "")).partition(".")[0] \
            in _INNER_PACKAGES:
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 1


def _json_able(value: Any) -> Any:
    """An env argument as plain data that makes the same env: a Scenario as its `to_dict`,
    a Hardware as the mapping of its YAML schema (`hardware_to_dict`, which `hardware=` reads
    back), a path as a string that stays a path (`path_text`), a numpy scalar or array as
    Python ones, and each item of a list or tuple so (InferenceAllocMix-v0's `scenarios`). Any
    other value is returned as it is, itself."""
    if isinstance(value, Scenario):
        return value.to_dict()
    if isinstance(value, Hardware):
        return hardware_to_dict(value)
    if isinstance(value, os.PathLike):
        return path_text(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        items = [_json_able(item) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value.item() if isinstance(value, np.generic) else value


def _relative_reward(latency: float, reference: float, finish: float) -> float:
    """``1 - latency / reference``, each duration at least one tick of the clock at `finish`
    (the later of the two runs' finishes, whose float spacing that tick is). The durations
    are differences of absolute times: where those are huge next to a task (a one-token task
    behind a queue of 1e9-sequence ones finishes near 1e19 s, 4096 s between floats) a
    shorter duration rounds to 0, and the reward divided by it. In any plausible run every
    duration is far above the tick (seconds against 1e-10 s), so the reward is unchanged;
    a 0 counts as one tick, and two of them give 0, as good as static."""
    tick = math.ulp(finish)
    return 1.0 - (latency if latency > tick else tick) / (reference if reference > tick else tick)


def holds_bool(action: Any) -> bool:
    """Does a (nested) list or tuple action hold a bool? numpy reads [True, 0, 1] as the
    numbers [1, 0, 1], so an action's dtype alone does not show a bool mixed in."""
    if isinstance(action, (list, tuple)):
        return any(isinstance(a, (bool, np.bool_)) or holds_bool(a) for a in action)
    return False


def check_no_options(options: Any) -> None:
    """Refuse `reset()` options (None or {}, what vector envs pass, are fine): the episode is
    set by the env's arguments, and an ignored `{"episode_tasks": 10}` would run the old
    episode unnoticed. Checked before a reset changes anything (InferenceAllocMix-v0's too)."""
    if options is not None and not (isinstance(options, Mapping) and not options):
        raise ValueError(f"reset() takes no options (the episode follows the env's arguments, "
                         f"e.g. gym.make(..., episode_tasks=10)); got options={options!r}")


def python_seed(seed: Any) -> Any:
    """A numpy integer seed as the Python int Gymnasium takes (it refused `np.int64(5)`, what
    `rng.integers` hands out, with "Seed must be a python integer"); anything else as given,
    for Gymnasium to check."""
    return int(seed) if isinstance(seed, np.integer) else seed


def with_episode_tasks(sc: Scenario, episode_tasks: int | None) -> Scenario:
    """`sc` with the env's `episode_tasks` argument, where given, as its episode length."""
    if episode_tasks is None:
        return sc
    if not is_integer(episode_tasks) or not 1 <= episode_tasks <= MAX_EPISODE_TASKS:
        raise ValueError(f"episode_tasks must be an integer in 1..{MAX_EPISODE_TASKS}, "
                         f"got {episode_tasks!r}")
    return dataclasses.replace(sc, episode_tasks=int(episode_tasks))


def scenario_with_arguments(scenario: str | Scenario | Mapping[str, Any], *,
                            noise: float | None = None,
                            trace: str | os.PathLike[str] | None = None,
                            trace_time_scale: float | None = None,
                            hardware: str | os.PathLike[str] | Hardware | Mapping[str, Any]
                            | None = None,
                            variant: str | dict[str, str] | None = None) -> Scenario:
    """`scenario` loaded, with each of the env's arguments that is given in place of the
    scenario's own field (each checked: a ValueError naming the argument); `episode_tasks`
    apart (`with_episode_tasks`), for the env reads the scenario's own first."""
    sc = load_scenario(scenario)
    if noise is not None:
        if not is_number(noise) or not 0 <= noise <= MAX_NOISE:   # NaN fails it too
            raise ValueError(f"noise must be a number in [0, {MAX_NOISE}], got {noise!r}")
        sc = dataclasses.replace(sc, noise=float(noise))
    if trace is not None:
        if not isinstance(trace, (str, os.PathLike)):
            raise ValueError(f"trace must be a trace name or a CSV path, got {trace!r}")
        sc = dataclasses.replace(sc, workload=dataclasses.replace(sc.workload, trace=path_text(trace)))
    if trace_time_scale is not None:
        if sc.workload.trace is None:
            raise ValueError("trace_time_scale scales a replayed trace; give trace= too "
                             "(or a scenario with workload.trace)")
        if not is_number(trace_time_scale) \
                or not MIN_RATE <= trace_time_scale <= 1 / MIN_RATE:   # NaN fails it too
            raise ValueError(f"trace_time_scale must be a number in [{MIN_RATE:g}, "
                             f"{1 / MIN_RATE:g}], got {trace_time_scale!r}")
        sc = dataclasses.replace(sc, workload=dataclasses.replace(
            sc.workload, trace_time_scale=float(trace_time_scale)))
    if isinstance(hardware, Mapping):
        # a Hardware's plain form, as the env's spec holds it (`_json_able`), read as its YAML
        try:
            hardware = hardware_from_dict(dict(hardware), HARDWARE_MAPPING_ORIGIN)
        except ValueError as exc:   # yaml.safe_load's '2.29e14' says how to read it
            raise ValueError(with_text_number_hint(str(exc))) from None
    if hardware is not None:
        # Anything but a path goes to load_hardware as given, which names a wrong type
        # (path_text would fail on it inside os.fspath, naming no argument). A Hardware rides
        # in the field too, for the env's load_hardware to check.
        sc = dataclasses.replace(sc, hardware=path_text(hardware) if isinstance(
            hardware, os.PathLike) else hardware)
    if variant is not None:
        sc = dataclasses.replace(sc, variant=resolve_variant(variant))
    return sc


class InferenceAllocEnv(gym.Env):
    """
    ## Description

    A stream of LLM inference tasks (batches of requests) arrives at a machine
    with a CPU, a GPU and an NPU. Each task runs three stages -- data loading,
    prefill (attention over the prompt) and decoding -- and for every task the
    agent decides which device runs each stage. The cost of a decision comes
    from the `inference` simulator: queueing behind earlier tasks, link
    transfers between stages on different devices, weight migration, cache
    hits and misses of the loader, memory-bandwidth contention, a re-placement
    overhead, and the devices' *true* speeds, which differ from the spec-sheet
    figures a planner would use (the NPU is ~15% faster than its datasheet).
    The pipeline variant (GLM-5.3, Flash, Flash-optimized) and the workload come
    from a scenario (see `envs/scenario.py`). Tasks arrive open-loop (Poisson, or
    a replayed trace) or, with the scenario's `workload.clients` = K, closed-loop:
    K clients, each sending its next request when its previous one finishes.

    ## Action Space

    `MultiDiscrete([D, D, D])`: a device index (in the hardware's order, e.g.
    0 cpu, 1 gpu, 2 npu) for the load, prefill and decode stage. An action that
    picks a masked device (see `action_masks`) is not an error: the dispatch
    fails, `failed_dispatch_s` of the scenario is charged as overhead, and the
    stage falls back to the available device with the smallest backlog (on a tie, the one
    listed first in the hardware file: so reordering its devices can change a run).

    ## Observation Space

    A `Box(0, 1, (5 + 7 * D,), float32)`; with D = 3 devices, 26 entries:

    | index            | observation                                            | scaling            |
    |------------------|--------------------------------------------------------|--------------------|
    | 0                | batch size of the task                                 | batch / 64, <= 1   |
    | 1                | prompt tokens                                          | n / 32768, <= 1    |
    | 2                | output tokens                                          | m / 2048, <= 1     |
    | 3                | cache signal: 1 the loader's cache holds the task's domain, 0 it does not, 0.5 no cache | as is |
    | 4 + 4d           | device d backlog b (seconds until d is free)           | b / (b + 60)       |
    | 5 + 4d           | device d free memory beside the weights (see below)    | fraction           |
    | 6 + 4d           | device d online                                        | 0 or 1             |
    | 7 + 4d           | device d measured speed ratio r (EMA of nominal / observed prefill time) | r / 2, <= 1 |
    | 4 + 4D           | recent cache hit rate (EMA, weight 0.05; 0 at reset)   | fraction           |
    | 5 + 4D + D s + d | previous task's share of stage s on device d           | fraction           |

    The backlog is counted from the observed task's arrival: 0.5 at 60 s, 0.9 at 540 s.
    Free memory counts the model's weights alone, not KV caches or activations:
    1 - weights / memory while d holds them, 1 while it does not. Weights are never evicted
    and every device that can hold them does from reset, so on both hardware presets these
    entries are constant (server 0.98, 0.77, 0.41; edge 0.41 each). The speed ratio is an
    EMA (weight 0.2) of nominal / observed prefill time on the device that ran the prefill;
    it is 1 (observed 0.5) at reset and stays so on a device that runs no prefill. The hit
    rate stays 0 without a loader cache.

    Measured (heft-calibrated on each preset scenario's own hardware, 10 episodes, seeds
    10000-10009): where the load outruns the server, the backlog entries sit near 1, at or
    above 0.9 on 48% (`bursty`), 54% (`faults`) and 80% (`long-context`) of device-steps
    (87-93% under random placements), and the three devices' entries lie within 0.01 of each
    other on 73%, 49% and 75% of steps: queues minutes apart differ in the third decimal. In
    `article` they are 0 on 74% of device-steps, in `edge` on 94%. The online entries are 1
    on every step but the NPU's in `faults` (0 on 30%); the speed entries stay in 0.47-0.61,
    the GPU's down to 0.37 while `faults` throttles it (they follow the placements: under
    random ones the GPU's falls to 0.29).

    The output tokens (entry 2) are the task's real generated length, which a serving
    system learns only as it decodes: a policy that leans on them has an oracle's view of
    decode cost. What the observation leaves out, so that the state is not Markov: the task's
    index in the episode, and with it the phase of a `burst` and the windows of `faults`
    (a throttle shows only through the speed entry of the device that ran the prefill,
    an EMA); the noise of each stage; the spans over which devices contend for a shared
    memory. Stacked frames or a recurrent policy (`recurrent-ppo`) can recover some of it.

    ## Rewards

    `reward="latency"` (default): minus the task's latency in seconds.
    `reward="relative"`: `1 - latency / static_latency`, where the static
    latency is the best static placement's for the same task in the same state
    (0 = as good as static, positive = better). In the same state static waits behind
    the backlog the agent's own earlier placements built, so this reward does not charge
    a policy for the queue it creates: once one builds, every placement's reward is near 0,
    and a policy slower than static can score above it (every stage on the GPU, in the
    README's "The environment").
    `reward="normalised"`: `1 - latency / static_service`, where the static service time is
    that same static latency less its queue wait. With no queue it equals `relative`; unlike
    `relative`, a backlog the agent builds lowers the rewards of the tasks that wait behind
    it, so a policy is charged for it. Its scale is set per task by static, as `relative`'s is
    (`latency`'s spans the tasks' sizes and queues: seconds on `article`, up to about an
    hour a task on the overloaded presets, `bursty` and `faults`, so train on it with
    VecNormalize's reward scaling, `train.py --normalize`). There `relative` carries almost no
    signal: every task waits behind a backlog static would wait behind too, and a random
    policy 1.6x slower than static on `bursty` scores static's 0 a step on average; use
    `normalised` or `latency` for them. In both, a duration too short
    for the float clock at its finish time (one that rounds to 0, e.g. a one-token task
    behind a queue of tasks of 1e9 sequences) counts as that clock's smallest step, so the
    ratio stays finite.

    ## Info

    Per step: `latency` (s), `breakdown` (overhead, queue, load, transfer, compute,
    memory_stall: they add up to the latency), `device_s` (device-seconds the task kept its
    devices busy, set-ups included: its cost in throughput), `placement` (device label per stage;
    a stage split in `InferenceAllocSplit-v0` reads `cpu:11/32+gpu:21/32`, sequences of the batch),
    `cache_hit` (None without a loader cache), `utilisation` (per device: its busy time over
    the time booked so far, from the episode start to the end of the last work booked on any
    device), `share` (per device),
    `failed_dispatch` (masked picks this step), `attention_s` (seconds of the prefill and
    decode stages' attention operations, a part of compute and memory_stall; in a split stage,
    its slowest share's), `kv_wait_s` (seconds of memory_stall spent reading the KV cache),
    `speed_ratio` (the measured ratios the observation shows, unscaled) and `task` (batch,
    prompt_tokens, output_tokens, domain (the data domain the loader's cache is keyed on),
    arrival (seconds from the episode's start) of the task this step placed: the observation
    returned with it shows the next task). With `price_static=True`, `reference=True`,
    `reward="relative"` or `reward="normalised"`: `static_latency`, `static_service` (its
    latency less its queue wait) and `static_placement`; with `reference=True` also
    `oracle_latency` and `oracle_placement`. `reset()`'s info holds only `task`: the first
    task to place.

    ## Episode End

    The episode is truncated after `episode_tasks` tasks, or when a replayed
    trace runs out; it never terminates. The final observation shows the last
    task again, with the devices as it left them (`action_masks()` gives its masks);
    `step()` then needs a `reset()`.

    ## Arguments

    - `scenario`: preset name (`article`, `long-context`, `short-text`, `bursty`,
      `edge`, `faults`), a YAML path, a `Scenario` (checked as its YAML would be:
      `envs.load_scenario`), or a mapping as `Scenario.to_dict` writes it. Default `article`. The env's `spec` holds a `Scenario` (and a path) in that
      plain form, so that `env.spec.to_json()` and `EnvSpec.from_json` make the same env.
    - `hardware`: preset name (`server`, `edge`), YAML path, a `Hardware` (checked as its
      YAML would be: `inference.hardware.check_hardware`) or the mapping of its YAML schema
      (`inference.hardware.hardware_to_dict`, the form the env's `spec` holds a `Hardware`
      in); default the scenario's. Some
      device's `memory` must hold the model's weights (glm-9b: 18.8 GB), else a ValueError.
    - `variant`: recipe (`glm-5.3`, `glm-5.3-flash`, `glm-5.3-flash-opt`) or a dict
      `{load:, prefill:, decode:}` of implementations; default the scenario's.
    - `episode_tasks`: tasks per episode (1 .. 1,000,000); default the scenario's. A fault
      of the scenario starting at or after it is a warning (`UnreachedFaultWarning`, on the
      first reset); at or after both it and the scenario's own, a ValueError.
    - `reward`: `latency`, `relative` or `normalised` (see Rewards); default `latency`.
    - `trace`: `azure-code`, `azure-conv` or a CSV path in the Azure LLM inference
      trace format; replaces the scenario's synthetic task sizes and arrivals. Default the
      scenario's `workload.trace` (none in the presets: synthetic tasks).
    - `trace_time_scale`: replay the trace's arrivals this many times faster (< 1: slower);
      default the scenario's `workload.trace_time_scale` (1, the real rate). The Azure
      traces are a whole service's load: at their real rate they give one `server` 18-66x
      the `article` scenario's tasks per second, and every policy's queue grows without end
      (heft-calibrated on azure-conv, workload seed 10000, 1,000 tasks: 171 s mean latency
      over the first 100, 3,220 s over the last 100). One server keeps up at about 0.05
      (the same run: 5.8 s over the first 100, 5.5 s over the last, 5.4-7.2 s per 100).
    - `noise`: sigma of the multiplicative log-normal stage-time noise (0 .. 2): median
      factor 1, mean exp(sigma**2 / 2), so noise also lengthens the mean latency. Default the
      scenario's `noise`.
    - `reference`: if True, `info` also carries the best-static and per-step oracle
      latencies for the same state (costs ~D**3 simulations per step). Default `False`.
    - `price_static`: if True, `info` carries the best-static latency for the same state
      whatever the reward (one simulation more per step; `reference=True` and the
      `relative` and `normalised` rewards price it anyway): what a guard or a
      latency-versus-static curve reads while training on `reward="latency"`. Default `False`.
    - `render_mode`: `None`, `ansi` (a line per task: placement, latency, breakdown) or
      `rgb_array` (a frame of the last placement, the device queues and the latency's
      parts; see `envs/render.py`). SB3's `make_vec_env` asks for `rgb_array`.
      `gym.make(..., render_mode="human")` wraps the env in Gymnasium's HumanRendering,
      which shows the `rgb_array` frames in a window and needs pygame. Default `None`.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    _labels_count_sequences = False    # whole stages only: a label never names the batch
    _spec: EnvSpec | None = None

    @property
    def spec(self) -> EnvSpec | None:
        return self._spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        # gymnasium.make sets the spec after __init__, with the kwargs as given. EnvSpec.to_json
        # writes a Scenario among them as dataclasses.asdict (every dist's parameters in each
        # Distribution: a mapping no scenario reader accepts) and fails on a Path or numpy
        # value; their plain forms are what from_json must give back to make the same env.
        # (InferenceAllocMix-v0 takes this property as its own.)
        if value is not None:
            kwargs = {key: _json_able(v) for key, v in value.kwargs.items()}
            if any(kwargs[key] is not v for key, v in value.kwargs.items()):
                value = dataclasses.replace(value, kwargs=kwargs)
        self._spec = value

    @checked_keywords()
    def __init__(self, scenario: str | Scenario | Mapping[str, Any] = "article",
                 hardware: str | os.PathLike[str] | Hardware | Mapping[str, Any] | None = None,
                 variant: str | dict[str, str] | None = None, episode_tasks: int | None = None,
                 reward: str = "latency", trace: str | None = None, noise: float | None = None,
                 reference: bool = False, render_mode: str | None = None,
                 trace_time_scale: float | None = None, price_static: bool = False) -> None:
        for name, flag in (("reference", reference), ("price_static", price_static)):
            if not is_bool(flag):   # "no" would count as True, and 1 passed as equal to it
                raise ValueError(f"{name} must be True or False, got {flag!r}")
        sc = scenario_with_arguments(scenario, noise=noise, trace=trace,
                                     trace_time_scale=trace_time_scale, hardware=hardware,
                                     variant=variant)
        own_tasks = sc.episode_tasks    # before the argument: a fault past it is a mistake
        sc = with_episode_tasks(sc, episode_tasks)
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}"
                             f"{did_you_mean([reward], REWARDS)}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None, 'ansi' or 'rgb_array' ('human' through "
                             f"gym.make(..., render_mode='human'), which needs pygame), got "
                             f"{render_mode!r}")
        if sc.workload.trace is not None:
            with naming_field(sc, "workload.trace", given=trace is not None):
                trace_batches(sc.workload)      # fail now on a bad trace
            with naming_field(sc, "workload.trace_span"):   # fail now: too short a span
                check_span(sc.workload, sc.episode_tasks)
        self.scenario = sc
        self._clients = sc.workload.clients     # read on every step: looked up once
        self.reward_kind = reward
        self.reference = bool(reference)
        # The static figure the reward divides the latency by (None: minus the latency).
        self._reward_scale = REWARD_SCALES[reward]
        self._price_static = bool(price_static) or self.reference or self._reward_scale is not None
        self.render_mode = render_mode
        with naming_field(sc, "hardware", given=hardware is not None):
            self.hardware = load_hardware(sc.hardware)
        with naming_field(sc, "model"):
            self.model = get_model(sc.model)
        with naming_field(sc, "variant", given=variant is not None):
            self.variant = variant_label(sc.variant)
            stages = build_stages(sc.variant, self.model)
        self._check_the_weights_fit_somewhere(sc)
        device_names = self.hardware.device_names
        for i, fault in enumerate(sc.faults):
            with naming_field(sc, f"faults[{i}].device"):
                self.hardware.device_id(fault.device)   # unknown device -> ValueError
        self._check_someone_is_online(sc)
        self._unreached_faults = self._faults_past_the_end(sc, own_tasks)
        config = SimConfig(
            prefetch_depth=sc.simulator.prefetch_depth,
            replacement_overhead_s=sc.simulator.replacement_overhead_s,
            contention=sc.simulator.contention,
            precomputed_domains=precomputed_domains(sc),
            cache_capacity=sc.cache.capacity,
            cache_decay=sc.cache.decay,
        )
        self.sim = Simulator(self.hardware, self.model, stages, config)
        self.nominal_sim = Simulator(self.hardware.nominal_view(), self.model, stages, config)
        self.planner = ReferencePlanner(self)
        self.n_devices = d = len(device_names)
        self.device_names = device_names
        # Devices whose spec-sheet figures are the true ones: there the speed measurement's
        # nominal time is what the run itself recorded (see _observe).
        self._nominal_is_true = tuple(self.nominal_sim.prices_as(self.sim, dev)
                                      for dev in range(d))
        # Constants of the hot path, computed once: a step should only do what depends on the step.
        self._weight_bytes = self.model.weight_bytes
        self._device_memory = tuple(profile.memory for profile in self.hardware.devices)
        # Observed free memory of a device holding the weights (one without them shows 1.0).
        self._free_resident = tuple(min(max(1.0 - self._weight_bytes / memory, 0.0), 1.0)
                                    for memory in self._device_memory)
        # The shares of each discrete action, by its device ids (a, b, c), built once: an action
        # is then validated and translated by one lookup.
        whole = [((dev, 1.0),) for dev in range(d)]
        self._placements = {(a, b, c): (whole[a], whole[b], whole[c])
                            for a in range(d) for b in range(d) for c in range(d)}
        self._cache_kind = getattr(stages[0], "cache_kind", None)   # None: no loading cache
        # Which devices can hold `need` bytes depends only on how many device memories are
        # below it (the memories never change): `_fit_rows[k]` is the row of `need <= memory[d]`
        # when bisection finds k of them below `need`.
        self._memory_sorted = sorted(self._device_memory)
        self._fit_rows = tuple(
            tuple(k == 0 or memory > self._memory_sorted[k - 1] for memory in self._device_memory)
            for k in range(d + 1))
        self._allowed_everywhere = (self._fit_rows[0],) * 3   # every stage on every device
        # The current task's masks, asked for by action_masks() and again by step() (see _masks).
        self._mask_memo: list[Any] | None = None
        # Labels, device shares and observed previous placement of a placement, which depend on
        # the placement and (a split label counts sequences) the batch: see _placement_facts.
        self._facts_memo: dict[tuple[Shares, int], PlacementFacts] = {}
        # One stage's label, keyed as the facts are: split placements rarely repeat whole, but
        # their stages do (a few dozen ways to split a batch of 8 over three devices).
        self._label_memo: dict[tuple[tuple[tuple[int, float], ...], int], str] = {}
        # (task, works): the current task's `stage.work` records, which the masks, the run,
        # the references and the speed measurement all price; built once per task.
        self._works_memo: tuple[Task, Works] | None = None
        self.observation_space = spaces.Box(0.0, 1.0, (5 + 7 * d,), np.float32)
        self.action_space = self._make_action_space()
        self._episode: Episode | None = None
        self._index = 0
        self._last: tuple[Task, TaskResult, Shares, dict[str, Any]] | None = None

    # ------------------------------------------------------------------ actions
    def _make_action_space(self) -> spaces.Space:
        return spaces.MultiDiscrete([self.n_devices] * 3)

    def _requested_shares(self, action: Any, batch: int) -> Shares:
        """Validate an action into per-stage (device, fraction) shares for a task of `batch`
        sequences (a whole stage per device here; the Split env rounds its shares to them).

        The shares list each stage's devices once, in increasing order (as `_dispatch` returns
        them), so that with every device allowed `step` can skip the dispatch."""
        if holds_bool(action):
            raise ValueError(f"action must hold integer device ids, not booleans, got {action!r}")
        arr = np.asarray(action)
        if arr.shape == (3,) and arr.dtype.kind in "iu":    # fast path: what SB3 and sample() give
            a, b, c = arr.tolist()
            shares = self._placements.get((a, b, c))   # None: a device id out of range
            if shares is not None:
                return shares
        if arr.shape != (3,):
            raise ValueError(f"action must have shape (3,) (a device per stage), got shape {arr.shape}")
        if arr.dtype.kind not in "iuf":
            # A dtype check, off the fast path: bools would otherwise run as device ids 0/1,
            # and strings or objects fail inside numpy with its own message.
            what = "booleans" if arr.dtype.kind == "b" else f"dtype {arr.dtype}"
            raise ValueError(f"action must hold integer device ids, not {what}, got {action!r}")
        if not np.issubdtype(arr.dtype, np.integer) and (
                not np.all(np.isfinite(arr.astype(float))) or np.any(arr != np.round(arr))):
            raise ValueError(f"action must hold integer device ids, got {action!r}")
        # The range before the cast: a float past int64 (1e20) made numpy warn as it cast.
        if np.any(arr < 0) or np.any(arr >= self.n_devices):
            raise ValueError(f"action entries must be device ids in 0..{self.n_devices - 1}, got {action!r}")
        return tuple(((int(i), 1.0),) for i in arr.astype(np.int64))

    def stage_masks(self) -> np.ndarray:
        """(3, D) bool: may stage s run on device d for the current task? After the episode's
        last step, the masks of the task the final observation shows (the last one): a
        vector env that resets on the next step asks for them with that observation."""
        self._require_reset("stage_masks", ended_ok=True)
        self._masks(self._current_task())
        memo = self._mask_memo
        assert memo is not None
        if memo[4] is None:
            memo[4] = np.array(memo[2], dtype=bool)
        return memo[4].copy()

    def _masks(self, task: Task) -> tuple[Masks, bool]:
        """(`stage_masks()` as tuples, whether every stage may run on every device, in which
        case dispatch changes nothing) for `task`, the current one, memoised per task and
        online set: action_masks() and step() both ask. The memo keeps the array of
        `stage_masks()` once that is asked for."""
        online = self.sim.state.online
        memo = self._mask_memo
        if memo is not None and memo[0] == self._index and memo[1] == online:
            return memo[2], memo[3]
        works = self._task_works(task)
        weights = self._weight_bytes
        # The common case first: every device online and every stage fits in the smallest
        # memory, so every row is all True (what `_fitting_masks` finds, for less).
        everywhere = all(online)
        if everywhere:
            smallest = self._memory_sorted[0]
            for work in works:
                if work.memory_need(weights) > smallest:
                    everywhere = False
                    break
        masks = self._allowed_everywhere if everywhere else self._fitting_masks(works, online)
        # [index, online, rows, every stage allowed everywhere, stage_masks() array or None]
        self._mask_memo = [self._index, list(online), masks, everywhere, None]
        return masks, everywhere

    def _fitting_masks(self, works: Works, online: list[bool]) -> Masks:
        """The masks of `_masks` where some stage may not run somewhere."""
        weights = self._weight_bytes
        memory = self._device_memory
        all_online = all(online)
        rows = []
        for work in works:
            need = work.memory_need(weights)
            below = bisect_left(self._memory_sorted, need)   # devices that cannot hold `need`
            row = self._fit_rows[below]                      # need <= memory[d], per device d
            if not all_online:
                row = tuple(up and fits for up, fits in zip(online, row, strict=True))
            if not any(row):
                # Nothing can hold it: allow the online device with the most memory, which runs
                # it priced as if it fit (the simulator does not offload).
                devices = range(self.n_devices)
                candidates = [i for i in devices if online[i]] or list(devices)
                fallback = max(candidates, key=memory.__getitem__)
                row = tuple(dev == fallback or fits for dev, fits in enumerate(row))
            rows.append(row)
        return tuple(rows)

    def _task_works(self, task: Task) -> Works:
        """`stage.work(task, model)` of each stage (the loader's prices a miss), once per task."""
        memo = self._works_memo
        if memo is not None and memo[0] is task:
            return memo[1]
        model = self.model
        load, prefill, decode = self.sim.stages
        works = (load.work(task, model), prefill.work(task, model), decode.work(task, model))
        self._works_memo = (task, works)
        return works

    def _run_works(self, task: Task) -> Works:
        """The records `Simulator.run` prices for `task` in the current state (`task_works`)."""
        works = self._task_works(task)
        if self._cache_kind is not None and task.domain in self.sim.state.cache_entries:
            # A hit is the one case where the loader's work differs from `work`'s, which is a
            # miss: `load_work(task, model, False)`, or `load_work(..., None)` without a cache.
            return (self.sim.stages[0].load_work(task, self.model, True), works[1], works[2])
        return works

    def action_masks(self) -> np.ndarray:
        """Flat mask over [stage0 devices, stage1 devices, stage2 devices] for MaskablePPO."""
        self._require_reset("action_masks", ended_ok=True)
        return self.stage_masks().reshape(-1)

    def _dispatch(self, shares: Shares, masks: Masks | np.ndarray) -> tuple[Shares, int]:
        """Replace masked devices by the available one with the smallest backlog."""
        return dispatch(shares, masks, self.sim.state.busy_until)

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: `seed` (an int, numpy's too) fixes its tasks and noise; without
        one, the env's generator goes on from the last seed (a new stream each time).
        `options` are refused (None or {}, what vector envs pass, are fine): the episode is set
        by the env's arguments, and an ignored `{"episode_tasks": 10}` would run the old
        episode unnoticed. Returns the first task's observation and an info holding only
        `task`."""
        check_no_options(options)
        super().reset(seed=python_seed(seed))
        self._episode = generate_episode(self.scenario, self.np_random, self.scenario.episode_tasks)
        if self._clients:
            self._episode = self._closed_loop(self._episode)
        self.sim.reset()
        self._index = 0
        self._speed = [1.0] * self.n_devices
        self._hit_rate = 0.0
        self._noise = self._episode.noise.tolist()   # floats: faster than numpy scalars
        self._prev = (0.0,) * (3 * self.n_devices)
        self._last = None
        self._mask_memo = None
        self._works_memo = None
        self._apply_faults()
        if self._unreached_faults is not None:
            # once per message in the process, not per env or episode: the warnings module's
            # own registry is cleared whenever a library changes the filters (it printed twice)
            if self._unreached_faults not in _WARNED:
                _WARNED.add(self._unreached_faults)
                warnings.warn(self._unreached_faults, UnreachedFaultWarning,
                              stacklevel=_callers_stacklevel())
            self._unreached_faults = None
        task = self._current_task()
        return self._observation(task), {"task": self._task_info(task)}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        episode, index = self._episode, self._index
        if episode is None or index >= len(episode.tasks):
            self._require_reset()   # raises: no task stream yet, or the episode is over
        assert episode is not None
        tasks = episode.tasks
        task = tasks[index]
        requested = self._requested_shares(action, task.batch)
        noise = self._noise[index]
        masks, everywhere = self._masks(task)
        if everywhere:   # every device allowed: dispatch would change nothing
            shares, failed = requested, 0
        else:
            shares, failed = self._dispatch(requested, masks)
        penalty = failed * self.scenario.failed_dispatch_s
        works = self._run_works(task)
        refs = None
        if self._price_static:
            refs = self.planner.references(task, noise, masks, works)
        res = self.sim.run(task, shares, noise, extra_overhead=penalty, works=works)
        if not math.isfinite(res.latency):   # only a Scenario or Hardware built past the loaders
            raise RuntimeError(
                f"task {index} simulated to a latency of {res.latency}: a figure of scenario "
                f"{self.scenario.name!r} or hardware {self._hardware_named()} lies outside any "
                f"plausible range (the YAML loaders refuse such values); reset() after fixing it")
        if self._clients:
            self._submit_next(index, task.arrival + res.latency)
        # Looked up once: hashing the nested shares tuple is a good part of the lookup's cost.
        facts = self._placement_facts(shares, task.batch)
        self._observe(res, facts)
        scale = self._reward_scale
        if scale is None:
            reward = -res.latency
        else:
            assert refs is not None
            reward = _relative_reward(res.latency, refs[scale],
                                      max(res.finish, task.arrival + refs["static_latency"]))
        info = self._step_info(task, res, facts, failed)
        if refs is not None:   # the references' keys come first
            refs.update(info)
            info = refs
        self._last = (task, res, shares, info)
        self._index = index = index + 1
        truncated = index >= len(tasks)
        if not truncated and self.scenario.faults:
            self._apply_faults()
        # The next task, or this one again at the end (as `_current_task`).
        obs = self._observation(task if truncated else tasks[index])
        return obs, float(reward), False, truncated, info

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "rgb_array":
            return self._frame()
        if self.render_mode != "ansi":
            return None
        if self._last is None:
            return "no task placed yet"
        task, res, shares, info = self._last
        parts = " ".join(f"{k}={v:.3f}" for k, v in res.breakdown().items())
        hit = {None: "-", True: "hit", False: "miss"}[res.cache_hit]
        return (f"task {self._index - 1:4d} B={task.batch:<3d} n={task.prompt_tokens:<6d} "
                f"m={task.output_tokens:<5d} {self._placement_label(shares, task.batch):<24s} "
                f"latency={res.latency:8.3f}s [{parts}] cache={hit}")

    # ------------------------------------------------------------------ internals
    def _frame(self) -> np.ndarray:
        """The rgb_array frame (envs/render.py), queues as the next task will find them."""
        st = self.sim.state
        now = self._current_task().arrival if self._episode is not None else 0.0
        last = self._last
        return draw_frame(self.n_devices, last[2] if last else None,
                          [b - now for b in st.busy_until], st.online,
                          last[1].breakdown() if last else None)

    def _require_reset(self, caller: str = "step", ended_ok: bool = False) -> None:
        """Raise unless reset() has given a task stream and, unless `ended_ok`, a task is left."""
        if self._episode is None:
            raise RuntimeError(f"call reset() before {caller}(): the environment has no task "
                               f"stream yet")
        if not ended_ok and self._index >= len(self._episode.tasks):
            raise RuntimeError("the episode is over (truncated); call reset() to start a new one")

    def _closed_loop(self, episode: Episode) -> Episode:
        """The first K requests arrive at 0; the others when `_submit_next` sends them."""
        k = self._clients
        tasks = [dataclasses.replace(t, arrival=0.0) if i < k else t
                 for i, t in enumerate(episode.tasks)]
        return Episode(tasks, episode.noise)

    def _submit_next(self, index: int, finish: float) -> None:
        """Closed loop: the client whose request `index` finished at `finish` sends its next
        request index + K (no earlier than the request before it: dispatch is in order)."""
        assert self._episode is not None
        tasks = self._episode.tasks
        assert isinstance(tasks, list)
        nxt = index + self._clients
        if nxt < len(tasks):
            arrival = max(finish, tasks[nxt - 1].arrival)
            tasks[nxt] = dataclasses.replace(tasks[nxt], arrival=arrival)

    def _current_task(self) -> Task:
        assert self._episode is not None
        return self._episode.tasks[min(self._index, len(self._episode.tasks) - 1)]

    def _hardware_named(self, quote: bool = True) -> str:
        """The scenario's hardware as a message names it: its spec as given, or a Hardware
        (an object, a mapping, inline in the scenario) by its name: its repr ran to 2 KB."""
        spec = self.scenario.hardware
        if isinstance(spec, str):
            return shown(spec, quote=quote)
        return f"{shown(self.hardware.name)} (an object)"

    def _check_the_weights_fit_somewhere(self, sc: Scenario) -> None:
        """Refuse hardware on which no device holds the model's weights: every prefill and
        decode would fall back to the device with the most memory and run there priced as if
        it fit (the simulator has no offloading), so every latency would be a fiction. A task
        that fits nowhere only for its batch's footprint still falls back (see _fitting_masks)."""
        weights = self.model.weight_bytes
        largest = self.hardware.most_memory
        if weights > largest.memory:
            raise ValueError(
                f"hardware {self._hardware_named(quote=False)}: no device can hold the weights of "
                f"model {shown(sc.model)} ({weights / 1e9:.1f} GB); the most memory is {largest.name}'s "
                f"({largest.memory / 1e9:.1f} GB). Give a device `memory` >= {weights:.4g} "
                f"bytes, or name a smaller `model` in the scenario")

    def _check_someone_is_online(self, sc: Scenario) -> None:
        """Refuse faults that take every device offline at once: the tasks would have nowhere
        to run (the fallback used to send them to an offline device). Windows overlap iff
        they share the latest of their starts, so checking each start suffices."""
        offline = [f for f in sc.faults if f.kind == "offline"]
        for t in sorted({f.start_task for f in offline}):
            down = {f.device for f in offline if f.start_task <= t < f.end_task}
            if len(down) == len(self.hardware.device_names):
                raise ValueError(f"scenario {sc.name!r}: its faults take every device offline "
                                 f"at task {t}; at least one must stay online")

    @staticmethod
    def _faults_past_the_end(sc: Scenario, own_tasks: int) -> str | None:
        """A fault that starts at or after the episode's last task never fires, and nothing
        said so. Past both these episodes and the scenario's own (`own_tasks`): a ValueError
        naming it (the argument only shortening an episode, it fired nowhere). Past only an
        episode the `episode_tasks` argument shortens (train.py's --episode-tasks and
        --eval-tasks, the online study's samples, a 1-task env built to read the device
        names): the warning `reset` gives, for the scenario still holds the fault for its own,
        longer episodes. An argument longer than the scenario's own may reach it."""
        longest = max(own_tasks, sc.episode_tasks)
        for i, fault in enumerate(sc.faults):
            if fault.start_task >= longest:
                with naming_field(sc, f"faults[{i}]"):
                    raise ValueError(
                        f"start_task {fault.start_task} is at or past the episode's {longest} "
                        f"tasks (episode_tasks: {longest}; tasks 0..{longest - 1}): it "
                        f"would never fire; start it before task {longest}, or raise "
                        f"episode_tasks")
        n = sc.episode_tasks
        late = [(i, fault) for i, fault in enumerate(sc.faults) if fault.start_task >= n]
        if not late:
            return None
        names = ", ".join(f"faults[{j}] (start_task {f.start_task})" for j, f in late)
        return (f"scenario {sc.name!r}: {names} never fire{'s' if len(late) == 1 else ''} in "
                f"these {n}-task episodes (episode_tasks={n})")

    def _apply_faults(self) -> None:
        if not self.scenario.faults:
            return
        st = self.sim.state
        st.online = [True] * self.n_devices
        st.throttle = [1.0] * self.n_devices
        for fault in self.scenario.faults:
            if fault.start_task <= self._index < fault.end_task:
                dev = self.hardware.device_id(fault.device)
                if fault.kind == "offline":
                    st.online[dev] = False
                else:
                    st.throttle[dev] = fault.factor

    def _observe(self, res: TaskResult, facts: PlacementFacts) -> None:
        """Update what the agent can measure: speed ratios, cache hit rate, last placement."""
        speed = self._speed
        # Prefill is compute bound, so its time reveals a device's compute speed; decode is
        # bound by memory bandwidth (true = nominal) and would blur the estimate.
        dev, observed = res.stage_device[1], res.stage_time[1]
        if observed > 0:
            if self._nominal_is_true[dev]:
                expected = res.stage_base[1]
            else:
                expected = self.nominal_sim.stage_seconds(res.works[1], dev, res.stage_fraction[1])
            speed[dev] += SPEED_EMA * (expected / observed - speed[dev])
        if res.cache_hit is not None:
            self._hit_rate += HIT_EMA * ((1.0 if res.cache_hit else 0.0) - self._hit_rate)
        self._prev = facts[2]

    def _observation(self, task: Task) -> np.ndarray:
        """The observation of `task`, the current one."""
        # The clamps are conditionals rather than min()/max() calls, which cost more on this
        # path: `1.0 if x > 1.0 else x` is min(x, 1.0), and the speed's is min(max(r, 0.0), 1.0).
        st = self.sim.state
        cached = self._cache_kind is not None
        hit = (1.0 if task.domain in st.cache_entries else 0.0) if cached else 0.5
        batch = task.batch / BATCH_SCALE
        prompt = task.prompt_tokens / PROMPT_SCALE
        output = task.output_tokens / OUTPUT_SCALE
        values = [1.0 if batch > 1.0 else batch, 1.0 if prompt > 1.0 else prompt,
                  1.0 if output > 1.0 else output, hit]
        now = task.arrival
        # (The hot path's zips go over per-device lists, all of length D by construction: they
        # leave out `strict=True`, whose check costs more than the rest of a 3-device zip.)
        for busy, resident, up, speed, free in zip(st.busy_until, st.resident, st.online,  # noqa: B905
                                                   self._speed, self._free_resident):
            backlog = busy - now
            if backlog < 0.0:
                backlog = 0.0
            ratio = speed / SPEED_SCALE   # an average of ratios >= 0 (_observe): never below 0
            if ratio > 1.0:
                ratio = 1.0
            values += (backlog / (backlog + BACKLOG_SCALE_S), free if resident else 1.0,
                       1.0 if up else 0.0, ratio)
        values.append(self._hit_rate)
        values += self._prev
        return np.array(values, dtype=np.float32)   # float64 -> float32, rounded to nearest

    def _placement_label(self, shares: Shares, batch: int) -> str:
        """A device per stage, or for a split stage each device's sequences of the batch:
        `cpu:11/32+gpu:21/32` (a share is whole sequences: two decimals, 0.34+0.66, were
        neither exact nor multiples of 1 / B)."""
        names = self.device_names
        return ",".join("+".join(f"{names[dev]}" if frac == 1.0
                                 else f"{names[dev]}:{round(frac * batch)}/{batch}"
                                 for dev, frac in stage) for stage in shares)

    def _placement_facts(self, shares: Shares, batch: int) -> PlacementFacts:
        """(info's placement labels, info's device shares by name, observed previous placement).

        The shares dict is a template: `_step_info` hands out a copy, which is cheaper than
        building it again. A split placement's labels count sequences of the batch, so in the
        Split env the batch is part of the key; here every stage is whole, and keying on the
        batch too would only multiply the entries (27 placements times every batch size)."""
        counted = batch if self._labels_count_sequences else 0
        key = (shares, counted)
        facts = self._facts_memo.get(key)
        if facts is not None:
            return facts
        d = self.n_devices
        share = [0.0] * d
        prev = [0.0] * (3 * d)     # kept as float64, rounded with the rest of the observation
        for s, stage_shares in enumerate(shares):
            for dev, frac in stage_shares:
                share[dev] += frac / 3.0
                prev[s * d + dev] = frac
        label_memo = self._label_memo
        labels = []
        for stage_shares in shares:
            label = label_memo.get((stage_shares, counted))
            if label is None:
                if len(label_memo) >= MEMO_ENTRIES:
                    label_memo.clear()
                label = self._placement_label((stage_shares,), batch)
                label_memo[stage_shares, counted] = label
            labels.append(label)
        facts = (tuple(labels), dict(zip(self.device_names, share, strict=True)), tuple(prev))
        if len(self._facts_memo) >= MEMO_ENTRIES:
            self._facts_memo.clear()
        self._facts_memo[key] = facts
        return facts

    def _task_info(self, task: Task) -> dict[str, Any]:
        return {"batch": task.batch, "prompt_tokens": task.prompt_tokens,
                "output_tokens": task.output_tokens, "domain": task.domain, "arrival": task.arrival}

    def _step_info(self, task: Task, res: TaskResult, facts: PlacementFacts,
                   failed: int) -> dict[str, Any]:
        # Utilisation over the time booked so far: busy time includes work booked past this
        # task's finish (earlier tasks still queued or decoding), so dividing by the finish
        # alone exceeded 1 under a backlog and had to be clamped, hiding idle gaps.
        state = self.sim.state
        horizon = max(res.finish, max(state.busy_until), 1e-9)
        names = self.device_names
        placement, share, _ = facts
        utilisation = {}
        for name, busy in zip(names, state.busy_time):  # noqa: B905 (see _observation)
            used = busy / horizon
            utilisation[name] = 1.0 if used > 1.0 else used   # only float rounding reaches 1
        return {
            "latency": res.latency,
            "breakdown": res.breakdown(),
            "device_s": sum(res.busy),
            "placement": placement,
            "cache_hit": res.cache_hit,
            "utilisation": utilisation,
            "share": share.copy(),   # a fresh dict: the caller may change it
            "failed_dispatch": failed,
            "attention_s": res.attention,
            "kv_wait_s": res.kv_wait,
            "speed_ratio": dict(zip(names, self._speed)),  # noqa: B905 (see _observation)
            "task": {"batch": task.batch, "prompt_tokens": task.prompt_tokens,
                     "output_tokens": task.output_tokens, "domain": task.domain,
                     "arrival": task.arrival},   # as `_task_info(task)`
        }


assert STAGES == ("load", "prefill", "decode")
