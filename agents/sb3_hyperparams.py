"""Stable-Baselines3 hyper-parameters: read from ``agents/hyperparams/<agent>.yaml`` (keyed by
env id, rl-baselines3-zoo style), layered with a warm start's values and the user's
overrides, and checked before any training starts.

SB3's constructors store what they are given, so a typo'd key, a string where a number goes,
a NaN or a net it cannot build used to fail deep inside a run, or train on in silence; here
each is one ValueError naming the file or the override and what it takes. Overrides come from
code (a dict) or the CLI (``key=value`` strings parsed as YAML scalars, never ``eval``-ed).
The agents are built from these in ``agents.sb3_factory``, which refuses a size whose buffer
would not fit in the machine's memory (``agents.sb3_memory``).
"""

from __future__ import annotations

import copy
import inspect
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sb3_contrib import TRPO, MaskablePPO, RecurrentPPO
from stable_baselines3 import A2C, DQN, PPO, SAC
from stable_baselines3.common.base_class import BaseAlgorithm

from agents.commands import named, program
from agents.overrides import layer_hyperparams as layer_hyperparams
from agents.overrides import parse_overrides as parse_overrides
from envs import ENV_IDS, canonical_env_id
from inference.checks import is_integer, is_number, is_whole
from inference.messages import did_you_mean, shown
from inference.yamlio import load_yaml_file, path_version

ALGORITHMS: dict[str, type[BaseAlgorithm]] = {"ppo": PPO, "a2c": A2C, "dqn": DQN,
                                              "maskable-ppo": MaskablePPO, "sac": SAC,
                                              "trpo": TRPO, "recurrent-ppo": RecurrentPPO}
# The agents whose action space is one env's only: DQN and MaskablePPO take discrete actions
# (InferenceAlloc-v0's device ids), SAC a Box (InferenceAllocSplit-v0's split weights).
ONLY_ENV = {"dqn": ENV_IDS[0], "maskable-ppo": ENV_IDS[0], "sac": ENV_IDS[1]}
HYPERPARAMS_DIR = Path(__file__).parent / "hyperparams"
# policy_kwargs.activation_fn by name, as YAML and --hp give it
ACTIVATIONS = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "elu": torch.nn.ELU,
               "gelu": torch.nn.GELU, "silu": torch.nn.SiLU, "leaky_relu": torch.nn.LeakyReLU}
WARM_START = "warm_start"   # the YAML key of a warm-started learner's hyper-parameters


def load_hyperparams(agent: str, env_id: str, warm_start: bool = False) -> dict[str, Any]:
    """The YAML's hyper-parameters of `agent` on `env_id`. An env's ``warm_start`` mapping
    holds the values a learner that starts from a behaviour clone uses instead (see
    ``starts_warm``); `warm_start` puts them on top."""
    if agent not in ALGORITHMS:
        raise ValueError(f"unknown SB3 agent {shown(agent)}; known: {', '.join(ALGORITHMS)}")
    check_agent_env(agent, env_id)
    path = HYPERPARAMS_DIR / f"{agent}.yaml"
    # a ValueError naming the file, as every check below: an edit that broke the YAML (a key
    # given twice, a tab) was a yaml traceback out of train.py, and a list there a TypeError
    table = _hyperparam_table(path) or {}
    if not isinstance(table, dict):
        raise ValueError(f"{path} must map env ids to hyper-parameters, got {table!r}")
    # a section under a misspelt id was never read, its values unused without a word
    unknown = [key for key in table if key not in ENV_IDS]
    if unknown:
        key = unknown[0]
        alias = canonical_env_id(str(key))
        hint = (f" (write {alias})" if alias in ENV_IDS
                else did_you_mean([key], ENV_IDS, ignore_case=True))
        raise ValueError(f"{path}: unknown env id {shown(key)}{hint}; hyper-parameters are "
                         f"keyed by env id: {', '.join(ENV_IDS)}")
    if env_id not in table:
        raise ValueError(f"no {agent} hyper-parameters for env {shown(env_id)} in {path}; "
                         f"envs there: {', '.join(table) or 'none'}")
    params = table[env_id]
    if not isinstance(params, dict):
        raise ValueError(f"{path}: {env_id} must map hyper-parameter names to values, "
                         f"got {params!r}")
    params = dict(params)
    warm = params.pop(WARM_START, None)
    warm = {} if warm is None else warm    # absent or null: none; 0 or '' is a mistake
    if not isinstance(warm, dict):
        raise ValueError(f"{path}: {env_id}.{WARM_START} must map hyper-parameter names to "
                         f"values, got {warm!r}")
    # checked here, not by SB3: a typo'd key was a bare TypeError traceback, and a value of
    # the wrong type (gamma: abc) failed only once training had started
    try:
        check_keys(agent, params)
        params = check_override_types(agent, {}, params)
        check_keys(agent, warm)
        warm = check_override_types(agent, params, warm)
    except ValueError as exc:
        raise ValueError(f"{path}, {env_id}: {exc}") from None
    return layer_hyperparams(params, warm) if warm_start else params


