"""Stable-Baselines3 agents by name, from YAML hyper-parameters keyed by env id.

    agent = make_sb3("ppo", env, seed=0, overrides={"learning_rate": 3e-4})
    agent.learn(10_000)
    action, _ = agent.predict(obs)

Hyper-parameters live in ``agents/hyperparams/<agent>.yaml`` under the env id;
overrides come from code (a dict) or the CLI (``key=value`` strings parsed as
YAML scalars, never ``eval``-ed). DQN needs a ``Discrete`` action space, so its
env is wrapped to flatten ``MultiDiscrete([D, D, D])`` into ``Discrete(D**3)``;
the returned ``SB3Agent`` maps actions back, so every agent answers ``predict``
with the env's own actions. DQN and MaskablePPO act in ``InferenceAlloc-v0`` only,
SAC (continuous actions) in ``InferenceAllocSplit-v0`` only (``ONLY_ENV``).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import yaml
from gymnasium import spaces
from sb3_contrib import MaskablePPO
from stable_baselines3 import A2C, DQN, PPO, SAC
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import HumanOutputFormat, KVWriter, Logger

from agents.base import Policy
from agents.files import zip_target
from agents.warmup import (
    WARM_ALGORITHMS,
    WarmupConfig,
    WarmupController,
    attach_warmup,
    warm_policy_class,
)
from envs import ENV_IDS
from inference.checks import is_integer, is_number
from inference.messages import shown
from inference.yamlio import describe_yaml_error, load_yaml_file, safe_load

ALGORITHMS: dict[str, type[BaseAlgorithm]] = {"ppo": PPO, "a2c": A2C, "dqn": DQN,
                                              "maskable-ppo": MaskablePPO, "sac": SAC}
# The agents whose action space is one env's only: DQN and MaskablePPO take discrete actions
# (InferenceAlloc-v0's device ids), SAC a Box (InferenceAllocSplit-v0's split weights).
ONLY_ENV = {"dqn": ENV_IDS[0], "maskable-ppo": ENV_IDS[0], "sac": ENV_IDS[1]}
HYPERPARAMS_DIR = Path(__file__).parent / "hyperparams"
WARM_START = "warm_start"   # the YAML key of a warm-started learner's hyper-parameters
ACTIVATIONS = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "elu": torch.nn.ELU}


def env_id_of(env: gym.Env | Any) -> str:
    """The registered id of an env (or of the first env of a VecEnv)."""
    base = env.envs[0] if hasattr(env, "envs") else env
    spec = getattr(base, "spec", None) or getattr(getattr(base, "unwrapped", None), "spec", None)
    if spec is not None:
        return spec.id.split(":")[-1]
    name = type(base.unwrapped).__name__
    return ENV_IDS[1] if "Split" in name else ENV_IDS[0]


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
    table = load_yaml_file(path, "hyper-parameter file") or {}
    if not isinstance(table, dict):
        raise ValueError(f"{path} must map env ids to hyper-parameters, got {table!r}")
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
        check_override_types(agent, {}, params)
        check_keys(agent, warm)
        check_override_types(agent, params, warm)
    except ValueError as exc:
        raise ValueError(f"{path}, {env_id}: {exc}") from None
    return layer_hyperparams(params, warm) if warm_start else params


def check_agent_env(agent: str, env_id: str) -> None:
    """Refuse an agent in the env whose action space it cannot take (``ONLY_ENV``), naming the
    env it trains on and the agents this one takes."""
    only = ONLY_ENV.get(agent)
    if only is None or env_id == only or env_id not in ENV_IDS:
        return
    kind = "discrete" if only == ENV_IDS[0] else "continuous (Box)"
    others = [a for a in ALGORITHMS if ONLY_ENV.get(a, env_id) == env_id]
    raise ValueError(f"{agent} needs {kind} actions: it trains on {only} (train.py --env "
                     f"{only}), not {env_id}; for {env_id} use {', '.join(others)}")


def layer_hyperparams(params: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`top` over `params` (a warm start's values, or overrides): a policy_kwargs in `top`
    merges into the one below. Replacing it, {net_arch: [8]} used to drop activation_fn (and
    log_std_init), so the net trained with ReLU unannounced."""
    out = {**params, **top}
    if isinstance(top.get("policy_kwargs"), dict) and isinstance(
            params.get("policy_kwargs") or {}, dict):
        out["policy_kwargs"] = {**(params.get("policy_kwargs") or {}), **top["policy_kwargs"]}
    return out


