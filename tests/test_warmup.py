"""Warm-up (conservative start, behaviour cloning, guard), the SB3 factory and persistence."""

from __future__ import annotations

import dataclasses
import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from agents.registry import load_policy, make_policy
from agents.sb3_factory import make_sb3
from agents.sb3_hyperparams import hyperparams_with, load_hyperparams, parse_overrides
from agents.warmup import WarmupConfig, WarmupController


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
    """HEFT on the edge SoC places each stage by the queues it sees; since the edge CPU
    preprocesses at one core's rate, where its loads go depends on them too, and 3,000 samples
    fitted 40 times cloned 0.90 of held-out placements (twice as many, twice as long: 0.97)."""
    env = _env("edge", 200)
    agent = make_sb3("ppo", env, seed=0, warmup=WarmupConfig(
        conservative="heft", steps=0, clone=True, clone_samples=6000, clone_epochs=80, guard=False))
    assert agent.clone_stats["heldout_agreement"] >= 0.95


def test_dqn_clones_under_the_latency_reward_too():
    """Q-values regressed raw onto returns of about -300 s drowned the cross-entropy: the
    cloned action ended with the lowest Q (agreement 0.05 against 0.73 under 'relative')."""
    env = gym.make("envs:InferenceAlloc-v0", reward="latency", episode_tasks=100)
    agent = make_sb3("dqn", env, seed=0, warmup=WarmupConfig(clone_samples=600, guard=False))
    assert agent.clone_stats["heldout_agreement"] >= 0.4


@pytest.mark.parametrize("wrapper", ["shorter", "rescaled"])
def test_a_warm_up_behind_an_observation_wrapper_is_refused_before_it_clones(
        wrapper: str, monkeypatch) -> None:
    """The clone is fitted on the env's own observations and the conservative policy reads the
    learner's: behind a wrapper that changes them, a shorter observation stopped the clone with
    torch's "mat1 and mat2 shapes cannot be multiplied", and a rescaled one ran the whole clone
    before the conservative phase refused it. DQN's action wrapper leaves them as they are."""
    from gymnasium.wrappers import NormalizeObservation, TransformObservation

    from agents import cloning

    base = _env("edge", 20)
    own = base.observation_space
    if wrapper == "shorter":
        env = TransformObservation(base, lambda obs: obs[:-2],
                                   gym.spaces.Box(0, 1, (own.shape[0] - 2,), np.float32))
    else:
        env = NormalizeObservation(base)
    monkeypatch.setattr(cloning, "collect", lambda *a, **k: pytest.fail("cloned"))
    with pytest.raises(ValueError, match=re.escape(
            f"the warm-up reads the env's own observations ({own}), and a wrapper on the env "
            f"changes them to {env.observation_space}: warm up a learner built on the env's own "
            f"observations, or train this one without warm-up")):
        make_sb3("ppo", env, seed=0, warmup=WarmupConfig(clone_samples=64))
    make_sb3("ppo", env, seed=0)        # without warm-up: its own choice
    monkeypatch.undo()
    dqn = make_sb3("dqn", _env("edge", 20), seed=0, warmup=WarmupConfig(clone_samples=64))
    assert dqn.clone_stats["samples"] == 64


def test_an_agent_without_warmup_has_the_warmup_attributes_empty():
    """attach_warmup sets them, learn() and the online harness read them: declared, not patched."""
    agent = make_sb3("ppo", _env("edge", 50), seed=0)
    assert (agent.warmup, agent.callbacks, agent.clone_stats) == (None, [], None)
    warm = make_sb3("ppo", _env("edge", 50), seed=0, warmup=WarmupConfig(
        conservative="heft", steps=5, clone=False, guard=False))
    assert warm.warmup is not None and len(warm.callbacks) == 1 and warm.clone_stats is None


def test_cloning_fits_without_torchs_distribution_checks(monkeypatch: pytest.MonkeyPatch):
    """As the agents learn (test_env_training): each fitted batch built a checked Categorical
    per stage. The caller's setting is back after."""
    from torch.distributions import Distribution

    import agents.cloning as cloning

    seen, original = [], cloning._loss

    def recording(*args, **kwargs):
        seen.append(bool(Distribution._validate_args))
        return original(*args, **kwargs)

    monkeypatch.setattr(cloning, "_loss", recording)
    make_sb3("ppo", _env("edge", 50), seed=0, warmup=WarmupConfig(
        conservative="heft", steps=0, clone_samples=200, clone_epochs=1, guard=False))
    assert seen and not any(seen)
    assert Distribution._validate_args is True


def test_an_uncloned_learner_does_not_agree_by_chance():
    env = _env("edge", 200)
    from agents.cloning import _agreement, collect

    agent = make_sb3("ppo", env, seed=0)
    data = collect(env, make_policy("heft", env), 300, 0.9, seed=5)
    assert _agreement(agent, data["obs"], data["actions"]) < 0.6


def test_cloning_collects_whole_episodes_and_their_discounted_returns():
    """n samples of episodes of n / 2 tasks are two whole episodes (seeds `seed`, `seed` + 1),
    each sample's return its reward plus gamma times the next one's, to the episode's end.
    (The loop counted the current episode's decisions twice, so each later episode stopped
    halfway to n: 40 samples were episodes of 20, 10, 5, 3, 1 and 1 tasks.)"""
    from agents.cloning import collect

    env = _env("edge", 20)
    policy = make_policy("heft", env)
    data = collect(env, policy, 40, 0.9, seed=5)
    base = env.unwrapped
    obs, rewards, masks, episodes = [], [], [], []
    for seed in (5, 6):
        o, _ = base.reset(seed=seed)
        episode = []
        for _ in range(20):
            obs.append(o)
            masks.append(base.action_masks())
            o, r, terminated, truncated, _ = base.step(policy.predict(o)[0])
            episode.append(r)
        assert terminated or truncated
        episodes.append(episode)
        rewards.extend(_discounted(episode, 0.9))
    np.testing.assert_array_equal(data["obs"], np.asarray(obs, dtype=np.float32))
    np.testing.assert_array_equal(data["masks"], np.asarray(masks))
    np.testing.assert_allclose(data["returns"], rewards, rtol=1e-5)
    # 30 samples: the first episode whole and the second's first 10 decisions, whose returns
    # are discounted over those 10 rewards alone (the rollout stops there)
    part = collect(env, policy, 30, 0.9, seed=5)
    assert len(part["obs"]) == len(part["actions"]) == len(part["returns"]) == 30
    np.testing.assert_array_equal(part["obs"], np.asarray(obs[:30], dtype=np.float32))
    np.testing.assert_allclose(part["returns"], [*rewards[:20], *_discounted(episodes[1][:10], 0.9)],
                               rtol=1e-5)


def _discounted(rewards: list[float], gamma: float) -> list[float]:
    """Each step's reward plus gamma times the next step's return, the last step's its reward."""
    returns = [0.0] * len(rewards)
    for t in reversed(range(len(rewards))):
        returns[t] = rewards[t] + (gamma * returns[t + 1] if t + 1 < len(rewards) else 0.0)
    return returns


def test_cloning_fits_every_training_sample_once_an_epoch_and_scores_on_a_fifth_held_out(
        monkeypatch):
    """Of n samples, int(n * HELDOUT_FRACTION) are held out; the other n - that are the
    minibatches of each epoch, all of them once; the train / held-out agreements are scored on
    those two parts."""
    from agents import cloning

    losses: list[int] = []
    scored: list[int] = []
    loss, agreement = cloning._loss, cloning._agreement
    monkeypatch.setattr(cloning, "_loss", lambda agent, obs, *rest: (
        losses.append(len(obs)), loss(agent, obs, *rest))[1])
    monkeypatch.setattr(cloning, "_agreement", lambda agent, obs, actions: (
        scored.append(len(obs)), agreement(agent, obs, actions))[1])
    env = _env("edge", 20)
    agent = make_sb3("ppo", env, seed=0)
    n, epochs = 50, 3
    held = int(n * cloning.HELDOUT_FRACTION)                       # 10 of 50
    cloning.behaviour_clone(agent, env, make_policy("heft", env), WarmupConfig(
        conservative="heft", steps=0, clone_samples=n, clone_epochs=epochs, guard=False), seed=0)
    assert sum(losses) == epochs * (n - held)
    assert scored == [n - held, held]


