"""Short Stable-Baselines3 / sb3-contrib training runs on both env ids (smoke tests with teeth)."""

from __future__ import annotations

import re
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.utils import is_masking_supported
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

import envs
from agents.sb3_factory import load_sb3
from envs.inference_alloc_split import BOX_SLACK

V0, SPLIT = envs.ENV_IDS
STEPS = 256
EPISODE_TASKS = 50        # several episodes per run, so auto-resets are exercised too


def make(env_id: str, **kwargs) -> gym.Env:
    return gym.make(f"envs:{env_id}", episode_tasks=EPISODE_TASKS, **kwargs)


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_ppo_trains(env_id: str) -> None:
    env = make(env_id)
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=2, seed=0, device="cpu")
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=STEPS)
    assert model.num_timesteps == STEPS
    # the updates ran on the env's rollouts: every weight matrix moved from its initialisation
    after = list(model.policy.parameters())
    assert all(not torch.equal(b, a) for b, a in zip(before, after, strict=True)
               if b.ndim == 2)
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(np.asarray(action, dtype=env.action_space.dtype))
    *_, info = env.step(action)
    assert info["latency"] > 0


def test_an_all_minus_one_stage_is_an_even_split() -> None:
    """SB3 clips Gaussian samples onto the box's -1 corner; plain PPO used to crash on it."""
    env = make(SPLIT)
    requested = env.unwrapped._requested_shares(   # a batch of 3: one sequence a device
        np.array([1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 0.2, -1.0, 0.5], dtype=np.float32), 3)
    assert requested[0] == ((0, 1.0),)                            # other stages untouched
    assert [d for d, _ in requested[1]] == [0, 1, 2]              # the empty stage: all devices
    assert all(f == pytest.approx(1 / 3) for _, f in requested[1])
    assert [d for d, _ in requested[2]] == [0, 2]                 # a zero weight stays zero
    env.reset(seed=0)
    *_, info = env.step(-np.ones(9, dtype=np.float32))
    assert info["latency"] > 0


def test_plain_ppo_survives_the_corner_of_the_split_box() -> None:
    """Drive PPO onto the corner: its mean far below -1 makes every clipped sample -1."""
    env = make(SPLIT)
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    with torch.no_grad():
        model.policy.action_net.bias.fill_(-5.0)
        model.policy.action_net.weight.zero_()
    model.learn(total_timesteps=64)
    assert model.num_timesteps == 64


def test_split_env_reads_float32_rounding_past_its_box_as_the_bound() -> None:
    """RescaleAction maps its own bounds to +-1.0000001 in float32: such an entry is the bound,
    so PPO trained through the wrapper runs; an entry clearly past the box is still refused."""
    env = gym.wrappers.RescaleAction(make(SPLIT), np.float32(0.1), np.float32(0.3))
    wrapped = np.tile(np.array([0.3, 0.1, 0.1], dtype=np.float32), 3)   # its bounds: all on one
    edge = env.action(wrapped)
    assert edge.min() < -1.0 or edge.max() > 1.0                  # the rounding this is about
    base = env.unwrapped
    assert base._requested_shares(edge, 8) == base._requested_shares(np.tile([1.0, -1.0, -1.0], 3), 8)
    env.reset(seed=0)
    *_, info = env.step(wrapped)
    assert info["latency"] > 0
    # the slack is inclusive: an entry past the box by exactly BOX_SLACK is still the bound
    at_slack = np.tile([1.0 + BOX_SLACK, -1.0 - BOX_SLACK, -1.0 - BOX_SLACK], 3)
    assert base._requested_shares(at_slack, 8) == base._requested_shares(np.tile([1.0, -1.0, -1.0], 3), 8)
    with pytest.raises(ValueError, match=r"must lie in \[-1, 1\]"):
        base._requested_shares(np.full(9, -1.001), 8)


# MaskablePPO needs a discrete action space, so it runs on InferenceAlloc-v0 only: the Split
# env's Box actions are not supported by sb3-contrib's masking.
def test_maskable_ppo_trains_and_respects_masks(tmp_path: Path) -> None:
    env = make(V0)
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=2, seed=0,
                        device="cpu")
    assert is_masking_supported(model.get_env())    # the masks reach the rollouts
    model.learn(total_timesteps=STEPS)
    assert model.num_timesteps == STEPS

    # On tasks the NPU cannot hold, a masked prediction never picks it for prefill or decode.
    path = tmp_path / "big.yaml"
    path.write_text(textwrap.dedent("""\
        name: big
        hardware: server
        episode_tasks: 20
        workload: {arrival_rate: 0.05, batch: 32, prompt_tokens: 8192, output_tokens: 4096}
        """), encoding="utf-8")
    big = gym.make(f"envs:{V0}", scenario=str(path))
    npu = big.unwrapped.device_names.index("npu")
    obs, _ = big.reset(seed=0)
    for _ in range(20):
        masks = big.unwrapped.action_masks()
        assert not masks[3 + npu] and not masks[6 + npu]
        action, _ = model.predict(obs, action_masks=masks, deterministic=False)
        assert action[1] != npu and action[2] != npu
        obs, _, _, _, info = big.step(action)
        assert info["failed_dispatch"] == 0


@pytest.mark.parametrize(("data", "match"), [
    # valid JSON but not an object: used to raise AttributeError ('list' has no .get)
    (b"[1, 2, 3]", "is not a Stable-Baselines3 model zip .*JSON list, not an object"),
    (b'"ppo"', "is not a Stable-Baselines3 model zip .*JSON str, not an object"),
    (b"\x80 not utf-8", "is not a Stable-Baselines3 model zip"),   # was UnicodeDecodeError
    (b'{"infer_agent": "ppo", ', "is not a Stable-Baselines3 model zip"),   # cut-off JSON
    (None, "is not a Stable-Baselines3 model zip"),      # some other zip: no 'data' entry
    (b'{"infer_agent": ["ppo"]}', "does not say which agent it holds"),  # was TypeError
    # saved by SB3 itself with a policy none of ours is: the learners it may be listed
    (b'{"policy_class": {"__module__": "mine.policies"}}', "does not say which agent it holds: "
     "it has no infer_agent entry, and its policy is not one of SB3's PPO, A2C, DQN, SAC or "
     "sb3-contrib's MaskablePPO, TRPO or RecurrentPPO"),
])
def test_a_corrupt_model_zip_is_a_value_error_naming_the_file(
        tmp_path: Path, data: bytes | None, match: str) -> None:
    path = tmp_path / "model.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("data" if data is not None else "notes.txt", data or b"not a model")
    with pytest.raises(ValueError, match=f"model file {re.escape(str(path))} {match}"):
        load_sb3(path)


@pytest.mark.parametrize(("algo", "env_id", "name"), [
    ("PPO", V0, "ppo"), ("A2C", SPLIT, "a2c"), ("DQN", V0, "dqn"), ("MaskablePPO", V0, "maskable-ppo"),
    # TRPO's policy is SB3's ActorCriticPolicy, as PPO's and A2C's: told apart by its settings
    ("TRPO", V0, "trpo"), ("TRPO", SPLIT, "trpo"),
    # RecurrentPPO's LSTM policy is sb3-contrib's own class, told by its module
    ("RecurrentPPO", V0, "recurrent-ppo"), ("RecurrentPPO", SPLIT, "recurrent-ppo"),
])
def test_a_zip_saved_by_sb3_itself_is_recognised_and_evaluated(
        tmp_path: Path, algo: str, env_id: str, name: str) -> None:
    """A model saved with SB3's own save() has no infer_agent: its algorithm and env come
    from the policy class and action space SB3 records (evaluate.py --models used to refuse it,
    and ran a Split model on InferenceAlloc-v0)."""
    from sb3_contrib import TRPO, RecurrentPPO
    from stable_baselines3 import A2C, DQN

    from agents.config import EvalConfig
    from agents.model_discovery import discover_models
    from agents.sb3_factory import FlatDiscreteActions, saved_model_info

    classes = {"PPO": PPO, "A2C": A2C, "DQN": DQN, "MaskablePPO": MaskablePPO, "TRPO": TRPO,
               "RecurrentPPO": RecurrentPPO}
    env = make(env_id)
    sb3_env = FlatDiscreteActions(env) if algo == "DQN" else env
    policy = "MlpLstmPolicy" if algo == "RecurrentPPO" else "MlpPolicy"
    classes[algo](policy, sb3_env, device="cpu", seed=0).save(tmp_path / "plain.zip")
    assert saved_model_info(tmp_path / "plain.zip") == (name, env_id)
    [entry], _ = discover_models(EvalConfig(models=[str(tmp_path / "plain.zip")]))
    assert entry.env_id == env_id
    agent = load_sb3(tmp_path / "plain.zip", make(env_id))
    obs, _ = agent.env.reset(seed=0)
    action, _ = agent.predict(obs)
    assert agent.env.action_space.contains(np.asarray(action, dtype=agent.env.action_space.dtype))


def test_a_model_zip_with_corrupt_weights_is_a_value_error_naming_the_file(tmp_path: Path) -> None:
    """Its `data` entry names a PPO; SB3's load then fails on the weights, with its own error."""
    from agents.sb3_factory import make_sb3

    good = make_sb3("ppo", make(V0), seed=0).save(tmp_path / "good")
    path = tmp_path / "model.zip"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w") as dst:
        for item in src.namelist():
            dst.writestr(item, b"not torch" if item == "policy.pth" else src.read(item))
    with pytest.raises(ValueError, match=f"model file {re.escape(str(path))} could not be "
                                         f"loaded as ppo"):
        load_sb3(path, make(V0))


def test_a_model_zip_without_an_observation_space_is_a_value_error_with_an_env_too(
        tmp_path: Path) -> None:
    """The device-count check reads the saved observation space; without one it leaves the
    refusal to SB3's load, which load_sb3 turns into a ValueError naming the file."""
    path = tmp_path / "model.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("data", b'{"infer_agent": "ppo"}')
    with pytest.raises(ValueError, match=f"model file {re.escape(str(path))} could not be "
                                         f"loaded as ppo"):
        load_sb3(path, make(V0))


def test_a_zip_of_an_unknown_algorithm_says_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "model.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("data", b'{"policy_class": {"__module__": "stable_baselines3.td3.policies"}}')
    with pytest.raises(ValueError, match="has no infer_agent entry, and its policy is not one of"):
        load_sb3(path)


@pytest.mark.parametrize("verbose", [0, 1])
def test_learning_leaves_no_folder_in_the_temp_dir(tmp_path: Path, monkeypatch, capsys,
                                                  verbose: int) -> None:
    """SB3's default logger made an empty SB3-<date> folder per learn() (deploy, the article job)."""
    import tempfile

    from agents.sb3_factory import make_sb3

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    agent = make_sb3("ppo", make(V0), seed=0, overrides={"n_steps": 64, "batch_size": 64},
                     verbose=verbose)
    agent.learn(64)
    assert agent.model.num_timesteps == 64
    assert [p.name for p in tmp_path.glob("SB3-*")] == []
    # verbose still reaches the console, as SB3's own logger would print it
    assert ("total_timesteps" in capsys.readouterr().out) == bool(verbose)


