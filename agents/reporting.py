"""What ``evaluate.py`` does: find the models, evaluate them and the baselines, write results/.

Outputs (each written via temp file + rename, so a failure leaves no half-written file):

* ``summary.csv`` / ``summary.md``: per agent and scenario, mean / p50 / p95 / p99 latency,
  ratio to best static and gap to the oracle, each with a 95% t-interval over held-out
  seeds (see ``agents.evaluation`` for the definitions);
* ``latency_cdf.png``: per-task latency CDF per agent (a panel per scenario);
* ``learning_curves.png``: ``latency/vs_static`` against the step of every run (TensorBoard);
* ``stabilization.png`` / ``stabilization.md``: the online study (``agents.online.deploy``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.base import read_policy_file
from agents.config import ConfigError, EvalConfig, TrainConfig, read_yaml_options
from agents.evaluation import (
    REFERENCES,
    AgentResult,
    episode_latencies,
    episode_metrics,
    make_env,
    online_markdown,
    online_study,
    summary_csv,
    summary_markdown,
)
from agents.files import write_text
from agents.registry import (
    UnknownPolicyName,
    check_fixed_policy_name,
    load_policy,
    make_policy,
    policy_env_id,
    valid_names,
)
from envs import ENV_IDS

DEFAULT_ENV, SPLIT_ENV = ENV_IDS
DEFAULT_ONLINE = ("ppo", "ppo-warm", "best-static", "oracle")
FULL_ONLINE = ("ppo", "ppo-warm", "dqn", "dqn-warm", "best-static", "heft-calibrated", "oracle")
MIN_ONLINE_SEEDS = 5


@dataclass
class ModelEntry:
    """A saved model to evaluate, and what its run was trained on (if it has a run folder)."""

    label: str
    path: Path
    env_id: str = DEFAULT_ENV
    scenario: str | None = None
    hardware: str | None = None
    variant: str | None = None
    run_dir: Path | None = None
    seed: int | None = None


def _entry(path: Path, run_dir: Path | None) -> ModelEntry:
    from agents.training import RunSpec, canonical_warmup

    config_file = run_dir / "config.yaml" if run_dir is not None else None
    if config_file is None or not config_file.is_file():
        # A bare zip: the env it acts in follows from what it saved.
        env_id = _zip_env_id(path)
        return ModelEntry(path.stem if path.stem != "model" else path.parent.name, path,
                          env_id, run_dir=run_dir)
    try:
        cfg = TrainConfig(**read_yaml_options(TrainConfig, config_file))
    except (ConfigError, TypeError) as exc:
        raise ConfigError(f"run config {config_file} is unreadable: {exc}") from None
    spec = RunSpec(cfg.agents[0], canonical_warmup(cfg.warmup[0]), cfg.seeds[0])
    return ModelEntry(spec.label, path, cfg.env_id, cfg.scenario, cfg.hardware, cfg.variant,
                      run_dir, spec.seed)


def _zip_env_id(path: Path) -> str:
    """The env a bare model zip acts in: a saved policy's own, or an SB3 model's action space's."""
    from agents.sb3_factory import saved_model_info

    try:
        saved = read_policy_file(path)
        if saved is not None:
            return policy_env_id(str(saved["name"]))
        return saved_model_info(path)[1]
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def discover_models(cfg: EvalConfig) -> tuple[list[ModelEntry], list[str]]:
    """The models to evaluate (``--models`` or every finished run under ``--runs``) and notes."""
    notes: list[str] = []
    entries = []
    if cfg.models:
        for item in cfg.models:
            p = Path(item)
            if p.is_dir():
                if not (p / "model.zip").is_file() and any(p.glob("*/model.zip")):
                    raise ConfigError(f"{p} is a folder of run folders, not a run: pass "
                                      f"--runs {p} (every finished run there) or its run folders")
                if not (p / "model.zip").is_file():
                    raise ConfigError(f"run folder {p} has no model.zip (unfinished run? "
                                      f"continue it with: python train.py --resume {p})")
                entries.append(_entry(p / "model.zip", p))
            elif p.is_file():
                entries.append(_entry(p, p.parent if (p.parent / "config.yaml").is_file()
                                      else None))
            else:
                raise ConfigError(f"model file {p} does not exist")
        return entries, notes
    root = Path(cfg.runs)
    runs = sorted(d for d in root.iterdir() if d.is_dir()) if root.is_dir() else []
    for d in runs:
        if (d / "model.zip").is_file():
            entries.append(_entry(d / "model.zip", d))
        elif (d / "config.yaml").is_file():
            notes.append(f"skipping {d.name}: no model.zip (unfinished; python train.py "
                         f"--resume {d} continues it)")
    entries.sort(key=lambda e: (e.label, e.seed if e.seed is not None else -1, str(e.path)))
    if not entries:
        notes.append(f"no trained models under {root}/: train some with `python train.py` "
                     f"(or pass --models); evaluating the baselines alone")
    return entries, notes