@pytest.mark.parametrize(("name", "fit"), [("ppo", 0.25), ("dqn", 0.75), ("trpo", 0.25)])
def test_cloning_fits_the_critic_to_the_returns_earned(name, fit):
    """The critic (DQN: the Q-value of the cloned action) learns the discounted return the
    conservative policy earned: its squared error on the cloning samples falls."""
    from agents.cloning import CLONE_SEED_OFFSET, behaviour_clone, collect

    env = _env("edge", 100)
    agent = make_sb3(name, env, seed=0)
    heft = make_policy("heft", env)
    data = collect(env, heft, 300, agent.model.gamma, seed=CLONE_SEED_OFFSET)   # clone's own
    obs = torch.as_tensor(data["obs"])
    flat = [np.ravel_multi_index(tuple(a), (3, 3, 3)) for a in data["actions"]]

    def error() -> float:
        with torch.no_grad():
            if name == "dqn":
                values = agent.model.q_net(obs).gather(1, torch.as_tensor(flat).view(-1, 1))
            else:
                values = agent.model.policy.predict_values(obs)
        return float(np.mean((values.flatten().numpy() - data["returns"]) ** 2))

    before = error()
    behaviour_clone(agent, env, heft, WarmupConfig(conservative="heft", steps=0, clone_samples=300,
                                                   clone_epochs=10, guard=False), seed=0)
    assert error() < fit * before


def test_warmup_actions_in_the_split_env_are_one_hot_in_its_box():
    from agents.static import placement_action
    from agents.warmup import as_env_actions

    space = _env(env_id="InferenceAllocSplit-v0", tasks=5).unwrapped.action_space
    out = as_env_actions(np.array([[0, 1, 2], [2, 2, 0]]), space)
    expected = [placement_action(p, 3, split=True) for p in ((0, 1, 2), (2, 2, 0))]
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(as_env_actions(out, space), out)   # Box actions pass as is
    # an id one-hot nowhere (3: an IndexError) or on the last device (-1) is the env's refusal
    for ids in ([[0, 1, 3]], [[-1, 0, 0]]):
        with pytest.raises(ValueError, match=re.escape(f"action entries must be device ids in "
                                                       f"0..2, got {ids}")):
            as_env_actions(np.array(ids), space)


@pytest.mark.parametrize("name", ["ppo", "dqn", "trpo"])
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


@pytest.mark.parametrize("learner", [2.15, 2.25])
def test_the_guard_margin_is_relative_to_the_conservative_ratio(learner):
    """`guard_margin` is the learner's tolerated excess as a share of the conservative's ratio
    ("within the 5% margin"): the guard trips once the learner's mean ratio passes
    conservative x (1 + margin). With a conservative ratio of 2.0 and a margin of 0.1 that is
    2.2: a learner at 2.15 is within it -- an absolute margin (2.1) would pause it -- and one
    at 2.25 is not."""
    margin, conservative = 0.1, 2.0
    threshold = conservative * (1 + margin)
    assert conservative + margin < 2.15 < threshold < 2.25   # the cases tell the two apart
    config = WarmupConfig(steps=5, clone=False, guard=True, guard_window=20,
                          guard_margin=margin, guard_cooldown=10)
    ctl = WarmupController(conservative=None, config=config)
    for _ in range(5):
        assert ctl.use_conservative()
        ctl.record(conservative)
    for _ in range(20):                      # past half a window: the guard has judged
        assert not ctl.use_conservative()
        ctl.record(learner)
        if ctl.guard_trips:
            break
    assert ctl.guard_trips == (1 if learner > threshold else 0)


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


@pytest.mark.parametrize("name", ["ppo", "a2c", "dqn", "maskable-ppo", "trpo"])
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


@pytest.mark.parametrize("env_id", ["InferenceAlloc-v0", "InferenceAllocSplit-v0"])
@pytest.mark.parametrize("warm", [False, True])
def test_trpo_trains_cold_or_warm_in_either_env_and_loads_back(env_id, warm, tmp_path):
    """sb3-contrib's TRPO, in the device-id env (MultiDiscrete) and the Split env (Box), from
    scratch or from a clone (the warm-up's ActorCriticPolicy subclass): each rollout takes a
    trust-region step of the actor and fits the critic, and the saved model is a TRPO that
    acts as the trained one did, with actions the env takes."""
    from sb3_contrib import TRPO

    from agents.sb3_factory import saved_model_info
    from agents.warmup import WarmActorCriticPolicy

    env = _env(tasks=100, env_id=env_id)
    conservative = "heft-split" if env_id == "InferenceAllocSplit-v0" else "heft-calibrated"
    warmup = WarmupConfig(conservative=conservative, steps=40, clone_samples=200,
                          clone_epochs=2, guard_window=20, guard_cooldown=10) if warm else None
    agent = make_sb3("trpo", env, seed=0, warmup=warmup)
    policy = agent.model.policy
    assert isinstance(policy, WarmActorCriticPolicy) == warm
    assert (agent.clone_stats is not None) == warm
    actor = [p.detach().clone() for p in policy.action_net.parameters()]
    critic = [p.detach().clone() for p in policy.value_net.parameters()]
    rollouts = 3
    agent.learn(rollouts * agent.model.n_steps)
    assert agent.model._n_updates == rollouts
    assert not all(torch.equal(a, b) for a, b in zip(actor, policy.action_net.parameters(),
                                                      strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(critic, policy.value_net.parameters(),
                                                      strict=True))
    path = agent.save(tmp_path / "trpo")
    assert saved_model_info(path) == ("trpo", env_id)
    loaded = load_policy(path, env)
    assert loaded.name == "trpo" and isinstance(loaded.model, TRPO)
    obs = np.stack([env.reset(seed=s)[0] for s in range(8)])
    actions = loaded.predict(obs, deterministic=True)[0]
    np.testing.assert_array_equal(actions, agent.predict(obs, deterministic=True)[0])
    space = env.action_space
    assert all(space.contains(np.asarray(a, dtype=space.dtype)) for a in actions)


@pytest.mark.parametrize("env_id", ["InferenceAlloc-v0", "InferenceAllocSplit-v0"])
def test_trpos_update_starts_from_the_conservative_actions_own_log_probability(env_id):
    """The warm policy's forward() scores the conservative policy's action with the learner's
    own distribution; TRPO's update recomputes that log-probability with get_distribution()
    and steps on the ratio of the two. Both must agree before the step (ratio 1), or the
    surrogate objective the line search must improve is off from its first rollout."""
    env = _env(tasks=100, env_id=env_id)
    conservative = "heft-split" if env_id == "InferenceAllocSplit-v0" else "heft-calibrated"
    agent = make_sb3("trpo", env, seed=0, warmup=WarmupConfig(
        conservative=conservative, steps=1000, clone=False, guard=False))
    model = agent.model
    ratios: list[torch.Tensor] = []
    train = model.train

    def checked_train() -> None:
        data = next(model.rollout_buffer.get(batch_size=None))
        with torch.no_grad():
            log_prob = model.policy.get_distribution(data.observations).log_prob(data.actions)
        ratios.append(torch.exp(log_prob - data.old_log_prob))
        train()

    model.train = checked_train
    agent.learn(2 * model.n_steps)
    assert agent.warmup.decisions >= 2 * model.n_steps and len(ratios) == 2
    for ratio in ratios:
        torch.testing.assert_close(ratio, torch.ones_like(ratio), rtol=0, atol=1e-4)


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


@pytest.mark.parametrize(("overrides", "message"), [
    ({"n_steps": "abc"}, "n_steps must be an integer"),
    ({"gamma": "abc"}, "gamma must be a number"),
    ({"normalize_advantage": 1}, "normalize_advantage must be true or false"),
    ({"n_steps": True}, "n_steps must be an integer"),         # a bool is no integer here
    ({"n_epoch": 10}, "unknown ppo hyper-parameter 'n_epoch'"),
    ({"seed": 3}, "hyper-parameter seed is set by the trainer"),
])
def test_an_override_of_the_wrong_type_is_refused_before_the_model_is_built(overrides, message):
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=20)
    with pytest.raises(ValueError, match=message):
        make_sb3("ppo", env, seed=0, overrides=overrides)
    assert make_sb3("ppo", env, seed=0, overrides={"gamma": 1, "n_steps": 32}).model.n_steps == 32


