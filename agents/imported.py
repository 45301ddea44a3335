"""Policies of your own, named ``<module>:<attribute>`` wherever a policy name is read.

``evaluate.py --baselines mine:ShortestQueue``, ``train.py --conservative mine:make_rule``
and ``make_policy("mine:ShortestQueue", env)`` import ``mine`` (from the working directory,
then ``sys.path``; once per process, as ``import`` does: a module already imported under the
name is the one taken) and take its ``ShortestQueue``; a dotted attribute (``mine:Rules.fifo``)
is followed. The attribute is one of:

* a class or function that builds the policy: called with the env when it takes one
  positional argument (``factory(env)``), else with no argument (docs/EXTENDING.md's
  ``ShortestQueue()``); an optional first argument (``seed=0``) is its own, not the env's,
  unless named ``env``; keywords of ``make_policy`` are passed on;
* a ready policy object (anything with a ``predict`` method but not a class), used as it is.

The policy answers Stable-Baselines3's ``predict()`` in the env's own actions, for one
observation: a batch (a VecEnv's, as the warm-up's conservative policy gets) is handed to it
one observation at a time (``OneAtATime``). It acts in ``InferenceAlloc-v0`` unless the
attribute sets ``env_id = "InferenceAllocSplit-v0"``, and a factory is given the env in that
env's own actions (the warm-up's for DQN too: ``agents.warmup.own_actions_env``). One that
reads the env it was built with as it acts, not the observation alone (as the oracle does),
sets ``reads_live_env = True``: it then refuses a batch of more than one observation (it
would answer every row from its own env's task), and so ``train.py`` refuses it as its
conservative policy for ``--n-envs`` above 1, and for ``--vec-env subproc``, whose envs step
in other processes.
Importing runs the module's code, as ``python -c "import mine"`` would: name only modules you
trust. ``train.py --callbacks`` names callbacks of yours the same way (``import_target``, used by
``agents.user_callbacks``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from agents.base import Policy
from envs import ENV_IDS
from envs.inference_alloc_split import InferenceAllocSplitEnv
from envs.scenario_mix import ScenarioMixEnv
from inference.messages import did_you_mean, shown

# package.module:attribute.attribute: Python identifiers on both sides
_IMPORT_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
PATTERN = "<module>:<attribute>"


def is_module_attribute(name: str) -> bool:
    """Whether `name` reads as ``<module>:<attribute>``, whatever the module."""
    return bool(_IMPORT_NAME.match(name.strip()))


def is_import_name(name: str) -> bool:
    """Whether `name` reads as a policy's ``<module>:<attribute>``. ``static:<devices>`` is the
    fixed placement's pattern and wins: a module of yours named ``static`` is not reachable
    here."""
    return is_module_attribute(name) and not name.strip().lower().startswith("static:")


_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
_ATTRIBUTE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def import_form_hint(name: object) -> str:
    """' (...)': how to write `name`, meant as a policy of yours but not read as one, as
    ``<module>:<attribute>``; '' for another name. A file's path (``pol/rules.py:X``,
    ``./mine.py:X``) gets the module's dotted name; ``mine.X``, whose ``mine`` is importable,
    gets ``mine:X``. Each was "unknown", with no word on the form that was meant."""
    if not isinstance(name, str):
        return ""
    text = name.strip()
    module, colon, attribute = text.rpartition(":")
    a_file = "/" in module or "\\" in module or module.endswith(".py")
    if colon and a_file and not is_module_attribute(text) and _ATTRIBUTE.match(attribute):
        parts = [p for p in re.split(r"[/\\]", module.removesuffix(".py")) if p not in ("", ".")]
        dotted = f"{'.'.join(parts)}:{attribute}"
        relative = not os.path.isabs(module) and ":" not in module and ".." not in parts
        guess = f": write {shown(dotted)}" if relative and is_import_name(dotted) else ""
        return (f" (a module is named by its dotted import name, importable from the working "
                f"directory or sys.path, not by its file{guess})")
    if not colon and _DOTTED.match(text):
        parts = text.split(".")
        for cut in range(len(parts) - 1, 0, -1):    # the longest module first: pol.rules.X
            module, attribute = ".".join(parts[:cut]), ".".join(parts[cut:])
            if _importable(module):
                return f" (did you mean {shown(f'{module}:{attribute}')}?)"
    return ""


@contextlib.contextmanager
def _working_directory_on_path() -> Iterator[None]:
    """The working directory on sys.path, as `python -m` would find a module there: for the
    lookup inside only, not for the process ('' on sys.path is the cwd too)."""
    cwd = os.getcwd()
    added = cwd not in {os.path.abspath(p) for p in sys.path}
    if added:
        sys.path.insert(0, cwd)
    try:
        yield
    finally:
        if added:
            sys.path.remove(cwd)


def _importable(module: str) -> bool:
    """Whether `module` is found from the working directory or sys.path, as `import_target`
    finds it, without running its code: a package's modules are looked for in its folders."""
    top, *rest = module.split(".")
    try:
        with _working_directory_on_path():
            spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for part in rest:
        here = [os.path.join(folder, part) for folder in folders]
        if not any(os.path.isfile(f"{h}.py") or os.path.isdir(h) for h in here):
            return False
        folders = [h for h in here if os.path.isdir(h)]
    return spec is not None


