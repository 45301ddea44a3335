"""A run's setting, recorded as it starts and checked as it resumes.

A run folder's ``config.yaml`` names its scenarios (and ``--hardware``) by preset name or file
path, and ``--resume`` reads them again: a scenario, hardware or trace file edited between the
two (or a preset changed by a project update) was trained on without a word, and the run's
later eval/ points came from another episode on the same curve. So ``config.yaml`` also holds,
under ``settings``, a digest of each part of each training scenario's whole setting as the run
started (``envs.reference.setting_digests``: the scenario's fields, the hardware's figures,
the model, the variant, the replayed trace's contents, the best-static calibration), and a
resume whose envs, built again from the saved config, give other digests is refused, naming
the scenario, the parts that differ and what to restore. ``train.py --config`` reads the key
over (a new run records its own). A run folder written before the record resumes as before.

The digests are of values, not of the code that reads them, so the record holds one more
part: a digest of the simulator's code (``inference/`` and ``envs/``, the Python files' bytes).
Code differs for reasons that change nothing (a comment, a refactoring) as well as for ones
that change every latency, and a digest cannot tell them apart, so a resume on other code is
said in a note, not refused; evaluate.py notes it beside the run's model as it notes an
edited setting.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from agents.commands import command
from agents.config import HP_OF, SETTINGS, ConfigError, TrainConfig, hp_digest
from agents.config_parsing import to_yaml
from agents.warmup_config import spec_starts_warm
from envs import canonical_env_id
from envs.inference_alloc import InferenceAllocEnv
from envs.reference import setting_digests
from envs.scenario import SCENARIO_DIR, Scenario
from envs.scenario_mix import ScenarioMixEnv
from envs.traces import TRACES
from inference.hardware import PRESET_DIR, preset_file
from inference.messages import shown

#: The parts of a setting that the scenario itself sets (its file, or its preset): its fields.
_SCENARIO_FIELDS = tuple(f.name for f in dataclasses.fields(Scenario))

Settings = dict[str, dict[str, str]]
#: The record's part for the simulator's code (``simulator_code_digest``), beside the values'.
SIMULATOR_CODE = "simulator_code"
SIMULATOR_CODE_SOURCE = "the simulator's code (inference/ and envs/)"


def _value_parts(parts: list[str]) -> list[str]:
    """`parts` but the simulator's code: the setting's values, which a resume refuses to change
    (other code only earns a note)."""
    return [part for part in parts if part != SIMULATOR_CODE]


@functools.cache
def simulator_code_digest() -> str:
    """A digest of the simulator's code as this process runs it (``code_digest`` of the
    ``inference`` and ``envs`` packages)."""
    import envs
    import inference

    return code_digest({package.__name__: Path(package.__path__[0])
                        for package in (inference, envs)})


def code_digest(packages: dict[str, Path]) -> str:
    """A digest of each Python file under each package's folder (`packages`: name -> folder),
    by its path in the package and its bytes, CRLF line ends read as LF (a Windows checkout of
    the same code gives the same digest)."""
    digest = hashlib.sha256()
    for name, root in packages.items():
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return digest.hexdigest()[:16]


def _digests(env: InferenceAllocEnv) -> dict[str, str]:
    """The record's digests of one scenario's env: its setting's values, and the code."""
    return {**setting_digests(env), SIMULATOR_CODE: simulator_code_digest()}


def scenario_envs(env: Any) -> list[InferenceAllocEnv]:
    """The env of each scenario `env` trains on: a mix's, in their order, or its own."""
    base = env.unwrapped
    return list(base.envs) if isinstance(base, ScenarioMixEnv) else [base]


def settings_of(env: Any, cfg: TrainConfig) -> Settings:
    """Each training scenario of `cfg` (as config.yaml names it) with its setting's digests,
    read from `env`, the run's training env."""
    return dict(zip(cfg.training_scenarios(), map(_digests, scenario_envs(env)), strict=True))