@pytest.mark.parametrize(("agent", "override", "hint"), [
    ("ppo", "learning_rate=lin_3e-4", "linear schedules (lin_<x>) are not supported here: "
                                      "give a constant, e.g. learning_rate=0.0003"),
    ("ppo", "clip_range=lin_0.2", "e.g. clip_range=0.2"),
    ("dqn", "exploration_fraction=lin_0.1", "e.g. exploration_fraction=0.1"),
    ("ppo", "learning_rate='3e-4'", "a quoted number is text: write it unquoted"),
    ("ppo", 'batch_size="64"', "a quoted number is text: write it unquoted"),
])
def test_an_rl_zoo_schedule_or_a_quoted_number_says_what_to_write(agent, override, hint):
    """rl-baselines3-zoo writes lin_3e-4 for a linear schedule, which SB3 takes as a callable
    only; "must be a number, got 'lin_3e-4'" left it open whether schedules were meant."""
    with pytest.raises(ValueError, match="must be") as refused:
        hyperparams_with(agent, "InferenceAlloc-v0", parse_overrides([override]))
    assert hint in str(refused.value)


def test_dqn_ranges_are_checked_to_their_bounds_inclusive():
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=20)
    with pytest.raises(ValueError, match=r"exploration_fraction must be in \[0.0, 1.0\], got 1.5"):
        make_sb3("dqn", env, seed=0, overrides={"exploration_fraction": 1.5})
    bounds = {"exploration_fraction": 1.0, "exploration_final_eps": 0.0, "learning_starts": 0,
              "gamma": 1.0, "tau": 0.0}
    assert make_sb3("dqn", env, seed=0, overrides=bounds).model.exploration_fraction == 1.0


@pytest.mark.parametrize(("key", "value", "bounds"), [
    ("cg_max_steps", 0, ">= 1"),           # stepped along the solver's random start
    ("line_search_max_iter", 0, ">= 1"),   # tried no step: the policy never moved
    ("line_search_shrinking_factor", 1.5, r"in \[1e-09, 1.0\]"),   # grew the step
    ("cg_damping", -0.1, ">= 0.0"),        # an indefinite Fisher product
    ("n_critic_updates", 0, ">= 1"),       # never trained the critic
    ("sub_sampling_factor", 0, ">= 1"),    # a slice step of zero, inside the update
    ("target_kl", 0.0, ">= 1e-09"),        # no step is ever inside a trust region of 0
])
def test_trpos_update_settings_are_checked_before_the_model_is_built(key, value, bounds):
    """SB3-contrib's TRPO stores them as given; each out of range trained a policy that never
    moved, or moved anywhere, or failed once training had started."""
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=20)
    with pytest.raises(ValueError, match=f"hyper-parameter {key} must be {bounds}, got "
                                         f"{re.escape(str(value))}"):
        make_sb3("trpo", env, seed=0, overrides={key: value})
    with pytest.raises(ValueError, match=f"hyper-parameter {key} must be a number|must be an "
                                         f"integer"):
        make_sb3("trpo", env, seed=0, overrides={key: None})   # TRPO has no "off" for these
    edge = {"cg_max_steps": 1, "line_search_max_iter": 1, "line_search_shrinking_factor": 1.0,
            "cg_damping": 0.0, "n_critic_updates": 1, "sub_sampling_factor": 1}
    model = make_sb3("trpo", env, seed=0, overrides=edge).model
    assert (model.cg_max_steps, model.line_search_shrinking_factor) == (1, 1.0)


def test_gradient_steps_zero_is_refused_as_it_would_never_train():
    """SB3 takes gradient_steps=0 and skips every update: the run's model stayed as built."""
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=20)
    with pytest.raises(ValueError, match=r"gradient_steps must be -1 \(as many as the env "
                                         r"steps since the last update\) or >= 1, got 0"):
        make_sb3("dqn", env, seed=0, overrides={"gradient_steps": 0})
    assert make_sb3("dqn", env, seed=0, overrides={"gradient_steps": -1}).model.gradient_steps == -1


def test_dqns_train_freq_takes_a_pair_as_yaml_and_hp_spell_it():
    """[4, episode] from --hp or a YAML file is a list; SB3 takes a tuple, and read the list
    as the frequency itself: "must be an integer and not [4, 'episode']"."""
    import yaml
    from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit

    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=20)
    for spelt, freq in (("[4, episode]", TrainFreq(4, TrainFrequencyUnit.EPISODE)),
                        ("[2, step]", TrainFreq(2, TrainFrequencyUnit.STEP)),
                        ("3", TrainFreq(3, TrainFrequencyUnit.STEP))):
        agent = make_sb3("dqn", env, seed=0, overrides=parse_overrides([f"train_freq={spelt}"]))
        assert agent.model.train_freq == freq
        # recorded as given: a run's config.yaml (safe_dump) takes no tuple
        assert yaml.safe_load(yaml.safe_dump(agent.hyperparams))["train_freq"] == \
            yaml.safe_load(spelt)
    for bad in ([4], [0, "episode"], [4, "epoch"], [True, "step"], [4, "episode", 1], "4",
                ["4", "step"], 0):
        with pytest.raises(ValueError, match=r"train_freq must be an integer >= 1 or a pair "
                                             r"\[n, step\] or \[n, episode\]"):
            make_sb3("dqn", env, seed=0, overrides={"train_freq": bad})


def test_warmup_parts_parse():
    assert WarmupConfig.from_parts("none") is None
    full = WarmupConfig.from_parts("all")
    assert full is not None and full.clone and full.guard and full.steps > 0
    only_clone = WarmupConfig.from_parts("clone")
    assert only_clone is not None and only_clone.steps == 0 and not only_clone.guard
    for no_reference in ("guard", "clone,guard"):     # it would never trip: refused
        with pytest.raises(ValueError, match="use conservative,guard"):
            WarmupConfig.from_parts(no_reference)
    with pytest.raises(ValueError, match="unknown warm-up parts"):
        WarmupConfig.from_parts("clone,bogus")


def _feed(callback, infos) -> None:
    """One decision per info, as SB3 runs it: the policy asks who acts, then the callback sees it."""
    for info in infos:
        callback.controller.use_conservative()
        callback.update_locals({"infos": [info]})
        callback._on_step()


def _warmup_callback(config: WarmupConfig):
    from types import SimpleNamespace

    from stable_baselines3.common.logger import Logger

    from agents.warmup import WarmupCallback

    callback = WarmupCallback(WarmupController(None, config))
    callback.init_callback(SimpleNamespace(logger=Logger(folder=None, output_formats=[]),
                                           num_timesteps=0))
    return callback


def test_the_guard_compares_latency_ratios_not_raw_latencies():
    """A learner that matches static on big tasks is as good as static on small ones."""
    from agents.online import rollout

    env = _env(tasks=120)
    infos = rollout(make_policy("best-static", env), env, 120, seed=2)
    # best-static's placement in the env's own state is the static reference: ratio exactly 1
    assert all(i["latency"] == i["static_latency"] for i in infos)
    infos.sort(key=lambda i: i["latency"])
    small, large = infos[:20], infos[-60:]
    assert np.mean([i["latency"] for i in large]) > 2 * np.mean([i["latency"] for i in small])
    config = WarmupConfig(steps=20, clone=False, guard=True, guard_window=20, guard_margin=0.05,
                          guard_cooldown=10)

    callback = _warmup_callback(config)
    _feed(callback, small)                     # the conservative acts on the small tasks
    _feed(callback, large)                     # the learner, as good as static, on the large
    ctl = callback.controller
    assert ctl.guard_trips == 0
    assert list(ctl.conservative_ratios) == [1.0] * 20
    assert list(ctl.learner_ratios) == [1.0] * 20

    # and the other way round: a learner 1.5x static's latency on small tasks is worse than a
    # conservative policy matching static on large ones, though its raw latencies are lower
    callback = _warmup_callback(config)
    _feed(callback, large[-20:])
    worse = [dict(i, latency=1.5 * i["static_latency"]) for i in small[:10]]
    assert max(i["latency"] for i in worse) < min(i["latency"] for i in large[-20:])
    _feed(callback, worse)
    assert callback.controller.guard_trips == 1


