"""Evaluation on held-out workloads: per-task latencies, summary statistics, the online study.

* ``episode_latencies``: run any policy (``predict``) for whole episodes of a seeded stream;
* ``episode_metrics``: per seed mean / p50 / p95 / p99 latency, ratio to best-static and gap
  to the oracle on the same episodes; ``AgentResult.row``: their mean and a 95% t-interval
  over seeds;
* ``online_study``: ``agents.online.deploy`` of learners from sample 0 beside the static,
  HEFT and oracle references on the same streams (the ~200-sample stabilisation).

Definitions used in every table:

- *ratio to best static*: an agent's mean latency over best-static's mean latency on the
  same episodes (same seed: same tasks and noise); < 1 is better than static;
- *gap to the oracle*: an agent's mean latency over the per-step oracle's on the same
  episodes, minus 1 (the oracle is myopic: a learner may beat it over a stream);
- *n*: how many samples a row's values are the mean of: one per held-out seed for a
  baseline, and for a model one per held-out seed and training run pooled under its label
  (summary.csv's ``runs`` counts those runs); each sample pools that seed's episodes;
- *95% CI*: half-width of the Student-t interval of the mean over the n samples (seeds, or
  seeds x training runs), ``t(0.975, n-1) * sd / sqrt(n)``; empty with one sample. A model's
  seeds x training runs are pooled as n samples, but they are not independent: every run is
  scored on the same held-out seeds, and a run's seeds share its training. The interval is
  then narrower than one over the runs' means (``t(0.975, runs-1)``), which the spread
  between training runs calls for: the table's note gives that one for the ratio to best
  static (summary.csv's ``vs_best_static_over_runs`` and its ``_ci95``).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import envs  # registers the env ids
from agents.base import StreamActor, start_stream_of
from agents.docstrings import docstring, module_docstring
from agents.imported import PATTERN, is_import_name
from agents.registry import make_policy
from agents.stats import mean_ci95
from agents.workers import computed_in_order
from inference.messages import did_you_mean, shown

REFERENCES = ("best-static", "oracle")
PERCENTILES = (50, 95, 99)
METRICS = ("mean_latency_s", "p50_latency_s", "p95_latency_s", "p99_latency_s",
           "vs_best_static", "gap_to_oracle")



def make_env(env_id: str = "InferenceAlloc-v0", scenario: str | list[str] = "article",
             hardware: str | None = None, variant: str | None = None,
             episode_tasks: int | None = None, reward: str = "latency",
             price_static: bool = False, weights: Sequence[float] | None = None) -> gym.Env:
    """One InferenceAlloc env; unknown scenario / hardware / variant -> ValueError listing them.
    A list of several scenarios makes a mix of them (``InferenceAllocMix-v0``) playing in
    `env_id`, drawn by `weights` (default: equally often); a list of one, that scenario's env."""
    env_id = envs.canonical_env_id(env_id) if isinstance(env_id, str) else env_id
    if env_id == envs.MIX_ENV_ID:
        # the mix is made, not named: it plays its scenarios in one of the two envs
        raise ValueError(f"{envs.MIX_ENV_ID} is made by giving several scenarios "
                         f"(--scenario article bursty), each episode played in the env id given; "
                         f"valid env ids: {envs.describe_env_ids()}")
    if env_id not in envs.ENV_IDS:
        raise ValueError(f"unknown env id {shown(env_id)}"
                         f"{did_you_mean([env_id], (*envs.ENV_IDS, *envs.ENV_ALIASES))}; "
                         f"valid: {envs.describe_env_ids()}")
    kwargs: dict[str, Any] = {"scenario": scenario, "episode_tasks": episode_tasks,
                              "reward": reward}
    if price_static:    # only where asked: an env's spec then reads as before
        kwargs["price_static"] = True
    if hardware is not None:
        kwargs["hardware"] = hardware
    if variant is not None:
        kwargs["variant"] = variant
    if isinstance(scenario, list):
        if len(scenario) > 1:
            kwargs["scenarios"] = kwargs.pop("scenario")
            if weights is not None:
                kwargs["weights"] = list(weights)
            return gym.make(f"envs:{envs.MIX_ENV_ID}", env_id=env_id, **kwargs)
        kwargs["scenario"] = scenario[0]
    return gym.make(f"envs:{env_id}", **kwargs)


