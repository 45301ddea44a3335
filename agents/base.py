"""The one interface every policy answers: Stable-Baselines3's ``predict``.

``predict(obs, state=None, episode_start=None, deterministic=True) -> (action, state)``
accepts one observation or a batch (first axis) and answers in kind, so one
evaluation loop runs static baselines, heuristics, the oracle and SB3 models.
Non-learned policies save to a small zip (``policy.json`` inside) so that every
agent name saves and loads the same way.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from agents.files import BadModelZip, atomic_path, model_file, read_zip_json, zip_target

POLICY_FILE = "policy.json"


class Policy:
    """Base class of the non-learned policies: subclasses implement `act(obs) -> action`."""

    name: str = "policy"

    def act(self, obs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def start_stream(self, seed: int) -> None:
        """Called before the policy acts on the task stream `seed` (see
        `start_stream_of`); only a policy with state of its own, such as a random
        generator, uses it."""

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        obs = np.asarray(observation, dtype=np.float32)
        if obs.ndim == 1:
            return np.asarray(self.act(obs)), state
        return np.stack([np.asarray(self.act(o)) for o in obs]), state

    # -- persistence -----------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """JSON-able constructor arguments (besides the env) that rebuild this policy."""
        return {}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write `path` (a .zip) atomically: a temp file in the same folder, then rename. Its
        policy.json holds the name, the config and the class as ``<module>:<class>``: only
        ours load back by name, and a refusal of a class of yours names it (``load_policy``)."""
        target = zip_target(path)
        cls = type(self)
        saved = {"name": self.name, "config": self.config(),
                 "class": f"{cls.__module__}:{cls.__qualname__}"}
        with atomic_path(target) as tmp, zipfile.ZipFile(tmp, "w") as zf:
            zf.writestr(POLICY_FILE, json.dumps(saved))
        return target


def flat_index(action: Any, nvec: Any) -> int:
    """A device-id action (one per stage, `nvec` devices each) as the single index of DQN's
    ``Discrete(prod(nvec))`` flattening (``sb3_factory.FlatDiscreteActions``)."""
    return int(np.ravel_multi_index(tuple(int(x) for x in np.asarray(action).reshape(-1)), nvec))


def start_stream_of(policy: Any, seed: int) -> None:
    """Tell `policy` that the task stream `seed` begins, if it has ``start_stream`` (ours, a
    ``Policy`` of yours, also behind ``agents.imported.OneAtATime``, which reads its
    attributes through; SB3 models keep no state between streams), so its actions on a stream
    depend on that stream alone, not on the streams it was evaluated on before."""
    start_stream = getattr(policy, "start_stream", None)
    if callable(start_stream):
        start_stream(seed)


class StreamActor:
    """`policy` acting along one stream, driven as SB3's ``evaluate_policy`` drives a model:
    the state each ``predict`` returns is handed to the next call, and ``episode_start`` is
    True on an episode's first observation alone. The loops that ran a policy over a stream
    dropped both, so a policy that keeps its memory in `state` (an LSTM's, or one of yours that
    counts or estimates through it) acted on every task as on an episode's first. Ours return
    the state they are given (None), and act as before."""

    def __init__(self, policy: Any, env: Any = None) -> None:
        self.policy = policy
        self.state: Any = None
        self.starting = True
        # A policy that acts on action masks (maskable-ppo) is handed those of `env`, the env
        # stepped: left to itself it reads the env it was built on, which may be another
        # (or one never reset: "call reset() before action_masks()").
        self._masks = (env.unwrapped.action_masks
                       if env is not None and getattr(policy, "acts_on_masks", False) else None)

    def act(self, observation: Any) -> Any:
        """The policy's deterministic action on `observation`, the next of the stream."""
        masks = {} if self._masks is None else {"action_masks": self._masks()}
        action, self.state = self.policy.predict(observation, state=self.state,
                                                 episode_start=np.array([self.starting]),
                                                 deterministic=True, **masks)
        self.starting = False
        return action

    def new_episode(self) -> None:
        """The next observation is a new episode's first (the env was reset)."""
        self.starting = True


def read_policy_file(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The saved {name, config} of a non-learned policy zip; None if the zip is an SB3 model.
    `path` is found as every model loader finds it (`model_file`: "p" may be saved as "p.zip";
    a folder is a ValueError, a missing file a FileNotFoundError, each naming the path)."""
    p = model_file(path)
    try:
        data = read_zip_json(p, POLICY_FILE, POLICY_FILE)
    except KeyError:
        return None
    except BadModelZip as exc:
        raise ValueError(f"model file {p} is not a valid policy zip: {exc}") from None
    if not isinstance(data, dict) or "name" not in data:
        raise ValueError(f"model file {p} has no policy name in {POLICY_FILE}")
    return data