def starts_warm(warmup: WarmupConfig | None) -> bool:
    """Whether a learner with this warm-up fine-tunes a behaviour clone, and so takes its
    env's ``warm_start`` hyper-parameters."""
    return warmup is not None and warmup.clone


# set by make_sb3 itself (train.py's --seeds and the CPU device), never by hyper-parameters
RESERVED = ("env", "seed", "device", "verbose", "tensorboard_log", "_init_setup_model")


def check_keys(name: str, params: dict[str, Any]) -> None:
    """Every key a keyword the agent's constructor takes (and not one make_sb3 sets)."""
    known = [k for k in inspect.signature(ALGORITHMS[name].__init__).parameters
             if k != "self" and k not in RESERVED]
    for key in params:
        if key in RESERVED:
            raise ValueError(f"hyper-parameter {key} is set by the trainer, not here"
                             + (" (train.py --seeds)" if key == "seed" else ""))
        if key not in known:
            raise ValueError(f"unknown {name} hyper-parameter {shown(key)}; known: {', '.join(known)}")


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["learning_rate=3e-4", "policy_kwargs={net_arch: [32, 32]}"]`` -> dict (YAML scalars)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"hyper-parameter override {shown(item)} must look like key=value")
        try:
            parsed = safe_load(value)
        except yaml.YAMLError as exc:
            raise ValueError(f"hyper-parameter override {shown(item)}: value is not valid YAML "
                             f"({describe_yaml_error(exc)})") from None
        # layered as a warm start's values are: "--hp policy_kwargs={net_arch: [8]} --hp
        # policy_kwargs={activation_fn: relu}" kept only the second, net_arch dropped
        out = layer_hyperparams(out, {key.strip(): parsed})
    return out


