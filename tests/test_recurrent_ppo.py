"""RecurrentPPO (``recurrent-ppo``): sb3-contrib's PPO with an LSTM policy, in both envs, cold
or warm. Its LSTM state must reach it from one decision to the next wherever it acts (evaluation,
the online rollout, the warm-up's clone and conservative phase), and its saved model load and
resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from stable_baselines3.common.callbacks import BaseCallback

import envs
from agents import sequence_cloning
from agents.base import StreamActor
from agents.cloning import collect, same_placements
from agents.config import EvalConfig, TrainConfig
from agents.evaluation import episode_latencies
from agents.registry import load_policy, make_policy
from agents.sb3_factory import make_sb3, saved_model_info
from agents.sb3_hyperparams import hyperparams_with
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
# ... and the LSTM's recurrent weights scaled up after training: what these settings leave of
# the state's effect depends on torch's numerics (under torch 2.3, V0's argmax was again the
# same at all 60 decisions, on seeds 0 and 1). At 10x the memory shows on both, under torch 2.3
# and 2.13 (11-51 of 60 actions change when the state is dropped).
RECURRENT_GAIN = 10.0


def _showing_state(env: gym.Env, env_id: str = V0, seed: int = 0) -> Any:
    """A briefly trained recurrent-ppo whose actions show the LSTM state it is handed."""
    agent = _trained(env, seed=seed, **SHOWS_STATE[env_id])
    with torch.no_grad():
        agent.model.policy.lstm_actor.weight_hh_l0.mul_(RECURRENT_GAIN)
    return agent


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
        return _showing_state(_env(env_id, tasks=60), env_id, seed=seed)

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
    agent = _showing_state(env)
    online = run_policy(agent, env, 60, seed=10001)
    np.testing.assert_array_equal(online, episode_latencies(agent, env, seed=10001))
    assert not np.array_equal(online, run_policy(_Forgetful(agent), env, 60, seed=10001))


class _Sent(BaseCallback):
    """Records, step by step, the actions the env received and the devices it placed on."""

    def __init__(self) -> None:
        super().__init__()
        self.actions: list[np.ndarray] = []
        self.placed: list[tuple[str, ...]] = []

    def _on_step(self) -> bool:
        self.actions.append(np.array(self.locals["clipped_actions"]))
        self.placed.append(tuple(self.locals["infos"][0]["placement"]))
        return True


def _placements(agent: Any, obs: np.ndarray) -> np.ndarray:
    """`agent`'s deterministic actions along the episode `obs`, run as SB3's evaluate_policy
    runs a recurrent model: handed back its state, the first observation an episode's start."""
    actor = StreamActor(agent)
    return np.stack([np.asarray(actor.act(o)) for o in obs])


@pytest.mark.slow
def test_the_clone_places_as_the_conservative_along_a_held_out_episode_with_its_state() -> None:
    """Fitted on heft-calibrated's episodes as sequences (the warm-up's defaults), the cloned
    LSTM policy, run with its state carried from task to task as evaluate_policy runs it,
    places the tasks of episodes it never saw as heft-calibrated does: 0.78-0.82 of them
    for seeds 0-2, where the same network uncloned places 0-0.18, and one fitted one
    observation at a time from a zero state 0.613-0.645 (it learned to act on a state it
    does not meet once its state fills)."""
    env = _env(tasks=200)                                      # the article scenario
    heft = make_policy("heft-calibrated", env)
    held_out = collect(env, heft, 1000, 0.9, seed=10000)      # not among the clone's seeds
    bounds = sequence_cloning.episode_bounds(held_out["starts"])
    assert len(bounds) == 5

    def agreement(agent: Any) -> float:
        placed = np.concatenate([_placements(agent, held_out["obs"][a:b]) for a, b in bounds])
        return float(np.mean(same_placements(placed, held_out["actions"])))

    warm = make_sb3("recurrent-ppo", env, seed=0, warmup=WarmupConfig(steps=0, guard=False))
    cold = make_sb3("recurrent-ppo", env, seed=0)
    assert agreement(warm) >= 0.75
    assert agreement(cold) <= 0.3
    assert warm.clone_stats["heldout_agreement"] >= 0.75
    assert warm.warmup.decisions == 0      # cloning took none of the conservative phase's


