"""Agent names -> policies, and saved policy files -> policies.

Names (``POLICY_NAMES``, ``SPLIT_POLICY_NAMES``, ``SB3_NAMES``, and the patterns written with ``<...>``):

* ``all-cpu``, ``all-gpu``, ``all-npu``: every stage on one device (any device name
  of the hardware works as ``all-<device>``);
* ``static:<load>,<prefill>,<decode>``: a fixed placement by device names, e.g.
  ``static:cpu,gpu,gpu``;
* ``best-static``: the best static placement, searched once with nominal figures
  (keyword ``path=`` keeps it in a JSON file);
* ``random``: seeded uniform actions (keyword ``seed=``, default 0);
* ``heft``, ``heft-calibrated``: earliest-finish-time, nominal or measured speeds;
* ``heft-split`` (``SPLIT_POLICY_NAMES``): earliest-finish *fractions* of each stage, with
  measured speeds; only for ``InferenceAllocSplit-v0``;
* ``oracle``: the per-step (myopic) lower bound; needs the live single env;
* ``gated-<name>``: any of the above behind the small-batch gate (keyword
  ``threshold=``, default 16), e.g. ``gated-heft-calibrated``;
* ``<module>:<attribute>``: a policy of your own, imported (``agents.imported``), e.g.
  ``mine:ShortestQueue``;
* ``ppo``, ``a2c``, ``dqn``, ``maskable-ppo``, ``sac``, ``trpo``, ``recurrent-ppo``:
  Stable-Baselines3 (and sb3-contrib) agents, built by ``agents.sb3_factory.make_sb3``
  (imported only when asked for); ``dqn`` and ``maskable-ppo`` act in ``InferenceAlloc-v0``
  only, ``sac`` in ``InferenceAllocSplit-v0`` only; ``recurrent-ppo`` is an LSTM policy.

``load_policy`` rebuilds a policy from a zip written by ``Policy.save`` or, for an
SB3 model zip, hands over to ``agents.sb3_factory.load_sb3``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from agents.base import Policy, read_policy_file
from agents.files import model_file
from agents.gated import DEFAULT_THRESHOLD, GatedScheduling
from agents.heft import HeftPolicy
from agents.heft_split import HeftSplitPolicy
from agents.imported import PATTERN as IMPORT_PATTERN
from agents.imported import (
    ImportNameError,
    import_form_hint,
    imported_env_id,
    imported_policy_maker,
    is_import_name,
    is_module_attribute,
)
from agents.oracle import OraclePolicy
from agents.static import (
    NotOwnSpaces,
    RandomPolicy,
    StaticPolicy,
    best_static,
    check_own_spaces,
    unwrap_env,
)
from envs import ENV_IDS
from inference.hardware import DEVICE_KINDS
from inference.messages import did_you_mean, shown

POLICY_NAMES: tuple[str, ...] = (
    "all-cpu", "all-gpu", "all-npu", "best-static", "random", "heft", "heft-calibrated",
    "oracle",
)
SPLIT_POLICY_NAMES: tuple[str, ...] = ("heft-split",)     # InferenceAllocSplit-v0 only
# The fixed policies named by a word alone (all-<device>, static:..., gated-<name> besides).
FIXED_NAMES: frozenset[str] = frozenset((*POLICY_NAMES, *SPLIT_POLICY_NAMES))
# Those that read no entry of the observation, only its shape (one, or a batch), besides
# the all-<device> and static:<...> placements (a saved one's name is "static").
_BLIND_NAMES: frozenset[str] = frozenset(("best-static", "random", "static"))


def _reads_observations(key: str) -> bool:
    """Does the fixed policy `key` (a lower-case name, or a saved one's) read the observation's
    entries, or only its shape?"""
    return not (key in _BLIND_NAMES or key.startswith(("all-", "static:")))
SB3_NAMES: tuple[str, ...] = ("ppo", "a2c", "dqn", "maskable-ppo", "sac", "trpo",
                               "recurrent-ppo")
NAME_PATTERNS: tuple[str, ...] = ("all-<device>", "static:<load>,<prefill>,<decode>",
                                  "gated-<name>", IMPORT_PATTERN)
_SB3_MODULE = "agents.sb3_factory"


def _ungated(name: str) -> str:
    """The policy a ``gated-<name>`` gates, as written (its device names may have capitals,
    see _device_name); `name` stripped if not gated. The prefix matches in any case, as the
    names do."""
    key = name.strip()
    return key[len("gated-"):] if key.lower().startswith("gated-") else key


def policy_env_id(name: str) -> str:
    """The env a named policy acts in: the Split env for those that divide stages (e.g.
    heft-split, gated or not), else the discrete env; an imported policy says (its
    ``env_id``), and one that cannot be imported is refused when it is built."""
    inner = _ungated(name)
    if is_import_name(inner):
        try:
            return imported_env_id(inner)
        except ImportNameError:
            return ENV_IDS[0]
    return ENV_IDS[1] if inner.lower() in SPLIT_POLICY_NAMES else ENV_IDS[0]


class UnknownPolicyName(ValueError):
    """A name that is no policy; the message lists the valid ones."""


class UnknownSavedPolicy(ValueError):
    """A saved policy's name that none of ours has: a ``Policy`` subclass of yours saves, but
    only ours are rebuilt from their name and config."""


def valid_names(learners: bool = True) -> str:
    """Every valid agent name and pattern, for error messages and ``--help``; without the
    SB3 learners where only a fixed policy fits (baselines, warm-up's conservative policy)."""
    return ", ".join((*POLICY_NAMES, *SPLIT_POLICY_NAMES, *(SB3_NAMES if learners else ()),
                      *NAME_PATTERNS))


def unknown_learner(name: object) -> str:
    """The refusal of an agent train.py cannot train. It lists the learners alone: every
    policy name listed beside them named `<module>:<attribute>` as valid, the very form
    refused, though train.py trains only the built-in learners."""
    from agents.commands import command, program

    # the names are read in any case: PPO2 is near ppo
    meant = did_you_mean([name.lower() if isinstance(name, str) else name], SB3_NAMES)
    return (f"unknown agent {shown(name)}{meant}: {program('train')} "
            f"trains {', '.join(SB3_NAMES)}, the built-in Stable-Baselines3 and sb3-contrib "
            f"learners; a learner of your own runs in the online study "
            f"({command('evaluate')} --online --online-agents <module>:<builder>), or joins "
            f"these as CONTRIBUTING.md says (agents.sb3_hyperparams.ALGORITHMS)")


def _nearest(name: str, learners: bool = True, env: Any = None) -> str:
    """`did_you_mean` over every concrete agent name (the all-<kind> ones spelt out, and
    all-<device> for each device of `env`'s hardware, as it spells it), in any case as the
    names are read (HEFT_CALIBRATED: 'heft-calibrated')."""
    meant = import_form_hint(name)   # a policy of yours, not written as <module>:<attribute>
    if meant:
        return meant
    try:
        devices = unwrap_env(env).device_names if env is not None else ()
    except TypeError:       # not one of our envs: the fixed names alone
        devices = ()
    return did_you_mean([name.strip() if isinstance(name, str) else name],
                        (*POLICY_NAMES, *SPLIT_POLICY_NAMES, *(SB3_NAMES if learners else ()),
                         *(f"all-{d}" for d in devices)), ignore_case=True)


def check_fixed_policy_name(name: str, what: str) -> None:
    """Refuse a learner where a fixed policy is needed, naming the valid ones."""
    if isinstance(name, str) and _ungated(name).lower() in SB3_NAMES:
        raise ValueError(f"{what} {shown(name)} is a learning agent; it needs a fixed "
                         f"policy: {valid_names(learners=False)}")


def check_fixed_policy(name: str, env: Any, what: str, learner_hint: str = "") -> None:
    """What `make_fixed_policy` refuses whatever the env can take, found without building the
    policy (best-static is a search): a learner or an unknown name, each an UnknownPolicyName
    naming `what` (`learner_hint` follows the learner's)."""
    try:
        _fixed_policy_maker(name, env, what, learner_hint)
    except UnknownPolicyName:
        raise
    except ValueError:          # a name the env cannot take (all-gpu, no GPU) is still a name
        pass


def make_fixed_policy(name: str, env: Any, what: str, learner_hint: str = "") -> Policy:
    """`make_policy` where a fixed policy is needed (a baseline, the conservative policy):
    a learner, an unknown name and a name the env cannot take are each one ValueError
    naming `what` (`learner_hint` follows the learner's); the first two an UnknownPolicyName,
    wrong whatever the env (`check_fixed_policy`)."""
    build = _fixed_policy_maker(name, env, what, learner_hint)
    try:
        return build()
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{what}: {exc}") from None


def check_first_action(policy: Any, env: Any, what: str,
                       hand_on: Callable[[Any], Any] = lambda action: action) -> None:
    """Step `env` (reset on seed 0) once with `policy`'s action, handed on as the caller hands
    it (`hand_on`): one the env refuses (a wrong shape or dtype, a device id out of range) is
    one ValueError naming `what`, before a run or an evaluation starts. A policy of yours
    answering so failed deep in PPO's update as the warm-up's conservative policy, or with the
    env's traceback once evaluate.py's models had run, neither naming it."""
    obs, _ = env.reset(seed=0)
    try:
        action, _ = policy.predict(obs, deterministic=True)
    except ValueError as exc:   # its own (or OneAtATime's, naming it): else a bare message
        raise ValueError(f"{what}: its predict() failed on a first task: {exc}") from None
    try:
        env.step(hand_on(action))
    except ValueError as exc:
        raise ValueError(f"{what}: the env refuses its action on a first task: {exc}") from None


def _fixed_policy_maker(name: str, env: Any, what: str, learner_hint: str) -> Callable[..., Any]:
    """`_policy_maker` for a fixed policy, the name parsed once for both the checks and the
    build: a learner or an unknown name is an UnknownPolicyName naming `what`, a name the env
    cannot take a plain ValueError naming it."""
    try:
        check_fixed_policy_name(name, what)
    except ValueError as exc:
        raise UnknownPolicyName(f"{exc}{learner_hint}") from None
    try:
        return _policy_maker(name, env)
    except ImportNameError as exc:  # a name of the grammar, whose module or attribute is not
        raise UnknownPolicyName(f"{what}: {exc}") from None
    except UnknownPolicyName:
        raise UnknownPolicyName(f"unknown {what} {shown(name)}"
                                f"{_nearest(name, learners=False, env=env)}; "
                                f"valid names: {valid_names(learners=False)}") from None
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def runs_on(name: str, devices: tuple[str, ...]) -> bool:
    """Whether hardware with `devices` can run the policy `name`: an all-<kind> policy (gated
    or not) needs a device of that name. A name that is no device kind (all-gpus) counts as
    runnable, for make_policy to refuse."""
    key = _ungated(name).lower()
    device = key[len("all-"):] if key.startswith("all-") else None
    # ignoring case, as make_policy finds the device: a CPU named CPU runs all-cpu
    return device not in DEVICE_KINDS or device in {d.lower() for d in devices}


def _sb3(function: str, name: str) -> Any:
    """`function` of agents.sb3_factory, imported lazily (the module may not exist yet)."""
    try:
        module = importlib.import_module(_SB3_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != _SB3_MODULE:
            raise
        raise NotImplementedError(f"{name!r} needs {_SB3_MODULE}, which is not available "
                                  f"yet") from None
    fn = getattr(module, function, None)
    if fn is None:
        raise NotImplementedError(f"{_SB3_MODULE} has no {function}() for {name!r}")
    return fn


def _device_name(device: str, names: tuple[str, ...]) -> str:
    """`device` as the hardware spells it: itself, else the one device name equal to it
    ignoring case (names are matched lower-cased, but a hardware YAML may name a device
    ``A100``: ``all-A100`` was an unknown agent, ``static:CPU,...`` an unknown device 'cpu')."""
    if device in names:
        return device
    same = [n for n in names if n.lower() == device.lower()]
    return same[0] if len(same) == 1 else device


def make_policy(name: str, env: Any, **kwargs: Any) -> Any:
    """A fresh policy called `name` for `env` (see the module docstring for names and keywords).

    Raises ValueError, listing every valid name, for an unknown name. Our fixed policies
    (every name but the learners' and yours) read the env's own observations and answer in
    its own actions: on an env whose wrappers change either space (``RescaleAction``,
    ``NormalizeObservation``, ``FrameStackObservation``, DQN's ``FlatDiscreteActions``) they
    are refused, a ValueError (``agents.static.check_own_spaces``).
    """
    return _policy_maker(name, env)(**kwargs)


def _policy_maker(name: Any, env: Any, reader: str | None = None) -> Callable[..., Any]:
    """The names' grammar: what builds the policy `name` for `env` from make_policy's keywords,
    found without building it (best-static is a search). An unknown name is an
    UnknownPolicyName; some names the env cannot take are a ValueError here already, among
    them an env whose wrappers change its spaces, refused on behalf of `reader` (the policy
    as named: a gated one's for its inner policy)."""
    if not isinstance(name, str):
        raise UnknownPolicyName(f"agent name must be a string; valid names: {valid_names()}")
    key = name.strip().lower()
    if is_import_name(name):
        try:
            return imported_policy_maker(name.strip(), env)
        except ImportNameError as exc:
            if not exc.missing_module:
                raise
            raise ImportNameError(f"{exc}{_nearest(name, env=env)}", missing_module=True) from None
    if key in SB3_NAMES:
        return lambda **kwargs: _sb3("make_sb3", key)(key, env, **kwargs)
    reader = reader or name.strip()
    if key.startswith("gated-"):
        try:
            inner = _policy_maker(_ungated(name), env, reader)
        except UnknownPolicyName:   # named 'bogus' for gated-bogus, the part after gated-
            raise UnknownPolicyName(f"unknown agent {shown(name)}{_nearest(name)}; valid names: "
                                    f"{valid_names()}") from None
        # the gate reads the observation and writes the previous placement in the env's own
        # actions, whatever its inner policy (a learner's too)
        check_own_spaces(env, reader)
        return lambda threshold=DEFAULT_THRESHOLD, **kwargs: GatedScheduling(
            inner(**kwargs), threshold=threshold)
    if key.startswith("all-"):
        base = unwrap_env(env)
        device = _device_name(name.strip()[len("all-"):], base.device_names)
        if device in base.device_names:
            check_own_spaces(env, reader, reads_observations=_reads_observations(key))
            return lambda **kwargs: StaticPolicy.for_env(env, [device] * 3, **kwargs)
        if device.lower() in DEVICE_KINDS:   # a valid name, on hardware without that device
            raise ValueError(f"{shown(name)}: the hardware has no device {shown(device)} (it has "
                             f"{', '.join(base.device_names)})")
    if key.startswith("static:"):
        names = unwrap_env(env).device_names
        devices = [_device_name(d.strip(), names)
                   for d in name.strip()[len("static:"):].split(",")]
        if len(devices) != 3:
            raise ValueError(f"{shown(name)}: a static placement names three devices (load, prefill, "
                             f"decode), e.g. static:cpu,gpu,gpu")
        check_own_spaces(env, reader, reads_observations=_reads_observations(key))
        return lambda **kwargs: StaticPolicy.for_env(env, devices, **kwargs)
    if key in FIXED_NAMES:
        check_own_spaces(env, reader, reads_observations=_reads_observations(key))
    if key == "best-static":
        return lambda **kwargs: best_static(env, **kwargs)
    if key == "random":
        return lambda **kwargs: RandomPolicy(unwrap_env(env).action_space, **kwargs)
    if key in ("heft", "heft-calibrated"):
        return lambda **kwargs: HeftPolicy(env, calibrated=key == "heft-calibrated", **kwargs)
    if key == "heft-split":
        return lambda **kwargs: HeftSplitPolicy(env, **kwargs)
    if key == "oracle":
        return lambda **kwargs: OraclePolicy(env, **kwargs)
    raise UnknownPolicyName(f"unknown agent {shown(name)}{_nearest(name, env=env)}; valid "
                            f"names: {valid_names()}")


def policy_from_config(name: str, config: dict[str, Any], env: Any) -> Policy:
    """Rebuild a non-learned policy from its saved name and ``config()``."""
    if name.startswith(("gated-", "all-")) or name in FIXED_NAMES or name == "static":
        check_own_spaces(env, name, reads_observations=_reads_observations(name))
    if name.startswith("gated-"):
        inner = config["inner"]
        if not (isinstance(inner, dict) and isinstance(inner.get("name"), str)
                and isinstance(inner.get("config"), dict)):
            # inner["name"].startswith and inner["config"].get were AttributeError tracebacks
            raise ValueError(f"'inner' must be a saved policy ({{name: ..., config: {{...}}}}), "
                             f"got {shown(inner)}")
        # GatedScheduling checks it: int() made 16.5 a threshold of 16, and inf an OverflowError
        return GatedScheduling(policy_from_config(inner["name"], inner["config"], env),
                               threshold=config["threshold"])
    if name == "static" or name == "best-static" or name.startswith("all-"):
        return StaticPolicy.from_config(name, config, env)
    if name == "random":
        return RandomPolicy.from_config(config, env)
    if name in ("heft", "heft-calibrated"):
        return HeftPolicy.from_config(config, env)
    if name == "heft-split":
        return HeftSplitPolicy.from_config(config, env)
    if name == "oracle":
        return OraclePolicy.from_config(config, env)
    raise UnknownSavedPolicy(f"unknown saved policy {name!r}")


def load_policy(path: str | os.PathLike[str], env: Any) -> Any:
    """Load a saved agent: a policy zip of ``Policy.save`` or an SB3 model zip.

    Raises FileNotFoundError naming the path when it does not exist (``x`` also finds
    ``x.zip``, as SB3 does), and ValueError naming it when it is not a valid model file.
    """
    p = model_file(path)
    saved = read_policy_file(p)          # ValueError naming the path if corrupt
    if saved is None:
        return _sb3("load_sb3", str(p))(p, env)
    name, config = saved["name"], saved.get("config") or {}
    try:
        if not isinstance(name, str) or not isinstance(config, dict):
            raise ValueError("malformed policy.json")
        return policy_from_config(name, config, env)
    except NotOwnSpaces:
        raise           # the env is wrong, not the file
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, TypeError) and "InferenceAlloc" in str(exc):
            raise       # the env is wrong, not the file
        reason = f"its config has no {exc.args[0]!r} entry" if isinstance(exc, KeyError) else exc
        if isinstance(exc, UnknownSavedPolicy):
            reason = f"{exc}{_own_class_hint(saved.get('class'))}"
        raise ValueError(f"model file {p} does not hold a loadable policy ({name!r}): "
                         f"{reason}") from None


def _own_class_hint(saved_class: Any) -> str:
    """What to do with the zip of a policy class of yours (`saved_class`, ``Policy.save``'s
    ``<module>:<class>``; absent from zips saved before it was recorded): only our fixed
    policies and SB3 models load from a zip, so name the class instead, as evaluate.py's
    --baselines and train.py's --conservative take it."""
    known = isinstance(saved_class, str) and is_module_attribute(saved_class)
    script = known and saved_class.startswith("__main__:")
    name = shown(saved_class, quote=False) if known and not script else IMPORT_PATTERN
    hint = (f"; only our fixed policies and SB3 models load from a zip: evaluate a policy of "
            f"yours by its class, as --baselines {name}")
    if script:
        # a class of a script run as `python mine.py`: "__main__:Mine" imports nothing
        hint += " (it was saved from a script run as __main__: name the class by its module)"
    return hint