def _hyperparam_table(path: Path) -> Any:
    """The YAML at `path`, read once per version of the file (planning one run loads it 3-5
    times), as a copy of its own: callers change what they get."""
    return copy.deepcopy(_read_table(path, path_version(path)))


@lru_cache(maxsize=2 * len(ALGORITHMS))
def _read_table(path: Path, version: tuple[object, ...]) -> Any:
    return load_yaml_file(path, "hyper-parameter file")


def check_agent_env(agent: str, env_id: str) -> None:
    """Refuse an agent in the env whose action space it cannot take (``ONLY_ENV``), naming the
    env it trains on and the agents this one takes."""
    only = ONLY_ENV.get(agent)
    if only is None or env_id == only or env_id not in ENV_IDS:
        return
    kind = "discrete" if only == ENV_IDS[0] else "continuous (Box)"
    others = [a for a in ALGORITHMS if ONLY_ENV.get(a, env_id) == env_id]
    raise ValueError(f"{agent} needs {kind} actions: it trains on {only} ({program('train')} --env "
                     f"{only}), not {env_id}; for {env_id} use {', '.join(others)}")


# set by make_sb3 itself (train.py's --seeds and the CPU device), never by hyper-parameters
RESERVED = ("env", "seed", "device", "verbose", "tensorboard_log", "_init_setup_model")


# rl-baselines3-zoo's YAMLs carry these beside the agent's keywords: what each is here. A
# did-you-mean sent n_timesteps to n_steps (PPO's rollout length), which took it without a word.
NO_WRAPPER = "train.py has none: it builds and wraps the env itself (a flat observation vector)"
ZOO_OPTIONS = {"n_timesteps": "set it with train.py's --timesteps",
               "normalize": "set it with train.py's --normalize (rewards only)",
               "n_envs": "set it with train.py's --n-envs",
               "env_kwargs": "the env is set with train.py's --scenario, --hardware, "
                             "--episode-tasks and --reward",
               "frame_stack": NO_WRAPPER, "env_wrapper": NO_WRAPPER,
               "vec_env_wrapper": NO_WRAPPER, "normalize_kwargs": NO_WRAPPER,
               "callback": "name yours with train.py's --callbacks <module>:<attribute> (the "
                           "zoo's my_pkg.callbacks.MyCallback is my_pkg.callbacks:MyCallback)"}


def constructor_defaults(name: str) -> dict[str, Any]:
    """The agent `name`'s constructor's parameters and their defaults (``self`` among them,
    and ``inspect.Parameter.empty`` for one without a default)."""
    return {key: p.default for key, p in
            inspect.signature(ALGORITHMS[name].__init__).parameters.items()}


