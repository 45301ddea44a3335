"""Reference latencies for a step: the best static placement and the per-step oracle.

* best static: the single-device-per-stage placement with the lowest mean
  latency on a calibration workload of the scenario, simulated with the
  *nominal* figures (what a planner can know before deployment). Searched once
  per (scenario, hardware, variant) and kept for the process.
* oracle: every placement tried for this task on a copy of the current state
  with the *true* figures and the task's own noise; the lowest latency wins.
  It is myopic -- best for this task now, not for the stream.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np

from envs.workload import generate_episode
from inference.simulator import Shares, Simulator

if TYPE_CHECKING:
    from envs.inference_alloc import InferenceAllocEnv

CALIBRATION_TASKS = 300
CALIBRATION_SEED = 20231116
_BEST_STATIC: dict[str, tuple[int, ...]] = {}


def all_placements(n_devices: int) -> list[tuple[int, int, int]]:
    return list(itertools.product(range(n_devices), repeat=3))  # type: ignore[arg-type]


def as_shares(placement: tuple[int, ...]) -> Shares:
    return tuple(((int(dev), 1.0),) for dev in placement)


def mean_latency(sim: Simulator, tasks: Any, placement: tuple[int, ...]) -> float:
    """Mean latency of a fixed placement over a task stream, from a fresh cluster."""
    sim.reset()
    shares = as_shares(placement)
    total = 0.0
    for task in tasks:
        total += sim.run(task, shares).latency
    sim.reset()
    return total / max(len(tasks), 1)


def search_best_static(env: InferenceAllocEnv) -> tuple[int, ...]:
    """The best static placement for the env's configuration, by nominal simulation."""
    key = repr((env.scenario, env.hardware.name, env.variant))
    if key not in _BEST_STATIC:
        calib = dict(noise=0.0)
        scenario = env.scenario.__class__(**{**env.scenario.__dict__, **calib})
        tasks = generate_episode(scenario, np.random.default_rng(CALIBRATION_SEED), CALIBRATION_TASKS).tasks
        sim = Simulator(env.nominal_sim.hardware, env.model, env.sim.stages, env.sim.config)
        weights = env.model.weight_bytes
        feasible = []
        for placement in all_placements(env.n_devices):
            ok = True
            for s, dev in enumerate(placement):
                work = env.sim.stages[s].work(tasks[0], env.model)
                need = work.footprint + (weights if work.needs_weights else 0.0)
                ok &= need <= env.hardware.devices[dev].memory
            if ok:
                feasible.append(placement)
        _BEST_STATIC[key] = min(feasible or all_placements(env.n_devices),
                                key=lambda p: mean_latency(sim, tasks, p))
    return _BEST_STATIC[key]


class ReferencePlanner:
    """Computes the static and oracle references of the env's current step."""

    def __init__(self, env: InferenceAllocEnv) -> None:
        self.env = env
        self._static: tuple[int, ...] | None = None

    @property
    def best_static(self) -> tuple[int, ...]:
        if self._static is None:
            self._static = search_best_static(self.env)
        return self._static

    def references(self, task: Any, noise: Any, masks: Any, penalty: float,
                   works: Any = None) -> dict[str, Any]:
        """`masks`: the env's stage masks (rows of per-device bools); `works`: the task's work
        records for this state (see `Simulator.run`), shared by all the runs priced here."""
        env = self.env
        sim = env.sim
        static_shares, failed = env._dispatch(as_shares(self.best_static), masks)
        overhead = failed * env.scenario.failed_dispatch_s
        static = sim.run(task, static_shares, noise, commit=False, extra_overhead=overhead,
                         works=works).latency
        out: dict[str, Any] = {"static_latency": static,
                               "static_placement": tuple(env.device_names[d] for d in self.best_static)}
        if env.reference:
            best, best_placement = float("inf"), None
            for placement in all_placements(env.n_devices):
                if not all(masks[s][d] for s, d in enumerate(placement)):
                    continue
                latency = sim.run(task, as_shares(placement), noise, commit=False,
                                  works=works).latency
                if latency < best:
                    best, best_placement = latency, placement
            assert best_placement is not None
            out["oracle_latency"] = best
            out["oracle_placement"] = tuple(env.device_names[d] for d in best_placement)
        return out