class _ChecksSeen:
    """Whether torch checked distributions' arguments at each call of `method` on `obj`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, obj, method: str) -> None:
        from torch.distributions import Distribution

        self.seen: list[bool] = []
        original = getattr(obj, method)

        def recording(*args, **kwargs):
            self.seen.append(bool(Distribution._validate_args))
            return original(*args, **kwargs)

        monkeypatch.setattr(obj, method, recording)


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_agents_learn_and_predict_without_torchs_distribution_checks(
        env_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch checked every distribution's arguments and samples as PPO built and scored them
    (a Categorical per stage each step), ~10% of a learn(); the checks only raise. Our agents
    run without them, and the caller's setting is back after."""
    from torch.distributions import Distribution

    from agents.sb3_factory import make_sb3

    agent = make_sb3("ppo", make(env_id), seed=0, overrides={"n_steps": 64, "batch_size": 64})
    during_learn = _ChecksSeen(monkeypatch, agent.model, "train")
    during_predict = _ChecksSeen(monkeypatch, agent.model, "predict")
    for caller in (True, False):
        Distribution.set_default_validate_args(caller)
        try:
            agent.learn(64)
            agent.predict(make(env_id).reset(seed=0)[0])
            assert Distribution._validate_args is caller
        finally:
            Distribution.set_default_validate_args(True)
    assert during_learn.seen == [False, False] and during_predict.seen == [False, False]


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_learning_without_the_distribution_checks_gives_sb3s_own_weights_and_actions(
        env_id: str) -> None:
    """The checks only raise: SB3's own learn() and predict(), checks on, reach the same bits."""
    from torch.distributions import Distribution

    from agents.sb3_factory import make_sb3

    def built():   # seeds torch's global generator, which learn() then draws from
        return make_sb3("ppo", make(env_id), seed=0, overrides={"n_steps": 64, "batch_size": 64})

    ours = built().learn(128)
    assert Distribution._validate_args is True
    sb3s = built()
    sb3s.model.learn(128)
    for a, b in zip(ours.model.policy.parameters(), sb3s.model.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    obs = np.stack([make(env_id).reset(seed=s)[0] for s in range(8)])
    sampled = []
    for predict in (ours.predict, sb3s.model.predict):
        torch.manual_seed(1)           # the samples' draws, the same for both
        sampled.append(predict(obs, deterministic=False)[0])
    np.testing.assert_array_equal(*sampled)


def test_a_policy_kwargs_override_merges_into_the_yamls() -> None:
    """policy_kwargs={net_arch: [8]} used to replace the YAML's dict, dropping activation_fn
    (and on Split log_std_init): the net trained with ReLU unannounced."""
    from agents.sb3_factory import make_sb3

    agent = make_sb3("ppo", make(SPLIT), seed=0, overrides={"policy_kwargs": {"net_arch": [8]}})
    kwargs = agent.model.policy_kwargs
    assert kwargs["net_arch"] == [8] and kwargs["activation_fn"] is torch.nn.Tanh
    assert kwargs["log_std_init"] == -0.5


def test_maskable_ppo_masks_a_batch_of_one_too() -> None:
    """SB3Agent read the env's masks for a 1-D observation only; a (1, d) batch, what a
    DummyVecEnv hands over, picked a masked device on 34 of 70 masked steps."""
    from agents.sb3_factory import make_sb3

    env = gym.make("envs:InferenceAlloc-v0", scenario="faults", episode_tasks=200)
    agent = make_sb3("maskable-ppo", env, seed=0)
    obs, _ = env.reset(seed=0)
    masked_steps = 0
    for _ in range(200):
        masks = env.unwrapped.stage_masks()
        if not masks.all():
            masked_steps += 1
            for _ in range(5):                     # stochastic: a mask, not luck, keeps it off
                action, _ = agent.predict(obs[None], deterministic=False)
                assert all(masks[s, d] for s, d in enumerate(np.asarray(action).reshape(-1)))
        obs, _, _, truncated, _ = env.step(agent.predict(obs)[0])
        if truncated:
            break
    assert masked_steps > 10


@pytest.mark.filterwarnings("ignore::envs.inference_alloc.UnreachedFaultWarning")    # the first fault only
def test_a_maskable_agent_evaluated_on_another_env_is_masked_by_that_env() -> None:
    """episode_latencies and the online rollout let a maskable-ppo agent read the masks of the
    env it was built on, not of the env stepped: 40 failed dispatches in a faults episode, and
    "call reset() before action_masks()" where its own env was never reset."""
    from agents.evaluation import episode_latencies
    from agents.online import rollout
    from agents.sb3_factory import make_sb3

    def faults() -> gym.Env:
        return gym.make("envs:InferenceAlloc-v0", scenario="faults", episode_tasks=100)

    agent = make_sb3("maskable-ppo", faults(), seed=0)     # its own env, never reset
    stepped = faults()
    failed = []
    real_step = stepped.unwrapped.step

    def step(action):
        out = real_step(action)
        failed.append(out[-1]["failed_dispatch"])
        return out

    stepped.unwrapped.step = step
    assert len(episode_latencies(agent, stepped, seed=10000)) == 100
    masked = faults().unwrapped
    masked.reset(seed=10000)
    masked_steps = 0
    for _ in range(100):                        # the episode does mask devices
        masked_steps += not masked.stage_masks().all()
        masked.step(np.array([1, 1, 1]))
    assert masked_steps > 10
    assert sum(failed) == 0
    failed.clear()
    rollout(agent, stepped, 100, seed=10000)
    assert sum(failed) == 0


def test_a_dqn_loaded_without_an_env_answers_in_device_ids(tmp_path: Path) -> None:
    from agents.sb3_factory import make_sb3

    env = make(V0)
    agent = make_sb3("dqn", env, seed=0)
    obs, _ = env.reset(seed=0)
    path = agent.save(tmp_path / "dqn")
    loaded = load_sb3(path)                           # no env: flat ids used to come back
    assert np.asarray(loaded.predict(obs)[0]).tolist() == np.asarray(agent.predict(obs)[0]).tolist()
    assert np.asarray(loaded.predict(obs)[0]).shape == (3,)
    with pytest.raises(ValueError, match="holds an SB3 DQN model, which acts in InferenceAlloc-v0"):
        load_sb3(path, make(SPLIT))                   # was: 'Box' object has no attribute 'nvec'


def test_a_dqn_loaded_without_an_env_maps_every_flat_action_to_its_device_ids(
        tmp_path: Path) -> None:
    """Without an env, D follows from the saved Discrete(D**3) as its cube root: an untrained
    DQN picks flat action 2, which reads (0, 0, 2) under any D, so each action is planted."""
    from agents.sb3_factory import make_sb3

    env = make(V0)
    loaded = load_sb3(make_sb3("dqn", env, seed=0).save(tmp_path / "dqn"))
    obs, _ = env.reset(seed=0)
    last = loaded.model.q_net.q_net[-1]
    nvec = env.action_space.nvec
    for flat in range(int(np.prod(nvec))):
        with torch.no_grad():
            last.weight.zero_()
            last.bias.copy_(torch.eye(last.out_features)[flat])
        assert loaded.predict(obs)[0].tolist() == list(np.unravel_index(flat, nvec)), flat


def test_dqns_flat_actions_and_device_ids_round_trip() -> None:
    from agents.sb3_factory import FlatDiscreteActions

    wrapped = FlatDiscreteActions(make(V0))
    assert wrapped.action_space.n == int(np.prod(wrapped.nvec))
    assert [wrapped.flatten(wrapped.action(k)) for k in range(wrapped.action_space.n)] == list(
        range(wrapped.action_space.n))


def test_dqns_flat_actions_refuse_an_env_without_device_id_actions() -> None:
    """docs/EXTENDING.md's "build it on FlatDiscreteActions(env)" read into make_sb3("dqn", ...),
    which wraps its env itself, and the Split env: "AttributeError: 'Discrete' object has no
    attribute 'nvec'"."""
    from agents.sb3_factory import FlatDiscreteActions, make_sb3

    start = r"^FlatDiscreteActions flattens the device ids of InferenceAlloc-v0 \(a MultiDiscrete action space\), got an env of "
    with pytest.raises(ValueError, match=start + r"Discrete\(27\); a wrapper has flattened them already "
                                               r"\(make_sb3\('dqn', env\) adds FlatDiscreteActions itself"):
        make_sb3("dqn", FlatDiscreteActions(make(V0)), seed=0)
    with pytest.raises(ValueError, match=start + r"Box\(-1\.0, 1\.0, \(9,\), float32\)$"):
        FlatDiscreteActions(make(SPLIT))


@pytest.mark.parametrize("action", [2.7, True, "5", 27, -1, np.int64(27), float("nan"),
                                    np.array([5]), None])
def test_dqns_flat_actions_refuse_what_is_no_flat_action_in_one_line(action: Any) -> None:
    """int() read 2.7 as 2, True as 1 and "5" as 5, each placed without a word, and numpy's
    "index 27 is out of bounds for array with size 27" named no action."""
    from agents.sb3_factory import FlatDiscreteActions

    wrapped = FlatDiscreteActions(make(V0))
    wrapped.reset(seed=0)
    with pytest.raises(ValueError, match=r"^action must be an integer in 0\.\.26 \(DQN's "
                                         r"Discrete\(27\): a device id per stage, flattened\), "
                                         r"got "):
        wrapped.step(action)
    # what SB3's predict and vector envs hand it, and a float that is one, as the env takes
    for flat in (5, np.int64(5), np.array(5), np.uint8(5), 5.0):
        assert wrapped.action(flat).tolist() == [0, 1, 2]


def test_an_env_built_from_its_class_gets_its_own_envs_hyperparameters() -> None:
    """No gym.make, so no spec: the class tells the env id (DQN acts in InferenceAlloc-v0 only)."""
    from agents.sb3_factory import env_id_of, make_sb3
    from agents.sb3_hyperparams import hyperparams_with

    assert env_id_of(envs.InferenceAllocEnv()) == V0
    assert env_id_of(envs.InferenceAllocSplitEnv()) == SPLIT
    assert env_id_of(DummyVecEnv([lambda: make(SPLIT)])) == SPLIT     # its first sub-env's
    agent = make_sb3("dqn", envs.InferenceAllocEnv(episode_tasks=EPISODE_TASKS), seed=0)
    assert agent.hyperparams == hyperparams_with("dqn", V0, None)


def test_an_agent_is_silent_unless_asked_to_be_verbose(capsys: pytest.CaptureFixture) -> None:
    """SB3 at verbose=1 prints "Using cpu device" on building and a table per rollout."""
    from agents.sb3_factory import make_sb3

    make_sb3("ppo", make(V0), seed=0)
    assert capsys.readouterr().out == ""
    make_sb3("ppo", make(V0), seed=0, verbose=1)
    assert "cpu" in capsys.readouterr().out


def test_loading_reads_the_zips_data_entry_once(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """load_sb3 with an env reads the zip's JSON `data` once for the agent, env id and device
    count (it used to parse it twice before SB3's own load)."""
    from agents import sb3_factory

    agent = sb3_factory.make_sb3("ppo", make(V0), seed=0)
    path = agent.save(tmp_path / "ppo")
    calls: list[Path] = []
    real = sb3_factory.saved_data

    def counted(p: Path) -> dict:
        calls.append(p)
        return real(p)

    monkeypatch.setattr(sb3_factory, "saved_data", counted)
    assert sb3_factory.load_sb3(path, make(V0)).name == "ppo"
    assert calls == [path]


def test_an_sb3_save_leaves_only_the_final_zip_and_a_failed_one_the_old_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SB3 appends ".zip" to a path without a suffix: the temp file must not get one, or it
    would be written beside the name that is renamed (and left behind)."""
    from agents.sb3_factory import make_sb3

    agent = make_sb3("ppo", make(V0), seed=0)
    folder = tmp_path / "new"                         # made by the save
    path = agent.save(folder / "ppo.v1")
    assert path == folder / "ppo.v1.zip"
    assert [p.name for p in folder.iterdir()] == ["ppo.v1.zip"]
    assert load_sb3(path).name == "ppo"
    saved = path.read_bytes()

    def crash_mid_write(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash_mid_write)   # after SB3 opened its zip
    with pytest.raises(OSError, match="disk full"):
        agent.save(path)
    assert [p.name for p in folder.iterdir()] == ["ppo.v1.zip"]
    assert path.read_bytes() == saved                 # left as it was


def test_a_model_loaded_with_the_other_envs_actions_names_the_env_it_acts_in(
        tmp_path: Path) -> None:
    """A Split-env PPO given InferenceAlloc-v0 was SB3's "Action spaces do not match"."""
    from agents.registry import load_policy
    from agents.sb3_factory import make_sb3

    path = make_sb3("ppo", make(SPLIT), seed=0).save(tmp_path / "split")
    with pytest.raises(ValueError, match=f"model file {re.escape(str(path))} holds an SB3 PPO model, which "
                                         f"acts in {SPLIT}; this env's actions are MultiDiscrete"
                                         f".*: load it with an {SPLIT} env"):
        load_policy(path, make(V0))


def test_a_model_loaded_on_hardware_of_another_device_count_names_both_counts(
        tmp_path: Path, cpu_npu_hardware: str) -> None:
    """A model trained on a 2-device profile, given the 3-device server (evaluate.py
    --hardware server), was SB3's "Observation spaces do not match: Box(0.0, 1.0, (19,),
    float32) != Box(0.0, 1.0, (26,), float32)", which says nothing of devices."""
    from agents.registry import load_policy
    from agents.sb3_factory import make_sb3

    path = make_sb3("ppo", make(V0, hardware=cpu_npu_hardware), seed=0).save(tmp_path / "two")
    with pytest.raises(ValueError) as info:
        load_policy(path, make(V0))
    message = str(info.value)
    assert message.startswith(f"model file {path} was trained on hardware of 2 devices"), message
    assert "3 (cpu, gpu, npu)" in message, message
    assert load_policy(path, make(V0, hardware=cpu_npu_hardware)).name == "ppo"


def test_a_model_of_another_envs_observations_is_refused_naming_the_file(tmp_path: Path) -> None:
    """A PPO trained on CartPole (4 observation entries, not 5 + 7 D) says which file could not
    be loaded, not only that an observation of 4 entries is no InferenceAlloc one."""
    path = tmp_path / "cartpole.zip"
    PPO("MlpPolicy", gym.make("CartPole-v1"), device="cpu", seed=0).save(path)
    with pytest.raises(ValueError, match=f"model file {re.escape(str(path))} could not be loaded "
                                         f"as ppo: .*Observation spaces do not match"):
        load_sb3(path, make(V0))


# ----------------------------------------------------------------------------- train.py's parts
class _Logger:
    """Stands in for SB3's logger (records its key -> value) and TensorBoard's writer."""

    def __init__(self) -> None:
        self.output_formats: list = []
        self.values: dict[str, float] = {}
        self.scalars: list[tuple[str, float, int]] = []

    def record(self, key: str, value: float, exclude=None) -> None:
        self.values[key] = value

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.append((tag, value, step))

    def flush(self) -> None:
        pass


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> _Logger:
    """A _Logger that the callbacks write their TensorBoard scalars to as well."""
    import agents.callbacks as callbacks

    logger = _Logger()
    monkeypatch.setattr(callbacks, "tensorboard_writer", lambda _: logger)
    return logger


def _one(evaluate, static_mean: float = 2.0) -> list:
    """The episodes of a run on one scenario: `evaluate`'s, whose best-static mean is
    `static_mean`."""
    from agents.callbacks import ScenarioEpisode

    return [ScenarioEpisode("article", evaluate, static_mean)]


def _attach(callback, log: _Logger, num_timesteps: int = 0) -> None:
    """init_callback with a stand-in model: `log` as its logger, at `num_timesteps`."""
    from types import SimpleNamespace

    callback.init_callback(SimpleNamespace(logger=log, num_timesteps=num_timesteps))


def test_latency_metrics_are_the_tables_statistics_over_the_window(log: _Logger) -> None:
    """Four tasks through a window of three: each tag is its statistic of the last three,
    as the callbacks' table defines it; without static latencies no vs_static is written."""
    import agents.callbacks as callbacks

    metrics = callbacks.LatencyMetrics(("cpu", "gpu"), window=3)
    _attach(metrics, log)
    metrics.on_training_start({}, {})
    tasks = [(50.0, 1.0, True, 0.9), (1.0, 2.0, False, 0.2), (2.0, 4.0, True, 0.4),
             (10.0, 4.0, True, 0.6)]               # latency, static latency, cache hit, gpu
    for latency, static, hit, gpu in tasks:
        metrics.model.num_timesteps += 1
        metrics.locals = {"infos": [{"latency": latency, "static_latency": static,
                                     "cache_hit": hit, "utilisation": {"cpu": 1 - gpu, "gpu": gpu},
                                     "share": {"gpu": gpu / 2, "tpu": 1.0}}]}
        metrics.on_step()
    metrics.on_rollout_end()
    v = log.values
    assert v["latency/mean"] == pytest.approx(13 / 3)
    assert v["latency/p95"] == pytest.approx(2 + 0.9 * 8)      # linear, between 2 and 10
    assert v["latency/vs_static"] == pytest.approx(13 / 10)    # totals, not mean of ratios
    assert v["cache/hit_rate"] == pytest.approx(2 / 3)
    assert v["devices/gpu_utilisation"] == pytest.approx(0.4)
    assert v["devices/cpu_utilisation"] == pytest.approx(0.6)
    assert v["devices/gpu_share"] == pytest.approx(0.2)
    assert "devices/cpu_share" not in v and "devices/tpu_share" not in v
    assert [(step, value) for tag, value, step in log.scalars if tag == "latency/per_sample"] \
        == [(i, t[0]) for i, t in enumerate(tasks)]
    log.values.clear()
    metrics.locals = {"infos": [{"latency": 3.0}]}      # no static latency: no ratio
    metrics.model.num_timesteps += 1
    metrics.on_step()
    metrics.on_rollout_end()
    assert "latency/vs_static" not in log.values and log.values["latency/mean"] == 5.0


def test_per_sample_latency_counts_the_samples_of_every_env(log: _Logger) -> None:
    """With a VecEnv of n envs a step is n samples: env i's task of the step that brings
    num_timesteps to T is sample T - n + i, so two envs' steps give samples 0, 1, then 2, 3."""
    import agents.callbacks as callbacks

    metrics = callbacks.LatencyMetrics(("cpu",), window=10)
    _attach(metrics, log)
    metrics.on_training_start({}, {})
    for latencies in ((1.0, 2.0), (3.0, 4.0)):
        metrics.model.num_timesteps += 2
        metrics.locals = {"infos": [{"latency": x} for x in latencies]}
        metrics.on_step()
    assert [(step, value) for tag, value, step in log.scalars if tag == "latency/per_sample"] \
        == [(0, 1.0), (1, 2.0), (2, 3.0), (3, 4.0)]


def test_a_per_sample_interval_writes_every_kth_samples_latency_and_keeps_the_window(
        log: _Logger) -> None:
    """One latency/per_sample point per env step filled most of a long run's events file;
    --per-sample-interval K writes samples 0, K, 2K, ... by index, so two envs' steps and a
    resume (a step count not a multiple of K) keep to the same grid. The windowed tags still
    see every task."""
    import agents.callbacks as callbacks

    metrics = callbacks.LatencyMetrics(("cpu",), window=10, per_sample_interval=3)
    _attach(metrics, log, num_timesteps=4)            # resumed at step 4: next sample is 4
    metrics.on_training_start({}, {})
    latencies = [float(x) for x in range(4, 12)]
    for pair in zip(latencies[::2], latencies[1::2], strict=True):
        metrics.model.num_timesteps += 2
        metrics.locals = {"infos": [{"latency": x} for x in pair]}
        metrics.on_step()
    metrics.on_rollout_end()
    assert [(step, value) for tag, value, step in log.scalars if tag == "latency/per_sample"] \
        == [(6, 6.0), (9, 9.0)]
    assert log.values["latency/mean"] == pytest.approx(np.mean(latencies))
    with pytest.raises(ValueError, match="per_sample_interval must be >= 1"):
        callbacks.LatencyMetrics(("cpu",), per_sample_interval=0)


def test_per_sample_latency_leaves_out_the_indices_the_folder_shows(log: _Logger) -> None:
    """A run resumed at step 4 whose folder shows sample 4 already (the stopped run's, kept by
    the restart marker past 4) writes from sample 5 on: TensorBoard showed 4 twice."""
    import agents.callbacks as callbacks

    metrics = callbacks.LatencyMetrics(("cpu",), window=10, written_through=4)
    _attach(metrics, log, num_timesteps=4)
    metrics.on_training_start({}, {})
    for pair in ((4.0, 5.0), (6.0, 7.0)):
        metrics.model.num_timesteps += 2
        metrics.locals = {"infos": [{"latency": x} for x in pair]}
        metrics.on_step()
    metrics.on_rollout_end()
    assert [(step, value) for tag, value, step in log.scalars if tag == "latency/per_sample"] \
        == [(5, 5.0), (6, 6.0), (7, 7.0)]
    assert log.values["latency/mean"] == pytest.approx(5.5)     # the windows see every task


def test_train_writes_the_per_sample_curve_at_its_interval(tmp_path: Path) -> None:
    from agents.config import TrainConfig
    from agents.plots import read_scalars
    from agents.training import train

    config = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=64, per_sample_interval=16,
                         checkpoint_interval=0, log_dir=str(tmp_path), episode_tasks=20,
                         eval_tasks=0, progress_bar=False,
                         hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1})
    (result,) = train(config, report=lambda line: None)
    assert list(read_scalars(result.run_dir, "latency/per_sample")[0]) == [0, 16, 32, 48]
    assert len(read_scalars(result.run_dir, "latency/mean")[0]) == 4     # a point a rollout


