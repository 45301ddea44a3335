"""How the configs of ``agents.config`` become flags and YAML, and are read back from them.

``parse_config(Config, argv)`` builds the argparse parser from the fields (``snake_case`` ->
``--kebab-case``; lists take several values, booleans get ``--x/--no-x``, ``hp`` takes
``key=value`` pairs) and resolves, in order of precedence: the flags given, then the YAML file
of ``--config``, then the defaults. ``--online`` and ``--no-online`` are two options of one
choice (``--no-x`` of the first would be the second): each, given as a flag, clears the other's
value from the file. A resolved config dumps back to YAML (``to_yaml``) that ``--config`` reads
again.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from agents.commands import Job, named, program
from agents.config import (
    HP_OF,
    RUN_RECORDS,
    ConfigError,
    EvalConfig,
    TrainConfig,
    flag_of,
    hp_digest,
    is_run_record,
    require_usable,
    require_usable_paths,
    require_working_directory,
)
from agents.overrides import kept_below, layer_hyperparams, parse_overrides
from inference.checks import is_number, is_whole
from inference.messages import (
    ShortErrorParser,
    argparse_type,
    did_you_mean,
    shown,
    unrecognized,
    whole_number,
)
from inference.yamlio import (
    cannot_read,
    describe_yaml_error,
    not_a_file,
    safe_load,
)

C = TypeVar("C")


# the job each CLI config is, for a refusal of one's option given to the other
JOB_OF: dict[type, Job] = {TrainConfig: "train", EvalConfig: "evaluate"}


def _other_job_note(cls: type, names: Sequence[str], spelt: str = "--") -> str:
    """' (--eval-tasks is train.py's option, not evaluate.py's)': for the `names` (flags, or a
    config file's keys with `spelt` '') that `cls` lacks and the other CLI has. The two share
    most names, so evaluate.py's "unrecognized arguments: --eval-tasks" read as a typo, and a
    run's config.yaml given to it as a file of unknown options."""
    job = JOB_OF.get(cls)
    if job is None:
        return ""
    own = _spellings(cls, spelt)
    for other, other_job in JOB_OF.items():     # cls itself finds none: its options are own
        options = _spellings(other, spelt)
        theirs = [name for name in names if name not in own and name in options]
        if theirs:
            whose = "options" if len(theirs) > 1 else "option"
            return (f" ({', '.join(theirs)} {'are' if len(theirs) > 1 else 'is'} "
                    f"{program(other_job)}'s {whose}, not {program(job)}'s)")
    return ""


def _spellings(cls: type, spelt: str) -> set[str]:
    """`cls`'s options as flags (`spelt` '--') or as a config file's keys ('')."""
    names = _option_names(cls)
    return set(names) if not spelt else {flag_of(name) for name in names}


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    args = typing.get_args(tp)
    if (typing.get_origin(tp) in (typing.Union, types.UnionType)) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return tp, False


def build_parser(cls: type, description: str | None = None,
                 prog: str | None = None) -> ShortErrorParser:
    """An argparse parser with a flag per field of `cls` (defaults shown, values SUPPRESSed);
    `prog` (argparse's default: sys.argv[0]'s name) heads its usage and errors."""
    parser = ShortErrorParser(
        prog=prog, description=description or (cls.__doc__ or "").strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter, argument_default=argparse.SUPPRESS)
    parser.add_argument("--config", metavar="FILE.yaml",
                        help="YAML file of options (flags given override it)")
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        meta = dict(f.metadata)
        meta.pop("clears", None)
        meta.pop("path", None)
        flags = meta.pop("flags", (flag_of(f.name),))
        default = (f.default_factory() if f.default_factory is not dataclasses.MISSING
                   else f.default)
        text = meta.pop("help", "")
        # "(default:" only: a help that says "default" of something else (--keep-checkpoints'
        # "the default interval") still needs its own stated
        if "(default:" not in text:
            text += f" (default: {default!r})"
        kwargs: dict[str, Any] = {"dest": f.name, "help": named(text)}
        tp, _optional = _unwrap_optional(hints[f.name])
        origin = typing.get_origin(tp)
        if tp is bool:
            kwargs["action"] = meta.pop("action", argparse.BooleanOptionalAction)
        # a list or mapping flag given twice adds to itself: argparse's default kept the
        # last only, so "--hp a=1 --hp b=2" trained without a=1, unannounced
        elif origin is list:
            kwargs.update(nargs="+", type=_cli_type(typing.get_args(tp)[0]), metavar="X",
                          action="extend")
        elif origin is dict:
            kwargs.update(nargs="+", metavar="KEY=VALUE", action="extend")
        elif (member := _one_or_list(tp)) is not None:
            kwargs.update(nargs="+", type=member, metavar="X", action="extend")
        else:
            kwargs["type"] = _cli_type(tp)
        kwargs.update(meta)   # nargs/const given in the field's metadata
        parser.add_argument(*flags, **kwargs)
    return parser


def _one_or_list(tp: Any) -> Any:
    """X of a ``X | list[X]`` field (one value, or a list of them), else None."""
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return None
    args = typing.get_args(tp)
    lists = [typing.get_args(a)[0] for a in args if typing.get_origin(a) is list]
    return lists[0] if len(args) == 2 and lists and lists[0] in args else None


def _cli_type(tp: Any) -> Any:
    """A field's argparse ``type``: a number's refusal shows the value through `shown`."""
    if tp is int:
        return argparse_type(whole_number)
    return argparse_type(tp) if tp is float else tp


def _coerce(name: str, value: Any, tp: Any) -> Any:
    """Check (and gently convert) one YAML value against the field's type."""
    base, optional = _unwrap_optional(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"option {name} must not be empty")
    if _one_or_list(base) is not None:     # one value, or a list of them: as given
        member = next(a for a in typing.get_args(base)
                      if (typing.get_origin(a) is list) == isinstance(value, list))
        return _coerce(name, value, member)
    origin = typing.get_origin(base)
    if origin is list:
        items = value if isinstance(value, list) else [value]
        (inner,) = typing.get_args(base)
        return [_coerce(name, v, inner) for v in items]
    if origin is dict:
        if isinstance(value, list):
            try:
                return parse_overrides([str(v) for v in value])
            except ValueError as exc:
                raise ConfigError(f"option {name}: {exc}") from None
        if not isinstance(value, dict):
            raise ConfigError(f"option {name} must be a mapping of key: value, got {shown(value)}")
        return dict(value)
    if base is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"option {name} must be true or false, got {shown(value)}")
        return value
    if base is int:
        # YAML reads 1e5 and 60000.0 as floats: taken where whole, as the command line takes them
        if not is_whole(value):
            raise ConfigError(f"option {name} must be an integer, got {shown(value)}")
        return int(value)
    if base is float:
        if not is_number(value):
            raise ConfigError(f"option {name} must be a number, got {shown(value)}")
        return float(value)
    if base is str:
        # str() turned a list or mapping into its repr and true into "True": `out: [results]`
        # wrote to a folder named "['results']", `resume: true` looked for a run named True
        if isinstance(value, (list, dict, bool)):
            raise ConfigError(f"option {name} must be text (a name or path), got {shown(value)}")
        return str(value)
    return value


