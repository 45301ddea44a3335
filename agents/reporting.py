"""What ``evaluate.py`` does: find the models, evaluate them and the baselines, write results/.

Outputs (each written via temp file + rename, so a failure leaves no half-written file):

* ``summary.csv`` / ``summary.md``: per agent and scenario, mean / p50 / p95 / p99 latency,
  ratio to best static and gap to the oracle, each with a 95% t-interval over held-out
  seeds (see ``agents.evaluation`` for the definitions); summary.csv's last columns,
  ``hardware`` and ``variant``, name each row's setting apart from its section's label;
* ``latency_cdf.png``: per-task latency CDF per agent (a panel per scenario);
* ``learning_curves.png``: ``latency/vs_static`` (training stream) and ``eval/vs_best_static``
  (held-out episode) against the step of every run (TensorBoard);
* ``stabilization.png`` / ``stabilization.md``: the online study (``agents.online.deploy``).

Run again into the same folder, an evaluation replaces the outputs it writes. One it has
nothing for (``learning_curves.png`` without run folders of TensorBoard events) is removed,
as it would stand beside the new summary as if of the same runs; those of a study it skips
(``stabilization.*`` with ``--no-online``, the summary's four with ``--online``) are kept,
being that study's, and a line names them as from an earlier evaluation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.base import read_policy_file
from agents.commands import command, program
from agents.config import MIN_ONLINE_SEEDS, ConfigError, EvalConfig, scenario_list
from agents.evaluation import (
    REFERENCES,
    AgentResult,
    check_online_agents,
    episode_latencies,
    episode_metrics,
    make_env,
    online_markdown,
    online_study,
    overload_note,
    short_name,
    summary_csv,
    summary_markdown,
    unique_name,
)
from agents.files import check_room, model_file, temp_file, write_text
from agents.locks import FolderBusy, holding
from agents.registry import (
    check_first_action,
    load_policy,
    make_fixed_policy,
    make_policy,
    policy_env_id,
    runs_on,
)
from envs import ENV_IDS
from envs.scenario import SCENARIO_DIR, load_scenario
from inference.hardware import PRESET_DIR, Hardware, load_hardware, preset_file
from inference.messages import shown
from inference.variants import resolve_variant, variant_label
from inference.yamlio import path_version

if TYPE_CHECKING:
    from agents.run_setting import Settings

DEFAULT_ENV, SPLIT_ENV = ENV_IDS
DEFAULT_ONLINE = ("ppo", "ppo-warm", "best-static", "oracle")
FULL_ONLINE = ("ppo", "ppo-warm", "dqn", "dqn-warm", "best-static", "heft-calibrated", "oracle")
SUMMARY_OUTPUTS = ("summary.csv", "summary.md", "latency_cdf.png", "learning_curves.png")
ONLINE_OUTPUTS = ("stabilization.png", "stabilization.md")


@dataclass
class ModelEntry:
    """A saved model to evaluate, and what its run was trained on (if it has a run folder)."""

    label: str
    path: Path
    env_id: str = DEFAULT_ENV
    scenario: str | tuple[str, ...] | None = None   # several: a mix's (train.py --scenario)
    hardware: str | None = None
    variant: str | None = None
    run_dir: Path | None = None
    seed: int | None = None
    conservative: str | None = None      # the warm-up's conservative policy, if it has one
    settings: Settings | None = None     # its run's setting as it started (config.yaml's record)

    def trained_on(self) -> list[str]:
        """The scenarios its run was trained on (none known for a bare zip)."""
        return scenario_list(self.scenario)

    def identity(self) -> tuple[str | tuple[str, ...] | None, ...]:
        """What must match for two entries of one label to pool as seeds of one agent. The
        training scenario too: every model runs on every scenario evaluated, and a PPO
        trained on article and one trained on bursty pooled as two seeds of one "ppo"."""
        return (self.env_id, self.conservative, self.scenario,
                None if self.run_dir else str(self.path))


def _run_config_of(path: Path, run_dir: Path | None) -> Path | None:
    """The run's config.yaml: beside the model, or above a checkpoint's folder."""
    for folder in (run_dir, path.parent.parent if path.parent.name == "checkpoints" else None):
        if folder is not None and (folder / "config.yaml").is_file():
            return folder / "config.yaml"
    return None


def _entry(path: Path, run_dir: Path | None) -> ModelEntry:
    from agents.run_folder import BEST_MODEL
    from agents.run_plan import read_run_config, run_spec
    from agents.run_setting import recorded_settings

    config_file = _run_config_of(path, run_dir)
    if config_file is None:
        # A bare zip: the env it acts in follows from what it saved.
        env_id = _zip_info(path)[1]
        return ModelEntry(path.stem if path.stem != "model" else path.parent.name, path,
                          env_id, run_dir=run_dir)
    records: dict[str, Any] = {}
    try:
        cfg = read_run_config(config_file, records)
    except ConfigError as exc:
        raise ConfigError(f"run config {config_file} is unreadable: {exc}") from None
    try:
        settings = recorded_settings(records, config_file)
    except ConfigError:     # damaged: not compared (its --resume names it)
        settings = None
    spec = run_spec(cfg)
    agent = _zip_info(path)[0]
    if agent != spec.agent:
        # another agent's zip copied into a run folder was scored under the run's label
        raise ConfigError(f"model file {path} holds a {agent} model, but its run's config "
                          f"{config_file} trains {spec.agent}: put the run's own model back, "
                          f"or move that file out of the run folder to evaluate it alone")
    label = spec.label
    steps = re.fullmatch(r".*_(\d+)_steps", path.stem)
    if path.parent.name == "checkpoints" and steps:   # not the final model: say which step
        label += f"@{steps.group(1)}"
    elif path.name == BEST_MODEL and path.parent == config_file.parent:
        label += "@best"        # train.py --select-best's: the run's other model
    scenario = cfg.scenario if isinstance(cfg.scenario, str) else tuple(cfg.scenario)
    return ModelEntry(label, path, cfg.env_id, scenario, cfg.hardware, cfg.variant,
                      config_file.parent, spec.seed,
                      cfg.conservative if spec.warmup != "none" else None, settings)


def _stale_model_notes(run_dir: Path) -> list[str]:
    """A note when a checkpoint of the run has more steps than its model.zip: a --resume
    stopped after its first checkpoint leaves the old model.zip, evaluated as the run's."""
    from agents.run_folder import checkpoints

    found = checkpoints(run_dir)   # model.zip among them, each zip read once
    final = next((steps for steps, path in found if path.name == "model.zip"), None)
    if final is None or found[-1][0] <= final:
        return []
    return [f"{run_dir.name}: evaluating model.zip ({final} steps), but checkpoint "
            f"{found[-1][1].name} has {found[-1][0]} (an interrupted --resume? {command('train')} "
            f"--resume {run_dir} finishes it)"]