def test_a_log_interval_writes_the_grouped_scalars_every_nth_rollout(tmp_path: Path) -> None:
    """PPO's 16-step rollouts write each grouped tag (SB3's and ours, ~25) every 16 steps:
    ~90 KB of a long run's events file a thousand steps. --log-interval 4 writes them every
    4th rollout, the latest values; latency/per_sample still has every task."""
    from agents.config import TrainConfig
    from agents.plots import read_scalars
    from agents.training import train

    def run(**option: int) -> Path:
        config = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=128,
                             checkpoint_interval=0, log_dir=str(tmp_path / str(option)),
                             episode_tasks=20, eval_tasks=0, progress_bar=False,
                             hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1}, **option)
        return train(config, report=lambda line: None)[0].run_dir

    default, every_4th = run(), run(log_interval=4)
    assert list(read_scalars(default, "latency/mean")[0]) == list(range(16, 129, 16))
    assert list(read_scalars(every_4th, "latency/mean")[0]) == [64, 128]
    assert list(read_scalars(every_4th, "train/value_loss")[0]) == [64, 128]
    # the values at those steps are the default run's (the same training, written less often)
    assert list(read_scalars(every_4th, "latency/mean")[1]) == \
        list(read_scalars(default, "latency/mean")[1][[3, 7]])
    assert len(read_scalars(every_4th, "latency/per_sample")[0]) == 128


def test_a_run_without_a_held_out_episode_writes_its_last_points(tmp_path: Path) -> None:
    """The grouped scalars recorded after the last write (a --log-interval's stretch, A2C's
    100 rollouts, DQN's 4 episodes) are written at the run's last step: the final/ row's write
    took them along, but --eval-tasks 0 writes no final/ row, and the curves ended at the write
    before, short of the model saved (A2C, 2,000 steps: latency/ and train/ ended at 1,600)."""
    from agents.config import TrainConfig
    from agents.plots import read_scalars
    from agents.training import train

    config = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=96, log_interval=4,
                         checkpoint_interval=0, log_dir=str(tmp_path), episode_tasks=20,
                         eval_tasks=0, progress_bar=False,
                         hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1})
    (result,) = train(config, report=lambda line: None)
    for tag in ("latency/mean", "devices/cpu_share", "train/value_loss"):
        assert list(read_scalars(result.run_dir, tag)[0]) == [64, 96], tag


def test_a_step_info_without_a_latency_is_no_sample(log: _Logger) -> None:
    """Only a task's step info carries a latency: an info without one adds nothing to the
    window or the per-sample curve, and a rollout of such steps alone records nothing."""
    import agents.callbacks as callbacks

    metrics = callbacks.LatencyMetrics(("cpu",), window=10)
    _attach(metrics, log)
    metrics.on_training_start({}, {})
    metrics.model.num_timesteps = 2
    metrics.locals = {"infos": [{"latency": 3.0}, {}]}
    metrics.on_step()
    metrics.on_rollout_end()
    assert [(step, value) for tag, value, step in log.scalars if tag == "latency/per_sample"] \
        == [(0, 3.0)]
    assert log.values["latency/mean"] == 3.0
    log.values.clear()
    metrics.model.num_timesteps = 3
    metrics.locals = {"infos": [{}]}
    metrics.on_step()
    metrics.on_rollout_end()
    assert log.values == {}