class FlatDiscreteActions(gym.ActionWrapper):
    """MultiDiscrete([D, D, D]) <-> Discrete(D**3) for DQN."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        nvec = env.action_space.nvec  # type: ignore[attr-defined]
        self.nvec = np.asarray(nvec)
        self.action_space = spaces.Discrete(int(np.prod(self.nvec)))

    def action(self, action: Any) -> np.ndarray:
        return np.array(np.unravel_index(int(action), self.nvec))

    def flatten(self, action: Any) -> int:
        return int(np.ravel_multi_index(tuple(np.asarray(action).reshape(-1)), self.nvec))


def wrap_for(agent: str, env: gym.Env) -> gym.Env:
    """The action wrapper an agent trains behind: DQN needs one Discrete action."""
    if agent == "dqn":
        return FlatDiscreteActions(env)
    return env


def _resolve_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    params = dict(params)
    if isinstance(params.get("train_freq"), list):
        # YAML and --hp give [4, episode]; SB3 takes a tuple only, and read a list as the
        # frequency itself ("must be an integer and not [4, 'episode']")
        params["train_freq"] = tuple(params["train_freq"])
    pk = dict(params.get("policy_kwargs") or {})
    if isinstance(pk.get("activation_fn"), str):
        name = pk["activation_fn"]
        if name not in ACTIVATIONS:
            raise ValueError(f"unknown activation_fn {shown(name)}; known: {', '.join(ACTIVATIONS)}")
        pk["activation_fn"] = ACTIVATIONS[name]
    if pk:
        params["policy_kwargs"] = pk
    return params


def _dqn_nvec(model: BaseAlgorithm, env: gym.Env | None) -> np.ndarray:
    """The device-id vector sizes behind DQN's flat Discrete(D**3) action: the env's, or,
    without one, those its saved action space implies (three stages of D devices)."""
    space = getattr(getattr(env, "unwrapped", env), "action_space", None)
    if isinstance(space, spaces.MultiDiscrete):
        return np.asarray(space.nvec)
    n = int(model.action_space.n)  # type: ignore[attr-defined]
    d = round(n ** (1 / 3))
    return np.array([d, d, d])


class SB3Agent(Policy):
    """An SB3 model behind the project's predict interface (actions in the env's own space)."""

    def __init__(self, name: str, model: BaseAlgorithm, env: gym.Env | None = None) -> None:
        self.name = name
        self.model = model
        self.env = env
        self._nvec = _dqn_nvec(model, env) if name == "dqn" else None
        # Set by agents.warmup.attach_warmup: the controller, its callback for learn() and,
        # when it clones, behaviour_clone's agreement figures.
        self.warmup: WarmupController | None = None
        self.callbacks: list[BaseCallback] = []
        self.clone_stats: dict[str, float] | None = None
        # Set by make_sb3: the hyper-parameters as the YAML spells them (warm_start and
        # overrides applied), which a run's config.yaml records.
        self.hyperparams: dict[str, Any] = {}

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True, action_masks: np.ndarray | None = None) -> tuple[np.ndarray, Any]:
        """The model's action, as device ids in the env's own action space.

        maskable-ppo: without `action_masks`, one observation is masked with the masks of the
        env the agent was built on, i.e. its current task. To act on another env, pass that
        env's ``action_masks()`` (sb3-contrib's ``evaluate_policy`` does; SB3's does not, and
        would mask with the wrong task's).
        """
        kwargs: dict[str, Any] = {}
        if self.name == "maskable-ppo":
            obs = np.asarray(observation)
            # the env's masks are the current task's: for one observation, or a batch of one
            # (what a DummyVecEnv hands over)
            if action_masks is None and self.env is not None and (obs.ndim == 1 or len(obs) == 1):
                action_masks = self.env.unwrapped.action_masks()  # type: ignore[attr-defined]
            kwargs["action_masks"] = action_masks
        action, state = self.model.predict(observation, state, episode_start, deterministic, **kwargs)
        if self._nvec is not None:
            flat = np.asarray(action)
            unravel = np.stack(np.unravel_index(flat.reshape(-1).astype(int), self._nvec), axis=-1)
            action = unravel[0] if flat.ndim == 0 else unravel
        return action, state

    def learn(self, total_timesteps: int, callback: Any = None, **kwargs: Any) -> SB3Agent:
        """Train; the warm-up callback (if any) runs beside the caller's callbacks."""
        if not getattr(self.model, "_custom_logger", False) and self.model.tensorboard_log is None:
            # Left alone, SB3 makes an empty SB3-<date> folder in the temp dir on every learn()
            # (its logger always has a folder); train.py sets its own, others need none.
            outputs: list[KVWriter] = [HumanOutputFormat(sys.stdout)] if self.model.verbose >= 1 else []
            self.model.set_logger(Logger(None, outputs))
        callbacks: list[Any] = list(self.callbacks)
        if callback is not None:
            callbacks.extend(callback if isinstance(callback, list) else [callback])
        self.model.learn(total_timesteps=total_timesteps, callback=callbacks or None, **kwargs)
        return self

    def save(self, path: Any) -> Path:
        target = zip_target(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.stem}.{os.getpid()}.tmp.zip")   # SB3 wants a .zip
        try:
            self.model.save(tmp)
            tmp.replace(target)
        finally:
            tmp.unlink(missing_ok=True)
        return target


FLOAT32_MAX = float(np.finfo(np.float32).max)   # SB3 turns the numbers into float32 tensors
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
}
# SAC's entropy settings, whose SB3 default is the text "auto" (learned): what they take
# beside it. SB3 parses them only when it sets the model up: auto_abc was a bare float()
# ValueError, auto_0 an assert, Auto a float() error.
AUTO_FORMS = {"ent_coef": "auto, auto_<initial value > 0> (e.g. auto_0.1) or a number >= 0",
              "target_entropy": "auto or a number (e.g. -9.0)"}


