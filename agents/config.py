"""Typed configs for ``train.py`` and ``evaluate.py`` (CleanRL style): the options each takes.

Each config is a dataclass whose fields carry their ``--help`` text in
``field(metadata={"help": ...})``; its ``validate`` refuses a bad value as one ``ConfigError``
line. ``agents.config_parsing`` makes them flags and YAML.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agents.commands import program
from agents.warmup_config import MIN_CLONE_SAMPLES, WarmupConfig
from envs import canonical_env_id
from envs.inference_alloc import REWARDS
from envs.scenario import MAX_EPISODE_TASKS
from inference.messages import did_you_mean, shown
from inference.yamlio import safe_load, unusable_path

DEFAULT_TIMESTEPS = 60_000      # per run: the 2 runs of `python train.py` take 5-15 min on 2 cores
HELDOUT_SEED = 10_000           # held-out workload seeds start here (training uses 0, 1, ...)
# the validation episode of --select-best: outside the training seeds and evaluate.py's
# held-out seeds (HELDOUT_SEED .. HELDOUT_SEED + MAX_EVAL_SEEDS - 1)
VALIDATION_SEED = 20_000
MIN_ONLINE_SEEDS = 5             # evaluate.py --online: the study's floor
EVAL_SEEDS = 5                   # evaluate.py's default --seeds
# --reproduce-article's default --seeds: its stabilisation and drop rows are metrics of the
# seed-mean curve, one slow seed of which moves the point; ten seeds average more streams and
# keep the point further inside its limit of 350: 318 [235..434] samples over 10 seeds, 341
# [233..415] over 5 (docs/CALIBRATION.md, "How the table states that spread")
ARTICLE_SEEDS = 10
MAX_EVAL_SEEDS = 1000            # evaluate.py's --seeds is a count; more is a seed typed as one
MAX_SEED = 2**31 - 1            # numpy, gymnasium and torch all accept seeds up to here
# --metrics-window's tasks, kept in deques: 2**63 was an OverflowError inside the run
MAX_METRICS_WINDOW = 10**9
# a run's steps: ~60 years at 500 steps/s. --timesteps 1e300 was taken, and its checkpoints'
# names (their step counts) were then refused as paths too long for --log-dir
MAX_TIMESTEPS = 10**12
# caps on counts no real job comes near: past them a typo (an extra 0, 1e9 for 1e3) hung the
# job silently, building 100,000 envs (with --vec-env subproc, forking as many processes),
# collecting 1e12 clone samples or running 1e9 episodes a seed
MAX_JOBS = 256                  # --jobs: processes of torch, ~0.5 GB each
MAX_N_ENVS = 1024               # --n-envs: docs/USAGE.md's timings go up to 16
MAX_CLONE_SAMPLES = 10**7       # --clone-samples: 3,000 by default, ~0.1 ms each
MAX_EPISODES = 1000             # evaluate.py's --episodes a seed: 2 by default, as --seeds' cap
# the --reproduce-article job's requests, agents.article_job.JOB_TASKS (here: that module loads
# torch, which an option's check must not); --article-clients takes no more clients than this
ARTICLE_JOB_TASKS = 1000
VEC_ENVS = ("dummy", "subproc")     # --vec-env: SB3's DummyVecEnv or SubprocVecEnv (agents.vec_envs)
# keys of a run folder's config.yaml that record the run, not options of one: a --config file
# reads them over (a new run records its own). settings: its setting's digests, which
# --resume compares (agents.run_setting); hp_of: what its hp are every hyper-parameter of
# (agent, env id, warm start), which plan() compares with the runs such a file trains
SETTINGS, HP_OF = "settings", "hp_of"
RUN_RECORDS = (SETTINGS, HP_OF)


def hp_digest(hp: dict[str, Any]) -> str:
    """A digest of hyper-parameters as config.yaml holds them (read back from its YAML, with the
    loader that reads the file: '1e-3' is written bare and read back a number), which
    ``hp_of`` records: a file whose hp no longer give it was edited, and its hp are the user's."""
    plain = safe_load(yaml.safe_dump(hp))
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:16]


def is_run_record(key: object, value: object) -> bool:
    """Whether config.yaml's `key: value` is a run's record as the run writes it; any other
    value is a user's key, refused as no option."""
    if key == SETTINGS:         # {scenario: {part: digest}}
        return isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())
    if key == HP_OF:    # {agent: ppo, env_id: InferenceAlloc-v0, warm_start: false, hp: <digest>}
        # (a later version's keys beside these are read over)
        return (isinstance(value, dict) and isinstance(value.get("agent"), str)
                and isinstance(value.get("env_id"), str)
                and isinstance(value.get("warm_start"), bool) and isinstance(value.get("hp"), str))
    return False