def test_latency_metrics_ratio_and_steps_per_second_on_a_fake_clock(monkeypatch,
                                                                  log: _Logger) -> None:
    """vs_static is the window's total latency over its total static latency, however small
    (tasks of well under a second); charts/SPS is the steps since training started over the
    seconds since (4 steps in 0.5 s: 8), and is left out while no time has passed."""
    from types import SimpleNamespace

    import agents.callbacks as callbacks

    clock = [10.0]
    monkeypatch.setattr(callbacks, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    metrics = callbacks.LatencyMetrics(("cpu",), window=10)
    _attach(metrics, log)
    metrics.on_training_start({}, {})
    metrics.model.num_timesteps = 1
    metrics.locals = {"infos": [{"latency": 0.1, "static_latency": 0.2}]}
    metrics.on_step()
    metrics.on_rollout_end()                # no time has passed: no rate
    assert "charts/SPS" not in log.values
    for latency, static in ((0.2, 0.1), (0.3, 0.2), (0.2, 0.1)):
        metrics.model.num_timesteps += 1
        metrics.locals = {"infos": [{"latency": latency, "static_latency": static}]}
        metrics.on_step()
    clock[0] = 10.5
    metrics.on_rollout_end()
    assert log.values["latency/vs_static"] == pytest.approx(0.8 / 0.6)
    assert log.values["charts/SPS"] == 8


def test_latency_metrics_are_current_when_an_off_policy_learner_dumps(log: _Logger) -> None:
    """DQN dumps its logs at an episode's end, after that step's callback and before the
    rollout's end: the values it writes at step S are the window up to S, not the previous
    rollout's; the rollout's end then records nothing new, so nothing is written twice."""
    import agents.callbacks as callbacks

    metrics = callbacks.LatencyMetrics(("cpu",), window=10)
    _attach(metrics, log)
    metrics.on_training_start({}, {})
    for step, latency in enumerate((1.0, 2.0, 3.0, 6.0), start=1):   # train_freq 2, episode 4
        metrics.model.num_timesteps = step
        metrics.locals = {"infos": [{"latency": latency}], "dones": np.array([step == 4])}
        metrics.on_step()
        if step == 4:                       # SB3's off-policy dump_logs at the episode's end
            dumped = dict(log.values)
            log.values.clear()
        if step % 2 == 0:
            metrics.on_rollout_end()
    assert dumped["latency/mean"] == pytest.approx(3.0)     # was 1.5: samples 1-2 only
    assert log.values == {}


def test_held_out_eval_writes_at_start_and_each_interval_crossed(log: _Logger) -> None:
    import agents.callbacks as callbacks

    latency = np.array([1.0, 2.0, 3.0, 10.0])
    held = callbacks.HeldOutEval(_one(lambda: latency), interval=100)
    _attach(held, log)
    held.on_training_start({}, {})
    for _ in range(90):                     # 3 envs: 3 steps a call, 270 in all
        held.model.num_timesteps += 3
        held.on_step()
    steps = [step for tag, _, step in log.scalars if tag == "eval/latency_mean"]
    assert steps == [0, 102, 201]
    values = {tag: value for tag, value, step in log.scalars if step == 0}
    assert values == pytest.approx({"eval/latency_mean": 4.0, "eval/vs_best_static": 2.0,
                                    "eval/latency_p95": 3 + 0.85 * 7})
    resumed = callbacks.HeldOutEval(_one(lambda: latency), interval=100)
    log.scalars.clear()
    _attach(resumed, log, 150)
    resumed.on_training_start({}, {})      # a resumed run: no step-0 point, next at 200
    for _ in range(20):
        resumed.model.num_timesteps += 3
        resumed.on_step()
    assert [step for tag, _, step in log.scalars if tag == "eval/latency_mean"] == [201]


def test_held_out_evals_last_point_is_the_model_after_its_last_update(log: _Logger) -> None:
    """PPO and DQN update once more after their last step's callback: the point written there
    was not the saved model, and DQN's differed from the run's final/ row by up to 0.008."""
    import agents.callbacks as callbacks

    model = {"latency": np.array([4.0])}
    held = callbacks.HeldOutEval(_one(lambda: model["latency"]), interval=100)
    _attach(held, log)
    held.on_training_start({"total_timesteps": 300}, {})
    for _ in range(100):                    # 3 steps a call, to 300 = the end, on an interval
        held.model.num_timesteps += 3
        held.on_step()
    model["latency"] = np.array([3.0])      # the algorithm's last update, after the last step
    held.on_training_end()
    points = [(step, value) for tag, value, step in log.scalars if tag == "eval/latency_mean"]
    assert points == [(0, 4.0), (102, 4.0), (201, 4.0), (300, 3.0)]
    log.scalars.clear()                     # an end off the intervals gets its point too
    held.on_training_start({"total_timesteps": 350}, {})
    held.model.num_timesteps = 350
    held.on_step()
    held.on_training_end()
    assert [step for tag, _, step in log.scalars if tag == "eval/latency_mean"] == [350]


def test_held_out_evals_end_point_is_written_once_and_for_a_run_that_wrote_none(
        log: _Logger) -> None:
    """learn(0) ends where it started: its step-0 point is the end's, written once; a resumed
    run that ends before its next interval has written no point, and gets one at its end."""
    import agents.callbacks as callbacks

    held = callbacks.HeldOutEval(_one(lambda: np.array([4.0])), interval=100)
    _attach(held, log)
    held.on_training_start({"total_timesteps": 0}, {})
    held.on_training_end()
    assert [step for tag, _, step in log.scalars if tag == "eval/latency_mean"] == [0]
    log.scalars.clear()
    resumed = callbacks.HeldOutEval(_one(lambda: np.array([4.0])), interval=100)
    _attach(resumed, log, 150)
    resumed.on_training_start({"total_timesteps": 180}, {})
    for _ in range(10):                     # 3 steps a call, to 180: no interval crossed
        resumed.model.num_timesteps += 3
        resumed.on_step()
    resumed.on_training_end()
    assert [step for tag, _, step in log.scalars if tag == "eval/latency_mean"] == [180]



@pytest.mark.parametrize("interval", [0, -100])
def test_eval_points_refuse_an_interval_below_one(interval: int) -> None:
    """An interval is the steps between points, at least one: a smaller one is refused when
    the callback is made, naming it (0 was a ZeroDivisionError once training started)."""
    import agents.callbacks as callbacks

    with pytest.raises(ValueError, match=f"HeldOutEval interval must be >= 1, got {interval}"):
        callbacks.HeldOutEval(_one(lambda: np.array([1.0]), 1.0), interval=interval)


def test_an_eval_interval_of_one_takes_a_point_at_every_step(log: _Logger) -> None:
    import agents.callbacks as callbacks

    held = callbacks.HeldOutEval(_one(lambda: np.array([1.0]), 1.0), interval=1)
    _attach(held, log)
    held.on_training_start({"total_timesteps": 3}, {})
    for _ in range(3):
        held.model.num_timesteps += 1
        held.on_step()
    held.on_training_end()
    assert [step for tag, _, step in log.scalars if tag == "eval/latency_mean"] == [0, 1, 2, 3]


def test_without_tensorboard_held_out_eval_runs_no_episode_and_selection_still_saves(
        tmp_path: Path) -> None:
    """The eval/ curves are TensorBoard's alone: with no TensorBoard output nothing would
    record a held-out episode, so none is run; the selection still keeps its best model."""
    from stable_baselines3.common.logger import Logger

    import agents.callbacks as callbacks

    episodes = []

    def run_episode() -> np.ndarray:
        episodes.append(1)
        return np.array([1.0])

    held = callbacks.HeldOutEval(_one(run_episode, 1.0), interval=100)
    model = _SavedModel()
    model.logger = Logger(folder=None, output_formats=[])
    held.init_callback(model)
    held.on_training_start({"total_timesteps": 150}, {})
    model.num_timesteps = 150
    held.on_step()
    held.on_training_end()
    assert episodes == [] and held.last is None
    selection = callbacks.BestModelSelection(
        _one(lambda: np.array([1.0]), 1.0), interval=100, run_dir=tmp_path,
        episode=(20_000, 1))
    selection.init_callback(model)
    selection.on_training_start({"total_timesteps": 150}, {})
    selection.on_training_end()
    assert (tmp_path / "best_model.zip").read_text() == "model at 150"
    assert selection.best is not None and selection.best.num_timesteps == 150


class _SavedModel:
    """Stands in for the model a selection saves: its file says the step it was saved at."""

    def __init__(self, num_timesteps: int = 0) -> None:
        self.num_timesteps = num_timesteps
        self.logger: _Logger | None = None

    def save(self, path) -> None:
        Path(path).write_text(f"model at {self.num_timesteps}")


def _selection(log: _Logger, run_dir: Path, means: list[float], best=None, at: int = 0):
    """A BestModelSelection whose validation episode's mean latency is `means`, point by
    point (best-static's: 2.0), on a stand-in model at step `at`."""
    import agents.callbacks as callbacks

    points = iter(means)
    selection = callbacks.BestModelSelection(
        _one(lambda: np.array([next(points)] * 2)), interval=100, run_dir=run_dir,
        episode=(20_000, 2), best=best)
    model = _SavedModel(at)
    model.logger = log
    selection.init_callback(model)
    return selection


def test_selection_saves_the_model_only_when_the_validation_episode_improves(
        log: _Logger, tmp_path: Path) -> None:
    """Points at 0, 100, 200, 300 and the end (350): the model is saved where its validation
    mean beats every earlier one (a tie keeps the earlier), with its record beside it, each
    written whole; every point is on the eval/validation_vs_best_static curve."""
    import json

    from agents.files import leftover_temp_files

    selection = _selection(log, tmp_path, [5.0, 3.0, 4.0, 3.0, 2.0])
    selection.on_training_start({"total_timesteps": 350}, {})
    saved = []
    for _ in range(35):
        selection.model.num_timesteps += 10
        selection.on_step()
        if (tmp_path / "best_model.zip").is_file():
            saved.append((tmp_path / "best_model.zip").read_text())
    selection.on_training_end()
    assert sorted(set(saved)) == ["model at 0", "model at 100"]
    assert (tmp_path / "best_model.zip").read_text() == "model at 350"
    assert json.loads((tmp_path / "best_model.json").read_text()) == {
        "num_timesteps": 350, "latency_mean": 2.0, "vs_best_static": 1.0,
        "validation_seed": 20_000, "validation_tasks": 2}
    assert [(step, value) for tag, value, step in log.scalars
            if tag == "eval/validation_vs_best_static"] == [
        (0, 2.5), (100, 1.5), (200, 2.0), (300, 1.5), (350, 1.0)]
    assert not [tag for tag, _, _ in log.scalars if tag.startswith("eval/latency")]
    assert selection.best is not None and selection.best.num_timesteps == 350
    assert leftover_temp_files(tmp_path) == [] and len(list(tmp_path.iterdir())) == 2


def test_a_resumed_selection_keeps_a_better_best(log: _Logger, tmp_path: Path) -> None:
    """A resumed run starts from the best it had: a worse model never replaces it."""
    from agents.run_folder import BestModel, read_best_record, save_best_record

    best = BestModel(num_timesteps=100, latency_mean=2.5, vs_best_static=1.25,
                     validation_seed=20_000, validation_tasks=2)
    (tmp_path / "best_model.zip").write_text("model at 100")
    save_best_record(tmp_path / "best_model.json", best)
    selection = _selection(log, tmp_path, [3.0, 2.4], best=read_best_record(
        tmp_path / "best_model.json"), at=150)
    selection.on_training_start({"total_timesteps": 300}, {})    # no point at 150
    for _ in range(5):                      # 200: 3.0, worse than 2.5
        selection.model.num_timesteps += 10
        selection.on_step()
    assert (tmp_path / "best_model.zip").read_text() == "model at 100"
    assert read_best_record(tmp_path / "best_model.json") == best
    selection.model.num_timesteps = 300
    selection.on_step()                     # the last step: its point is taken at the end
    selection.on_training_end()            # 300: 2.4, better
    assert (tmp_path / "best_model.zip").read_text() == "model at 300"
    record = read_best_record(tmp_path / "best_model.json")
    assert record is not None and (record.num_timesteps, record.latency_mean) == (300, 2.4)


@pytest.mark.parametrize("text", ["{", "[]", '{"num_timesteps": 1}',
                                  '{"num_timesteps": "x", "latency_mean": 1, "vs_best_static": '
                                  '1, "validation_seed": 1, "validation_tasks": 1}',
                                  '{"num_timesteps": 1, "latency_mean": NaN, "vs_best_static": '
                                  '1, "validation_seed": 1, "validation_tasks": 1}',
                                  '{"num_timesteps": 1, "latency_mean": 1, "vs_best_static": '
                                  '1, "validation_seed": 1, "validation_tasks": 1, '
                                  '"scenarios": ["article"]}',
                                  '{"num_timesteps": 1, "latency_mean": 1, "vs_best_static": '
                                  '1, "validation_seed": 1, "validation_tasks": 1, '
                                  '"scenarios": "article,bursty"}'])
def test_a_damaged_best_model_record_is_an_error_naming_the_file(text: str,
                                                                 tmp_path: Path) -> None:
    from agents.run_folder import read_best_record

    path = tmp_path / "best_model.json"
    assert read_best_record(path) is None           # none saved yet: nothing to keep
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        read_best_record(path)


def test_a_best_model_record_of_step_and_seed_zero_reads_back(log: _Logger,
                                                            tmp_path: Path) -> None:
    """A selection's first point is at step 0 and may be its best, and a validation seed may be
    0: such records read back as saved (counts are >= 0), so a resume keeps that best."""
    from agents.run_folder import BestModel, read_best_record, save_best_record

    selection = _selection(log, tmp_path, [1.0, 3.0])
    selection.on_training_start({"total_timesteps": 100}, {})
    selection.model.num_timesteps = 100
    selection.on_step()
    selection.on_training_end()
    assert selection.best is not None and selection.best.num_timesteps == 0
    assert read_best_record(tmp_path / "best_model.json") == selection.best
    seed_zero = BestModel(num_timesteps=64, latency_mean=1.5, vs_best_static=0.75,
                          validation_seed=0, validation_tasks=2)
    save_best_record(tmp_path / "seed_zero.json", seed_zero)
    assert read_best_record(tmp_path / "seed_zero.json") == seed_zero


def test_a_mix_selection_keeps_the_best_mean_ratio_not_the_best_first_scenario(
        log: _Logger, tmp_path: Path) -> None:
    """On a mix, each point runs every scenario's validation episode: a model better on the
    first scenario but worse over both (their latencies are of different workloads, so the
    ratios to each one's best-static are averaged) does not replace the best."""
    import agents.callbacks as callbacks
    from agents.run_folder import read_best_record

    first = iter([2.0, 1.8, 1.6])           # best-static 2.0: ratios 1.0, 0.9, 0.8
    second = iter([10.0, 20.0, 8.0])        # best-static 10.0: ratios 1.0, 2.0, 0.8
    selection = callbacks.BestModelSelection(
        [callbacks.ScenarioEpisode("article", lambda: np.array([next(first)]), 2.0),
         callbacks.ScenarioEpisode("bursty", lambda: np.array([next(second)]), 10.0)],
        interval=100, run_dir=tmp_path, episode=(20_000, 1))
    model = _SavedModel()
    model.logger = log
    selection.init_callback(model)
    selection.on_training_start({"total_timesteps": 300}, {})
    model.num_timesteps = 100
    selection.on_step()                     # article 0.9, bursty 2.0: mean 1.45, kept out
    assert (tmp_path / "best_model.zip").read_text() == "model at 0"
    model.num_timesteps = 200
    selection.on_step()                     # 0.8 and 0.8: the best
    # steps and values apart: pytest 9.2's approx takes no nested sequences
    points = [(step, value) for tag, value, step in log.scalars
              if tag == "eval/validation_vs_best_static"]
    assert [step for step, _ in points] == [0, 100, 200]
    assert [value for _, value in points] == pytest.approx([1.0, 1.45, 0.8])
    record = read_best_record(tmp_path / "best_model.json")
    assert record is not None and (record.num_timesteps, record.scenarios) == (
        200, ["article", "bursty"])
    assert (record.latency_mean, record.vs_best_static) == pytest.approx((1.6, 0.8))


def test_a_mix_held_out_eval_writes_each_scenarios_curve_under_a_tag_it_can_have(
        log: _Logger) -> None:
    """A scenario given as a YAML path (absolute in a run's config, so machine-dependent, and
    its slashes would nest TensorBoard's groups) gets its file's stem; two that read alike are
    numbered; one scenario writes no per-scenario tag."""
    import agents.callbacks as callbacks

    assert callbacks.scenario_tags(["article", "/home/me/my runs/edge.yaml", "b/edge.yml",
                                    "my bursty.yaml"]) == [
        "article", "edge-1", "edge-2", "my_bursty"]
    assert callbacks.scenario_tags(["/", "bursty"]) == ["scenario", "bursty"]
    held = callbacks.HeldOutEval(
        [callbacks.ScenarioEpisode("article", lambda: np.array([3.0]), 2.0),
         callbacks.ScenarioEpisode("/tmp/x/edge.yaml", lambda: np.array([1.0, 3.0]), 4.0)],
        interval=100)
    _attach(held, log)
    held.on_training_start({}, {})
    assert {tag: value for tag, value, _ in log.scalars} == pytest.approx({
        "eval/latency_mean": 3.0, "eval/latency_p95": 3.0, "eval/vs_best_static": 1.5,
        "eval/article/latency_mean": 3.0, "eval/article/vs_best_static": 1.5,
        "eval/edge/latency_mean": 2.0, "eval/edge/vs_best_static": 0.5,
        "eval/mix_vs_best_static": 1.0})
    assert held.last is not None and list(held.last[1]) == ["article", "/tmp/x/edge.yaml"]
    with pytest.raises(ValueError, match="HeldOutEval needs at least one episode"):
        callbacks.HeldOutEval([], interval=100)


def test_run_info_gives_tensorboard_hparams_it_takes() -> None:
    """HPARAMS take bool, int, float or str: those pass as they are, numpy scalars as the
    Python number, anything else (a net_arch list, None) as its text."""
    from agents.callbacks import RunInfo

    info = RunInfo("", {"lr": 3e-4, "n_steps": np.int64(64), "gamma": np.float32(0.5),
                        "norm": True, "name": "ppo", "net_arch": [64, 64], "clip": None})
    assert info.hparams == {"lr": 3e-4, "n_steps": 64, "gamma": 0.5, "norm": True,
                            "name": "ppo", "net_arch": "[64, 64]", "clip": "None"}
    assert type(info.hparams["n_steps"]) is int and type(info.hparams["gamma"]) is float


def test_the_hparams_view_tells_runs_of_another_reward_apart() -> None:
    """The reward a run trained on changes what it learns, and the HPARAMS view, where runs are
    compared side by side, left it out (only the config text held it)."""
    from agents.config import TrainConfig
    from agents.run_records import RunSpec
    from agents.run_training import _hparams

    spec = RunSpec("ppo", "none", 0)
    views = [_hparams(TrainConfig(reward=reward), spec) for reward in ("relative", "latency")]
    assert [view["reward"] for view in views] == ["relative", "latency"]
    assert {k: v for k, v in views[0].items() if k != "reward"} == \
        {k: v for k, v in views[1].items() if k != "reward"}


def test_the_hparams_view_shows_a_mixs_weights_only_where_given() -> None:
    """Runs of one mix drawn by other weights learn other things: the view tells them apart,
    and a run without --scenario-weights reads as every run did before there were weights."""
    from agents.config import TrainConfig
    from agents.run_records import RunSpec
    from agents.run_training import _hparams

    spec = RunSpec("ppo", "none", 0)
    mix = ["article", "bursty"]
    weighed = _hparams(TrainConfig(scenario=mix, scenario_weights=[0.0, 2.5]), spec)
    plain = _hparams(TrainConfig(scenario=mix), spec)
    assert weighed["scenario_weights"] == "0, 2.5" and "scenario_weights" not in plain
    assert {k: v for k, v in weighed.items() if k != "scenario_weights"} == plain


def test_the_hparams_view_shows_the_episode_a_run_trains_on() -> None:
    """The scenario's own episode showed as 0 tasks (article's is 200); a mix of scenarios of
    other lengths, where each keeps its own, shows 0."""
    from agents.config import TrainConfig
    from agents.run_records import RunSpec
    from agents.run_training import _hparams

    spec = RunSpec("ppo", "none", 0)
    assert _hparams(TrainConfig(), spec)["episode_tasks"] == 200
    assert _hparams(TrainConfig(episode_tasks=30), spec)["episode_tasks"] == 30
    assert _hparams(TrainConfig(scenario=["article", "bursty"]), spec)["episode_tasks"] == 200
    assert _hparams(TrainConfig(scenario=["article", "edge"]), spec)["episode_tasks"] == 0  # 100


def test_checkpoints_count_steps_over_every_env(tmp_path: Path) -> None:
    """--checkpoint-interval is in env steps: with two envs a vector step is two of them."""
    from agents.config import TrainConfig
    from agents.training import train

    config = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=64, n_envs=2,
                         checkpoint_interval=32, log_dir=str(tmp_path), episode_tasks=20,
                         eval_tasks=0, progress_bar=False, hp={"n_steps": 16, "batch_size": 16,
                                                               "n_epochs": 1})
    (result,) = train(config, report=lambda line: None)
    assert sorted(p.name for p in (result.run_dir / "checkpoints").iterdir()) == [
        "model_32_steps.zip", "model_64_steps.zip"]


def test_a_new_run_folder_never_reuses_one_and_gives_up_by_raising(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """The log folder is made with its parents; a run's name is taken as is, then suffixed -1,
    -2, ...; when every suffix it tries is taken, an error, not a folder shared by two runs.
    (Fewer suffixes than the thousand it tries: each try walks the taken ones again.)"""
    from agents import run_folder
    from agents.run_folder import new_run_dir

    monkeypatch.setattr(run_folder, "SUFFIXES", 40)
    log_dir = tmp_path / "logs" / "deep"
    made = [new_run_dir(log_dir, "run") for _ in range(3)]
    assert [p.name for p in made] == ["run", "run-1", "run-2"] and all(p.is_dir() for p in made)
    assert new_run_dir(log_dir, "other").name == "other"
    for k in range(3, 10_000):      # until it stops making new ones
        try:
            path = new_run_dir(log_dir, "run")
        except RuntimeError as exc:
            assert f"for run under {log_dir}" in str(exc)
            break
        assert path.name == f"run-{k}"
    assert k == 40 and not (log_dir / f"run-{k}").exists()
    with pytest.raises(RuntimeError, match="could not create a new run folder"):
        new_run_dir(log_dir, "run")       # and again: it never reuses one


def test_a_run_folder_the_file_system_refuses_is_a_write_failure_naming_it(
        tmp_path: Path, monkeypatch) -> None:
    """An OSError other than the folder being there already (a name over the file system's
    limit, a full disk, no permission) escaped as it was, a traceback from train.py."""
    import errno
    import os

    from agents.files import WriteFailed
    from agents.run_folder import new_run_dir

    long = "InferenceAlloc-v0__" + "x" * 300        # over NAME_MAX, for real
    with pytest.raises(WriteFailed, match=re.escape(
            f"cannot make the run folder {tmp_path / long}: File name too long; give a shorter "
            f"--log-dir")) as refused:
        new_run_dir(tmp_path, long)
    assert refused.value.__cause__.errno == errno.ENAMETOOLONG
    mkdir = Path.mkdir
    for code in (errno.ENOSPC, errno.EACCES):       # as root, refused by a patch
        def refuse(self, *args, code=code, **kwargs):
            if self.name.startswith("run") or self.name == "logs":
                raise OSError(code, os.strerror(code), str(self))
            return mkdir(self, *args, **kwargs)

        monkeypatch.setattr(Path, "mkdir", refuse)
        with pytest.raises(WriteFailed, match=re.escape(
                f"cannot make the run folder {tmp_path / 'run'}: {os.strerror(code)}") + "$"):
            new_run_dir(tmp_path, "run")
        with pytest.raises(WriteFailed, match=re.escape(
                f"cannot make the run folder {tmp_path / 'logs'}: {os.strerror(code)}") + "$"):
            new_run_dir(tmp_path / "logs", "other")
    assert list(tmp_path.iterdir()) == []


def test_checkpoints_are_the_readable_zips_by_steps(tmp_path: Path) -> None:
    """A run's checkpoints and model.zip by step count, each zip whose step count cannot be
    read (not a zip, no count, a count that is null or no number) left out, not an error; of
    equal steps model.zip last (a resume takes it: saved after the checkpoint's update,
    test_a_resume_of_a_finished_run_goes_on_from_its_model_not_its_last_checkpoint)."""
    import json

    from agents.run_folder import checkpoints, saved_steps

    def model_zip(path: Path, data: object) -> Path:
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("data", json.dumps(data))
        return path

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    good = {steps: model_zip(folder / f"model_{steps}_steps.zip", {"num_timesteps": steps})
            for steps in (64, 32)}
    final = model_zip(tmp_path / "model.zip", {"num_timesteps": 32})
    unreadable = {"model_1_steps.zip": {"steps": 1}, "model_2_steps.zip": {"num_timesteps": None},
                  "model_3_steps.zip": {"num_timesteps": "three"}}
    for name, data in unreadable.items():
        assert saved_steps(model_zip(folder / name, data)) is None, name
    (folder / "model_4_steps.zip").write_text("not a zip")
    (folder / "model_5_steps.zip").mkdir()
    assert saved_steps(folder / "model_4_steps.zip") is None
    assert saved_steps(folder / "model_5_steps.zip") is None      # a folder: an OSError
    assert checkpoints(tmp_path) == [(32, good[32]), (32, final), (64, good[64])]


def test_checkpoints_keep_only_the_newest_replay_buffer(tmp_path: Path) -> None:
    """A replay buffer is the size of the steps done: of the checkpoints' buffers only the
    newest is kept (a resume reads no other), beside every checkpoint's model and the final
    model's own buffer."""
    from agents.config import TrainConfig
    from agents.training import train

    config = TrainConfig(agents=["dqn"], warmup=["none"], timesteps=96, checkpoint_interval=32,
                         log_dir=str(tmp_path), episode_tasks=20, eval_tasks=0,
                         progress_bar=False)
    (result,) = train(config, report=lambda line: None)
    saved = sorted(p.name for p in (result.run_dir / "checkpoints").iterdir())
    assert [name for name in saved if "replay_buffer" in name] == [
        "model_replay_buffer_96_steps.pkl"]
    assert [name for name in saved if name.endswith(".zip")] == [
        "model_32_steps.zip", "model_64_steps.zip", "model_96_steps.zip"]
    assert (result.run_dir / "replay_buffer.pkl").is_file()


def test_a_resume_of_a_finished_run_goes_on_from_its_model_not_its_last_checkpoint(
        tmp_path: Path) -> None:
    """A --resume of a finished run (its --timesteps a multiple of --checkpoint-interval, as
    the defaults' are) took its checkpoint at the last step, saved then one update short of
    model.zip. That checkpoint is now saved after the update (the test above), and model.zip,
    sorted after it, is still the model a resume goes on from."""
    from stable_baselines3 import PPO

    from agents.config import TrainConfig
    from agents.run_folder import checkpoints
    from agents.training import train

    config = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=64, checkpoint_interval=32,
                         log_dir=str(tmp_path), episode_tasks=20, eval_tasks=0,
                         progress_bar=False, hp={"n_steps": 32, "batch_size": 32, "n_epochs": 1})
    (run,) = train(config, report=lambda line: None)
    last = run.run_dir / "checkpoints" / "model_64_steps.zip"
    assert PPO.load(last)._n_updates == PPO.load(run.run_dir / "model.zip")._n_updates == 2
    assert checkpoints(run.run_dir)[-2:] == [(64, last), (64, run.run_dir / "model.zip")]
    (resumed,) = train(TrainConfig(resume=str(run.run_dir), timesteps=96, progress_bar=False),
                       {"resume", "timesteps"}, report=lambda line: None)
    assert PPO.load(run.run_dir / "model.zip")._n_updates == 3