class ImportNameError(ValueError):
    """`<module>:<attribute>` names nothing that can be imported; `missing_module`: its module
    is not there at all (a typo of one of our names, as heft:calibrated, may be meant)."""

    def __init__(self, message: str, missing_module: bool = False) -> None:
        super().__init__(message)
        self.missing_module = missing_module


def import_target(name: str, what: str = "policy") -> Any:
    """The object `name` (``<module>:<attribute>``) names. Raises ImportNameError naming
    what is missing: the module (a module the named one imports, missing, is told as what
    importing it raised, as anything else its code raises), or the attribute, with the
    module's nearest names. `what` heads each message: what the
    name is read as (``policy``, or ``--callbacks`` for ``agents.user_callbacks``)."""
    module_name, _, attribute = name.strip().partition(":")
    cwd = os.getcwd()
    try:
        with _working_directory_on_path():
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            # the module exists, and one it imports does not: its own error, not "no module"
            raise _import_raised(what, name, module_name, exc) from exc
        stem = module_name.removesuffix(".py")
        hint = f"; name the module, {stem}, not its file" if stem != module_name else ""
        raise ImportNameError(f"{what} {shown(name)}: no module named {shown(module_name)} in the "
                              f"working directory ({cwd}) or on sys.path{hint}",
                              missing_module=True) from None
    except Exception as exc:    # the module's code, whatever it raises (not Ctrl-C's)
        # the CLIs print these as one line, as a factory's own errors: a SyntaxError, an
        # ImportError or a RuntimeError as the module ran was a traceback
        raise _import_raised(what, name, module_name, exc) from exc
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            public = [n for n in dir(target) if not n.startswith("_")]
            # the module's file: one imported already under its name (Python's random, our
            # envs) is the one taken, not a file of that name in the working directory
            where = f" ({target.__file__})" if target is module and getattr(
                module, "__file__", None) else ""
            raise ImportNameError(f"{what} {shown(name)}: {getattr(target, '__name__', target)}"
                                  f"{where} has no attribute {shown(part)}"
                                  f"{did_you_mean([part], public)}")
        target = getattr(target, part)
    return target


def _import_raised(what: str, name: str, module_name: str, exc: Exception) -> ImportNameError:
    """The one-line refusal of `name` whose module raised `exc` as it was imported: what and
    where (a SyntaxError's own file and line: its traceback ends in the import machinery)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}, line {exc.lineno})"
        text = exc.msg
    else:
        where, text = raised_at(exc), str(exc)
    return ImportNameError(f"{what} {shown(name)}: importing {module_name} raised "
                           f"{type(exc).__name__}: {text}{where}")


def imported_env_id(name: str) -> str:
    """The env the policy `name` acts in: its ``env_id`` attribute, else InferenceAlloc-v0."""
    return _env_id_of(name, import_target(name))


def _env_id_of(name: str, target: Any) -> str:
    """`imported_env_id` of `target`, the object `name` names, imported already."""
    env_id = getattr(target, "env_id", ENV_IDS[0])
    if env_id not in ENV_IDS:
        raise ImportNameError(f"policy {shown(name)}: env_id must be one of "
                              f"{', '.join(ENV_IDS)}, got {shown(env_id)}")
    return str(env_id)


def imported_policy_maker(name: str, env: Any) -> Callable[..., Any]:
    """What builds the policy `name` for `env` from make_policy's keywords (see the module
    docstring); the import happens now, so that a missing module or attribute is refused
    before anything is built."""
    target = import_target(name)
    wanted, given = _env_id_of(name, target), _env_id(env)
    if wanted != given:     # its actions would be refused by the env at the first step
        raise ValueError(f"policy {shown(name)} acts in {wanted}"
                         f"{' (its env_id)' if wanted != ENV_IDS[0] else ''}, not {given}"
                         + (f"; a policy of {given} sets env_id = {given!r}"
                            if given != ENV_IDS[0] else ""))
    if not callable(target) and not hasattr(target, "predict"):
        raise ImportNameError(f"policy {shown(name)} is a {type(target).__name__}: it must be a "
                              f"policy (with predict()), or a class or function that builds one")

    def build(**kwargs: Any) -> Any:
        if hasattr(target, "predict") and not inspect.isclass(target):
            if kwargs:
                raise ValueError(f"policy {shown(name)} is an object: it takes no keywords, "
                                 f"got {', '.join(kwargs)}")
            policy = target
        else:
            arguments = _arguments(name, target, env, kwargs)
            try:
                policy = target(*arguments, **kwargs)
            except Exception as exc:    # your code's, whatever it raises (not Ctrl-C's)
                # the CLIs print these as one line: name the policy, and where its code raised;
                # a RuntimeError or KeyError of yours was a traceback, though train.py's check
                # builds the policy before any run, as evaluate.py's before any episode
                raise ValueError(f"policy {shown(name)}: building it raised "
                                 f"{type(exc).__name__}: {exc}{raised_at(exc)}") from exc
        if not callable(getattr(policy, "predict", None)):
            raise ValueError(f"policy {shown(name)} built a {type(policy).__name__}, which has "
                             f"no predict(observation, state, episode_start, deterministic)")
        return OneAtATime(policy, name)

    return build


def raised_at(exc: BaseException) -> str:
    """`` (file, line n)`` of the innermost frame `exc` was raised in."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""