class ConfigError(ValueError):
    """A bad option value: reported as one line, exit code 2."""


def _help(text: str, **extra: Any) -> dict[str, Any]:
    return {"help": text, **extra}


@dataclass
class TrainConfig:
    """What `python train.py` trains (each agent x warm-up spec x seed is one run)."""

    agents: list[str] = field(default_factory=lambda: ["ppo"], metadata=_help(
        "SB3 agents to train: ppo, a2c, trpo, recurrent-ppo (both envs), dqn, maskable-ppo "
        "(InferenceAlloc-v0 only), sac (InferenceAllocSplit-v0 only)"))
    warmup: list[str] = field(default_factory=lambda: ["none", "all"], metadata=_help(
        "warm-up specs, one run each: all | none | comma list of conservative,clone,guard "
        "(guard only with conservative)"))
    conservative: str = field(default="heft-calibrated", metadata=_help(
        "conservative policy of the warm-up (e.g. best-static, heft-calibrated); ignored by "
        "--warmup none runs, its name checked all the same"))
    clone_samples: int | None = field(default=None, metadata=_help(
        f"observations collected for behaviour cloning, {MIN_CLONE_SAMPLES} .. "
        f"{MAX_CLONE_SAMPLES:,}; ignored by runs whose --warmup spec does not clone (default: "
        f"{WarmupConfig.clone_samples}, WarmupConfig's)"))
    scenario: str | list[str] = field(default="article", metadata=_help(
        "scenario name or YAML path; several train one policy on all of them, a scenario drawn "
        "per episode (InferenceAllocMix-v0: they must share hardware, variant and model); "
        "the comparison table then has a section per scenario, and the eval/ curves and "
        "--select-best run every scenario's episodes", path=True))
    scenario_weights: list[float] | None = field(default=None, metadata=_help(
        "with several --scenario: how often each is drawn for a training episode, one weight "
        "each, in their order (default: equally often); --resume may change them, for a "
        "curriculum"))
    hardware: str | None = field(default=None, metadata=_help(
        "hardware preset or YAML path (default: the scenario's)", path=True))
    variant: str | None = field(default=None, metadata=_help(
        "pipeline variant: glm-5.3, glm-5.3-flash, glm-5.3-flash-opt or a "
        "load+prefill+decode mix such as adaptive+window+prefetched (default: the scenario's)"))
    env_id: str = field(default="InferenceAlloc-v0", metadata=_help(
        "InferenceAlloc-v0 (or discrete) | InferenceAllocSplit-v0 (or split)",
        flags=("--env-id", "--env")))
    timesteps: int = field(default=DEFAULT_TIMESTEPS, metadata=_help(
        "environment steps per run (with --resume: the new total); SB3 trains whole rollouts "
        "(n_steps x --n-envs), so a run may take more, and a note says so"))
    seeds: list[int] = field(default_factory=lambda: [0], metadata=_help(
        "training seeds (one run per seed)"))
    n_envs: int = field(default=1, metadata=_help(
        f"parallel envs (stepped as --vec-env says), at most {MAX_N_ENVS:,}"))
    jobs: int = field(default=1, metadata=_help(
        f"runs trained at once, each in a process of its own and on a core of its own (0: one "
        f"per core), at most {MAX_JOBS}; the same runs and table as one at a time, each "
        f"reported as it ends, without progress bars"))
    vec_env: str = field(default="dummy", metadata=_help(
        "where the --n-envs envs step: dummy (SB3's DummyVecEnv: one after another in this "
        "process) | subproc (SubprocVecEnv: a process each, at once on several cores; the "
        "same run as dummy for the same seed)"))
    log_dir: str = field(default="runs", metadata=_help("folder of the run folders", path=True))
    checkpoint_interval: int = field(default=10_000, metadata=_help(
        "steps between checkpoints (0: none)"))
    keep_checkpoints: int = field(default=0, metadata=_help(
        "checkpoints a run keeps, the newest, each with the files saved beside it (0: every "
        "one, ~0.18 MB a checkpoint of PPO: 18 MB a million steps at the default interval)"))
    resume: str | None = field(default=None, metadata=_help(
        "continue the newest run (or the named one) from the last model it saved (a checkpoint, "
        "or model.zip)",
        nargs="?", const="latest", path=True))
    hp: dict[str, Any] = field(default_factory=dict, metadata=_help(
        "hyper-parameter overrides key=value (YAML values), e.g. n_steps=64; they apply to "
        "every agent of the run (DQN's n_steps is its n-step return, not PPO's rollout)"))
    episode_tasks: int | None = field(default=None, metadata=_help(
        "tasks per training episode (default: the scenario's)"))
    normalize: bool = field(default=False, metadata=_help("normalise rewards with VecNormalize"))
    reward: str = field(default="relative", metadata=_help(
        "training reward: relative (1 - latency / static's in the same state: blind to a "
        "backlog the agent builds) | normalised (1 - latency / static's service time, its "
        "latency less its queue wait: a backlog costs) | latency (minus seconds: the "
        "objective itself, on a scale that spans the tasks' sizes: use with --normalize)"))
    metrics_window: int = field(default=100, metadata=_help(
        "recent tasks behind latency/mean, latency/p95, latency/vs_static, cache/hit_rate, "
        "the devices/ means and warmup/conservative_acting (after --resume, those since it "
        "until that many have run)"))
    log_interval: int | None = field(default=None, metadata=_help(
        "rollouts (ppo, a2c, maskable-ppo, trpo, recurrent-ppo) or episodes (dqn, sac) "
        "between writes of the TensorBoard scalars other than latency/per_sample and eval/ "
        "(default: SB3's: 1 rollout, 100 for a2c, 4 episodes; PPO's 16-step rollouts write ~90 KB a thousand "
        "steps)"))
    per_sample_interval: int = field(default=1, metadata=_help(
        "tasks between the points of the latency/per_sample curve (1: every task, ~58 bytes "
        "each, most of a long run's events file; TensorBoard shows 1,000 points of a curve)"))
    eval_seed: int = field(default=HELDOUT_SEED, metadata=_help(
        "workload seed of the held-out episode of the comparison table and the eval/ curves "
        "(--resume keeps the run's own and refuses another)"))
    eval_tasks: int = field(default=1000, metadata=_help(
        "tasks of the held-out episode (0: no comparison table, no eval/ curves; --resume "
        "keeps the run's own and refuses another)"))
    eval_interval: int = field(default=10_000, metadata=_help(
        "steps between runs of the current policy on the held-out episode, logged as eval/ "
        "in TensorBoard (0: none; none with --eval-tasks 0)"))
    select_best: bool = field(default=False, metadata=_help(
        "also keep the model with the lowest mean latency on a validation episode "
        "(--eval-tasks tasks of --validation-seed, run at the --eval-interval points) as "
        "best_model.zip, with best_model.json; chosen without the held-out episode, which "
        "then scores it in the comparison table"))
    validation_seed: int = field(default=VALIDATION_SEED, metadata=_help(
        "workload seed of --select-best's validation episode: not --eval-seed, a training "
        "seed or evaluate.py's held-out seeds (--resume keeps the run's own)"))
    callbacks: list[str] = field(default_factory=list, metadata=_help(
        "Stable-Baselines3 callbacks of yours, each <module>:<attribute> (mine:LogQueues: "
        "LogQueues of mine.py in the working directory): a BaseCallback, or a class or function "
        "that builds one with no argument, fresh for each run (an object is copied); they run "
        "after ours, on the run's model and logger, and one whose _on_step returns False ends "
        "the run there (--resume continues it, with the run's callbacks unless --callbacks is "
        "given; --callbacks alone: none)", nargs="*", metavar="MODULE:ATTRIBUTE"))
    progress_bar: bool = field(default=True, metadata=_help("show a progress bar while training"))

    def __post_init__(self) -> None:
        # the registered id, whatever spelling was given: the run's folder and config.yaml
        # name it, and the hyper-parameter files are keyed by it
        if isinstance(self.env_id, str):
            self.env_id = canonical_env_id(self.env_id)
        # one scenario is the plain string it always was (config.yaml, the HPARAMS view and
        # every reader see what they saw), however it was given
        if isinstance(self.scenario, list) and len(self.scenario) == 1:
            self.scenario = self.scenario[0]

    def training_scenarios(self) -> list[str]:
        """The scenarios a run trains on: one, or the several of a mix."""
        return scenario_list(self.scenario)

    def held_out_scenario(self) -> str:
        """The scenario of the held-out and validation episodes: the first trained on."""
        return self.training_scenarios()[0]

    def training_episode_tasks(self) -> int:
        """The tasks of a training episode: --episode-tasks, else the scenarios' own; 0 where
        the scenarios of a mix differ, each then its own."""
        from envs.scenario import load_scenario

        if self.episode_tasks is not None:
            return self.episode_tasks
        counts = {load_scenario(name).episode_tasks for name in self.training_scenarios()}
        return counts.pop() if len(counts) == 1 else 0

    def validate(self) -> None:
        _require(bool(self.agents), "--agents needs at least one agent")
        from agents.registry import SB3_NAMES, unknown_learner  # light: no torch, no SB3

        for agent in self.agents:
            known = isinstance(agent, str) and agent.strip().lower() in SB3_NAMES
            _require(known, unknown_learner(agent.strip() if isinstance(agent, str) else agent))
        _require(bool(self.warmup), "--warmup needs at least one spec (none, all, ...)")
        _require(bool(self.seeds), "--seeds needs at least one seed")
        scenarios = self.training_scenarios()
        _require(bool(scenarios), "--scenario needs at least one scenario")
        for i, name in enumerate(scenarios):
            _require(name not in scenarios[:i],
                     f"--scenario {shown(name)} is given twice: give each scenario once "
                     f"(--scenario-weights draws one more often)")
        # a resume's weigh the run's own scenarios, checked once they are read (resume_run)
        if self.scenario_weights is not None and self.resume is None:
            weights = self.scenario_weights
            _require(len(scenarios) > 1, "--scenario-weights weighs several --scenario; one "
                                         "scenario plays every episode")
            _require(len(weights) == len(scenarios),
                     f"--scenario-weights needs one weight per --scenario ({len(scenarios)}), "
                     f"got {len(weights)}")
            _require(all(math.isfinite(w) and w >= 0 for w in weights) and sum(weights) > 0,
                     f"--scenario-weights must be finite and >= 0, not all 0, got "
                     f"{shown(weights, quote=False)}")
        # before the seeds it spans: --n-envs 1e12 was refused as seeds past 2**31 - 1
        _require(1 <= self.n_envs <= MAX_N_ENVS,
                 f"--n-envs must lie in 1 .. {MAX_N_ENVS:,}, got {self.n_envs}")
        _require(0 <= self.jobs <= MAX_JOBS,
                 f"--jobs must lie in 0 .. {MAX_JOBS} (0: one per core), got {self.jobs}")
        # env i of a run is seeded seed + i (SB3's make_vec_env)
        _require_seeds("--seeds", min(self.seeds), max(self.seeds) + self.n_envs - 1)
        _require_seeds("--eval-seed", self.eval_seed, self.eval_seed)
        _require_folder("--log-dir", self.log_dir)
        _require_utf8_folder("--log-dir", self.log_dir)
        if self.resume is not None:
            _require_utf8_folder("--resume", self.resume)
        _require(1 <= self.timesteps <= MAX_TIMESTEPS,
                 f"--timesteps must lie in 1 .. {MAX_TIMESTEPS:,}, got {shown(self.timesteps)}")
        _require_choice("--vec-env", self.vec_env, VEC_ENVS)
        _require(self.checkpoint_interval >= 0, "--checkpoint-interval must be >= 0")
        _require(self.keep_checkpoints >= 0, "--keep-checkpoints must be >= 0")
        _require_choice("--reward", self.reward, REWARDS)
        _require(self.metrics_window >= 1, "--metrics-window must be >= 1")
        _require(self.metrics_window <= MAX_METRICS_WINDOW,
                 f"--metrics-window must be at most {MAX_METRICS_WINDOW}, got "
                 f"{self.metrics_window}")
        _require(self.per_sample_interval >= 1, "--per-sample-interval must be >= 1")
        _require(self.log_interval is None or self.log_interval >= 1,
                 "--log-interval must be >= 1")
        _require(self.eval_tasks >= 0, "--eval-tasks must be >= 0")
        # the held-out episode's env refused more, after the run had started: a traceback
        _require(self.eval_tasks <= MAX_EPISODE_TASKS,
                 f"--eval-tasks is an episode's tasks, at most {MAX_EPISODE_TASKS}, got "
                 f"{self.eval_tasks}")
        _require(self.eval_interval >= 0, "--eval-interval must be >= 0")
        # checked even where no warm-up clones: the flag is wrong whichever run it reaches
        _require(self.clone_samples is None
                 or MIN_CLONE_SAMPLES <= self.clone_samples <= MAX_CLONE_SAMPLES,
                 f"--clone-samples must lie in {MIN_CLONE_SAMPLES} .. {MAX_CLONE_SAMPLES:,}, "
                 f"got {self.clone_samples}")
        _require(self.episode_tasks is None or 1 <= self.episode_tasks <= MAX_EPISODE_TASKS,
                 f"--episode-tasks must lie in 1..{MAX_EPISODE_TASKS}")
        self._validate_selection()

    def _validate_selection(self) -> None:
        """--select-best's validation episode: one the model is neither trained nor tested on,
        or the choice would read the test (held-out) episode, or reward memorising a training
        one. Its seed is left unchecked where nothing runs it (the default run is as it was);
        a --resume takes the run's own settings, and refuses another validation seed itself."""
        if self.resume is not None:
            return
        if not self.select_best:
            _require(self.validation_seed == VALIDATION_SEED,
                     "--validation-seed is used only with --select-best; add --select-best or "
                     "drop --validation-seed")
            return
        _require(self.eval_interval > 0, "--select-best chooses at the --eval-interval points: "
                                         "give --eval-interval > 0")
        _require(self.eval_tasks > 0, "--select-best runs an episode of --eval-tasks tasks: "
                                      "give --eval-tasks > 0")
        seed = self.validation_seed
        _require_seeds("--validation-seed", seed, seed)
        _require(seed != self.eval_seed,
                 f"--validation-seed {seed} is --eval-seed's: the model would be chosen on the "
                 f"episode that then tests it; give another --validation-seed")
        for first in self.seeds:         # env i of a run is seeded seed + i
            envs = f"{first} .. {first + self.n_envs - 1}" if self.n_envs > 1 else f"{first}"
            _require(not first <= seed < first + self.n_envs,
                     f"--validation-seed {seed} is a training workload seed (--seeds {first} "
                     f"trains on {envs}); give another --validation-seed")
        _require(not HELDOUT_SEED <= seed < HELDOUT_SEED + MAX_EVAL_SEEDS,
                 f"--validation-seed {seed} is among {program('evaluate')}'s held-out seeds "
                 f"({HELDOUT_SEED} .. {HELDOUT_SEED + MAX_EVAL_SEEDS - 1}), which would then "
                 f"score a model chosen on it; give another --validation-seed (default "
                 f"{VALIDATION_SEED})")


