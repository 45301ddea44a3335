"""The models ``evaluate.py`` evaluates: ``--models`` (run folders, model zips) or every
finished run under ``--runs``, each a `ModelEntry` naming what its run was trained on (from
its config.yaml), labelled so that only seeds of one agent pool, with notes on what was
skipped or looks stale."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.base import read_policy_file
from agents.commands import command, program
from agents.config import ConfigError, EvalConfig, scenario_list
from agents.evaluation import short_name
from agents.files import model_file
from agents.registry import policy_env_id
from envs import ENV_IDS

if TYPE_CHECKING:
    from agents.run_setting import Settings

DEFAULT_ENV, SPLIT_ENV = ENV_IDS


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