def _distinct_labels(entries: list[ModelEntry]) -> list[str]:
    """Entries of one label pool as seeds of one agent; where they differ in env, conservative
    policy, training scenario or (bare zips) file, the label names the difference instead, and
    where two runs share a seed, their run folders. Returns notes saying so for the latter."""
    groups: dict[str, list[ModelEntry]] = {}
    for entry in entries:
        groups.setdefault(entry.label, []).append(entry)
    for label, group in groups.items():
        ids = [e.identity() for e in group]
        if len(set(ids)) < 2:
            continue
        differs = [len({i[k] for i in ids}) > 1 for k in range(len(ids[0]))]
        for entry, ident in zip(group, ids, strict=True):
            parts = [f"trained on {'+'.join(map(short_name, entry.trained_on()))}" if k == 2
                     else str(v)
                     for k, (v, d) in enumerate(zip(ident, differs, strict=True))
                     if d and v is not None]
            entry.label = f"{label} ({', '.join(parts)})" if parts else label
    # Two runs of one label and seed (train.py run twice into runs/, a sweep of --hp) are not
    # two seeds: pooled, n and the 95% CI counted one seed twice (identical samples when the
    # runs were). Each is shown apart, under its run folder's name. (Runs of other hardware
    # or variants are apart already: each has a section of its own.)
    seeds: dict[tuple[str, int, str | None, str | None], list[tuple[ModelEntry, Path]]] = {}
    for entry in entries:
        if entry.run_dir is not None and entry.seed is not None:
            key = (entry.label, entry.seed, entry.hardware, entry.variant)
            seeds.setdefault(key, []).append((entry, entry.run_dir))
    notes: list[str] = []
    for (label, seed, _, _), runs in seeds.items():
        if len(runs) > 1:
            for entry, run_dir in runs:
                entry.label = f"{label} ({run_dir.name})"
            notes.append(f"{len(runs)} runs of {label} with seed {seed}: each evaluated apart, "
                         f"not pooled as seeds ({', '.join(str(d) for _, d in runs)})")
    return notes