def test_conservative_acting_logs_the_share_of_the_last_window_of_decisions():
    """It logged the last decision's 0/1 flag: once the guard paused, the curve jumped
    between 0 and 1 with whichever decision came last before a dump."""
    from types import SimpleNamespace

    from stable_baselines3.common.logger import Logger

    from agents.warmup import WarmupCallback

    config = WarmupConfig(steps=3, clone=False, guard=False)
    callback = WarmupCallback(WarmupController(None, config), window=4)
    logger = Logger(folder=None, output_formats=[])
    callback.init_callback(SimpleNamespace(logger=logger, num_timesteps=0))
    info = {"latency": 1.0, "static_latency": 1.0}
    shares = []
    for _ in range(6):              # 3 conservative decisions, then 3 of the learner
        _feed(callback, [info])
        shares.append(logger.name_to_value["warmup/conservative_acting"])
    assert shares == [1.0, 1.0, 1.0, 0.75, 0.5, 0.25]
    with pytest.raises(ValueError, match="window must be >= 1"):
        WarmupCallback(WarmupController(None, config), window=0)


def test_train_py_gives_the_warmup_callback_its_metrics_window_and_documents_its_tags():
    from agents.warmup import WarmupCallback

    agent = make_sb3("ppo", _env(tasks=40), seed=0, metrics_window=7,
                     warmup=WarmupConfig(steps=5, clone=False))
    (callback,) = agent.callbacks
    assert isinstance(callback, WarmupCallback) and callback.acting.maxlen == 7
    # documented where the other tags are, and the option names it
    import agents.callbacks
    from agents.config import TrainConfig

    for tag in ("warmup/conservative_acting", "warmup/guard_trips"):
        assert f"``{tag}``" in agents.callbacks.__doc__, tag
    help_text = {f.name: f.metadata["help"] for f in dataclasses.fields(TrainConfig)}
    assert "warmup/conservative_acting" in help_text["metrics_window"]


def test_after_a_trip_the_learner_gets_a_fresh_window():
    config = WarmupConfig(steps=4, clone=False, guard=True, guard_window=20, guard_margin=0.05,
                          guard_cooldown=7)
    ctl = WarmupController(conservative=None, config=config)
    for _ in range(4):
        assert ctl.use_conservative()
        ctl.record(1.0)
    for _ in range(10):                        # half a window of a bad learner: a trip
        assert not ctl.use_conservative()
        ctl.record(2.0)
    assert ctl.guard_trips == 1
    assert len(ctl.learner_ratios) == 0        # the bad window is forgotten
    for _ in range(7):                         # the conservative acts for guard_cooldown decisions
        assert ctl.use_conservative()
        ctl.record(1.0)
    # back in control, a now-good learner is judged on its new decisions only: no second trip
    for _ in range(40):
        assert not ctl.use_conservative()
        ctl.record(1.0)
    assert ctl.guard_trips == 1

    # a learner still bad gets half a window again before the next trip, not one decision
    ctl = WarmupController(conservative=None, config=config)
    for _ in range(4):
        ctl.use_conservative()
        ctl.record(1.0)
    for _ in range(10):
        ctl.use_conservative()
        ctl.record(2.0)
    for _ in range(7):
        ctl.use_conservative()
        ctl.record(1.0)
    for n in range(1, 11):
        assert not ctl.use_conservative()
        ctl.record(2.0)
        assert ctl.guard_trips == (2 if n == 10 else 1)


def test_a_resumed_guard_still_compares_the_learner_with_the_conservative_policy():
    """train.py --resume builds a new controller (past the conservative phase: steps 0) and
    restores the saved state. That state was the trip count alone: the new controller had no
    conservative ratio to compare with, and its guard never tripped again, however bad the
    learner. It now carries on with both windows and any pause in progress."""
    import json

    config = WarmupConfig(steps=4, clone=False, guard=True, guard_window=20, guard_cooldown=7)
    ctl = WarmupController(conservative=None, config=config)
    for _ in range(4):
        ctl.use_conservative()
        ctl.record(1.0)
    for _ in range(10):                              # a bad learner: a trip, a pause begins
        ctl.use_conservative()
        ctl.record(2.0)
    ctl.use_conservative()
    ctl.record(1.0)
    assert (ctl.guard_trips, ctl.cooldown) == (1, 6)

    resumed = WarmupController(None, dataclasses.replace(config, steps=0))
    resumed.restore(json.loads(json.dumps(ctl.state())))      # as warmup.json carries it
    assert all(resumed.use_conservative() for _ in range(6))   # the rest of the pause
    for _ in range(10):                              # the learner, still bad: a trip again
        assert not resumed.use_conservative()
        resumed.record(2.0)
    assert resumed.guard_trips == 2

    old = WarmupController(None, config)             # a state saved before it held the windows
    old.restore({"guard_trips": 3})
    assert (old.guard_trips, old.cooldown, list(old.conservative_ratios)) == (3, 0, [])
    with pytest.raises(ValueError, match="conservative_ratios must be a list of finite"):
        old.restore({"guard_trips": 3, "conservative_ratios": [1.0, "x"]})
    with pytest.raises(ValueError, match="cooldown must be an integer >= 0"):
        old.restore({"guard_trips": 3, "cooldown": -1})
    with pytest.raises(ValueError, match="guard_trips must be an integer >= 0"):
        old.restore({"guard_trips": -1})


def test_warm_dqn_acts_greedily_after_the_conservative_phase():
    """Past the conservative steps WarmDQN takes its Q-network's argmax (epsilon here 0), not
    SB3's uniformly random learning_starts actions."""
    from stable_baselines3.common.callbacks import BaseCallback

    k = 10
    env = _env(tasks=200)
    agent = make_sb3("dqn", env, seed=3, overrides={
        "learning_starts": 1000, "exploration_initial_eps": 0.0, "exploration_final_eps": 0.0},
        warmup=WarmupConfig(conservative="all-gpu", steps=k, clone=False, guard=False))
    model = agent.model
    steps: list[tuple[np.ndarray, int]] = []

    class _Record(BaseCallback):
        def _on_step(self) -> bool:            # _last_obs is still the observation acted on
            steps.append((model._last_obs.copy(), int(self.locals["actions"][0])))
            return True

    agent.learn(k + 40, callback=_Record())   # no update before learning_starts: q_net is fixed
    gpu = int(np.ravel_multi_index((1, 1, 1), env.unwrapped.action_space.nvec))
    assert [a for _, a in steps[:k]] == [gpu] * k
    obs = np.concatenate([o for o, _ in steps[k:]])
    with torch.no_grad():
        greedy = model.q_net(torch.as_tensor(obs)).argmax(dim=1).numpy()
    taken = np.array([a for _, a in steps[k:]])
    assert np.array_equal(taken, greedy)


def _offline_npu_env(tasks: int = 60):
    """The faults scenario with its NPU offline from the first task."""
    import dataclasses

    from envs.scenario import Fault, load_scenario

    sc = dataclasses.replace(load_scenario("faults"), faults=(
        Fault(device="npu", kind="offline", start_task=0, end_task=tasks),))
    return gym.make("envs:InferenceAlloc-v0", scenario=sc, episode_tasks=tasks, reward="relative")


def test_a_masked_conservative_action_falls_back_to_the_learner():
    """forward(): a conservative action its masks rule out is not sent; the learner acts,
    and the decision is booked as the learner's."""
    env = _offline_npu_env()
    agent = make_sb3("maskable-ppo", env, seed=0, warmup=WarmupConfig(
        conservative="all-npu", steps=50, clone=False, guard=False))
    policy, ctl = agent.model.policy, agent.warmup
    obs, _ = env.reset(seed=0)
    masks = env.unwrapped.action_masks()
    npu = env.unwrapped.device_names.index("npu")
    assert not masks.reshape(3, -1)[:, npu].any()          # the NPU is offline
    obs_t = torch.as_tensor(obs[None])
    with torch.no_grad():
        actions, _, log_prob = policy(obs_t, deterministic=True, action_masks=masks[None])
    assert not ctl.last_conservative
    assert np.all(actions.numpy()[0] != npu)
    assert torch.all(torch.isfinite(log_prob))
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    with torch.no_grad():                      # the learner's own deterministic choice
        learner, _, _ = MaskableActorCriticPolicy.forward(policy, obs_t, True,
                                                          action_masks=masks[None])
    assert torch.equal(actions, learner)


