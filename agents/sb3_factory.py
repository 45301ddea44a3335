"""Stable-Baselines3 agents by name, from YAML hyper-parameters keyed by env id
(``agents.sb3_hyperparams`` reads and checks those).

    agent = make_sb3("ppo", env, seed=0, overrides={"learning_rate": 3e-4})
    agent.learn(10_000)
    action, _ = agent.predict(obs)

DQN needs a ``Discrete`` action space, so its env is wrapped to flatten
``MultiDiscrete([D, D, D])`` into ``Discrete(D**3)``; the returned ``SB3Agent`` maps actions back, so every agent answers ``predict``
with the env's own actions. DQN and MaskablePPO act in ``InferenceAlloc-v0`` only,
SAC (continuous actions) in ``InferenceAllocSplit-v0`` only (``sb3_hyperparams.ONLY_ENV``);
PPO, A2C and sb3-contrib's TRPO and RecurrentPPO in both. RecurrentPPO's policy
(``MlpLstmPolicy``) keeps an LSTM state between decisions, which ``predict`` takes and returns
as SB3's ``state``: a caller hands it back with ``episode_start`` (``agents.base.StreamActor``),
or the policy acts on every task as on an episode's first. Its warm-up fits and acts
through that state (``warmup.WarmRecurrentPolicy``, ``agents.sequence_cloning``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import HumanOutputFormat, KVWriter, Logger
from torch.distributions import Distribution

from agents.base import Policy, flat_index
from agents.commands import program
from agents.divergence import check_finite
from agents.files import BadModelZip, atomic_path, model_file, read_zip_json, zip_target
from agents.sb3_hyperparams import (
    ACTIVATIONS,
    ALGORITHMS,
    POLICIES,
    constructor_defaults,
    hyperparams_with,
)
from agents.sb3_memory import check_memory
from agents.warmup import (
    WARM_ALGORITHMS,
    WarmupConfig,
    WarmupController,
    attach_warmup,
    warm_policy_class,
)
from agents.warmup_config import starts_warm
from envs import ENV_IDS
from envs.observation import n_devices_of
from envs.scenario_mix import ScenarioMixEnv
from inference.messages import shown


def env_id_of(env: gym.Env | Any) -> str:
    """The registered id of an env (or of the first env of a VecEnv)."""
    base = env.envs[0] if hasattr(env, "envs") else env
    mix = getattr(base, "unwrapped", None)
    if isinstance(mix, ScenarioMixEnv):     # trains for the env its scenarios play in
        return mix.env_id
    spec = getattr(base, "spec", None) or getattr(getattr(base, "unwrapped", None), "spec", None)
    if spec is not None:
        return spec.id.split(":")[-1]
    name = type(base.unwrapped).__name__
    return ENV_IDS[1] if "Split" in name else ENV_IDS[0]


class FlatDiscreteActions(gym.ActionWrapper):
    """MultiDiscrete([D, D, D]) <-> Discrete(D**3) for DQN."""

    def __init__(self, env: gym.Env) -> None:
        space = env.action_space
        if not isinstance(space, spaces.MultiDiscrete):    # it read space.nvec: AttributeError
            wrapped = isinstance(env.unwrapped.action_space, spaces.MultiDiscrete)
            raise ValueError(
                f"FlatDiscreteActions flattens the device ids of InferenceAlloc-v0 (a "
                f"MultiDiscrete action space), got an env of {space}"
                + ("; a wrapper has flattened them already (make_sb3('dqn', env) adds "
                   "FlatDiscreteActions itself: pass it the env without it)" if wrapped else ""))
        super().__init__(env)
        self.nvec = np.asarray(space.nvec)
        self.action_space = spaces.Discrete(int(np.prod(self.nvec)))

    def action(self, action: Any) -> np.ndarray:
        """The device ids of a flat action: an integer in 0..D**3 - 1 (Python's, numpy's or a
        0-d array of one, as SB3's predict gives), or a float that is one, as the env takes
        device ids. Anything else is one ValueError: int() read 2.7 as 2, True as 1 and "5"
        as 5, and numpy's refusal of 27 named no action."""
        arr = np.asarray(action)
        flat = arr.item() if arr.shape == () and arr.dtype.kind in "iuf" else None
        n = int(self.action_space.n)  # type: ignore[attr-defined]
        if flat is None or not 0 <= flat < n or flat != int(flat):   # NaN fails the range
            raise ValueError(f"action must be an integer in 0..{n - 1} (DQN's Discrete({n}): a "
                             f"device id per stage, flattened), got {shown(action)}")
        return np.array(np.unravel_index(int(flat), self.nvec))

    def flatten(self, action: Any) -> int:
        return flat_index(action, self.nvec)


@contextmanager
def unchecked_distributions() -> Iterator[None]:
    """torch's checks of every distribution's arguments and samples, off for the block (the
    caller's setting restored after). They only raise, never change a value, and cost: each
    PPO forward builds a Categorical per stage, each checked, then checked again when scored,
    ~10% of a PPO learn() here. Our agents learn and predict without them, to the same
    weights and actions; a diverged network still fails, in the env (a NaN split weight) or
    in torch's sampling (NaN probabilities), rather than in the check."""
    checked = Distribution._validate_args
    Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        Distribution.set_default_validate_args(checked)


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
    if isinstance(pk.get("activation_fn"), str):   # a name checked with the hyper-parameters
        pk["activation_fn"] = ACTIVATIONS[pk["activation_fn"]]
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

    @property
    def acts_on_masks(self) -> bool:
        """Does `predict` take ``action_masks`` (``agents.base.StreamActor`` passes the stepped
        env's)?"""
        return self.name == "maskable-ppo"

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True, action_masks: np.ndarray | None = None) -> tuple[np.ndarray, Any]:
        """The model's action in the env's own action space: device ids in InferenceAlloc-v0
        (DQN's flat index unravelled into them), the box's weights in InferenceAllocSplit-v0.

        maskable-ppo: without `action_masks`, one observation is masked with the masks of the
        env the agent was built on, i.e. its current task. To act on another env, pass that
        env's ``action_masks()`` (sb3-contrib's ``evaluate_policy`` does; SB3's does not, and
        would mask with the wrong task's).
        """
        kwargs: dict[str, Any] = {}
        if self.acts_on_masks:
            obs = np.asarray(observation)
            # the env's masks are the current task's: for one observation, or a batch of one
            # (what a DummyVecEnv hands over)
            if action_masks is None and self.env is not None and (obs.ndim == 1 or len(obs) == 1):
                action_masks = self.env.unwrapped.action_masks()  # type: ignore[attr-defined]
            kwargs["action_masks"] = action_masks
        with unchecked_distributions():
            action, state = self.model.predict(observation, state, episode_start, deterministic,
                                               **kwargs)
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
        with unchecked_distributions():
            self.model.learn(total_timesteps=total_timesteps, callback=callbacks or None, **kwargs)
        return self

    def save(self, path: Any) -> Path:
        target = zip_target(path)
        # SB3 appends ".zip" only to a name without a suffix; the temp name ends in ".tmp",
        # so the model is written to the very file that is renamed
        with atomic_path(target) as tmp:
            self.model.save(tmp)
        return target