def _env_id(env: Any) -> str:
    """Which of our two envs `env` is (wrapped or not)."""
    base = getattr(env, "unwrapped", env)
    if isinstance(base, ScenarioMixEnv):    # a mix's scenarios play in its env_id
        return base.env_id
    return ENV_IDS[1] if isinstance(base, InferenceAllocSplitEnv) else ENV_IDS[0]


class RowStates(tuple):
    """A batch's states from ``OneAtATime.predict``, one per row: handed back, each row's goes
    to its own call."""


class OneAtATime:
    """`policy` with SB3's batch contract kept for it: a batch of observations is answered
    row by row, stacked. A policy written for one observation (docs/EXTENDING.md's ShortestQueue)
    answered the warm-up's batch of one with one action, and PPO failed deep in torch. Each
    row keeps its own state (a ``RowStates`` of them is returned, to be handed back) and its
    own episode start. One that reads its live env (``reads_live_env``) takes a batch of one
    alone, as the oracle.
    `name`: what the policy is called (``gated-`` and error messages read it) where it has no
    name of its own."""

    def __init__(self, policy: Any, name: str = "") -> None:
        self.policy = policy
        own = getattr(policy, "name", None)
        if own == Policy.name:  # our base class's placeholder, not a name a subclass gave itself
            own = None
        self.name = own or name or type(policy).__name__.lower()

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        obs = np.asarray(observation)
        if obs.ndim == 1:
            action, state = self._one(observation, state, episode_start, deterministic)
            return np.asarray(action), state
        if len(obs) != 1 and getattr(self.policy, "reads_live_env", False):
            # as the oracle's predict: each row would be answered from its one env's task
            raise ValueError(f"policy {shown(self.name)} reads the live env's current task "
                             f"(reads_live_env), so it takes one observation or a batch of one, "
                             f"got a batch of {len(obs)}")
        # each row is its own stream (one env of a VecEnv): its own state and episode start,
        # not the state the row before it returned, nor the batch's starts all at once
        states = list(state) if isinstance(state, RowStates) and len(state) == len(obs) else (
            [state] * len(obs))
        starts = (list(episode_start) if episode_start is not None
                  and np.ndim(episode_start) == 1 and len(episode_start) == len(obs)
                  else [episode_start] * len(obs))
        actions = []
        for i, row in enumerate(obs):
            action, states[i] = self._one(row, states[i], starts[i], deterministic)
            actions.append(np.asarray(action))
        return np.stack(actions), (None if all(x is None for x in states) else RowStates(states))

    def _one(self, observation: Any, state: Any, episode_start: Any, deterministic: bool
             ) -> tuple[Any, Any]:
        """The policy's (action, state) for one observation. The action alone, unpacked as a
        pair, read 'too many values to unpack' (an int action: a TypeError), naming no policy,
        in every caller (evaluation, the warm-up, a loop of yours)."""
        answer = self.policy.predict(observation, state, episode_start, deterministic)
        if not isinstance(answer, (tuple, list)) or len(answer) != 2:
            raise ValueError(f"policy {shown(self.name)}: predict() must return (action, state) "
                             f"as Stable-Baselines3's does, got {shown(answer)}")
        return answer[0], answer[1]

    def __getattr__(self, name: str) -> Any:
        # the policy's own attributes (its env_id, a threshold, its config) read through
        if name in ("policy", "acts_on_masks"):   # this predict() takes no action_masks
            raise AttributeError(name)
        return getattr(self.policy, name)


def _arguments(name: str, factory: Callable[..., Any], env: Any,
               kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """(env,) when `factory` takes the env as its one positional argument, else (). A first
    parameter with a default (``seed=0``) is the policy's own: it took the env, unless it is
    named ``env``."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):     # a builtin without one: give it the env
        return (env,)
    first = next((p for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)), None)
    own = first is not None and first.default is not first.empty and first.name != "env"
    for args in (((),) if own else ((env,), ())):
        try:
            signature.bind(*args, **kwargs)
            return args
        except TypeError:
            continue
    raise ValueError(f"policy {shown(name)}: {getattr(factory, '__name__', factory)}{signature} "
                     f"takes neither the env alone nor no argument"
                     + (f" (with keywords {', '.join(kwargs)})" if kwargs else ""))