def test_keep_checkpoints_keeps_the_newest_with_their_files_and_a_resume_goes_on(
        tmp_path: Path) -> None:
    """Every checkpoint was kept: a long run's folder grew by one every --checkpoint-interval
    steps without end. --keep-checkpoints N keeps the newest N, each with what is saved beside
    it (warm-up state, VecNormalize statistics; the one replay buffer, the newest's), and a
    resume continues from the newest and keeps its own N."""
    from agents.config import TrainConfig
    from agents.training import train

    config = TrainConfig(agents=["dqn"], warmup=["conservative,guard"], timesteps=128,
                         checkpoint_interval=32, keep_checkpoints=2, normalize=True,
                         log_dir=str(tmp_path), episode_tasks=20, eval_tasks=0,
                         progress_bar=False)
    (result,) = train(config, report=lambda line: None)
    folder = result.run_dir / "checkpoints"

    def kept() -> list[str]:
        return sorted(p.name for p in folder.iterdir())

    assert kept() == sorted([f"model_{kind}_{steps}_steps.{ext}" for steps in (96, 128)
                             for kind, ext in (("warmup", "json"), ("vecnormalize", "pkl"))]
                            + ["model_96_steps.zip", "model_128_steps.zip",
                               "model_replay_buffer_128_steps.pkl"])
    (resumed,) = train(TrainConfig(resume=str(result.run_dir), timesteps=192, keep_checkpoints=1,
                                   progress_bar=False),
                       {"resume", "timesteps", "keep_checkpoints"}, report=lambda line: None)
    assert resumed.steps == 192
    assert kept() == ["model_192_steps.zip", "model_replay_buffer_192_steps.pkl",
                      "model_vecnormalize_192_steps.pkl", "model_warmup_192_steps.json"]


def test_a_negative_keep_is_refused_not_read_as_a_slice(tmp_path: Path) -> None:
    """AtomicCheckpoint(keep=-1) pruned with sorted(found)[:1]: the oldest checkpoint removed at
    each save, the rest kept. train.py refuses --keep-checkpoints -1; a script of yours was not."""
    from agents.run_folder import AtomicCheckpoint

    with pytest.raises(ValueError, match="keep must be >= 0 .0: every checkpoint., got -1"):
        AtomicCheckpoint(1, str(tmp_path), keep=-1)
    assert AtomicCheckpoint(1, str(tmp_path), keep=0).keep == 0


@pytest.mark.parametrize(("agent", "kind"), [("dqn", "replay_buffer"), ("ppo", "vecnormalize")])
def test_a_checkpoint_interrupted_while_saving_leaves_no_model_without_its_companion(
        tmp_path: Path, monkeypatch, agent: str, kind: str) -> None:
    """Ctrl-C while a checkpoint's replay buffer or VecNormalize statistics were written, after
    its model zip: the zip was the newest checkpoint, and a resume from it started from an
    empty buffer or fresh statistics, silently. The model zip is written last, so that the
    newest checkpoint is the one before, whose files are all there."""
    from stable_baselines3 import DQN
    from stable_baselines3.common.vec_env import VecNormalize

    from agents.config import TrainConfig
    from agents.run_folder import checkpoints, companion
    from agents.training import train

    owner, name = {"replay_buffer": (DQN, "save_replay_buffer"),
                   "vecnormalize": (VecNormalize, "save")}[kind]
    original, calls = getattr(owner, name), []

    def interrupted_at_the_second(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, interrupted_at_the_second)
    config = TrainConfig(agents=[agent], warmup=["none"], timesteps=96, checkpoint_interval=32,
                         normalize=kind == "vecnormalize", log_dir=str(tmp_path),
                         episode_tasks=20, eval_tasks=0, progress_bar=False,
                         hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1}
                         if agent == "ppo" else {})
    with pytest.raises(KeyboardInterrupt):
        train(config, report=lambda line: None)
    (run,) = tmp_path.iterdir()
    steps, newest = checkpoints(run)[-1]
    assert steps == 32 and companion(newest, kind, steps).is_file()


@pytest.mark.parametrize("agent", ["ppo", "dqn"])
def test_the_checkpoint_at_the_last_step_is_the_model_the_run_saved(
        tmp_path: Path, agent: str) -> None:
    """A checkpoint due at the run's last step was saved in that step's callback, before the
    update the algorithms make after it (PPO on its last rollout, DQN a gradient step): it
    bore model.zip's step count one update short of it, and a --resume of a run killed before
    model.zip was written refused to train on ("already has 64 steps") from the older model.
    The earlier checkpoint is still the model at its own step, before the next update."""
    import torch

    from agents.config import TrainConfig
    from agents.run_folder import checkpoints
    from agents.training import train

    hp = ({"n_steps": 16, "batch_size": 16, "n_epochs": 1} if agent == "ppo" else
          {"learning_starts": 0, "train_freq": 1, "batch_size": 8})
    config = TrainConfig(agents=[agent], warmup=["none"], timesteps=64, checkpoint_interval=32,
                         log_dir=str(tmp_path), episode_tasks=20, eval_tasks=0,
                         progress_bar=False, hp=hp)
    (result,) = train(config, report=lambda line: None)
    saved = checkpoints(result.run_dir)
    assert [(steps, path.name) for steps, path in saved] == [
        (32, "model_32_steps.zip"), (64, "model_64_steps.zip"), (64, "model.zip")]
    from stable_baselines3 import DQN, PPO

    algo = {"ppo": PPO, "dqn": DQN}[agent]

    def weights(path: Path) -> list[torch.Tensor]:
        return [t.detach().clone() for t in algo.load(path).policy.state_dict().values()]

    at_32, at_64, final = (weights(path) for _, path in saved)
    assert all(torch.equal(a, b) for a, b in zip(at_64, final, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(at_32, final, strict=True))


def test_a_run_stopped_in_its_last_update_keeps_the_checkpoint_of_its_last_step(
        tmp_path: Path, monkeypatch) -> None:
    """The last step's checkpoint is saved again after the last update (the test above), not
    only then: saved at the end alone, Ctrl-C in that update left a run of one checkpoint
    interval without any checkpoint, and its folder was removed."""
    from stable_baselines3 import PPO

    from agents.config import TrainConfig
    from agents.run_folder import checkpoints
    from agents.training import train

    original, updates = PPO.train, []

    def interrupted_in_the_last(self):
        updates.append(1)
        if self.num_timesteps >= self._total_timesteps:
            raise KeyboardInterrupt
        return original(self)

    monkeypatch.setattr(PPO, "train", interrupted_in_the_last)
    config = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=32, checkpoint_interval=32,
                         log_dir=str(tmp_path), episode_tasks=20, eval_tasks=0,
                         progress_bar=False, hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1})
    with pytest.raises(KeyboardInterrupt):
        train(config, report=lambda line: None)
    (run,) = tmp_path.iterdir()
    assert len(updates) == 2
    assert [(steps, path.name) for steps, path in checkpoints(run)] == [
        (32, "model_32_steps.zip")]


@pytest.mark.parametrize("where", ["as its folder was made", "before its training",
                                   "as its lock was taken"])
def test_a_run_stopped_before_its_training_began_leaves_no_folder(
        tmp_path: Path, monkeypatch, where: str) -> None:
    """A stop between the run folder's making and its training's start (before `_learn`, which
    keeps a folder with a checkpoint and removes one without) left the folder behind, empty,
    or holding its lock file alone where the stop came as the lock was taken."""
    import signal

    import agents.locks
    import agents.run_training
    from agents.config import TrainConfig
    from agents.training import train

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    if where == "as its folder was made":
        make = agents.run_training.new_run_dir

        def made_then_ctrl_c(*args, **kwargs):
            folder = make(*args, **kwargs)
            signal.raise_signal(signal.SIGINT)     # raised here, unless held
            return folder

        monkeypatch.setattr(agents.run_training, "new_run_dir", made_then_ctrl_c)
    elif where == "before its training":
        monkeypatch.setattr(agents.run_training, "train_and_score", stopped)
    else:
        acquire = agents.locks._acquire

        def stopped_as_taken(path, busy):
            acquire(path, busy).close()
            raise KeyboardInterrupt

        monkeypatch.setattr(agents.locks, "_acquire", stopped_as_taken)
    config = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=32, checkpoint_interval=16,
                         log_dir=str(tmp_path), episode_tasks=20, eval_tasks=0,
                         progress_bar=False, hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1})
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)    # Python's own
    try:
        with pytest.raises(KeyboardInterrupt):
            train(config, report=lambda line: None)
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert list(tmp_path.iterdir()) == []


def test_a_normalized_runs_models_each_have_their_vecnormalize_statistics(
        tmp_path: Path) -> None:
    """With --normalize every saved model, checkpoint and model.zip alike, has the reward
    normaliser's statistics beside it (a resume from it continues them): model.zip's are the
    last checkpoint's, both saved at the same step."""
    from stable_baselines3.common.vec_env import VecNormalize

    from agents.config import TrainConfig
    from agents.run_training import build_vec_env
    from agents.training import train

    config = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=64, normalize=True,
                         checkpoint_interval=32, log_dir=str(tmp_path), episode_tasks=20,
                         eval_tasks=0, progress_bar=False,
                         hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1})
    (result,) = train(config, report=lambda line: None)
    folder = result.run_dir / "checkpoints"
    assert sorted(p.name for p in folder.glob("model_vecnormalize_*")) == [
        "model_vecnormalize_32_steps.pkl", "model_vecnormalize_64_steps.pkl"]

    def statistics(path: Path) -> tuple[float, float, float]:
        loaded = VecNormalize.load(str(path), build_vec_env(config, "ppo", 0)[0].venv)
        return loaded.ret_rms.count, float(loaded.ret_rms.mean), float(loaded.ret_rms.var)

    final = statistics(result.run_dir / "vecnormalize.pkl")
    assert final == statistics(folder / "model_vecnormalize_64_steps.pkl")
    assert final != statistics(folder / "model_vecnormalize_32_steps.pkl")


def test_a_resume_seeds_new_episodes_and_counts_the_warm_up_done(tmp_path: Path,
                                                                 monkeypatch) -> None:
    """A run resumed at 64 steps of 2 envs: its envs are seeded resume_seed(seed, 64) (seed
    would replay the tasks it has seen) and 32 decisions of the conservative phase are done, cloning too."""
    import json

    import agents.resume as resume
    from agents.config import TrainConfig
    from agents.config_parsing import to_yaml
    from agents.warmup import WarmupConfig

    run = tmp_path / "InferenceAlloc-v0__ppo-warm__3__1"
    (run / "checkpoints").mkdir(parents=True)
    saved = TrainConfig(agents=["ppo"], warmup=["all"], seeds=[3], n_envs=2, timesteps=64,
                        log_dir=str(tmp_path))
    (run / "config.yaml").write_text(to_yaml(saved))
    with zipfile.ZipFile(run / "checkpoints" / "model_64_steps.zip", "w") as zf:
        zf.writestr("data", json.dumps({"num_timesteps": 64}))
    seen = {}

    class Stop(Exception):
        pass

    def vec_env(config, agent, seed, vecnormalize=None):
        seen["seed"] = seed
        raise Stop      # the rest (loading the model) is not what this test is about

    original = resume.warmup_config

    def warm(config, spec, done_steps=0):
        seen["warmup"] = original(config, spec, done_steps)
        return seen["warmup"]

    monkeypatch.setattr(resume, "build_vec_env", vec_env)
    monkeypatch.setattr(resume, "warmup_config", warm)
    with pytest.raises(Stop):
        resume.resume_run(TrainConfig(resume=run.name, log_dir=str(tmp_path), timesteps=128),
                          {"resume", "log_dir", "timesteps"})
    assert seen["seed"] == resume.resume_seed(3, 64) != 3
    default = WarmupConfig()
    assert seen["warmup"].steps == default.steps - 32 and not seen["warmup"].clone


def test_a_resumed_run_never_trains_on_the_held_out_seeds(tmp_path: Path, monkeypatch) -> None:
    """Resumed envs were seeded seed + steps: seeds 0-4 resumed at the default checkpoint's
    10000 steps trained on 10000-10004, the very episodes evaluate.py scores them on."""
    import agents.resume as resume
    from agents.config import HELDOUT_SEED, MAX_EVAL_SEEDS, MAX_SEED, TrainConfig
    from agents.config_parsing import to_yaml

    seeds = []

    class Stop(Exception):
        pass

    def vec_env(config, agent, seed, vecnormalize=None):
        seeds.append(seed)
        raise Stop

    monkeypatch.setattr(resume, "build_vec_env", vec_env)
    monkeypatch.setattr(resume, "checkpoints",
                        lambda run_dir: [(10_000, run_dir / "checkpoints" / "x.zip")])
    for seed in range(5):
        run = tmp_path / f"InferenceAlloc-v0__ppo__{seed}__{seed + 1}"
        run.mkdir()
        (run / "config.yaml").write_text(to_yaml(TrainConfig(
            agents=["ppo"], warmup=["none"], seeds=[seed], log_dir=str(tmp_path))))
        with pytest.raises(Stop):
            resume.resume_run(TrainConfig(resume=run.name, log_dir=str(tmp_path),
                                          timesteps=20_000), {"resume", "log_dir", "timesteps"})
    held_out = range(HELDOUT_SEED, HELDOUT_SEED + MAX_EVAL_SEEDS)
    assert len(set(seeds)) == 5 and not any(s in held_out or s < 1000 for s in seeds), seeds
    assert resume.resume_seed(MAX_SEED, 10**12) + 64 <= MAX_SEED     # n_envs stay valid


