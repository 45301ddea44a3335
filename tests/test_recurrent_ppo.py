"""RecurrentPPO (``recurrent-ppo``): sb3-contrib's PPO with an LSTM policy, in both envs, cold
only. Its LSTM state must reach it from one decision to the next wherever it acts (evaluation,
the online rollout), its saved model load and resume, and every warm-up be refused before any
training."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs
from agents.config import ConfigError, EvalConfig, TrainConfig
from agents.evaluation import episode_latencies
from agents.registry import load_policy
from agents.sb3_factory import make_sb3, saved_model_info
from agents.sb3_hyperparams import hyperparams_with
from agents.training import RunSpec
from agents.warmup import WarmupConfig

V0, SPLIT = envs.ENV_IDS
SMALL = {"n_steps": 8, "batch_size": 8, "n_epochs": 2}     # an update every 8 tasks


def _env(env_id: str = V0, tasks: int = 40) -> gym.Env:
    return gym.make(f"envs:{env_id}", episode_tasks=tasks, reward="relative")


def _trained(env: gym.Env, seed: int = 0, steps: int = 32, **overrides: Any) -> Any:
    agent = make_sb3("recurrent-ppo", env, seed=seed, overrides={**SMALL, **overrides})
    agent.learn(steps)
    return agent


# After tens of steps SB3's orthogonal init (the action head at gain 0.01) leaves the discrete
# argmax the same whatever the LSTM state (no action of 60 changed), and the Split env's small
# moves of the Gaussian's mean round to the same whole sequences: these let the state show in
# what the policy does, as it does in a policy trained for thousands of steps.
SHOWS_STATE = {V0: {"policy_kwargs": {"ortho_init": False}}, SPLIT: {"learning_rate": 1e-2}}


class _Forgetful:
    """`policy` handed no state: every decision an episode's first, as the evaluation loops
    acted before StreamActor."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        return self.policy.predict(observation, None, np.array([True]), deterministic)


class _Recording:
    """`policy`, recording each action it gives."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.actions: list[np.ndarray] = []

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> tuple[np.ndarray, Any]:
        action, state = self.policy.predict(observation, state, episode_start, deterministic)
        self.actions.append(np.asarray(action).copy())
        return action, state


@pytest.mark.parametrize("env_id", [V0, SPLIT])
def test_recurrent_ppo_trains_in_either_env_and_loads_back_to_the_same_sequence(
        env_id: str, tmp_path: Path) -> None:
    """In the device-id env (MultiDiscrete) and the Split env (Box): each rollout updates the
    LSTM and the heads, and the saved zip is a RecurrentPPO that, handed its own state back,
    acts along a sequence as the trained one did, in the env's actions."""
    from sb3_contrib import RecurrentPPO

    env = _env(env_id)
    agent = make_sb3("recurrent-ppo", env, seed=0, overrides=SMALL)
    lstm = agent.model.policy.lstm_actor
    before = {key: value.clone() for key, value in lstm.state_dict().items()}
    agent.learn(3 * SMALL["n_steps"])
    assert agent.model._n_updates == 3 * SMALL["n_epochs"]
    moved = [key for key, value in lstm.state_dict().items() if not torch.equal(value, before[key])]
    assert moved            # the LSTM itself learned, not only the heads after it
    path = agent.save(tmp_path / "rppo")
    assert saved_model_info(path) == ("recurrent-ppo", env_id)
    loaded = load_policy(path, env)
    assert loaded.name == "recurrent-ppo" and isinstance(loaded.model, RecurrentPPO)
    obs, _ = env.reset(seed=3)
    states: list[Any] = [None, None]
    start = np.array([True])
    for _ in range(10):
        a, states[0] = agent.predict(obs, states[0], start)
        b, states[1] = loaded.predict(obs, states[1], start)
        np.testing.assert_array_equal(a, b)
        assert env.action_space.contains(np.asarray(a, dtype=env.action_space.dtype))
        obs, *_ = env.step(a)
        start = np.array([False])
    np.testing.assert_array_equal(states[0][0], states[1][0])     # the LSTM's hidden state