def run_config_text(cfg: TrainConfig, settings: Settings) -> str:
    """A run folder's config.yaml: the run's config (``to_yaml``), then which run its hp are
    of (its one agent and warm-up), then the record of its setting, `settings` (``settings_of``
    its training env, as checked on a resume)."""
    record = yaml.safe_dump({SETTINGS: settings}, sort_keys=False,
                            default_flow_style=None)
    hp_of = yaml.safe_dump({HP_OF: {**hp_record(cfg.agents[0], cfg.env_id, cfg.warmup[0]),
                                    "hp": hp_digest(cfg.hp)}},
                           sort_keys=False, default_flow_style=None)
    return (f"{to_yaml(cfg)}# what hp holds every hyper-parameter of (agents/hyperparams/'s "
            f"values depend on these): a --config of this file that trains others is refused\n"
            f"{hp_of}"
            f"# what each scenario's setting was as the run started (digests): "
            f"--resume refuses another (other simulator_code: a note)\n{record}")


def hp_record(agent: str, env_id: str, warmup: str) -> dict[str, Any]:
    """What a run's hyper-parameters (agents/hyperparams/'s, as the run took them) depend on:
    its agent, its env id (each YAML is keyed by env) and whether it fine-tunes a behaviour
    clone (its env's ``warm_start`` values on top), config.yaml's ``hp_of`` record."""
    return {"agent": agent.strip().lower(), "env_id": canonical_env_id(env_id),
            "warm_start": spec_starts_warm(warmup)}


def recorded_settings(records: dict[str, Any], path: Path) -> Settings | None:
    """The setting's record among config.yaml's `records` (``read_run_config`` reads them, from
    the file at `path`), or None for a run folder written before it. A damaged record is a
    ConfigError naming the file."""
    record = records.get(SETTINGS)
    if record is None:
        return None
    if not (isinstance(record, dict) and all(
            isinstance(name, str) and isinstance(parts, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in parts.items())
            for name, parts in record.items())):
        raise ConfigError(f"{shown(path, quote=False)}: its {SETTINGS} record is damaged (a "
                          f"mapping of scenario: {{part: digest}}, as the run wrote it); "
                          f"restore it, or remove the key to resume without the check")
    return record


def check_setting(run_name: str, cfg: TrainConfig, recorded: Settings | None, env: Any
                  ) -> Settings:
    """Refuse a resume whose training env `env`, built from the saved `cfg`, is not the setting
    config.yaml `recorded` as the run started: one line naming the first such scenario, the
    parts that differ and what to restore. None (a run folder older than the record): no
    check. A part that only one side has (recorded by another version) is not compared.
    Returns the setting's digests now, which the resumed run records. Other simulator code
    alone is not refused: a note says it (see the module's docstring)."""
    now = settings_of(env, cfg)
    if not recorded:
        return now
    changed = {name: _differing(parts, old) for name, parts, old in _paired(run_name, recorded, now)}
    if any(SIMULATOR_CODE in parts for parts in changed.values()):
        print(f"note: {run_name} resumes on other simulator code than it started on "
              f"(inference/ or envs/ has changed since: a project update, or an edit): its "
              f"later eval/ points and its model come from the code as it is now; train a new "
              f"run ({command('train')} without --resume) to compare it with runs of this "
              f"code", file=sys.stderr)
    changed = {name: refused for name, parts in changed.items()
               if (refused := _value_parts(parts))}
    if not changed:
        return now
    name, parts = next(iter(changed.items()))
    env_of = dict(zip(cfg.training_scenarios(), scenario_envs(env), strict=True))[name]
    more = f" (and {len(changed) - 1} more of its scenarios)" if len(changed) > 1 else ""
    raise ConfigError(
        f"cannot resume {run_name}: scenario {shown(name, quote=False)} has changed since the "
        f"run started{more} (its {_named(parts)}, by the digests config.yaml recorded then); "
        f"restore {_restore(name, parts, env_of)}, train a new run on the new setting "
        f"({command('train')} without --resume), or remove the {SETTINGS} key from "
        f"config.yaml to resume on it anyway")


