"""Short Stable-Baselines3 / sb3-contrib training runs on both env ids (smoke tests with teeth)."""

from __future__ import annotations

import re
import textwrap
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.utils import is_masking_supported
from stable_baselines3 import PPO

import envs
from agents.sb3_factory import load_sb3

V0, SPLIT = envs.ENV_IDS
STEPS = 256
EPISODE_TASKS = 50        # several episodes per run, so auto-resets are exercised too


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class AvoidAllMinusOne(gym.ActionWrapper):
    """Clip Split actions to [-0.999, 1] before the env sees them.

    SB3 clips a Gaussian policy's Box actions to the space's bounds [-1, 1]; an entry below -1
    becomes exactly -1 (weight 0). With three devices a stage is all -1 with probability ~0.4%
    per stage per step early in training, and the env rejects a stage with no device
    (ValueError, by its contract): unwrapped, PPO hit it within 1,024 steps on each of 4 seeds.
    Raising the floor to -0.999 keeps a tiny positive weight, so every stage always has a
    device; the agent's action space stays the env's Box(-1, 1). gymnasium.wrappers.ClipAction
    clips to the space's own bounds, so it cannot do this.
    """

    def action(self, action: np.ndarray) -> np.ndarray:
        return np.clip(action, -0.999, 1.0).astype(np.float32)


def make(env_id: str, **kwargs) -> gym.Env:
    env = gym.make(f"envs:{env_id}", episode_tasks=EPISODE_TASKS, **kwargs)
    return AvoidAllMinusOne(env) if env_id == SPLIT else env


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


def test_split_wrapper_never_sends_an_all_minus_one_stage() -> None:
    env = make(SPLIT)
    env.reset(seed=0)
    *_, info = env.step(-np.ones(9, dtype=np.float32))    # raw, this would be a ValueError
    assert info["latency"] > 0
    with pytest.raises(ValueError, match="no device"):
        env.unwrapped.step(-np.ones(9, dtype=np.float32))


def test_split_wrapper_leaves_stages_that_have_a_device_alone() -> None:
    from agents.sb3_factory import SPLIT_FLOOR, SafeSplitActions

    wrapper = SafeSplitActions(gym.make(f"envs:{SPLIT}"))
    action = np.array([1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 0.2, -1.0, 0.5], dtype=np.float32)
    out = wrapper.action(action)
    # a zero weight stays zero: a sliver of a device costs its set-up and queue in full
    assert out[[0, 1, 2, 6, 7, 8]].tolist() == action[[0, 1, 2, 6, 7, 8]].tolist()
    assert np.all(out[3:6] == np.float32(SPLIT_FLOOR))     # the empty stage: an even split
    batch = wrapper.action(np.stack([action, -action]))
    assert batch.shape == (2, 9) and batch[0].tolist() == out.tolist()


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
    (b'{"infer_agent": ["ppo"]}', "does not say which agent it holds"),  # was TypeError
])
def test_a_corrupt_model_zip_is_a_value_error_naming_the_file(
        tmp_path: Path, data: bytes, match: str) -> None:
    path = tmp_path / "model.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("data", data)
    with pytest.raises(ValueError, match=f"model file {re.escape(str(path))} {match}"):
        load_sb3(path)