def _zip_info(path: Path) -> tuple[str, str]:
    """The agent a model zip holds and the env it acts in: a saved policy's name and env, or
    an SB3 model's algorithm and its action space's env."""
    from agents.sb3_factory import saved_model_info

    try:
        saved = read_policy_file(path)
        if saved is not None:
            return str(saved["name"]), policy_env_id(str(saved["name"]))
        return saved_model_info(path)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def discover_models(cfg: EvalConfig) -> tuple[list[ModelEntry], list[str]]:
    """The models to evaluate (``--models`` or every finished run under ``--runs``) and notes."""
    from agents.run_folder import check_run_folder, checkpoints, folders_in

    notes: list[str] = []
    entries = []
    if cfg.models:
        for item in cfg.models:
            p = Path(item)
            if p.is_dir():
                check_run_folder(p)
                if not (p / "model.zip").is_file() and (any(p.glob("*/model.zip"))
                                                        or any(p.glob("*/config.yaml"))):
                    raise ConfigError(f"{p} is a folder of run folders, not a run: pass "
                                      f"--runs {p} (every finished run there) or its run folders")
                if not (p / "model.zip").is_file() and not (p / "config.yaml").is_file():
                    # no run of train.py's at all: --resume would refuse it too
                    raise ConfigError(f"--models {p} is not a run folder (no config.yaml, no "
                                      f"model.zip): give a run folder of {program('train')} "
                                      f"or a model .zip")
                if not (p / "model.zip").is_file():
                    if not checkpoints(p):
                        # --resume refuses it too: the hint below sent a user from one to the
                        # other
                        raise ConfigError(f"run folder {p} has no model.zip nor checkpoint (it "
                                          f"stopped before its first checkpoint): nothing to "
                                          f"evaluate or resume; remove it and train it again "
                                          f"({command('train')})")
                    raise ConfigError(f"run folder {p} has no model.zip (unfinished run? "
                                      f"continue it with: {command('train')} --resume {p})")
                entries.append(_entry(p / "model.zip", p))
                notes += _stale_model_notes(p)
            else:
                try:
                    p = model_file(p)   # as SB3's load reads it: "x" finds x.zip too
                except (FileNotFoundError, ValueError) as exc:
                    raise ConfigError(str(exc)) from None
                entries.append(_entry(p, p.parent if (p.parent / "config.yaml").is_file()
                                      else None))
        # One model given twice (a run folder and its model.zip, overlapping globs) was
        # evaluated twice and pooled as two runs: n doubled and the 95% CI narrowed with it.
        unique: dict[Path, ModelEntry] = {}
        for entry in entries:
            first = unique.setdefault(entry.path.resolve(), entry)
            if first is not entry:
                notes.append(f"skipping {entry.path}: the same model as {first.path}")
        entries = list(unique.values())
        notes += _distinct_labels(entries)
        return entries, notes
    root = Path(cfg.runs)
    runs = sorted(folders_in(root, "--runs"))   # chmod 311 runs: a ConfigError, not a traceback
    if (root / "config.yaml").is_file():
        # its subfolders (checkpoints/) hold no run: it evaluated the baselines alone, saying
        # there were no trained models, and wrote over --out's summary with them
        raise ConfigError(f"{root} is a run folder, not a folder of run folders: pass --models "
                          f"{root} (that run), or --runs {root.parent} (every run beside it)")
    for d in runs:
        check_run_folder(d)
        if (d / "model.zip").is_file():
            entries.append(_entry(d / "model.zip", d))
            notes += _stale_model_notes(d)
        elif (d / "config.yaml").is_file():
            notes.append(f"skipping {d.name}: no model.zip (unfinished; {command('train')} "
                         f"--resume {d} continues it)")
    notes += _distinct_labels(entries)
    entries.sort(key=lambda e: (e.label, e.seed if e.seed is not None else -1, str(e.path)))
    if not entries:
        notes.append(f"no trained models under {root}/: train some with `{command('train')}` "
                     f"(or pass --models); evaluating the baselines alone")
    return entries, notes


@dataclass(frozen=True)
class Context:
    """A setting to evaluate in: a scenario with a hardware and a variant (None: its own)."""

    scenario: str
    hardware: str | None
    variant: str | None

    def key(self) -> tuple[str, str, str]:
        """What the setting is, however it was spelt (see ``_context_key``)."""
        return _context_key(self.scenario, self.hardware, self.variant)


def _context_key(scenario: str, hardware: str | None, variant: str | None) -> tuple[str, str, str]:
    """The scenario (a file's resolved path), the hardware's resolved YAML file (a preset
    name, a relative or absolute path, or None for the scenario's) and the variant's recipe
    (None: the scenario's)."""
    return _cached_context_key(scenario, hardware, variant, _names_now(scenario, hardware))


def _names_now(*names: str | None) -> tuple[object, ...]:
    """What the names given read now, besides their spelling: the working directory a relative
    path is read from, and each file's version. One process (a notebook, a sweep) resolved a
    name once and kept it: from another folder, or after the file was edited, its setting was
    the first file's, with the first file's hardware."""
    return (os.getcwd(), *(path_version(Path(name)) for name in names if name is not None))


@lru_cache(maxsize=256)
def _cached_context_key(scenario: str, hardware: str | None, variant: str | None,
                        names_now: tuple[object, ...]) -> tuple[str, str, str]:
    sc = load_scenario(scenario)
    # Each name read as load_scenario and load_hardware read it: a preset name is the preset,
    # even where a file of that name lies in the working directory.
    spelt = hardware if hardware is not None else sc.hardware
    if isinstance(spelt, Hardware):
        # held inline in the scenario's YAML: named by its name (its file is the scenario's,
        # whose key, and version, the setting's key holds already)
        return _scenario_key(scenario), spelt.name, variant_label(
            variant if variant is not None else sc.variant)
    path = preset_file(spelt, PRESET_DIR) or Path(spelt)
    if path.suffix not in (".yaml", ".yml") and not path.exists():
        path = PRESET_DIR / f"{path}.yaml"
    recipe = variant_label(variant if variant is not None else sc.variant)
    return _scenario_key(scenario), str(path.resolve()), recipe


