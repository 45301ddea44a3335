"""A learner whose weights go NaN or infinite (agents.divergence): stopped in one line, never
saved, never loaded."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from test_cli_scripts import load_main

from agents.divergence import Diverged
from agents.run_folder import save_model_files
from agents.sb3_factory import load_sb3, make_sb3


@pytest.mark.parametrize(("agent", "hp"), [
    ("ppo", ["n_steps=16", "batch_size=16"]),
    # DQN's argmax of NaN is device 0: it trained on, saved its NaNs and exited 0
    ("dqn", ["learning_starts=20", "train_freq=4"]),
])
def test_a_diverging_learner_stops_in_one_line_naming_the_learning_rate(
        tmp_path: Path, capsys, agent: str, hp: list[str]) -> None:
    """PPO's NaN weights died in torch's sampling with a traceback; DQN's were saved."""
    runs = tmp_path / "runs"
    code = load_main("train.py")(["--agents", agent, "--warmup", "none", "--timesteps", "200",
                                  "--eval-tasks", "0", "--episode-tasks", "40",
                                  "--checkpoint-interval", "0", "--no-progress-bar",
                                  "--hp", "learning_rate=1e30", *hp, "--log-dir", str(runs)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert re.search(r"failed \(Diverged: the policy diverged by step \d+: an update left its "
                     r"weights NaN or infinite; lower learning_rate \(now 1e\+30\)\); removed ",
                     err)
    assert list(runs.iterdir()) == []       # nothing saved to be scored


def test_a_model_with_nan_weights_is_refused_where_it_is_loaded(tmp_path: Path) -> None:
    """evaluate.py scored a diverged DQN's NaN model as all-CPU, and said nothing."""
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=10)
    model = make_sb3("dqn", env, seed=0).model
    path = tmp_path / "dqn.zip"
    model.save(path)
    assert load_sb3(path, env).name == "dqn"
    with torch.no_grad():
        next(model.policy.parameters())[0, 0] = float("nan")
    model.save(path)
    with pytest.raises(Diverged, match=f"model file {re.escape(str(path))} holds NaN or "
                                       "infinite weights"):
        load_sb3(path, env)


def test_a_model_with_nan_weights_is_never_saved(tmp_path: Path) -> None:
    """A checkpoint or model.zip of NaNs was written, to be resumed or scored."""
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=10)
    model = make_sb3("ppo", env, seed=0).model
    with torch.no_grad():
        next(model.policy.parameters())[0, 0] = float("inf")
    with pytest.raises(Diverged, match="the policy diverged by step 0: an update left its "
                                       "weights NaN or infinite; lower learning_rate"):
        save_model_files(model, tmp_path / "model.zip", 0)
    assert list(tmp_path.iterdir()) == []
