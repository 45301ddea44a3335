"""The online harness: metric definitions, and the 200-sample problem reproduced and removed."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
import torch

from agents.online import OnlineResult, deploy, rolling_mean, rollout
from agents.registry import make_policy
from agents.sb3_factory import make_sb3
from agents.warmup import WarmupConfig


def test_rolling_mean_is_the_mean_of_each_full_window():
    x = np.arange(10, dtype=float)
    assert np.allclose(rolling_mean(x, 4), [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5])
    assert np.allclose(rolling_mean(np.array([4.0, 0.0, 2.0, 6.0]), 2), [2.0, 1.0, 4.0])


def test_metrics_on_a_planted_learning_curve():
    n = 600
    static = np.full(n, 10.0)
    agent = np.where(np.arange(n) < 200, 15.0, 9.0)      # 1.5x worse, then 10% better
    m = OnlineResult(agent, static, np.full(n, 8.0)).metrics()
    assert m["early_degradation"] == pytest.approx(1.5)
    assert m["early_drop"] == pytest.approx(1 - 10 / 15)
    assert m["worst_window"] == pytest.approx(1.5)
    # a window is out of the 5% band while it holds >= 4 bad samples: the last one starts at
    # sample 196, so the rolling mean settles at the end of the window starting at 197
    assert m["samples_to_stabilise"] == 246
    assert m["samples_to_0.9_static"] == 250
    assert m["steady_vs_static"] == pytest.approx(0.9)
    assert m["steady_vs_oracle"] == pytest.approx(9 / 8)


def test_a_run_that_has_not_settled_by_its_end_reports_its_length():
    n = 600
    static = np.full(n, 10.0)
    agent = np.where(np.arange(n) < 560, 9.0, 14.0)      # settled, then a late excursion
    assert OnlineResult(agent, static, static).metrics()["samples_to_stabilise"] == n
    settled = np.where(np.arange(n) < 100, 14.0, 9.0)
    assert OnlineResult(settled, static, static).metrics()["samples_to_stabilise"] < n


def test_worst_window_and_steady_ratios_compare_the_same_samples():
    """Each ratio is the agent's over its reference's on the same samples: a stretch slow for
    both is no worse than static, and the oracle's early samples do not count as steady."""
    n = 400
    static = np.where(np.arange(n) < 50, 20.0, 10.0)     # the first 50 tasks slow for static too
    agent = static.copy()
    agent[100:150] = 12.0                                 # one window 20% worse than static
    oracle = np.where(np.arange(n) < 200, 5.0, 8.0)
    m = OnlineResult(agent, static, oracle).metrics()
    assert m["worst_window"] == pytest.approx(1.2)
    # samples 1..200: 50 x 20 + 50 x 12 + 100 x 10 for the agent, 50 x 20 + 150 x 10 for static
    assert m["early_degradation"] == pytest.approx(2600 / 2500)
    assert m["early_drop"] == pytest.approx(1 - 2500 / 2600)
    assert m["steady_vs_static"] == pytest.approx(1.0)
    assert m["steady_vs_oracle"] == pytest.approx(10 / 8)


def test_the_steady_state_is_the_last_200_samples_whatever_the_runs_length():
    """300 samples, static at 10 throughout: the agent at 20, 12 then 8 for 100 samples each
    has a steady mean of 10 (samples 100..299), so it is as fast as static there; the oracle
    at 5 then 10 from sample 200 has a steady mean of 7.5. The per-sample ratio's steady mean
    is 1, and every 50-sample window of the last 0.8s is 20% off it: not settled in the run."""
    n = 300
    static = np.full(n, 10.0)
    agent = np.repeat([20.0, 12.0, 8.0], 100)
    oracle = np.where(np.arange(n) < 200, 5.0, 10.0)
    m = OnlineResult(agent, static, oracle).metrics()
    assert m["steady_vs_static"] == pytest.approx(1.0)
    assert m["steady_vs_oracle"] == pytest.approx(10 / 7.5)
    assert m["samples_to_stabilise"] == n


def test_the_steady_ratios_read_each_references_last_200_samples_alone():
    """600 samples: the references slow to 20 s for the last 200 tasks and the agent matches
    them there. The steady ratios are 1: the 200 samples before (10 s) are not steady, for
    the references no more than for the agent."""
    n = 600
    reference = np.where(np.arange(n) < 400, 10.0, 20.0)
    m = OnlineResult(reference.copy(), reference, reference).metrics()
    assert m["steady_vs_static"] == pytest.approx(1.0)
    assert m["steady_vs_oracle"] == pytest.approx(1.0)