@pytest.mark.parametrize(("spec", "canonical", "label"), [
    ("none", "none", "ppo"), ("", "none", "ppo"), ("all", "all", "ppo-warm"),
    ("guard, clone, conservative", "all", "ppo-warm"),
    ("guard,conservative", "conservative,guard", "ppo-warm-conservative+guard"),
    ("clone", "clone", "ppo-warm-clone"),
    ("clone, conservative", "conservative,clone", "ppo-warm-conservative+clone"),
])
def test_warm_up_specs_have_one_spelling_and_label(spec: str, canonical: str, label: str) -> None:
    """Run folders and tables read the label: the parts in WARMUP_PARTS order, joined by +."""
    from agents.run_plan import canonical_warmup
    from agents.run_records import RunSpec

    assert canonical_warmup(spec) == canonical
    assert RunSpec("ppo", canonical, 0).label == label


@pytest.mark.parametrize(("interval", "runs"), [(32, 3), (0, 1)])
def test_the_final_row_takes_the_held_out_curves_last_point(interval: int, runs: int,
                                                           tmp_path: Path, monkeypatch) -> None:
    """The eval/ curve's last point is the saved model's run of the held-out episode: the
    final/ row loaded model.zip and ran that episode a second time, to the same latencies.
    Without eval/ points (--eval-interval 0) the row still runs the saved model itself."""
    import agents.run_scores as run_scores
    import agents.training as training
    from agents.config import TrainConfig
    from agents.evaluation import episode_latencies
    from agents.registry import load_policy
    from agents.run_plan import env_for
    from agents.sb3_factory import SB3Agent

    learned = []        # held-out episodes of the learned model (the baselines' are cached)
    original = run_scores.episode_latencies

    def counted(policy, env, seed, episodes=1):
        if isinstance(policy, SB3Agent):
            learned.append(seed)
        return original(policy, env, seed, episodes)

    monkeypatch.setattr(run_scores, "episode_latencies", counted)
    config = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=64, log_dir=str(tmp_path),
                         episode_tasks=20, eval_tasks=30, eval_interval=interval,
                         checkpoint_interval=0, progress_bar=False,
                         hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1})
    (result,) = training.train(config, report=lambda line: None)
    assert len(learned) == runs     # eval/ at steps 0, 32 and 64, the last being the row's
    env = env_for(config, episode_tasks=30, reward="latency")
    saved = load_policy(result.run_dir / "model.zip", env)
    assert np.array_equal(result.latency, episode_latencies(saved, env, config.eval_seed))
    if interval:        # the point the row took, kept for bench/bench_training.py
        assert result.evaluated is not None and result.evaluated[0] == result.steps == 64
        (scenario, latency), = result.evaluated[1].items()      # the one scenario's
        assert scenario == config.scenario and latency is result.latency
    else:
        assert result.evaluated is None



# a run of 128 steps, with eval/ (and validation) points at 0, 32, 64, 96, 128
TINY_RUN = {"agents": ["ppo"], "warmup": ["none"], "timesteps": 128, "episode_tasks": 20,
            "eval_tasks": 30, "eval_interval": 32, "checkpoint_interval": 64,
            "progress_bar": False, "hp": {"n_steps": 32, "batch_size": 32, "n_epochs": 1}}


@pytest.fixture(scope="module")
def selected(tmp_path_factory) -> dict[bool, tuple[object, list[str]]]:
    """The tiny run trained without and with --select-best: {select_best: (result, lines)}."""
    from agents.config import TrainConfig
    from agents.training import train

    runs = {}
    for select in (False, True):
        lines: list[str] = []
        config = TrainConfig(log_dir=str(tmp_path_factory.mktemp(f"select{select}")),
                             select_best=select, **TINY_RUN)
        (result,) = train(config, report=lines.append)
        runs[select] = (result, lines)
    return runs


def test_selection_leaves_training_unchanged(selected) -> None:
    """The validation episode runs on its own env with deterministic actions: a run with
    --select-best trains the same weights, to the bit, and saves the same model.zip."""
    from agents.config import TrainConfig
    from agents.registry import load_policy
    from agents.run_plan import env_for

    weights = []
    for select in (False, True):
        result, _ = selected[select]
        policy = load_policy(result.run_dir / "model.zip", env_for(TrainConfig()))
        weights.append([t.detach().clone() for t in policy.model.policy.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*weights, strict=True))
    plain, _ = selected[False]
    assert plain.best is None
    assert not list(plain.run_dir.glob("best_model*"))


def test_selection_keeps_the_best_model_seen_on_the_validation_episode(selected) -> None:
    """best_model.zip is the model of the validation curve's lowest point, its record says
    which, and the run's result scores it on the held-out episode, which did not choose it."""
    from agents.config import TrainConfig
    from agents.evaluation import episode_latencies
    from agents.files import leftover_temp_files
    from agents.plots import read_scalars
    from agents.registry import load_policy
    from agents.run_folder import read_best_record, saved_steps
    from agents.run_plan import env_for
    from agents.run_scores import comparison_table

    result, lines = selected[True]
    record = read_best_record(result.run_dir / "best_model.json")
    assert record is not None
    steps, ratios = read_scalars(result.run_dir, "eval/validation_vs_best_static")
    assert list(steps) == [0, 32, 64, 96, 128]
    assert record.num_timesteps == steps[int(np.argmin(ratios))]
    assert record.vs_best_static == pytest.approx(ratios.min(), rel=1e-6)
    assert (record.validation_seed, record.validation_tasks) == (20_000, 30)
    assert saved_steps(result.run_dir / "best_model.zip") == record.num_timesteps
    _, held_out = read_scalars(result.run_dir, "eval/vs_best_static")
    assert not np.allclose(held_out, ratios)        # another episode than the held-out one
    config = TrainConfig(**TINY_RUN)
    env = env_for(config, episode_tasks=30, reward="latency")
    best = load_policy(result.run_dir / "best_model.zip", env)
    assert result.best is not None and result.best.record == record
    assert np.array_equal(result.best.latency, episode_latencies(best, env, config.eval_seed))
    assert result.best.latency.mean() != record.latency_mean
    assert leftover_temp_files(result.run_dir) == []
    row = f"| ppo (best @ {record.num_timesteps} steps, validation-chosen) | " \
          f"{result.best.latency.mean():.2f} |"
    table = comparison_table(TrainConfig(select_best=True, **TINY_RUN), [result])
    assert table is not None and row in table, table
    assert f"best @ {record.num_timesteps} steps (validation-chosen): held-out mean latency " \
           f"{result.best.latency.mean():.2f} s" in lines[0], lines


def test_tensorboard_holds_the_selected_models_held_out_score(selected) -> None:
    # runs are compared in TensorBoard: the final/ row beside the validation-chosen model's
    from agents.plots import read_scalars

    for select, (result, _) in selected.items():
        best = {tag: read_scalars(result.run_dir, tag) for tag in
                ("final/best_latency_mean", "final/best_vs_best_static", "final/best_step")}
        if not select:
            assert all(len(steps) == 0 for steps, _ in best.values()), best
            continue
        assert {int(steps[-1]) for steps, _ in best.values()} == {result.steps}
        assert best["final/best_latency_mean"][1][-1] == pytest.approx(
            result.best.latency.mean(), rel=1e-6)
        assert best["final/best_vs_best_static"][1][-1] == pytest.approx(
            result.best.vs_best_static, rel=1e-6)
        assert best["final/best_step"][1][-1] == result.best.record.num_timesteps


def _copied_run(result, tmp_path: Path) -> Path:
    import shutil

    run = tmp_path / "runs" / result.run_dir.name
    shutil.copytree(result.run_dir, run)
    return run


def test_a_resume_never_replaces_a_better_best(selected, tmp_path: Path) -> None:
    """The resumed run starts from best_model.json's record: a best no later model can beat
    stays best_model.zip, and the result scores it."""
    import json

    from agents.config import TrainConfig
    from agents.training import train

    result, _ = selected[True]
    run = _copied_run(result, tmp_path)
    data = json.loads((run / "best_model.json").read_text())
    data["latency_mean"] = 1e-9
    (run / "best_model.json").write_text(json.dumps(data))
    kept = (run / "best_model.zip").read_bytes()
    (resumed,) = train(TrainConfig(resume=str(run), timesteps=192, progress_bar=False),
                       {"resume", "timesteps", "progress_bar"}, report=lambda line: None)
    assert resumed.steps == 192
    assert (run / "best_model.zip").read_bytes() == kept
    assert json.loads((run / "best_model.json").read_text()) == data
    assert resumed.best is not None and resumed.best.record.num_timesteps == data["num_timesteps"]


def test_a_resume_scores_a_best_model_its_record_does_not_name(selected, tmp_path: Path) -> None:
    """Stopped between best_model.zip and its record (or the record removed), a resume scores
    the saved model on the validation episode again, to the record it would have had."""
    from agents.config import TrainConfig
    from agents.resume import best_so_far
    from agents.run_folder import read_best_record

    result, _ = selected[True]
    run = _copied_run(result, tmp_path)
    record = read_best_record(run / "best_model.json")
    config = TrainConfig(select_best=True, **TINY_RUN)
    (run / "best_model.json").unlink()
    assert best_so_far(run, config) == record
    assert read_best_record(run / "best_model.json") == record
    (run / "best_model.zip").unlink()               # no model: none to keep
    assert best_so_far(run, config) is None


def test_a_damaged_best_model_record_stops_a_resume_naming_it(selected, tmp_path: Path) -> None:
    from agents.config import ConfigError, TrainConfig
    from agents.training import train

    result, _ = selected[True]
    run = _copied_run(result, tmp_path)
    (run / "best_model.json").write_text("{not json")
    with pytest.raises(ConfigError, match=re.escape(f"{run / 'best_model.json'} is not a "
                                                    f"readable best-model record")):
        train(TrainConfig(resume=str(run), timesteps=192), {"resume", "timesteps"})


def test_train_from_python_checks_its_config_before_making_a_run_folder(tmp_path: Path) -> None:
    # train.py validates while parsing; a TrainConfig built in Python reached the run, whose
    # --select-best without eval/ points failed inside it and left an empty run folder
    from agents.config import ConfigError, TrainConfig
    from agents.training import train

    logs = tmp_path / "runs"
    config = TrainConfig(select_best=True, log_dir=str(logs), **{**TINY_RUN, "eval_interval": 0})
    with pytest.raises(ConfigError, match="--select-best chooses at the --eval-interval"):
        train(config)
    assert not logs.exists() or not any(logs.iterdir())


def test_the_comparison_table_names_hardware_and_variant_other_than_the_scenarios():
    # its header read "scenario article" for a run on --hardware edge, where evaluate.py's
    # sections name the hardware
    from types import SimpleNamespace

    from agents.config import TrainConfig
    from agents.run_scores import comparison_table

    run = SimpleNamespace(latency=np.ones(12), spec=SimpleNamespace(label="ppo", seed=0),
                          best=None)
    for kwargs, header in (({}, "scenario article, workload"),
                           ({"hardware": "edge"}, "scenario article (hardware edge), workload"),
                           ({"hardware": "edge", "variant": "glm-5.3"},
                            "scenario article (hardware edge, variant glm-5.3), workload")):
        table = comparison_table(TrainConfig(eval_tasks=12, **kwargs), [run])
        assert table is not None and header in table.splitlines()[0], table


def test_the_comparison_table_counts_the_tasks_a_replayed_trace_ran(tmp_path):
    """A trace that runs out before --eval-tasks ends the held-out episode early: the header
    said "1000 tasks" over an episode of 245 (a user's 300-request trace)."""
    from types import SimpleNamespace

    from agents.config import TrainConfig
    from agents.run_scores import comparison_table

    trace = tmp_path / "trace.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2024-01-01 00:00:{10 * i:02d}.0,500,50\n" for i in range(6)), encoding="utf-8")
    scenario = tmp_path / "replay.yaml"
    scenario.write_text(f"workload: {{trace: {trace}}}\n", encoding="utf-8")
    run = SimpleNamespace(latency=np.ones(6), spec=SimpleNamespace(label="ppo", seed=0),
                          best=None)
    table = comparison_table(TrainConfig(scenario=str(scenario), eval_tasks=50), [run])
    assert table is not None
    assert table.splitlines()[0].endswith("workload seed 10000, 6 tasks"), table


@pytest.mark.parametrize(("scenario", "noted"), [("article", False), ("short-text", True)])
def test_the_comparison_table_says_when_the_workload_overloads_the_hardware(scenario, noted):
    """A workload that arrives faster than the hardware serves it gave a table of latencies
    in the thousands of seconds and no word why: short-text (1 task/s) grows best-static's
    latency ~7x through 200 tasks; the article's load is carried."""
    from types import SimpleNamespace

    from agents.config import TrainConfig
    from agents.run_scores import comparison_table

    run = SimpleNamespace(latency=np.ones(200), spec=SimpleNamespace(label="ppo", seed=0),
                          best=None)
    table = comparison_table(TrainConfig(scenario=scenario, eval_tasks=200), [run])
    assert table is not None
    note = [line for line in table.splitlines() if line.startswith("note:")]
    assert bool(note) == noted, table
    if noted:
        growth = float(note[0].split("grows ")[1].split("x")[0])
        assert growth >= 2 and "arrival_rate" in note[0], note
        # under the default relative reward, a learner there gets next to no signal
        assert "train with --reward normalised, or latency with --normalize" in note[0]
        for reward in ("normalised", "latency"):
            other = comparison_table(TrainConfig(scenario=scenario, eval_tasks=200,
                                                 reward=reward), [run])
            assert other is not None and "arrival_rate" in other
            assert "--reward normalised" not in other


def test_the_overload_note_reads_the_growth_of_the_reference_latency():
    from agents.evaluation import overload_note

    growing = np.arange(1.0, 101.0)      # quarters' means 13 and 88
    note = overload_note(growing, "heft")
    assert note is not None and note.startswith("note: heft's latency grows 6.8x"), note
    assert overload_note(np.full(100, 500.0)) is None      # slow, but not growing
    assert overload_note(growing[::-1]) is None            # a backlog draining
    assert overload_note(np.arange(1.0, 40.0)) is None     # too few tasks to tell
    assert overload_note(np.r_[np.ones(75), np.full(25, 2.0)]) is not None   # 2x: noted


@pytest.mark.parametrize(("given", "env_id"), [
    ("split", "InferenceAllocSplit-v0"), ("discrete", "InferenceAlloc-v0"),
    ("envs:InferenceAllocSplit-v0", "InferenceAllocSplit-v0"),
    ("InferenceAlloc-v0", "InferenceAlloc-v0")])
def test_train_takes_the_short_env_names_and_gymnasiums_spelling(given, env_id):
    """`train.py --env split` (bench_env.py's name for it) and `--env
    envs:InferenceAllocSplit-v0` (gymnasium.make's) were 'unknown env id'; the run records the
    registered id, which names its folder."""
    from agents.config import TrainConfig
    from agents.run_plan import env_for

    cfg = TrainConfig(env_id=given)
    assert cfg.env_id == env_id
    assert env_for(cfg, episode_tasks=1).spec.id == env_id


