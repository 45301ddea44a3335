"""InferenceAlloc-v0: place each stage of each LLM inference task on a CPU, GPU or NPU."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envs.reference import ReferencePlanner
from envs.scenario import Scenario, load_scenario
from envs.workload import Episode, generate_episode, precomputed_domains
from inference.hardware import load_hardware
from inference.model_config import get_model
from inference.simulator import Shares, SimConfig, Simulator, TaskResult
from inference.task import STAGES, Task
from inference.variants import build_stages, resolve_variant, variant_label

REWARDS = ("latency", "relative")
BACKLOG_SCALE_S = 60.0      # backlog b is observed as b / (b + 60 s): 0 idle, 0.5 at 60 s
SPEED_EMA = 0.2             # weight of the newest observation in the speed-ratio average
HIT_EMA = 0.05              # weight of the newest lookup in the recent cache hit rate


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
    from a scenario (see `envs/scenario.py`).

    ## Action Space

    `MultiDiscrete([D, D, D])`: a device index (in the hardware's order, e.g.
    0 cpu, 1 gpu, 2 npu) for the load, prefill and decode stage. An action that
    picks a masked device (see `action_masks`) is not an error: the dispatch
    fails, `failed_dispatch_s` of the scenario is charged as overhead, and the
    stage falls back to the available device with the smallest backlog.

    ## Observation Space

    A `Box(0, 1, (5 + 7 * D,), float32)`; with D = 3 devices, 26 entries:

    | index            | observation                                            | scaling            |
    |------------------|--------------------------------------------------------|--------------------|
    | 0                | batch size of the task                                 | batch / 64, <= 1   |
    | 1                | prompt tokens                                          | n / 32768, <= 1    |
    | 2                | output tokens                                          | m / 2048, <= 1     |
    | 3                | cache signal: 1 the loader's cache holds the task's domain, 0 it does not, 0.5 no cache | as is |
    | 4 + 4d           | device d backlog b (seconds of queued work)            | b / (b + 60)       |
    | 5 + 4d           | device d free memory beside resident weights           | fraction           |
    | 6 + 4d           | device d online                                        | 0 or 1             |
    | 7 + 4d           | device d measured speed ratio r (EMA of nominal / observed stage time) | r / 2, <= 1 |
    | 4 + 4D           | recent cache hit rate (EMA)                            | fraction           |
    | 5 + 4D + D s + d | previous task's share of stage s on device d           | fraction           |

    ## Rewards

    `reward="latency"` (default): minus the task's latency in seconds.
    `reward="relative"`: `1 - latency / static_latency`, where the static
    latency is the best static placement's for the same task in the same state
    (0 = as good as static, positive = better).

    ## Episode End

    The episode is truncated after `episode_tasks` tasks, or when a replayed
    trace runs out; it never terminates.

    ## Arguments

    - `scenario`: preset name (`article`, `long-context`, `short-text`, `bursty`,
      `edge`, `faults`) or a YAML path. Default `article`.
    - `hardware`: preset name (`server`, `edge`) or YAML path; default the scenario's.
    - `variant`: recipe (`glm-5.3`, `glm-5.3-flash`, `glm-5.3-flash-opt`) or a dict
      `{load:, prefill:, decode:}` of implementations; default the scenario's.
    - `episode_tasks`: tasks per episode (>= 1); default the scenario's.
    - `reward`: `latency` or `relative`.
    - `trace`: `azure-code`, `azure-conv` or a CSV path in the Azure LLM inference
      trace format; replaces the scenario's synthetic task sizes and arrivals.
    - `noise`: sigma of the multiplicative log-normal stage-time noise (>= 0).
    - `reference`: if True, `info` also carries the best-static and per-step oracle
      latencies for the same state (costs ~D**3 simulations per step).
    - `render_mode`: `None` or `ansi` (a line per task: placement, latency, breakdown).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, scenario: str | Scenario = "article", hardware: str | None = None,
                 variant: str | dict[str, str] | None = None, episode_tasks: int | None = None,
                 reward: str = "latency", trace: str | None = None, noise: float | None = None,
                 reference: bool = False, render_mode: str | None = None) -> None:
        sc = load_scenario(scenario)
        if episode_tasks is not None:
            if isinstance(episode_tasks, bool) or not isinstance(episode_tasks, (int, np.integer)) or episode_tasks < 1:
                raise ValueError(f"episode_tasks must be a positive integer, got {episode_tasks!r}")
            sc = dataclasses.replace(sc, episode_tasks=int(episode_tasks))
        if noise is not None:
            if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not math.isfinite(noise) or noise < 0:
                raise ValueError(f"noise must be a finite number >= 0, got {noise!r}")
            sc = dataclasses.replace(sc, noise=float(noise))
        if trace is not None:
            if not isinstance(trace, str):
                raise ValueError(f"trace must be a trace name or a CSV path, got {trace!r}")
            sc = dataclasses.replace(sc, workload=dataclasses.replace(sc.workload, trace=trace))
        if hardware is not None:
            sc = dataclasses.replace(sc, hardware=str(hardware))
        if variant is not None:
            sc = dataclasses.replace(sc, variant=resolve_variant(variant))
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {', '.join(REWARDS)}, got {reward!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        if sc.workload.trace is not None:
            generate_episode(sc, np.random.default_rng(0), 1)   # fail now on a bad trace
        self.scenario = sc
        self.reward_kind = reward
        self.reference = bool(reference)
        self.render_mode = render_mode
        self.hardware = load_hardware(sc.hardware)
        self.model = get_model(sc.model)
        self.variant = variant_label(sc.variant)
        stages = build_stages(sc.variant)
        device_names = self.hardware.device_names
        for fault in sc.faults:
            self.hardware.device_id(fault.device)   # unknown device -> ValueError
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
        # Constants of the hot path, looked up once (the model's weight size is a computed property).
        self._weight_bytes = self.model.weight_bytes
        self._device_memory = tuple(profile.memory for profile in self.hardware.devices)
        self._mask_memo: tuple[tuple[int, tuple[bool, ...]], np.ndarray] | None = None
        self.observation_space = spaces.Box(0.0, 1.0, (5 + 7 * d,), np.float32)
        self.action_space = self._make_action_space()
        self._episode: Episode | None = None
        self._index = 0
        self._last: tuple[Task, TaskResult, Shares, dict[str, Any]] | None = None

    # ------------------------------------------------------------------ actions
    def _make_action_space(self) -> spaces.Space:
        return spaces.MultiDiscrete([self.n_devices] * 3)

    def _requested_shares(self, action: Any) -> Shares:
        """Validate an action into per-stage (device, fraction) shares."""
        arr = np.asarray(action)
        if arr.shape == (3,) and arr.dtype.kind in "iu":    # fast path: what SB3 and sample() give
            ids = arr.tolist()
            if min(ids) >= 0 and max(ids) < self.n_devices:
                return tuple(((i, 1.0),) for i in ids)
        if arr.shape != (3,):
            raise ValueError(f"action must have shape (3,) (a device per stage), got shape {arr.shape}")
        if not np.issubdtype(arr.dtype, np.integer):
            if not np.all(np.isfinite(arr.astype(float))) or np.any(arr != np.round(arr)):
                raise ValueError(f"action must hold integer device ids, got {action!r}")
        ids = arr.astype(np.int64)
        if np.any(ids < 0) or np.any(ids >= self.n_devices):
            raise ValueError(f"action entries must be device ids in 0..{self.n_devices - 1}, got {action!r}")
        return tuple(((int(i), 1.0),) for i in ids)

    def stage_masks(self) -> np.ndarray:
        """(3, D) bool: may stage s run on device d for the current task?"""
        self._require_reset()
        online = tuple(self.sim.state.online)
        key = (self._index, online)
        if self._mask_memo is not None and self._mask_memo[0] == key:   # action_masks() then step()
            return self._mask_memo[1].copy()
        task = self._current_task()
        weights = self._weight_bytes
        memory = self._device_memory
        devices = range(self.n_devices)
        rows = []
        for stage in self.sim.stages:
            work = stage.work(task, self.model)
            need = work.footprint + (weights if work.needs_weights else 0.0)
            row = [online[dev] and need <= memory[dev] for dev in devices]
            if not any(row):
                # Nothing can hold it: allow the online device with the most memory (it will be slow).
                candidates = [i for i in devices if online[i]] or list(devices)
                row[max(candidates, key=memory.__getitem__)] = True
            rows.append(row)
        masks = np.array(rows, dtype=bool)
        self._mask_memo = (key, masks)
        return masks.copy()

    def action_masks(self) -> np.ndarray:
        """Flat mask over [stage0 devices, stage1 devices, stage2 devices] for MaskablePPO."""
        return self.stage_masks().reshape(-1)

    def _dispatch(self, shares: Shares, masks: np.ndarray) -> tuple[Shares, int]:
        """Replace masked devices by the available one with the smallest backlog."""
        busy = self.sim.state.busy_until
        failed = 0
        out = []
        for s, stage_shares in enumerate(shares):
            fixed: dict[int, float] = {}
            for dev, frac in stage_shares:
                if not masks[s, dev]:
                    failed += 1
                    valid = [i for i in range(self.n_devices) if masks[s, i]]
                    dev = min(valid, key=lambda i: (busy[i], i))
                fixed[dev] = fixed.get(dev, 0.0) + frac
            out.append(tuple(sorted(fixed.items())))
        return tuple(out), failed

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._episode = generate_episode(self.scenario, self.np_random, self.scenario.episode_tasks)
        self.sim.reset()
        self._index = 0
        self._speed = [1.0] * self.n_devices
        self._hit_rate = 0.0
        self._prev = np.zeros((3, self.n_devices), dtype=np.float32)
        self._last = None
        self._mask_memo = None
        self._apply_faults()
        return self._observation(), {"task": self._task_info(self._current_task())}

    def step(self, action: Any):
        self._require_reset()
        assert self._episode is not None
        requested = self._requested_shares(action)
        task = self._current_task()
        noise = tuple(self._episode.noise[self._index].tolist())   # floats: faster than numpy scalars
        masks = self.stage_masks()
        shares, failed = self._dispatch(requested, masks)
        penalty = failed * self.scenario.failed_dispatch_s
        info: dict[str, Any] = {}
        if self.reference or self.reward_kind == "relative":
            info.update(self.planner.references(task, noise, masks, penalty))
        res = self.sim.run(task, shares, noise, extra_overhead=penalty)
        self._observe(res, shares)
        if self.reward_kind == "latency":
            reward = -res.latency
        else:
            reward = 1.0 - res.latency / info["static_latency"]
        info.update(self._step_info(task, res, shares, failed))
        self._last = (task, res, shares, info)
        self._index += 1
        truncated = self._index >= len(self._episode.tasks)
        if not truncated:
            self._apply_faults()
        obs = self._observation()
        return obs, float(reward), False, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        if self._last is None:
            return "no task placed yet"
        task, res, shares, info = self._last
        parts = " ".join(f"{k}={v:.3f}" for k, v in res.breakdown().items())
        hit = {None: "-", True: "hit", False: "miss"}[res.cache_hit]
        return (f"task {self._index - 1:4d} B={task.batch:<3d} n={task.prompt_tokens:<6d} "
                f"m={task.output_tokens:<5d} {self._placement_label(shares):<24s} "
                f"latency={res.latency:8.3f}s [{parts}] cache={hit}")

    # ------------------------------------------------------------------ internals
    def _require_reset(self) -> None:
        if self._episode is None:
            raise RuntimeError("call reset() before step(): the environment has no task stream yet")
        if self._index >= len(self._episode.tasks):
            raise RuntimeError("the episode is over (truncated); call reset() to start a new one")

    def _current_task(self) -> Task:
        assert self._episode is not None
        return self._episode.tasks[min(self._index, len(self._episode.tasks) - 1)]

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

    def _observe(self, res: TaskResult, shares: Shares) -> None:
        """Update what the agent can measure: speed ratios, cache hit rate, last placement."""
        for s in (1, 2):   # prefill and decode: compute-dominated, so they reveal device speed
            dev, observed = res.stage_device[s], res.stage_time[s]
            if observed > 0:
                expected = self.nominal_sim.stage_seconds(res.works[s], dev, res.stage_fraction[s])
                ratio = expected / observed
                self._speed[dev] += SPEED_EMA * (ratio - self._speed[dev])
        if res.cache_hit is not None:
            self._hit_rate += HIT_EMA * (float(res.cache_hit) - self._hit_rate)
        self._prev[:] = 0.0
        for s, stage_shares in enumerate(shares):
            for dev, frac in stage_shares:
                self._prev[s, dev] = frac

    def _observation(self) -> np.ndarray:
        task = self._current_task()
        st = self.sim.state
        d = self.n_devices
        hit = self.sim.cache_would_hit(task)
        values = [min(task.batch / 64.0, 1.0), min(task.prompt_tokens / 32768.0, 1.0),
                  min(task.output_tokens / 2048.0, 1.0), 0.5 if hit is None else float(hit)]
        now = task.arrival
        weights = self._weight_bytes
        for i, memory in enumerate(self._device_memory):
            backlog = max(0.0, st.busy_until[i] - now)
            free = 1.0 - (weights / memory if st.resident[i] else 0.0)
            values += (backlog / (backlog + BACKLOG_SCALE_S), min(max(free, 0.0), 1.0),
                       float(st.online[i]), min(max(self._speed[i] / 2.0, 0.0), 1.0))
        values.append(self._hit_rate)
        obs = np.empty(5 + 7 * d, dtype=np.float32)
        obs[:5 + 4 * d] = values     # float64 -> float32, rounded as element-wise assignment does
        obs[5 + 4 * d:] = self._prev.reshape(-1)
        return obs

    def _placement_label(self, shares: Shares) -> str:
        names = self.device_names
        return ",".join("+".join(f"{names[dev]}" if frac == 1.0 else f"{names[dev]}:{frac:.2f}"
                                 for dev, frac in stage) for stage in shares)

    def _task_info(self, task: Task) -> dict[str, Any]:
        return {"batch": task.batch, "prompt_tokens": task.prompt_tokens,
                "output_tokens": task.output_tokens, "domain": task.domain, "arrival": task.arrival}

    def _step_info(self, task: Task, res: TaskResult, shares: Shares, failed: int) -> dict[str, Any]:
        elapsed = max(res.finish, 1e-9)
        busy = self.sim.state.busy_time
        share = [0.0] * self.n_devices
        for stage_shares in shares:
            for dev, frac in stage_shares:
                share[dev] += frac / 3.0
        names = self.device_names
        return {
            "latency": res.latency,
            "breakdown": res.breakdown(),
            "placement": tuple(self._placement_label((st,)) for st in shares),
            "cache_hit": res.cache_hit,
            "utilisation": {n: min(busy[i] / elapsed, 1.0) for i, n in enumerate(names)},
            "share": dict(zip(names, share, strict=True)),
            "failed_dispatch": failed,
            "attention_s": res.attention,
            "task": self._task_info(task),
        }


assert STAGES == ("load", "prefill", "decode")
