"""The per-step oracle: the best placement for the current task, found by trying them all.

At predict time it reads the live env's current task, the task's own stage
noise and the cluster state, and simulates every allowed placement on a copy
(``Simulator.run(..., commit=False)``) with the *true* device figures; the
placement with the lowest latency wins. Ties go to the first placement in
``envs.reference.all_placements`` order, so its choice is the env's
``info["oracle_placement"]`` (``reference=True``) for the same step.

Its cost is a simulation per allowed placement, D ** 3 of them on D devices, every step
(about 0.3 ms a step at 3 devices, 4.5 ms at 8, 40 ms at 16).

What it is for: a per-step lower bound that every result is compared to. No
policy can do better *on this task in this state*.

It is myopic: best for this task now, not for the stream. Grabbing the fastest
device for this task can leave a queue that delays the tasks behind it, and
switching placements pays the re-placement overhead, so a learner that plans
ahead may beat the oracle over an episode. Report it as "the per-step oracle".

It cheats by construction (it sees the noise and the true figures), so it needs
the live environment: a single ``InferenceAllocEnv`` or a Gymnasium wrapper
around one, stepped by the same loop that calls ``predict``. A VecEnv is
refused (its sub-envs live elsewhere, possibly in other processes), and an
observation that is not the env's current one is an error rather than a silent
wrong answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.base import Policy
from agents.static import check_own_spaces, is_split, placement_action, unwrap_env
from envs.observation import BATCH_SCALE, OUTPUT_SCALE, PROMPT_SCALE


class OraclePolicy(Policy):
    """Exhaustive per-step search with the true costs (see the module docstring).

    Args:
        env: the single live env (or a wrapper around it) whose steps this policy decides.
    """

    name = "oracle"
    reads_live_env = True   # its env, not the observation, tells it the task (run_plan.py)

    def __init__(self, env: Any) -> None:
        self._live = env
        self.n_devices = self.env.n_devices     # a VecEnv or another env is refused here
        check_own_spaces(env, "OraclePolicy")
        self.split = is_split(env)

    @property
    def env(self) -> Any:
        """The env stepped now: a scenario mix's current episode's, looked up at each call."""
        return unwrap_env(self._live, live=True)

    def placement(self, obs: Any = None) -> tuple[int, int, int]:
        """The latency-minimising placement for the env's current task (checks `obs` if given)."""
        env = self.env
        if env._episode is None:    # its "call reset() before step()" named no call made
            raise RuntimeError("the oracle decides the current task of the env it was built on, "
                               "which has not been reset: step that env (reset() it first), or "
                               "build the oracle on the env you step")
        env._require_reset()    # RuntimeError after the episode's end
        task = env._current_task()
        if obs is not None:
            self._check(np.asarray(obs, dtype=np.float32).reshape(-1), task)
        # The env's own search (`info["oracle_placement"]`), on the records the env prices the
        # task with and the noise as the floats its step uses: the same figures, built once.
        _, best = env.planner.oracle(task, env._noise[env._index], env._masks(task)[0],
                                     env._run_works(task))
        return best

    def _check(self, obs: np.ndarray, task: Any) -> None:
        expected = np.array([min(task.batch / BATCH_SCALE, 1.0),
                             min(task.prompt_tokens / PROMPT_SCALE, 1.0),
                             min(task.output_tokens / OUTPUT_SCALE, 1.0)], dtype=np.float32)
        if obs.shape[0] < 3 or not np.allclose(obs[:3], expected, rtol=0.0, atol=1e-6):
            raise ValueError(
                "the oracle decides the live env's current task, but this observation describes "
                f"another one (task features {obs[:3].tolist()}, current task "
                f"{expected.tolist()}); predict on the observation the env just returned, as "
                f"the env itself returned it (not one an observation wrapper rescaled)")

    def act(self, obs: np.ndarray) -> np.ndarray:
        return placement_action(self.placement(obs), self.n_devices, self.split)

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True, action_masks: Any = None) -> tuple[np.ndarray, Any]:
        """One observation -> one action; a batch must hold exactly the env's one observation."""
        obs = np.asarray(observation, dtype=np.float32)
        if obs.ndim == 1:
            return self.act(obs), state
        if obs.shape[0] != 1:
            raise ValueError(f"the oracle decides one live env's current task, so it takes a "
                             f"single observation or a batch of one, got a batch of {obs.shape[0]}")
        return self.act(obs[0])[None], state

    def config(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any], env: Any) -> OraclePolicy:
        return cls(env)
