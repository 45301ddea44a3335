"""The online deployment harness: where the 200-sample stabilisation problem shows.

``deploy(agent, env, n_samples)`` runs an agent on a live task stream from
sample 0, learning as it goes (SB3 agents update every ``n_steps`` tasks), and
records the latency of every sample. The best-static policy and the oracle are
run on the same stream (same seed, so the same tasks and noise), so each
sample has its references.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

from agents.base import StreamActor, start_stream_of
from envs.scenario_mix import ScenarioMixEnv
from inference.checks import is_integer

EARLY_SAMPLES = 200
WINDOW = 50
STABLE_TOLERANCE = 0.05
STEADY_SAMPLES = 200
#: The metrics that count samples: whole on each seed (floats, so that one never reached is
#: NaN), printed as counts (stabilization.md: one seed's whole, a mean over seeds to 0.1).
SAMPLE_COUNTS = ("samples_to_stabilise", "samples_to_0.9_static")


def rolling_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Mean of each full window of `window` consecutive samples (length len(x) - window + 1)."""
    if len(x) < window:
        return np.array([float(np.mean(x))]) if len(x) else np.array([])
    c = np.cumsum(np.insert(np.asarray(x, dtype=float), 0, 0.0))
    return (c[window:] - c[:-window]) / window


def unsettled(stabilise: Sequence[float], n_samples: int, window: int = WINDOW) -> int:
    """How many of the runs' `samples_to_stabilise` are censored: runs of `n_samples` whose
    last window was still outside the band, which report the run's length (a lower bound).
    A run no longer than a window has that one window and reports its length too: settled."""
    if n_samples <= window:
        return 0
    return sum(1 for value in stabilise if value >= n_samples)


@dataclass
class OnlineResult:
    """Per-sample latencies of an agent and of its references on one task stream.

    `conservative_acting`: per sample, whether the warm-up's conservative policy placed it
    (`deploy` of a learner with a warm-up; None otherwise); `static_here`: best-static's
    latency in the agent's own state, each sample (what the stabilisation is measured on)."""

    latency: np.ndarray
    static: np.ndarray
    oracle: np.ndarray
    conservative_acting: np.ndarray | None = None
    static_here: np.ndarray | None = None

    def metrics(self, early: int = EARLY_SAMPLES, window: int = WINDOW) -> dict[str, float]:
        """The harness's metrics.

        - early_degradation: mean latency of samples 1..`early` over static's on the same tasks
          (> 1: worse than static while learning).
        - early_drop: 1 - static / agent over the same samples: the share of throughput lost.
        - worst_window: the highest `window`-sample rolling mean of the agent over the same
          window of static.
        - samples_to_stabilise: the first sample after which the `window`-sample rolling mean
          of the agent's per-sample latency ratio to static stays within 5% of its mean over
          the last 200 samples. The ratio, not the raw latency, so that the sizes of the
          tasks (which vary 10x) do not count as instability. Static's latency is the same
          task's under best-static *in the agent's own state* (``static_here``: the env's
          per-step ``static_latency``) when it was recorded, else static's on its own run;
          in the agent's own state the queueing both see cancels. On held-out seeds
          10000-10004 the seed-mean curves of heft-calibrated and the oracle, which do not
          learn, are then stable from the first window (against static's own run: from
          sample 588 of 600, the queue bursts of two trajectories keeping 50-sample windows
          10-20% apart). On one stream their gain still swings with the load (50-553):
          a mean over seeds of this metric, each seed's own curve, is not the mean curve's.
          The cancelling also hides a backlog the agent built itself: static, priced behind
          it, waits as long, so a learner that overloads a near-capacity stream reads as
          settled (ratio ~1) while its latency grows; steady_vs_static shows it (azure-conv
          at trace_time_scale 0.05, 300 samples: cold PPO settled at 50, 70x static).
          A run whose last window is still outside the band gives its length: it has not
          settled within the run, and the number is a lower bound (censored, not NaN, so
          that a mean over seeds counts it as late rather than dropping it).
        - samples_to_0.9_static: the last sample of the first window whose worst_window
          ratio (the agent's rolling mean over static's own run's) is 0.9 or below (NaN if
          never: a mean over seeds leaves that seed out).
        - steady_vs_static / steady_vs_oracle: mean latency over the last 200 samples over
          static's / the oracle's on the same samples.
        """
        lat, static, oracle = self.latency, self.static, self.oracle
        for name, value in (("early", early), ("window", window)):
            if not is_integer(value) or value < 1:
                raise ValueError(f"metrics: {name} must be an integer >= 1, got {value!r}")
        if len(lat) == 0:
            raise ValueError("metrics of an empty run: deploy at least one sample")
        # every ratio below compares sample i with the references' sample i
        lengths = {"static": len(static), "oracle": len(oracle)}
        if self.static_here is not None:
            lengths["static_here"] = len(self.static_here)
        if any(n != len(lat) for n in lengths.values()):
            raise ValueError(f"metrics: the run has {len(lat)} samples but its references "
                             f"{lengths}: they must be of the same tasks")
        e = min(early, len(lat))
        ratio = rolling_mean(lat, window) / rolling_mean(static, window)
        steady = min(STEADY_SAMPLES, len(lat))
        steady_mean = float(np.mean(lat[-steady:]))
        per_sample = lat / (self.static_here if self.static_here is not None else static)
        roll = rolling_mean(per_sample, window)
        outside = np.abs(roll / np.mean(per_sample[-steady:]) - 1.0) > STABLE_TOLERANCE
        stabilise = int(np.nonzero(outside)[0][-1] + window) if outside.any() else window
        reached = np.nonzero(ratio <= 0.9)[0]
        return {
            "early_degradation": float(np.mean(lat[:e]) / np.mean(static[:e])),
            "early_drop": float(1.0 - np.mean(static[:e]) / np.mean(lat[:e])),
            "worst_window": float(np.max(ratio)),
            "samples_to_stabilise": float(min(stabilise, len(lat))),
            # a run shorter than a window has one, over all of it: report no sample past its end
            "samples_to_0.9_static": float(min(reached[0] + window, len(lat))) if len(reached)
            else float("nan"),
            "steady_vs_static": float(steady_mean / np.mean(static[-steady:])),
            "steady_vs_oracle": float(steady_mean / np.mean(oracle[-steady:])),
        }


