"""A ``train.py`` plan before any run trains, and the config each run reads.

``plan`` makes the runs (agent x warm-up spec x seed), after checking every option that can be
checked before training: the agents, the warm-up spec (``canonical_warmup``, its one
spelling), the conservative policy, each agent's hyper-parameters and each run folder's
longest path, so that bad options never leave a run folder. ``env_for`` builds the env a
config names, its training env or its held-out and validation ones; ``run_name`` a run
folder's name. ``read_run_config`` reads a run folder's config.yaml back as its one run
(``run_spec``), with the scenario and hardware files that ``absolute_files`` made absolute."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from agents import sb3_hyperparams
from agents.commands import program
from agents.config import ConfigError, TrainConfig
from agents.config_parsing import read_yaml_options
from agents.evaluation import make_env
from agents.files import check_room
from agents.registry import (
    SB3_NAMES,
    check_first_action,
    check_fixed_policy,
    make_fixed_policy,
    unknown_learner,
)
from agents.run_folder import run_files
from agents.run_records import RunSpec
from agents.run_setting import hp_record, scenario_envs
from agents.sb3_factory import make_sb3, wrap_for
from agents.sb3_hyperparams import (
    check_replay_buffer,
    check_sub_sampling,
    hyperparams_with,
    load_hyperparams,
)
from agents.sb3_memory import check_memory
from agents.user_callbacks import check_callbacks
from agents.warmup import WARMUP_PARTS, WarmupConfig, as_env_actions
from agents.warmup_config import spec_starts_warm, starts_warm
from envs.scenario import SCENARIO_DIR, load_scenario, naming_field
from envs.scenario_mix import MixRefused
from envs.workload import check_span
from inference.hardware import PRESET_DIR, preset_file
from inference.messages import shown


def canonical_warmup(spec: str) -> str:
    try:
        WarmupConfig.from_parts(spec)
    except ValueError as exc:
        raise ConfigError(f"--warmup {shown(spec)}: {exc}") from None
    parts = {p.strip().lower() for p in spec.split(",") if p.strip()}
    if parts in (set(), {"none"}):
        return "none"
    if parts in ({"all"}, set(WARMUP_PARTS)):
        return "all"
    return ",".join(p for p in WARMUP_PARTS if p in parts)


def warmup_config(config: TrainConfig, spec: str, done_steps: int = 0) -> WarmupConfig | None:
    kwargs: dict[str, Any] = {"conservative": config.conservative}
    if config.clone_samples is not None:
        kwargs["clone_samples"] = config.clone_samples
    warm = WarmupConfig.from_parts(spec, **kwargs)
    if warm is not None and done_steps:      # resuming: cloned already, part of phase 1 done
        warm = dataclasses.replace(warm, clone=False, steps=max(0, warm.steps - done_steps))
    return warm


def env_for(config: TrainConfig, episode_tasks: int | None = None, reward: str | None = None
            ) -> Any:
    """The config's env. A training env (no `reward` given) takes the config's reward and
    prices best-static whichever it is: the warm-up's guard and the latency/vs_static curve
    read that price; on several scenarios it is their mix (``InferenceAllocMix-v0``).
    `reward` given (the held-out and validation episodes): that reward, static priced only
    where it needs it, on the first scenario."""
    scenario = config.training_scenarios() if reward is None else config.held_out_scenario()
    try:
        return make_env(config.env_id, scenario, config.hardware, config.variant,
                        episode_tasks if episode_tasks is not None else config.episode_tasks,
                        reward=reward if reward is not None else config.reward,
                        price_static=reward is None,
                        weights=config.scenario_weights if reward is None else None)
    except MixRefused as exc:
        raise ConfigError(_mix_refusal(exc)) from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _mix_refusal(exc: MixRefused) -> str:
    """The env's refusal of a mix as train.py's user meets it: advice in its options
    (--scenario, --hardware, --variant), not the env's keywords (hardware=, weights=), which
    train.py has not."""
    if exc.kind == "twice":
        return f"--scenario {exc.problem}: give each scenario once"
    return (f"--scenario {exc.problem}; give scenarios of one hardware, variant and model "
            f"(--hardware and --variant set them for all)")


def plan(config: TrainConfig, hp_source: str = "", hp_of: dict[str, Any] | None = None
         ) -> list[RunSpec]:
    """The runs to make, after checking every option that can be checked before training.
    `hp_source` begins a refusal of the hyper-parameters: where a ``--config`` file set some
    (``agents.config_parsing.GivenOptions``); '' for ``--hp {...}``."""
    agents = [a.strip().lower() for a in config.agents]
    for agent in agents:
        if agent not in SB3_NAMES:
            raise ConfigError(unknown_learner(agent))
    specs = list(dict.fromkeys(canonical_warmup(w) for w in config.warmup))
    if hp_of is not None and config.hp:
        _check_hp_of(hp_source, hp_of, config, agents, specs)
    try:
        check_callbacks(config.callbacks)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    env = env_for(config)
    if config.eval_tasks:
        # the held-out episode's env is built once the run has trained: a trace_span too short
        # for --eval-tasks failed there, a traceback after the training (exit 1)
        held_out = scenario_envs(env)[0].scenario
        try:
            with naming_field(held_out, "workload.trace_span"):
                check_span(held_out.workload, config.eval_tasks)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    warming = any(w != "none" for w in specs)
    try:
        if warming:
            conservative = make_fixed_policy(config.conservative, env, "--conservative policy")
        else:
            # a name no fixed policy has is refused without warm-up too: it went unnoticed
            # until the config file was reused with warm-up on (nothing is built, and one the
            # env cannot take is left be)
            check_fixed_policy(config.conservative, env, "--conservative policy")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    warms = [warmup_config(config, w) for w in specs]
    if warming:
        check_conservative(config, conservative, env, warms)
    warm_starts = [False, True] if any(starts_warm(w) for w in warms) else [False]
    for agent in dict.fromkeys(agents):
        check_hyperparams(config, agent, env, warm_starts, hp_source)
    # a seed given twice would train the same run twice, and evaluate.py count it as two
    runs = [RunSpec(a, w, s) for s in dict.fromkeys(config.seeds) for a in dict.fromkeys(agents)
            for w in specs]
    # each run's longest path, before any run starts (new_run_dir checks it again as it makes
    # the folder): a warm run cloned for half a minute before a --log-dir too long for its
    # files was refused, and a later run's longer name stopped a plan whose first had trained
    for spec in runs:
        check_room(Path(config.log_dir) / run_name(config, spec), run_files(config.timesteps),
                   "--log-dir")
    return runs


def drift_notes(config: TrainConfig, specs: list[str]) -> list[str]:
    """A note where warm runs fine-tune a clone on a replayed trace with the relative reward
    and no --select-best: there (azure-conv at 0.05) PPO's first updates took a good clone of
    heft-calibrated (0.83x best-static on the held-out seeds) to all-GPU and all-CPU, 1.17x,
    which the reward and
    the guard, pricing best-static in the learner's own queued state, did not see; selection
    on the validation episode kept the clone (docs/REWARDS.md)."""
    if config.select_best or config.reward != "relative" or not any(
            spec_starts_warm(spec) for spec in specs):
        return []
    traced = [name for name in config.training_scenarios()
              if load_scenario(name).workload.trace is not None]
    if not traced:
        return []
    return [f"note: the warm runs fine-tune a clone on a replayed trace ({', '.join(traced)}) "
            f"with the relative reward, which prices best-static in the learner's own queued "
            f"state: near the hardware's capacity fine-tuning can leave the clone for a "
            f"placement that queues up best-static's devices unseen (azure-conv at 0.05: a "
            f"clone at 0.83x best-static on the held-out seeds ended at 1.17x); --select-best "
            f"keeps the clone unless a "
            f"later model beats it on the validation episode (docs/REWARDS.md)"]


def _check_hp_of(hp_source: str, hp_of: dict[str, Any], config: TrainConfig,
                 agents: list[str], specs: list[str]) -> None:
    """Refuse runs trained with a --config file's hp that are every hyper-parameter of another
    (`hp_of`, the file's record: a run's config.yaml, ``agents.run_setting.hp_record``): a
    cold run's config.yaml with `warmup: [none, all]` trained ppo-warm at the cold learning
    rate, 1e-3, which undoes its clone (agents/hyperparams/ppo.yaml's warm_start: 1e-4)."""
    others: dict[str, None] = {}   # in order, each once
    for agent in agents:
        for spec in specs:
            record = hp_record(agent, config.env_id, spec)
            if record != {key: hp_of[key] for key in record}:
                others[_hp_run(record)] = None
    if others:
        raise ConfigError(
            f"{hp_source} {'are' if ' and ' in hp_source else 'is'} every hyper-parameter of "
            f"{_hp_run(hp_of)}, as the file's hp_of records, and would train "
            f"{', '.join(others)} with them, not with the values agents/hyperparams/ gives "
            f"each (a warm start's learning rate, say): cut the file's hp down to the values "
            f"you mean to set (or remove it), or remove hp_of to train them with these anyway")


def _hp_run(record: dict[str, Any]) -> str:
    """A run as ``hp_record`` has it: "ppo on InferenceAlloc-v0, fine-tuning a clone"."""
    start = "fine-tuning a clone" if record["warm_start"] else "from scratch"
    return f"{record['agent']} on {record['env_id']}, {start}"


def check_hyperparams(config: TrainConfig, agent: str, env: Any, warm_starts: list[bool],
                      hp_source: str = "") -> None:
    """A ConfigError, before any run starts, where `agent`'s hyper-parameters (its YAML's,
    layered on by ``config.hp``, and for each of `warm_starts` its warm_start values) cannot
    train on `env`; `hp_source` as `plan`'s, to begin the message."""
    try:
        load_hyperparams(agent, config.env_id)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    try:
        # the YAML's values too, with or without --hp, and a warm-started run's, layered on
        # its warm_start ones: an edited trpo.yaml's factor that keeps one transition
        # trained a policy that never moved, as a --hp one did
        resolved = [hyperparams_with(agent, config.env_id, config.hp, warm_start=warm)
                    for warm in warm_starts]
        wrapped = wrap_for(agent, env)
        for params in resolved:     # against --n-envs, not the trial's one env
            check_memory(agent, params, wrapped.observation_space, wrapped.action_space,
                         config.n_envs)
            check_sub_sampling(agent, params, config.n_envs)
            check_replay_buffer(agent, params, config.n_envs)
        # built once (cheap), with or without --hp: SB3's own asserts (an edited ppo.yaml's
        # batch_size of 1) were a traceback after the clone, where --hp's were one line
        make_sb3(agent, env, seed=0, overrides=config.hp)
    except (TypeError, ValueError, AssertionError) as exc:
        where = hp_source or (f"--hp {shown(config.hp, quote=False)}" if config.hp
                              else f"{sb3_hyperparams.HYPERPARAMS_DIR / agent}.yaml")
        raise ConfigError(f"{where} for {agent}: {exc}") from None


def check_conservative(config: TrainConfig, policy: Any, env: Any,
                       warms: list[WarmupConfig | None]) -> None:
    """Refuse, as a ConfigError naming it, a warm-up's conservative `policy` (built on `env`)
    that would fail inside a run: one whose first action `env` refuses, handed on as the
    warm-up hands it (device ids one-hot in a Box); and, where it acts in training (a
    conservative phase or a guard in `warms`), one that cannot act for every sub-env at once.
    That is one that reads the live env's current task (``reads_live_env``: the oracle, gated
    or not, or one of yours that says so) with --vec-env subproc, whose envs step in other
    processes and leave the trainer's env unmoved; and one whose predict() refuses a batch of
    --n-envs observations (as those that read the live env do). Each failed inside the first
    run, after cloning."""
    name = config.conservative
    space = env.unwrapped.action_space
    try:
        check_first_action(policy, env, f"--conservative policy {name}",
                           lambda action: as_env_actions(action, space)[0]
                           if isinstance(space, spaces.Box) else action)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not any(w is not None and (w.steps or w.guard) for w in warms):
        return
    if getattr(policy, "reads_live_env", False) and config.vec_env == "subproc":
        raise ConfigError(f"--conservative {name} cannot act for --vec-env subproc: it reads "
                          f"the live env's current task, and the envs step in other processes; "
                          f"use --vec-env dummy, or --warmup clone (no conservative phase, no "
                          f"guard)")
    if config.n_envs == 1:
        return
    obs, _ = env.reset(seed=0)
    try:
        policy.predict(np.stack([obs] * config.n_envs))
    except ValueError as exc:
        raise ConfigError(f"--conservative {name} cannot act for --n-envs {config.n_envs} envs "
                          f"at once ({exc}); use --n-envs 1, or --warmup clone (no conservative "
                          f"phase, no guard)") from None


def run_name(config: TrainConfig, spec: RunSpec) -> str:
    return f"{config.env_id}__{spec.label}__{spec.seed}__{int(time.time())}"


def read_run_config(path: Path, records: dict[str, Any] | None = None) -> TrainConfig:
    """A run folder's config.yaml, as ``train_run`` writes it: one agent, warm-up spec and seed;
    the run's records it holds go to `records`, where given (``read_yaml_options``).

    Anything else (a hand-edited file, a ``train.py --config`` file of several runs beside a
    model) is a ConfigError naming the file: its first agent and seed were taken for the run's
    (a DQN beside ``agents: [ppo, dqn]`` was evaluated as "ppo"), and ``agents: []`` or an
    unknown agent was a traceback."""
    options = read_yaml_options(TrainConfig, path, records)
    if not options:     # read as the defaults', and refused as a run of two warm-up specs
        raise ConfigError(f"{path} is empty: a run folder's config.yaml holds the options "
                          f"{program('train')} ran it with; restore it as the run wrote it")
    try:
        cfg = TrainConfig(**options)
    except TypeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if (len(cfg.agents) != 1 or len(cfg.warmup) != 1 or len(cfg.seeds) != 1
            or cfg.agents[0] not in SB3_NAMES):
        # what the file gives: a default it does not give was shown as if it did
        has = ", ".join(f"{key} {getattr(cfg, key)}" if key in options else f"no {key}"
                        for key in ("agents", "warmup", "seeds"))
        raise ConfigError(f"{path} is not a run's config: a run folder's names one agent "
                          f"({', '.join(SB3_NAMES)}), one warm-up spec and one seed, as "
                          f"{program('train')} writes it; this one has {has}")
    run_spec(cfg)       # ConfigError naming the warm-up spec
    return cfg


def run_spec(cfg: TrainConfig) -> RunSpec:
    """The one run of a run folder's config (``read_run_config``)."""
    return RunSpec(cfg.agents[0], canonical_warmup(cfg.warmup[0]), cfg.seeds[0])


def absolute_files(config: TrainConfig) -> TrainConfig:
    """Scenario and hardware files as absolute paths: a run's config.yaml is read again by
    --resume and evaluate.py, from whatever folder they run in."""
    def absolute(value: str, presets: Path) -> str:
        if preset_file(value, presets) is not None:   # a preset, not a file
            return value
        if Path(value).suffix in (".yaml", ".yml") or Path(value).is_file():
            return str(Path(value).absolute())
        return value

    scenarios = [absolute(name, SCENARIO_DIR) for name in config.training_scenarios()]
    hardware = config.hardware
    return dataclasses.replace(
        config, scenario=scenarios[0] if isinstance(config.scenario, str) else scenarios,
        hardware=None if hardware is None else absolute(hardware, PRESET_DIR))