def check_inputs(cfg: EvalConfig, entries: list[ModelEntry], scenarios: list[str]) -> None:
    """Fail early, naming the culprit: bad scenario/hardware/baseline names, unloadable models."""
    for scenario in scenarios:
        try:
            env_of = {env_id: make_env(env_id, scenario, cfg.hardware,
                                       episode_tasks=cfg.episode_tasks)
                      for env_id in {DEFAULT_ENV, *map(policy_env_id, cfg.baselines)}}
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        for name in cfg.baselines:
            try:
                check_fixed_policy_name(name, "baseline")
            except ValueError as exc:
                raise ConfigError(f"{exc} (evaluate a trained model with --models)") from None
            try:
                make_policy(name, env_of[policy_env_id(name)])
            except UnknownPolicyName:
                raise ConfigError(f"unknown baseline {name!r}; valid names: "
                                  f"{valid_names(learners=False)}") from None
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"baseline: {exc}") from None
    for entry in entries:
        try:
            env = _model_env(cfg, entry, scenarios[0])
            load_policy(entry.path, env)
        except (FileNotFoundError, ValueError) as exc:
            raise ConfigError(str(exc)) from None


def _model_env(cfg: EvalConfig, entry: ModelEntry, scenario: str) -> Any:
    return make_env(entry.env_id, scenario, cfg.hardware or entry.hardware, entry.variant,
                    cfg.episode_tasks)


def scenarios_of(cfg: EvalConfig, entries: list[ModelEntry]) -> list[str]:
    if cfg.scenarios:
        return list(dict.fromkeys(cfg.scenarios))
    found = [e.scenario for e in entries if e.scenario]
    return list(dict.fromkeys(found)) or ["article"]


def heldout_seeds(cfg: EvalConfig, n: int | None = None) -> list[int]:
    return [cfg.seed_base + i for i in range(n if n is not None else cfg.seeds)]


def evaluate_agents(cfg: EvalConfig, entries: list[ModelEntry], scenarios: list[str],
                    tick: Callable[[], None] = lambda: None) -> list[AgentResult]:
    """Every model and baseline on every scenario and held-out seed (models first)."""
    seeds = heldout_seeds(cfg)
    ref_cache: dict[tuple, dict[int, tuple[np.ndarray, np.ndarray]]] = {}

    def references(scenario: str, hardware: str | None, variant: str | None):
        key = (scenario, hardware, variant)
        if key not in ref_cache:
            env = make_env(DEFAULT_ENV, scenario, hardware, variant, cfg.episode_tasks)
            static, oracle = make_policy("best-static", env), make_policy("oracle", env)
            ref_cache[key] = {s: (episode_latencies(static, env, s, cfg.episodes),
                                  episode_latencies(oracle, env, s, cfg.episodes))
                              for s in seeds}
        return ref_cache[key]

    results: dict[tuple[str, str], AgentResult] = {}
    for scenario in scenarios:
        for entry in entries:
            env = _model_env(cfg, entry, scenario)
            policy = load_policy(entry.path, env)
            refs = references(scenario, cfg.hardware or entry.hardware, entry.variant)
            result = results.setdefault((entry.label, scenario),
                                        AgentResult(entry.label, scenario, "model", runs=0))
            result.runs += 1
            for seed in seeds:
                latency = episode_latencies(policy, env, seed, cfg.episodes)
                result.samples.append(episode_metrics(latency, *refs[seed]))
                result.latencies.append(latency)
                tick()
        refs = references(scenario, cfg.hardware, None)
        for name in cfg.baselines:
            env = make_env(policy_env_id(name), scenario, cfg.hardware, None, cfg.episode_tasks)
            result = results.setdefault((name, scenario), AgentResult(name, scenario, "baseline"))
            policy = None if name in REFERENCES else make_policy(name, env)
            for seed in seeds:
                if policy is None:
                    latency = refs[seed][REFERENCES.index(name)]
                else:
                    latency = episode_latencies(policy, env, seed, cfg.episodes)
                result.samples.append(episode_metrics(latency, *refs[seed]))
                result.latencies.append(latency)
                tick()
    return list(results.values())