def _clone_recorded(env: gym.Env, heft: Any) -> tuple[Any, dict[str, float], list[tuple[
        torch.Tensor, torch.Tensor, torch.Tensor]]]:
    """A recurrent-ppo cloned on heft's 100 samples, two epochs, and the (valid, starts, zero)
    of each minibatch it fitted: `starts`, the episode starts SB3's ``evaluate_actions`` was
    handed; `zero`, per chunk, whether it starts from the zero state (its actor's and critic's
    LSTM)."""
    seen: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    marks: list[torch.Tensor] = []
    loss = sequence_cloning._chunk_loss
    evaluate = RecurrentActorCriticPolicy.evaluate_actions

    def evaluating(policy: Any, obs: Any, actions: Any, states: Any, starts: torch.Tensor
                   ) -> Any:
        marks.append(starts.clone())
        return evaluate(policy, obs, actions, states, starts)

    def recording(policy: Any, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor,
                  valid: torch.Tensor, states: Any) -> torch.Tensor:
        parts = [*states.pi, *states.vf]                # each (layers, chunks, units)
        zero = torch.stack([(part == 0).all(dim=2).all(dim=0) for part in parts]).all(dim=0)
        fitted = loss(policy, obs, actions, returns, valid, states)
        seen.append((valid.clone(), marks.pop(), zero))   # the one evaluation it made
        assert not marks
        return fitted

    agent = make_sb3("recurrent-ppo", env, seed=0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sequence_cloning, "_chunk_loss", recording)
        patch.setattr(RecurrentActorCriticPolicy, "evaluate_actions", evaluating)
        stats = sequence_cloning.clone_sequences(agent, env, heft, WarmupConfig(
            steps=0, clone_samples=100, clone_epochs=2, guard=False), seed=0)
    return agent, stats, seen


def test_the_clone_fits_episodes_as_sequences_from_their_start() -> None:
    """The clone's samples are the per-observation clone's (the same episodes, seeds and
    returns), cut at each episode's start; each is fitted in chunks of 32 decisions from the
    LSTM state the policy reaches there (an episode's first chunk from the zero state, no
    decision marked as a start, which would only zero it again), and the last fifth of the
    stream, the end of the episode cut there, is held out and scored with the state of the
    part before."""
    from agents.cloning import CLONE_SEED_OFFSET

    env = _env(tasks=35)
    heft = make_policy("heft-calibrated", env)
    data = collect(env, heft, 100, 0.9, seed=CLONE_SEED_OFFSET)
    bounds = sequence_cloning.episode_bounds(data["starts"])
    assert bounds == [(0, 35), (35, 70), (70, 100)]
    agent, stats, fitted = _clone_recorded(env, heft)
    chunks = sorted((int(n), bool(zero)) for valid, _, zeros in fitted
                    for n, zero in zip(valid.reshape(len(zeros), -1).sum(dim=1), zeros,
                                        strict=True))
    # 80 training samples (two episodes of 35, the third cut at 80) fitted once an epoch: each
    # episode's first 32 decisions from the zero state, its last 3 from the state reached there
    assert chunks == sorted([(32, True), (3, False), (32, True), (3, False), (10, True)] * 2)
    assert all(starts.sum() == 0 for _, starts, _ in fitted)
    agreed = same_placements(np.concatenate(
        [_placements(agent, data["obs"][a:b]) for a, b in bounds]), data["actions"])
    assert stats["train_agreement"] == pytest.approx(np.mean(agreed[:80]))
    assert stats["heldout_agreement"] == pytest.approx(np.mean(agreed[80:]))


def test_episodes_shorter_than_a_chunk_are_fitted_as_many_to_a_batch_as_fill_its_decisions(
        ) -> None:
    """Each episode of 4 tasks was padded to a chunk of 32 decisions, two chunks to a batch: 8
    decisions fitted a step where 64 are, 16 times the work for them (train.py's --episode-tasks
    2: a 7-minute clone, 19 s at the scenario's 200). Its chunks are the episodes' length, and
    a batch holds as many as make its 64 decisions."""
    env = _env(tasks=4)
    _, stats, fitted = _clone_recorded(env, make_policy("heft-calibrated", env))
    seen = [(int(valid.sum()), valid.numel()) for valid, *_ in fitted]
    # 80 training samples, 20 episodes: a batch of 16 and one of 4 an epoch, none padded
    assert seen == [(64, 64), (16, 16)] * 2
    assert 0.0 <= stats["heldout_agreement"] <= 1.0