def changed_since_training(recorded: Settings | None, name: str, env: Any,
                           ignore: Collection[str] = ()) -> tuple[str, str] | None:
    """What of scenario `name`'s setting in `env` (one scenario's env) differs from what a run
    `recorded` for it as it started (``recorded_settings``), `ignore`'s parts left out, as the
    parts ("hardware figures, trace") and what to restore; None where it is the same or nothing
    is recorded for it (a run folder older than the record, a scenario it did not train on).
    evaluate.py says so beside a model it evaluates on a setting edited since: its run's curves
    and scores were of another one."""
    old = (recorded or {}).get(name)
    if not old:
        return None
    parts = [part for part in _differing(_digests(env.unwrapped), old) if part not in ignore]
    return (_named(parts), _restore(name, parts, env.unwrapped)) if parts else None


def _differing(now: dict[str, str], old: dict[str, str]) -> list[str]:
    """The parts whose digests `now` and `old` both have and differ in (a part only one side
    has, recorded by another version, is not compared)."""
    return [part for part, digest in now.items() if part in old and old[part] != digest]


def _named(parts: list[str]) -> str:
    return ", ".join(part.replace("_", " ") for part in parts)


def _restore(name: str, parts: list[str], env: InferenceAllocEnv) -> str:
    """What to restore, as the message says it, for the `parts` of scenario `name` that differ."""
    sources = _sources(name, parts, env)
    restore = " and ".join(sources) + (" as it was" if len(sources) == 1 else " as they were")
    if any(source.startswith(("preset ", "hardware preset ", "packaged ", "the project"))
           for source in sources):
        restore += " (a preset or the code: as the project version the run started on had it)"
    elif SIMULATOR_CODE_SOURCE in sources:     # recorded anew at each resume
        restore += " when the run last trained"
    return restore


def _paired(run_name: str, recorded: Settings, now: Settings
            ) -> list[tuple[str, dict[str, str], dict[str, str]]]:
    """(scenario, its digests now, its record) for each training scenario: by name, or by place
    where config.yaml names them otherwise than the record (a file moved, config.yaml edited
    to its new path: nothing matched, and the check passed whatever the file held)."""
    if set(now) <= set(recorded):
        return [(name, parts, recorded[name]) for name, parts in now.items()]
    if len(now) != len(recorded):
        raise ConfigError(f"cannot resume {run_name}: its config.yaml trains on "
                          f"{len(now)} scenarios and its {SETTINGS} record holds {len(recorded)}; "
                          f"restore config.yaml as the run wrote it, or remove its {SETTINGS} "
                          f"key to resume without the check")
    return [(name, parts, old) for (name, parts), old
            in zip(now.items(), recorded.values(), strict=True)]


def _sources(name: str, parts: list[str], env: InferenceAllocEnv) -> list[str]:
    """What sets the `parts` of scenario `name` that differ, as a user restores it: the
    scenario for its own fields; what its hardware or trace names, where the name is the
    same and what it reads is not; the project's code for what no file of a run sets."""
    scenario = (f"preset scenario {name}" if preset_file(name, SCENARIO_DIR) is not None
                else shown(name, quote=False))
    sources = []
    if any(part in _SCENARIO_FIELDS for part in parts):
        sources.append(scenario)
    hardware = env.scenario.hardware    # --hardware's, where given
    if "hardware_figures" in parts and "hardware" not in parts:
        if not isinstance(hardware, str):       # the scenario's own mapping
            sources.append(scenario)
        elif preset_file(hardware, PRESET_DIR) is not None:
            sources.append(f"hardware preset {hardware}")
        else:
            sources.append(f"hardware {shown(hardware, quote=False)}")
    trace = env.scenario.workload.trace
    if "trace" in parts and "workload" not in parts and trace is not None:
        sources.append(f"packaged trace {trace}" if trace in TRACES
                       else f"trace {shown(trace, quote=False)}")
    values = _value_parts(parts)
    if (values and not sources or "calibration" in values
            or any(part in ("model_figures", "stages") for part in values)
            and not {"model", "variant"} & set(values)):
        sources.append("the project's code")
    if SIMULATOR_CODE in parts:
        sources.append(SIMULATOR_CODE_SOURCE)
    return list(dict.fromkeys(sources))