def test_with_a_device_offline_the_masked_conservative_action_is_never_sent():
    # MaskableCategorical gives a masked action a log-prob of -1e8 per stage (finite): the
    # warm-up used to test the log-prob alone, and sent the masked conservative action.
    from stable_baselines3.common.callbacks import BaseCallback

    env = _offline_npu_env()
    agent = make_sb3("maskable-ppo", env, seed=0, warmup=WarmupConfig(
        conservative="all-npu", steps=50, clone=False, guard=False))
    seen: list[tuple[int, bool, float]] = []

    class _Record(BaseCallback):
        def _on_step(self) -> bool:
            seen.append((self.locals["infos"][0]["failed_dispatch"], agent.warmup.last_conservative,
                         float(self.locals["log_probs"][0])))
            return True

    agent.learn(20, callback=_Record())
    assert all(failed == 0 for failed, _, _ in seen)          # no masked pick reached the env
    assert not any(conservative for _, conservative, _ in seen)
    assert all(lp > -100.0 for _, _, lp in seen)


def test_a_masked_pick_is_found_in_whichever_stage_it_is() -> None:
    """_picks_masked reads stage s's option a at offset sum(nvec[:s]) + a of a row's masks:
    here only stage 0's option 0 and stage 2's option 1 are ruled out, each pick checked
    alone (a stage-0 pick read one option off, at 1, looked allowed)."""
    from gymnasium import spaces

    from agents.warmup import _picks_masked

    space = spaces.MultiDiscrete([2, 3, 2])
    masks = np.ones(7, dtype=bool)
    masks[0] = False                                  # stage 0, option 0: offset 0
    masks[2 + 3 + 1] = False                          # stage 2, option 1: offset 5 + 1
    assert _picks_masked(np.array([0, 0, 0]), masks, space)
    assert _picks_masked(np.array([1, 2, 1]), masks, space)
    assert not _picks_masked(np.array([1, 0, 0]), masks, space)
    # two rows (two envs): one masked pick in either row counts
    assert _picks_masked(np.array([[1, 0, 0], [0, 1, 0]]), np.stack([masks, masks]), space)
    assert not _picks_masked(np.array([[1, 0, 0], [1, 2, 0]]), np.stack([masks, masks]), space)
    # a flat Discrete action (one dimension) reads its own masks, and no masks rule nothing out
    assert _picks_masked(np.array([2]), np.array([True, True, False]), spaces.Discrete(3))
    assert not _picks_masked(np.array([1]), np.array([True, True, False]), spaces.Discrete(3))
    assert not _picks_masked(np.array([0, 0, 0]), None, space)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"conservative": "ppo"}, "'ppo' is a learning agent"),     # cloned an untrained PPO
    ({"conservative": "gated-ppo"}, "'gated-ppo' is a learning agent"),   # gated or not
    ({"conservative": None}, "conservative must be a policy name"),
    ({"clone": "no"}, "clone must be True or False"),           # "no" counted as True
    ({"guard_margin": True}, "guard_margin must be a number"),
    ({"guard_margin": "x"}, "guard_margin must be a number"),   # was a bare TypeError
    ({"guard_margin": 10}, r"guard_margin must be in \[0, 10\)"),
    ({"guard_margin": -0.01}, r"guard_margin must be in \[0, 10\)"),
    # accepted, then failed inside SB3 once the clone was scored on its (empty) held-out part
    ({"clone_samples": 4}, "clone_samples must be >= 10 to clone, got 4"),
    ({"clone_samples": 0}, "clone_samples must be >= 10 to clone, got 0"),
])
def test_a_bad_warmup_config_is_a_value_error(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WarmupConfig(**kwargs)


def test_a_warmup_config_stores_numpy_numbers_plain() -> None:
    # np.int64 passed the checks and was kept: deque(maxlen=np.int64(50)) in the controller
    # was a bare TypeError, and a cooldown of np.int64 made the saved warm-up state unwritable
    import json

    config = WarmupConfig(guard_window=np.int64(50), guard_cooldown=np.int64(5),
                          steps=np.uint16(30), guard_margin=np.float32(0.25))
    assert config == WarmupConfig(guard_window=50, guard_cooldown=5, steps=30, guard_margin=0.25)
    assert type(config.guard_window) is int and type(config.guard_margin) is float
    json.dumps(dataclasses.asdict(config))


def test_a_warmup_configs_parts_take_numpys_bools_and_store_them_plain() -> None:
    """np.True_ was refused ("clone must be True or False, got np.True_"), where the envs'
    flags take it; 1 and 0 are still refused, as there."""
    config = WarmupConfig(clone=np.True_, guard=np.False_)
    assert config == WarmupConfig(clone=True, guard=False)
    assert type(config.clone) is bool and type(config.guard) is bool
    for flag in (1, 0, 1.0):
        with pytest.raises(ValueError, match=r"^WarmupConfig.guard must be True or False"):
            WarmupConfig(guard=flag)


def test_a_warmup_that_does_not_clone_takes_any_number_of_clone_samples() -> None:
    assert WarmupConfig(clone=False, clone_samples=0).clone_samples == 0


def test_the_guard_warns_when_it_can_only_compare_raw_latencies() -> None:
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=100)       # reward="latency"
    agent = make_sb3("ppo", env, seed=0, warmup=WarmupConfig(steps=0, clone=False))
    with pytest.warns(UserWarning, match="compares raw latencies"):
        agent.learn(32)
    for priced in (_env(tasks=100),          # relative: ratios, no warning
                   gym.make("envs:InferenceAlloc-v0", episode_tasks=100, price_static=True)):
        quiet = make_sb3("ppo", priced, seed=0, warmup=WarmupConfig(steps=0, clone=False))
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            quiet.learn(32)


def _lr(model) -> float:
    """The step size an SB3 model trains with: its schedule's, and its optimizer's."""
    lr = model.lr_schedule(1.0)
    assert model.policy.optimizer.param_groups[0]["lr"] == pytest.approx(lr)
    return lr


def test_a_cloned_ppo_fine_tunes_with_a_smaller_learning_rate_than_a_cold_one_learns_with():
    """At the cold learner's 1e-3, PPO drifted off the clone it started from (the YAML's
    warm_start; docs/CALIBRATION.md, "Learner")."""
    env = _env(tasks=50)
    small = {"clone_samples": 64, "clone_epochs": 1}
    cold = _lr(make_sb3("ppo", env, seed=0).model)
    warm = _lr(make_sb3("ppo", env, seed=0, warmup=WarmupConfig(**small)).model)
    assert warm < cold
    yaml_lr = load_hyperparams("ppo", "InferenceAlloc-v0", warm_start=True)["learning_rate"]
    assert warm == pytest.approx(yaml_lr)
    # without a clone there is nothing to fine-tune: the learner learns at the cold rate
    uncloned = make_sb3("ppo", env, seed=0, warmup=WarmupConfig.from_parts("conservative,guard"))
    assert _lr(uncloned.model) == pytest.approx(cold)
    # an explicit override still wins over the warm-start value
    model = make_sb3("ppo", env, seed=0, warmup=WarmupConfig(**small),
                     overrides={"learning_rate": 5e-4}).model
    assert _lr(model) == pytest.approx(5e-4)