def _number_types(name: str) -> dict[str, int | float]:
    """The agent `name`'s constructor's numeric defaults, as the type each takes: an int
    default of a parameter annotated float as a float (DQN's ``max_grad_norm: float = 10``
    refused 0.5 as "must be an integer")."""
    types: dict[str, int | float] = {}
    for key, p in inspect.signature(ALGORITHMS[name].__init__).parameters.items():
        value = p.default
        if isinstance(value, (int, float)):
            is_int = isinstance(value, int) and not isinstance(value, bool)
            types[key] = float(value) if is_int and p.annotation is float else value
    return types


def check_keys(name: str, params: dict[str, Any]) -> None:
    """Every key a keyword the agent's constructor takes (and not one make_sb3 sets)."""
    known = [k for k in constructor_defaults(name) if k != "self" and k not in RESERVED]
    for key in params:
        if key in RESERVED:
            raise ValueError(f"hyper-parameter {key} is set by the trainer, not here"
                             + (f" ({program('train')} --seeds)" if key == "seed" else ""))
        if key not in known and key in ZOO_OPTIONS:
            raise ValueError(f"{key} is an rl-baselines3-zoo option, not a {name} "
                             f"hyper-parameter; {named(ZOO_OPTIONS[key])}")
        if key not in known:
            raise ValueError(f"unknown {name} hyper-parameter {shown(key)}"
                             f"{did_you_mean([key], known)}; known: {', '.join(known)}")


FLOAT32_MAX = float(np.finfo(np.float32).max)   # SB3 turns the numbers into float32 tensors
# numpy and torch take a Python integer as a 64-bit one: ent_coef=10**20 (or cg_damping,
# rms_prop_eps, TRPO's target_kl) was "OverflowError: int too big to convert" once training had
# started, stats_window_size=10**30 "Python int too large to convert to C ssize_t"
INT64_MAX = int(np.iinfo(np.int64).max)
# Ranges of the numeric hyper-parameters SB3 does not check itself (None: unbounded).
HP_RANGES: dict[str, tuple[float | None, float | None]] = {
    "gamma": (0.0, 1.0), "gae_lambda": (0.0, 1.0), "tau": (0.0, 1.0),
    "learning_rate": (0.0, None), "clip_range": (1e-9, None), "ent_coef": (0.0, None),
    "vf_coef": (0.0, None), "max_grad_norm": (1e-9, None), "n_steps": (1, None),
    "n_epochs": (1, None), "batch_size": (1, None), "buffer_size": (1, None),
    "learning_starts": (0, None), "target_update_interval": (1, None), "gradient_steps": (-1, None),
    "exploration_fraction": (0.0, 1.0), "exploration_initial_eps": (0.0, 1.0),
    "exploration_final_eps": (0.0, 1.0),
    # these two failed only inside each run, after its cloning, with a traceback per run
    # (stats_window_size=-1: deque's "maxlen must be non-negative"; train_freq=0: an assert)
    "stats_window_size": (0, None), "train_freq": (1, None),
    "target_kl": (1e-9, None), "clip_range_vf": (1e-9, None),
    # TRPO's, which it takes without a word: with cg_max_steps=0 it steps along its solver's
    # random starting point, not the gradient; line_search_max_iter=0 tries no step, so the
    # policy never moves; a shrinking factor above 1 grows the step it is to shrink; negative
    # damping makes the Fisher product indefinite; n_critic_updates=0 never trains the critic
    # (its loss logged as the NaN mean of none); sub_sampling_factor=0 failed in the update
    # (a slice step of zero)
    "cg_max_steps": (1, None), "cg_damping": (0.0, None),
    "line_search_shrinking_factor": (1e-9, 1.0), "line_search_max_iter": (1, None),
    "n_critic_updates": (1, None), "sub_sampling_factor": (1, None),
}
# Numbers whose SB3 default is None (off), so that the default gives no type to check against:
# target_kl=abc failed inside the run, and target_kl <= 0 stopped each update after one batch.
# Each with the example its error shows.
NUMBERS_WHEN_SET = {"target_kl": 0.03, "clip_range_vf": 0.2}