def _option_names(cls: type) -> dict[str, str]:
    """Each spelling a config file may use for an option (snake_case) -> the field's name:
    the field's own and those of its flags (env for env_id, as --env is for --env-id)."""
    out = {}
    for f in dataclasses.fields(cls):
        out[f.name] = f.name
        for flag in f.metadata.get("flags", ()):
            out[flag.lstrip("-").replace("-", "_")] = f.name
    return out


def read_yaml_options(cls: type, path: str | Path,
                      records: dict[str, Any] | None = None) -> dict[str, Any]:
    """The options of the YAML file at `path`; a run's records it holds (``RUN_RECORDS``) go
    to `records`, where given."""
    p = Path(path)
    where = f"config file {shown(p, quote=False)}"
    if not p.is_file():
        raise ConfigError(f"{where} {not_a_file(p, 'a YAML file')}")
    try:
        data = safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML at {describe_yaml_error(exc)}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where} is not UTF-8 text") from None
    except OSError as exc:      # no permission to read it: a traceback, exit 1
        raise ConfigError(f"{where} {cannot_read(exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must hold a mapping of option: value")
    hints = typing.get_type_hints(cls)
    names = _option_names(cls)
    out: dict[str, Any] = {}
    keys: dict[str, Any] = {}    # the spelling each option was given in
    for key, value in data.items():
        # a run's record, as the run wrote it (a mapping per scenario); any other value is a
        # user's key, refused below as no option
        if cls is TrainConfig and key in RUN_RECORDS:
            if not is_run_record(key, value):
                # named as what it is: "unknown option 'hp_of'" left the run folder unusable
                # (evaluate.py, --resume, --config) with no word on why
                raise ConfigError(f"{where}: unknown option {shown(key)}, the name of a "
                                  f"run's record in its config.yaml, and not one as a run "
                                  f"writes it: restore it as the run wrote it, or remove it")
            if records is not None:
                records[str(key)] = value
            continue
        option = str(key).replace("-", "_")
        name = names.get(option)
        if name is None:
            hint = _other_job_note(cls, [option], spelt="") or did_you_mean([option], names)
            raise ConfigError(f"{where}: unknown option {shown(key)}{hint}; options: "
                              f"{', '.join(sorted(names))}")
        if name in out:
            # episode-tasks and episode_tasks (env and env_id) are one option: the YAML loader's
            # duplicate-key check sees two keys, and the later one silently replaced the earlier
            raise ConfigError(f"{where}: option {name} is given twice "
                              f"({keys[name]} and {key} are one option)")
        keys[name] = key
        try:
            out[name] = _coerce(name, value, hints[name])
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return out


