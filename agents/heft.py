"""HEFT-style earliest-finish-time placement, from what an agent can observe.

HEFT (Heterogeneous Earliest Finish Time) is the classic list-scheduling
heuristic for heterogeneous processors. Here the "task graph" of an inference
task is the chain load -> prefill -> decode, so HEFT reduces to: in pipeline
order, put each stage on the allowed device where it would *finish* first,

    finish(s, d) = max(ready(s, d), backlog(d)) + time(s, d) [+ set-up if d did not run s last]
    ready(s, d)  = finish of stage s-1 (+ moving its output over the link if it ran elsewhere,
                   + copying the weights if d does not hold them and the stage needs them)

and go on to the next stage from that device's finish time. Everything comes
from the observation -- task size, cache signal, backlogs, online flags,
weight residency (free memory), measured speed ratios -- plus the *nominal*
cost model (``env.nominal_sim.stage_seconds``): the spec-sheet figures a
heuristic would be built from, and each device's known set-up cost for a stage
it did not run for the previous task. It knows nothing of the noise or the
memory contention between devices.

Two variants:

* ``heft``: nominal stage times. It under-prices the NPU, which really is ~15%
  faster than its datasheet (the article's 15% underestimate).
* ``heft-calibrated``: divides each device's stage time by the speed ratio the
  env *measured* for it (observation entry ``7 + 4d``, times 2): the article's
  "heterogeneous hardware awareness". With the NPU measured faster than nominal
  it prices the NPU right; when every ratio is nominal (1.0) it is plain HEFT.
  The env measures one ratio per device, on the stage time it observes (prefill
  where the device ran it), and this divides every stage by it: a memory-bound
  decode, which the NPU's faster compute does not speed up, it prices about 15%
  too fast there (e.g. 9.1 s for a decode that takes 10.5 s).

The device masks are rebuilt from the observation (online flag, and whether the
stage's memory footprint plus weights fits the device) exactly as
``env.stage_masks()`` builds them, so HEFT works on batched observations from a
VecEnv and on hand-built observations; masks passed as ``action_masks=`` (as
sb3-contrib's evaluation passes them) take precedence.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from agents.base import Policy
from agents.static import check_own_spaces, is_split, placement_action, unwrap_env
from envs.observation import (
    SPEED_SCALE,
    check_in_box,
    decode_backlog,
    decode_task,
    device_entries,
    previous_entries,
)
from inference.task import Task

_CACHE_LIMIT = 16384        # memoised (task size, cache signal) -> stage costs


class _StageCosts(NamedTuple):
    batch: int                             # the task's batch, as observed (capped at 64)
    times: tuple[tuple[float, ...], ...]   # nominal seconds per stage per device
    fixed: tuple[tuple[float, ...], ...]   # the part of `times` any share pays (weights, launches)
    output_bytes: tuple[float, float, float]
    needs_weights: tuple[bool, bool, bool]
    fits: tuple[tuple[bool, ...], ...]      # per stage per device: footprint (+ weights) fits
    io_time: float                         # the disk read before loading


class HeftPolicy(Policy):
    """Earliest-finish-time placement per stage (see the module docstring).

    Args:
        env: an InferenceAlloc env, a wrapper around one or a VecEnv of them: only its
            configuration is read (hardware, links, cost model, pipeline variant), once.
        calibrated: divide each device's stage times by its measured speed ratio.
    """

    def __init__(self, env: Any, calibrated: bool = False) -> None:
        base = unwrap_env(env)
        self.calibrated = bool(calibrated)
        self.name = "heft-calibrated" if self.calibrated else "heft"
        # built directly (not by make_policy), a wrapper that changes the spaces went unseen
        check_own_spaces(env, type(self).__name__)
        self.n_devices = d = base.n_devices
        self.split = is_split(env)
        self.obs_dim = 5 + 7 * d
        hw = base.hardware
        self._nominal = base.nominal_sim
        self._stages = base.sim.stages
        self._model = base.model
        self._weights = float(base.model.weight_bytes)
        self._memory = [float(p.memory) for p in hw.devices]
        self._prefetch = base.sim.config.prefetch_depth > 0
        # Moving a stage to a device that did not run it for the previous task costs a set-up
        # (graph capture, allocator): a known configuration cost, priced like any other.
        self._setup = [float(base.sim.config.replacement_overhead_s) + p.setup_s
                       for p in hw.devices]
        self._disk_bw = float(hw.disk_bandwidth)
        inf = math.inf
        self._lat = [[0.0 if a == b else (hw.links[(a, b)].latency if (a, b) in hw.links else inf)
                      for b in range(d)] for a in range(d)]
        self._inv_bw = [[0.0 if a == b else (1.0 / hw.links[(a, b)].bandwidth
                                             if (a, b) in hw.links else inf)
                         for b in range(d)] for a in range(d)]
        # A resident device shows free memory 1 - weights/memory; one without the weights shows 1.
        self._resident_below = [1.0 - 0.5 * min(self._weights / m, 1.0) for m in self._memory]
        self._peers = [[j for j, q in enumerate(hw.devices) if j != i
                        and q.memory_domain == p.memory_domain] for i, p in enumerate(hw.devices)]
        self._costs: dict[tuple[int, int, int, bool | None], _StageCosts] = {}

    # ------------------------------------------------------------------ cost model
    def _stage_costs(self, batch: int, prompt: int, output: int, hit: bool | None) -> _StageCosts:
        key = (batch, prompt, output, hit)
        costs = self._costs.get(key)
        if costs is not None:
            return costs
        task = Task(batch, prompt, output)
        load = self._stages[0]
        model = self._model
        works = (load.load_work(task, model, hit), self._stages[1].work(task, model),
                 self._stages[2].work(task, model))
        mask_works = (load.work(task, model), works[1], works[2])   # as env.stage_masks() sizes
        seconds = self._nominal.stage_seconds
        devices = range(self.n_devices)
        fits = []
        for w in mask_works:
            need = w.memory_need(self._weights)
            fits.append(tuple(need <= self._memory[i] for i in devices))
        costs = _StageCosts(
            batch=batch,
            times=tuple(tuple(seconds(w, i) for i in devices) for w in works),
            fixed=tuple(tuple(seconds(w, i, 0.0) for i in devices) for w in works),
            output_bytes=(works[0].output_bytes, works[1].output_bytes, works[2].output_bytes),
            needs_weights=(works[0].needs_weights, works[1].needs_weights,
                           works[2].needs_weights),
            fits=tuple(fits),
            io_time=works[0].io_bytes / self._disk_bw,
        )
        if len(self._costs) >= _CACHE_LIMIT:
            self._costs.clear()
        self._costs[key] = costs
        return costs

    def _migration(self, dev: int, resident: list[bool]) -> float:
        """Seconds to bring the weights to `dev` (as the simulator copies them)."""
        if any(resident[p] for p in self._peers[dev]):
            return 0.0
        best = self._weights / self._disk_bw
        for src in range(self.n_devices):
            if resident[src] and src != dev:
                best = min(best, self._lat[src][dev] + self._weights * self._inv_bw[src][dev])
        return best

    # ------------------------------------------------------------------ the heuristic
    def placement(self, obs: Any, masks: Any = None) -> tuple[int, int, int]:
        """The HEFT placement (device per stage) for one observation.

        `masks`: optional (3, D) or flat (3 D,) bool of allowed devices; by default the
        masks the env would give, rebuilt from the observation. Of devices that would finish
        a stage at the same time, the one listed first takes it.
        """
        costs, avail, resident, speed, allowed, prev_block = self._context(obs, masks)
        has_prev = any(x > 0 for x in prev_block)
        chosen = [0, 0, 0]
        prev_dev, prev_finish, prev_out = -1, 0.0, 0.0
        for s in range(3):
            times = costs.times[s]
            best_dev, best_finish = -1, math.inf
            for i in allowed[s]:
                ready = self._ready(s, i, ((prev_dev, 1.0),), prev_finish, prev_out, costs,
                                    resident)
                duration = self._plus_fixed(times[i] / speed[i], s, i, prev_block, has_prev,
                                            costs)
                finish = (ready if ready > avail[i] else avail[i]) + duration
                if finish < best_finish:
                    best_dev, best_finish = i, finish
            chosen[s] = best_dev
            avail[best_dev] = best_finish
            if costs.needs_weights[s]:
                resident[best_dev] = True
            prev_dev, prev_finish, prev_out = best_dev, best_finish, costs.output_bytes[s]
        return (chosen[0], chosen[1], chosen[2])

    def _ready(self, s: int, dev: int, prev_shares: Any, prev_finish: float, prev_out: float,
               costs: _StageCosts, resident: list[bool]) -> float:
        """When stage s's input is on `dev`: every (device, fraction) share of the previous
        stage, done at `prev_finish`, sends its part of `prev_out` bytes; then the weights
        are copied there if the stage needs them and `dev` does not hold them."""
        if s == 0:
            ready = costs.io_time if self._prefetch else 0.0
        else:
            ready = max(prev_finish if a == dev else
                        prev_finish + self._lat[a][dev] + prev_out * f * self._inv_bw[a][dev]
                        for a, f in prev_shares)
        if costs.needs_weights[s] and not resident[dev]:
            ready += self._migration(dev, resident)
        return ready

    def _plus_fixed(self, seconds: float, s: int, dev: int, prev_block: list[float],
                    has_prev: bool, costs: _StageCosts) -> float:
        """`seconds` of stage s on `dev` plus what it pays besides the work: the set-up when
        `dev` ran no share of the stage for the previous task, and a synchronous disk read."""
        if has_prev and prev_block[self.n_devices * s + dev] <= 0:
            seconds += self._setup[dev]
        if s == 0 and not self._prefetch:
            seconds += costs.io_time      # a synchronous read blocks the load device
        return seconds

    def _context(self, obs: Any, masks: Any) -> tuple[_StageCosts, list[float], list[bool],
                                                      list[float], list[list[int]], list[float]]:
        """What one observation tells the heuristic: (stage costs, each device's backlog,
        whether it holds the weights, its speed ratio (1.0 unless calibrated), the allowed
        devices per stage, the previous placement block)."""
        v = np.asarray(obs, dtype=np.float64).reshape(-1).tolist()
        d = self.n_devices
        if len(v) != self.obs_dim:
            raise ValueError(f"observation has {len(v)} entries, this env's have {self.obs_dim}")
        check_in_box(v, self.name)
        costs = self._stage_costs(*decode_task(v))
        avail = [decode_backlog(x) for x in v[device_entries(d, "backlog")]]
        online = [x > 0.5 for x in v[device_entries(d, "online")]]
        resident = [x < below for x, below in zip(v[device_entries(d, "free_memory")],
                                                   self._resident_below, strict=True)]
        speed = ([max(SPEED_SCALE * x, 1e-3) for x in v[device_entries(d, "speed")]]
                 if self.calibrated else [1.0] * d)
        return costs, avail, resident, speed, self._allowed(costs, online, masks), v[previous_entries(d)]

    def _allowed(self, costs: _StageCosts, online: list[bool], masks: Any) -> list[list[int]]:
        d = self.n_devices
        if masks is not None:
            m = np.asarray(masks, dtype=bool).reshape(3, d)
            out = [[i for i in range(d) if m[s, i]] for s in range(3)]
            # An all-false row cannot be honoured; consider every device for that stage.
            return [row or list(range(d)) for row in out]
        out = []
        for s in range(3):
            row = [i for i in range(d) if online[i] and costs.fits[s][i]]
            if not row:   # as env.stage_masks(): the online device with the most memory
                candidates = [i for i in range(d) if online[i]] or list(range(d))
                row = [max(candidates, key=lambda i: self._memory[i])]
            out.append(row)
        return out

    def stage_masks(self, obs: Any) -> np.ndarray:
        """(3, D) bool: the env's stage masks as rebuilt from one observation."""
        v = np.asarray(obs, dtype=np.float64).reshape(-1).tolist()
        costs = self._stage_costs(*decode_task(v))
        online = [x > 0.5 for x in v[device_entries(self.n_devices, "online")]]
        masks = np.zeros((3, self.n_devices), dtype=bool)
        for s, row in enumerate(self._allowed(costs, online, None)):
            masks[s, row] = True
        return masks

    # ------------------------------------------------------------------ Policy API
    def _action(self, obs: Any, masks: Any) -> np.ndarray:
        """The env action for one observation (subclasses answer in their own format)."""
        return placement_action(self.placement(obs, masks), self.n_devices, self.split)

    def act(self, obs: np.ndarray) -> np.ndarray:
        return self._action(obs, None)

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True, action_masks: Any = None) -> tuple[np.ndarray, Any]:
        obs = np.asarray(observation, dtype=np.float32)
        if obs.ndim == 1:
            return self._action(obs, action_masks), state
        masks = None if action_masks is None else np.asarray(action_masks).reshape(len(obs), -1)
        return np.stack([self._action(o, None if masks is None else masks[k])
                         for k, o in enumerate(obs)]), state

    def config(self) -> dict[str, Any]:
        return {"calibrated": self.calibrated}

    @classmethod
    def from_config(cls, config: dict[str, Any], env: Any) -> HeftPolicy:
        calibrated = config.get("calibrated", False)
        if not isinstance(calibrated, bool):   # bool("x") loaded a file's typo as calibrated
            raise ValueError(f"'calibrated' must be true or false, got {calibrated!r}")
        return cls(env, calibrated=calibrated)

    def __repr__(self) -> str:
        return f"HeftPolicy({self.name!r})"