def test_a_cloned_maskable_ppo_fine_tunes_with_a_smaller_learning_rate():
    """At its cold 1e-3, MaskablePPO's held-out eval/ rose from its clone's 0.697 of
    best-static to 0.713 on average; at 1e-4 it stays at the clone (the YAML's warm_start;
    docs/CALIBRATION.md, "Learner")."""
    env = _env(tasks=50)
    cold = _lr(make_sb3("maskable-ppo", env, seed=0).model)
    warm = _lr(make_sb3("maskable-ppo", env, seed=0,
                        warmup=WarmupConfig(clone_samples=64, clone_epochs=1)).model)
    assert warm < cold
    yaml_lr = load_hyperparams("maskable-ppo", "InferenceAlloc-v0", warm_start=True)["learning_rate"]
    assert warm == pytest.approx(yaml_lr)
    uncloned = make_sb3("maskable-ppo", env, seed=0,
                        warmup=WarmupConfig.from_parts("conservative,guard"))
    assert _lr(uncloned.model) == pytest.approx(cold)


def test_a_split_clone_gives_no_share_where_heft_split_gives_none():
    """heft-split leaves most devices out of a stage (weight exactly 0, the box's edge -1).
    Fitted onto the edge, the Gaussian's mean landed just inside it, so nearly every such
    device got a sliver share that paid its fixed costs in full (the clone ran at 0.42-0.55x
    best-static's latency, heft-split at 0.33x); cloning fits those entries below the edge,
    where the deterministic action is clipped onto it."""
    from agents.cloning import collect

    env = gym.make("envs:InferenceAllocSplit-v0", episode_tasks=200, reward="relative")
    agent = make_sb3("ppo", env, seed=0, warmup=WarmupConfig(
        conservative="heft-split", steps=0, clone_samples=1000, clone_epochs=20, guard=False))
    data = collect(env, make_policy("heft-split", env), 300, 0.9, seed=123)   # unseen episodes
    predicted = agent.predict(data["obs"], deterministic=True)[0]
    left_out = data["actions"] == -1.0
    assert left_out.sum() > 300
    assert np.mean(predicted[left_out] > -1.0) < 0.15      # 0.32 when fitted onto the edge


@pytest.mark.parametrize("name", ["ppo", "trpo"])
def test_a_split_learner_learns_heft_splits_actions_below_the_edge_where_it_gives_no_share(name):
    """When heft-split acts for the Split-env PPO, PPO stores that action (unclipped) and
    updates towards it. Stored on the box's edge (-1), it pulled the clone's mean up from
    ``BOX_EDGE_MARGIN`` below the edge to just inside it, to sliver shares (eval/ 0.42-0.45x
    best-static over 60k steps, against 0.34); it is stored where the clone was fitted, and
    the env still receives heft-split's action, clipped back onto the edge."""
    from stable_baselines3.common.callbacks import BaseCallback

    from agents.warmup import BOX_EDGE_MARGIN

    env = gym.make("envs:InferenceAllocSplit-v0", episode_tasks=50, reward="relative")
    agent = make_sb3(name, env, seed=0, warmup=WarmupConfig(
        conservative="heft-split", steps=1000, clone=False, guard=False), overrides={"n_steps": 32, "batch_size": 32})
    ctl = agent.warmup
    chosen, sent = ctl.actions, []

    def spy(obs: np.ndarray) -> np.ndarray:
        sent.append(chosen(obs).copy())
        return sent[-1]

    ctl.actions = spy
    received: list[np.ndarray] = []

    class _Record(BaseCallback):
        def _on_step(self) -> bool:
            received.append(np.array(self.locals["clipped_actions"]))
            return True

    agent.learn(32, callback=_Record())
    heft = np.concatenate(sent)
    stored = agent.model.rollout_buffer.actions.reshape(heft.shape)
    edge = heft == -1.0
    assert edge.sum() > 32                                # heft-split leaves devices out
    np.testing.assert_allclose(stored[edge], -1.0 - BOX_EDGE_MARGIN)
    np.testing.assert_allclose(stored[~edge], heft[~edge])
    np.testing.assert_array_equal(np.concatenate(received), heft)   # what the env ran


def test_a_cloned_split_ppo_stops_an_update_before_the_guards_actions_blow_it_up():
    """Under the guard, heft-split's off-policy actions blew the Split-env PPO's ratio up
    (KL peaks 1e18 and more) until one seed died of NaN (the YAML's warm_start;
    docs/CALIBRATION.md, "Learner"). A cold learner has no such actions, and no limit."""
    env = gym.make("envs:InferenceAllocSplit-v0", episode_tasks=50, reward="relative")
    cold = make_sb3("ppo", env, seed=0).model
    warm = make_sb3("ppo", env, seed=0, warmup=WarmupConfig(
        conservative="heft-split", clone_samples=64, clone_epochs=1)).model
    assert cold.target_kl is None
    assert warm.target_kl == load_hyperparams("ppo", "InferenceAllocSplit-v0",
                                              warm_start=True)["target_kl"] == 0.03
    assert _lr(warm) == pytest.approx(_lr(cold))     # the rate stays: 1e-4 was no fix


def test_a_cloned_dqn_fine_tunes_greedily_and_with_a_smaller_learning_rate():
    """From epsilon 1.0 and at the cold 1e-3, DQN acted at random over the clone it started
    from and drifted off it (the YAML's warm_start; docs/CALIBRATION.md, "Learner")."""
    env = _env(tasks=50)
    cold = make_sb3("dqn", env, seed=0).model
    warm = make_sb3("dqn", env, seed=0,
                    warmup=WarmupConfig(clone_samples=64, clone_epochs=1)).model
    yaml = load_hyperparams("dqn", "InferenceAlloc-v0", warm_start=True)
    assert _lr(warm) < _lr(cold)
    assert _lr(warm) == pytest.approx(yaml["learning_rate"])
    # the clone acts from the first step past the conservative phase: no random start
    assert cold.exploration_schedule(1.0) == pytest.approx(1.0)
    assert warm.exploration_schedule(1.0) == pytest.approx(warm.exploration_final_eps)
    assert warm.exploration_schedule(1.0) == pytest.approx(yaml["exploration_initial_eps"])
    # without a clone there is nothing to fine-tune: the cold values
    uncloned = make_sb3("dqn", env, seed=0,
                        warmup=WarmupConfig.from_parts("conservative,guard")).model
    assert _lr(uncloned) == pytest.approx(_lr(cold))
    assert uncloned.exploration_schedule(1.0) == pytest.approx(1.0)


def test_a_warm_start_policy_kwargs_merges_into_the_envs_like_an_override(tmp_path, monkeypatch):
    """A warm_start {net_arch: ...} replaced the env's policy_kwargs whole, dropping its
    activation_fn, where the same --hp override merges into them."""
    import agents.sb3_hyperparams as hyperparams
    (tmp_path / "ppo.yaml").write_text(
        "InferenceAlloc-v0:\n  n_steps: 16\n"
        "  policy_kwargs: {net_arch: [8], activation_fn: tanh}\n"
        "  warm_start: {policy_kwargs: {net_arch: [4]}}\n")
    monkeypatch.setattr(hyperparams, "HYPERPARAMS_DIR", tmp_path)
    warm = hyperparams.load_hyperparams("ppo", "InferenceAlloc-v0", warm_start=True)
    assert warm["policy_kwargs"] == {"net_arch": [4], "activation_fn": "tanh"}
    override = hyperparams.hyperparams_with("ppo", "InferenceAlloc-v0",
                                        {"policy_kwargs": {"net_arch": [4]}})
    assert override["policy_kwargs"] == warm["policy_kwargs"]
    assert hyperparams.load_hyperparams("ppo", "InferenceAlloc-v0")["policy_kwargs"]["net_arch"] == [8]


def test_an_unknown_activation_is_refused_with_the_hyper_parameters(tmp_path, monkeypatch):
    # It was checked only as the agent was built: train.py's plan() passed a YAML typo, and
    # the run failed as it started.
    import agents.sb3_hyperparams as hyperparams

    (tmp_path / "ppo.yaml").write_text(
        "InferenceAlloc-v0:\n  policy_kwargs: {net_arch: [8], activation_fn: sigmoid}\n")
    monkeypatch.setattr(hyperparams, "HYPERPARAMS_DIR", tmp_path)
    with pytest.raises(ValueError, match=r"ppo\.yaml, InferenceAlloc-v0: unknown activation_fn "
                                         r"'sigmoid'; known: tanh, relu, elu, gelu, silu, leaky_relu"):
        hyperparams.load_hyperparams("ppo", "InferenceAlloc-v0")
    with pytest.raises(ValueError, match="unknown activation_fn 'swish'"):
        hyperparams.check_override_types("ppo", {}, {"policy_kwargs": {"activation_fn": "swish"}})