def algorithm_class(name: str, warm: bool) -> type[BaseAlgorithm]:
    """The SB3 class agent `name` is built as: an off-policy agent with a warm-up is its
    ``WARM_ALGORITHMS`` subclass (the conservative policy takes its exploration steps); the
    on-policy ones keep theirs and swap the policy class instead (``make_sb3``)."""
    return WARM_ALGORITHMS.get(name, ALGORITHMS[name]) if warm else ALGORITHMS[name]


def make_sb3(name: str, env: gym.Env, *, seed: int | None = None,
             overrides: dict[str, Any] | None = None, warmup: WarmupConfig | None = None,
             tensorboard_log: str | None = None, verbose: int = 0,
             vec_env: Any = None, metrics_window: int = 100) -> SB3Agent:
    """Build an SB3 agent for `env` from its YAML hyper-parameters (plus overrides and warm-up).

    `vec_env`: train on this VecEnv instead (its sub-envs already wrapped by ``wrap_for``,
    e.g. several envs or a VecNormalize); `env` is then its first sub-env, which the
    warm-up and ``predict`` use. `metrics_window`: the tasks behind the warm-up's
    ``warmup/conservative_acting`` share (train.py's ``--metrics-window``).

    Sets torch to one thread for the whole process (``torch.set_num_threads(1)``), and does
    not set it back: small MLPs run ~10x slower on two. A process of yours that needs more
    for other work sets its own count after.
    """
    torch.set_num_threads(1)   # small MLPs: threads cost more than they give
    hyperparams = hyperparams_with(name, env_id_of(env), overrides,
                                   warm_start=starts_warm(warmup))
    params = _resolve_kwargs(hyperparams)
    # the one policy the agent takes (a YAML without `policy:` gave recurrent-ppo MlpPolicy,
    # "Policy MlpPolicy unknown" as the run started)
    policy = params.pop("policy", POLICIES.get(name, "MlpPolicy"))
    algo = algorithm_class(name, warm=warmup is not None)
    train_env = vec_env if vec_env is not None else wrap_for(name, env)
    if warmup is not None and name not in WARM_ALGORITHMS:
        policy = warm_policy_class(name)
    # a buffer beyond the machine's memory, refused naming its key: numpy's MemoryError or
    # "array is too big" as the model was built named none (agents.sb3_memory)
    check_memory(name, hyperparams, train_env.observation_space, train_env.action_space,
                 getattr(train_env, "num_envs", 1))
    try:
        model = algo(policy, train_env, seed=seed, verbose=verbose, device="cpu",
                     tensorboard_log=tensorboard_log, **params)
    except MemoryError as exc:      # a buffer the estimate let by (it is a lower bound)
        defaults = constructor_defaults(name)
        key = "buffer_size" if "buffer_size" in defaults else "n_steps"
        size = params.get(key, defaults[key])
        raise ValueError(f"hyper-parameter {key}={size}: {name}'s buffers do not fit in this "
                         f"machine's memory ({exc})") from None
    setattr(model, "infer_agent", name)  # noqa: B010  saved with the model: load_sb3 reads it
    agent = SB3Agent(name, model, env)
    agent.hyperparams = hyperparams
    if warmup is not None:
        attach_warmup(agent, env, warmup, seed=seed, metrics_window=metrics_window)
    return agent