def work_units(cfg: EvalConfig, entries: list[ModelEntry], scenarios: list[str]) -> int:
    """Progress-bar items of the evaluation: one per agent x scenario x held-out seed."""
    return (len(entries) + len(cfg.baselines)) * len(scenarios) * cfg.seeds


def run(cfg: EvalConfig, report: Callable[[str], None] = print) -> list[Path]:
    """The whole evaluation; returns the files written under ``cfg.out``."""
    from tqdm.auto import tqdm

    from agents import plots

    out = Path(cfg.out)
    online_n = cfg.online_seeds or (max(cfg.seeds, MIN_ONLINE_SEEDS) if cfg.online else cfg.seeds)
    entries: list[ModelEntry] = []
    notes: list[str] = []
    online_agents: tuple[str, ...] = ()
    if cfg.online:
        scenarios = scenarios_of(cfg, [])
        online_agents = FULL_ONLINE
    else:
        entries, notes = discover_models(cfg)
        scenarios = scenarios_of(cfg, entries)
        online_agents = () if cfg.no_online else DEFAULT_ONLINE
    check_inputs(cfg, entries, scenarios)      # a bad input's error comes alone, before notes
    for note in notes:
        report(note)
    written: list[Path] = []
    total = (0 if cfg.online else work_units(cfg, entries, scenarios)) \
        + len(online_agents) * online_n
    with tqdm(total=total, desc="evaluate", unit="item", disable=not cfg.progress_bar) as bar:
        if not cfg.online:
            results = evaluate_agents(cfg, entries, scenarios, tick=lambda: bar.update(1))
            rows = [r.row() for r in results]
            bar.clear()
            report(fmt_summary(rows))
            written.append(write_text(out / "summary.csv", summary_csv(rows)))
            written.append(write_text(out / "summary.md", summary_markdown(
                rows, heldout_seeds(cfg), cfg.episodes)))
            cdf = {s: {r.agent: np.concatenate(r.latencies) for r in results if r.scenario == s}
                   for s in scenarios}
            written.append(plots.latency_cdf(cdf, out / "latency_cdf.png"))
            runs = [(f"{e.label} s{e.seed}", e.run_dir) for e in entries if e.run_dir is not None]
            if runs:
                written.append(plots.learning_curves(runs, out / "learning_curves.png"))
            else:
                report("no run folders with TensorBoard events: no learning_curves.png")
        if online_agents:
            seeds = heldout_seeds(cfg, online_n)
            study = online_study(online_agents, seeds, cfg.online_samples, scenarios[0],
                                 cfg.hardware, tick=lambda: bar.update(1))
            title = (f"online deployment from sample 0: {scenarios[0]}, mean and 95% band "
                     f"over {len(seeds)} seed(s)")
            written.append(plots.stabilization(study.curves, out / "stabilization.png",
                                               title=title))
            written.append(write_text(out / "stabilization.md", online_markdown(
                study, seeds, cfg.online_samples, scenarios[0])))
    return written


def reproduce_article(cfg: EvalConfig) -> Any:
    """Hand over to ``agents.article.reproduce(out_dir, seeds)`` (imported only when asked)."""
    import importlib

    try:
        article = importlib.import_module("agents.article")
    except ModuleNotFoundError as exc:
        if exc.name != "agents.article":
            raise
        raise ConfigError("--reproduce-article needs agents/article.py (agents.article."
                          "reproduce), which is not available yet") from None
    reproduce = getattr(article, "reproduce", None)
    if reproduce is None:
        raise ConfigError("agents.article has no reproduce(out_dir, seeds)")
    if cfg.article_clients is None:
        return reproduce(Path(cfg.out), heldout_seeds(cfg))
    return reproduce(Path(cfg.out), heldout_seeds(cfg), clients=cfg.article_clients)


def fmt_summary(rows: list[dict[str, Any]]) -> str:
    """A short console table: agent, scenario, mean latency and ratio to best static."""
    lines = [f"{'scenario':<14s} {'agent':<24s} {'mean (s)':>9s} {'vs static':>9s}"]
    for r in rows:
        lines.append(f"{r['scenario']:<14s} {r['agent']:<24s} {r['mean_latency_s']:>9.2f} "
                     f"{r['vs_best_static']:>9.3f}")
    return "\n".join(lines)