# SAC's entropy settings, whose SB3 default is the text "auto" (learned): what they take
# beside it. SB3 parses them only when it sets the model up: auto_abc was a bare float()
# ValueError, auto_0 an assert, Auto a float() error.
AUTO_FORMS = {"ent_coef": "auto, auto_<initial value > 0> (e.g. auto_0.1) or a number >= 0",
              "target_entropy": "auto or a number (e.g. -9.0)"}


def check_override_types(name: str, params: dict[str, Any], overrides: dict[str, Any]
                         ) -> dict[str, Any]:
    """A number where the agent takes a number, an integer where it takes an integer: returns
    `overrides` with each whole float where an integer goes made one (``n_steps=1e3``, which
    YAML reads as 1000.0, as train.py's ``--timesteps 1e3`` is taken).

    SB3's constructors store what they are given, so ``n_steps="abc"`` or ``gamma="abc"``
    would otherwise fail deep inside training. The expected type is that of the constructor's
    default where it is a number (a float where it is annotated so: ``_number_types``), else
    of `params` (the YAML hyper-parameters); keys without one (schedules, kwargs dicts) and
    other structured values are left to SB3. The off-policy agents' ``train_freq`` is a
    number of steps or a pair ``[n, step]`` / ``[n, episode]`` (``_check_train_freq``);
    SAC's ``ent_coef`` and ``target_entropy`` ``auto`` or a number (``_is_auto``);
    ``policy_kwargs`` a mapping whose ``net_arch`` SB3 can build (``_check_policy_kwargs``);
    ``policy`` MlpPolicy (``_check_policy``).
    """
    defaults = constructor_defaults(name)
    # the constructor's type where it has a number: a YAML's `learning_rate: 1` made every
    # float override of it (warm_start's 1e-4) "must be an integer"
    expected = {**defaults, **params, **_number_types(name)}
    checked = dict(overrides)
    for key, value in overrides.items():
        if key == "train_freq":
            _check_train_freq(value)
            continue
        if key == "policy_kwargs":
            checked[key] = _check_policy_kwargs(name, value)
            continue
        if key == "policy":
            _check_policy(name, value)
            continue
        ref = expected.get(key)
        if ref is None and key in NUMBERS_WHEN_SET:
            ref = NUMBERS_WHEN_SET[key]
        if key in AUTO_FORMS and defaults.get(key) == "auto":
            if _is_auto(key, value):
                continue
            ref = 0.0       # a number: checked as the others are, below
        if value is None and defaults.get(key, 0) is None:
            continue    # None where SB3's own default is None (target_kl, clip_range_vf): "off"
        if isinstance(value, (list, dict)) and not isinstance(ref, (bool, int, float)):
            continue    # other structured values (kwargs dicts) are SB3's to check
        if isinstance(ref, bool):
            ok, kind = isinstance(value, bool), "true or false"
        elif isinstance(ref, int):
            if is_whole(value) and not is_integer(value):
                value = checked[key] = int(value)
            ok, kind = is_integer(value), "an integer"
        elif isinstance(ref, float):
            ok, kind = is_number(value), "a number"
        else:
            continue
        if not ok:
            raise ValueError(f"hyper-parameter {key} must be {kind} (e.g. {ref}), got "
                             f"{shown(value)}{_text_for_number_hint(key, value)}")
        if not abs(value) <= FLOAT32_MAX:
            # NaN passed every range check (comparisons with it are false), and SB3 trained on
            # nan/inf to NaN weights, or failed converting 1e300 to the float32 tensors it uses
            raise ValueError(f"hyper-parameter {key} must be a finite number of at most "
                             f"{FLOAT32_MAX:.3g} in size, got {shown(value)}")
        if is_integer(value) and not -INT64_MAX <= value <= INT64_MAX:
            raise ValueError(_too_large_integer(key, value, isinstance(ref, float)))
        low, high = HP_RANGES.get(key, (None, None))
        if (low is not None and value < low) or (high is not None and value > high):
            # SB3 takes gamma=1.5 or clip_range=-1 without a word, and n_epochs=0 fails deep
            # inside its training loop
            bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise ValueError(f"hyper-parameter {key} must be {bounds}, got {shown(value)}")
        if key == "gradient_steps" and value == 0:
            # SB3 takes 0 and never trains: the run's "learning" left the network as built
            raise ValueError("hyper-parameter gradient_steps must be -1 (as many as the env "
                             "steps since the last update) or >= 1, got 0")
    return checked