def episode_latencies(policy: Any, env: gym.Env, seed: int, episodes: int = 1) -> np.ndarray:
    """Per-task latency of `policy` over `episodes` consecutive episodes of stream `seed`."""
    base = env.unwrapped
    out: list[float] = []
    start_stream_of(policy, seed)
    actor = StreamActor(policy, base)
    obs, _ = base.reset(seed=seed)
    for episode in range(episodes):
        if episode:
            obs, _ = base.reset()
            actor.new_episode()
        done = False
        while not done:
            action = actor.act(obs)
            obs, _, terminated, truncated, info = base.step(action)
            out.append(info["latency"])
            done = terminated or truncated
    return np.asarray(out)


# Under a load the hardware carries, a reference's latency is stationary through an episode
# (the article's: 0.9x from its first quarter to its last); past the hardware's capacity the
# backlog, and with it every task's latency, grows with the task's index (the stress presets:
# 5-8x). Quarters of fewer than 10 tasks are too noisy to tell.
OVERLOAD_GROWTH = 2.0
MIN_GROWTH_TASKS = 40


def overload_note(latency: np.ndarray, reference: str = "best-static") -> str | None:
    """A note for a table where `reference`'s per-task latency over one episode grows at least
    `OVERLOAD_GROWTH` times from the episode's first quarter to its last: the workload arrives
    faster than the hardware serves it. None otherwise, or for under `MIN_GROWTH_TASKS` tasks."""
    if len(latency) < MIN_GROWTH_TASKS:
        return None
    quarter = len(latency) // 4
    growth = float(np.mean(latency[-quarter:]) / np.mean(latency[:quarter]))
    if not growth >= OVERLOAD_GROWTH:
        return None
    return (f"note: {reference}'s latency grows {growth:.1f}x from the episode's first quarter "
            f"to its last: the workload arrives faster than this hardware serves it, so queues "
            f"grow and every latency above is mostly queueing. For a load it carries, lower "
            f"the scenario's workload.arrival_rate (trace_time_scale with a trace)")


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and 95% t-interval half-width of the finite values (NaN where undefined)."""
    finite = [v for v in values if np.isfinite(v)]
    return mean_ci95(finite) if finite else (math.nan, math.nan)


def episode_metrics(latency: np.ndarray, static: np.ndarray, oracle: np.ndarray
                    ) -> dict[str, float]:
    """The metrics of one seed's episodes (see the module docstring)."""
    mean = float(np.mean(latency))
    out = {"mean_latency_s": mean}
    for q in PERCENTILES:
        out[f"p{q}_latency_s"] = float(np.percentile(latency, q))
    out["vs_best_static"] = mean / float(np.mean(static))
    out["gap_to_oracle"] = mean / float(np.mean(oracle)) - 1.0
    return out


