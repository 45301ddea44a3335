"""SAC: the continuous-action agent of InferenceAllocSplit-v0 (training, loading, warm-up,
its hyper-parameter checks, and its refusal on the discrete env)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs
from agents.config import ConfigError, EvalConfig, TrainConfig
from agents.registry import load_policy, make_policy
from agents.sb3_factory import make_sb3
from agents.sb3_hyperparams import hyperparams_with, load_hyperparams
from agents.warmup import WarmSAC, WarmupConfig
from envs.inference_alloc_split import sequences_of

V0, SPLIT = envs.ENV_IDS
SMALL = {"learning_starts": 32, "batch_size": 16}     # updates from the first few dozen steps


def _env(env_id: str = SPLIT, tasks: int = 50) -> gym.Env:
    return gym.make(f"envs:{env_id}", episode_tasks=tasks, reward="relative")


def _observations(n: int = 8) -> np.ndarray:
    env = _env()
    return np.stack([env.reset(seed=s)[0] for s in range(n)])


def test_a_sac_run_of_train_py_is_a_model_evaluate_loads_and_acts_with(tmp_path: Path) -> None:
    from agents.model_discovery import discover_models
    from agents.training import train

    config = TrainConfig(agents=["sac"], warmup=["none"], env_id=SPLIT, timesteps=300,
                         episode_tasks=50, hp=dict(SMALL), log_dir=str(tmp_path / "runs"),
                         checkpoint_interval=0, eval_tasks=0, eval_interval=0,
                         progress_bar=False)
    [result] = train(config, report=lambda line: None)
    assert result.steps == 300
    [entry], _ = discover_models(EvalConfig(models=[str(result.run_dir)]))
    assert (entry.label, entry.env_id) == ("sac", SPLIT)
    env = _env()
    agent = load_policy(entry.path, env)
    assert agent.name == "sac"
    assert agent.model.num_timesteps == 300
    assert agent.model._n_updates > 200          # it learned: SAC updated every step past 32
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        action, _ = agent.predict(obs)
        assert env.action_space.contains(np.asarray(action, dtype=np.float32))
        obs, _, _, _, info = env.step(action)
        assert info["latency"] > 0


def _trained_actions(seed: int) -> np.ndarray:
    warmup = WarmupConfig(conservative="heft-split", steps=30, clone_samples=60, clone_epochs=2,
                          guard_window=20, guard_cooldown=10)
    agent = make_sb3("sac", _env(), seed=seed, overrides=SMALL, warmup=warmup)
    agent.learn(200)
    return np.asarray(agent.predict(_observations(), deterministic=True)[0])


def test_sac_with_warm_up_trains_to_the_same_actions_from_the_same_seed() -> None:
    first, again, other = _trained_actions(0), _trained_actions(0), _trained_actions(1)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)      # the seed is what makes them equal


def test_the_conservative_policy_takes_sacs_exploration_steps_and_fills_its_buffer() -> None:
    """The conservative's actions reach the replay buffer as the env ran them (in the box, a
    zero weight on its edge); after them the learner acts, never SB3's random warm-up actions
    (learning_starts is far off here)."""
    k = 30
    env = _env()
    agent = make_sb3("sac", env, seed=0, overrides={"learning_starts": 1000}, warmup=WarmupConfig(
        conservative="heft-split", steps=k, clone=False, guard=False))
    model = agent.model
    assert isinstance(model, WarmSAC)
    ctl = agent.warmup
    chosen, sent = ctl.actions, []
    ctl.actions = lambda obs: sent.append(chosen(obs).copy()) or sent[-1]

    def no_random_actions() -> None:
        raise AssertionError("SB3's random learning_starts action was taken")

    model.action_space.sample = no_random_actions
    agent.learn(k + 20)
    heft = np.concatenate(sent)
    assert len(heft) == k
    assert (heft == -1.0).sum() > k                  # heft-split leaves devices out
    stored = model.replay_buffer.actions[:k, 0]
    np.testing.assert_allclose(stored, heft, atol=1e-6)     # scale_action's float rounding
    assert (stored[heft == -1.0] == -1.0).all()             # no weight: no share, as sent
    learner = model.replay_buffer.actions[k:k + 20, 0]
    assert learner.min() > -1.0 and not np.isin(learner, heft).all()


def _shares(actions: np.ndarray, batch: int) -> np.ndarray:
    """Sequences of a `batch` each entry of each Split action gets, as the env rounds them."""
    weights = (actions.reshape(-1, 3, 3).astype(float) + 1) / 2
    return np.array([[sequences_of(list(stage), batch) for stage in row] for row in weights]
                    ).reshape(len(actions), -1)


def test_a_sac_clone_acts_like_heft_split_and_gives_no_share_where_it_gives_none() -> None:
    """SAC's tanh reaches -1 (a weight of exactly 0) only for a mean below -9.02; short of it
    a left-out device keeps a small weight, which the env's rounding must give no share (in a
    batch of 32, the scenarios' largest). A clone fitted onto atanh of the actions fitted
    nothing else well (0.49x best-static, heft-split 0.33x)."""
    from agents.cloning import collect

    env = _env(tasks=200)
    agent = make_sb3("sac", env, seed=0, warmup=WarmupConfig(
        conservative="heft-split", steps=0, clone_samples=1000, clone_epochs=20, guard=False))
    data = collect(env, make_policy("heft-split", env), 300, 0.9, seed=123)   # unseen episodes
    predicted = np.asarray(agent.predict(data["obs"], deterministic=True)[0])
    left_out = data["actions"] == -1.0
    assert left_out.sum() > 300
    assert np.mean(_shares(predicted, batch=32)[left_out] == 0) > 0.85
    assert np.abs(predicted - data["actions"])[~left_out].mean() < 0.2
    model = agent.model          # the TD targets start from the fitted critic
    for fitted, target in zip(model.critic.parameters(), model.critic_target.parameters(),
                              strict=True):
        assert torch.equal(fitted, target)


def test_sac_updates_can_give_a_share_to_a_device_its_clone_left_out() -> None:
    """heft-calibrated runs each stage on one device. Its clone used to push every entry it
    leaves out below a pre-tanh mean of -10 (tanh's slope there ~1e-8), too far for
    fine-tuning's updates to give that device a share again: the warm SAC of a 3000-step run
    stayed at 0.75x best-static (the cold one 0.40x). Here 200 actor updates at a fine-tuning rate (3e-4),
    each wanting a share on every such device (SAC's reparameterised sample, a critic rising
    with those entries), must reach most of the entries the clone gives none."""
    from agents.cloning import collect
    from agents.warmup import as_env_actions

    env = _env(tasks=200)
    agent = make_sb3("sac", env, seed=0, overrides={"learning_rate": 3e-4}, warmup=WarmupConfig(
        conservative="heft-calibrated", steps=0, clone_samples=1000, clone_epochs=20,
        guard=False))
    data = collect(env, make_policy("heft-calibrated", env), 64, 0.9, seed=123)
    left_out = torch.as_tensor(as_env_actions(data["actions"], env.action_space) == -1.0)
    obs = torch.as_tensor(data["obs"])
    actor = agent.model.actor

    def shares() -> np.ndarray:
        with torch.no_grad():
            return _shares(actor(obs, deterministic=True).numpy(), batch=32)

    none = (shares() == 0) & left_out.numpy()
    assert none.sum() > 50                     # the clone gives most of them no share
    for _ in range(200):
        actions, _ = actor.action_log_prob(obs)
        loss = -actions[left_out].mean()
        actor.optimizer.zero_grad()
        loss.backward()
        actor.optimizer.step()
    assert np.mean(shares()[none] > 0) > 0.5     # 0.0-0.2 from a clone below -10


def test_a_warm_started_sac_takes_its_envs_warm_start_values() -> None:
    cold = make_sb3("sac", _env(), seed=0).model
    warm = make_sb3("sac", _env(), seed=0, warmup=WarmupConfig(
        conservative="heft-split", clone_samples=32, clone_epochs=1)).model
    # sac.yaml's values, read back: its literals were copied here and went stale at each tuning
    yaml = {w: load_hyperparams("sac", SPLIT, warm_start=w) for w in (False, True)}
    for key in ("ent_coef", "learning_rate"):
        assert yaml[True][key] != yaml[False][key]       # each overridden, or nothing is tested
    assert cold.ent_coef == yaml[False]["ent_coef"] and warm.ent_coef == yaml[True]["ent_coef"]
    assert cold.lr_schedule(1.0) == pytest.approx(yaml[False]["learning_rate"])
    assert warm.lr_schedule(1.0) == pytest.approx(yaml[True]["learning_rate"])


# ----------------------------------------------------------------------------- refusals
def test_sac_on_the_discrete_env_names_the_env_it_trains_on_and_what_to_use() -> None:
    from agents.run_plan import plan

    message = (f"sac needs continuous \\(Box\\) actions: it trains on {SPLIT} \\(train.py --env "
               f"{SPLIT}\\), not {V0}; for {V0} use ppo, a2c, dqn, maskable-ppo")
    with pytest.raises(ValueError, match=message):
        make_policy("sac", _env(V0))
    with pytest.raises(ConfigError, match=message):
        plan(TrainConfig(agents=["sac"], warmup=["none"], episode_tasks=10))


def test_a_sac_model_loaded_with_the_discrete_env_names_the_env_it_acts_in(tmp_path) -> None:
    path = make_sb3("sac", _env(), seed=0).save(tmp_path / "sac")
    with pytest.raises(ValueError, match=f"holds an SB3 SAC model, which acts in {SPLIT}; this env's actions "
                                         f"are MultiDiscrete.*: load it with an {SPLIT} env"):
        load_policy(path, _env(V0))


@pytest.mark.parametrize(("overrides", "message"), [
    ({"ent_coef": "auto_0"}, "ent_coef must be auto, auto_<initial value > 0> .*got 'auto_0'"),
    ({"ent_coef": "auto_abc"}, "ent_coef must be auto, auto_<initial value"),
    ({"ent_coef": "auto_1_0"}, "ent_coef must be auto, auto_<initial value"),
    ({"ent_coef": "Auto"}, "ent_coef must be auto, auto_<initial value"),
    ({"ent_coef": True}, "ent_coef must be auto, auto_<initial value"),
    ({"ent_coef": -0.1}, r"ent_coef must be >= 0.0, got -0.1"),
    ({"ent_coef": float("nan")}, "ent_coef must be a finite number"),
    ({"target_entropy": "high"}, r"target_entropy must be auto or a number \(e.g. -9.0\)"),
    ({"target_entropy": "auto_0.1"}, "target_entropy must be auto or a number"),
    ({"learning_starts": -1}, "learning_starts must be >= 0, got -1"),
    ({"learning_starts": 1.5}, "learning_starts must be an integer"),
    ({"buffer_size": 0}, "buffer_size must be >= 1, got 0"),
    ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
    ({"tau": 1.5}, r"tau must be in \[0.0, 1.0\], got 1.5"),
    ({"gamma": "high"}, "gamma must be a number"),
    ({"train_freq": 0}, "train_freq must be an integer >= 1 or a pair"),
    ({"train_freq": [4, "epoch"]}, "train_freq must be an integer >= 1 or a pair"),
    ({"gradient_steps": 0}, "gradient_steps must be -1 .* or >= 1, got 0"),
    ({"policy_kwargs": {"net_arch": {"pi": [8]}}}, r"\{pi: \[...\], qf: \[...\]\} of such lists "
                                                   r"\(both keys\)"),
    ({"policy_kwargs": {"net_arch": {"pi": [8], "vf": [8]}}}, "qf"),
])
def test_a_bad_sac_hyper_parameter_is_one_clear_error(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        hyperparams_with("sac", SPLIT, overrides)


@pytest.mark.parametrize("overrides", [
    {"ent_coef": "auto"}, {"ent_coef": "auto_0.1"}, {"ent_coef": 0.05}, {"ent_coef": 0},
    {"target_entropy": -3}, {"target_entropy": "auto"}, {"gradient_steps": -1},
    {"train_freq": [1, "episode"]}, {"policy_kwargs": {"net_arch": {"pi": [8], "qf": [16]}}},
])
def test_the_forms_sac_takes_build_a_model(overrides: dict) -> None:
    model = make_sb3("sac", _env(), seed=0, overrides=overrides).model
    if "ent_coef" in overrides:
        expected = {"auto": 1.0, "auto_0.1": 0.1}.get(str(overrides["ent_coef"]),
                                                      overrides["ent_coef"])
        learned = model.log_ent_coef
        value = model.ent_coef_tensor if learned is None else learned.detach().exp()
        assert float(value) == pytest.approx(expected)


def test_a_plain_sb3_sac_zip_is_evaluated_as_sac_in_the_split_env(tmp_path: Path) -> None:
    from stable_baselines3 import SAC

    from agents.model_discovery import discover_models
    from agents.sb3_factory import saved_model_info

    SAC("MlpPolicy", _env(), device="cpu", seed=0).save(tmp_path / "plain.zip")
    assert saved_model_info(tmp_path / "plain.zip") == ("sac", SPLIT)
    [entry], _ = discover_models(EvalConfig(models=[str(tmp_path / "plain.zip")]))
    assert entry.env_id == SPLIT
    env = _env()
    action, _ = load_policy(tmp_path / "plain.zip", env).predict(env.reset(seed=0)[0])
    assert env.action_space.contains(np.asarray(action, dtype=np.float32))


def test_a_resumed_warm_sac_run_continues_with_its_warm_up_and_replay_buffer(
        tmp_path: Path, monkeypatch) -> None:
    import agents.resume as resume
    import agents.training as training

    attached = []

    def attach(agent, *args, **kwargs):
        attached.append((type(agent.model), agent.model.replay_buffer.size()))
        return real(agent, *args, **kwargs)

    real = resume.attach_warmup
    monkeypatch.setattr(resume, "attach_warmup", attach)
    config = TrainConfig(agents=["sac"], warmup=["all"], conservative="heft-split", env_id=SPLIT,
                         timesteps=128, episode_tasks=50, clone_samples=32, hp=dict(SMALL),
                         log_dir=str(tmp_path / "runs"), checkpoint_interval=64, eval_tasks=0,
                         eval_interval=0, progress_bar=False)
    [result] = training.train(config, report=lambda line: None)
    assert (result.run_dir / "replay_buffer.pkl").is_file()
    resumed = resume.resume_run(dataclasses.replace(
        config, resume=result.run_dir.name, timesteps=192), {"resume", "timesteps"})
    assert resumed.steps == 192
    # built as train_run builds it, the warm-up's class, with the run's buffer: model.zip's,
    # all 128 transitions (the 128-step checkpoint's held 127: SB3 calls the callback that
    # saves it before storing that step's transition and training on it)
    assert attached == [(WarmSAC, 128)]


def test_sacs_clone_loss_is_the_squared_error_inside_and_one_sided_below_the_edge() -> None:
    """_sac_actor_loss, worked by hand with SAC_EDGE = e: an entry on the lower edge (-1) costs
    (relu(mean + e) / e)^2, nothing once its mean is at or below -e; any other entry costs
    (tanh(mean) - action)^2; the loss is their mean."""
    from agents.cloning import SAC_EDGE, _sac_actor_loss

    e = SAC_EDGE
    mean = torch.tensor([2 * e, -e - 1.0, 0.0, 0.0])
    actions = torch.tensor([-1.0, -1.0, 0.5, -1.0])
    # edge entries: (3e / e)^2 = 9, 0 below -e, (e / e)^2 = 1; the inside one (0 - 0.5)^2
    expected = (9.0 + 0.0 + 0.25 + 1.0) / 4
    assert float(_sac_actor_loss(mean, actions)) == pytest.approx(expected)
