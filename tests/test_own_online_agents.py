"""Agents of your own in the online study (agents/own_online_agents.py): a learner of yours is
deployed as ours are, on the same streams and metrics; a fixed one acts without learning; what
the study cannot deploy is refused before it runs."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from test_cli_scripts import load_main

from agents.config import ConfigError, EvalConfig
from agents.evaluation import make_env, online_study
from agents.online import run_policy
from tests.test_imported import module_in_cwd

LEARNERS = '''
import numpy as np
import gymnasium as gym
from stable_baselines3 import DQN, PPO

from agents.sb3_factory import FlatDiscreteActions, make_sb3

built = []


def as_ours(env, seed):
    """The study's own cold PPO, built by a function of the user's."""
    return make_sb3("ppo", env, seed=seed).model


def small_ppo(env, seed=0):
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=1, seed=seed,
                device="cpu")
    built.append(model)
    return model


class FirstDevices:
    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return np.zeros(3, dtype=np.int64), state


def bare_dqn(env, seed=0):
    return DQN("MlpPolicy", env, seed=seed)


def flat_dqn(env, seed=0):
    return DQN("MlpPolicy", FlatDiscreteActions(env), learning_starts=10, seed=seed)


def unseeded(env):
    return PPO("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=1, device="cpu")


def unseeded_dqn(env):
    return DQN("MlpPolicy", FlatDiscreteActions(env), learning_starts=10, device="cpu")


def its_own_env(env, seed=0):
    return PPO("MlpPolicy", gym.make("envs:InferenceAlloc-v0", episode_tasks=50), seed=seed)


def two_envs(env, seed=0):
    from stable_baselines3.common.vec_env import DummyVecEnv

    other = gym.make("envs:InferenceAlloc-v0", episode_tasks=50)
    return PPO("MlpPolicy", DummyVecEnv([lambda: env, lambda: other]), seed=seed)


first_devices = FirstDevices()


ready = PPO("MlpPolicy", gym.make("envs:InferenceAlloc-v0", episode_tasks=50))
ready_agent = make_sb3("ppo", gym.make("envs:InferenceAlloc-v0", episode_tasks=50))


def our_agent(env, seed):
    """The study's own cold PPO, as make_sb3 builds it (its SB3Agent, not its model)."""
    return make_sb3("ppo", env, seed=seed)


class NoSuchDevice:
    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return np.array([7, 0, 0]), state


def no_gpu(env, seed=0):
    raise RuntimeError("no GPU here")


def unseeded_warm(env):
    """One of our warm learners, built without a seed (its clone's too)."""
    from agents.warmup import WarmupConfig

    return make_sb3("ppo", env, warmup=WarmupConfig(clone_samples=200, clone_epochs=2))


def unseeded_warm_lstm(env):
    from agents.warmup import WarmupConfig

    return make_sb3("recurrent-ppo", env, warmup=WarmupConfig(clone_samples=200, clone_epochs=2))