@pytest.mark.parametrize("name", ["gelu", "silu", "leaky_relu"])
def test_every_named_activation_builds_the_net_with_it(name: str) -> None:
    """An audit wanted gelu, the transformers' activation, and it was refused: tanh, relu and
    elu were the only names. Each name now builds its torch module into the policy net."""
    from agents.sb3_factory import make_sb3
    from agents.sb3_hyperparams import ACTIVATIONS

    agent = make_sb3("ppo", gym.make("envs:InferenceAlloc-v0", episode_tasks=5), seed=0,
                     overrides={"policy_kwargs": {"activation_fn": name}})
    layers = list(agent.model.policy.mlp_extractor.policy_net)
    assert [type(layer) for layer in layers[1::2]] == [ACTIVATIONS[name]] * 2, layers


@pytest.mark.parametrize(("env_id", "policy_kwargs", "message"), [
    # each a TypeError or a multi-line torch error as SB3 built or first trained the net:
    # inside the run, after train.py's plan() had passed the YAML
    ("InferenceAlloc-v0", "{net_arch: [8], activation_fn: null}",
     r"policy_kwargs\.activation_fn must be one of tanh, relu, elu, gelu, silu, leaky_relu, got None"),
    ("InferenceAlloc-v0", "{net_arch: [8], activation_fn: 1}",
     r"policy_kwargs\.activation_fn must be one of tanh, relu, elu, gelu, silu, leaky_relu, got 1"),
    ("InferenceAlloc-v0", "{net_arc: [8]}",
     r"unknown policy_kwargs key 'net_arc' \(did you mean 'net_arch'\?\) for ppo; known: "
     r"net_arch, activation_fn, ortho_init"),
    ("InferenceAllocSplit-v0", "{log_std_init: .nan}",
     r"policy_kwargs\.log_std_init must be a number in \[-20, 20\], got nan"),
    ("InferenceAllocSplit-v0", "{log_std_init: -5.0e+5}",
     r"policy_kwargs\.log_std_init must be a number in \[-20, 20\], got -500000\.0"),
    ("InferenceAllocSplit-v0", "{log_std_init: true}",
     r"policy_kwargs\.log_std_init must be a number in \[-20, 20\], got True"),
])
def test_policy_kwargs_the_policy_cannot_build_are_refused_with_the_hyper_parameters(
        tmp_path, monkeypatch, env_id, policy_kwargs, message):
    import agents.sb3_hyperparams as hyperparams

    (tmp_path / "ppo.yaml").write_text(f"{env_id}:\n  policy_kwargs: {policy_kwargs}\n")
    monkeypatch.setattr(hyperparams, "HYPERPARAMS_DIR", tmp_path)
    with pytest.raises(ValueError, match=rf"ppo\.yaml, {env_id}: (hyper-parameter )?{message}"):
        hyperparams.load_hyperparams("ppo", env_id)


def test_policy_kwargs_as_far_as_taken_build(tmp_path, monkeypatch):
    """The bounds are closed, and an activation given from code as the torch class is taken."""
    import agents.sb3_hyperparams as hyperparams

    env = gym.make("InferenceAllocSplit-v0", scenario="article", episode_tasks=20)
    for log_std in (-hyperparams.MAX_LOG_STD_INIT, hyperparams.MAX_LOG_STD_INIT):
        agent = make_sb3("ppo", env, seed=0, overrides={"policy_kwargs": {
            "log_std_init": log_std, "activation_fn": torch.nn.ReLU}})
        assert agent.model.policy.log_std.detach().tolist() == [log_std] * 9
        assert isinstance(agent.model.policy.mlp_extractor.policy_net[1], torch.nn.ReLU)


def test_a_hyperparameter_file_is_read_once_per_version_and_never_shared(tmp_path, monkeypatch):
    """Planning a run loaded its learner's YAML 3-5 times (the check, the --hp build, the warm
    start's, VecNormalize's gamma, the run's own build); each load now gets its own copy of
    one read, and an edited file is read again."""
    import agents.sb3_hyperparams as hyperparams
    from agents.config import TrainConfig
    from agents.run_plan import plan
    from agents.run_training import build_vec_env

    path = tmp_path / "ppo.yaml"
    path.write_text("InferenceAlloc-v0:\n  n_steps: 16\n  batch_size: 16\n"
                    "  policy_kwargs: {net_arch: [8]}\n  warm_start: {gamma: 0.5}\n")
    monkeypatch.setattr(hyperparams, "HYPERPARAMS_DIR", tmp_path)
    reads = []
    read = hyperparams.load_yaml_file
    monkeypatch.setattr(hyperparams, "load_yaml_file",
                        lambda p, what: reads.append(p) or read(p, what))
    config = TrainConfig(agents=["ppo"], warmup=["none", "all"], normalize=True, episode_tasks=8,
                         hp={"learning_rate": 1e-3}, log_dir=str(tmp_path / "runs"))
    (spec, _) = plan(config)
    build_vec_env(config, spec.agent, 0, warm_start=True)
    make_sb3("ppo", gym.make("envs:InferenceAlloc-v0", episode_tasks=8), overrides=config.hp)
    assert reads == [path]

    loaded = load_hyperparams("ppo", "InferenceAlloc-v0", warm_start=True)
    loaded["policy_kwargs"]["net_arch"].append(99)
    loaded["gamma"] = 0.1
    assert load_hyperparams("ppo", "InferenceAlloc-v0", warm_start=True) == {
        "n_steps": 16, "batch_size": 16, "policy_kwargs": {"net_arch": [8]}, "gamma": 0.5}
    path.write_text("InferenceAlloc-v0:\n  n_steps: 32\n")    # an edit: read again
    assert load_hyperparams("ppo", "InferenceAlloc-v0") == {"n_steps": 32}
    assert reads == [path, path]


def test_the_reward_normaliser_discounts_with_a_warm_starts_gamma(tmp_path, monkeypatch):
    """--normalize built VecNormalize with the YAML's cold gamma, beside an agent that a
    warm_start had given another one: the normalised rewards' scale was for the wrong horizon."""
    import agents.sb3_hyperparams as hyperparams
    from agents.config import TrainConfig
    from agents.run_training import build_vec_env

    (tmp_path / "ppo.yaml").write_text(
        "InferenceAlloc-v0:\n  n_steps: 16\n  gamma: 0.9\n  warm_start: {gamma: 0.5}\n")
    monkeypatch.setattr(hyperparams, "HYPERPARAMS_DIR", tmp_path)
    config = TrainConfig(agents=["ppo"], normalize=True, episode_tasks=8)
    assert build_vec_env(config, "ppo", 0, warm_start=True)[0].gamma == 0.5
    assert build_vec_env(config, "ppo", 0)[0].gamma == 0.9
    overridden = dataclasses.replace(config, hp={"gamma": 0.7})
    assert build_vec_env(overridden, "ppo", 0, warm_start=True)[0].gamma == 0.7


def test_a_trpo_sub_sampling_that_keeps_one_transition_is_refused_before_any_run(tmp_path):
    """TRPO's policy step on one sub-sampled transition normalised its advantage to NaN: every
    line search failed and the policy never moved, a UserWarning the only sign. train.py
    refuses it against the rollout of --n-envs envs, not the one env it builds to check."""
    from agents.config import ConfigError, TrainConfig
    from agents.run_plan import plan

    def config(factor: int, n_envs: int = 1, **hp) -> TrainConfig:
        return TrainConfig(agents=["trpo"], warmup=["none", "all"], n_envs=n_envs,
                           episode_tasks=8, log_dir=str(tmp_path / "runs"),
                           hp={"sub_sampling_factor": factor, **hp})

    with pytest.raises(ConfigError, match=r"for trpo: hyper-parameter sub_sampling_factor must "
                                          r"be below the rollout's n_steps x n_envs \(64 x 1 = "
                                          r"64\), got 64: it keeps one transition"):
        plan(config(64))
    assert len(plan(config(63))) == 2                 # two of 64 transitions
    assert len(plan(config(64, n_envs=2))) == 2       # two of 128
    with pytest.raises(ConfigError, match=r"n_steps x n_envs \(64 x 2 = 128\), got 128:"):
        plan(config(128, n_envs=2))
    assert len(plan(config(64, normalize_advantage=False))) == 2
    # beyond the rollout it keeps that one transition still (torch failed on one near 2**63)
    with pytest.raises(ConfigError, match=r"sub_sampling_factor must be at most the rollout's "
                                          r"n_steps x n_envs \(64 x 1 = 64\), got 65: a larger "
                                          r"one keeps the same one transition$"):
        plan(config(65, normalize_advantage=False))
    assert not (tmp_path / "runs").exists()