def _scenario_key(scenario: str) -> str:
    """The scenario as a setting's key names it: a file's resolved path, or a preset's name."""
    read_as_file = preset_file(scenario, SCENARIO_DIR) is None and Path(scenario).exists()
    return str(Path(scenario).resolve()) if read_as_file else scenario


def contexts_of(cfg: EvalConfig, entries: list[ModelEntry], scenarios: list[str]) -> list[Context]:
    """The settings to evaluate in: each scenario on every (hardware, variant) a model was
    trained for (--hardware overrides them all); the baselines run in each, beside its models.
    Settings spelt differently but the same (``edge`` and ``presets/edge.yaml``) are one."""
    _check_run_variants(entries)
    found = [(cfg.hardware or e.hardware, e.variant) for e in entries] or [(cfg.hardware, None)]
    out: dict[tuple[str, str, str], Context] = {}
    for scenario in scenarios:
        for hardware, variant in found:
            ctx = Context(scenario, hardware, variant)
            out.setdefault(ctx.key(), ctx)
    return list(out.values())


def _check_run_variants(entries: list[ModelEntry]) -> None:
    """Each run's variant is one this process knows, else a ValueError naming the run. A stage
    implementation a user registered in their own process is unknown here: the bare refusal
    named no run, so one such run among several failed them all with no way out."""
    for entry in entries:
        if entry.variant is None:
            continue
        try:
            resolve_variant(entry.variant)
        except ValueError as exc:
            run = entry.run_dir if entry.run_dir is not None else entry.path
            raise ValueError(
                f"run {run} trained on variant {shown(entry.variant)}: {exc}; an implementation "
                f"of your own is known only where its module is imported: evaluate from Python "
                f"after importing it (`import mystages, agents.evaluate_cli; "
                f"agents.evaluate_cli.main([...])`), or "
                f"leave this run out (--models naming the others)") from None


def section_of(ctx: Context, others: list[Context] | None = None) -> str:
    """The summary's section: the scenario, and the hardware and variant where they are not
    the scenario's own. A scenario or hardware file goes by its name, or by its path where
    another file (or preset) of that name is evaluated too (`others`): results are pooled by
    section, and two files of one name were pooled as one scenario."""
    scenario_key, hardware, variant = ctx.key()
    keys = [o.key() for o in others or []]
    scenario = unique_name(scenario_key, (k[0] for k in keys))
    # --hardware is named too: the summary records nothing else of the options it ran with
    _, own_hardware, own_variant = Context(ctx.scenario, None, None).key()
    hardware_name, _ = setting_names(ctx, others)
    extra = []
    if hardware != own_hardware:
        extra.append(f"hardware {hardware_name}")
    if variant != own_variant:
        extra.append(f"variant {variant}")
    return f"{scenario} ({', '.join(extra)})" if extra else scenario


def setting_names(ctx: Context, others: list[Context] | None = None) -> tuple[str, str]:
    """The hardware and variant of the setting as its section names them (`section_of`), the
    scenario's own too: summary.csv's hardware and variant columns."""
    _, hardware, variant = ctx.key()
    return unique_name(hardware, (o.key()[1] for o in others or [])), variant


def _in_context(cfg: EvalConfig, entry: ModelEntry, ctx: Context) -> bool:
    return Context(ctx.scenario, cfg.hardware or entry.hardware, entry.variant).key() == ctx.key()


def _env_in(ctx: Context, env_id: str, cfg: EvalConfig) -> Any:
    return make_env(env_id, ctx.scenario, ctx.hardware, ctx.variant, cfg.episode_tasks)


def _devices(ctx: Context) -> tuple[str, ...]:
    """The device names of the context's hardware (its resolved file, read once a version)."""
    if ctx.hardware is None:
        own = load_scenario(ctx.scenario).hardware
        if isinstance(own, Hardware):   # inline in the scenario's YAML: no file to read
            return own.device_names
    path = ctx.key()[1]
    return _device_names(path, path_version(Path(path)))


@lru_cache(maxsize=64)
def _device_names(path: str, version: tuple[object, ...]) -> tuple[str, ...]:
    return load_hardware(path).device_names


def runnable_baselines(cfg: EvalConfig, ctx: Context) -> list[str]:
    """The baselines the context's hardware can run (``registry.runs_on``), each once."""
    return [name for name in _baselines(cfg) if runs_on(name, _devices(ctx))]


def _baselines(cfg: EvalConfig) -> list[str]:
    # one given twice was evaluated twice and pooled: n doubled and a CI of 0 from one seed
    return list(dict.fromkeys(cfg.baselines))


