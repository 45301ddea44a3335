"""Warm-up (conservative start, behaviour cloning, guard), the SB3 factory and persistence."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from agents.registry import load_policy, make_policy
from agents.sb3_factory import make_sb3, parse_overrides
from agents.warmup import WarmupConfig, WarmupController

torch.set_num_threads(1)


def _env(scenario: str = "article", tasks: int = 200, env_id: str = "InferenceAlloc-v0"):
    return gym.make(f"envs:{env_id}", scenario=scenario, episode_tasks=tasks, reward="relative")


class _Placements:
    """Records the device ids the env actually ran, step by step."""

    def __init__(self) -> None:
        from stable_baselines3.common.callbacks import BaseCallback

        outer = self
        self.placements: list[tuple[str, ...]] = []

        class _CB(BaseCallback):
            def _on_step(self) -> bool:
                outer.placements.append(tuple(self.locals["infos"][0]["placement"]))
                return True

        self.callback = _CB()


def test_behaviour_cloning_copies_the_conservative_policy():
    env = _env("edge", 200)
    agent = make_sb3("ppo", env, seed=0, warmup=WarmupConfig(
        conservative="heft", steps=0, clone=True, clone_samples=3000, clone_epochs=40, guard=False))
    assert agent.clone_stats["heldout_agreement"] >= 0.95


def test_an_uncloned_learner_does_not_agree_by_chance():
    env = _env("edge", 200)
    from agents.cloning import _agreement, collect

    agent = make_sb3("ppo", env, seed=0)
    data = collect(env, make_policy("heft", env), 300, 0.9, seed=5)
    assert _agreement(agent, data["obs"], data["actions"]) < 0.6


@pytest.mark.parametrize("name", ["ppo", "dqn"])
def test_the_first_k_decisions_are_the_conservative_policys(name):
    k = 40
    env = _env(tasks=200)
    agent = make_sb3(name, env, seed=1, warmup=WarmupConfig(
        conservative="all-gpu", steps=k, clone=False, guard=False))
    rec = _Placements()
    agent.learn(k + 30, callback=rec.callback)
    assert all(p == ("gpu", "gpu", "gpu") for p in rec.placements[:k])
    assert any(p != ("gpu", "gpu", "gpu") for p in rec.placements[k:])


def test_the_guard_hands_control_back_when_the_learner_is_worse():
    config = WarmupConfig(steps=10, clone=False, guard=True, guard_window=20, guard_margin=0.05,
                          guard_cooldown=15)
    ctl = WarmupController(conservative=None, config=config)
    for _ in range(10):                      # conservative phase: as good as static
        assert ctl.use_conservative()
        ctl.record(1.0)
    for _ in range(9):                       # a planted bad learner: twice static's latency
        assert not ctl.use_conservative()
        ctl.record(2.0)
    assert not ctl.use_conservative()
    ctl.record(2.0)                          # the 10th bad decision fills half the window
    assert ctl.guard_trips == 1
    assert all(ctl.use_conservative() for _ in range(15))
    assert not ctl.use_conservative()        # then the learner gets another window


def test_the_guard_leaves_a_good_learner_alone():
    ctl = WarmupController(None, WarmupConfig(steps=5, clone=False, guard_window=20))
    for _ in range(5):
        ctl.use_conservative()
        ctl.record(1.0)
    for _ in range(100):
        assert not ctl.use_conservative()
        ctl.record(1.02)                     # within the 5% margin
    assert ctl.guard_trips == 0


def test_the_guard_trips_on_a_planted_bad_sb3_learner():
    env = _env(tasks=300)
    agent = make_sb3("ppo", env, seed=0, warmup=WarmupConfig(
        conservative="heft", steps=30, clone=False, guard=True, guard_window=20,
        guard_cooldown=20), overrides={"learning_rate": 0.0})
    with torch.no_grad():                    # plant a learner that puts every stage on the CPU
        bias = agent.model.policy.action_net.bias
        bias.fill_(-20.0)
        for s in range(3):
            bias[3 * s] = 20.0
    agent.learn(120)
    assert agent.warmup.guard_trips >= 1


@pytest.mark.parametrize("name", ["ppo", "a2c", "dqn", "maskable-ppo"])
def test_every_sb3_agent_saves_loads_and_predicts_the_same(name, tmp_path):
    env = _env(tasks=100)
    agent = make_sb3(name, env, seed=0, overrides={"learning_starts": 0} if name == "dqn" else None)
    agent.learn(64)
    obs = np.stack([env.reset(seed=s)[0] for s in range(8)])
    path = agent.save(tmp_path / name)
    loaded = load_policy(path, env)
    masks = np.stack([env.unwrapped.action_masks()] * len(obs)) if name == "maskable-ppo" else None
    kwargs = {"action_masks": masks} if masks is not None else {}
    before = agent.predict(obs, deterministic=True, **kwargs)[0]
    after = loaded.predict(obs, deterministic=True, **kwargs)[0]
    assert np.array_equal(before, after)
    assert np.asarray(before).shape == (8, 3)


def test_unknown_agent_and_missing_model_give_clear_errors(tmp_path):
    env = _env(tasks=50)
    with pytest.raises(ValueError, match="ppo") as err:
        make_policy("ppo2", env)
    assert "heft-calibrated" in str(err.value)
    missing = tmp_path / "nope.zip"
    with pytest.raises(FileNotFoundError, match="nope.zip"):
        load_policy(missing, env)


def test_overrides_are_parsed_as_yaml_not_evaluated():
    assert parse_overrides(["learning_rate=3e-4", "policy_kwargs={net_arch: [8, 8]}"]) == {
        "learning_rate": 3e-4, "policy_kwargs": {"net_arch": [8, 8]}}
    assert parse_overrides(["x=__import__('os')"]) == {"x": "__import__('os')"}
    with pytest.raises(ValueError, match="key=value"):
        parse_overrides(["learning_rate"])


def test_warmup_parts_parse():
    assert WarmupConfig.from_parts("none") is None
    full = WarmupConfig.from_parts("all")
    assert full is not None and full.clone and full.guard and full.steps > 0
    only_guard = WarmupConfig.from_parts("guard")
    assert only_guard is not None and only_guard.steps == 0 and not only_guard.clone
    with pytest.raises(ValueError, match="unknown warm-up parts"):
        WarmupConfig.from_parts("clone,bogus")