def test_a_trpo_sub_sampling_is_checked_against_the_rollout_each_warm_up_trains_with(
        tmp_path, monkeypatch):
    """A warm-started run trains with its YAML's warm_start values under --hp: a shorter warm
    rollout keeps one transition where the cold one keeps several. Each run's own rollout is
    checked, the cold one's with --hp and the warm one's only where a warm-up is asked for."""
    import agents.sb3_hyperparams as hyperparams
    from agents.config import ConfigError, TrainConfig
    from agents.run_plan import plan

    (tmp_path / "trpo.yaml").write_text(
        "InferenceAlloc-v0:\n  n_steps: 64\n  batch_size: 64\n  policy_kwargs: {net_arch: [8]}\n"
        "  warm_start: {n_steps: 8, batch_size: 8}\n")
    monkeypatch.setattr(hyperparams, "HYPERPARAMS_DIR", tmp_path)

    def config(factor: int, warmup: str) -> TrainConfig:
        return TrainConfig(agents=["trpo"], warmup=[warmup], episode_tasks=8,
                           log_dir=str(tmp_path / "runs"), hp={"sub_sampling_factor": factor})

    assert len(plan(config(8, "none"))) == 1          # 8 of the cold run's 64
    # the YAML's own factor, without --hp: an edited file trained a policy that never moved
    (tmp_path / "trpo.yaml").write_text(
        "InferenceAlloc-v0:\n  n_steps: 4\n  batch_size: 4\n  sub_sampling_factor: 4\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(tmp_path / 'trpo.yaml'))} for trpo: "
                                          r"hyper-parameter sub_sampling_factor must be below "
                                          r"the rollout's n_steps x n_envs \(4 x 1 = 4\), got 4:"):
        plan(dataclasses.replace(config(8, "none"), hp={}))
    (tmp_path / "trpo.yaml").write_text(
        "InferenceAlloc-v0:\n  n_steps: 64\n  batch_size: 64\n  policy_kwargs: {net_arch: [8]}\n"
        "  warm_start: {n_steps: 8, batch_size: 8}\n")
    with pytest.raises(ConfigError, match=r"\(8 x 1 = 8\), got 8:"):
        plan(config(8, "all"))                        # one of the warm run's 8
    with pytest.raises(ConfigError, match=r"\(64 x 1 = 64\), got 64:"):
        plan(config(64, "none"))
    assert not (tmp_path / "runs").exists()


class _StepCounter:
    """A stateful conservative policy of one observation (a user's, as ``OneAtATime`` serves
    it to a VecEnv): its state counts the steps since its episode started, and it places every
    stage on device count % 3. It records each episode_start it is handed."""

    def __init__(self) -> None:
        self.starts: list[bool] = []

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        self.starts.append(bool(episode_start))
        count = 0 if state is None or bool(episode_start) else state
        return np.full(3, count % 3), count + 1


def test_the_conservative_policy_gets_its_state_back_and_each_envs_episode_starts():
    """The controller hands the conservative's predict the state it returned and, per env,
    episode_start True where the env's episode began since the conservative last acted there.
    The state survives the learner's turns; an episode that ended meanwhile starts anew."""
    from agents.imported import OneAtATime

    counter = _StepCounter()
    ctl = WarmupController(OneAtATime(counter), WarmupConfig(
        conservative="all-gpu", steps=2, clone=False, guard=False))
    obs = np.zeros((2, 4), dtype=np.float32)
    assert ctl.actions(obs)[:, 0].tolist() == [0, 0]      # both episodes' first
    ctl.episodes_ended([False, False])
    assert ctl.actions(obs)[:, 0].tolist() == [1, 1]
    ctl.episodes_ended([False, True])                      # the learner acts twice: env 1 ends
    ctl.episodes_ended([False, False])
    assert ctl.actions(obs)[:, 0].tolist() == [2, 0]
    ctl.episodes_ended(None)                               # a learn() that resets the env
    assert ctl.actions(obs)[:, 0].tolist() == [0, 0]
    assert counter.starts == [True, True, False, False, False, True, True, True]


@pytest.mark.parametrize("agent_name", ["ppo", "dqn"])
def test_a_stateful_conservative_policy_acts_along_each_envs_episodes_in_training(
        agent_name: str):
    """In training (PPO's forward, DQN's exploration steps) on two envs whose episodes last
    3 and 5 tasks, the conservative's j-th placement of an episode is its count j % 3: it was
    handed back its state and a start on each episode's first task. Without them it placed
    every task as an episode's first, on device 0."""
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv

    from agents.imported import OneAtATime
    from agents.sb3_factory import wrap_for

    envs = [_env(tasks=3), _env(tasks=5)]
    vec = DummyVecEnv([lambda e=e: wrap_for(agent_name, e) for e in envs])
    overrides = {"n_steps": 8, "batch_size": 16} if agent_name == "ppo" else {"learning_starts": 0}
    agent = make_sb3(agent_name, envs[0], seed=0, vec_env=vec, overrides=overrides,
                     warmup=WarmupConfig(conservative="all-gpu", steps=100, clone=False,
                                         guard=False))
    agent.warmup.conservative = OneAtATime(_StepCounter())
    placed: list[list[tuple[int, ...]]] = []

    class _Record(BaseCallback):
        def _on_step(self) -> bool:
            placed.append([tuple(info["placement"]) for info in self.locals["infos"]])
            return True

    agent.learn(16, callback=_Record())
    names = envs[0].unwrapped.device_names
    for env, length in enumerate((3, 5)):
        devices = [names.index(step[env][0]) for step in placed[:8]]
        assert devices == [j % length % 3 for j in range(8)], (env, devices)


@pytest.mark.parametrize(("name", "env_id", "conservative"), [
    ("ppo", "InferenceAlloc-v0", "heft-calibrated"),
    ("dqn", "InferenceAlloc-v0", "heft-calibrated"),
    ("sac", "InferenceAllocSplit-v0", "heft-split")])
def test_a_warm_learner_trains_the_same_weights_beside_the_recurrent_warm_up(
        name, env_id, conservative, monkeypatch):
    """recurrent-ppo's warm-up (its sequence clone, its LSTM policy's forward()) is its own:
    the other learners' clone and conservative phase never reach it, and one run before them
    in the process leaves their trained weights the same, to the bit."""
    from agents import sequence_cloning
    from agents.warmup import WarmRecurrentPolicy

    warmup = WarmupConfig(conservative=conservative, steps=20, clone_samples=100,
                          clone_epochs=2, guard_window=10, guard_cooldown=5)

    def trained() -> list[torch.Tensor]:
        agent = make_sb3(name, _env(tasks=40, env_id=env_id), seed=3, warmup=warmup,
                         overrides={"learning_starts": 0} if name != "ppo" else None)
        agent.learn(64)
        return [p.detach().clone() for p in agent.model.policy.parameters()]

    alone = trained()
    recurrent = make_sb3("recurrent-ppo", _env(tasks=40, env_id=env_id), seed=3, warmup=warmup,
                         overrides={"n_steps": 16, "batch_size": 16})
    recurrent.learn(32)
    assert recurrent.warmup.decisions == 32 and recurrent.clone_stats is not None
    after = trained()

    def untouched(*args, **kwargs):
        raise AssertionError("the recurrent warm-up reached another learner")

    monkeypatch.setattr(sequence_cloning, "clone_sequences", untouched)
    monkeypatch.setattr(WarmRecurrentPolicy, "forward", untouched)
    apart = trained()
    for weights in (after, apart):
        assert all(torch.equal(a, b) for a, b in zip(alone, weights, strict=True))
