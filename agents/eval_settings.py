"""The settings an evaluation runs in (a `Context`: a scenario with a hardware and a variant,
however each was spelt), the summary's sections named after them, the baselines each
setting's hardware can run, and the checks of every input before anything runs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from agents.commands import program
from agents.config import ConfigError, EvalConfig
from agents.evaluation import make_env, unique_name
from agents.model_discovery import DEFAULT_ENV, ModelEntry
from agents.registry import (
    check_first_action,
    load_policy,
    make_fixed_policy,
    policy_env_id,
    runs_on,
)
from envs.scenario import SCENARIO_DIR, load_scenario
from inference.hardware import PRESET_DIR, Hardware, load_hardware, preset_file
from inference.messages import shown
from inference.variants import resolve_variant, variant_label
from inference.yamlio import path_version


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


def in_context(cfg: EvalConfig, entry: ModelEntry, ctx: Context) -> bool:
    return Context(ctx.scenario, cfg.hardware or entry.hardware, entry.variant).key() == ctx.key()


def env_in(ctx: Context, env_id: str, cfg: EvalConfig) -> Any:
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
            env_of = {env_id: env_in(ctx, env_id, cfg)
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
                env = model_env(cfg, entry, scenario)
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


def model_env(cfg: EvalConfig, entry: ModelEntry, scenario: str) -> Any:
    return make_env(entry.env_id, scenario, cfg.hardware or entry.hardware, entry.variant,
                    cfg.episode_tasks)


def scenarios_of(cfg: EvalConfig, entries: list[ModelEntry]) -> list[str]:
    if cfg.scenarios:
        return list(dict.fromkeys(cfg.scenarios))
    found = [name for e in entries for name in e.trained_on()]   # each of a mix's too
    return list(dict.fromkeys(found)) or ["article"]