def test_metrics_over_windows_of_one_sample_compare_sample_by_sample():
    """A window (and an early stretch) of one sample is allowed: the worst window is then the
    worst single sample's ratio to static, and the early figures are the first sample's."""
    static = np.full(4, 10.0)
    m = OnlineResult(np.array([12.0, 9.0, 15.0, 10.0]), static, static).metrics(early=1, window=1)
    assert m["worst_window"] == pytest.approx(1.5)
    assert m["early_degradation"] == pytest.approx(1.2)
    assert m["early_drop"] == pytest.approx(1 - 10 / 12)
    assert m["samples_to_0.9_static"] == 2      # sample 1 (9 s) ends the first such window


def test_metrics_of_a_run_shorter_than_a_window_stay_inside_it():
    m = OnlineResult(np.full(20, 8.0), np.full(20, 10.0), np.full(20, 8.0)).metrics()
    assert m["samples_to_0.9_static"] == 20 and m["samples_to_stabilise"] == 20   # was 50


@pytest.mark.parametrize(("n", "kwargs", "message"), [
    (0, {}, "empty run"),                                   # was numpy's zero-size reduction
    (10, {"window": 0}, "window must be an integer >= 1"),  # was a broadcast error
    (10, {"early": 0}, "early must be an integer >= 1"),    # was NaN
])
def test_bad_metrics_inputs_say_what_is_wrong(n: int, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OnlineResult(np.ones(n), np.ones(n), np.ones(n)).metrics(**kwargs)


def test_metrics_refuse_references_of_other_lengths() -> None:
    """A 32-sample curve against 100-sample references compared different tasks (the last
    32 of each) and broadcast a window of one, with no word."""
    with pytest.raises(ValueError, match="same tasks"):
        OnlineResult(np.ones(32), np.ones(100), np.ones(100)).metrics()
    with pytest.raises(ValueError, match="same tasks"):
        OnlineResult(np.ones(100), np.ones(100), np.ones(100), static_here=np.ones(32)).metrics()


def test_deploy_refuses_an_agent_learning_on_several_envs() -> None:
    """It learned n_samples steps over 4 sub-envs and recorded sub-env 0's 32 samples as the
    curve of a 100-sample stream."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    envs = [gym.make("envs:InferenceAlloc-v0", episode_tasks=100, reward="relative")
            for _ in range(4)]
    agent = make_sb3("ppo", envs[0], seed=0,
                     vec_env=DummyVecEnv([lambda e=e: e for e in envs]))
    with pytest.raises(ValueError, match="one live task stream"):
        deploy(agent, envs[0], 100, seed=3, references=False)


def test_stabilisation_is_measured_against_static_in_the_agents_own_state():
    n = 600
    rng = np.random.default_rng(0)
    here = 10.0 * rng.lognormal(0.0, 0.3, n)        # the queueing the agent's own state holds
    agent = here * np.where(np.arange(n) < 200, 1.5, 0.9)
    own_run = 10.0 * rng.lognormal(0.0, 0.3, n)     # static's own trajectory: other bursts
    oracle = np.full(n, 8.0)
    assert OnlineResult(agent, own_run, oracle, static_here=here).metrics()[
        "samples_to_stabilise"] == 246               # as the planted curve above
    assert OnlineResult(agent, own_run, oracle).metrics()["samples_to_stabilise"] > 400


class _StaticPricedEveryOtherStep(gym.Wrapper):
    """An env that prices static in its own state on some steps only."""

    def reset(self, **kwargs):
        self.steps = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps % 2:
            info = {k: v for k, v in info.items() if k != "static_latency"}
        return obs, reward, terminated, truncated, info


def test_static_in_the_agents_own_state_is_read_only_where_every_step_priced_it():
    """static_here is the env's static_latency when it priced one at every step, else None and
    the metrics read static's own run: an env that does not price it (reward="latency") or
    prices it on some steps gave no curve of NaNs (a NaN ratio is never outside the band, so
    such a run read as settled from its first window)."""
    n = 40

    def here(reward: str, wrap=lambda env: env):
        env = gym.make("envs:InferenceAlloc-v0", episode_tasks=n, reward=reward)
        return deploy(make_policy("heft", env), wrap(env), n, learn=False, seed=3,
                      references=False).static_here

    assert here("relative") is not None and np.all(np.isfinite(here("relative")))
    assert here("latency") is None
    assert here("relative", _StaticPricedEveryOtherStep) is None


def test_best_static_is_its_own_reference():
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=300, reward="relative")
    result = deploy(make_policy("best-static", env), env, 300, learn=False, seed=3)
    assert result.static_here is not None and np.array_equal(result.static_here, result.latency)
    assert result.metrics()["samples_to_stabilise"] == 50


def _stabilise_by_definition(ratio: np.ndarray, window: int = 50, steady: int = 200) -> int:
    """The first sample after which every `window`-sample mean of `ratio` stays within 5% of
    the mean of its last `steady` samples (a window ending at sample t counts for t)."""
    target = float(np.mean(ratio[-steady:]))
    stable_from = window
    for start in range(len(ratio) - window + 1):
        if abs(float(np.mean(ratio[start:start + window])) / target - 1.0) > 0.05:
            stable_from = start + window
    return stable_from


@pytest.mark.parametrize("name", ["heft-calibrated", "oracle"])
def test_a_fixed_policy_is_stable_from_the_first_window(name):
    """The docstring's claim: on held-out seeds 10000-10004 the seed-mean curve of a policy
    that does not learn is stable from the first window against static in its own state,
    though single streams are not, nor is the curve against static's own run."""
    from agents.online import run_policy

    n, seeds = 600, range(10000, 10005)
    results = []
    for seed in seeds:
        env = gym.make("envs:InferenceAlloc-v0", episode_tasks=n, reward="relative")
        r = deploy(make_policy(name, env), env, n, learn=False, seed=seed, references=False)
        own_static = run_policy(make_policy("best-static", env), env, n, seed)
        results.append(OnlineResult(r.latency, own_static, own_static, static_here=r.static_here))
    per_stream = []
    for r in results:
        assert r.static_here is not None
        ratio = r.latency / r.static_here
        assert not np.allclose(ratio, 1.0)          # not its own reference: a real ratio curve
        assert not np.array_equal(r.static_here, r.static)   # its state is not static's
        got = r.metrics()["samples_to_stabilise"]
        assert got == _stabilise_by_definition(ratio)
        per_stream.append(got)
    assert max(per_stream) > 50                     # a single stream's gain swings with the load

    def mean(key: str) -> np.ndarray:
        return np.mean([getattr(r, key) for r in results], axis=0)

    curve = OnlineResult(mean("latency"), mean("static"), mean("static"), static_here=mean("static_here"))
    assert curve.metrics()["samples_to_stabilise"] == 50
    own_run = OnlineResult(mean("latency"), mean("static"), mean("static"))
    assert own_run.metrics()["samples_to_stabilise"] > 50


def _record_step_infos(monkeypatch) -> list[list[dict]]:
    """Every run deploy prices (references first, then the agent), as its step infos (the
    fields the curves read, and the task)."""
    import agents.online as online

    runs: list[list[dict]] = []
    monkeypatch.setattr(online, "CURVE_KEYS", (*online.CURVE_KEYS, "task"))
    curves = online._curves

    def recording(infos):
        runs.append(list(infos))
        return curves(infos)

    monkeypatch.setattr(online, "_curves", recording)
    return runs


@pytest.mark.parametrize("learn", [True, False])
def test_deploy_runs_the_learner_on_its_references_tasks(monkeypatch, learn):
    n = 40
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=n, reward="relative")
    agent = make_sb3("ppo", env, seed=0)
    runs = _record_step_infos(monkeypatch)
    result = deploy(agent, env, n, learn=learn, seed=7)
    static_run, oracle_run, agent_run = runs
    tasks = [[info["task"] for info in run] for run in runs]
    assert len(tasks[2]) == n
    assert tasks[2] == tasks[0] == tasks[1]
    assert [i["latency"] for i in agent_run] == result.latency.tolist()
    assert [i["latency"] for i in static_run] == result.static.tolist()
    assert [i["latency"] for i in oracle_run] == result.oracle.tolist()
    runs.clear()                                    # another seed is another stream
    deploy(agent, env, n, learn=learn, seed=8)
    assert [info["task"] for info in runs[2]] != tasks[2]


