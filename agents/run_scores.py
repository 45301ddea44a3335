"""A run's scores on its held-out episode, and ``train.py``'s comparison table.

The held-out episode (``--eval-seed``, ``--eval-tasks`` tasks) and the validation one
(``--validation-seed``) of each scenario trained on are run by ``episodes_of``, each beside
best-static's mean latency there: the eval/ curves (``held_out_eval``), ``--select-best``'s
choice, the final model's final/ row (``score_final_model``) and best_model.zip's best/ row
(``selected_model``). A mix's runs are scored on every scenario's episode, the first's being
the curves', the final/ row's and the table's first section. The baselines' latencies on an
episode are run once per setting (``baseline_latency``). ``finished_line`` is a run's line as
it ends, and ``comparison_table`` the markdown table of a plan's runs and the baselines."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import numpy as np

from agents.base import Policy
from agents.callbacks import FINAL_METRICS, HeldOutEval, ScenarioEpisode
from agents.config import TrainConfig
from agents.evaluation import episode_latencies, make_env, overload_note, short_name, unique_name
from agents.registry import load_policy, make_policy, policy_env_id, runs_on
from agents.run_folder import BEST_MODEL, BestModel
from agents.run_plan import absolute_files, env_for, read_run_config
from agents.run_records import RunResult, SelectedModel
from agents.sb3_factory import SB3Agent
from agents.static import unwrap_env
from envs.reference import setting_key
from inference.messages import shown

TABLE_BASELINES = ("best-static", "all-gpu", "heft", "heft-calibrated")


def episodes_of(policy_on: Callable[[Any], Policy], cfg: TrainConfig, seed: int
                ) -> list[ScenarioEpisode]:
    """Runs of a policy (`policy_on` builds it on an env: the learned model alone, without
    warm-up) on the --eval-tasks episode of `seed` of each scenario trained on, each on its
    own env, with best-static's mean latency there."""
    episodes = []
    for name in cfg.training_scenarios():
        one = scenario_config(cfg, name)
        env = _eval_env(one)
        policy = policy_on(env)
        static = baseline_latency(_env_key(one, seed), "best-static")
        episodes.append(ScenarioEpisode(
            name, partial(episode_latencies, policy, env, seed), float(static.mean())))
    return episodes


def _eval_env(cfg: TrainConfig) -> Any:
    """An env of the --eval-tasks episodes (held-out and validation): rewards in seconds."""
    return env_for(cfg, episode_tasks=cfg.eval_tasks, reward="latency")


def held_out_eval(agent: SB3Agent, cfg: TrainConfig) -> HeldOutEval:
    """The eval/ curves: the learned model alone (no warm-up), on the comparison's episodes."""
    return HeldOutEval(episodes_of(learned_model(agent), cfg, cfg.eval_seed), cfg.eval_interval)


def learned_model(agent: SB3Agent) -> Callable[[Any], Policy]:
    """The learned model of `agent` alone (no warm-up), acting in a given env."""
    return lambda env: SB3Agent(agent.name, agent.model, env)


def saved_model(path: Path) -> Callable[[Any], Policy]:
    """The model zip at `path`, loaded to act in a given env."""
    return lambda env: load_policy(path, env)


def saved_model_latencies(path: Path, cfg: TrainConfig, seed: int) -> dict[str, np.ndarray]:
    """Per-task latencies of the model zip at `path` on the --eval-tasks episode of `seed` of
    each scenario trained on, by name."""
    return {e.name: e.evaluate() for e in episodes_of(saved_model(path), cfg, seed)}


def scenario_config(cfg: TrainConfig, scenario: str) -> TrainConfig:
    """`cfg` on `scenario` alone: its held-out episode (``_env_key``, ``_eval_env``) is that
    scenario's, of the same --eval-seed and --eval-tasks."""
    return dataclasses.replace(cfg, scenario=scenario)


