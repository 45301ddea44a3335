"""Static baselines: a fixed placement (all-CPU, all-GPU, all-NPU, any fixed one, the best
static) and a seeded random policy.

Why they exist: every learned or heuristic allocator is judged against what a
deployment without any scheduler would do -- run every task the same way. The
*best* static placement is what an operator would pick before deployment from
spec sheets: it is searched once, with the nominal figures, on a calibration
workload of the scenario (``envs.reference``), so it carries the same NPU
misjudgement the article describes. ``search_best_static`` can also keep that
result in a JSON file so later runs reuse it instead of searching again.

This module also holds the helpers every policy here shares:
``unwrap_env`` (find the ``InferenceAllocEnv`` behind wrappers or a VecEnv),
``check_own_spaces`` (refuse wrappers that change the spaces the policies read and answer in) and
``placement_action`` (turn a device-per-stage placement into the env's action:
device ids for ``InferenceAlloc-v0``, a one-hot ``Box`` action for the Split env).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from agents.base import Policy
from agents.files import write_text
from envs.inference_alloc import InferenceAllocEnv
from envs.reference import best_static_key
from envs.scenario_mix import ScenarioMixEnv
from inference.checks import is_integer
from inference.messages import shown

Placement = tuple[int, int, int]


# ----------------------------------------------------------------------------- shared helpers
def unwrap_env(env: Any, live: bool = False) -> InferenceAllocEnv:
    """The ``InferenceAllocEnv`` behind `env` (a Gymnasium wrapper chain or, unless `live`, a
    vector env: SB3's VecEnvs, Gymnasium's ``SyncVectorEnv``, ``AsyncVectorEnv``, ``make_vec``).

    Policies that only need the env's configuration (hardware, cost model, devices)
    accept a vector env and read its first sub-env. `live=True` is for policies that read
    the env's *current* task and cluster state at predict time (the oracle): those
    must be given the single env that is being stepped, so a VecEnv is refused.
    A scenario mix (``InferenceAllocMix-v0``) gives the env of its current episode: asked
    again after the next reset, maybe another scenario's.
    """
    gym_vector = isinstance(env, VectorEnv)
    if gym_vector or (hasattr(env, "num_envs") and hasattr(env, "get_attr")):
        if live:
            raise TypeError(
                f"this policy reads the live environment's current task and state, so it needs a "
                f"single InferenceAllocEnv (or a Gymnasium wrapper around one), not a vector env "
                f"({type(env).__name__})")
        # Gymnasium's get_attr(name) takes no indices (SB3's takes them): every sub-env's, of
        # which the first; its vector wrappers (RecordEpisodeStatistics, ...) have none, the
        # vector env under them (`unwrapped`) has. From worker processes (SubprocVecEnv,
        # AsyncVectorEnv) each comes back pickled, a copy holding the same configuration.
        base = (env.unwrapped.get_attr("unwrapped")[0] if gym_vector
                else env.get_attr("unwrapped", [0])[0])
    else:
        base = getattr(env, "unwrapped", None)
    if isinstance(base, ScenarioMixEnv):
        base = base.current
    if not isinstance(base, InferenceAllocEnv):
        raise TypeError(f"expected an InferenceAlloc environment (or a wrapper/VecEnv around one), "
                        f"got {type(env).__name__}")
    return base


class NotOwnSpaces(ValueError):
    """An env whose wrappers change the observations our fixed policies read or the actions
    they answer in (``check_own_spaces``): a fault of the env handed over, not of a name or
    a file."""


def _unbounded_like(space: Any, own: Any) -> bool:
    """Is `space` the env's own ``Box`` with its bounds lifted, as ``ClipAction`` declares
    it? That wrapper hands an action inside the env's box on unchanged, so the policies'
    actions reach the env as they are."""
    return (isinstance(space, spaces.Box) and isinstance(own, spaces.Box)
            and space.shape == own.shape and space.dtype == own.dtype
            and bool(np.all(np.isneginf(space.low))) and bool(np.all(np.isposinf(space.high))))


def _observation_normaliser(env: Any) -> Any:
    """The wrapper in `env`'s chain that normalises observations with running statistics
    (``obs_rms``), or None: SB3's ``VecNormalize`` with ``norm_obs``, or Gymnasium's
    ``NormalizeObservation`` (whose vector form kept the space on Gymnasium 1.0). Each wrapper
    holds the next as ``venv`` (SB3) or ``env`` (Gymnasium)."""
    seen = 0
    while env is not None and seen < 100:      # a chain, never a cycle; bounded all the same
        if hasattr(env, "obs_rms") and getattr(env, "norm_obs", True) is True:
            return env
        env, seen = getattr(env, "venv", None) or getattr(env, "env", None), seen + 1
    return None


def check_own_spaces(env: Any, reader: str, reads_observations: bool = True) -> None:
    """Refuse (`NotOwnSpaces`) an `env` whose wrappers change the observation space or the
    action space of the env behind them, on behalf of `reader`, a policy that decodes the env's
    own observations and answers in its own actions; one that does not read the observation's
    entries (the static policies, random) only the observation's shape, by which it tells one
    observation from a batch. Behind ``RescaleAction(-2, 2)``
    heft-split ran with every weight halved, without a word; behind ``NormalizeObservation``
    HEFT acted on the first observation, the normaliser's own mean (about 0 everywhere, in
    [0, 1]); ``FrameStackObservation``'s (k, N) stack was read as k observations. Wrappers
    that keep both spaces (``TimeLimit``, ``RecordEpisodeStatistics``, ``NormalizeReward``,
    SB3's ``Monitor`` and ``VecNormalize`` with ``norm_obs=False``) pass, and so does
    ``ClipAction``, which declares an unbounded box but hands the env's own actions on
    unchanged. A vector env is judged by a sub-env's spaces. ``VecNormalize`` with ``norm_obs``
    keeps the space and rescales the observations, so it is refused by its flag (and so is
    any wrapper holding running observation statistics, ``obs_rms``): its first observation
    (about 0 everywhere, with one env) passes the policies' check of each observation's
    entries."""
    base = unwrap_env(env)
    if isinstance(env, VectorEnv):
        observations, actions = env.single_observation_space, env.single_action_space
    else:
        observations, actions = env.observation_space, env.action_space
    own_obs, own_actions = base.observation_space, base.action_space
    if not reads_observations and observations.shape != own_obs.shape:
        raise NotOwnSpaces(
            f"{reader} takes the env's own observations, one of shape {own_obs.shape} a step, "
            f"and a wrapper on the env changes them to {observations}: build {reader} on "
            f"env.unwrapped and give it the observations env.unwrapped returns")
    if reads_observations and observations != own_obs:
        raise NotOwnSpaces(
            f"{reader} reads the env's own observations ({own_obs}), and a wrapper on the env "
            f"changes them to {observations}: build {reader} on env.unwrapped and give it the "
            f"observations env.unwrapped returns")
    if actions != own_actions and not _unbounded_like(actions, own_actions):
        raise NotOwnSpaces(
            f"{reader} answers in the env's own actions ({own_actions}), and a wrapper on the "
            f"env takes {actions} instead, which it would misread: build {reader} on "
            f"env.unwrapped, or map its actions into the wrapper's yourself")
    # a normaliser that keeps the space (SB3's VecNormalize; Gymnasium 1.0's vector one)
    normaliser = _observation_normaliser(env) if reads_observations else None
    if normaliser is not None:
        raise NotOwnSpaces(
            f"{reader} reads the env's own observations, and a {type(normaliser).__name__} on "
            f"the env rescales them: build {reader} on the env under it, or normalise the "
            f"rewards alone (VecNormalize(venv, norm_obs=False), NormalizeReward)")


def is_split(env: Any) -> bool:
    """Does the env take fractions per stage (Split env, ``Box`` actions) rather than device ids?

    Decided on the unwrapped env: the policies here answer in the env's own action format,
    whatever action wrapper (e.g. a flattening for DQN) a learner put around it.
    """
    return isinstance(unwrap_env(env).action_space, spaces.Box)


def placement_action(placement: Sequence[int], n_devices: int, split: bool) -> np.ndarray:
    """The env action that runs stage s wholly on device ``placement[s]``.

    ``InferenceAlloc-v0``: the device ids (int64, shape (3,)). Split env: entry +1 for
    the chosen device and -1 elsewhere (weights 1 and 0), shape (3 * n_devices,).
    """
    if not split:
        return np.asarray(placement, dtype=np.int64)
    action = -np.ones((3, n_devices), dtype=np.float32)
    action[np.arange(3), np.asarray(placement, dtype=np.int64)] = 1.0
    return action.reshape(-1)


# ----------------------------------------------------------------------------- static policies
class StaticPolicy(Policy):
    """Runs every task with one fixed device per stage, whatever the observation.

    Args:
        placement: a device index per stage (load, prefill, decode).
        n_devices: devices of the hardware (to validate and to shape Split actions).
        device_names: the hardware's device names; used for the policy's name
            (``all-<device>`` when every stage uses one device) and kept in the saved config.
        name: override the name (``best-static`` for the searched placement).
        split: answer in the Split env's ``Box`` format (one-hot rows) instead of ids.
    """

    def __init__(self, placement: Sequence[int], n_devices: int,
                 device_names: Sequence[str] | None = None, name: str | None = None,
                 split: bool = False) -> None:
        # int() made a saved file's 1.5 device 1 and True device 1, and failed on inf with an
        # OverflowError traceback out of evaluate.py
        if isinstance(placement, str) or not isinstance(placement, (Sequence, np.ndarray)) \
                or not all(map(is_integer, placement)):
            raise ValueError(f"placement needs a device id (an integer) per stage (load, "
                             f"prefill, decode), got {shown(placement)}")
        ids = tuple(int(d) for d in placement)
        if len(ids) != 3:
            raise ValueError(f"placement needs one device per stage (load, prefill, decode), "
                             f"got {len(ids)} entries: {placement!r}")
        if any(not 0 <= d < n_devices for d in ids):
            raise ValueError(f"placement {placement!r} has device ids outside 0..{n_devices - 1}")
        if device_names is not None and len(device_names) != n_devices:
            raise ValueError(f"device_names has {len(device_names)} names for {n_devices} devices")
        self.placement: Placement = (ids[0], ids[1], ids[2])
        self.n_devices = int(n_devices)
        self.device_names = tuple(device_names) if device_names is not None else None
        self.split = bool(split)
        if name is None:
            if self.device_names is not None and len(set(ids)) == 1:
                name = f"all-{self.device_names[ids[0]]}"
            else:
                name = "static"
        self.name = name
        self._action = placement_action(self.placement, self.n_devices, self.split)

    @classmethod
    def for_env(cls, env: Any, placement: Sequence[int | str], name: str | None = None
                ) -> StaticPolicy:
        """A static policy for `env`'s hardware; devices may be given by name or index. An env
        whose wrappers change its spaces is refused (`check_own_spaces`)."""
        base = unwrap_env(env)
        check_own_spaces(env, name or "StaticPolicy", reads_observations=False)
        ids = [base.hardware.device_id(d) if isinstance(d, str) else int(d) for d in placement]
        return cls(ids, base.n_devices, base.device_names, name=name, split=is_split(env))

    def act(self, obs: np.ndarray) -> np.ndarray:
        return self._action.copy()

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True, action_masks: Any = None) -> tuple[np.ndarray, Any]:
        """The fixed placement for every observation (`action_masks` is ignored: the env's
        dispatcher moves a masked stage, which is what a static deployment would suffer)."""
        obs = np.asarray(observation)
        if obs.ndim == 1:
            return self._action.copy(), state
        return np.tile(self._action, (obs.shape[0], 1)), state

    def config(self) -> dict[str, Any]:
        return {"placement": list(self.placement), "n_devices": self.n_devices,
                "device_names": list(self.device_names) if self.device_names else None,
                "split": self.split}

    @classmethod
    def from_config(cls, name: str, config: dict[str, Any], env: Any) -> StaticPolicy:
        base = unwrap_env(env)
        names, n_devices = config.get("device_names"), config["n_devices"]
        if names is not None and not (isinstance(names, list)
                                      and all(isinstance(n, str) for n in names)):
            raise ValueError(f"device_names must be a list of device names, got {shown(names)}")
        if names is not None and tuple(names) != base.device_names:
            raise ValueError(f"saved policy {name!r} was made for devices {names}, the env has "
                             f"{list(base.device_names)}")
        if not is_integer(n_devices):
            raise ValueError(f"n_devices must be an integer, got {shown(n_devices)}")
        if n_devices != base.n_devices:
            raise ValueError(f"saved policy {name!r} was made for {config['n_devices']} devices, "
                             f"the env has {base.n_devices}")
        return cls(config["placement"], base.n_devices, base.device_names, name=name,
                   split=is_split(env))

    def __repr__(self) -> str:
        return f"StaticPolicy({self.name!r}, placement={self.placement})"


def _best_static_key(base: InferenceAllocEnv) -> str:
    """A digest of what the best-static search depends on (`envs.reference.best_static_key`,
    its rules included), so a saved result is reused only when it applies: a trace CSV
    rewritten at the same path read back the placement searched on its old tasks."""
    return hashlib.sha256(best_static_key(base).encode()).hexdigest()


def search_best_static(env: Any, path: str | os.PathLike[str] | None = None) -> Placement:
    """The best static placement for `env`'s configuration, searched once.

    The search itself is ``env.unwrapped.planner.best_static`` (nominal figures, the
    scenario's calibration workload; cached for the process). With `path`, the result
    is also kept in a JSON file: if the file exists and was written for the same
    configuration it is read instead of searching; otherwise the search runs and the
    file is (re)written atomically (temp file in the same folder, then rename).
    """
    base = unwrap_env(env)
    key = _best_static_key(base)
    target = Path(path) if path is not None else None
    if target is not None and target.is_file():
        try:
            saved = json.loads(target.read_text(encoding="utf-8"))
            if saved.get("key") == key and saved.get("devices") == list(base.device_names):
                p = [int(d) for d in saved["placement"]]
                if len(p) == 3 and all(0 <= d < base.n_devices for d in p):
                    return (p[0], p[1], p[2])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass   # unreadable or stale: search again and overwrite it
    found = tuple(int(d) for d in base.planner.best_static)
    placement: Placement = (found[0], found[1], found[2])
    if target is not None:
        record = {
            "key": key, "scenario": base.scenario.name, "hardware": base.hardware.name,
            "variant": base.variant, "devices": list(base.device_names),
            "placement": list(placement),
            "placement_names": [base.device_names[d] for d in placement],
        }
        write_text(target, json.dumps(record, indent=2))
    return placement


def best_static(env: Any, path: str | os.PathLike[str] | None = None) -> StaticPolicy:
    """The best static placement (see `search_best_static`) as a policy named ``best-static``."""
    return StaticPolicy.for_env(env, search_best_static(env, path), name="best-static")


# ----------------------------------------------------------------------------- random
def _seed(seed: Any) -> int:
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"random policy seed must be an integer >= 0, got {seed!r}")
    return int(seed)


class RandomPolicy(Policy):
    """Uniformly random actions from a seeded generator: the floor any allocator must beat.

    Works for ``MultiDiscrete`` (a random device per stage, masked devices included:
    the env charges the failed dispatch) and ``Box`` (the Split env: uniform entries in
    the box). The generator's state is saved with the policy, so a saved and reloaded
    policy continues the same action stream as the original would have. The evaluations
    (``episode_latencies``, the online harness) restart it for each task stream from the
    policy's seed and the stream's (``start_stream``).
    """

    name = "random"

    def __init__(self, action_space: spaces.Space, seed: int = 0) -> None:
        if not isinstance(action_space, (spaces.MultiDiscrete, spaces.Box)):
            raise TypeError(f"RandomPolicy supports MultiDiscrete and Box action spaces, "
                            f"got {action_space}")
        self.action_space = action_space
        self.seed = _seed(seed)
        self.rng = np.random.default_rng(self.seed)

    def reset(self, seed: int | None = None) -> None:
        """Restart the action stream (from `seed`, or from the policy's own seed)."""
        if seed is not None:
            self.seed = _seed(seed)
        self.rng = np.random.default_rng(self.seed)

    def start_stream(self, seed: int) -> None:
        """Draw the actions for the stream `seed` from (policy seed, stream seed): they carried
        on from the previous stream, so a seed's result depended on the seeds evaluated before."""
        self.rng = np.random.default_rng([self.seed, seed])

    def act(self, obs: np.ndarray) -> np.ndarray:
        space = self.action_space
        if isinstance(space, spaces.MultiDiscrete):
            return self.rng.integers(0, space.nvec).astype(np.int64)
        assert isinstance(space, spaces.Box)
        return self.rng.uniform(space.low, space.high).astype(space.dtype)

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True, action_masks: Any = None) -> tuple[np.ndarray, Any]:
        """Random actions, one per observation (`deterministic` and `action_masks` are
        accepted for interface compatibility and ignored: this is the unmasked floor)."""
        return super().predict(observation, state, episode_start, deterministic)

    def config(self) -> dict[str, Any]:
        return {"seed": self.seed, "rng_state": self.rng.bit_generator.state}

    @classmethod
    def from_config(cls, config: dict[str, Any], env: Any) -> RandomPolicy:
        policy = cls(unwrap_env(env).action_space, config.get("seed", 0))
        if config.get("rng_state") is not None:
            try:
                policy.rng.bit_generator.state = config["rng_state"]
            except (KeyError, TypeError, ValueError, OverflowError) as exc:
                # numpy's own errors (an OverflowError for a negative state) named no field
                raise ValueError(f"rng_state is not a state of numpy's "
                                 f"{type(policy.rng.bit_generator).__name__} generator "
                                 f"({exc})") from None
        return policy