@dataclass
class EvalConfig:
    """What `python evaluate.py` evaluates and where it writes."""

    models: list[str] = field(default_factory=list, metadata=_help(
        "model zips or run folders to evaluate (default: every run under --runs)", path=True))
    runs: str = field(default="runs", metadata=_help("folder of the run folders", path=True))
    baselines: list[str] = field(default_factory=lambda: [
        "all-cpu", "all-gpu", "all-npu", "best-static", "heft", "heft-calibrated", "oracle"],
        metadata=_help("baseline policies to evaluate beside the models"))
    scenarios: list[str] = field(default_factory=list, metadata=_help(
        "scenarios (default: those the runs were trained on, else article)", path=True))
    hardware: str | None = field(default=None, metadata=_help(
        "hardware preset or YAML path (default: each run's / the scenario's)", path=True))
    seeds: int | None = field(default=None, metadata=_help(
        f"how many held-out workload seeds: --seed-base, --seed-base + 1, ... (a count, "
        f"not a list of seeds as in train.py; at most {MAX_EVAL_SEEDS}) (default: "
        f"{EVAL_SEEDS}, {ARTICLE_SEEDS} with --reproduce-article)"))
    seed_base: int = field(default=HELDOUT_SEED, metadata=_help("first held-out seed"))
    episodes: int = field(default=2, metadata=_help(
        f"episodes per seed, at most {MAX_EPISODES:,}"))
    episode_tasks: int | None = field(default=None, metadata=_help(
        "tasks per episode (default: the scenario's)"))
    out: str = field(default="results", metadata=_help("output folder", path=True))
    online: bool = field(default=False, metadata=_help(
        f"only the online stabilisation experiment (>= {MIN_ONLINE_SEEDS} seeds, on the first of "
        "--scenarios; stabilization.png/.md)",
        action="store_true", clears=("no_online",)))
    online_samples: int = field(default=600, metadata=_help(
        "samples per online deployment (stabilization.png)"))
    online_seeds: int | None = field(default=None, metadata=_help(
        f"seeds of the online experiment (default: --seeds, at least {MIN_ONLINE_SEEDS} with "
        "--online)"))
    online_reward: str = field(default="relative", metadata=_help(
        "reward the online experiment's learners learn on, as train.py's --reward: relative | "
        "normalised | latency (static is priced in every run's state whichever it is)"))
    online_agents: list[str] | None = field(default=None, metadata=_help(
        "agents of the online experiment, in its tables' order: learners ppo, ppo-warm, dqn, "
        "dqn-warm, trpo, trpo-warm, recurrent-ppo, recurrent-ppo-warm; fixed best-static, "
        "heft-calibrated, oracle; yours as <module>:<attribute>, a learner where it builds an "
        "SB3 model (default: ppo ppo-warm dqn dqn-warm best-static heft-calibrated oracle with "
        "--online, ppo ppo-warm best-static oracle in the default evaluation)"))
    no_online: bool = field(default=False, metadata=_help(
        "skip the online experiment in the default evaluation (writes no stabilization.png; "
        "one of an earlier evaluation is kept)",
        action="store_true", clears=("online",)))
    reproduce_article: bool = field(default=False, metadata=_help(
        "reproduce the article's figures (agents.article.reproduce) into --out"))
    article_clients: int | None = field(default=None, metadata=_help(
        f"the article job's closed-loop clients, at most its {ARTICLE_JOB_TASKS:,} requests; 0: "
        "open loop, requests 3.25x faster than the live rate (default: the reproduction's, 3)"))
    jobs: int = field(default=1, metadata=_help(
        f"held-out seeds of the online study and of --reproduce-article computed at once, "
        f"each in a process of its own (0: one per core), at most {MAX_JOBS}; the same tables "
        f"as one at a time (the summary's evaluation runs in this process)"))
    progress_bar: bool = field(default=True, metadata=_help("show a progress bar"))

    def __post_init__(self) -> None:
        # an agent named twice counts once, as a name or seed repeated in any list option
        # (--agents, --seeds, --baselines, ...): the same agent on the same seeds runs the same
        # deployment, which was refused here alone
        if isinstance(self.online_agents, list):
            self.online_agents = list(dict.fromkeys(self.online_agents))

    def seed_count(self) -> int:
        """How many held-out seeds: --seeds, else the study's default."""
        if self.seeds is not None:
            return self.seeds
        return ARTICLE_SEEDS if self.reproduce_article else EVAL_SEEDS

    def online_seed_count(self) -> int:
        """Seeds of the online study: --online-seeds, else --seeds (at least
        MIN_ONLINE_SEEDS for the --online study itself)."""
        if self.online_seeds:
            return self.online_seeds
        return max(self.seed_count(), MIN_ONLINE_SEEDS) if self.online else self.seed_count()

    def validate(self) -> None:
        _require(self.seeds is None or self.seeds >= 1, f"--seeds must be >= 1, got {self.seeds}")
        for flag, count in (("--seeds", self.seeds), ("--online-seeds", self.online_seeds)):
            _require(count is None or count <= MAX_EVAL_SEEDS,
                     f"{flag} is how many held-out seeds to run from --seed-base, at most "
                     f"{MAX_EVAL_SEEDS}, got {count}; for the one seed {count}, pass "
                     f"{flag} 1 --seed-base {count}")
        _require(1 <= self.episodes <= MAX_EPISODES,
                 f"--episodes must lie in 1 .. {MAX_EPISODES:,}, got {self.episodes}")
        _require(self.online_samples >= 10, "--online-samples must be >= 10")
        # each deployment is one episode: the env's refusal named its episode_tasks instead
        _require(self.online_samples <= MAX_EPISODE_TASKS,
                 f"--online-samples is an episode's tasks, at most {MAX_EPISODE_TASKS}, got "
                 f"{self.online_samples}")
        # 1 as train.py's: a one-task episode evaluates as any other (its floor of 2 had no
        # reason the evaluation, the tables, the CDF or the online study needs)
        _require(self.episode_tasks is None or 1 <= self.episode_tasks <= MAX_EPISODE_TASKS,
                 f"--episode-tasks must lie in 1..{MAX_EPISODE_TASKS}")
        _require(self.online_seeds is None or self.online_seeds >= 1, "--online-seeds must be >= 1")
        _require(0 <= self.jobs <= MAX_JOBS,
                 f"--jobs must lie in 0 .. {MAX_JOBS} (0: one per core), got {self.jobs}")
        _require_choice("--online-reward", self.online_reward, REWARDS)
        if self.online_agents is not None:
            from agents.evaluation import ONLINE_FIXED, ONLINE_LEARNERS
            from agents.imported import PATTERN, import_form_hint, is_import_name

            _require(bool(self.online_agents), "--online-agents needs at least one agent")
            ours = (*ONLINE_LEARNERS, *ONLINE_FIXED)
            for agent in self.online_agents:
                # one of yours is imported and checked with the scenario's env
                # (evaluation.check_online_agents)
                _require(agent in ours or is_import_name(agent),
                         f"--online-agents must be one of {', '.join(ours)}, got {shown(agent)}"
                         f"{import_form_hint(agent) or did_you_mean([agent], ours)}; or one of "
                         f"yours as {PATTERN}")
        _require(self.article_clients is None or self.article_clients >= 0,
                 f"--article-clients must be >= 0, got {self.article_clients}")
        # a client sends one request at a time: 1e9 clients for 1,000 requests built them all
        clients = self.article_clients or 0
        _require(clients <= ARTICLE_JOB_TASKS,
                 f"--article-clients {clients:,} is more clients than the article job has "
                 f"requests ({ARTICLE_JOB_TASKS:,}): give at most {ARTICLE_JOB_TASKS:,} (0: the "
                 f"open-loop job)")
        n = self.seed_count() if self.no_online or self.reproduce_article else \
            max(self.seed_count(), self.online_seed_count())   # the online study's, when it runs
        _require_seeds("--seed-base", self.seed_base, self.seed_base + n - 1)
        _require_folder("--out", self.out)
        # the two studies run fixed agents on fixed scenarios: a flag they ignore is a mistake
        _require(not (self.online and self.reproduce_article),
                 "--online and --reproduce-article are separate studies: run one at a time")
        _require(not (self.online and self.no_online), "--online and --no-online contradict")
        defaults = EvalConfig()
        for name, why in self._unused_options().items():
            _require(getattr(self, name) == getattr(defaults, name),
                     f"{flag_of(name)} is not used there: {why}; drop {flag_of(name)}")
        # a --runs folder that is not there is a typo (runs/, the default, may not be yet): it
        # evaluated the baselines alone and wrote them over --out's summary
        runs = Path(self.runs)
        where = f"{program('train')}'s runs are under its --log-dir, {defaults.runs} by default"
        # a file there was "no such folder", though it is there
        _require(not runs.exists() or runs.is_dir(),
                 f"--runs {self.runs} is a file, not a folder ({where}; a model .zip goes to "
                 f"--models)")
        _require(self.runs == defaults.runs or runs.is_dir(),
                 f"--runs {self.runs}: no such folder ({where})")
        _require(not (self.online and len(set(self.scenarios)) > 1),
                 "--online runs on one scenario; give one --scenarios value per invocation")

    def _unused_options(self) -> dict[str, str]:
        """The options this invocation ignores, and why: given anyway, they are a mistake."""
        evaluation = ("models", "runs", "baselines", "episodes", "episode_tasks")
        if self.online:
            why = "--online trains its own agents from scratch and runs no baselines"
            unused = dict.fromkeys((*evaluation, "no_online", "article_clients"), why)
            if self.online_seeds is not None:   # online_seed_count: --seeds only stands in
                unused["seeds"] = (f"--online runs --online-seeds seeds "
                                   f"({self.online_seeds}) and no evaluation")
            return unused
        if self.reproduce_article:
            why = "--reproduce-article trains its own agents on the article scenario and server"
            return dict.fromkeys((*evaluation, "scenarios", "hardware", "no_online",
                                  "online_samples", "online_seeds", "online_reward",
                                  "online_agents"), why)
        unused = {"article_clients": "only --reproduce-article runs the article job"}
        if self.models:
            unused["runs"] = "--models names the models, so no run folder is searched"
        if self.no_online:
            unused |= dict.fromkeys(("online_samples", "online_seeds", "online_reward",
                                     "online_agents", "jobs"), "--no-online skips the online study")
        return unused