@pytest.mark.parametrize("env_id", [V0, SPLIT])
def test_the_conservative_acts_first_with_the_learners_own_log_prob_and_lstm_state(
        env_id: str) -> None:
    """For the first k decisions the conservative policy places the tasks; RecurrentPPO stores
    its action with the learner's value and log-probability of it under the LSTM state the
    learner has reached, and the states move on as the learner's own forward moves them. So
    the update, which recomputes the log-probability from the sequences' saved states, starts
    at a ratio of 1, as warm PPO's does."""
    from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy

    from agents.warmup import WarmRecurrentPolicy

    env = _env(env_id, tasks=30)
    conservative = "heft-split" if env_id == SPLIT else "all-gpu"
    k = 40
    agent = make_sb3("recurrent-ppo", env, seed=0, overrides=SMALL, warmup=WarmupConfig(
        conservative=conservative, steps=k, clone=False, guard=False))
    model = agent.model
    assert isinstance(model.policy, WarmRecurrentPolicy)
    moved, sent, ratios = [], [], []
    forward, train = model.policy.forward, model.train

    def spy(obs: torch.Tensor, lstm_states: Any, episode_starts: torch.Tensor,
            deterministic: bool = False) -> Any:
        with torch.no_grad():
            *_, own = RecurrentActorCriticPolicy.forward(model.policy, obs, lstm_states,
                                                         episode_starts, deterministic)
        out = forward(obs, lstm_states, episode_starts, deterministic)
        if agent.warmup.last_conservative:
            moved.append((own, out[3]))
            sent.append(out[0].numpy().copy())
        return out

    def checked_train() -> None:
        for data in model.rollout_buffer.get(batch_size=None):
            with torch.no_grad():
                _, log_prob, _ = model.policy.evaluate_actions(
                    data.observations, data.actions, data.lstm_states, data.episode_starts)
            ratios.append(torch.exp(log_prob - data.old_log_prob)[data.mask > 0])
        train()

    model.policy.forward, model.train = spy, checked_train
    record = _Sent()
    agent.learn(k + 3 * SMALL["n_steps"], callback=record)
    received, placed = record.actions, record.placed
    assert len(moved) == len(sent) == k
    for own, returned in moved:
        for a, b in zip((*own.pi, *own.vf), (*returned.pi, *returned.vf), strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    # the env ran the conservative's actions (a Box's clipped back from below the edge)
    np.testing.assert_array_equal(np.concatenate(received[:k]),
                                  np.clip(np.concatenate(sent), -1.0, 1.0))
    if env_id == V0:
        assert all(p == ("gpu", "gpu", "gpu") for p in placed[:k])
        assert any(p != ("gpu", "gpu", "gpu") for p in placed[k:])
    else:
        assert (np.concatenate(sent) < -1.0).any()   # heft-split's 0s, as cloned: below the edge
    ratio = torch.cat(ratios)
    torch.testing.assert_close(ratio, torch.ones_like(ratio), rtol=0, atol=1e-4)


def test_a_conservative_decision_runs_each_lstm_once() -> None:
    """The conservative phase's forward() scores the conservative action with the
    distribution of the pass that moves the LSTM states on, not with a second pass (twice the
    LSTM work for each of the first k decisions)."""
    env = _env(V0, tasks=30)
    k = 12
    agent = make_sb3("recurrent-ppo", env, seed=0, overrides=SMALL, warmup=WarmupConfig(
        conservative="all-gpu", steps=k, clone=False, guard=False))
    policy = agent.model.policy
    passes = {"pi": 0, "vf": 0}
    for name, lstm in (("pi", policy.lstm_actor), ("vf", policy.lstm_critic)):
        lstm.register_forward_hook(lambda *_, n=name: passes.__setitem__(n, passes[n] + 1))
    per_decision, forward = [], policy.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        before = dict(passes)
        out = forward(*args, **kwargs)
        if agent.warmup.last_conservative:
            per_decision.append((passes["pi"] - before["pi"], passes["vf"] - before["vf"]))
        return out

    policy.forward = counted
    agent.learn(k)
    assert per_decision == [(1, 1)] * k


def test_the_guard_hands_a_planted_bad_recurrent_learner_back_to_the_conservative() -> None:
    """Past the conservative phase, a learner worse than the conservative by more than the
    margin trips the guard, and the conservative acts again through the LSTM policy's
    forward()."""
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=300, reward="relative")
    agent = make_sb3("recurrent-ppo", env, seed=0, overrides={"learning_rate": 0.0},
                     warmup=WarmupConfig(conservative="heft", steps=30, clone=False,
                                         guard_window=20, guard_cooldown=20))
    with torch.no_grad():                    # every stage on the CPU, whatever the state
        bias = agent.model.policy.action_net.bias
        bias.fill_(-20.0)
        bias[::3] = 20.0
    acting: list[bool] = []

    class _Who(BaseCallback):
        def _on_step(self) -> bool:
            acting.append(agent.warmup.last_conservative)
            return True

    agent.learn(160, callback=_Who())
    assert agent.warmup.guard_trips >= 1
    assert any(acting[50:])                  # the conservative acted again after its phase