def _clear_excluded(cls: type, given: set[str], values: dict[str, Any]) -> None:
    """Drop from the file's `values` the options that a flag given excludes (``clears``)."""
    for f in dataclasses.fields(cls):
        if f.name in given:
            # the flag replaces the file's choice: --no-online was refused as contradicting
            # the file's `online: true` rather than overriding it
            for other in set(f.metadata.get("clears", ())) - given:
                values.pop(other, None)


def described(doc: str | None, script: str, prog: str) -> str:
    """A CLI's docstring, whose examples run `python {script}`, as `prog`'s --help text: run as
    a console script (infer-alloc-train, where no train.py is), its examples name the command."""
    text = doc or ""
    return text if prog == script else text.replace(f"python {script}", prog)


class GivenOptions(set[str]):
    """The names of the options set (by flags or the ``--config`` file), and ``hp_source``:
    where the hyper-parameters came from, for their refusal once train.py builds the agents,
    when the file set some that the command line did not: ``hp {'n_epoch': 3} in c.yaml``, or
    ``--hp {'gamma': 0.9} and hp {'n_epoch': 3} in c.yaml``; '' where it set none. The file's
    hp was refused as ``--hp {...}``, as if typed on a command line that had no --hp, and a
    policy_kwargs in both was shown merged, as the command line's."""

    hp_source: str = ""
    #: the ``--config`` file's ``hp_of`` record, where it is a run's config.yaml holding one
    #: and its hp are read: the run whose every hyper-parameter they are
    hp_of: dict[str, Any] | None = None