@pytest.mark.parametrize("learn", [True, False])
def test_deploy_keeps_only_the_fields_its_curves_read(monkeypatch, learn):
    # A whole step info is ~1.8 kB; deploy kept every one, so its memory grew by that much a
    # sample (1.8 GB over a million-sample stream) to yield two floats a sample.
    import agents.online as online

    n = 40
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=n, reward="relative")
    agent = make_sb3("ppo", env, seed=0)
    runs = _record_step_infos(monkeypatch)    # which adds "task" to what is kept
    deploy(agent, env, n, learn=learn, seed=7)
    assert len(runs) == 3 and all(len(run) >= n for run in runs)
    assert {key for run in runs for info in run for key in info} == set(online.CURVE_KEYS)


def test_a_rollout_acts_deterministically():
    """Without learning, a stochastic policy acts by its mode: two rollouts of one stream agree."""
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=30)
    agent = make_sb3("ppo", env, seed=0)
    first, second = (rollout(agent, env, 30, seed=1) for _ in range(2))
    assert [i["placement"] for i in first] == [i["placement"] for i in second]


def test_deploy_needs_a_long_enough_episode():
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=50, reward="relative")
    with pytest.raises(ValueError, match="episode_tasks=50 < n_samples=100"):   # before any run
        deploy(make_sb3("ppo", env, seed=0), env, 100)
    for n in (0, -3, 2.5):                                  # were numpy's own errors
        with pytest.raises(ValueError, match="n_samples must be an integer >= 1"):
            deploy(make_policy("heft", env), env, n)


