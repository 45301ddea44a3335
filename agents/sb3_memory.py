"""The memory an SB3 agent's buffers take, from its hyper-parameters and the env's spaces: a
size the machine cannot hold is refused before the model is built, naming the key.

An on-policy agent (PPO, A2C, TRPO, MaskablePPO, RecurrentPPO) stores each rollout of
``n_steps`` x n_envs transitions; DQN and SAC keep ``buffer_size`` of them and gather
``batch_size`` (with an n-step return, ``batch_size`` x ``n_steps`` indices) at each gradient
step. numpy allocates the buffers as the model is built: an absurd size failed there, as
numpy's "array is too big" (naming no key) or a MemoryError traceback, and DQN's batch once
training had started. The figures are lower bounds (the observations, the actions and SB3's
per-step numbers, not the LSTM states or action masks some agents keep beside them), held to
what this machine has (``physical_memory``), not to a cap of ours. Iteration counts
(n_epochs, gradient_steps, train_freq, n_critic_updates) take time, not memory: a long run is
the user's choice, as a large --timesteps is.
"""

from __future__ import annotations

import math
import os
from typing import Any, cast

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.preprocessing import get_action_dim, get_obs_shape

from agents.sb3_hyperparams import ALGORITHMS, constructor_defaults

# SB3's float32 numbers per transition beside the observation and the action: a rollout's
# reward, return, episode start, value, log-probability and advantage; a replay's reward,
# done and timeout
ROLLOUT_NUMBERS = 6
REPLAY_NUMBERS = 3
INDEX_BYTES = 8         # an int64 index, of a sampled transition or an n-step return's step
# the most bytes numpy allocates (its "array is too big" beyond): the bound where the
# machine's memory is not known
NUMPY_MAX_BYTES = int(np.iinfo(np.intp).max)
UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def physical_memory() -> int | None:
    """This machine's physical memory in bytes; None where the system does not say (Windows
    has no ``os.sysconf``, and it answers -1 for a figure it cannot tell)."""
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return pages * page_size if pages > 0 and page_size > 0 else None


def size_text(n: float) -> str:
    """A number of bytes as numpy's refusals give it (1024-based): ``94.6 TiB``."""
    unit = 0
    while n >= 1024 and unit < len(UNITS) - 1:
        n, unit = n / 1024, unit + 1
    return f"{n:.0f} bytes" if unit == 0 else f"{n:.1f} {UNITS[unit]}"


def _observation_bytes(space: spaces.Space) -> int:
    if isinstance(space, spaces.Dict):      # an array per key
        return sum(_observation_bytes(sub) for sub in space.spaces.values())
    shape = cast(tuple[int, ...], get_obs_shape(space))    # a tuple for all but a Dict
    return math.prod(shape) * np.dtype(space.dtype).itemsize


def _action_bytes(space: spaces.Space, replay: bool) -> int:
    dtype = np.dtype(space.dtype)
    if replay and dtype == np.float64:      # SB3's replay buffer stores them as float32
        dtype = np.dtype(np.float32)
    return get_action_dim(space) * dtype.itemsize


def check_memory(name: str, params: dict[str, Any], observation_space: spaces.Space,
                 action_space: spaces.Space, n_envs: int) -> None:
    """A ValueError naming the hyper-parameter whose buffer (or sampled batch) takes more bytes
    than this machine's memory, or, where that is not known, than numpy allocates; `params`
    are the agent's resolved (and type-checked) hyper-parameters, `n_envs` the envs it trains
    on."""
    merged = {**constructor_defaults(name), **params}
    memory = physical_memory()
    limit = NUMPY_MAX_BYTES if memory is None else memory
    beyond = (f"more than numpy can allocate ({size_text(limit)})" if memory is None
              else f"more than this machine's memory ({size_text(limit)})")
    obs = _observation_bytes(observation_space)
    if not issubclass(ALGORITHMS[name], OffPolicyAlgorithm):
        n_steps = merged["n_steps"]
        row = obs + _action_bytes(action_space, replay=False) + 4 * ROLLOUT_NUMBERS
        if n_steps * n_envs * row > limit:
            raise ValueError(f"hyper-parameter n_steps={n_steps} needs a rollout buffer of at "
                             f"least {size_text(n_steps * n_envs * row)} (n_steps x n_envs: "
                             f"{n_steps} x {n_envs} transitions of {row} bytes), {beyond}")
        return
    size = merged["buffer_size"]
    rows = max(size // n_envs, 1) * n_envs      # SB3 keeps buffer_size // n_envs per env
    # the next observations too, unless optimize_memory_usage reads them off the next row
    row = (obs * (1 if merged["optimize_memory_usage"] else 2)
           + _action_bytes(action_space, replay=True) + 4 * REPLAY_NUMBERS)
    if rows * row > limit:
        raise ValueError(f"hyper-parameter buffer_size={size} needs a replay buffer of at least "
                         f"{size_text(rows * row)} ({rows} transitions of {row} bytes), {beyond}")
    # n-step returns: SB3 2.6 on (before, DQN and SAC took no n_steps, one step each)
    batch, n_steps = merged["batch_size"], merged.get("n_steps", 1)
    need = batch * (row + INDEX_BYTES) + (batch * n_steps * INDEX_BYTES if n_steps > 1 else 0)
    if need > limit:
        keys = (f"hyper-parameters batch_size={batch} and n_steps={n_steps} need" if n_steps > 1
                else f"hyper-parameter batch_size={batch} needs")
        steps = f" and {batch} x {n_steps} n-step indices" if n_steps > 1 else ""
        raise ValueError(f"{keys} at least {size_text(need)} for each sampled "
                         f"batch ({batch} transitions of {row + INDEX_BYTES} bytes{steps}), "
                         f"{beyond}")