def _warm(env_id: str = V0, seed: int = 0) -> Any:
    conservative = "heft-split" if env_id == SPLIT else "heft-calibrated"
    return make_sb3("recurrent-ppo", _env(env_id, tasks=30), seed=seed, overrides=SMALL,
                    warmup=WarmupConfig(conservative=conservative, steps=20, clone_samples=90,
                                        clone_epochs=2, guard_window=10, guard_cooldown=8))


@pytest.mark.parametrize("env_id", [V0, SPLIT])
def test_a_warm_recurrent_ppo_repeats_from_the_same_seed_and_loads_back(env_id: str,
                                                                        tmp_path: Path) -> None:
    """Cloned, then trained through the conservative phase and the guard: the same seed gives
    the same clone, the same tasks placed in training and the same weights; another seed
    another. Its saved model loads as a RecurrentPPO that acts along a sequence as it did."""
    def run(seed: int) -> tuple[Any, list[np.ndarray]]:
        agent = _warm(env_id, seed)
        record = _Sent()
        agent.learn(64, callback=record)
        return agent, record.actions

    (first, placed), (again, replaced), (other, _) = run(0), run(0), run(1)
    assert first.clone_stats == again.clone_stats
    np.testing.assert_array_equal(np.stack(placed), np.stack(replaced))
    weights = [p.detach() for p in first.model.policy.parameters()]
    assert all(torch.equal(a, b.detach()) for a, b in
               zip(weights, again.model.policy.parameters(), strict=True))
    assert not all(torch.equal(a, b.detach()) for a, b in
                   zip(weights, other.model.policy.parameters(), strict=True))
    env = _env(env_id)
    loaded = load_policy(first.save(tmp_path / "warm"), env)
    obs = env.reset(seed=3)[0]
    state: list[Any] = [None, None]
    for t in range(10):
        start = np.array([t == 0])
        a, state[0] = first.predict(obs, state[0], start)
        b, state[1] = loaded.predict(obs, state[1], start)
        np.testing.assert_array_equal(a, b)
        obs, *_ = env.step(a)


def test_recurrent_ppo_trains_warm_beside_cold_in_train_py(tmp_path: Path) -> None:
    """train.py's default --warmup none all trains recurrent-ppo cold and warm, as every other
    learner; the warm run saves its guard's state beside its model."""
    from agents.run_plan import plan
    from agents.training import train

    specs = plan(TrainConfig(agents=["ppo", "recurrent-ppo"]))
    assert [s.label for s in specs] == ["ppo", "ppo-warm", "recurrent-ppo", "recurrent-ppo-warm"]
    config = TrainConfig(agents=["recurrent-ppo"], warmup=["all"], timesteps=16,
                         episode_tasks=20, hp=dict(SMALL), clone_samples=40,
                         log_dir=str(tmp_path), checkpoint_interval=0, eval_tasks=0,
                         eval_interval=0, progress_bar=False)
    lines: list[str] = []
    (result,) = train(config, report=lines.append)
    assert result.spec.label == "recurrent-ppo-warm" and result.steps == 16
    assert (result.run_dir / "warmup.json").is_file()
    # the clone's agreement is said where the run ends, not in TensorBoard alone: a poor clone
    # (few observations) warms nothing up, and the run then scores as the cold one
    clone = result.clone
    assert clone is not None and clone["samples"] == 40
    assert all(0.0 <= clone[k] <= 1.0 for k in ("train_agreement", "heldout_agreement"))
    (finished,) = [line for line in lines if line.startswith("finished recurrent-ppo-warm")]
    assert (f"clone of the conservative from 40 observations agreeing with it on "
            f"{clone['train_agreement']:.0%} ({clone['heldout_agreement']:.0%} held out)"
            in finished)