def check_inputs(cfg: EvalConfig, entries: list[ModelEntry], scenarios: list[str]) -> list[str]:
    """Fail early, naming the culprit: bad scenario/hardware/baseline names, unloadable models.

    Returns notes: the baselines a context's hardware cannot run (all-npu with no NPU)."""
    notes = []
    any_runnable = False    # a baseline some context can run: else, with no model, nothing to do
    try:
        contexts = contexts_of(cfg, entries, scenarios)
    except ValueError as exc:   # an unknown scenario, hardware or variant
        raise ConfigError(str(exc)) from None
    for ctx in contexts:
        try:
            env_of = {env_id: _env_in(ctx, env_id, cfg)
                      for env_id in {DEFAULT_ENV, *map(policy_env_id, cfg.baselines)}}
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        runnable = runnable_baselines(cfg, ctx)
        any_runnable = any_runnable or bool(runnable)
        for name in _baselines(cfg):
            if name not in runnable:    # an all-<device> policy: never a learner's name
                devices = ", ".join(_devices(ctx))
                notes.append(f"{section_of(ctx, contexts)}: skipping baseline {name} (the hardware "
                             f"has no such device; it has {devices})")
                continue
            env = env_of[policy_env_id(name)]
            try:
                policy = make_fixed_policy(name, env, "baseline",
                                           learner_hint=" (evaluate a trained model with --models)")
                check_first_action(policy, env, f"baseline {name}")
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
    for entry in entries:
        for scenario in scenarios:    # each: a later scenario's hardware may not fit the model
            try:
                env = _model_env(cfg, entry, scenario)
                load_policy(entry.path, env)
            except (FileNotFoundError, ValueError) as exc:
                where = f" (scenario {scenario})" if len(scenarios) > 1 else ""
                raise ConfigError(f"{exc}{where}{_hardware_hint(cfg, entry, exc)}") from None
            notes += _setting_notes(cfg, entry, scenario, env)
    if not entries and not any_runnable:
        # else an empty table, CSV and latency CDF were written over --out's, and exit 0
        raise ConfigError(
            f"nothing to evaluate: no trained model (none under --runs {cfg.runs}, and no "
            f"--models) and no baseline the hardware can run (--baselines: "
            f"{' '.join(cfg.baselines) or 'none'})")
    return notes


# The parts of a run's recorded setting that evaluate.py's own options set (``--episode-tasks``
# always differs from training's, ``--hardware`` where given): not compared.
_EVALUATION_PARTS = ("episode_tasks",)
# the hardware's parts, and best-static's calibration, which is searched on the hardware
_HARDWARE_PARTS = ("hardware", "hardware_figures", "calibration")


def _setting_notes(cfg: EvalConfig, entry: ModelEntry, scenario: str, env: Any) -> list[str]:
    """A note where `entry`'s run trained on `scenario` and its setting has changed since
    (``changed_since_training``: a scenario, hardware or trace file edited, a preset the
    project changed): the model is evaluated on the setting as it is now, which is not the
    one its run's curves and recorded scores are of."""
    from agents.run_setting import changed_since_training

    trained = next((name for name in entry.trained_on() if _same_scenario(name, scenario)),
                   None)
    if entry.run_dir is None or trained is None:
        return []
    ignore = _EVALUATION_PARTS + (_HARDWARE_PARTS if cfg.hardware else ())
    changed = changed_since_training(entry.settings, trained, env, ignore)
    if changed is None:
        return []
    parts, restore = changed
    return [f"{entry.label} ({entry.run_dir.name}): scenario {scenario} has changed since the "
            f"run trained on it (its {parts}): evaluated on it as it is now; restore {restore} "
            f"to evaluate the model on the setting it was trained on"]


def _same_scenario(trained: str, evaluated: str) -> bool:
    """Whether a run's training scenario (as its config.yaml names it: a preset, or a file's
    absolute path) is the one evaluated, spelt either way (``./sc.yaml`` from its folder)."""
    return _scenario_key(trained) == _scenario_key(evaluated)


def _hardware_hint(cfg: EvalConfig, entry: ModelEntry, exc: Exception) -> str:
    """How to evaluate a model on the hardware it was trained on, in evaluate.py's options:
    the refusal's "load it with hardware of N devices" named none."""
    from agents.sb3_factory import OtherDeviceCount

    if not isinstance(exc, OtherDeviceCount) or cfg.hardware:
        return ""
    option = f"{program('evaluate')} --hardware FILE"
    if entry.run_dir is None:   # nothing in the zip names its hardware, so the scenario's ran
        return f"; a zip without its run folder records no hardware: give the one it was trained on with {option}"
    if entry.hardware is not None:
        return (f"; its run was trained with --hardware {entry.hardware}, which has changed "
                f"since: restore that file, or give the hardware it was trained on with {option}")
    trained = " ".join(entry.trained_on())
    return (f"; its run was trained on the hardware of --scenarios {trained}: evaluate it on "
            f"those, or give hardware of as many devices with {option}")