def saved_data(path: Path) -> dict[str, Any]:
    """The JSON `data` entry of an SB3 model zip (its settings, step count, spaces): a
    ValueError naming the file when it is no such zip."""
    try:
        data = read_zip_json(path, "data", "'data' entry")
    except (KeyError, BadModelZip) as exc:
        raise ValueError(f"model file {path} is not a Stable-Baselines3 model zip ({exc})") from None
    if not isinstance(data, dict):   # valid JSON, but SB3 always writes an object here
        raise ValueError(f"model file {path} is not a Stable-Baselines3 model zip "
                         f"(its 'data' entry is a JSON {type(data).__name__}, not an object)")
    return data


def _algorithm_of_plain_zip(data: dict[str, Any]) -> str | None:
    """The algorithm of a zip SB3 saved itself (no ``infer_agent``), from what SB3 records.

    The policy class's module tells DQN, SAC, MaskablePPO and RecurrentPPO apart; PPO, A2C and
    TRPO share ActorCriticPolicy (sb3-contrib's TRPO policies are SB3's), and only PPO saves a
    clip range, only TRPO the conjugate-gradient steps of its update.
    """
    policy = data.get("policy_class")
    module = policy.get("__module__") if isinstance(policy, dict) else None
    if not isinstance(module, str):
        return None
    if module.startswith("sb3_contrib.common.maskable"):
        return "maskable-ppo"
    if module.startswith("sb3_contrib.common.recurrent"):
        return "recurrent-ppo"
    if module.startswith("stable_baselines3.dqn"):
        return "dqn"
    if module.startswith("stable_baselines3.sac"):
        return "sac"
    if module.startswith("stable_baselines3.common.policies"):
        if "cg_max_steps" in data:
            return "trpo"
        return "ppo" if "clip_range" in data else "a2c"
    return None


def saved_model_info(path: str | Path) -> tuple[str, str]:
    """(agent name, env id) of a model zip: ours, or a plain one saved by SB3's own ``save``.

    The env id follows from the saved action space: a Box is InferenceAllocSplit-v0's split
    weights; a MultiDiscrete (or DQN's flattened Discrete) is InferenceAlloc-v0's device ids.
    """
    p = Path(path)
    return _model_info(p, saved_data(p))


def _model_info(p: Path, data: dict[str, Any]) -> tuple[str, str]:
    """`saved_model_info` from the zip's already-read `data` entry (load_sb3 reads it once)."""
    name = data.get("infer_agent")
    if name is None:
        name = _algorithm_of_plain_zip(data)
        if name is None:
            raise ValueError(f"model file {p} does not say which agent it holds: it has no "
                             f"infer_agent entry, and its policy is not one of SB3's PPO, A2C, "
                             f"DQN, SAC or sb3-contrib's MaskablePPO, TRPO or RecurrentPPO "
                             f"(save models with SB3Agent.save or train them with "
                             f"{program('train')})")
    if not isinstance(name, str) or name not in ALGORITHMS:   # a list or dict is unhashable
        raise ValueError(f"model file {p} does not say which agent it holds (infer_agent={name!r})")
    space = data.get("action_space")
    kind = space.get(":type:", "") if isinstance(space, dict) else ""
    env_id = ENV_IDS[1] if "spaces.box.Box" in str(kind) else ENV_IDS[0]
    return name, env_id