def _too_large_integer(key: str, value: int, takes_float: bool) -> str:
    """The refusal of an integer beyond ``INT64_MAX`` in size: for a hyper-parameter that takes
    a float, how to write the number as one (YAML and --hp read 1e+30 as a float)."""
    if takes_float:
        return (f"hyper-parameter {key} must be written as a float when it is this large "
                f"(e.g. {float(value):g}): an integer goes to numpy and torch as a 64-bit "
                f"one, at most {INT64_MAX:.3g} in size; got {shown(value)}")
    return (f"hyper-parameter {key} must be an integer of at most {INT64_MAX} (2**63 - 1) in "
            f"size, got {shown(value)}")


def _text_for_number_hint(key: str, value: Any) -> str:
    """What to write instead of a text where a number goes, when the text holds one:
    rl-baselines3-zoo's linear schedule ``lin_3e-4`` (SB3 takes a schedule as a Python
    callable only, which neither YAML nor --hp gives), or a number in quotes."""
    if not isinstance(value, str):
        return ""
    number = value.removeprefix("lin_")
    try:
        constant = float(number)
    except ValueError:
        return ""
    if number != value:
        return (f"; rl-baselines3-zoo's linear schedules (lin_<x>) are not supported here: "
                f"give a constant, e.g. {key}={constant:g}")
    return "; a quoted number is text: write it unquoted"


def _is_auto(key: str, value: Any) -> bool:
    """Whether `value` is one of the texts SAC's `key` takes (``AUTO_FORMS``); False for a
    number, which the caller checks as any other; a ValueError for anything else."""
    if is_number(value):
        return False
    init = value.removeprefix("auto_") if isinstance(value, str) and key == "ent_coef" \
        and value.startswith("auto_") else None
    try:        # "_" in the initial value: SB3 reads auto_1_0 as 1, float() as 10
        ok = value == "auto" or (init is not None and "_" not in init
                                 and 0 < float(init) <= FLOAT32_MAX)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"hyper-parameter {key} must be {AUTO_FORMS[key]}, got {shown(value)}")
    return True


def _check_train_freq(value: Any) -> None:
    """The off-policy agents' (DQN, SAC) train_freq: an integer n >= 1 (every n steps) or a
    pair [n, step | episode]."""
    low = HP_RANGES["train_freq"][0]
    pair = value if isinstance(value, (list, tuple)) and len(value) == 2 else (value, "step")
    n, unit = pair
    if not is_integer(n) or n < (low or 0) \
            or unit not in ("step", "episode"):
        raise ValueError(f"hyper-parameter train_freq must be an integer >= {low} or a pair "
                         f"[n, step] or [n, episode] with n >= {low} (e.g. 4 or [4, episode]), "
                         f"got {shown(value)}")


# The one SB3 policy of each agent that our observation fits (MlpPolicy where not named).
POLICIES = {"recurrent-ppo": "MlpLstmPolicy"}


def _check_policy(name: str, value: Any) -> None:
    """The agent's MLP policy (``POLICIES``): MlpPolicy, or RecurrentPPO's MlpLstmPolicy (an
    LSTM over the observations, then MLPs). CnnPolicy wants images and MultiInputPolicy a dict
    observation (SB3 fails on either with its image advice or an AttributeError), and a
    warm-up run swaps in its own MlpPolicy subclass."""
    policy = POLICIES.get(name, "MlpPolicy")
    if value != policy:
        raise ValueError(f"hyper-parameter policy must be {policy} for {name}: the observation "
                         f"is one flat vector of numbers (a Box), got {shown(value)}")


