"""InferenceAllocSplit-v0: split each stage's work over the devices."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from envs.inference_alloc import InferenceAllocEnv, holds_bool
from inference.simulator import Shares


class InferenceAllocSplitEnv(InferenceAllocEnv):
    """
    ## Description

    As `InferenceAlloc-v0` (see its docstring for the observation table,
    rewards, episode end and arguments), but each stage's batch may be split
    over several devices, which then run their shares in parallel; the stage
    ends when its slowest share does. Every device that takes a share of
    prefill or decode needs the weights, and the next stage gathers its input
    from every device of the previous one.

    ## Action Space

    `Box(-1, 1, (3 * D,), float32)`, read as a 3 x D matrix (stage-major: the
    load stage's D entries first). Entry `a` gives weight `w = (a + 1) / 2` in
    [0, 1]; each stage's non-negative weights are normalised to fractions.
    A stage whose weights are all zero (every entry at -1) is split evenly over
    all devices: it lies inside the box, and SB3 clips Gaussian samples onto
    that corner often enough early in training (about 0.4% of stages per step
    with three devices) that refusing it would crash plain PPO or A2C. A
    non-numeric (string, bool) or non-finite entry, or an entry outside
    [-1, 1], is an error (ValueError). The box is symmetric so that
    Stable-Baselines3's Gaussian policies fit it without rescaling.
    Shares on a masked device fail to dispatch and move to the fallback device
    (as in `InferenceAlloc-v0`), charged once per masked share.
    """

    def _make_action_space(self) -> spaces.Space:
        return spaces.Box(-1.0, 1.0, (3 * self.n_devices,), np.float32)

    def _requested_shares(self, action: Any) -> Shares:
        arr = np.asarray(action)
        if arr.dtype.kind not in "iuf" or holds_bool(action):
            # A cheap dtype check: strings would fail inside numpy's float conversion with its
            # own message (or, written "0.5", pass), and bools would pass as the entries 0 and 1.
            what = "booleans" if arr.dtype.kind == "b" or holds_bool(action) else f"dtype {arr.dtype}"
            raise ValueError(f"action entries must be numbers in [-1, 1], not {what}, got {action!r}")
        arr = arr.astype(np.float64)
        expected = (3 * self.n_devices,)
        if arr.shape not in (expected, (3, self.n_devices)):
            raise ValueError(f"action must have shape {expected} (stage-major), got {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"action entries must be finite, got {action!r}")
        if np.any(arr < -1.0) or np.any(arr > 1.0):
            raise ValueError(f"action entries must lie in [-1, 1], got {action!r}")
        weights = (arr.reshape(3, self.n_devices) + 1.0) / 2.0
        weights[weights.sum(axis=1) <= 0] = 1.0      # an all -1 stage: an even split
        sums = weights.sum(axis=1)
        fractions = weights / sums[:, None]
        return tuple(tuple((d, float(f)) for d, f in enumerate(row) if f > 0) for row in fractions)