@pytest.mark.parametrize("env_id", [V0, SPLIT])
def test_evaluation_carries_the_lstm_state_and_repeats_from_the_same_seed(env_id: str) -> None:
    """An evaluation episode hands the policy the state its last predict() returned: its
    actions and latencies differ from those of the same policy handed none each task (every
    decision an episode's first). The same training seed gives the same model, and the same
    stream the same latencies; another training seed another model."""
    def trained(seed: int = 0) -> Any:
        return _trained(_env(env_id, tasks=60), seed=seed, **SHOWS_STATE[env_id])

    env = _env(env_id, tasks=60)
    agent = trained()
    carried, forgetful = _Recording(agent), _Recording(_Forgetful(agent))
    with_state = episode_latencies(carried, env, seed=10000)
    without = episode_latencies(forgetful, env, seed=10000)
    assert len(with_state) == len(without) == 60
    np.testing.assert_array_equal(carried.actions[0], forgetful.actions[0])   # both start cold
    assert not np.array_equal(np.stack(carried.actions), np.stack(forgetful.actions))
    assert not np.array_equal(with_state, without)
    np.testing.assert_array_equal(with_state, episode_latencies(trained(), env, seed=10000))
    assert not np.array_equal(with_state, episode_latencies(trained(seed=1), env, seed=10000))


def test_the_online_rollout_carries_the_lstm_state() -> None:
    """agents.online's fixed-policy rollout (a trained model deployed without learning) hands
    the state on as evaluation does: its curve is the one of a policy that keeps it."""
    from agents.online import run_policy

    env = _env(tasks=60)
    agent = _trained(env, **SHOWS_STATE[V0])
    online = run_policy(agent, env, 60, seed=10001)
    np.testing.assert_array_equal(online, episode_latencies(agent, env, seed=10001))
    assert not np.array_equal(online, run_policy(_Forgetful(agent), env, 60, seed=10001))


@pytest.mark.parametrize("parts", ["all", "clone", "conservative", "conservative,guard"])
def test_every_warm_up_is_refused_for_recurrent_ppo_with_what_to_do(parts: str) -> None:
    """The warm-up's cloning fits one observation at a time, and its conservative phase (and
    the guard it needs) replaces actions in a forward() the LSTM policy does not have: each
    part is refused, by make_sb3 and by train.py's plan where recurrent-ppo would have no cold
    run, saying to train it cold. Beside a cold run, its warm ones are left out, with a note,
    and the other agents keep theirs."""
    from agents.training import plan

    warmup = WarmupConfig.from_parts(parts, clone_samples=20, clone_epochs=1)
    with pytest.raises(ValueError, match=r"recurrent-ppo takes no warm-up .*--warmup none$"):
        make_sb3("recurrent-ppo", _env(), seed=0, warmup=warmup)
    with pytest.raises(ConfigError, match=rf"recurrent-ppo takes no warm-up \(--warmup {parts}\)"
                                          r": its LSTM policy .*train it cold, with --warmup none"):
        plan(TrainConfig(agents=["ppo", "recurrent-ppo"], warmup=[parts]))
    notes: list[str] = []
    specs = plan(TrainConfig(agents=["ppo", "recurrent-ppo"], warmup=["none", parts],
                             seeds=[0, 1]), note=notes.append)
    warm = RunSpec("ppo", parts, 0).label
    assert [(s.label, s.seed) for s in specs] == [
        ("ppo", 0), (warm, 0), ("recurrent-ppo", 0), ("ppo", 1), (warm, 1), ("recurrent-ppo", 1)]
    assert notes == [f"note: recurrent-ppo takes no warm-up: its runs with --warmup {parts} are "
                     f"left out, its cold runs train"]


def test_the_warm_up_is_refused_before_any_run_is_made(tmp_path: Path) -> None:
    """train.py's default --warmup none all trains its cold run, saying that the warm one is
    left out; --warmup all alone is refused before any run, so no run folder is left behind."""
    from agents.training import train

    lines: list[str] = []
    config = TrainConfig(agents=["recurrent-ppo"], timesteps=16, episode_tasks=20,
                         hp=dict(SMALL), log_dir=str(tmp_path), checkpoint_interval=0,
                         eval_tasks=0, eval_interval=0, progress_bar=False)
    (result,) = train(config, report=lines.append)
    assert result.spec.label == "recurrent-ppo" and result.steps == 16
    assert lines[0] == ("note: recurrent-ppo takes no warm-up: its runs with --warmup all are "
                        "left out, its cold runs train")
    with pytest.raises(ConfigError, match=r"--warmup all"):
        train(dataclasses.replace(config, warmup=["all"]), report=lines.append)
    assert list(tmp_path.iterdir()) == [result.run_dir]


def test_its_policy_is_the_lstm_one_and_the_others_keep_mlppolicy() -> None:
    assert hyperparams_with("recurrent-ppo", V0, None)["policy"] == "MlpLstmPolicy"
    with pytest.raises(ValueError, match="policy must be MlpLstmPolicy for recurrent-ppo"):
        hyperparams_with("recurrent-ppo", V0, {"policy": "MlpPolicy"})
    with pytest.raises(ValueError, match="policy must be MlpPolicy for ppo"):
        hyperparams_with("ppo", V0, {"policy": "MlpLstmPolicy"})