'''


@pytest.fixture
def mine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with module_in_cwd(LEARNERS, "learners", tmp_path, monkeypatch) as name:
        yield name


def test_a_learner_of_yours_built_as_ours_gets_our_learners_curve(mine: str) -> None:
    study = online_study(["ppo", f"{mine}:as_ours"], seeds=[10000], n_samples=40)
    ours, yours = study.curves["ppo"][0], study.curves[f"{mine}:as_ours"][0]
    assert len(yours) == 40 and np.array_equal(ours, yours)
    np.testing.assert_equal(study.metrics[f"{mine}:as_ours"], study.metrics["ppo"])


def test_one_of_our_agents_built_by_yours_learns_as_ours(mine: str) -> None:
    """make_sb3's SB3Agent has predict(): it was deployed as a fixed policy, an untrained PPO
    acting for the whole stream, in a row that read as a learner of yours."""
    study = online_study(["ppo", f"{mine}:our_agent"], seeds=[10000], n_samples=40)
    assert np.array_equal(study.curves["ppo"][0], study.curves[f"{mine}:our_agent"][0])


def test_a_learner_of_yours_learns_per_stream_and_is_reproducible(mine: str) -> None:
    name = f"{mine}:small_ppo"
    first = online_study([name], seeds=[10000, 10001], n_samples=48)
    built = sys.modules[mine].built
    # one model per stream (and one for the check before the study), each seeded with it
    assert len(built) == 3 and [m.seed for m in built[1:]] == [10000, 10001]
    assert all(m.num_timesteps == 48 and m._n_updates > 0 for m in built[1:])
    again = online_study([name], seeds=[10000, 10001], n_samples=48)
    assert all(np.array_equal(a, b)
               for a, b in zip(first.curves[name], again.curves[name], strict=True))


def test_a_fixed_policy_of_yours_acts_as_it_does_alone(mine: str) -> None:
    name = f"{mine}:FirstDevices"
    study = online_study([name], seeds=[10000], n_samples=30)
    env = make_env(episode_tasks=30, reward="relative", price_static=True)
    alone = run_policy(sys.modules[mine].FirstDevices(), env, 30, 10000)
    assert np.array_equal(study.curves[name][0], alone)


def test_a_fixed_policy_object_of_yours_acts_as_its_class_does(mine: str) -> None:
    """A module-level instance (no signature to read a seed from) is deployed as it is."""
    study = online_study([f"{mine}:first_devices", f"{mine}:FirstDevices"], seeds=[10000],
                         n_samples=30)
    assert np.array_equal(study.curves[f"{mine}:first_devices"][0],
                          study.curves[f"{mine}:FirstDevices"][0])


def test_a_dqn_of_yours_learns_behind_the_flat_action_wrapper(mine: str) -> None:
    study = online_study([f"{mine}:flat_dqn"], seeds=[10000], n_samples=30)
    assert len(study.curves[f"{mine}:flat_dqn"][0]) == 30
    with pytest.raises(ValueError, match=r"AssertionError: .*MultiDiscrete.*FlatDiscreteActions"):
        online_study([f"{mine}:bare_dqn"], seeds=[10000], n_samples=30)


@pytest.mark.parametrize("attribute, message", [
    ("ready", "is a ready PPO model: the study builds a learner afresh for each stream"),
    ("ready_agent", "is a ready PPO model: the study builds a learner afresh for each stream"),
    ("its_own_env", "its PPO learns on another env than the one it was given"),
    ("two_envs", "its PPO learns on another env than the one it was given"),
    ("NoSuchDevice", "the env refuses its action on a first task"),
    ("smal_ppo", "has no attribute 'smal_ppo' (did you mean 'small_ppo'?)"),
])
def test_what_the_study_cannot_deploy_is_refused_before_anything_runs(
        attribute: str, message: str, mine: str, tmp_path: Path) -> None:
    from agents import reporting

    out = tmp_path / "out"
    cfg = EvalConfig(online=True, online_agents=["best-static", f"{mine}:{attribute}"],
                     online_seeds=1, online_samples=30, out=str(out), progress_bar=False)
    with pytest.raises(ConfigError, match=f"^online agent '{mine}:{attribute}'") as refused:
        reporting.run(cfg, report=lambda _: None)
    assert message in str(refused.value)
    assert not out.exists()


def test_whatever_building_yours_raises_is_one_line_before_the_study_runs(
        mine: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A RuntimeError of your function's own was a traceback; SB3's AssertionError (its
    refusal of the study's actions) keeps its hint."""
    out = tmp_path / "out"
    assert load_main("evaluate.py")(["--online", "--online-agents", "best-static",
                                     f"{mine}:no_gpu", "--online-seeds", "1", "--online-samples",
                                     "30", "--out", str(out), "--no-progress-bar"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"evaluate.py: error: policy '{mine}:no_gpu': building it raised "
                          f"RuntimeError: no GPU here ({tmp_path / mine}.py, line ")
    assert err.count("\n") == 1 and not out.exists()
    with pytest.raises(ValueError, match=rf"^online agent '{mine}:bare_dqn': building it raised "
                                         r"AssertionError: .*FlatDiscreteActions\(env\), as "
                                         r"ours does$"):
        online_study([f"{mine}:bare_dqn"], seeds=[10000], n_samples=30)


def test_each_agent_of_yours_is_checked_before_anything_runs(mine: str) -> None:
    """Not only the first of yours: a bad one after a good one is refused before the good
    one's streams run."""
    deployed = []
    import agents.online as online

    real = online.deploy

    def spy(*args, **kwargs):
        deployed.append(args[0])
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(online, "deploy", spy)
        with pytest.raises(ValueError, match=f"^online agent '{mine}:ready' is a ready PPO"):
            online_study([f"{mine}:FirstDevices", f"{mine}:ready"], seeds=[10000],
                         n_samples=30)
    assert deployed == []


def test_the_cli_takes_yours_and_still_names_the_nearest_of_ours(tmp_path: Path) -> None:
    EvalConfig(online=True, online_agents=["ppo", "mine:Learner", "pkg.mod:make.learner"],
               out=str(tmp_path / "o")).validate()
    with pytest.raises(ConfigError, match=r"got 'trpo-wram' \(did you mean 'trpo-warm'\?\); or "
                                          r"one of yours as <module>:<attribute>"):
        EvalConfig(online=True, online_agents=["trpo-wram"], out=str(tmp_path / "o")).validate()


def test_a_learner_of_continuous_actions_is_not_sent_to_the_dqn_wrapper(
        mine: str, tmp_path: Path) -> None:
    """SAC refused the study's MultiDiscrete actions, and the hint sent it behind
    FlatDiscreteActions, whose one Discrete action SAC refuses too: it acts in the Split env."""
    (tmp_path / "continuous.py").write_text(
        "from stable_baselines3 import SAC\n\n\ndef sac(env, seed=0):\n"
        "    return SAC('MlpPolicy', env, seed=seed)\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"AssertionError: .*Box.*MultiDiscrete") as refused:
        online_study(["continuous:sac"], seeds=[10000], n_samples=30)
    assert "FlatDiscreteActions" not in str(refused.value)
    assert str(refused.value).endswith("a learner of continuous actions (SAC) acts in "
                                       "InferenceAllocSplit-v0 alone, which the study does "
                                       "not run")


@pytest.mark.parametrize("learner", ["unseeded", "unseeded_dqn"])
def test_a_learner_of_yours_without_a_seed_learns_the_same_in_every_study(mine: str,
                                                                          learner: str) -> None:
    """Its PPO drew its weights and minibatches from the global generators as they happened to
    be (numpy's from the OS), so its row differed from one study to the next. The study seeds
    them with the stream's seed before building it, as SB3 does for a seed it is given, and
    the model's action space too (DQN's exploration draws from it, seeded from the OS): the
    same curve whatever state the generators were in before, and the next stream's differs."""
    import random

    curves = []
    for disturbance in (1, 2):
        random.seed(disturbance)
        np.random.seed(disturbance)
        torch.manual_seed(disturbance)
        study = online_study([f"{mine}:{learner}"], seeds=[10000, 10001], n_samples=40)
        curves.append(study.curves[f"{mine}:{learner}"])
    assert all(np.array_equal(a, b) for a, b in zip(*curves, strict=True))
    assert not np.array_equal(*curves[0])       # the streams differ, so does what it learns


@pytest.mark.parametrize("learner", ["unseeded_warm", "unseeded_warm_lstm"])
def test_a_warm_learner_of_ours_built_by_yours_without_a_seed_clones_the_same_in_every_study(
        mine: str, learner: str) -> None:
    """make_sb3 without a seed, its warm-up's clone included: the clone drew its minibatches'
    order from the OS (numpy's default_rng(None)), so its weights, and its row, differed from
    one study to the next, though the study seeds the global generators before building it."""
    import random

    from agents.own_online_agents import build_own_agent

    weights = []
    for disturbance in (1, 2):
        random.seed(disturbance)
        np.random.seed(disturbance)
        torch.manual_seed(disturbance)
        env = make_env(episode_tasks=40, reward="relative", price_static=True)
        agent, learns = build_own_agent(f"{mine}:{learner}", env, seed=10000)
        assert learns and agent.clone_stats
        weights.append([p.detach().clone() for p in agent.model.policy.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*weights, strict=True))


def test_a_learner_of_yours_without_a_seed_needs_no_note_before_the_study(mine: str,
                                                                          tmp_path: Path) -> None:
    """A note said its row differed from one study to the next (its action space's draws,
    seeded from the OS); the study now seeds those too, so there is nothing to announce."""
    from agents import reporting

    lines: list[str] = []
    reporting.run(EvalConfig(online=True, online_agents=[f"{mine}:unseeded_dqn",
                                                         f"{mine}:small_ppo",
                                                         f"{mine}:FirstDevices"],
                             online_seeds=1, online_samples=20, out=str(tmp_path / "out"),
                             progress_bar=False), report=lines.append)
    assert not [line for line in lines if line.startswith("note: online agent")]
    study = (tmp_path / "out" / "stabilization.md").read_text(encoding="utf-8")
    assert ":unseeded\\_dqn | " in study       # its row, the name escaped for markdown


def test_evaluate_py_builds_an_agent_of_yours_once_for_its_check_and_once_per_stream(
        mine: str, tmp_path: Path) -> None:
    """evaluate.py checks your agents before its evaluation, and the study checked them again:
    a model built (or loaded) once more for nothing. The study now trusts the caller's check."""
    from agents import reporting

    reporting.run(EvalConfig(online=True, online_agents=[f"{mine}:small_ppo"], online_seeds=2,
                             online_samples=20, out=str(tmp_path / "out"), progress_bar=False),
                  report=lambda line: None)
    # the check's, then each stream's
    assert [m.seed for m in sys.modules[mine].built] == [0, 10000, 10001]
