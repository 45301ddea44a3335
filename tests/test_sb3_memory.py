"""The memory an SB3 agent's buffers take, held to what the machine has (agents.sb3_memory)."""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import pytest

import agents.sb3_factory as factory
import agents.sb3_memory as memory
from agents.config import ConfigError, TrainConfig
from agents.run_plan import plan
from agents.sb3_factory import make_sb3
from agents.sb3_memory import check_memory, physical_memory, size_text

MIB = 2**20


def config(tmp_path: Path, agent: str = "ppo", n_envs: int = 1, **hp: int) -> TrainConfig:
    return TrainConfig(agents=[agent], warmup=["none"], n_envs=n_envs, episode_tasks=8,
                       log_dir=str(tmp_path / "runs"), hp=hp)


def test_a_rollout_beyond_the_machines_memory_is_refused_against_every_env(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Held to the machine's memory, not to a cap: a rollout of n_steps x --n-envs transitions,
    whose envs train.py's trial build (one env) left out."""
    monkeypatch.setattr(memory, "physical_memory", lambda: 64 * MIB)
    n_steps = 200_000       # ~150 bytes a transition: 29 MiB an env
    assert len(plan(config(tmp_path, n_steps=n_steps, n_envs=2))) == 1
    with pytest.raises(ConfigError, match=rf"^--hp \{{'n_steps': {n_steps}\}} for ppo: hyper-parameter "
                                          rf"n_steps={n_steps} needs a rollout buffer of at least "
                                          rf".* \(n_steps x n_envs: {n_steps} x 3 transitions of "
                                          rf"\d+ bytes\), more than this machine's memory "
                                          rf"\(64\.0 MiB\)$"):
        plan(config(tmp_path, n_steps=n_steps, n_envs=3))
    assert not (tmp_path / "runs").exists()


def test_a_replay_buffer_and_its_batches_are_held_to_the_machines_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "physical_memory", lambda: 64 * MIB)
    assert len(plan(config(tmp_path, "dqn", buffer_size=100_000))) == 1
    with pytest.raises(ConfigError, match="buffer_size=1000000 needs a replay buffer of at least"):
        plan(config(tmp_path, "dqn", buffer_size=1_000_000))
    with pytest.raises(ConfigError, match="batch_size=1000000 needs at least .* for each sampled "
                                          "batch"):
        plan(config(tmp_path, "dqn", batch_size=1_000_000))


def test_without_the_machines_memory_numpys_bound_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the system does not say (Windows), what numpy cannot allocate is still refused
    (its "array is too big", naming no key), and the rest left to the build."""
    monkeypatch.setattr(memory, "physical_memory", lambda: None)
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=8)
    spaces = env.observation_space, env.action_space
    with pytest.raises(ValueError, match=r"n_steps=100000000000000000 needs a rollout buffer of "
                                         r"at least .*, more than numpy can allocate \(8\.0 EiB\)$"):
        check_memory("ppo", {"n_steps": 10**17}, *spaces, n_envs=1)
    check_memory("ppo", {"n_steps": 10**16}, *spaces, n_envs=1)     # 1.3 EiB: the build's


def test_the_machines_memory_is_none_where_the_system_does_not_say(
        monkeypatch: pytest.MonkeyPatch) -> None:
    if hasattr(os, "sysconf"):
        assert physical_memory() == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        monkeypatch.setattr(os, "sysconf", lambda name: -1)     # a figure it cannot tell
        assert physical_memory() is None
        monkeypatch.delattr(os, "sysconf")                      # as on Windows
    assert physical_memory() is None


def test_a_memory_error_as_the_model_is_built_names_the_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The estimate is a lower bound: a buffer it lets by may still not fit."""
    class Unallocated:
        def __init__(self, *args, **kwargs) -> None:
            raise MemoryError("Unable to allocate 1.0 TiB for an array with shape (5000, 1, 26)")

    monkeypatch.setattr(factory, "algorithm_class", lambda name, warm: Unallocated)
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=8)
    with pytest.raises(ValueError, match=r"^hyper-parameter buffer_size=5000: dqn's buffers do not "
                                         r"fit in this machine's memory \(Unable to allocate 1\.0 "):
        make_sb3("dqn", env, overrides={"buffer_size": 5000})
    with pytest.raises(ValueError, match=r"^hyper-parameter n_steps=16: ppo's buffers"):
        make_sb3("ppo", env)


@pytest.mark.parametrize("agent, hp", [
    ("ppo", {"n_epochs": 10**12}), ("dqn", {"gradient_steps": 10**12, "train_freq": 10**12}),
    ("trpo", {"n_critic_updates": 10**12, "cg_max_steps": 10**12}),
])
def test_an_iteration_count_is_no_memory_and_is_taken(agent: str, hp: dict[str, int],
                                                      tmp_path: Path) -> None:
    """A long run is the user's choice, as a large --timesteps is."""
    assert len(plan(config(tmp_path, agent, **hp))) == 1


def test_a_size_is_shown_as_numpy_shows_it() -> None:
    assert [size_text(n) for n in (0, 1023, 1024, 94.6 * 2**40, 2**63 - 1)] == [
        "0 bytes", "1023 bytes", "1.0 KiB", "94.6 TiB", "8.0 EiB"]