def test_a_cloned_recurrent_ppo_fine_tunes_with_its_warm_start_values() -> None:
    """A clone fine-tunes with the YAML's warm_start values (PPO's: a smaller rate, target_kl
    on the Split env; tests/test_readme.py holds them to ppo.yaml's); without a clone there is
    nothing to fine-tune, and the learner takes the cold values."""
    from agents.sb3_hyperparams import load_hyperparams

    for env_id in (V0, SPLIT):
        conservative = "heft-split" if env_id == SPLIT else "heft-calibrated"
        cloned = make_sb3("recurrent-ppo", _env(env_id), seed=0, warmup=WarmupConfig(
            conservative=conservative, clone_samples=40, clone_epochs=1)).model
        uncloned = make_sb3("recurrent-ppo", _env(env_id), seed=0, warmup=WarmupConfig(
            conservative=conservative, clone=False)).model
        for model, warm in ((cloned, True), (uncloned, False)):
            params = load_hyperparams("recurrent-ppo", env_id, warm_start=warm)
            assert model.learning_rate == params["learning_rate"]
            assert model.target_kl == params.get("target_kl")
    assert cloned.target_kl is not None and uncloned.target_kl is None      # the Split env's
    assert load_hyperparams("recurrent-ppo", V0, warm_start=True)["learning_rate"] < \
        load_hyperparams("recurrent-ppo", V0)["learning_rate"]


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


def test_hyper_parameters_without_a_policy_build_its_lstm_policy(tmp_path: Path,
                                                                 monkeypatch) -> None:
    """MlpPolicy, every other agent's, was the default: a recurrent-ppo.yaml without `policy:`
    passed the checks and failed as the run started ("Policy MlpPolicy unknown")."""
    import agents.sb3_hyperparams as hyperparams

    (tmp_path / "recurrent-ppo.yaml").write_text(f"{V0}:\n  n_steps: 16\n  batch_size: 16\n")
    monkeypatch.setattr(hyperparams, "HYPERPARAMS_DIR", tmp_path)
    agent = make_sb3("recurrent-ppo", gym.make(V0, scenario="article", episode_tasks=20), seed=0)
    assert type(agent.model.policy).__name__ == "RecurrentActorCriticPolicy"


def test_its_lstm_sizes_may_be_the_largest_the_error_names() -> None:
    params = hyperparams_with("recurrent-ppo", V0, {"policy_kwargs": {
        "lstm_hidden_size": 4096, "n_lstm_layers": 8}})
    assert params["policy_kwargs"]["lstm_hidden_size"] == 4096
    assert params["policy_kwargs"]["n_lstm_layers"] == 8
    # another agent's policy takes no LSTM sizes: refused as a keyword it does not take, not
    # by a range of ours
    with pytest.raises(ValueError, match="unknown policy_kwargs key 'lstm_hidden_size' for ppo"):
        hyperparams_with("ppo", V0, {"policy_kwargs": {"lstm_hidden_size": 100_000}})


def test_a_recurrent_ppo_run_is_evaluated_and_resumed(tmp_path: Path) -> None:
    """train.py's run folder: evaluate.py finds it as recurrent-ppo and scores it beside the
    baselines, and --resume continues its model to the new total."""
    from agents.model_discovery import discover_models
    from agents.reporting import evaluate_agents
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


def test_the_online_study_takes_recurrent_ppo_by_name_cold_or_warm_and_not_by_default() -> None:
    """As ppo and ppo-warm: recurrent-ppo-warm is recurrent-ppo with every warm-up part."""
    from agents.evaluation import ONLINE_LEARNERS, online_study
    from agents.reporting import DEFAULT_ONLINE, FULL_ONLINE

    assert ONLINE_LEARNERS["recurrent-ppo"] == ("recurrent-ppo", None)
    assert ONLINE_LEARNERS["recurrent-ppo-warm"] == ("recurrent-ppo", "all")
    assert ONLINE_LEARNERS["ppo-warm"] == ("ppo", "all")
    assert not {"recurrent-ppo", "recurrent-ppo-warm"} & {*DEFAULT_ONLINE, *FULL_ONLINE}
    assert EvalConfig(online=True, online_agents=["recurrent-ppo-warm", "oracle"]).online_agents
    study = online_study(["recurrent-ppo"], [11], n_samples=24)
    [curve] = study.curves["recurrent-ppo"]
    assert len(curve) == 24 and np.all(np.isfinite(curve))