def scenario_list(scenario: str | Sequence[str] | None) -> list[str]:
    """A ``--scenario`` value as a list: one scenario, the several of a mix, or none (None: a
    model saved without its run's config)."""
    if scenario is None:
        return []
    return [scenario] if isinstance(scenario, str) else list(scenario)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _require_choice(flag: str, value: str, choices: Sequence[str]) -> None:
    _require(value in choices, f"{flag} must be one of {', '.join(choices)}, got {shown(value)}"
                               f"{did_you_mean([value], choices)}")


def _require_seeds(flag: str, lowest: int, highest: int) -> None:
    got = f"{lowest}" if lowest == highest else f"{lowest} .. {highest}"
    _require(lowest >= 0 and highest <= MAX_SEED,
             f"{flag}: seeds must lie in 0 .. {MAX_SEED}, got {got}")


def require_usable(flag: str, path: str) -> None:
    """A path option must be a name a file can have: pathlib's exists/is_file raise for one the
    file system refuses (OSError "File name too long", a NUL byte's ValueError). A blank one is
    no name: Path("") is the working directory (--out "" wrote summary.* there, --resume ""
    resumed the newest run) and " " a folder literally named so."""
    _require(bool(path.strip()), f"{flag} {shown(path)}: a path must not be empty or blank")
    problem = unusable_path(path)
    _require(problem is None, f"{flag} {shown(path)}: not a usable path: {problem}")