def check_override_types(name: str, params: dict[str, Any], overrides: dict[str, Any]) -> None:
    """A number where the agent takes a number, an integer where it takes an integer.

    SB3's constructors store what they are given, so ``n_steps="abc"`` or ``gamma="abc"``
    would otherwise fail deep inside training. The expected type is that of `params` (the
    YAML hyper-parameters), else of the constructor's default; keys without one (schedules, kwargs dicts) and
    other structured values are left to SB3. The off-policy agents' ``train_freq`` is a number
    of steps or a pair ``[n, step]`` / ``[n, episode]`` (``_check_train_freq``); SAC's
    ``ent_coef`` and ``target_entropy`` ``auto`` or a number (``_is_auto``); ``policy_kwargs``
    a mapping whose ``net_arch`` SB3 can build (``_check_policy_kwargs``).
    """
    defaults = {key: p.default for key, p in
                inspect.signature(ALGORITHMS[name].__init__).parameters.items()}
    expected = {**defaults, **params}
    for key, value in overrides.items():
        if key == "train_freq":
            _check_train_freq(value)
            continue
        if key == "policy_kwargs":
            _check_policy_kwargs(name, value)
            continue
        ref = expected.get(key)
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
            ok, kind = is_integer(value), "an integer"
        elif isinstance(ref, float):
            ok, kind = is_number(value), "a number"
        else:
            continue
        if not ok:
            raise ValueError(f"hyper-parameter {key} must be {kind} (e.g. {ref}), got {shown(value)}")
        if not abs(value) <= FLOAT32_MAX:
            # NaN passed every range check (comparisons with it are false), and SB3 trained on
            # nan/inf to NaN weights, or failed converting 1e300 to the float32 tensors it uses
            raise ValueError(f"hyper-parameter {key} must be a finite number of at most "
                             f"{FLOAT32_MAX:.3g} in size, got {shown(value)}")
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


# A hidden layer's units: far beyond the 64 used here. Wider failed only when SB3 built the net,
# with a torch traceback (1e12 units: "can't allocate memory").
MAX_LAYER_WIDTH = 65_536