# A hidden layer's units: far beyond the 64 used here. Wider failed only when SB3 built the net,
# with a torch traceback (1e12 units: "can't allocate memory").
MAX_LAYER_WIDTH = 65_536
# recurrent-ppo's LSTM (policy_kwargs lstm_hidden_size, n_lstm_layers; 64 units and one layer
# here): a layer of h units holds about 8 h^2 weights, the actor's and the critic's LSTM each,
# so 4,096 units (134M a layer) is far beyond; 100,000 units was a torch traceback ("can't
# allocate memory") and 100,000 layers ran on without end as it built them, 8.5 units torch's
# "failed to unpack the object" on a float.
# Each agent's policy_kwargs sizes beyond net_arch: key -> the most it takes.
SIZE_LIMITS = {"recurrent-ppo": {"lstm_hidden_size": 4_096, "n_lstm_layers": 8}}
# The Gaussian's initial log standard deviation: its std e^x must be a positive float32 (e^-5e5
# was 0, and torch refused the distribution, a multi-line error once training had started);
# |x| <= 20 spans stds of 2e-9..5e8, far beyond the -3..0 used here.
MAX_LOG_STD_INIT = 20.0
# the arguments of a policy's constructor that SB3 passes itself, never policy_kwargs
POLICY_ARGUMENTS = ("self", "observation_space", "action_space", "lr_schedule")


def policy_kwargs_keys(name: str) -> list[str]:
    """What the policy_kwargs of agent `name` may set: the keywords of its policy class's
    constructor (``POLICIES``), but those SB3 passes itself."""
    policy = ALGORITHMS[name].policy_aliases[POLICIES.get(name, "MlpPolicy")]
    return [key for key in inspect.signature(policy.__init__).parameters
            if key not in POLICY_ARGUMENTS]