def require_usable_paths(config: Any) -> None:
    """`require_usable` for every option whose field is marked ``path=True``."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.metadata.get("path") and value is not None:
            for item in value if isinstance(value, list) else [value]:
                require_usable(flag_of(f.name), item)


def _require_folder(flag: str, folder: str) -> None:
    """The output folder must be a folder, or creatable: checked before hours of work."""
    path, where = Path(folder), f"{flag} {shown(folder, quote=False)}"
    for link in (path, *path.parents):
        # a link to a folder since moved: "cannot create LINK: File exists" named a path that
        # seems not to exist
        if link.is_symlink() and not link.exists():
            target = link.parent / os.readlink(link)
            _require(False, f"{where}: {shown(link, quote=False)} is a symbolic link to "
                            f"{shown(target, quote=False)}, which does not exist")
    _require(not path.exists() or path.is_dir(), f"{where} exists and is not a folder")
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    at = shown(existing, quote=False)
    _require(existing.is_dir(), f"{where}: {at} is a file, not a folder")
    _require(os.access(existing, os.W_OK | os.X_OK), f"{where}: {at} is not writable")
    # os.access answers yes to root almost everywhere (a root-squashed NFS share, /proc), so a
    # folder is made here, where a refusal is one line, and removed again: a folder of the
    # check's own in the nearest existing one, not the missing ones themselves, which another
    # train.py started at the same moment makes and fills (making and removing those refused
    # the second of two, "File exists", and could remove the first's before its run was in it)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    if missing:
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".check-", dir=existing))
        except OSError as exc:
            _require(False, f"{where}: cannot create {shown(missing[-1], quote=False)}: "
                         f"{exc.strerror or exc}")


def require_working_directory() -> None:
    """A CLI's working directory must still exist: one removed while a shell stood in it left
    torch unable to load (its MKL ends the process with "Intel oneMKL FATAL ERROR: Cannot load
    libtorch_cpu.so", status 2), the job's paths absolute or not, and a relative --log-dir or
    --out read "cannot create runs: No such file or directory". ``parse_config`` checks it
    once the command line is read (--help answers anywhere), before any path is."""
    try:
        os.getcwd()
    except FileNotFoundError:
        where = os.environ.get("PWD")
        raise ConfigError(f"the working directory{f' {shown(where)}' if where else ''} no longer "
                          f"exists (removed after the shell entered it): cd to a folder that "
                          f"does, and run it again") from None


def _require_utf8_folder(flag: str, folder: str) -> None:
    """A run folder's path must have a UTF-8 form: TensorBoard's writer encodes the path of its
    events file in UTF-8, so a folder whose name holds other bytes (a Latin-1 name on a UTF-8
    system, which Python reads as surrogate escapes) ended each run, its model built, in a
    UnicodeEncodeError traceback."""
    try:
        folder.encode("utf-8")
        return
    except UnicodeEncodeError as exc:
        bad = folder[exc.start]
    try:        # UTF-8 bytes, read in a locale that is not (LC_ALL=C with PYTHONUTF8=0)
        os.fsencode(folder).decode("utf-8")
    except UnicodeError:
        what = f"the byte 0x{ord(bad) - 0xDC00:02x}" if "\udc80" <= bad <= "\udcff" else repr(bad)
        raise ConfigError(f"{flag} {shown(folder)}: its name holds {what}, which is not UTF-8, "
                          f"and TensorBoard names its files in UTF-8: rename the folder or give "
                          f"another") from None
    raise ConfigError(f"{flag} {shown(folder)}: Python reads file names here as "
                      f"{sys.getfilesystemencoding()}, not UTF-8 as TensorBoard names its "
                      f"files: set PYTHONUTF8=1 or a UTF-8 locale, or give an ASCII name")


def flag_of(name: str) -> str:
    """An option's command-line flag: ``eval_seed`` -> ``--eval-seed``."""
    return "--" + name.replace("_", "-")