def _model_env(cfg: EvalConfig, entry: ModelEntry, scenario: str) -> Any:
    return make_env(entry.env_id, scenario, cfg.hardware or entry.hardware, entry.variant,
                    cfg.episode_tasks)


def scenarios_of(cfg: EvalConfig, entries: list[ModelEntry]) -> list[str]:
    if cfg.scenarios:
        return list(dict.fromkeys(cfg.scenarios))
    found = [name for e in entries for name in e.trained_on()]   # each of a mix's too
    return list(dict.fromkeys(found)) or ["article"]


def heldout_seeds(cfg: EvalConfig, n: int | None = None) -> list[int]:
    return [cfg.seed_base + i for i in range(n if n is not None else cfg.seed_count())]


def evaluate_agents(cfg: EvalConfig, entries: list[ModelEntry], scenarios: list[str],
                    tick: Callable[[], None] = lambda: None) -> list[AgentResult]:
    """Every model and baseline on every scenario and held-out seed (models first); a model
    trained on other hardware or another variant gets a section of its own, with the
    baselines run on that hardware and variant beside it."""
    seeds = heldout_seeds(cfg)
    results: dict[tuple[str, str], AgentResult] = {}
    contexts = contexts_of(cfg, entries, scenarios)
    for ctx in contexts:
        section = section_of(ctx, contexts)
        hardware, variant = setting_names(ctx, contexts)
        env = _env_in(ctx, DEFAULT_ENV, cfg)
        static, oracle = make_policy("best-static", env), make_policy("oracle", env)
        refs = {s: (episode_latencies(static, env, s, cfg.episodes),
                    episode_latencies(oracle, env, s, cfg.episodes)) for s in seeds}
        # judged on one whole episode (consecutive episodes restart the queues): the first
        # seed's, which is its whole reference run where that is one episode
        first = refs[seeds[0]][0] if cfg.episodes == 1 else episode_latencies(static, env,
                                                                                seeds[0])
        note = overload_note(first)
        for entry in (e for e in entries if _in_context(cfg, e, ctx)):
            env = _model_env(cfg, entry, ctx.scenario)
            policy = load_policy(entry.path, env)
            # a model named as a baseline (a saved policy zip all-cpu.zip or oracle.zip) shared
            # the baseline's row: its samples and the baseline's pooled, n doubled, CI narrowed
            label = f"{entry.label} (model)" if entry.label in cfg.baselines else entry.label
            result = results.setdefault((label, section),
                                        AgentResult(label, section, "model", runs=0))
            result.runs += 1
            for seed in seeds:
                latency = episode_latencies(policy, env, seed, cfg.episodes)
                result.samples.append(episode_metrics(latency, *refs[seed]))
                result.sample_runs.append(result.runs - 1)
                result.latencies.append(latency)
                tick()
        for name in runnable_baselines(cfg, ctx):
            env = _env_in(ctx, policy_env_id(name), cfg)
            result = results.setdefault((name, section), AgentResult(name, section, "baseline"))
            policy = None if name in REFERENCES else make_policy(name, env)
            for seed in seeds:
                if policy is None:
                    latency = refs[seed][REFERENCES.index(name)]
                else:
                    latency = episode_latencies(policy, env, seed, cfg.episodes)
                result.samples.append(episode_metrics(latency, *refs[seed]))
                result.latencies.append(latency)
                tick()
        for result in results.values():
            if result.scenario == section:
                result.note = note
                result.hardware, result.variant = hardware, variant
    return list(results.values())


def work_units(cfg: EvalConfig, entries: list[ModelEntry], scenarios: list[str]) -> int:
    """Progress-bar items of the evaluation: one per agent x context x held-out seed."""
    return cfg.seed_count() * sum(len([e for e in entries if _in_context(cfg, e, ctx)])
                           + len(runnable_baselines(cfg, ctx))
                           for ctx in contexts_of(cfg, entries, scenarios))


def run(cfg: EvalConfig, report: Callable[[str], None] = print) -> list[Path]:
    """The whole evaluation; returns the files written under ``cfg.out``."""
    from tqdm.auto import tqdm

    out = Path(cfg.out)
    online_n = cfg.online_seed_count()
    cfg, entries, scenarios, online_agents, notes = _checked_plan(cfg, online_n)
    for note in notes:
        report(note)
    written: list[Path] = []
    total = (0 if cfg.online else work_units(cfg, entries, scenarios)) \
        + len(online_agents) * online_n
    skipped, why = _skipped_outputs(cfg, bool(online_agents))
    ours = tuple(name for name in (*SUMMARY_OUTPUTS, *ONLINE_OUTPUTS) if name not in skipped)
    with _writing(out, ours), _earlier_named(out, ours, written, report), \
            tqdm(total=total, desc="evaluate", unit="item", disable=not cfg.progress_bar) as bar:

        def wrote(path: Path) -> None:
            # said as it is written: an evaluation stopped part way has named what it replaced
            written.append(path)
            bar.clear()
            report(f"wrote {path}")

        def said(text: str) -> None:
            bar.clear()
            report(text)

        def tick() -> None:
            bar.update(1)

        if not cfg.online:
            _write_summary(cfg, entries, scenarios, out, wrote, said, tick)
        if online_agents:
            _write_online_study(cfg, online_agents, scenarios[0], online_n, out, wrote, tick)
    kept = [name for name in skipped if (out / name).is_file()]
    if kept:
        report(f"kept {', '.join(kept)} in {out} from an earlier evaluation ({why})")
    return written