@pytest.mark.parametrize(("kwargs", "refusal"), [
    ({"lstm_hidden_size": 100_000}, "lstm_hidden_size must be an integer in 1..4096"),
    ({"lstm_hidden_size": 8.5}, "lstm_hidden_size must be an integer in 1..4096"),
    ({"lstm_hidden_size": True}, "lstm_hidden_size must be an integer in 1..4096"),
    ({"lstm_hidden_size": 0}, "lstm_hidden_size must be an integer in 1..4096"),
    ({"n_lstm_layers": 100_000}, "n_lstm_layers must be an integer in 1..8"),
    ({"n_lstm_layers": "2"}, "n_lstm_layers must be an integer in 1..8"),
])
def test_its_lstm_sizes_are_checked_before_the_net_is_built(kwargs: dict[str, Any],
                                                            refusal: str) -> None:
    """The LSTM's sizes went to torch unchecked, as net_arch's widths no longer do: 100,000
    units was a torch traceback ("can't allocate memory"), 100,000 layers ran on without end
    building them, 8.5 units torch's "failed to unpack the object"."""
    with pytest.raises(ValueError, match=f"policy_kwargs.{refusal} for recurrent-ppo"):
        hyperparams_with("recurrent-ppo", V0, {"policy_kwargs": kwargs})


def test_its_lstm_sizes_may_be_the_largest_the_error_names() -> None:
    params = hyperparams_with("recurrent-ppo", V0, {"policy_kwargs": {
        "lstm_hidden_size": 4096, "n_lstm_layers": 8}})
    assert params["policy_kwargs"]["lstm_hidden_size"] == 4096
    assert params["policy_kwargs"]["n_lstm_layers"] == 8
    # another agent's policy takes no LSTM sizes: SB3 refuses the keyword, not a range of ours
    hyperparams_with("ppo", V0, {"policy_kwargs": {"lstm_hidden_size": 100_000}})


def test_a_recurrent_ppo_run_is_evaluated_and_resumed(tmp_path: Path) -> None:
    """train.py's run folder: evaluate.py finds it as recurrent-ppo and scores it beside the
    baselines, and --resume continues its model to the new total."""
    from agents.reporting import discover_models, evaluate_agents
    from agents.training import train

    config = TrainConfig(agents=["recurrent-ppo"], warmup=["none"], timesteps=16,
                         episode_tasks=20, hp=dict(SMALL), log_dir=str(tmp_path / "runs"),
                         checkpoint_interval=0, eval_tasks=0, eval_interval=0,
                         progress_bar=False)
    [result] = train(config, report=lambda line: None)
    assert result.steps == 16
    cfg = EvalConfig(runs=str(tmp_path / "runs"), seeds=1, episodes=1, episode_tasks=10,
                     baselines=["best-static"])
    [entry], _ = discover_models(cfg)
    assert (entry.label, entry.env_id) == ("recurrent-ppo", V0)
    rows = [r.row() for r in evaluate_agents(cfg, [entry], ["article"])]
    assert {r["agent"] for r in rows if r["kind"] == "model"} == {"recurrent-ppo"}
    assert all(np.isfinite(r["mean_latency_s"]) for r in rows)
    [resumed] = train(TrainConfig(resume=str(result.run_dir), timesteps=32, progress_bar=False),
                      {"resume", "timesteps", "progress_bar"}, report=lambda line: None)
    assert resumed.steps == 32
    loaded = load_policy(result.run_dir / "model.zip", _env())
    assert loaded.model.num_timesteps == 32 and loaded.model._n_updates == 4 * SMALL["n_epochs"]


def test_the_online_study_takes_recurrent_ppo_by_name_cold_and_not_by_default() -> None:
    from agents.evaluation import ONLINE_LEARNERS, online_study
    from agents.reporting import DEFAULT_ONLINE, FULL_ONLINE

    assert ONLINE_LEARNERS["recurrent-ppo"] == ("recurrent-ppo", None)
    assert "recurrent-ppo" not in (*DEFAULT_ONLINE, *FULL_ONLINE)
    assert EvalConfig(online=True, online_agents=["recurrent-ppo", "oracle"]).online_agents
    study = online_study(["recurrent-ppo"], [11], n_samples=24)
    [curve] = study.curves["recurrent-ppo"]
    assert len(curve) == 24 and np.all(np.isfinite(curve))