def _check_policy_kwargs(name: str, value: Any) -> None:
    """policy_kwargs is a mapping (or null), and its net_arch one SB3 builds: a list of layer
    widths, or for the actor-critic agents ``{pi: [...], vf: [...]}`` (SAC: ``{pi: [...],
    qf: [...]}``, both given; DQN takes the list only). SB3 checks neither: [-1, 64] or
    [1e18, 64] was a torch traceback once the net was built, and [0, 64] trained a net with a
    zero-width layer."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise ValueError(f"hyper-parameter policy_kwargs must be a mapping "
                         f"(e.g. {{net_arch: [64, 64]}}), got {shown(value)}")
    arch = value.get("net_arch")
    if arch is None:
        return      # SB3's default net

    def widths(layers: Any) -> bool:
        return isinstance(layers, list) and all(
            is_integer(n) and 1 <= n <= MAX_LAYER_WIDTH
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


def hyperparams_with(name: str, env_id: str, overrides: dict[str, Any] | None,
                     warm_start: bool = False) -> dict[str, Any]:
    """The YAML's hyper-parameters of `name` on `env_id` (with its ``warm_start`` ones for a
    warm-started learner) with `overrides` (checked) on top, layered by ``layer_hyperparams``."""
    params = load_hyperparams(name, env_id, warm_start)
    if overrides:
        check_keys(name, overrides)
        check_override_types(name, params, overrides)
        params = layer_hyperparams(params, overrides)
    return params


def make_sb3(name: str, env: gym.Env, *, seed: int | None = None,
             overrides: dict[str, Any] | None = None, warmup: WarmupConfig | None = None,
             tensorboard_log: str | None = None, verbose: int = 0,
             vec_env: Any = None, metrics_window: int = 100) -> SB3Agent:
    """Build an SB3 agent for `env` from its YAML hyper-parameters (plus overrides and warm-up).

    `vec_env`: train on this VecEnv instead (its sub-envs already wrapped by ``wrap_for``,
    e.g. several envs or a VecNormalize); `env` is then its first sub-env, which the
    warm-up and ``predict`` use. `metrics_window`: the tasks behind the warm-up's
    ``warmup/conservative_acting`` share (train.py's ``--metrics-window``).
    """
    torch.set_num_threads(1)   # small MLPs: threads cost more than they give
    hyperparams = hyperparams_with(name, env_id_of(env), overrides,
                                   warm_start=starts_warm(warmup))
    params = _resolve_kwargs(hyperparams)
    policy = params.pop("policy", "MlpPolicy")
    algo = ALGORITHMS[name]
    train_env = vec_env if vec_env is not None else wrap_for(name, env)
    if warmup is not None:
        if name in WARM_ALGORITHMS:
            algo = WARM_ALGORITHMS[name]
        else:
            policy = warm_policy_class(name)
    model = algo(policy, train_env, seed=seed, verbose=verbose, device="cpu",
                 tensorboard_log=tensorboard_log, **params)
    setattr(model, "infer_agent", name)  # noqa: B010  saved with the model: load_sb3 reads it
    agent = SB3Agent(name, model, env)
    agent.hyperparams = hyperparams
    if warmup is not None:
        attach_warmup(agent, env, warmup, seed=seed, metrics_window=metrics_window)
    return agent


def _saved_data(path: Path) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(path) as zf:
            data = json.loads(zf.read("data"))
    except (KeyError, zipfile.BadZipFile, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"model file {path} is not a Stable-Baselines3 model zip ({exc})") from None
    if not isinstance(data, dict):   # valid JSON, but SB3 always writes an object here
        raise ValueError(f"model file {path} is not a Stable-Baselines3 model zip "
                         f"(its 'data' entry is a JSON {type(data).__name__}, not an object)")
    return data


def _algorithm_of_plain_zip(data: dict[str, Any]) -> str | None:
    """The algorithm of a zip SB3 saved itself (no ``infer_agent``), from what SB3 records.

    The policy class's module tells DQN, SAC and MaskablePPO apart; PPO and A2C share
    ActorCriticPolicy, and only PPO saves a clip range.
    """
    policy = data.get("policy_class")
    module = policy.get("__module__") if isinstance(policy, dict) else None
    if not isinstance(module, str):
        return None
    if module.startswith("sb3_contrib.common.maskable"):
        return "maskable-ppo"
    if module.startswith("stable_baselines3.dqn"):
        return "dqn"
    if module.startswith("stable_baselines3.sac"):
        return "sac"
    if module.startswith("stable_baselines3.common.policies"):
        return "ppo" if "clip_range" in data else "a2c"
    return None


def saved_model_info(path: str | Path) -> tuple[str, str]:
    """(agent name, env id) of a model zip: ours, or a plain one saved by SB3's own ``save``.

    The env id follows from the saved action space: a Box is InferenceAllocSplit-v0's split
    weights; a MultiDiscrete (or DQN's flattened Discrete) is InferenceAlloc-v0's device ids.
    """
    p = Path(path)
    data = _saved_data(p)
    name = data.get("infer_agent")
    if name is None:
        name = _algorithm_of_plain_zip(data)
        if name is None:
            raise ValueError(f"model file {p} does not say which agent it holds: it has no "
                             f"infer_agent entry, and its policy is not one of SB3's PPO, A2C, "
                             f"DQN, SAC or sb3-contrib's MaskablePPO (save models with "
                             f"SB3Agent.save or train them with train.py)")
    if not isinstance(name, str) or name not in ALGORITHMS:   # a list or dict is unhashable
        raise ValueError(f"model file {p} does not say which agent it holds (infer_agent={name!r})")
    space = data.get("action_space")
    kind = space.get(":type:", "") if isinstance(space, dict) else ""
    env_id = ENV_IDS[1] if "spaces.box.Box" in str(kind) else ENV_IDS[0]
    return name, env_id


def load_sb3(path: str | Path, env: gym.Env | None = None) -> SB3Agent:
    """Load an agent saved by SB3Agent.save; the zip records which algorithm it is."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"model file {p} does not exist")
    name, env_id = saved_model_info(p)
    space = getattr(getattr(env, "unwrapped", None), "action_space", None)
    if space is not None and isinstance(space, spaces.Box) != (env_id == ENV_IDS[1]):
        # SB3's own refusal was "Action spaces do not match" (and a DQN's a missing nvec)
        raise ValueError(f"model file {p} holds a {ALGORITHMS[name].__name__}, which acts in "
                         f"{env_id}; this env's actions are {space}: load it with an {env_id} "
                         f"env")
    wrapped = wrap_for(name, env) if env is not None else None
    torch.set_num_threads(1)   # as make_sb3: small MLPs run 10x slower on two threads
    try:
        model = ALGORITHMS[name].load(p, env=wrapped, device="cpu")
    except Exception as exc:  # SB3 raises many kinds on a corrupt zip
        raise ValueError(f"model file {p} could not be loaded as {name}: {exc}") from None
    return SB3Agent(name, model, env)