@dataclass
class AgentResult:
    """One agent on one scenario: per-sample metrics and the pooled per-task latencies."""

    agent: str
    scenario: str
    kind: str                       # "model" or "baseline"
    runs: int = 1
    samples: list[dict[str, float]] = field(default_factory=list)
    latencies: list[np.ndarray] = field(default_factory=list)
    note: str | None = None         # the section's overload_note, if any
    hardware: str = ""              # the section's hardware and variant, by the names it uses
    variant: str = ""
    sample_runs: list[int] = field(default_factory=list)   # each sample's training run, 0..

    def row(self) -> dict[str, Any]:
        row: dict[str, Any] = {"scenario": self.scenario, "agent": self.agent, "kind": self.kind,
                               "runs": self.runs, "n": len(self.samples)}
        for m in METRICS:
            mean, ci = mean_ci([s[m] for s in self.samples])
            row[m], row[f"{m}_ci95"] = mean, ci
        # last, as they came last: summary.csv's readers by position read as before
        row["hardware"], row["variant"] = self.hardware, self.variant
        row["vs_best_static_over_runs"], row["vs_best_static_over_runs_ci95"] = (
            self.over_runs("vs_best_static"))
        return row

    def over_runs(self, metric: str) -> tuple[float, float]:
        """`metric`'s mean and 95% CI over the training runs' own means, where several runs
        pool (NaN otherwise): the pooled CI treats every (run, held-out seed) pair as
        independent, though the runs share the seeds and differ by what each learned."""
        if self.runs < 2 or len(self.sample_runs) != len(self.samples):
            return math.nan, math.nan
        per_run: dict[int, list[float]] = {}
        for run, sample in zip(self.sample_runs, self.samples, strict=True):
            per_run.setdefault(run, []).append(sample[metric])
        return mean_ci([mean_ci(values)[0] for values in per_run.values()])


def summary_csv(rows: Iterable[dict[str, Any]]) -> str:
    rows = list(rows)
    if not rows:
        return ""
    header = list(rows[0])
    lines = [",".join(header)]
    for r in rows:
        lines.append(",".join(_csv_cell(r[h]) for h in header))
    return "\n".join(lines) + "\n"


def _csv_cell(value: Any) -> str:
    if isinstance(value, float):
        # every digit, the shortest that reads back as the same float: 6 significant ones
        # wrote 144610 for summary.md's 144609.963, and 28.4225 for its 28.423
        # (as a float: numpy 2's repr of its float64 reads "np.float64(...)")
        return "" if math.isnan(value) else repr(float(value))
    text = str(value)
    if any(c in text for c in ',"\n\r'):
        # RFC 4180: a quote inside a quoted cell is doubled; left single, a label such as
        # my "best" ppo (a model file's name) read back as 'my best" ppo"'
        return '"' + text.replace('"', '""') + '"'
    return text


def fmt_ci(mean: float, ci: float, digits: int = 3) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.{digits}f}" if math.isnan(ci) else f"{mean:.{digits}f} ± {ci:.{digits}f}"


# Markdown's inline marks, each shown as itself once escaped: a policy of one's own named
# mine:__Fast__ read "mine:Fast" in bold, and mine:<Fast> vanished as an HTML tag
_MARKDOWN_MARKS = re.compile(r"([\\`*_\[\]<>~|])")


def markdown_text(value: Any) -> str:
    """`value` as one line of markdown text that reads as written and keeps a table's shape: a
    "|" in a label (a model file's name, a scenario file's path) split its cell, a line break
    its row or heading, and a "*", "_", "`", "<" or "[" made emphasis, code, a tag or a link."""
    return _MARKDOWN_MARKS.sub(r"\\\1", " ".join(str(value).splitlines()))


def short_name(key: str) -> str:
    """A preset's name, or a YAML file's name without its folder and suffix."""
    path = Path(key)
    return path.stem if path.suffix in (".yaml", ".yml") else key


def unique_name(key: str, keys: Iterable[str]) -> str:
    """`key`'s short name, or `key` itself where another of `keys` has that short name."""
    name = short_name(key)
    return key if any(short_name(k) == name and k != key for k in keys) else name


def _pooled_runs_note(rows: Sequence[dict[str, Any]]) -> str | None:
    """A note naming the rows whose samples pool several training runs (see *95% CI*)."""
    pooled = [f"{markdown_text(r['agent'])} (n = {r['n'] // r['runs']} seeds x {r['runs']} "
              f"training runs{_over_runs_text(r)})" for r in rows if r.get("runs", 1) > 1]
    if not pooled:
        return None
    return (f"note: {', '.join(pooled)}: seeds and training runs pooled as n samples, which "
            "are not independent (the runs share the held-out seeds); the 95% CI is narrower "
            "than one over the runs' means (Definitions), given here for vs best static.")


