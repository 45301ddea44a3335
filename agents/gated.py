"""Gated dynamic scheduling: re-place only tasks big enough to repay the re-placement.

The article's observation: for batches below 16 (about 30% of its tasks)
dynamic scheduling loses, because the scheduling overhead (device contexts,
graph capture, re-sharding: the env's ``replacement_overhead_s``) is a large
part of a small task's latency and the better placement saves little on it.
So small tasks keep the previous task's placement (no overhead), and only
tasks at or above the threshold are given to the inner policy.

The previous placement is read from the observation's previous-placement block
(entries ``5 + 4D + D s + d``): per stage, the device with the largest share.
On the first task of an episode the block is all zero: there is no previous
placement, and the inner policy decides. It decides too when a device of the
previous placement is now offline (the observation's online flags, entries
``6 + 4d``): keeping it would fail to dispatch, pay ``failed_dispatch_s`` and run
the stage on the env's fallback device, set-up included.

Any policy with SB3's ``predict`` can be wrapped (the ones in ``agents/`` and
Stable-Baselines3 models). The inner policy is always called on the whole batch
(so recurrent state and random streams advance as without the gate), and the
gated rows are overwritten in the format the inner policy answered in: device
ids (``MultiDiscrete``), Split-env ``Box`` rows (the previous fractions, mapped
back to [-1, 1]), or a single index per row for a ``Discrete(D**3)`` flattening
in ``envs.reference.all_placements`` order. The Split env rounds the kept
fractions to whole sequences of the new task's batch, so a device of the previous
placement may get none of a smaller batch (it then pays nothing), and a device
that had no share never gets one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.base import Policy, start_stream_of
from agents.heft import HeftPolicy
from agents.oracle import OraclePolicy
from agents.static import RandomPolicy, StaticPolicy
from envs.observation import (
    check_in_box,
    decode_batch,
    device_entries,
    n_devices_of,
    previous_entries,
)
from inference.checks import is_integer

DEFAULT_THRESHOLD = 16


class GatedScheduling(Policy):
    """Keep the previous placement for batches below `threshold`; else ask `policy`.

    Args:
        policy: the inner policy (anything with SB3's ``predict``).
        threshold: batch size from which the inner policy decides (the article's 16).
    """

    def __init__(self, policy: Any, threshold: int = DEFAULT_THRESHOLD) -> None:
        if not hasattr(policy, "predict"):
            raise TypeError(f"the gated policy wraps anything with predict(); "
                            f"got {type(policy).__name__}")
        if not is_integer(threshold) or threshold < 1:
            raise ValueError(f"threshold must be a positive integer batch size, got {threshold!r}")
        self.inner = policy
        self.threshold = int(threshold)
        inner_name = getattr(policy, "name", None) or type(policy).__name__.lower()
        self.name = f"gated-{inner_name}"

    @property
    def reads_live_env(self) -> bool:
        """Whether the gated policy reads the live env (the oracle does: ``OraclePolicy``)."""
        return bool(getattr(self.inner, "reads_live_env", False))

    def start_stream(self, seed: int) -> None:
        start_stream_of(self.inner, seed)

    def gate(self, obs: np.ndarray) -> tuple[bool, np.ndarray | None]:
        """(keep the previous placement?, that placement's (3, D) shares) for one observation."""
        d = n_devices_of(obs.shape[0])
        previous = obs[previous_entries(d)].reshape(3, d)
        if not previous.any():
            return False, None
        if decode_batch(float(obs[0])) >= self.threshold:
            return False, previous
        online = obs[device_entries(d, "online")] > 0.5   # a device it used is offline: the inner policy decides
        return bool(online[previous.any(axis=0)].all()), previous

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True, **kwargs: Any) -> tuple[np.ndarray, Any]:
        """As SB3's predict; extra keywords (e.g. ``action_masks``) go to the inner policy."""
        obs = np.asarray(observation, dtype=np.float32)
        single = obs.ndim == 1
        batch = obs[None] if single else obs
        for o in batch:     # before the inner policy acts: a refusal leaves it as it was
            check_in_box(o.tolist(), self.name)
        actions, state = self.inner.predict(observation, state, episode_start, deterministic,
                                            **kwargs)
        out = np.array(actions, copy=True)
        rows = out[None] if single else out
        d = n_devices_of(batch.shape[1])
        for k, o in enumerate(batch):
            keep, previous = self.gate(o)
            if not keep or previous is None:
                continue
            placement = previous.argmax(axis=1)
            row_shape = rows[k].shape
            if row_shape == (3,):
                rows[k] = placement
            elif row_shape == (3 * d,):
                rows[k] = (2.0 * previous - 1.0).reshape(-1)
            elif row_shape == ():
                rows[k] = np.ravel_multi_index(tuple(placement), (d, d, d))
            else:
                raise ValueError(f"cannot express the previous placement in the inner policy's "
                                 f"action format (action of shape {row_shape})")
        return (rows[0] if single else rows), state

    def act(self, obs: np.ndarray) -> np.ndarray:
        return self.predict(obs)[0]

    def config(self) -> dict[str, Any]:
        if not isinstance(self.inner, (StaticPolicy, RandomPolicy, HeftPolicy, OraclePolicy,
                                       GatedScheduling)):
            raise TypeError(f"{self.name} wraps a {type(self.inner).__name__}, which is not saved "
                            f"in a policy zip: save the inner model with its own save() and wrap "
                            f"it again after loading")
        return {"threshold": self.threshold,
                "inner": {"name": self.inner.name, "config": self.inner.config()}}

    def __repr__(self) -> str:
        return f"GatedScheduling({self.inner!r}, threshold={self.threshold})"