def _checked_plan(cfg: EvalConfig, online_n: int
                  ) -> tuple[EvalConfig, list[ModelEntry], list[str], tuple[str, ...], list[str]]:
    """What `run` evaluates, every input checked before anything runs: its config (with
    heft-split among the baselines of a Split model), the models, the scenarios, the online
    study's agents and the notes to say first. A bad input is a ConfigError."""
    from agents import plots

    entries: list[ModelEntry] = []
    notes: list[str] = []
    if cfg.online:
        scenarios = scenarios_of(cfg, [])
        online_agents = tuple(cfg.online_agents or FULL_ONLINE)
    else:
        entries, notes = discover_models(cfg)
        scenarios = scenarios_of(cfg, entries)
        online_agents = () if cfg.no_online else tuple(cfg.online_agents or DEFAULT_ONLINE)
    if any(e.env_id == SPLIT_ENV for e in entries) and cfg.baselines == EvalConfig().baselines:
        # the baseline a Split model has to beat (README); asked-for baselines are kept as given
        cfg = dataclasses.replace(cfg, baselines=[*cfg.baselines, "heft-split"])
    notes += check_inputs(cfg, entries, scenarios)  # a bad input's error comes alone, before notes
    for _, run_dir in curve_runs(entries):      # read once the summary is written
        try:
            plots.check_events(run_dir)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if cfg.online and not cfg.online_seeds and cfg.seeds is not None and cfg.seeds < online_n:
        # said on screen, where it ran 5 seeds for --seeds 1 without a word
        notes.append(f"the online study runs at least {MIN_ONLINE_SEEDS} seeds: {online_n} in "
                     f"place of --seeds {cfg.seeds} (--online-seeds N runs N)")
    if online_agents:       # yours, before the evaluation that comes first
        try:
            check_online_agents(online_agents, make_env(
                scenario=scenarios[0], hardware=cfg.hardware, episode_tasks=cfg.online_samples,
                reward=cfg.online_reward, price_static=True))   # the study's, which then skips it
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return cfg, entries, scenarios, online_agents, notes


def _write_summary(cfg: EvalConfig, entries: list[ModelEntry], scenarios: list[str], out: Path,
                   wrote: Callable[[Path], None], said: Callable[[str], None],
                   tick: Callable[[], None]) -> None:
    """Every model and baseline evaluated: the table said, summary.csv and .md, the latency
    CDFs and the runs' learning curves written (each said by `wrote`)."""
    from agents import plots

    results = evaluate_agents(cfg, entries, scenarios, tick=tick)
    rows = [r.row() for r in results]
    said(fmt_summary(rows))
    overloaded = {r.scenario: r.note for r in results if r.note}
    for section, note in overloaded.items():
        said(f"{section}: {note}")
    wrote(write_text(out / "summary.csv", summary_csv(rows)))
    wrote(write_text(out / "summary.md", summary_markdown(
        rows, heldout_seeds(cfg), cfg.episodes, overloaded)))
    sections = dict.fromkeys(r.scenario for r in results)   # a panel per section
    cdf = {s: {r.agent: np.concatenate(r.latencies) for r in results if r.scenario == s}
           for s in sections}
    wrote(plots.latency_cdf(cdf, out / "latency_cdf.png"))
    runs = curve_runs(entries)
    if runs:
        wrote(plots.learning_curves(runs, out / "learning_curves.png"))
        return
    stale = out / "learning_curves.png"
    removed = stale.is_file()
    stale.unlink(missing_ok=True)   # another evaluation's runs, beside this summary
    said("no run folders with TensorBoard events: no learning_curves.png"
         + (f" (removed the one of an earlier evaluation from {out})" if removed else ""))


def _write_online_study(cfg: EvalConfig, online_agents: tuple[str, ...], scenario: str,
                        online_n: int, out: Path, wrote: Callable[[Path], None],
                        tick: Callable[[], None]) -> None:
    """The online study of `online_agents` on `scenario`: stabilization.png and .md."""
    from agents import plots

    seeds = heldout_seeds(cfg, online_n)
    study = online_study(online_agents, seeds, cfg.online_samples, scenario, cfg.hardware,
                         tick=tick, reward=cfg.online_reward, checked=True)
    # named as the summary's sections are: with the hardware where --hardware gives one
    setting = section_of(Context(scenario, cfg.hardware, None))
    title = (f"online deployment from sample 0: {setting}, mean and 95% band "
             f"over {len(seeds)} seed(s)")
    wrote(plots.stabilization(study.curves, out / "stabilization.png", title=title))
    wrote(write_text(out / "stabilization.md", online_markdown(
        study, seeds, cfg.online_samples, setting, cfg.online_reward)))