def test_deploy_checks_the_episode_of_every_scenario_of_a_mix():
    """deploy read a mix's first scenario's episode length alone: a stream that drew the
    short second one failed part-way (or, drawing the first, went through). Refused before
    any run, naming the short scenario."""
    import dataclasses

    from envs import MIX_ENV_ID, load_scenario

    short = dataclasses.replace(load_scenario("bursty"), episode_tasks=50)
    env = gym.make(f"envs:{MIX_ENV_ID}", scenarios=["article", short])
    heft = make_policy("heft", env)
    acted = []
    heft.predict = lambda *args, **kwargs: acted.append(1)      # type: ignore[method-assign]
    with pytest.raises(ValueError, match=r"episode_tasks=50 of scenario 'bursty' < "
                                         r"n_samples=100: a mix plays any of its scenarios"):
        deploy(heft, env, 100, learn=False, seed=0)
    assert acted == []
    with pytest.raises(ValueError, match="episode_tasks=50 of scenario 'bursty' < n_samples"):
        deploy(make_sb3("ppo", env, seed=0), env, 100)
    ok = gym.make(f"envs:{MIX_ENV_ID}", scenarios=["article", short], episode_tasks=100)
    assert deploy(make_policy("heft", ok), ok, 100, learn=False, seed=0).latency.shape == (100,)


def test_a_rollout_past_its_episode_and_a_one_sample_deploy():
    """A rollout of one sample more than the episode holds is refused naming the episode (not
    the env's own error for a step past the end); one sample is enough to deploy, and without
    a seed deploy runs stream 0."""
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=9)
    heft = make_policy("heft", env)
    with pytest.raises(ValueError, match=r"episode ended after 9 tasks.*n_samples \(10\)"):
        rollout(heft, env, 10, seed=0)
    assert len(rollout(heft, env, 9, seed=0)) == 9
    one = deploy(heft, env, 1, seed=0)
    assert one.latency.shape == one.static.shape == one.oracle.shape == (1,)
    unseeded = deploy(heft, env, 9, references=False).latency
    assert np.array_equal(unseeded, deploy(heft, env, 9, seed=0, references=False).latency)
    assert not np.array_equal(unseeded, deploy(heft, env, 9, seed=1, references=False).latency)


@pytest.fixture(scope="module")
def stabilisation():
    n = 400
    out = {}
    for kind, warmup in (("cold", None), ("warm", WarmupConfig())):
        env = gym.make("envs:InferenceAlloc-v0", episode_tasks=n, reward="relative")
        agent = make_sb3("ppo", env, seed=0, warmup=warmup)
        out[kind] = deploy(agent, env, n, seed=0)
    return out


def test_the_cold_learner_is_worse_than_static_while_it_learns(stabilisation):
    result = stabilisation["cold"]
    assert len(result.latency) == 400 and np.all(np.isfinite(result.latency))
    assert result.static_here is not None and np.all(result.static_here > 0)
    assert result.metrics()["early_degradation"] >= 1.2


