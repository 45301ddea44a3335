"""The article's job: one pipeline variant, one allocator, a stream of requests.

The article's "single task" is a *job* here: ``JOB_TASKS`` requests of the
``article`` scenario sent by ``JOB_CLIENTS`` closed-loop clients (each sends
its next request when its previous one finishes, as a benchmark's load
generator does), run by one pipeline variant under one allocator; the job's
time is its makespan (last finish minus first arrival), so it measures
throughput. ``clients=0`` runs the open-loop job instead: ``OPEN_LOOP_TASKS``
requests submitted ``JOB_TIME_SCALE`` times faster than the live rate.

An allocator is a policy name (``agents.registry``) or one of ``LEARNERS``,
which learn online from the job's first request.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from agents.config import ARTICLE_JOB_TASKS
from agents.online import rollout
from agents.registry import make_policy, policy_env_id
from agents.sb3_factory import make_sb3
from agents.warmup import WarmupConfig
from envs.scenario import Scenario, load_scenario

JOB_TASKS = ARTICLE_JOB_TASKS     # agents.config's, which checks --article-clients against it
JOB_CLIENTS = 3          # K > 0: K closed-loop clients; 0: open loop at JOB_TIME_SCALE x the live rate
JOB_TIME_SCALE = 3.25
OPEN_LOOP_TASKS = 300
VARIANTS = {"glm": "glm-5.3", "flash": "glm-5.3-flash", "opt": "glm-5.3-flash-opt"}
SPEED_ENTRY = 7          # observation index of device 0's speed ratio; + 4 per device


class NominalBeliefs(gym.ObservationWrapper):
    """Hide the measured speed ratios: the allocator sees every device at its spec sheet."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        n = env.unwrapped.n_devices  # type: ignore[attr-defined]
        self._entries = [SPEED_ENTRY + 4 * d for d in range(n)]

    def observation(self, observation: np.ndarray) -> np.ndarray:
        obs = np.array(observation, copy=True)
        obs[..., self._entries] = 0.5      # ratio 1.0, scaled by 1/2
        return obs

    def action_masks(self) -> np.ndarray:
        return self.env.unwrapped.action_masks()  # type: ignore[attr-defined]


@dataclass
class JobRun:
    """What one job left behind: the per-task infos."""

    infos: list[dict[str, Any]] = field(default_factory=list)

    @property
    def makespan(self) -> float:
        arrivals = np.array([i["task"]["arrival"] for i in self.infos])
        finishes = arrivals + np.array([i["latency"] for i in self.infos])
        return float(finishes.max() - arrivals.min())

    def total(self, key: str, where: Any = None) -> float:
        rows = [i for i in self.infos if where is None or where(i)]
        return float(sum(i[key] if key in i else i["breakdown"][key] for i in rows))

    @property
    def npu_ratio(self) -> float:
        """The NPU speed the env measured (true / nominal) by the job's last task."""
        ratios = self.infos[-1].get("speed_ratio", {}) if self.infos else {}
        return float(ratios.get("npu", float("nan")))

    def hit_rate(self) -> float:
        hits = [i["cache_hit"] for i in self.infos if i["cache_hit"] is not None]
        return float(np.mean(hits)) if hits else float("nan")


class _Collect(BaseCallback):
    def __init__(self, run: JobRun, limit: int) -> None:
        super().__init__()
        self.run, self.limit = run, limit

    def _on_step(self) -> bool:
        if len(self.run.infos) < self.limit:
            self.run.infos.append(self.locals["infos"][0])
        return True


def job_scenario(time_scale: float = JOB_TIME_SCALE, clients: int = JOB_CLIENTS) -> Scenario:
    """The article scenario, its requests sent `time_scale` times faster than its live rate
    (open loop) or, with `clients` > 0, by that many closed-loop clients."""
    sc = load_scenario("article")
    w = sc.workload
    if clients:
        return dataclasses.replace(sc, workload=dataclasses.replace(w, clients=clients))
    return dataclasses.replace(sc, workload=dataclasses.replace(
        w, arrival_rate=w.arrival_rate * time_scale))


LEARNERS = {   # allocator -> (env id, warm-up or None: learns from a cold start, nominal beliefs)
    "ppo-cold": ("envs:InferenceAlloc-v0", None),
    "ppo-warm": ("envs:InferenceAlloc-v0", WarmupConfig()),
    "ppo-warm-split": ("envs:InferenceAllocSplit-v0", WarmupConfig(conservative="heft-split")),
}


def run_job(variant: str, allocator: str, seed: int, n_tasks: int = JOB_TASKS,
            time_scale: float = JOB_TIME_SCALE, clients: int = JOB_CLIENTS) -> JobRun:
    """Run one job. `allocator`: a policy name, or one of LEARNERS (learning online)."""
    env_id, warmup = LEARNERS.get(allocator, (f"envs:{policy_env_id(allocator)}", None))
    env = gym.make(env_id, scenario=job_scenario(time_scale, clients),
                   variant=VARIANTS.get(variant, variant),
                   episode_tasks=n_tasks, reward="relative")
    run = JobRun()
    if allocator in LEARNERS:
        learn_env = env if warmup is not None else NominalBeliefs(env)
        agent = make_sb3("ppo", learn_env, seed=seed, warmup=warmup)
        vec_env = agent.model.get_env()
        assert vec_env is not None
        vec_env.seed(seed)
        agent.learn(n_tasks, callback=_Collect(run, n_tasks), reset_num_timesteps=True)
    else:
        run.infos = rollout(make_policy(allocator, env), env, n_tasks, seed)
    return run