class OtherDeviceCount(ValueError):
    """A model zip whose observations were built for another device count than the env's;
    `fact` says so without the advice that follows it (a resume has its own)."""

    def __init__(self, fact: str, advice: str) -> None:
        super().__init__(f"{fact}: {advice}")
        self.fact = fact


def _check_device_count(path: Path, data: dict[str, Any], env: gym.Env | None) -> None:
    """Refuse `env` when its hardware has another device count than the model's observations
    were built for (5 + 7 D entries), as the zip's `data` entry records them: SB3's own
    refusal, "Observation spaces do not match: Box(0.0, 1.0, (19,), float32) !=
    Box(...(26,)...)", said nothing of devices."""
    base: Any = getattr(env, "unwrapped", None)
    here = getattr(base, "n_devices", None)
    space = data.get("observation_space")
    shape = space.get("_shape") if isinstance(space, dict) else None
    if here is None or not isinstance(shape, list) or len(shape) != 1:
        return
    try:
        saved = n_devices_of(int(shape[0]))
    except (TypeError, ValueError):
        return          # not one of our observations: SB3's load says what it makes of it
    if saved != here:
        raise OtherDeviceCount(
            f"model file {path} was trained on hardware of {saved} devices (its observations "
            f"have {shape[0]} entries); this env's hardware has {here} "
            f"({', '.join(base.device_names)})",
            f"load it with hardware of {saved} devices, such as the one it was trained on")


def load_sb3(path: str | Path, env: gym.Env | None = None) -> SB3Agent:
    """Load an agent saved by SB3Agent.save (the zip records which algorithm it is); `path` is
    read as `load_policy` reads it (`agents.files.model_file`). Sets torch to one thread for
    the whole process, as `make_sb3` does."""
    p = model_file(path)
    data = saved_data(p)
    name, env_id = _model_info(p, data)
    space = getattr(getattr(env, "unwrapped", None), "action_space", None)
    if space is not None and isinstance(space, spaces.Box) != (env_id == ENV_IDS[1]):
        # SB3's own refusal was "Action spaces do not match" (and a DQN's a missing nvec)
        raise ValueError(f"model file {p} holds an SB3 {ALGORITHMS[name].__name__} model, which "
                         f"acts in {env_id}; this env's actions are {space}: load it with an "
                         f"{env_id} env")
    _check_device_count(p, data, env)
    wrapped = wrap_for(name, env) if env is not None else None
    return SB3Agent(name, _loaded(ALGORITHMS[name], p, name, wrapped), env)


def load_to_train(path: Path, agent: str, algo: type[BaseAlgorithm], env: gym.Env,
                  venv: Any) -> BaseAlgorithm:
    """The model zip at `path` loaded as `algo` to train on `venv` (``train.py --resume``),
    `env` its first sub-env. One ValueError naming the file, as ``load_sb3`` gives, where it
    holds a model of another agent than `agent` or of another env than `env`'s, one of another
    device count (an OtherDeviceCount), or one SB3 cannot load (a truncated policy.pth): each
    was SB3's traceback ("Action spaces do not match", "Observation spaces do not match",
    "PytorchStreamReader failed")."""
    data = saved_data(path)
    name, env_id = _model_info(path, data)
    here = env_id_of(env)
    if (name, env_id) != (agent, here):
        raise ValueError(f"model file {path} holds a {name} model of {env_id}, not a {agent} "
                         f"model of {here}")
    _check_device_count(path, data, env)
    return _loaded(algo, path, name, venv)


def _loaded(algo: type[BaseAlgorithm], path: Path, name: str, env: Any) -> BaseAlgorithm:
    """SB3's load of the zip at `path` as `algo` (agent `name`) onto `env`, whatever fails in
    it one ValueError naming the file."""
    torch.set_num_threads(1)   # as make_sb3: small MLPs run 10x slower on two threads
    try:
        model = algo.load(path, env=env, device="cpu")
    except Exception as exc:  # SB3 raises many kinds on a corrupt zip
        # in one line: torch's state_dict refusal listed every missing key, a line each
        said = shown(" ".join(str(exc).split()), quote=False)
        raise ValueError(f"model file {path} could not be loaded as {name}: {said}") from None
    # a diverged run's NaN DQN acted as all-CPU (the argmax of NaN), and was scored so
    check_finite(model.policy, f"model file {path}")
    return model