# the lock of each set of files an evaluation writes in --out (agents.locks): the summary's
# and the online study's are taken apart, as `evaluate.py --online` writes the second alone
OUTPUT_LOCKS = {"summary": SUMMARY_OUTPUTS, "stabilization": ONLINE_OUTPUTS,
                "article": ("article.md",)}


@contextlib.contextmanager
def _writing(out: Path, names: tuple[str, ...]) -> Iterator[None]:
    """The locks of `out` for the files of `names`: another evaluation writing any of them
    there is refused at once (a ConfigError naming it), before this one computes anything,
    as is an `out` whose path leaves no room for theirs (their temp files' names are longer
    than the locks')."""
    check_room(out, [temp_file(Path(name)) for name in names], "--out")
    with contextlib.ExitStack() as stack:
        for lock, files in OUTPUT_LOCKS.items():
            mine = [name for name in files if name in names]
            if not mine:
                continue
            try:
                stack.enter_context(holding(out, lock, f"{out} is being written by another "
                                            f"evaluation ({', '.join(files)})", option="--out"))
            except FolderBusy as exc:
                raise ConfigError(f"{exc}: wait for it to end, or give another --out") from None
        yield


@contextlib.contextmanager
def _earlier_named(out: Path, names: tuple[str, ...], written: list[Path],
                   report: Callable[[str], None]) -> Iterator[None]:
    """An evaluation that stops (Ctrl-C, a full disk) names the files of `names` in `out` that it
    did not replace (`written` holds those it did): they stand beside its new ones."""
    try:
        yield
    except BaseException:
        earlier = [name for name in names if (out / name).is_file() and out / name not in written]
        if earlier:
            report(f"{', '.join(earlier)} in {out} are from an earlier evaluation: this one "
                   f"stopped before replacing them")
        raise


def _skipped_outputs(cfg: EvalConfig, online: bool) -> tuple[tuple[str, ...], str]:
    """The outputs of the study this evaluation skips, and why it skips it."""
    if cfg.online:
        return SUMMARY_OUTPUTS, "--online runs the online study alone"
    if not online:
        return ONLINE_OUTPUTS, "--no-online skips the online study"
    return (), ""


def curve_runs(entries: list[ModelEntry]) -> list[tuple[str, Path]]:
    """(label, run folder) of each run folder's learning curve: one per folder, as a run's
    checkpoints share its events, named after the run. The label of whichever entry of the
    folder came last named the whole run's curve: "ppo@128 s0" where the final model.zip and
    a checkpoint (or "ppo@best s0", its best_model.zip) were both evaluated, and "ppo sNone"
    for a folder without a run config."""
    runs: dict[Path, tuple[str, Path]] = {}
    for e in entries:
        if e.run_dir is not None and e.run_dir not in runs:
            label = re.sub(r"@(?:\d+|best)", "", e.label, count=1)   # _entry's model
            runs[e.run_dir] = (label if e.seed is None else f"{label} s{e.seed}", e.run_dir)
    return list(runs.values())


def reproduce_article(cfg: EvalConfig, report: Callable[[str], None] = print) -> list[Path]:
    """``agents.article.reproduce`` on the held-out seeds, a progress bar ticking per seed
    (imported only when asked: the article job is the one user of its module); the file it
    wrote, said as `run` says its files."""
    from tqdm.auto import tqdm

    from agents.article import ARTICLE_FILE, reproduce

    seeds = heldout_seeds(cfg)
    clients = {} if cfg.article_clients is None else {"clients": cfg.article_clients}
    written = Path(cfg.out) / ARTICLE_FILE
    with _writing(Path(cfg.out), (ARTICLE_FILE,)), \
            tqdm(total=len(seeds), desc="article", unit="seed", disable=not cfg.progress_bar,
                 leave=False) as bar:
        reproduce(Path(cfg.out), seeds, tick=lambda: bar.update(1), **clients)
    report(f"wrote {written}")
    return [written]


def fmt_summary(rows: list[dict[str, Any]]) -> str:
    """A short console table: agent, scenario, mean latency and ratio to best static."""
    # columns as wide as their longest entry: section labels such as
    # "article (variant glm-5.3)" and run names outgrow any fixed width
    s = max([len("scenario")] + [len(str(r["scenario"])) for r in rows])
    a = max([len("agent")] + [len(str(r["agent"])) for r in rows])
    lines = [f"{'scenario':<{s}s} {'agent':<{a}s} {'mean (s)':>9s} {'vs static':>9s}"]
    for r in rows:
        lines.append(f"{r['scenario']:<{s}s} {r['agent']:<{a}s} {r['mean_latency_s']:>9.2f} "
                     f"{r['vs_best_static']:>9.3f}")
    return "\n".join(lines)