#: The step-info keys the harness's curves read (`_curves`). A recorder keeps these alone: a
#: whole info (breakdown, utilisation, task, ...) is ~1.8 kB, so a million-sample stream
#: held ~1.8 GB to yield two floats a sample.
CURVE_KEYS = ("latency", "static_latency")


def _curve_fields(info: dict[str, Any]) -> dict[str, Any]:
    return {key: info[key] for key in CURVE_KEYS if key in info}


class _Recorder(BaseCallback):
    def __init__(self, controller: Any = None) -> None:
        super().__init__()
        self.infos: list[dict[str, Any]] = []   # each step's `_curve_fields`
        self.conservative: list[bool] = []
        self.controller = controller

    def _on_step(self) -> bool:
        self.infos.append(_curve_fields(self.locals["infos"][0]))
        if self.controller is not None:
            self.conservative.append(bool(self.controller.last_conservative))
        return True


def rollout(policy: Any, env: Any, n_samples: int, seed: int,
            keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The step infos of the first n_samples tasks of the stream `seed` under `policy`
    (each passed through `keep` when given, which may drop what the caller does not read).

    `env` is stepped as given: its wrappers (an observation wrapper the policy sees through,
    a TimeLimit) act as they do when the policy learns on it.
    """
    start_stream_of(policy, seed)
    actor = StreamActor(policy, env)
    obs, _ = env.reset(seed=seed)
    infos = []
    for i in range(n_samples):
        action = actor.act(obs)
        obs, _, terminated, truncated, info = env.step(action)
        infos.append(info if keep is None else keep(info))
        if (terminated or truncated) and i + 1 < n_samples:
            raise ValueError(f"the env's episode ended after {i + 1} tasks; this needs "
                             f"episodes of >= n_samples ({n_samples}) tasks: raise its "
                             f"episode_tasks (or its TimeLimit)")
    return infos


def run_policy(policy: Any, env: Any, n_samples: int, seed: int) -> np.ndarray:
    """Latency of each of the first n_samples tasks of the stream `seed` under `policy`."""
    return _rollout_curves(policy, env, n_samples, seed)[0]


def _rollout_curves(policy: Any, env: Any, n_samples: int, seed: int
                    ) -> tuple[np.ndarray, np.ndarray | None]:
    """`_curves` of a `rollout` that keeps only the fields they read."""
    return _curves(rollout(policy, env, n_samples, seed, _curve_fields))


def _curves(infos: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-step latencies, and static's in the same state if the env priced it at every step."""
    latency = np.array([info["latency"] for info in infos], dtype=float)
    here = np.array([info.get("static_latency", np.nan) for info in infos], dtype=float)
    return latency, (here if len(here) and np.all(np.isfinite(here)) else None)


def _check_episodes(base: Any, n_samples: int) -> None:
    """Refuse, before anything runs, an env whose episode holds fewer than n_samples tasks: in
    a mix (``InferenceAllocMix-v0``) each scenario's, whichever a stream's seed draws, naming
    the short one (its first scenario's alone was read)."""
    if not isinstance(base, ScenarioMixEnv):
        if base.scenario.episode_tasks < n_samples:
            raise ValueError(f"env episode_tasks={base.scenario.episode_tasks} < n_samples="
                             f"{n_samples}: make the env with episode_tasks >= n_samples")
        return
    for name, scenario_env in zip(base.names, base.envs, strict=True):
        if scenario_env.scenario.episode_tasks < n_samples:
            raise ValueError(f"env episode_tasks={scenario_env.scenario.episode_tasks} of "
                             f"scenario {name!r} < n_samples={n_samples}: a mix plays any of "
                             f"its scenarios on a stream; make the env with episode_tasks >= "
                             f"n_samples (it sets every scenario's)")


def deploy(agent: Any, env: Any, n_samples: int, learn: bool = True, seed: int = 0,
           references: bool = True) -> OnlineResult:
    """Run `agent` on the live stream `seed` for n_samples tasks, learning as it goes.

    `env` is the env the agent was built on (for SB3 agents, the one make_sb3 wrapped);
    its episode must hold at least n_samples tasks. With `references`, best-static and the
    oracle run on the same stream first.
    """
    from agents.registry import make_policy

    if not is_integer(n_samples) or n_samples < 1:
        raise ValueError(f"n_samples must be an integer >= 1, got {n_samples!r}")
    base = env.unwrapped
    _check_episodes(base, n_samples)
    model = getattr(agent, "model", None) if learn else None    # None: it acts, not learns
    if model is not None and (n_envs := model.get_env().num_envs) != 1:
        # learn(n_samples) then stepped each sub-env n_samples / n_envs times and the
        # recorder kept sub-env 0's: a curve shorter than its references, which metrics()
        # compared sample by sample with other tasks' (or broadcast a window of one).
        # Refused before the references run, not after.
        raise ValueError(f"deploy runs one live task stream, but the agent learns on "
                         f"{n_envs} envs: build it on the single env (make_sb3 without "
                         f"vec_env)")
    static = oracle = np.full(n_samples, np.nan)
    if references:
        # the references act in the bare env's spaces and on its own observations (the
        # oracle checks them against the current task), whatever the agent sees through
        static = run_policy(make_policy("best-static", base), base, n_samples, seed)
        oracle = run_policy(make_policy("oracle", base), base, n_samples, seed)
    if model is not None:
        controller = getattr(agent, "warmup", None)
        recorder = _Recorder(controller)
        model.get_env().seed(seed)
        agent.learn(n_samples, callback=recorder, reset_num_timesteps=True)
        latency, here = _curves(recorder.infos[:n_samples])
        acting = np.asarray(recorder.conservative[:n_samples]) if controller is not None else None
    else:
        latency, here = _rollout_curves(agent, env, n_samples, seed)
        acting = None
    return OnlineResult(latency, static, oracle, acting, here)