def _first_and_others(latencies: dict[str, np.ndarray]
                      ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Latencies by scenario, split into the first's (the held-out scenario's: the eval/
    curves, final/ row and table's first section) and the others' (a mix's other sections)."""
    first, *others = latencies
    return latencies[first], {name: latencies[name] for name in others}


def selected_model(result: RunResult, cfg: TrainConfig, record: BestModel,
                   final: bool) -> SelectedModel:
    """best_model.zip, chosen on the validation episodes, scored on the held-out ones; `final`:
    it is the run's final model, whose latencies there `result` holds already."""
    if final and result.latency is not None:
        latency, others = result.latency, result.other_scenarios
    else:
        latency, others = _first_and_others(
            saved_model_latencies(result.run_dir / BEST_MODEL, cfg, cfg.eval_seed))
    static = baseline_latency(_env_key(cfg), "best-static")
    return SelectedModel(record, latency, float(latency.mean() / static.mean()), others)


def score_final_model(result: RunResult, cfg: TrainConfig, logger: Any) -> None:
    """Held-out episode of the saved model: `result`'s latency and vs_best_static, the
    comparison row, and the HPARAMS metrics, which `logger` records at the run's last step;
    on a mix, its latencies on the other scenarios' held-out episodes too (`other_scenarios`).

    `result.evaluated`, the eval/ curves' last point, at the run's last step is the saved
    model's deterministic run of these very episodes (written as learn() ends, before the model
    is saved), so it is taken as it is: running the episodes again from model.zip gave the same
    latencies to the bit and cost a model load and an episode of SB3 predicts per scenario."""
    evaluated = result.evaluated
    if evaluated is not None and evaluated[0] == result.steps:
        latencies = evaluated[1]
    else:
        latencies = saved_model_latencies(result.run_dir / "model.zip", cfg, cfg.eval_seed)
    result.latency, result.other_scenarios = _first_and_others(latencies)
    static = baseline_latency(_env_key(cfg), "best-static")
    result.vs_best_static = float(result.latency.mean() / static.mean())
    write_scalars(logger, FINAL_METRICS, (float(result.latency.mean()),
                                          float(np.percentile(result.latency, 95)),
                                          result.vs_best_static), result.steps)


def write_scalars(logger: Any, tags: tuple[str, ...], values: tuple[float, ...],
                  step: int) -> None:
    """One value per tag (the final/ rows), written at `step`."""
    for tag, value in zip(tags, values, strict=True):
        logger.record(tag, value)
    logger.dump(step)


def _env_key(cfg: TrainConfig, seed: int | None = None) -> tuple:
    """baseline_latency's key of the --eval-tasks episode of `seed` (default: the held-out)."""
    return (cfg.env_id, cfg.held_out_scenario(), cfg.hardware, cfg.variant, cfg.eval_tasks,
            cfg.eval_seed if seed is None else seed)


def baseline_latency(key: tuple, name: str) -> np.ndarray:
    """`name`'s per-task latency on the episode of `key` (``_env_key``), run once per setting:
    keyed on what the names read now (``setting_key``), not on the names, so a scenario or
    hardware file rewritten at its path (each trial of a sweep, in one process) is run again."""
    env = make_env(*key[:5])
    return _baseline_run(key, setting_key(unwrap_env(env)), name)


@lru_cache(maxsize=64)
def _baseline_run(key: tuple, setting: tuple, name: str) -> np.ndarray:
    env = make_env(*key[:5])
    return episode_latencies(make_policy(name, env), env, key[5])


def finished_line(r: RunResult) -> str:
    new = r.steps if r.new_steps is None else r.new_steps
    sps = (new / r.seconds) if r.seconds > 0 else float("nan")
    held = (f"; held-out mean latency {r.latency.mean():.2f} s = {r.vs_best_static:.3f}x "
            "best-static" if r.latency is not None else "")
    if r.best is not None:
        held += (f"; best @ {r.best.record.num_timesteps} steps (validation-chosen): held-out "
                 f"mean latency {r.best.latency.mean():.2f} s = {r.best.vs_best_static:.3f}x "
                 "best-static")
    if r.clone is not None:
        held += (f"; clone of the conservative from {r.clone['samples']:.0f} observations "
                 f"agreeing with it on {r.clone['train_agreement']:.0%} "
                 f"({r.clone['heldout_agreement']:.0%} held out)")
    steps = f"{r.steps} steps" if new == r.steps else f"{r.steps} steps ({new} new)"
    if r.stopped is not None:
        steps += f", {r.stopped}"
    return (f"finished {r.spec.label} seed {r.spec.seed}: {steps} in {r.seconds:.0f} s "
            f"({sps:.0f} steps/s){held} -> {r.run_dir}")


# how much worse than its clone a warm run's saved model must score on the held-out episode
# for the trainer to say so: above the few percent by which a good run's points wander
DRIFT_MARGIN = 0.05


def drift_note(r: RunResult) -> str | None:
    """A note for a run that cloned its conservative this session and whose saved model scores
    clearly worse than that clone did at step 0, on the held-out episode; None otherwise, or
    where --select-best kept a best model (the clone is its first candidate). The guard and
    ``latency/vs_static`` price best-static in the learner's own state, which a drifting
    learner's queues inflate, so neither sees such a drift (docs/REWARDS.md: a trace's warm
    seed 0 went from 0.72x to 1.19x): only the eval/ curves did, in TensorBoard."""
    start, final = r.start_vs_best_static, r.vs_best_static
    if r.clone is None or r.best is not None or start is None or not np.isfinite(final) \
            or final <= start * (1 + DRIFT_MARGIN):
        return None
    return (f"note: {r.spec.label} seed {r.spec.seed} ended at {final:.3f}x best-static on the "
            f"held-out episode, worse than its clone's {start:.3f}x at step 0: training moved it "
            f"off its warm start, which the guard and latency/vs_static (both pricing best-static "
            f"in the learner's own state) can miss; --select-best keeps the best model seen on a "
            f"validation episode, the clone included")


def table_baselines(cfg: TrainConfig) -> list[str]:
    """The table's baselines that the run's hardware and env can run: all-gpu only where a
    device is called gpu, and heft-split (the baseline to beat there) in the Split env."""
    devices = env_for(cfg, episode_tasks=1).unwrapped.device_names
    names = [n for n in TABLE_BASELINES if runs_on(n, devices)]
    return names + (["heft-split"] if policy_env_id("heft-split") == cfg.env_id else [])


def comparison_table(config: TrainConfig, results: list[RunResult]) -> str | None:
    """Trained runs and the static / HEFT baselines on the held-out episode (markdown table);
    None when the runs had no held-out episode (``--eval-tasks 0``). A mix's runs get a
    section per scenario, each on that scenario's held-out episode of the same seed and
    length, against its own best-static; --select-best's row (a model chosen on every
    scenario's validation episode) is in each."""
    cfg = absolute_files(config)   # as the runs recorded it: baseline_latency's cache hits
    if config.resume is not None and results:
        # the resumed run's own config: its --eval-tasks may be 0 where the command line's is not
        cfg = read_run_config(results[0].run_dir / "config.yaml")
    if not cfg.eval_tasks or all(r.latency is None for r in results):
        return None
    # the plan's seeds, not the results': where a seed's run failed, "ppo" alone read as the
    # first seed's
    many_seeds = len({r.spec.seed for r in results} | set(cfg.seeds)) > 1
    baselines = table_baselines(cfg)
    trained = cfg.training_scenarios()
    sections = []
    for i, name in enumerate(trained):
        rows = []
        for r in results:
            latency = r.latency if i == 0 else r.other_scenarios.get(name)
            if latency is not None:
                label = r.spec.label + (f" (seed {r.spec.seed})" if many_seeds else "")
                rows.append((label, latency))
                best = None if r.best is None else (
                    r.best.latency if i == 0 else r.best.other_scenarios.get(name))
                if best is not None and r.best is not None:   # scored here, chosen elsewhere
                    rows.append((f"{label} (best @ {r.best.record.num_timesteps} steps, "
                                 f"validation-chosen)", best))
        sections.append(_table_section(cfg if i == 0 else scenario_config(cfg, name),
                                       trained, rows, baselines))
    return "\n\n".join(sections)


def _table_section(cfg: TrainConfig, trained: list[str],
                   rows: list[tuple[str, np.ndarray]], baselines: list[str]) -> str:
    """The table of `cfg`'s held-out episode: `rows` (trained runs' latencies there) and
    `baselines`, each over that episode's best-static, and its overload note if any."""
    key = _env_key(cfg)
    # its length, not --eval-tasks: a replayed trace that runs out ends the episode early
    static_latency = baseline_latency(key, "best-static")
    static = static_latency.mean()
    rows = rows + [(name, baseline_latency(key, name)) for name in baselines]
    # as evaluate.py names its sections: the hardware and variant where not the scenario's own
    # and a file by its name, as evaluate.py's sections do (its path where two share a name)
    given = [f"{what} {shown(value, quote=False)}" for what, value in
             (("hardware", cfg.hardware and short_name(cfg.hardware)), ("variant", cfg.variant))
             if value]
    setting = f" ({', '.join(given)})" if given else ""
    if len(trained) > 1:
        setting += f" (trained on {', '.join(unique_name(s, trained) for s in trained)})"
    scenario = shown(unique_name(cfg.held_out_scenario(), trained), quote=False)
    lines = [f"Held-out episode: {cfg.env_id}, scenario {scenario}{setting}, "
             f"workload seed {cfg.eval_seed}, {len(static_latency)} tasks",
             "",
             "| agent | mean latency (s) | p95 latency (s) | vs best-static |",
             "|---|---:|---:|---:|"]
    for name, lat in rows:
        lines.append(f"| {name} | {lat.mean():.2f} | {np.percentile(lat, 95):.2f} | "
                     f"{lat.mean() / static:.3f} |")
    note = overload_note(static_latency)
    if note and cfg.reward == "relative":
        # every task waits behind the backlog static waits behind too: a random policy 1.6x
        # slower than static on bursty scored static's 0 a step on average
        note += ("; and there the relative reward (--reward's default) barely tells the "
                 "learners' placements apart: train with --reward normalised, or latency with "
                 "--normalize")
    return "\n".join(lines + (["", note] if note else []))