def test_deploy_records_the_samples_the_conservative_policy_placed(stabilisation):
    """A learner with a warm-up: one flag per sample, set through its conservative phase (the
    first `steps` samples); a learner without one has no such record."""
    assert stabilisation["cold"].conservative_acting is None
    acting = stabilisation["warm"].conservative_acting
    assert acting is not None and acting.shape == (400,) and acting.dtype == bool
    assert acting[:WarmupConfig().steps].all()


def test_warm_up_removes_the_drop(stabilisation):
    metrics = stabilisation["warm"].metrics()
    assert metrics["worst_window"] <= 1.05
    assert metrics["steady_vs_static"] <= 0.9


@pytest.mark.parametrize(("name", "warmup"), [("ppo", None), ("dqn", WarmupConfig())])
def test_a_learner_deployed_twice_on_one_seed_repeats_itself(name, warmup):
    """Same seed: the same stream, exploration and updates, so the same latencies and weights."""
    def run(seed: int):
        env = gym.make("envs:InferenceAlloc-v0", episode_tasks=80, reward="relative")
        agent = make_sb3(name, env, seed=seed, warmup=warmup)
        result = deploy(agent, env, 80, seed=seed, references=False)
        return result.latency, [p.detach().clone() for p in agent.model.policy.parameters()]

    (lat_a, w_a), (lat_b, w_b), (lat_c, w_c) = run(4), run(4), run(5)
    assert np.array_equal(lat_a, lat_b)
    assert all(torch.equal(a, b) for a, b in zip(w_a, w_b, strict=True))
    assert not np.array_equal(lat_a, lat_c)
    assert not all(torch.equal(a, c) for a, c in zip(w_a, w_c, strict=True))


def test_a_stream_studied_alone_gets_the_learner_it_gets_among_others():
    # The study seeded each learner with its stream's place in the list, so stream 12 alone
    # (place 0) got another learner, and other figures, than 12 second of two (place 1).
    from agents.evaluation import online_study

    pair = online_study(["ppo"], [11, 12], n_samples=60)
    alone = online_study(["ppo"], [12], n_samples=60)
    assert np.array_equal(pair.curves["ppo"][1], alone.curves["ppo"][0])
    assert not np.array_equal(pair.curves["ppo"][0], pair.curves["ppo"][1])


@pytest.mark.parametrize("name", ["ppo", "trpo"])
def test_the_studys_learners_learn_as_they_go(name):
    """online_study deploys a learner as deploy(..., learn=True) does, on a fresh env of the
    stream with training seed = the stream's: the same curve, not the acting-only run's."""
    from agents.evaluation import make_env, online_study
    from agents.sb3_hyperparams import load_hyperparams

    # past its first update (TRPO's rollouts are longer than PPO's 16 tasks)
    seed = 11
    n = max(60, 2 * load_hyperparams(name, "InferenceAlloc-v0")["n_steps"] + 10)
    curve = online_study([name], [seed], n_samples=n).curves[name][0]

    def fresh():
        return make_env(episode_tasks=n, reward="relative")

    def run(learn):
        env = fresh()
        return deploy(make_sb3(name, env, seed=seed), env, n, learn=learn, seed=seed,
                      references=False).latency

    learning = run(True)
    assert np.array_equal(curve, learning)
    assert not np.array_equal(learning, run(False))


def test_each_learner_of_the_study_is_its_algorithm_cold_or_warm(monkeypatch):
    """ONLINE_LEARNERS' names: a -warm learner is its algorithm with the whole warm-up, the
    others start cold. A warm PPO and a warm TRPO act alike through the conservative phase
    (the same curve over 60 samples), so the curves alone would not tell a swapped entry."""
    import agents.sb3_factory as factory
    from agents import sequence_cloning
    from agents.evaluation import ONLINE_LEARNERS, online_study

    built = {}
    make = factory.make_sb3

    def recording(name, env, seed=0, warmup=None, **kwargs):
        agent = make(name, env, seed=seed, warmup=warmup, **kwargs)
        built[len(built)] = (name, warmup)
        return agent

    monkeypatch.setattr(factory, "make_sb3", recording)
    # the names are under test, not the LSTM's clone (its 3000 samples fit in ~20 s)
    monkeypatch.setattr(sequence_cloning, "clone_sequences", lambda *args, **kwargs: {})
    online_study(list(ONLINE_LEARNERS), [11], n_samples=8)
    warm = WarmupConfig.from_parts("all")
    assert warm.steps and warm.clone_samples     # the whole warm-up: acting and cloning
    assert dict(zip(ONLINE_LEARNERS, built.values(), strict=True)) == {
        "ppo": ("ppo", None), "ppo-warm": ("ppo", warm), "dqn": ("dqn", None),
        "dqn-warm": ("dqn", warm), "trpo": ("trpo", None), "trpo-warm": ("trpo", warm),
        "recurrent-ppo": ("recurrent-ppo", None),
        "recurrent-ppo-warm": ("recurrent-ppo", warm)}


