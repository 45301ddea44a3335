"""Where a run's training envs step (``train.py --vec-env``).

* ``dummy`` (the default): SB3's ``DummyVecEnv``, the ``--n-envs`` envs one after another in
  the trainer's own process;
* ``subproc``: SB3's ``SubprocVecEnv``, each env in a worker process of its own (SB3's start
  method: forkserver on Linux), which steps them at once on a machine with cores to spare.

Both give a run the same envs, seeded ``seed + i``, and so the same model and scalars for the
same seed: each worker builds its env as the trainer would, and what the trainer reads in its
own process (the warm-up's conservative policy and cloning, the callbacks' device names) it
reads from an env of its own built alike (``first_env``), not from a sub-env. Two differences of
SB3's classes are levelled here: ``SubprocVecEnv`` hands the rewards on as the env's float64
where ``DummyVecEnv`` stores them as float32 (``Float32Rewards``), which moved ``--normalize``'s
statistics, and closing one whose worker has died (a stop that reached the workers too, an error
in an env) raised in place of the error or interrupt that ended the run (``close_venv``). A
worker that ends mid-run (its env raised: the worker prints the traceback and exits) fails the
run with ``WorkerDied``, where the trainer's read of its pipe failed with a bare ``EOFError``.

A script of yours that calls ``agents.training.train`` with ``vec_env="subproc"`` needs the
``if __name__ == "__main__":`` guard, as any that starts processes by forkserver or spawn:
each worker imports the main module afresh.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv, VecEnvWrapper

from agents.config import VEC_ENVS as VEC_ENVS


class WorkerDied(RuntimeError):
    """A worker process of a ``SubprocVecEnv`` ended while the trainer waited on it: an error
    in its env (SB3's worker printed its traceback, then exited), or the worker was killed."""


# what a pipe to a worker that has ended raises: read (EOFError) or written to
_ENDED_PIPE = (EOFError, BrokenPipeError, ConnectionResetError)


class Float32Rewards(VecEnvWrapper):
    """The rewards as ``DummyVecEnv`` hands them on: float32, each the env's float64 rounded;
    a worker that has ended is a ``WorkerDied``, not the bare ``EOFError`` of its pipe (a run
    failed with 'EOFError: ', the worker's own traceback far above it)."""

    def reset(self) -> Any:
        with _WorkerEnds():
            return self.venv.reset()

    def step_async(self, actions: np.ndarray) -> None:
        with _WorkerEnds():
            self.venv.step_async(actions)

    def step_wait(self) -> Any:
        with _WorkerEnds():
            obs, rewards, dones, infos = self.venv.step_wait()
        return obs, np.asarray(rewards, dtype=np.float32), dones, infos


class _WorkerEnds:
    """A pipe's error, in its block, raised as ``WorkerDied``. A class, not a @contextmanager:
    contextlib's ``__exit__`` keeps the error it throws into the generator in a reference cycle
    with the generator's frame (CPython gh-129280), and with it the frames that hold the send
    buffer, a memoryview of a ``BytesIO`` (``multiprocessing.reduction.ForkingPickler.dumps``),
    left to the garbage collector, which then printed 'Exception ignored in: <_io.BytesIO ...>
    BufferError: Existing exports of data' (CPython gh-111331) wherever it next ran."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, typ: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if isinstance(value, _ENDED_PIPE):
            raise WorkerDied(f"a worker process of --vec-env subproc ended ({type(value).__name__} "
                             f"on its pipe): an error in its env, printed above by the worker, or "
                             f"a stop that reached it") from None


def training_venv(make_env: Callable[[], gym.Env], n_envs: int, seed: int,
                  vec_env: str = "dummy") -> VecEnv:
    """`n_envs` envs of `make_env`, env i seeded `seed` + i at its first reset, each wrapped in
    SB3's Monitor, stepped as `vec_env` (one of ``VEC_ENVS``) says."""
    if vec_env == "dummy":
        return make_vec_env(make_env, n_envs=n_envs, seed=seed, vec_env_cls=DummyVecEnv)
    if vec_env != "subproc":
        raise ValueError(f"vec_env must be one of {', '.join(VEC_ENVS)}, got {vec_env!r}")
    return Float32Rewards(make_vec_env(make_env, n_envs=n_envs, seed=seed,
                                       vec_env_cls=SubprocVecEnv))


def first_env(venv: VecEnv, make_env: Callable[[], gym.Env]) -> gym.Env:
    """The env the trainer reads in its own process (the warm-up's conservative policy is
    built on it, cloning steps it, the callbacks read its devices): `venv`'s first sub-env
    where it lives here (``DummyVecEnv``), else a new one of `make_env`, as a worker built its
    own. Cloning resets it on seeds of its own and a run's first reset seeds every sub-env
    afresh, so a run trains alike on either."""
    if isinstance(venv, DummyVecEnv):
        return venv.envs[0]
    return make_env()


def close_venv(venv: VecEnv) -> None:
    """Close `venv` once its run is over or has failed: a SubprocVecEnv's workers end, not
    wait for a next run of the plan that never uses them. A worker that died (an error in its
    env, whose traceback it printed; the run failed on it) cannot answer its close: the others
    are then ended outright."""
    try:
        venv.close()
    except (EOFError, OSError):
        base = venv.unwrapped
        for process in getattr(base, "processes", ()):
            process.terminate()
            process.join()
        for remote in getattr(base, "remotes", ()):
            remote.close()