@pytest.mark.parametrize("reward", ["relative", "normalised", "latency"])
def test_a_runs_training_envs_take_its_reward_and_price_static(reward):
    """--reward picks the training envs' reward (the held-out episode is priced in seconds
    from info["latency"], whichever it is); static is priced under each, for the guard and
    the latency/vs_static curve."""
    from agents.config import TrainConfig
    from agents.run_training import build_vec_env

    cfg = TrainConfig(reward=reward, episode_tasks=4, n_envs=2)
    venv, _ = build_vec_env(cfg, "ppo", seed=0)
    assert [e.unwrapped.reward_kind for e in venv.envs] == [reward, reward]
    venv.reset()
    infos = venv.step(np.zeros((2, 3), dtype=np.int64))[3]
    assert all(info["static_latency"] > 0 for info in infos)


def test_normalize_scales_the_rewards_the_agent_learns_from_and_only_them():
    """--normalize wraps the training envs in VecNormalize on rewards only (the module's
    docstring): the observations, already in [0, 1], pass as they are, while the rewards the
    agent sees are rescaled, the env's own still there as the original rewards."""
    import dataclasses

    from agents.config import TrainConfig
    from agents.run_training import build_vec_env

    cfg = TrainConfig(episode_tasks=8)
    raw, _ = build_vec_env(cfg, "ppo", seed=0)
    normalised, _ = build_vec_env(dataclasses.replace(cfg, normalize=True), "ppo", seed=0)
    np.testing.assert_array_equal(normalised.reset(), raw.reset())
    seen, given, original = [], [], []
    for _ in range(12):
        action = np.zeros((1, 3), dtype=np.int64)
        obs, reward, _, _ = normalised.step(action)
        raw_obs, raw_reward, _, _ = raw.step(action)
        np.testing.assert_array_equal(obs, raw_obs)
        seen.append(reward[0])
        given.append(raw_reward[0])
        original.append(normalised.get_original_reward()[0])
    assert original == given                        # the same episode, its own rewards
    assert not np.allclose(seen, given)             # which the agent sees rescaled

def test_an_unknown_env_names_the_ids_and_short_names():
    from agents.evaluation import make_env

    with pytest.raises(ValueError, match=r"unknown env id 'Split' \(did you mean 'split'\?\); "
                                         r"valid: InferenceAlloc-v0 "
                                         r"\(discrete\), InferenceAllocSplit-v0 \(split\)"):
        make_env("Split")
    # the mix's id is registered, but the mix is made from several scenarios, not named
    for name in ("InferenceAllocMix-v0", "envs:InferenceAllocMix-v0"):
        with pytest.raises(ValueError, match=r"^InferenceAllocMix-v0 is made by giving several "
                                             r"scenarios \(--scenario article bursty\)"):
            make_env(name)


def test_the_held_out_baselines_follow_a_scenario_file_rewritten_at_its_path(tmp_path) -> None:
    # A sweep that writes each trial's scenario to one file (or a notebook's edit of it): the
    # baselines' held-out latencies were cached by the file's name, so every later trial's
    # eval/ curves, vs_best_static and comparison table divided by the first trial's best-static.
    from agents.config import TrainConfig
    from agents.evaluation import episode_latencies, make_env
    from agents.registry import make_policy
    from agents.run_scores import _env_key, baseline_latency
    scenario = tmp_path / "trial.yaml"
    config = TrainConfig(scenario=str(scenario), eval_tasks=40)
    for rate in (0.05, 0.5):
        scenario.write_text(f"workload: {{arrival_rate: {rate}}}\n", encoding="utf-8")
        env = make_env(V0, str(scenario), episode_tasks=40)
        expected = episode_latencies(make_policy("best-static", env), env, config.eval_seed)
        assert np.array_equal(baseline_latency(_env_key(config), "best-static"), expected)


# --- train.py --vec-env (agents.vec_envs) ------------------------------------------------------


def _tiny_env() -> gym.Env:
    return gym.make(V0, episode_tasks=5)


def test_a_subproc_venv_steps_as_a_dummy_one_and_closes_after_a_worker_died() -> None:
    """Each env in a worker of its own, seeded seed + i as in a DummyVecEnv, its rewards handed
    on as float32 as DummyVecEnv's; the env the trainer reads is a DummyVecEnv's first sub-env,
    and one of its own beside a SubprocVecEnv, whose sub-envs are not in this process. SB3's
    close sent to a dead worker (an error in its env, a stop that reached the workers) and
    raised BrokenPipeError in place of the error that ended the run, the live one left
    waiting for the plan's next runs."""
    from agents.vec_envs import close_venv, first_env, training_venv

    venvs = {kind: training_venv(_tiny_env, 2, seed=3, vec_env=kind)
             for kind in ("dummy", "subproc")}
    rollouts = []
    for venv in venvs.values():
        steps = [venv.reset()]
        for action in np.random.default_rng(0).integers(0, 3, (8, 2, 3)):   # over a reset
            obs, reward, done, infos = venv.step(action)
            steps += [obs, reward, done, [info["latency"] for info in infos]]
        rollouts.append(steps)
    dummy, subproc = rollouts
    assert all(np.array_equal(a, b) and np.asarray(a).dtype == np.asarray(b).dtype
               for a, b in zip(dummy, subproc, strict=True))
    assert not np.array_equal(dummy[0][0], dummy[0][1])         # env 1 is not env 0's seed
    assert first_env(venvs["dummy"], _tiny_env) is venvs["dummy"].envs[0]
    own = first_env(venvs["subproc"], _tiny_env)
    assert isinstance(own.unwrapped, envs.InferenceAllocEnv) and own.unwrapped._episode is None
    dead, live = venvs["subproc"].unwrapped.processes
    dead.kill()
    dead.join()
    close_venv(venvs["subproc"])
    live.join(timeout=10)
    assert not live.is_alive()
    with pytest.raises(ValueError, match="vec_env must be one of dummy, subproc"):
        training_venv(_tiny_env, 1, seed=0, vec_env="threads")


def test_a_worker_that_died_is_named_as_such_not_as_an_empty_eoferror(monkeypatch) -> None:
    """An env raising in its worker ends the worker (SB3's worker prints its traceback); the
    trainer then read an empty pipe, and the run failed with 'EOFError: ', naming nothing.
    The pipe's error that the WorkerDied stands for is freed with it: translated by a
    @contextmanager, it stayed in a reference cycle (CPython gh-129280) with the frames that
    hold the step's send buffer, a memoryview of a BytesIO, whose collection, later and
    anywhere (a next test, the run's exit), printed 'Exception ignored in: <_io.BytesIO ...>
    BufferError: Existing exports of data' (CPython gh-111331)."""
    import gc
    import sys

    from agents.vec_envs import WorkerDied, close_venv, training_venv

    venv = training_venv(_tiny_env, 2, seed=0, vec_env="subproc")
    try:
        venv.reset()
        dead = venv.unwrapped.processes[1]
        dead.kill()
        dead.join()
        gc.collect()
        ignored: list = []
        monkeypatch.setattr(sys, "unraisablehook", ignored.append)
        gc.disable()
        try:
            with pytest.raises(WorkerDied, match=r"a worker process of --vec-env subproc ended "
                                                 r"\(BrokenPipeError on its pipe\)"):
                venv.step(np.zeros((2, 3), dtype=np.int64))
            left = sum(type(o) is BrokenPipeError for o in gc.get_objects())
        finally:
            gc.enable()
        gc.collect()
        assert left == 0
        assert [f"{u.exc_type.__name__} in {u.object!r}" for u in ignored] == []
    finally:
        close_venv(venv)


@pytest.mark.parametrize("raises_at", ["reset", "step"])
def test_an_env_raising_in_its_worker_fails_as_worker_died(raises_at: str) -> None:
    """The case the test above stands in for, by the env's own error: its worker prints the
    traceback and exits while the trainer waits on its answer, whose pipe then reads EOFError
    (a killed worker's, written to, reads BrokenPipeError), at a step or at the reset a run
    starts with."""
    from agents.vec_envs import WorkerDied, close_venv, training_venv

    class Broken(gym.Wrapper):
        def reset(self, **kwargs):
            if raises_at == "reset":
                raise RuntimeError("a bug in the env")
            return self.env.reset(**kwargs)

        def step(self, action):
            raise RuntimeError("a bug in the env")

    venv = training_venv(lambda: Broken(_tiny_env()), 2, seed=0, vec_env="subproc")
    try:
        with pytest.raises(WorkerDied, match=r"a worker process of --vec-env subproc ended "
                                             r"\(EOFError on its pipe\)"):
            venv.reset()
            venv.step(np.zeros((2, 3), dtype=np.int64))
    finally:
        close_venv(venv)


def test_subproc_steps_the_envs_in_workers_that_end_with_the_run_and_its_resume(
        tmp_path: Path, monkeypatch) -> None:
    """--vec-env subproc is what it says: each env steps in a worker process, not in the
    trainer's (where dummy steps them), and the workers end with the run, and with a resumed
    one (not left waiting, one pair per run, for the plan's later runs)."""
    import multiprocessing
    import os

    import agents.run_training as run_training
    import agents.training as training
    from agents.config import TrainConfig

    stepped_in = tmp_path / "pids"
    stepped_in.mkdir()
    real_env_for = run_training.env_for

    class Recorded(gym.Wrapper):
        def step(self, action):
            (stepped_in / str(os.getpid())).touch()
            return self.env.step(action)

    monkeypatch.setattr(run_training, "env_for", lambda *a, **k: Recorded(real_env_for(*a, **k)))
    small = {"warmup": ["none"], "n_envs": 2, "episode_tasks": 20, "eval_tasks": 0,
             "checkpoint_interval": 32, "progress_bar": False,
             "hp": {"n_steps": 16, "batch_size": 16, "n_epochs": 1}}

    def run(config: TrainConfig, given: set[str] | None = None) -> set[int]:
        for pid in stepped_in.iterdir():
            pid.unlink()
        training.train(config, given, report=lambda line: None)
        stepped = {int(p.name) for p in stepped_in.iterdir()}
        # its workers ended with it
        assert not stepped & {child.pid for child in multiprocessing.active_children()}
        return stepped

    dummy = TrainConfig(**small, timesteps=32, log_dir=str(tmp_path / "dummy"))
    assert run(dummy) == {os.getpid()}
    log_dir = str(tmp_path / "subproc")
    workers = run(TrainConfig(**small, timesteps=32, vec_env="subproc", log_dir=log_dir))
    assert len(workers) == 2 and os.getpid() not in workers
    resumed = run(TrainConfig(resume="latest", log_dir=log_dir, timesteps=64, vec_env="subproc",
                              progress_bar=False), {"resume", "log_dir", "timesteps", "vec_env"})
    assert len(resumed) == 2 and not resumed & (workers | {os.getpid()})


def test_a_resume_takes_its_own_per_sample_and_log_intervals(tmp_path: Path) -> None:
    """Both only thin what is written, so a resume may change them (RESUMABLE): its steps
    write latency/per_sample at the new interval's grid, and the grouped tags every new
    log-interval-th rollout of its own."""
    from agents.config import TrainConfig
    from agents.plots import read_scalars
    from agents.training import train

    config = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=64, checkpoint_interval=32,
                         log_dir=str(tmp_path), episode_tasks=20, eval_tasks=0,
                         progress_bar=False, hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1})
    (run,) = train(config, report=lambda line: None)
    (resumed,) = train(TrainConfig(resume=str(run.run_dir), timesteps=128, per_sample_interval=16,
                                   log_interval=2, progress_bar=False),
                       {"resume", "timesteps", "per_sample_interval", "log_interval"},
                       report=lambda line: None)
    assert resumed.steps == 128
    assert list(read_scalars(run.run_dir, "latency/per_sample")[0]) == [*range(64), 64, 80, 96, 112]
    assert list(read_scalars(run.run_dir, "latency/mean")[0]) == [16, 32, 48, 64, 96, 128]


def test_a_resume_built_in_python_takes_or_refuses_the_options_it_sets(tmp_path: Path) -> None:
    """train() without `given` read every option of the config as not set: a resume to
    timesteps=96 was refused as the run's own 64 already done, and another scenario or reward
    was dropped without a word (the run's own trained on). Those that differ from the
    defaults are the ones set."""
    from agents.config import ConfigError, TrainConfig
    from agents.training import train

    config = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=64, checkpoint_interval=32,
                         log_dir=str(tmp_path), episode_tasks=20, eval_tasks=0,
                         progress_bar=False, hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1})
    (run,) = train(config, report=lambda line: None)
    with pytest.raises(ConfigError, match=r"may change \(got --reward, --scenario\)"):
        train(TrainConfig(resume=str(run.run_dir), timesteps=96, scenario="bursty",
                          reward="latency"), report=lambda line: None)
    (resumed,) = train(TrainConfig(resume=str(run.run_dir), timesteps=96, progress_bar=False),
                       report=lambda line: None)
    assert resumed.steps == 96 and resumed.new_steps == 32
    # the default typed out reads as not set, and the refusal says so and what to pass
    from agents.config import DEFAULT_TIMESTEPS
    with pytest.raises(ConfigError, match=re.escape(
            f"already has 96 steps; give --timesteps above that (the new total) to continue it "
            f"(timesteps={DEFAULT_TIMESTEPS:,}, TrainConfig's default, reads as not given: "
            f"pass given={{'timesteps'}} to train() to resume to it)")):
        train(TrainConfig(resume=str(run.run_dir), timesteps=DEFAULT_TIMESTEPS),
              report=lambda line: None)


def test_a_run_resumed_after_a_crash_shows_each_step_once(tmp_path: Path, monkeypatch) -> None:
    """A run that crashed at step 50, past its checkpoint at 32, had written the per-task
    latencies of samples 32-49: the resume from 32 writes them again, and TensorBoard's reader
    (tensorboard's EventAccumulator, which applies the resumed file's restart marker) showed
    sample 32 twice, the stopped run's and the resumed run's. Each tag now has each step once,
    every per-task latency from 0 on, and the eval/ points of both sessions."""
    from stable_baselines3.common.callbacks import BaseCallback
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from agents import run_training, training
    from agents.config import TrainConfig
    from agents.run_records import RunsFailed

    class CrashAt50(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps >= 50:
                raise RuntimeError("simulated crash")
            return True

    built = run_training._callbacks

    def crashing(*args, **kwargs):
        callbacks, held, selection = built(*args, **kwargs)
        return [*callbacks, CrashAt50()], held, selection

    hp = {"n_steps": 16, "batch_size": 16, "n_epochs": 1}
    config = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=96, checkpoint_interval=32,
                         eval_interval=24, eval_tasks=20, log_dir=str(tmp_path),
                         episode_tasks=20, progress_bar=False, hp=hp)
    with monkeypatch.context() as patched:
        patched.setattr(run_training, "_callbacks", crashing)
        with pytest.raises(RunsFailed, match="simulated crash"):
            training.train(config, report=lambda line: None)
    (run_dir,) = tmp_path.iterdir()
    (resumed,) = training.train(TrainConfig(resume=str(run_dir), timesteps=96,
                                            progress_bar=False), {"resume", "timesteps"},
                                report=lambda line: None)
    assert resumed.new_steps == 64 and len(list(run_dir.glob("*tfevents*"))) == 2
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    steps = {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    assert {tag: s for tag, s in steps.items() if any(np.diff(s) <= 0)} == {}
    assert steps["latency/per_sample"] == list(range(96))
    assert steps["eval/vs_best_static"] == [0, 24, 48, 72, 96]


# ----------------------------------------------------------------------- a resume's setting
def tiny_train(tmp_path: Path, scenario: str | list[str], **options: Any) -> Path:
    """A 32-step run on `scenario` under tmp_path/runs, checkpointed at its end: its folder."""
    from agents.config import TrainConfig
    from agents.training import train

    (run,) = train(TrainConfig(agents=["ppo"], warmup=["none"], scenario=scenario,
                               timesteps=32, checkpoint_interval=32, episode_tasks=20,
                               eval_tasks=0, log_dir=str(tmp_path / "runs"), progress_bar=False,
                               hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1}, **options),
                   report=lambda line: None)
    return run.run_dir