def test_the_studys_learners_learn_on_the_reward_asked_for_with_static_priced_every_step(
        monkeypatch):
    """online_study built every env with reward="relative", whatever reward the learners were
    meant to be studied on. The reward reaches the learners (PPO updates every 16 samples, so
    its curve moves), not the fixed policies (nothing to learn), and static is still priced in
    each run's own state under a reward that does not need it: the metrics read it
    (static_here)."""
    import agents.online as online
    from agents.evaluation import online_study

    results = []

    def recording(*args, **kwargs):
        results.append(deploy(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(online, "deploy", recording)
    agents, seeds, n = ["ppo", "heft-calibrated"], [11], 60
    relative = online_study(agents, seeds, n)
    latency = online_study(agents, seeds, n, reward="latency")
    assert not np.array_equal(relative.curves["ppo"][0], latency.curves["ppo"][0])
    assert np.array_equal(relative.curves["heft-calibrated"][0],
                          latency.curves["heft-calibrated"][0])
    assert len(results) == 2 * 4 and all(r.static_here is not None for r in results)


def test_the_studys_references_are_their_own_runs_and_every_agents_static_and_oracle():
    """best-static and the oracle asked for beside a learner (evaluate.py's default study asks
    for both) are each its own run on the stream, and every agent's metrics read those runs
    as its static and oracle."""
    from agents.evaluation import make_env, online_study

    n, seed = 60, 11
    study = online_study(["ppo", "best-static", "oracle"], [seed], n_samples=n)

    def alone(name):
        env = make_env(episode_tasks=n, reward="relative", price_static=True)
        return deploy(make_policy(name, env), env, n, learn=False, seed=seed,
                      references=False).latency

    static, oracle = alone("best-static"), alone("oracle")
    assert np.array_equal(study.curves["best-static"][0], static)
    assert np.array_equal(study.curves["oracle"][0], oracle)
    assert not np.array_equal(static, oracle)
    # the steady span (the last 200 samples) is the whole of a 60-sample run
    ppo = study.curves["ppo"][0]
    assert study.metrics["ppo"][0]["steady_vs_static"] == pytest.approx(ppo.mean() / static.mean())
    assert study.metrics["ppo"][0]["steady_vs_oracle"] == pytest.approx(ppo.mean() / oracle.mean())
    assert study.metrics["best-static"][0]["steady_vs_static"] == pytest.approx(1.0)
    assert study.metrics["oracle"][0]["steady_vs_oracle"] == pytest.approx(1.0)


def test_stabilization_md_names_the_learners_reward():
    from agents.evaluation import OnlineStudy, online_markdown

    study = OnlineStudy(metrics={"ppo": [{"early": 1.0}]})
    for reward in ("relative", "normalised", "latency"):
        assert (f"learners learn as they go, on the {reward} reward"
                in online_markdown(study, [1], 600, "article", reward=reward))
    assert "on the relative reward" in online_markdown(study, [1], 600, "article")


def test_stabilization_md_notes_a_metric_defined_on_some_seeds_and_keeps_its_columns():
    """A cell whose metric is defined on k of n seeds (0 < k < n; here 1 of 2) says so, and the
    table's delimiter row has a cell per header cell (agent + each metric)."""
    from agents.evaluation import OnlineStudy, online_markdown

    study = OnlineStudy(metrics={"x": [{"early": 2.0, "reached": np.nan},
                                       {"early": 4.0, "reached": 3.0}]})
    lines = online_markdown(study, [1, 2], 600, "article").splitlines()
    header = lines.index("| agent | early | reached |")
    assert lines[header + 1] == "|---|---|---|"
    row = lines[header + 2]
    assert row.startswith("| x | 3.000 ± ") and row.endswith(" | 3.000 (1/2 seeds) |")
    # the definitions follow, from OnlineResult.metrics' own list
    assert any(line.startswith("- early_degradation: mean latency of samples") for line in lines)


def test_stabilization_md_ends_with_the_metrics_definitions_as_their_docstring_lays_them_out():
    """The definitions are OnlineResult.metrics' list after its summary line, dedented as a
    block: each item's continuation lines keep their indent under the item."""
    import inspect

    from agents.evaluation import OnlineStudy, online_markdown

    study = OnlineStudy(metrics={"ppo": [{"early": 1.0}]})
    listed = inspect.cleandoc(OnlineResult.metrics.__doc__ or "").splitlines()[2:]
    assert any(line.startswith("  ") for line in listed)     # it has continuation lines
    assert online_markdown(study, [1], 600, "article").endswith("\n".join(listed) + "\n")


def test_stabilization_md_definitions_do_not_depend_on_the_docstring_indent(monkeypatch):
    """Python 3.13 strips a docstring's common indent when it compiles it; 3.10-3.12 keep the
    method's 8 spaces. The definitions cut a fixed 8 characters off each indented line, so on
    3.13 (docstring already dedented) they lost the first 6 letters of every continuation line
    ("static's" became "'s"). Here 3.13's docstring is given on any version."""
    import inspect

    from agents.evaluation import OnlineStudy, online_markdown

    study = OnlineStudy(metrics={"ppo": [{"early": 1.0}]})
    as_compiled = online_markdown(study, [1], 600, "article")
    dedented = inspect.cleandoc(OnlineResult.metrics.__doc__ or "")
    monkeypatch.setattr(OnlineResult.metrics, "__doc__", dedented)
    assert online_markdown(study, [1], 600, "article") == as_compiled


def _table_cells(text: str) -> dict[str, dict[str, str]]:
    """stabilization.md's table: agent -> metric -> cell."""
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| agent |"))
    names = lines[header].strip("| ").split(" | ")[1:]
    rows = [line.strip("| ").split(" | ") for line in lines[header + 2:] if line.startswith("|")]
    return {row[0]: dict(zip(names, row[1:], strict=True)) for row in rows}


def test_stabilization_md_prints_sample_counts_as_counts():
    """samples_to_stabilise and samples_to_0.9_static are whole samples per seed, but printed
    as ratios are: 50.000 from one seed, 500.000 ± 122.679 over five. One seed's count is
    printed whole, a mean over seeds (and its interval) to one decimal."""
    from agents.evaluation import OnlineStudy, online_markdown

    n = 150
    static = np.full(n, 9.0)
    late = np.where(np.arange(n) < 70, 20.0, 4.0)     # above static, then well below it
    runs = [OnlineResult(lat, static, np.full(n, 8.0)) for lat in (np.full(n, 4.0), late)]
    counts = [k for k in runs[0].metrics() if k.startswith("samples_to")]
    assert len(counts) == 2
    for seeds in ([1], [1, 2]):
        study = OnlineStudy()
        for seed in seeds:
            study.add("x", runs[seed - 1])
        cells = _table_cells(online_markdown(study, seeds, n, "article"))["x"]
        for name, cell in cells.items():
            values = [m[name] for m in study.metrics["x"]]
            if name not in counts:
                assert re.fullmatch(r"-?\d+\.\d{3}( ± \d+\.\d{3})?", cell), (name, cell)
            elif len(seeds) == 1:
                assert cell == f"{values[0]:.0f}", (name, cell)
            else:
                # the count, then any note ("(1/2 seeds unsettled, counted at 150)")
                assert re.fullmatch(r"\d+\.\d ± \d+\.\d( \(.*\))?", cell), (name, cell)
                assert cell.startswith(f"{np.mean(values):.1f} ± "), (name, cell)


@pytest.mark.parametrize("n", [60, 200, 600])
def test_stabilization_md_states_the_spans_its_metrics_used(n):
    """With --online-samples 60 the metrics average samples 1..60 (early) and the last 60
    (steady), but stabilization.md said the first 200 and the last 200. With 200 (both spans
    exactly) nothing is clamped."""
    from agents.evaluation import OnlineStudy, online_markdown

    study = OnlineStudy()
    study.add("best-static", OnlineResult(np.full(n, 9.0), np.full(n, 9.0), np.full(n, 8.0)))
    text = online_markdown(study, [10000], n, "article")
    if n >= 200:
        assert "early = the first 200 samples, window = 50 samples" in text
        assert "clamped" not in text
    else:
        assert "early = the first 60 samples, window = 50 samples" in text
        assert "'the last 200 samples' are the last 60" in text


class _Blinded(gym.ObservationWrapper):
    """An observation wrapper a policy sees the env through (every entry -1)."""

    def observation(self, observation):
        return np.full_like(observation, -1.0)


class _Seeing:
    """Best-static's action, recording every observation it is shown."""

    def __init__(self, env) -> None:
        self.inner, self.seen = make_policy("best-static", env), []

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        self.seen.append(np.asarray(obs))
        return self.inner.predict(obs, state, episode_start, deterministic)


def test_deploy_without_learning_steps_the_env_through_its_wrappers():
    """The agent sees the env as the caller wrapped it, as it does when it learns; the
    references (the oracle checks its observations) still run on the bare env."""
    n = 30
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=n, reward="relative")
    policy = _Seeing(env)
    result = deploy(policy, _Blinded(env), n, learn=False, seed=2)
    assert len(policy.seen) == n and all(np.all(obs == -1.0) for obs in policy.seen)
    assert np.array_equal(result.latency, result.static)          # best-static on its stream
    with pytest.raises(ValueError, match="episode ended after 10 tasks"):
        deploy(policy, gym.wrappers.TimeLimit(env, 10), n, learn=False, references=False)


def test_stabilization_md_notes_learners_that_settled_on_a_backlog():
    """On a near-capacity stream cold PPO read samples_to_stabilise 50 at 70x static: against
    static in its own state the backlog it built cancels. The table now says which agents'
    steady state is far above static's own run."""
    from agents.evaluation import OnlineStudy, online_markdown

    study = OnlineStudy(metrics={
        "ppo": [{"samples_to_stabilise": 50.0, "steady_vs_static": 70.0}] * 2,
        "ppo-warm": [{"samples_to_stabilise": 300.0, "steady_vs_static": 0.75}] * 2,
        "dqn": [{"samples_to_stabilise": 50.0, "steady_vs_static": 1.5},
                {"samples_to_stabilise": 50.0, "steady_vs_static": 4.0}]})
    notes = [line for line in online_markdown(study, [1, 2], 600, "x").splitlines()
             if line.startswith("note:")]
    assert len(notes) == 1 and "ppo (70.0x)" in notes[0] and "dqn (2.8x)" in notes[0], notes
    assert "ppo-warm" not in notes[0] and "samples_to_stabilise" in notes[0]
    calm = OnlineStudy(metrics={"ppo": [{"steady_vs_static": 0.98}]})
    assert "note:" not in online_markdown(calm, [1], 600, "x")


def test_stabilization_md_says_how_many_seeds_never_settled():
    """A run that has not settled by its end counts at its length (a lower bound): the mean
    over seeds is one too. The cell gave the mean alone (dqn's 531.8 held a seed at 600), so
    a reader could not tell a late mean from a censored one."""
    from agents.evaluation import OnlineStudy, online_markdown

    study = OnlineStudy(metrics={"x": [{"samples_to_stabilise": 600.0, "early": 1.0},
                                       {"samples_to_stabilise": 300.0, "early": 600.0}],
                                 "y": [{"samples_to_stabilise": 250.0, "early": 1.0},
                                       {"samples_to_stabilise": 300.0, "early": 1.0}]})
    lines = online_markdown(study, [1, 2], 600, "article").splitlines()
    [x] = [ln for ln in lines if ln.startswith("| x |")]
    [y] = [ln for ln in lines if ln.startswith("| y |")]
    assert x.split(" | ")[1].endswith("(1/2 seeds unsettled, counted at 600)")
    assert "unsettled" not in x.split(" | ")[2]          # another metric's 600 is a value
    assert "unsettled" not in y
    # a 600-sample run is unsettled at 600, a 1000-sample one is not
    assert "unsettled" not in online_markdown(study, [1, 2], 1000, "article").split("##")[0]
    assert any("unsettled, counted at" in ln for ln in lines[lines.index("## Definitions"):])


def test_unsettled_counts_the_runs_censored_at_their_length():
    from agents.online import WINDOW, unsettled

    assert unsettled([600.0, 596.0, 300.0, 600.0], 600) == 2
    # a run no longer than a window has one window: its value is its length, and it settled
    assert unsettled([float(WINDOW)], WINDOW) == 0
    assert unsettled([float("nan"), 600.0], 600) == 1