def _over_runs_text(row: dict[str, Any]) -> str:
    mean = row.get("vs_best_static_over_runs", math.nan)
    if not math.isfinite(mean):
        return ""
    return (f"; vs best static over the runs' means: "
            f"{fmt_ci(mean, row['vs_best_static_over_runs_ci95'])}")


def summary_markdown(rows: Sequence[dict[str, Any]], seeds: Sequence[int], episodes: int,
                     notes: dict[str, str] | None = None) -> str:
    """Tables per scenario (value ± 95% CI), each followed by its note in `notes`, if any,
    and the definitions."""
    lines = ["# Evaluation on held-out workloads", "",
             f"Held-out workload seeds {', '.join(map(str, seeds))} (training used 0, 1, ...), "
             f"{episodes} episode(s) per seed. Values: mean ± 95% CI half-width over seeds "
             "(for models: seeds x training runs).", ""]
    for scenario in dict.fromkeys(r["scenario"] for r in rows):
        lines += [f"## {markdown_text(scenario)}", "",
                  "| agent | n | mean latency (s) | p50 (s) | p95 (s) | p99 (s) | vs best static "
                  "| gap to oracle |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in (r for r in rows if r["scenario"] == scenario):
            cells = [fmt_ci(r[m], r[f"{m}_ci95"]) for m in METRICS]
            lines.append(f"| {markdown_text(r['agent'])} | {r['n']} | " + " | ".join(cells)
                         + " |")
        lines.append("")
        pooled = _pooled_runs_note([r for r in rows if r["scenario"] == scenario])
        if pooled:
            lines += [pooled, ""]
        if notes and scenario in notes:
            lines += [notes[scenario], ""]
    lines += ["## Definitions", "", module_docstring(__doc__, __file__)
              .split("Definitions used in every table:")[-1].strip(), ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- online study
@dataclass
class OnlineStudy:
    """Per-sample latency curves of each agent over seeds, and OnlineResult.metrics per seed."""

    curves: dict[str, list[np.ndarray]] = field(default_factory=dict)
    metrics: dict[str, list[dict[str, float]]] = field(default_factory=dict)

    def add(self, agent: str, result: Any) -> None:
        self.curves.setdefault(agent, []).append(np.asarray(result.latency))
        self.metrics.setdefault(agent, []).append(result.metrics())


ONLINE_LEARNERS = {"ppo": ("ppo", None), "ppo-warm": ("ppo", "all"),
                   "dqn": ("dqn", None), "dqn-warm": ("dqn", "all"),
                   "trpo": ("trpo", None), "trpo-warm": ("trpo", "all"),
                   "recurrent-ppo": ("recurrent-ppo", None),
                   "recurrent-ppo-warm": ("recurrent-ppo", "all")}
ONLINE_FIXED = ("best-static", "heft-calibrated", "oracle")


def online_study(agents: Sequence[str], seeds: Sequence[int], n_samples: int,
                 scenario: str = "article", hardware: str | None = None,
                 tick: Callable[[], None] | None = None, reward: str = "relative",
                 checked: bool = False, jobs: int = 1) -> OnlineStudy:
    """Deploy each agent from sample 0 on the streams `seeds` (see ``agents.online.deploy``),
    `jobs` streams at once (0: one per core; ``agents.workers.computed_in_order``: the same
    study), `tick` called once per agent and stream.

    Learners (``ppo``, ``ppo-warm``, ``dqn``, ``dqn-warm``, ``trpo``, ``trpo-warm``,
    ``recurrent-ppo``, ``recurrent-ppo-warm``; the evaluate.py study runs
    ``reporting.FULL_ONLINE``'s) are fresh agents (training seed = the stream's seed, so a
    stream studied alone gets the learner it gets among others) that learn as they go;
    ``best-static`` and ``oracle`` are the references, run once per stream and shared by every
    agent's result; ``heft-calibrated`` runs as a fixed policy. A ``<module>:<attribute>`` is
    an agent of yours, a learner or a fixed policy (``agents.own_online_agents``), checked
    before anything runs. Any other name is a ValueError listing these (``ONLINE_LEARNERS``,
    ``ONLINE_FIXED``). The learners learn on `reward` (envs.inference_alloc.REWARDS); every env
    prices best-static in its own state whichever it is (the metrics' ``static_here``).
    """
    unknown = [a for a in agents if a not in ONLINE_LEARNERS and a not in ONLINE_FIXED
               and not is_import_name(a)]
    if unknown:
        raise ValueError(f"unknown online agents {unknown}; valid: "
                         f"{', '.join((*ONLINE_LEARNERS, *ONLINE_FIXED))}, or one of yours as "
                         f"{PATTERN}")

    if not checked:     # `checked`: the caller ran check_online_agents, which builds yours
        check_online_agents(agents, _study_env(scenario, hardware, n_samples, reward))
    each_seed = functools.partial(_deployed_on, agents=tuple(agents), n_samples=n_samples,
                                  scenario=scenario, hardware=hardware, reward=reward)
    per_seed = computed_in_order(each_seed, list(seeds), jobs, name=lambda seed: f"seed {seed}",
                                 tick=tick, ticks_inside=True)
    study = OnlineStudy()
    for results in per_seed:
        for agent, result in zip(agents, results, strict=True):
            study.add(agent, result)
    return study


def _study_env(scenario: str, hardware: str | None, n_samples: int, reward: str) -> gym.Env:
    return make_env(scenario=scenario, hardware=hardware, episode_tasks=n_samples,
                    reward=reward, price_static=True)


def _deployed_on(seed: int, agents: tuple[str, ...], n_samples: int, scenario: str,
                 hardware: str | None, reward: str, tick: Callable[[], None]) -> list[Any]:
    """Each of `agents` deployed on the stream `seed` (``online_study``): its OnlineResult,
    with the references' curves of that stream; `tick` called after each agent."""
    from agents.online import deploy
    from agents.own_online_agents import build_own_agent
    from agents.sb3_factory import make_sb3
    from agents.warmup import WarmupConfig

    env = _study_env(scenario, hardware, n_samples, reward)
    # The references' own runs, each with static's latency in its state (static_here).
    refs = {name: deploy(make_policy(name, env), env, n_samples, learn=False, seed=seed,
                         references=False) for name in REFERENCES}
    static, oracle = refs["best-static"].latency, refs["oracle"].latency
    results = []
    for agent in agents:
        if agent in REFERENCES:
            results.append(dataclasses.replace(refs[agent], static=static, oracle=oracle))
            tick()
            continue
        env = _study_env(scenario, hardware, n_samples, reward)
        if agent in ONLINE_LEARNERS:
            algo, parts = ONLINE_LEARNERS[agent]
            warm = WarmupConfig.from_parts(parts) if parts else None
            policy, learn = make_sb3(algo, env, seed=seed, warmup=warm), True
        elif is_import_name(agent):
            policy, learn = build_own_agent(agent, env, seed)
        else:
            policy, learn = make_policy(agent, env), False
        run = deploy(policy, env, n_samples, learn=learn, seed=seed, references=False)
        results.append(dataclasses.replace(run, static=static, oracle=oracle))
        tick()
    return results


def check_online_agents(agents: Sequence[str], env: gym.Env) -> None:
    """Refuse (ValueError) an agent of yours among `agents` that the study could not deploy
    on `env` (``agents.own_online_agents.check_own_agent``): before it runs, not after the
    agents named before it."""
    from agents.own_online_agents import check_own_agent

    for agent in agents:
        if is_import_name(agent):
            check_own_agent(agent, env)


# A learner whose last samples average this many times static's own run has built a backlog
# static never had: its ratio to static in its own state (samples_to_stabilise) hides it.
BACKLOG_STEADY = 2.0


def _backlogged(study: OnlineStudy) -> list[str]:
    """'agent (Nx)' for each agent whose seed-mean steady_vs_static is at least BACKLOG_STEADY."""
    out = []
    for agent, per_seed in study.metrics.items():
        steady = mean_ci([m.get("steady_vs_static", math.nan) for m in per_seed])[0]
        if steady >= BACKLOG_STEADY:
            out.append(f"{agent} ({steady:.1f}x)")
    return out


def online_markdown(study: OnlineStudy, seeds: Sequence[int], n_samples: int,
                    scenario: str, reward: str = "relative") -> str:
    from agents.online import (
        EARLY_SAMPLES,
        SAMPLE_COUNTS,
        STEADY_SAMPLES,
        WINDOW,
        OnlineResult,
        unsettled,
    )

    names = list(next(iter(study.metrics.values()))[0]) if study.metrics else []
    lines = ["# Online stabilisation", "",
             f"Scenario {scenario}; every agent deployed from sample 0 on the same {len(seeds)} "
             f"task streams (seeds {', '.join(map(str, seeds))}), {n_samples} samples each; "
             f"learners learn as they go, on the {reward} reward. Values: mean ± 95% CI "
             "half-width over seeds.", "",
             "| agent | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for agent, per_seed in study.metrics.items():
        cells = []
        for k in names:
            values = [m[k] for m in per_seed]
            finite = sum(np.isfinite(values))
            note = f" ({finite}/{len(values)} seeds)" if 0 < finite < len(values) else ""
            late = unsettled(values, n_samples) if k == "samples_to_stabilise" else 0
            if late:
                note += f" ({late}/{len(values)} seeds unsettled, counted at {n_samples})"
            # a count of samples: 50, not 50.000; its mean over seeds in steps of 1/seeds
            digits = (0 if finite == 1 else 1) if k in SAMPLE_COUNTS else 3
            cells.append(fmt_ci(*mean_ci(values), digits) + note)
        lines.append(f"| {markdown_text(agent)} | " + " | ".join(cells) + " |")
    backlogged = _backlogged(study)
    if backlogged:
        lines += ["", f"note: {', '.join(backlogged)} ended at {BACKLOG_STEADY:g}x static's own "
                      "run or more (steady_vs_static): a backlog they built, which their "
                      "samples_to_stabilise, read against static in their own state, does not "
                      "see (Definitions)."]
    # cleandoc, not a fixed cut: Python 3.13 compiles docstrings already dedented
    doc = inspect.cleandoc(docstring(OnlineResult.metrics)).splitlines()
    lines += ["", "## Definitions", "",
              f"(early = the first {min(EARLY_SAMPLES, n_samples)} samples, window = "
              f"{min(WINDOW, n_samples)} samples; "
              "static = best-static on the same tasks; the oracle is the myopic per-step "
              "reference; '-': undefined for every seed, e.g. never reached; (k/n seeds): the mean of "
              "the k seeds where it is defined, the others left out (samples_to_0.9_static: those "
              "that never reach it, so the mean reads earlier than all seeds' would); (k/n seeds "
              f"unsettled, counted at {n_samples}): k runs had not settled by their end and "
              "count at its length, a lower bound; so is the mean.)", ""]
    if n_samples < max(EARLY_SAMPLES, STEADY_SAMPLES):
        # the metrics clamp each span to the run (OnlineResult.metrics)
        lines += [f"With {n_samples} samples per run, the spans below are clamped to the run: "
                  f"samples 1..`early` are the first {min(EARLY_SAMPLES, n_samples)}, and "
                  f"'the last {STEADY_SAMPLES} samples' are the last "
                  f"{min(STEADY_SAMPLES, n_samples)}.", ""]
    lines += doc[2:]
    return "\n".join(lines).rstrip() + "\n"