def resume_to(run_dir: Path, timesteps: int) -> Any:
    from agents.config import TrainConfig
    from agents.training import train

    (resumed,) = train(TrainConfig(resume=str(run_dir), timesteps=timesteps, progress_bar=False),
                       {"resume", "timesteps", "progress_bar"}, report=lambda line: None)
    return resumed


def refused_resume(run_dir: Path, timesteps: int = 64) -> str:
    """The one-line refusal of a resume of `run_dir`, which leaves its files as they were."""
    from agents.config import ConfigError

    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError) as caught:
        resume_to(run_dir, timesteps)
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"cannot resume {run_dir.name}: ")
    return message


def own_scenario(tmp_path: Path, preset: str = "article", name: str = "mine.yaml") -> Path:
    from envs.scenario import SCENARIO_DIR

    path = tmp_path / name
    path.write_text((SCENARIO_DIR / f"{preset}.yaml").read_text(encoding="utf-8"),
                    encoding="utf-8")
    return path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


@pytest.mark.parametrize(("old", "new", "parts"), [
    ("arrival_rate: 0.022", "arrival_rate: 0.2", "workload"),
    ("variant: glm-5.3-flash\n", "variant: glm-5.3\n", "variant, stages"),
    ("hardware: server\n", "hardware: edge\n", "hardware, hardware figures")])
def test_a_resume_refuses_a_scenario_file_edited_since_the_run_started(
        tmp_path: Path, old: str, new: str, parts: str) -> None:
    """A run names its scenario by path, which --resume read again: the file edited in between
    (arrival_rate 0.022 -> 0.2) was trained on without a word, its later eval/ points of
    another episode on the same curve (0.78x -> 3.04x best-static). Now config.yaml records
    the setting's digests; an unchanged file resumes, an edited one is refused naming the
    file and the part, and resumes again once restored."""
    scenario = own_scenario(tmp_path)
    original = scenario.read_text(encoding="utf-8")
    run_dir = tiny_train(tmp_path, str(scenario))
    assert resume_to(run_dir, 64).steps == 64            # unchanged: it goes on
    edit(scenario, old, new)
    message = refused_resume(run_dir, 96)
    assert (f"scenario {scenario} has changed since the run started (its {parts}, by the "
            f"digests config.yaml recorded then)") in message
    assert f"restore {scenario} as it was, train a new run" in message
    scenario.write_text(original, encoding="utf-8")
    assert resume_to(run_dir, 96).steps == 96


def test_a_resume_refuses_a_hardware_file_or_trace_edited_since(tmp_path: Path) -> None:
    """The hardware file of --hardware (only its device count was checked, as the model's
    observation space) and a replayed trace's CSV are part of the setting; the trace by its
    contents, so the same bytes written again resume."""
    from inference.hardware import PRESET_DIR

    hardware = tmp_path / "my-server.yaml"
    hardware.write_text((PRESET_DIR / "server.yaml").read_text(encoding="utf-8"),
                        encoding="utf-8")
    trace = tmp_path / "trace.csv"
    rows = "".join(f"2024-01-01 00:{i // 6:02d}:{10 * (i % 6):02d}.0,500,50\n" for i in range(60))
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows, encoding="utf-8")
    scenario = tmp_path / "replay.yaml"
    scenario.write_text(f"name: replay\nworkload: {{trace: {trace}}}\n", encoding="utf-8")
    run_dir = tiny_train(tmp_path, str(scenario), hardware=str(hardware))
    trace.write_text(trace.read_text(encoding="utf-8"), encoding="utf-8")   # same bytes
    assert resume_to(run_dir, 64).steps == 64
    trace.write_text(trace.read_text(encoding="utf-8").replace(",500,50", ",900,50"),
                     encoding="utf-8")
    message = refused_resume(run_dir, 96)
    assert "(its trace, by" in message and f"restore trace {trace} as it was" in message
    edit(hardware, "launch_overhead: 2.0e-6", "launch_overhead: 4.0e-6")
    message = refused_resume(run_dir, 96)
    assert "(its trace, hardware figures, by" in message, message
    assert f"restore hardware {hardware} and trace {trace} as they were" in message
    assert "project" not in message


def test_a_mix_refuses_a_resume_when_one_of_its_scenario_files_was_edited(
        tmp_path: Path) -> None:
    """A mix records a digest per scenario: the second file's edit is named, not missed."""
    first = own_scenario(tmp_path, "article", "first.yaml")
    second = own_scenario(tmp_path, "bursty", "second.yaml")
    run_dir = tiny_train(tmp_path, [str(first), str(second)])
    edit(second, "noise: 0.05", "noise: 0.2")
    message = refused_resume(run_dir)
    assert f"scenario {second} has changed since the run started (its noise, by" in message
    assert str(first) not in message


def test_the_setting_digests_follow_what_runs_not_text_or_added_defaults(
        tmp_path: Path, monkeypatch) -> None:
    """The record hashed the repr of whole dataclasses: a project update that adds a field with
    a default (no change of behaviour) refused every recorded run, and so did an edited
    device citation; a recipe remapped to another implementation with the same arguments
    (hierarchical -> prefetched decode) was missed."""
    import dataclasses

    import envs.reference as reference
    from envs.inference_alloc import InferenceAllocEnv
    from inference.hardware import PRESET_DIR
    from inference.variants import VARIANTS

    @dataclasses.dataclass
    class Before:
        rate: float = 1.0

    @dataclasses.dataclass
    class After:           # a later version's, with a new field at a default
        rate: float = 1.0
        trace_events: bool = False

    assert reference._plain(Before(rate=2.0)) == reference._plain(After(rate=2.0))
    assert reference._plain(Before(rate=2.0)) != reference._plain(Before(rate=3.0))

    hardware = tmp_path / "hw.yaml"
    hardware.write_text((PRESET_DIR / "server.yaml").read_text(encoding="utf-8"),
                        encoding="utf-8")
    scenario = own_scenario(tmp_path)

    def digests() -> dict[str, str]:
        return reference.setting_digests(InferenceAllocEnv(str(scenario), hardware=str(hardware)))

    first = digests()
    edit(hardware, 'source: "NVIDIA A100', 'source: "A datasheet of the NVIDIA A100')
    edit(scenario, "description: >", "description: >\n  An edited line.")
    assert digests() == first
    edit(hardware, "launch_overhead: 2.0e-6", "launch_overhead: 4.0e-6")
    assert {k for k, v in digests().items() if first[k] != v} == {"hardware_figures"}
    remapped = dict(VARIANTS["glm-5.3-flash"], decode="prefetched")
    monkeypatch.setitem(VARIANTS, "glm-5.3-flash", remapped)
    assert digests()["stages"] != first["stages"]


def test_a_resume_pairs_a_moved_scenario_file_with_its_record_by_place(tmp_path: Path) -> None:
    """config.yaml edited to a scenario file's new path matched no name of the record, and
    nothing was compared: the moved file's edit was trained on."""
    import yaml

    scenario = own_scenario(tmp_path)
    run_dir = tiny_train(tmp_path, str(scenario))
    moved = scenario.rename(tmp_path / "moved.yaml")
    config = run_dir / "config.yaml"
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace(f"scenario: {scenario}", f"scenario: {moved}", 1),
                      encoding="utf-8")
    assert yaml.safe_load(config.read_text(encoding="utf-8"))["scenario"] == str(moved)
    assert resume_to(run_dir, 64).steps == 64           # the same file, moved: it goes on
    edit(moved, "arrival_rate: 0.022", "arrival_rate: 0.2")
    assert f"scenario {moved} has changed since the run started (its workload" in (
        refused_resume(run_dir, 96))


def test_a_settings_key_of_a_config_file_of_ones_own_is_refused(tmp_path: Path) -> None:
    """--config reads a run's record over; a `settings` of another form is a key of the
    user's, refused as no option (it was read over without a word)."""
    from agents.config import ConfigError, TrainConfig
    from agents.config_parsing import parse_config

    mine = tmp_path / "mine.yaml"
    mine.write_text("timesteps: 500\nsettings: 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=f"^config file {mine}: unknown option 'settings'"):
        parse_config(TrainConfig, ["--config", str(mine)])


def test_a_run_folder_without_the_record_resumes_as_before(tmp_path: Path) -> None:
    """A run folder written before config.yaml recorded the setting has none to compare: it
    resumes (on the setting as it is now, as before), and records that for its next resume."""
    import yaml

    from agents.run_setting import SETTINGS

    scenario = own_scenario(tmp_path)
    run_dir = tiny_train(tmp_path, str(scenario))
    config = run_dir / "config.yaml"
    raw = yaml.safe_load(config.read_text(encoding="utf-8"))
    assert set(raw[SETTINGS]) == {str(scenario)}
    del raw[SETTINGS]
    config.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    edit(scenario, "arrival_rate: 0.022", "arrival_rate: 0.03")
    assert resume_to(run_dir, 64).steps == 64
    assert SETTINGS in yaml.safe_load(config.read_text(encoding="utf-8"))
    edit(scenario, "arrival_rate: 0.03", "arrival_rate: 0.04")
    assert "(its workload, by" in refused_resume(run_dir, 96)


@pytest.mark.parametrize(("part", "named"), [("workload", "preset scenario article"),
                                             ("hardware_figures", "hardware preset server")])
def test_a_preset_changed_by_a_project_update_refuses_a_resume_naming_it(
        tmp_path: Path, part: str, named: str) -> None:
    """A preset is part of the project: an update that changes it changes the setting the
    model trained on, so a resume is refused as for a file of one's own, naming the preset.
    (The recorded digest stands in for the update: the preset files are the project's.)"""
    import yaml

    from agents.run_setting import SETTINGS

    run_dir = tiny_train(tmp_path, "article")
    config = run_dir / "config.yaml"
    raw = yaml.safe_load(config.read_text(encoding="utf-8"))
    raw[SETTINGS]["article"][part] = "0" * 16
    config.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    message = refused_resume(run_dir)
    assert (f"scenario article has changed since the run started (its "
            f"{part.replace('_', ' ')}, by") in message
    assert f"restore {named} as it was (a preset or the code: as the project version" in message


def test_the_code_digest_follows_a_files_bytes_but_not_its_line_ends(tmp_path: Path) -> None:
    """The record's digests are of values; the simulator's code gets one of its own, by each
    file's path and bytes: an edit or a new file changes it, a CRLF checkout does not, and
    a file of another kind (a preset's YAML, recorded by value) is not read."""
    from agents.run_setting import code_digest, simulator_code_digest

    package = tmp_path / "sim"
    (package / "stages").mkdir(parents=True)
    (package / "core.py").write_text("RATE = 1.0\n", encoding="utf-8")
    (package / "stages" / "load.py").write_text("def load():\n    return 1\n", encoding="utf-8")
    first = code_digest({"sim": package})
    assert len(first) == 16 and code_digest({"sim": package}) == first
    (package / "core.py").write_bytes(b"RATE = 1.0\r\n")
    assert code_digest({"sim": package}) == first
    (package / "preset.yaml").write_text("rate: 2.0\n", encoding="utf-8")
    assert code_digest({"sim": package}) == first
    assert code_digest({"other": package}) != first             # where the files lie counts
    (package / "stages" / "load.py").write_text("def load():\n    return 2\n", encoding="utf-8")
    edited = code_digest({"sim": package})
    assert edited != first
    (package / "stages" / "decode.py").write_text("", encoding="utf-8")
    assert code_digest({"sim": package}) not in (first, edited)
    assert simulator_code_digest() == simulator_code_digest()   # this process's, memoised


def test_a_resume_on_other_simulator_code_goes_on_with_a_note(tmp_path: Path, capsys) -> None:
    """A change to the code itself (how the simulator uses the values) was not seen at all. A
    digest cannot tell a comment from a new cost model, so a resume on other code is not
    refused: it goes on, says so on stderr, and records the code it now trains on. Another
    change of the setting beside it is refused as before, without the code in its parts."""
    import yaml

    from agents.run_setting import SETTINGS, SIMULATOR_CODE, simulator_code_digest

    scenario = own_scenario(tmp_path)
    run_dir = tiny_train(tmp_path, str(scenario))
    config = run_dir / "config.yaml"

    def record_other_code() -> None:
        raw = yaml.safe_load(config.read_text(encoding="utf-8"))
        assert raw[SETTINGS][str(scenario)][SIMULATOR_CODE] == simulator_code_digest()
        raw[SETTINGS][str(scenario)][SIMULATOR_CODE] = "0" * 16    # the run started on other code
        config.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")

    record_other_code()
    capsys.readouterr()
    assert resume_to(run_dir, 64).steps == 64
    said = " ".join(capsys.readouterr().err.split())
    assert (f"note: {run_dir.name} resumes on other simulator code than it started on "
            f"(inference/ or envs/ has changed since") in said
    record_other_code()     # the resume recorded the code it trained on
    capsys.readouterr()
    assert resume_to(run_dir, 80).steps == 80
    assert "other simulator code" in capsys.readouterr().err
    assert resume_to(run_dir, 96).steps == 96        # the same code now: no note
    assert "other simulator code" not in capsys.readouterr().err
    record_other_code()
    edit(scenario, "arrival_rate: 0.022", "arrival_rate: 0.2")
    message = refused_resume(run_dir, 112)
    assert "(its workload, by the digests" in message and "simulator code" not in message


def test_evaluate_notes_a_model_trained_on_other_simulator_code(tmp_path: Path) -> None:
    """evaluate.py's note beside a model whose setting changed since its run trained names
    other simulator code as it names an edited file, and the project's code to restore."""
    import gymnasium as gym

    from agents.config import TrainConfig
    from agents.run_setting import SIMULATOR_CODE, changed_since_training, settings_of

    env = gym.make("envs:InferenceAlloc-v0", scenario="article", episode_tasks=10)
    recorded = settings_of(env, TrainConfig())
    assert changed_since_training(recorded, "article", env) is None
    recorded["article"][SIMULATOR_CODE] = "0" * 16
    parts, restore = changed_since_training(recorded, "article", env)
    assert (parts, restore) == ("simulator code", "the simulator's code (inference/ and envs/) "
                                                  "as it was when the run last trained")
    recorded["article"]["noise"] = "0" * 16
    parts, restore = changed_since_training(recorded, "article", env)
    assert parts == "noise, simulator code"
    assert restore.startswith("preset scenario article and the simulator's code (inference/ and "
                              "envs/) as they were (a preset or the code: as the project version")


def test_a_run_config_with_its_record_is_a_config_file_of_a_new_run(tmp_path: Path) -> None:
    """train.py --config RUN/config.yaml reads the record over: it is no option."""
    from agents.config import TrainConfig
    from agents.config_parsing import parse_config

    run_dir = tiny_train(tmp_path, "article")
    config, _ = parse_config(TrainConfig, ["--config", str(run_dir / "config.yaml")])
    assert config.timesteps == 32 and config.scenario == "article"


def test_building_or_loading_a_learner_runs_torch_on_one_thread(tmp_path: Path) -> None:
    """Small MLPs run ~10x slower on two threads (agents/sb3_factory.py), so building a
    learner, or loading one, puts torch on one thread whatever the process had set."""
    from agents.sb3_factory import make_sb3

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        agent = make_sb3("ppo", make(V0), seed=0)
        assert torch.get_num_threads() == 1
        agent.save(tmp_path / "one")
        torch.set_num_threads(2)
        load_sb3(tmp_path / "one.zip", make(V0))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