def parse_config(cls: type[C], argv: Sequence[str] | None = None, description: str | None = None,
                 prog: str | None = None) -> tuple[C, GivenOptions]:
    """The config from defaults < ``--config`` YAML < flags, and the names of the options set.

    Bad values raise ConfigError; argparse itself exits 2 on a malformed command line.
    """
    parser = build_parser(cls, description, prog)
    namespace, extras = parser.parse_known_args(argv)
    if extras:
        hint = ""
        seeds_type = typing.get_type_hints(cls).get("seeds")
        counts_seeds = seeds_type is not None and typing.get_origin(seeds_type) is not list
        if counts_seeds and all(x.isdigit() for x in extras):
            # train.py's --seeds is a list; evaluate.py's is a count: "--seeds 0 1 2" lands here
            hint = " (--seeds is a count here: N held-out seeds from --seed-base, not a list)"
        flags = [word.split("=")[0] for word in extras if word.startswith("--")]
        parser.explained = {flag for flag in flags if _other_job_note(cls, [flag])}
        parser.error(f"{unrecognized(extras)}{hint}{_other_job_note(cls, flags)}")
    require_working_directory()     # before --config and every path resolve against it
    given = vars(namespace)
    values: dict[str, Any] = {}
    config_file = given.pop("config", None)
    records: dict[str, Any] = {}
    if config_file is not None:
        require_usable("--config", config_file)
        values.update(read_yaml_options(cls, config_file, records))
        _clear_excluded(cls, set(given), values)
    from_file = set(values) - set(given)    # the options the file alone sets
    file_hp = values.get("hp") or {}
    if "hp" in given:
        try:
            given["hp"] = parse_overrides(given["hp"])
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    for name, value in given.items():   # a mapping option (hp) merges over the file's
        # layered as the hyper-parameters are (policy_kwargs merged too): a flat merge let
        # --hp policy_kwargs={activation_fn: relu} drop the file's policy_kwargs net_arch
        values[name] = layer_hyperparams(values.get(name, {}), value) if isinstance(value, dict) else value
    config = cls(**values)
    try:
        require_usable_paths(config)
        validate = getattr(config, "validate", None)
        if validate is not None:
            validate()
    except ConfigError as exc:
        note = _source_note(cls, str(exc), from_file, set(given), config_file)
        if not note:
            raise
        raise ConfigError(f"{exc}{note}") from None
    options = GivenOptions(values)
    flag_hp = given.get("hp", {})
    filed = kept_below(file_hp, flag_hp)
    if file_hp:     # else plan's own "--hp {...}" (config.hp) is the command line's
        parts = [f"--hp {shown(flag_hp, quote=False)}"] if flag_hp else []
        if filed:
            parts.append(f"hp {shown(filed, quote=False)} in {shown(config_file, quote=False)}")
        options.hp_source = " and ".join(parts)
        record = records.get(HP_OF)
        # of the file's hp as the run wrote them: an edited hp (the values one means to set)
        # is the user's; and --hp setting every value the file's hp did leaves none of them
        if filed and record is not None and record["hp"] == hp_digest(file_hp):
            options.hp_of = record
    return config, options


def _source_note(cls: type, message: str, from_file: set[str], given: set[str],
                 config_file: str | None) -> str:
    """Where the options a refusal names were set, when the ``--config`` file set one: `` (from
    c.yaml)``, or `` (--seeds from c.yaml)`` beside a flag given on the command line. A file's
    bad value was refused in its flag's words alone ("--seeds must be >= 1"), as if typed on a
    command line that had none. '' where the file set none of them."""
    flags = {flag: f.name for f in dataclasses.fields(cls)
             for flag in (flag_of(f.name), *f.metadata.get("flags", ()))}
    named = {flag: flags[flag] for flag in re.findall(r"--[a-z][a-z0-9-]*", message)
             if flag in flags}
    filed = [flag for flag, name in named.items() if name in from_file]
    if not filed:
        return ""
    where = shown(config_file, quote=False)
    if any(name in given for name in named.values()):
        return f" ({', '.join(filed)} from {where})"
    return f" (from {where})"


def to_yaml(config: Any) -> str:
    """The config as YAML that ``--config`` reads back (field order kept)."""
    return yaml.safe_dump(dataclasses.asdict(config), sort_keys=False, default_flow_style=None)