def _check_policy_kwargs(name: str, value: Any) -> Any:
    """policy_kwargs is a mapping (or null), and its net_arch one SB3 builds: a list of layer
    widths, or for the actor-critic agents ``{pi: [...], vf: [...]}`` (SAC: ``{pi: [...],
    qf: [...]}``, both given; DQN takes the list only). SB3 checks neither: [-1, 64] or
    [1e18, 64] was a torch traceback once the net was built, and [0, 64] trained a net with a
    zero-width layer. Its activation_fn, given by name, is one of ``ACTIVATIONS``: checked here,
    with the rest, so that a typo in a YAML file fails before the first run, not as it starts;
    so are its keys, each a keyword of the agent's policy (``policy_kwargs_keys``), and a
    Gaussian's log_std_init (``MAX_LOG_STD_INIT``). An agent's other sizes (recurrent-ppo's
    LSTM), where given, lie in its ``SIZE_LIMITS``.

    Returns `value` with each size written as a whole float (``[64.0, 64]``, ``1e3``) made an
    integer, as the scalar counts are: 64.0 was refused as a width."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"hyper-parameter policy_kwargs must be a mapping "
                         f"(e.g. {{net_arch: [64, 64]}}), got {shown(value)}")
    # a key the policy does not take was a TypeError when SB3 built it: inside the run, for a
    # typo in a YAML file, after train.py's plan had passed it
    known = policy_kwargs_keys(name)
    for key in value:
        if key not in known:
            raise ValueError(f"unknown policy_kwargs key {shown(key)}"
                             f"{did_you_mean([key], known)} for {name}; known: "
                             f"{', '.join(known)}")
    activation = value.get("activation_fn")
    if isinstance(activation, str) and activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation_fn {shown(activation)}; known: "
                         f"{', '.join(ACTIVATIONS)}")
    if "activation_fn" in value and not isinstance(activation, str) and not (
            isinstance(activation, type) and issubclass(activation, torch.nn.Module)):
        # null or a number was "'NoneType' object is not callable" as the net was built
        raise ValueError(f"hyper-parameter policy_kwargs.activation_fn must be one of "
                         f"{', '.join(ACTIVATIONS)}, got {shown(activation)}")
    if "log_std_init" in value:
        log_std = value["log_std_init"]
        if not (is_number(log_std) and abs(log_std) <= MAX_LOG_STD_INIT):
            raise ValueError(f"hyper-parameter policy_kwargs.log_std_init must be a number in "
                             f"[-{MAX_LOG_STD_INIT:g}, {MAX_LOG_STD_INIT:g}], got "
                             f"{shown(log_std)}")
    value = dict(value)
    for key, top in SIZE_LIMITS.get(name, {}).items():
        size = value.get(key)
        if key in value and not (is_whole(size) and 1 <= size <= top):
            raise ValueError(f"hyper-parameter policy_kwargs.{key} must be an integer in "
                             f"1..{top} for {name}, got {shown(size)}")
        if key in value:
            value[key] = int(size)
    arch = value.get("net_arch")
    if arch is None:
        return value      # SB3's default net

    def widths(layers: Any) -> bool:
        return isinstance(layers, list) and all(
            is_whole(n) and 1 <= n <= MAX_LAYER_WIDTH
            for n in layers)

    if name == "dqn":
        ok, form = widths(arch), "a list of layer widths"
    else:
        # SAC's critic is "qf", and SB3 asserts both of its keys; the on-policy agents' may
        # each be left out (no layers of their own)
        critic, both = ("qf", True) if name == "sac" else ("vf", False)
        keys = {"pi", critic}
        ok = widths(arch) or (isinstance(arch, dict) and bool(arch)
                              and (set(arch) == keys if both else set(arch) <= keys)
                              and all(map(widths, arch.values())))
        form = (f"a list of layer widths or a mapping {{pi: [...], {critic}: [...]}} of such "
                f"lists{' (both keys)' if both else ''}")
    if not ok:
        raise ValueError(f"hyper-parameter policy_kwargs.net_arch must be {form} for {name}, "
                         f"each width an integer in 1..{MAX_LAYER_WIDTH} (e.g. [64, 64]), "
                         f"got {shown(arch)}")
    value["net_arch"] = ({part: [int(n) for n in layers] for part, layers in arch.items()}
                         if isinstance(arch, dict) else [int(n) for n in arch])
    return value


def check_sub_sampling(name: str, params: dict[str, Any], n_envs: int) -> None:
    """TRPO's policy step reads every ``sub_sampling_factor``-th transition of its rollout of
    ``n_steps`` x `n_envs`; with its advantages normalised (``normalize_advantage``, its
    default), a factor that keeps one transition made them NaN (the deviation of one number),
    every line search failed and the policy never moved, a UserWarning the only sign. Without
    that, a factor beyond the rollout keeps the one transition the rollout's own size does, and
    torch failed on one near 2**63 inside the run (its step times a row's length overflows
    int64). A ValueError for such a factor in `params` (the agent's resolved
    hyper-parameters); the other agents have none."""
    merged = constructor_defaults(name)
    if "sub_sampling_factor" not in merged:
        return
    merged.update(params)
    factor, n_steps = merged["sub_sampling_factor"], merged["n_steps"]
    rollout = f"the rollout's n_steps x n_envs ({n_steps} x {n_envs} = {n_steps * n_envs})"
    if merged["normalize_advantage"] and factor >= n_steps * n_envs:
        raise ValueError(f"hyper-parameter sub_sampling_factor must be below {rollout}, got "
                         f"{factor}: it keeps one transition, whose normalised advantage is NaN, "
                         f"and the policy never moves (or set normalize_advantage=false)")
    if factor > n_steps * n_envs:
        raise ValueError(f"hyper-parameter sub_sampling_factor must be at most {rollout}, got "
                         f"{factor}: a larger one keeps the same one transition")


def check_replay_buffer(name: str, params: dict[str, Any], n_envs: int) -> None:
    """DQN and SAC draw ``batch_size`` transitions a gradient step from a replay buffer of
    ``buffer_size`` (SB3 keeps ``max(buffer_size // n_envs, 1)`` per env): a smaller buffer
    re-drew the same few transitions, unsaid (``buffer_size=1``: the last one, batch_size
    times). A ValueError for such `params` (the agent's resolved hyper-parameters); the
    on-policy agents have no buffer."""
    merged = constructor_defaults(name)
    if "buffer_size" not in merged:
        return
    merged.update(params)
    size, batch = merged["buffer_size"], merged["batch_size"]
    rows = max(size // n_envs, 1) * n_envs
    if rows < batch:
        kept = f" ({rows} kept over {n_envs} envs)" if rows != size else ""
        raise ValueError(f"hyper-parameter buffer_size must hold at least batch_size={batch} "
                         f"transitions, got {size}{kept}: each gradient step would draw the "
                         f"same few again")


def hyperparams_with(name: str, env_id: str, overrides: dict[str, Any] | None,
                     warm_start: bool = False) -> dict[str, Any]:
    """The YAML's hyper-parameters of `name` on `env_id` (with its ``warm_start`` ones for a
    warm-started learner) with `overrides` (checked) on top, layered by ``layer_hyperparams``."""
    params = load_hyperparams(name, env_id, warm_start)
    if overrides:
        check_keys(name, overrides)
        params = layer_hyperparams(params, check_override_types(name, params, overrides))
    check_not_ignored(name, env_id, params)
    return params


# What SB3's actor-critic policies read only for a Gaussian over Box actions (the Split env's)
# and, of those, only with gSDE: elsewhere they were taken without a word, so that a --hp
# policy_kwargs={log_std_init: -2} in the discrete env trained exactly what it trained without
GAUSSIAN_ONLY = ("log_std_init", "full_std", "use_expln")
# (SB3's default of each: given at it, it changes nothing either way)
SDE_ONLY = {"full_std": True, "use_expln": False, "sde_sample_freq": -1}
# An agent's policy_kwargs read for gSDE alone beside SDE_ONLY's: SAC's actor, without it, has
# a layer output its log-std and leaves its mean unclipped (its policy's defaults)
AGENT_SDE_ONLY = {"sac": {"log_std_init": -3, "clip_mean": 2.0}}


def check_not_ignored(name: str, env_id: str, params: dict[str, Any]) -> None:
    """Refuse a hyper-parameter the agent `name` would take and ignore on `env_id`: a
    Gaussian's policy_kwargs in the discrete env, and gSDE's settings without ``use_sde:
    true``."""
    kwargs = params.get("policy_kwargs")
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    if env_id == ENV_IDS[0]:
        gaussian = [k for k in GAUSSIAN_ONLY if k in kwargs]
        if gaussian:
            raise ValueError(f"policy_kwargs.{gaussian[0]} shapes a Gaussian over continuous "
                             f"actions, and {env_id}'s actions are discrete: the agent would "
                             f"ignore it; drop it (it acts in {ENV_IDS[1]})")
    if params.get("use_sde"):
        return
    sde_kwargs = {**SDE_ONLY, **AGENT_SDE_ONLY.get(name, {})}
    given = [f"policy_kwargs.{k}" for k, v in kwargs.items() if k in sde_kwargs
             and v != sde_kwargs[k]] + [k for k, v in params.items() if k in SDE_ONLY
                                        and v != SDE_ONLY[k]]
    if given:
        raise ValueError(f"{given[0]} acts only with gSDE (use_sde: true), which is off: the "
                         f"agent would ignore it; drop it, or give use_sde=true")
