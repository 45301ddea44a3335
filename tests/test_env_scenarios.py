"""Scenario-level properties: the problem is real, traces replay faithfully, faults bite."""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import envs
from envs.inference_alloc import UnreachedFaultWarning
from envs.scenario import (
    MIN_RATE,
    SCENARIO_DIR,
    Burst,
    Distribution,
    Fault,
    load_scenario,
    scenario_from_dict,
    scenario_names,
)
from envs.traces import batch_requests, read_trace
from inference.hardware import PRESET_DIR, hardware_to_dict, load_hardware

V0, SPLIT = envs.ENV_IDS

# --- the problem is real -----------------------------------------------------------------------

ORACLE_TASKS = 1000
ORACLE_SEED = 2024
MIN_ORACLE_GAP = 0.15      # the per-step oracle beats the best static placement by >= 15%
MAX_TOP_SHARE = 0.60       # ... and no single placement is its choice for > 60% of the tasks


def oracle_action(raw: Any) -> np.ndarray:
    """The per-step oracle's placement for the env's current task, state and noise."""
    ref = raw.planner.references(raw._current_task(), raw._episode.noise[raw._index],
                                 raw.stage_masks())
    return np.array([raw.device_names.index(d) for d in ref["oracle_placement"]])


@pytest.fixture(scope="module")
def article_oracle_vs_static() -> dict[str, Any]:
    env = gym.make(f"envs:{V0}", scenario="article", episode_tasks=ORACLE_TASKS, reference=True)
    raw = env.unwrapped
    static = np.array(raw.planner.best_static)

    def episode(policy: str) -> tuple[list[float], Counter[tuple[int, ...]]]:
        env.reset(seed=ORACLE_SEED)
        latencies: list[float] = []
        chosen: Counter[tuple[int, ...]] = Counter()
        truncated = False
        while not truncated:
            action = oracle_action(raw) if policy == "oracle" else static
            chosen[tuple(int(a) for a in action)] += 1
            *_, truncated, info = env.step(action)
            latencies.append(info["latency"])
            if policy == "oracle":
                assert info["latency"] == info["oracle_latency"]
        assert len(latencies) == ORACLE_TASKS
        return latencies, chosen

    oracle, chosen = episode("oracle")
    static_lat, _ = episode("static")
    top, top_count = chosen.most_common(1)[0]
    names = raw.device_names
    return {
        "oracle_mean": float(np.mean(oracle)),
        "static_mean": float(np.mean(static_lat)),
        "gap": 1.0 - float(np.mean(oracle)) / float(np.mean(static_lat)),
        "top": ",".join(names[d] for d in top),
        "top_share": top_count / ORACLE_TASKS,
        "static": ",".join(names[d] for d in static),
        "choices": {",".join(names[d] for d in p): c for p, c in chosen.most_common()},
    }


def test_oracle_beats_best_static_on_article(article_oracle_vs_static: dict[str, Any]) -> None:
    r = article_oracle_vs_static
    assert r["gap"] >= MIN_ORACLE_GAP, (
        f"oracle mean latency {r['oracle_mean']:.3f} s vs best static ({r['static']}) "
        f"{r['static_mean']:.3f} s: gap {r['gap']:.1%} < {MIN_ORACLE_GAP:.0%}")


def test_no_placement_dominates_the_oracle_on_article(
        article_oracle_vs_static: dict[str, Any]) -> None:
    r = article_oracle_vs_static
    assert r["top_share"] <= MAX_TOP_SHARE, (
        f"the oracle picks {r['top']} for {r['top_share']:.1%} of {ORACLE_TASKS} tasks "
        f"(> {MAX_TOP_SHARE:.0%}); its choices: {r['choices']}")


# --- real traces -------------------------------------------------------------------------------

TRACE_TASKS = 300


def batched_trace(env: gym.Env) -> list[Any]:
    w = env.unwrapped.scenario.workload
    return batch_requests(w.trace, time_scale=w.trace_time_scale, window_s=w.trace_window_s,
                          max_batch=w.trace_max_batch)


@pytest.mark.parametrize(("trace", "seed"), [("azure-code", 0), ("azure-conv", 0)])
def test_trace_replays_a_whole_episode_with_the_trace_sizes(trace: str, seed: int) -> None:
    env = gym.make(f"envs:{V0}", trace=trace, episode_tasks=TRACE_TASKS)
    env.action_space.seed(seed)
    _, info = env.reset(seed=seed)
    seen = [info["task"]]
    rewards: list[float] = []
    truncated = False
    while not truncated:
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert not terminated
        rewards.append(reward)
        seen.append(info["task"])     # a step's info["task"] is the task it just placed
    assert len(rewards) == TRACE_TASKS
    assert all(math.isfinite(r) and r < 0 for r in rewards)
    placed = seen[1:]
    assert placed[0] == seen[0]       # reset's info announces the first task

    # The episode is a contiguous window of the batched trace (sizes and relative arrivals).
    batches = batched_trace(env)
    sizes = [(t["batch"], t["prompt_tokens"], t["output_tokens"]) for t in placed]
    all_sizes = [(b.batch, b.prompt_tokens, b.output_tokens) for b in batches]
    starts = [s for s in range(len(all_sizes) - TRACE_TASKS + 1)
              if all_sizes[s:s + TRACE_TASKS] == sizes]
    assert starts, "the episode's task sizes are not a window of the batched trace"
    start = starts[0]
    t0 = batches[start].arrival
    expected_arrivals = [b.arrival - t0 for b in batches[start:start + TRACE_TASKS]]
    assert np.allclose([t["arrival"] for t in placed], expected_arrivals, rtol=0, atol=1e-9)

    # The sizes follow the trace's own percentiles. An episode is a random 300-batch window and
    # the traces are not stationary (azure-conv has a ~20-minute stretch of ~4K-token prompts
    # whose windows' medians reach ~3x the whole trace's; every azure-code window lies within
    # 0.84-1.19x), so the tolerance is the trace's own spread: the env's median must lie within
    # the range of the medians of every 300-batch window of the batched trace.
    prompts = np.array([b.prompt_tokens for b in batches])
    window_medians = np.array([np.median(prompts[s:s + TRACE_TASKS])
                               for s in range(len(prompts) - TRACE_TASKS + 1)])
    env_median = float(np.median([t["prompt_tokens"] for t in placed]))
    trace_median = float(np.median(prompts))
    low, high = window_medians.min(), window_medians.max()
    assert low <= env_median <= high, (env_median, trace_median, low, high)
    # The band has power: the unbatched requests' median (batches pad to their longest prompt)
    # lies outside it, so an env replaying raw requests or batching differently would fail here.
    raw_median = float(np.median(read_trace(trace).context_tokens))
    assert raw_median < low
    # For the seeds fixed above, the episode is a typical window: within 25% of the trace median.
    assert abs(env_median / trace_median - 1.0) <= 0.25, (env_median, trace_median)



def test_trace_time_scale_is_an_env_argument_as_in_a_scenario() -> None:
    """At their real rate the Azure traces overload one server; slowing one down took a
    scenario YAML. The argument replays exactly what the YAML field does."""
    sc = load_scenario("article")
    sc = dataclasses.replace(sc, workload=dataclasses.replace(
        sc.workload, trace="azure-conv", trace_time_scale=0.05))
    by_arg = gym.make(f"envs:{V0}", trace="azure-conv", trace_time_scale=0.05, episode_tasks=20)
    by_yaml = gym.make(f"envs:{V0}", scenario=sc, episode_tasks=20)
    assert by_arg.unwrapped.scenario == by_yaml.unwrapped.scenario
    a, info_a = by_arg.reset(seed=4)
    b, info_b = by_yaml.reset(seed=4)
    np.testing.assert_array_equal(a, b)
    real = gym.make(f"envs:{V0}", trace="azure-conv", episode_tasks=20)
    real.reset(seed=4)
    slow_gaps = np.diff([t.arrival for t in by_arg.unwrapped._episode.tasks])
    assert slow_gaps.mean() > 3 * np.diff([t.arrival for t in real.unwrapped._episode.tasks]).mean()


def test_a_trace_span_keeps_training_and_held_out_episodes_apart(tmp_path: Path) -> None:
    """Every seed drew its window from the whole trace, so a held-out episode replayed
    requests training had seen (azure-conv at 0.05: 60,000 steps pass over its 16,772
    batches 3.6 times). `workload.trace_span` splits it by time: windows of [0, 0.5] and of
    [0.5, 1] share no batch, and together cover both halves."""
    rows = [f"2023-11-16 18:{i // 60:02d}:{i % 60:02d}.000000,{1000 + i},{10 + i % 7}"
            for i in range(100)]      # one request a second: each a batch of its own
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")

    def prompts(span: list[float], seeds: range) -> set[int]:
        (tmp_path / "s.yaml").write_text(f"name: s\nworkload: {{trace: {trace}, trace_span: "
                                         f"{span}}}\n")
        env = gym.make(f"envs:{V0}", scenario=str(tmp_path / "s.yaml"), episode_tasks=10)
        seen = set()
        for seed in seeds:
            _, info = env.reset(seed=seed)
            for _ in range(10):
                seen.add(info["task"]["prompt_tokens"])
                _, _, _, _, info = env.step(env.action_space.sample())
        return seen

    first, second = prompts([0, 0.5], range(20)), prompts([0.5, 1], range(20))
    assert max(first) < 1050 <= min(second)
    assert min(first) < 1010 and max(second) >= 1090      # windows anywhere in each half
    assert len(prompts([0, 1], range(20))) > 50           # the default: the whole trace
    load = dataclasses.replace(load_scenario("article").workload, trace=str(trace),
                               trace_span=(0.991, 0.995))
    sc = dataclasses.replace(load_scenario("article"), workload=load)
    with pytest.raises(ValueError, match=r"scenario field workload.trace_span: the span "
                                         r"\[0.991, 0.995\] holds 0 of the 100 batches of trace "
                                         r".*t.csv \(over 99 s\), fewer than an episode's 200 "
                                         r"tasks, so every seed would replay"):
        gym.make(f"envs:{V0}", scenario=sc)
    # a span shorter than best-static's 300 calibration tasks, longer than the episodes: the
    # search calibrates on what the span holds (the refusal was on every draw, the search's too,
    # and the first step pricing static failed)
    half = dataclasses.replace(load, trace_span=(0.5, 1.0))
    env = gym.make(f"envs:{V0}", scenario=dataclasses.replace(sc, workload=half),
                   episode_tasks=20, reference=True)
    env.reset(seed=0)
    assert math.isfinite(env.step(env.action_space.sample())[4]["static_latency"])
    # a span shorter than the episode: every seed replayed its one window, cut short
    with pytest.raises(ValueError, match=r"holds 50 of the 100 batches .* fewer than an "
                                         r"episode's 60 tasks.*shorten the episodes .*"
                                         r"--online-samples or --no-online"):
        gym.make(f"envs:{V0}", scenario=dataclasses.replace(sc, workload=half), episode_tasks=60)


@pytest.mark.parametrize("span", [[0.8, 0.2], [0.5, 0.5], [0, 2], [-0.1, 1], [0, float("nan")],
                                  [0.5], "0,1", [True, 1]])
def test_a_trace_span_is_two_fractions_in_order(span: Any) -> None:
    with pytest.raises(ValueError, match=r"workload.trace_span must be \[start, end\], "
                                         r"fractions of the trace's duration"):
        scenario_from_dict({"workload": {"trace": "azure-conv", "trace_span": span}}, "s")
    with pytest.raises(ValueError, match=r"workload.trace_span \(\[0.0, 0.5\]\) is read only "
                                         r"with a replayed trace"):
        scenario_from_dict({"workload": {"trace_span": [0, 0.5]}}, "s")


def test_a_trace_setting_at_its_default_loads_without_a_trace() -> None:
    """The other side of refusing a trace setting without a trace: its default changes
    nothing, and `Scenario.to_dict` writes it for every scenario, so it reads back."""
    defaults = {"trace": None, "trace_time_scale": 1, "trace_window_s": 0.5, "trace_max_batch": 32}
    assert scenario_from_dict({"workload": defaults}, "defaults").workload.trace is None
    sc = load_scenario("article")
    assert load_scenario(sc.to_dict()) == dataclasses.replace(sc, source=sc.source)


def test_a_trace_setting_without_a_trace_is_refused_in_a_scenario_object() -> None:
    sc = load_scenario("article")
    sc = dataclasses.replace(sc, workload=dataclasses.replace(sc.workload, trace_time_scale=2.0))
    with pytest.raises(ValueError, match="workload.trace_time_scale .2. is read only with"):
        gym.make(f"envs:{V0}", scenario=sc)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"trace_time_scale": 0.05}, "give trace= too"),
    ({"trace": "azure-conv", "trace_time_scale": 0}, r"trace_time_scale must be a number in \[1e-06"),
    ({"trace": "azure-conv", "trace_time_scale": True}, "got True"),
    ({"trace": "azure-conv", "trace_time_scale": float("nan")}, "got nan"),
    ({"trace": "azure-conv", "trace_time_scale": "0.05"}, "got '0.05'"),
])
def test_a_bad_trace_time_scale_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        gym.make(f"envs:{V0}", **kwargs)


def test_each_seed_replays_its_own_window_of_the_trace() -> None:
    """The window's start is drawn from the episode's generator: held-out seeds are other
    stretches of the trace, not the same tasks with other domains and noise."""
    batches = batch_requests("azure-code")
    sizes = [(b.batch, b.prompt_tokens, b.output_tokens) for b in batches]
    starts = set()
    for seed in range(4):
        tasks = _episode({"trace": "azure-code"}, n=50, seed=seed).tasks
        start = sizes.index((tasks[0].batch, tasks[0].prompt_tokens, tasks[0].output_tokens))
        assert [(t.batch, t.prompt_tokens, t.output_tokens) for t in tasks] == \
            sizes[start:start + 50]
        starts.add(start)
    assert len(starts) == 4


def test_the_last_window_of_a_trace_can_start_an_episode_too(tmp_path: Path) -> None:
    """The window's start is drawn from 0 .. len(batches) - n inclusive: a trace of 4 batches
    replays 3-task episodes from both possible starts, the last one too (a draw that excluded
    it never replayed the trace's last batch)."""
    rows = [f"2023-11-16 18:{minute:02d}:00,{1000 * (minute + 1)},{10 + minute}"
            for minute in range(0, 40, 10)]     # minutes apart: one request per batch
    path = tmp_path / "trace.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n",
                    encoding="utf-8")
    w = scenario_from_dict({"workload": {"trace": str(path)}}, "test").workload
    batches = batch_requests(str(path), time_scale=w.trace_time_scale, window_s=w.trace_window_s,
                             max_batch=w.trace_max_batch)
    sizes = [(b.batch, b.prompt_tokens, b.output_tokens) for b in batches]
    assert len(set(sizes)) == len(sizes) == 4
    n = len(sizes) - 1
    starts = set()
    for seed in range(20):
        tasks = _episode({"trace": str(path)}, n=n, seed=seed).tasks
        start = sizes.index((tasks[0].batch, tasks[0].prompt_tokens, tasks[0].output_tokens))
        assert [(t.batch, t.prompt_tokens, t.output_tokens) for t in tasks] == \
            sizes[start:start + n]
        starts.add(start)
    assert starts == set(range(len(sizes) - n + 1))


# --- faults ------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_faults_mask_the_offline_npu_during_its_window(env_id: str) -> None:
    env = gym.make(f"envs:{env_id}", scenario="faults")
    raw = env.unwrapped
    fault = next(f for f in raw.scenario.faults if f.kind == "offline")
    assert (fault.device, fault.start_task, fault.end_task) == ("npu", 60, 120)
    npu = raw.device_names.index("npu")
    online_flag = 6 + 4 * npu
    env.action_space.seed(1)
    obs, _ = env.reset(seed=1)
    rewards = []
    failed_in_window = 0
    truncated = False
    index = 0
    while not truncated:
        masks = raw.action_masks().reshape(3, raw.n_devices)
        if 60 <= index < 120:
            assert not masks[:, npu].any(), index
            assert obs[online_flag] == 0.0
        else:
            assert masks[0, npu], index    # loading needs no weights: fits whenever online
            assert obs[online_flag] == 1.0
        obs, reward, _, truncated, info = env.step(env.action_space.sample())
        rewards.append(reward)
        if 60 <= index < 120:
            failed_in_window += info["failed_dispatch"]
            assert all("npu" not in p for p in info["placement"])
        index += 1
    assert index == raw.scenario.episode_tasks == 200
    assert all(math.isfinite(r) for r in rewards)
    assert failed_in_window > 0    # random actions did pick the offline NPU, without an error


# --- closed-loop workloads ---------------------------------------------------------------------


def closed_loop_scenario(tmp_path: Any, clients: Any) -> Any:
    path = tmp_path / "closed.yaml"
    path.write_text(f"name: closed\nepisode_tasks: 30\nworkload: {{clients: {clients}}}\n",
                    encoding="utf-8")
    return path


@pytest.mark.parametrize("env_id", [V0, SPLIT])
@pytest.mark.parametrize("clients", [1, 3])
def test_each_client_sends_its_next_request_when_its_last_finishes(
        tmp_path: Any, env_id: str, clients: int) -> None:
    env = gym.make(f"envs:{env_id}", scenario=closed_loop_scenario(tmp_path, clients))
    env.reset(seed=5)
    env.action_space.seed(5)
    infos = [env.step(env.action_space.sample())[4] for _ in range(30)]
    arrivals = [i["task"]["arrival"] for i in infos]
    finishes = [a + i["latency"] for a, i in zip(arrivals, infos, strict=True)]
    assert arrivals[:clients] == [0.0] * clients
    for j in range(clients, 30):     # request j waits for request j - K (and dispatch order)
        assert arrivals[j] == max(finishes[j - clients], arrivals[j - 1])
        assert sum(f > arrivals[j] for f in finishes[:j]) < clients   # <= K in the system


def test_the_same_seed_gives_the_same_closed_loop(tmp_path: Any) -> None:
    def run() -> list[float]:
        env = gym.make(f"envs:{V0}", scenario=closed_loop_scenario(tmp_path, 2))
        env.reset(seed=1)
        return [env.step(np.array([0, 2, 1]))[4]["task"]["arrival"] for _ in range(30)]

    assert run() == run()


@pytest.mark.parametrize("clients", ["-1", "1.5", "two"])
def test_a_bad_client_count_names_the_field(tmp_path: Any, clients: str) -> None:
    with pytest.raises(ValueError, match="workload.clients"):
        gym.make(f"envs:{V0}", scenario=closed_loop_scenario(tmp_path, clients))


# --- scenario validation -----------------------------------------------------------------------


@pytest.mark.parametrize("name", scenario_names())
def test_every_shipped_scenario_loads(name: str) -> None:
    assert load_scenario(name).name == name



def _schema_example() -> Any:
    """The YAML example of the `envs.scenario` module docstring (what help() shows), parsed."""
    import textwrap

    import yaml

    import envs.scenario

    block = (envs.scenario.__doc__ or "").split("::\n", 1)[1].lstrip("\n").split("\n\n")[0]
    return yaml.safe_load(textwrap.dedent(block)), block


def test_the_scenario_schema_example_loads_and_shows_every_field() -> None:
    """The module docstring's schema loads as a scenario, gives every field of every section,
    and the fields a fault needs, as its comment names them, are the ones a fault is refused
    without: nothing else is required."""
    import envs.scenario
    from envs.scenario import FAULT_NEEDS, CacheSpec, Scenario, SimulatorSpec, Workload

    raw, block = _schema_example()
    scenario_from_dict(raw, "schema")
    assert set(raw) == {f.name for f in dataclasses.fields(Scenario)} - {"source"}
    for section, cls in (("workload", Workload), ("cache", CacheSpec), ("simulator", SimulatorSpec)):
        assert set(raw[section]) == {f.name for f in dataclasses.fields(cls)}, section
    assert set(raw["workload"]["burst"]) == {f.name for f in dataclasses.fields(Burst)}
    needs = re.search(r"faults: +# each needs ([\w, ]+) \(", block)
    assert needs is not None
    assert tuple(needs.group(1).split(", ")) == FAULT_NEEDS
    scenario_from_dict({}, "nothing given")
    clamps = re.search(r"``min``/``max`` \(default (\S+) and (\S+)\), and ``dist`` itself "
                       r"\(default ``(\w+)``\)", " ".join((envs.scenario.__doc__ or "").split()))
    assert clamps is not None
    default = envs.scenario.Distribution()
    assert (float(clamps[1]), float(clamps[2]), clamps[3]) == (default.min, default.max,
                                                                default.dist)
    for key in FAULT_NEEDS:
        fault = {k: v for k, v in raw["faults"][0].items() if k != key}
        with pytest.raises(ValueError, match=key):
            scenario_from_dict({"faults": [fault]}, "schema")

def test_a_continuous_dists_parameters_and_whole_floats_need_not_be_integers() -> None:
    """Their draws are rounded by design; 8.0 is the size 8."""
    workload = {"batch": {"dist": "choice", "values": [4, 8.0]},
                "prompt_tokens": {"dist": "normal", "mean": 2000.5, "std": 10.5},
                "output_tokens": {"dist": "uniform", "low": 1.5, "high": 9.5}}
    scenario = scenario_from_dict({"workload": workload}, "x")
    assert scenario.workload.batch.values == (4.0, 8.0)
    lognormal = {"dist": "lognormal", "median": 100.5, "sigma": 0.5}
    assert scenario_from_dict({"workload": {"batch": lognormal}}, "x").workload.batch.median == 100.5


@pytest.mark.parametrize(("raw", "message"), [
    # Each used to load, then overflow numpy at reset() with a message naming no field (or
    # take gigabytes, or give an infinite latency).
    ({"workload": {"prompt_tokens": {"value": 1e19, "max": 1e20}}},
     "workload.prompt_tokens.value must be <= 1e+09"),
    ({"workload": {"batch": {"dist": "normal", "mean": 1e308, "std": 1e308}}},
     "workload.batch.mean must be <= 1e+09"),
    ({"workload": {"arrival_rate": 1e-320}}, "workload.arrival_rate must be >= 1e-06"),
    ({"workload": {"burst": {"period": 2, "length": 1, "rate_multiplier": 1e-320}}},
     "workload.burst.rate_multiplier must be >= 1e-06"),
    ({"workload": {"domains": 10**8}}, "workload.domains must be <= 1e+06"),
    ({"episode_tasks": 10**29}, "episode_tasks must be <= 1e+06"),
    ({"noise": 1000}, "noise must be <= 2"),
    ({"simulator": {"replacement_overhead_s": 1e308}}, "replacement_overhead_s must be <= 3600"),
    ({"simulator": {"contention": 1e9}}, "simulator.contention must be <= 10"),
    # keys of mixed types used to fail sorting them for the message (int < str)
    ({1: 2, "foo": 3}, "<top level> has unknown keys [1, 'foo']"),
    ({"workload": {1: 2, "foo": 3}}, "workload has unknown keys [1, 'foo']"),
    # a key of another section says where it belongs (the README's `trace=` is an env argument)
    ({"trace": "azure-conv"}, "['trace'] (trace belongs under workload:)"),
    ({"workload": {"noise": 0.1, "capacity": 4}},
     "(capacity belongs under cache:, noise at the top level)"),
    # sizes used to be clipped or rounded into something else without a word
    ({"workload": {"batch": 0}}, "workload.batch.value must be >= 1, got 0"),
    ({"workload": {"batch": {"dist": "choice", "values": [0, 3]}}},
     "workload.batch: 0 lies outside min..max 1..1e+09"),
    # a size given outright drew rounded (2.5 as 2, 8.5 as 8)
    ({"workload": {"batch": 2.5}}, "workload.batch.value must be an integer, got 2.5"),
    ({"workload": {"batch": {"dist": "choice", "values": [4, 8.5]}}},
     "workload.batch.values must be an integer, got 8.5"),
    ({"workload": {"batch": {"dist": "choice", "values": [0.2, 0.3]}}},
     "workload.batch.values must be an integer, got 0.2"),
    ({"workload": {"prompt_tokens": {"dist": "constant", "value": 100.5}}},
     "workload.prompt_tokens.value must be an integer"),
    ({"workload": {"batch": {"dist": "uniform", "low": 0.5, "high": 8}}},
     "workload.batch: 0.5 lies outside min..max 1..1e+09"),
    ({"workload": {"prompt_tokens": {"dist": "lognormal", "median": 100, "sigma": 200}}},
     "workload.prompt_tokens.sigma must be <= 10"),
    # a log-normal's median of 0 drew only zeros, every one clipped to min without a word
    ({"workload": {"prompt_tokens": {"dist": "lognormal", "median": 0, "sigma": 0.5}}},
     "workload.prompt_tokens.median must be > 0"),
    ({"workload": {"batch": {"value": 5, "min": 1.5, "max": 1.7}}},
     "workload.batch.min must be an integer"),
    ({"workload": {"batch": {"value": 5, "min": 8}}}, "workload.batch: 5 lies outside min..max 8..1e+09"),
    ({"description": [1, 2]}, "description must be a string, got [1, 2]"),
    ({"name": None}, "name must be a string, got None"),
    ({"hardware": None}, "hardware must be a preset name, a YAML path or a mapping of the hardware schema, got None"),
    ({"faults": [{"device": "npu", "kind": "offline", "start_task": 0, "end_task": 5,
                  "factor": 0.5}]}, "faults[0].factor is for kind: throttle"),
    # the edges of each documented range
    ({"cache": {"decay": 0}}, "cache.decay must be > 0, got 0"),
    ({"cache": {"decay": 1.5}}, "cache.decay must be in [1e-300, 1], got 1.5"),
    ({"cache": {"decay": 5e-324}}, "cache.decay must be in [1e-300, 1], got 5e-324"),
    ({"workload": {"burst": {"period": 4, "length": 5, "rate_multiplier": 2}}},
     "burst.length must be <= workload.burst.period"),
    ({"faults": [{"device": "npu", "kind": "offline", "start_task": 5, "end_task": 5}]},
     "faults[0]: need start_task < end_task (end_task is excluded), got 5..5"),
    ({"faults": {"device": "npu", "kind": "offline"}}, "scenario field faults must be a list"),
    # an absent key read as None: "faults[0].start_task must be ..., got None"
    ({"faults": [{"device": "npu", "kind": "offline", "end_task": 5}]},
     "scenario field faults[0] is missing start_task (a fault needs device, kind, start_task, "
     "end_task)"),
    ({"faults": [{}]}, "faults[0] is missing device, kind, start_task, end_task"),
    ({"faults": [None]}, "faults[0] is missing device, kind, start_task, end_task"),
    # a falsy non-list was read as none (`or []`); null still is
    ({"faults": 0}, "scenario field faults must be a list, got 0"),
    ({"faults": False}, "scenario field faults must be a list, got False"),
    ({"faults": ""}, "scenario field faults must be a list, got ''"),
    # not a scenario's shape at all: each a ValueError naming the field, not an AttributeError
    ({"workload": 5}, "scenario field workload must be a mapping"),
    ({"workload": {"batch": "8"}}, "workload.batch must be a number or a mapping with `dist`"),
    ({"workload": {"batch": {"dist": "poisson", "value": 4}}},
     "workload.batch.dist must be one of normal, lognormal, uniform, choice, constant, got 'poisson'"),
    ({"workload": {"batch": {"value": 5, "min": 0}}}, "workload.batch: need 1 <= min <= max, got 0.0.."),
    ({"workload": {"trace": 5}}, "workload.trace must be a trace name or path, got 5"),
    # a trace's settings without a trace were ignored; the env's trace_time_scale= is refused so
    ({"workload": {"trace_time_scale": 2}},
     "workload.trace_time_scale (2) is read only with a replayed trace; give workload.trace"),
    ({"workload": {"trace": None, "trace_window_s": 2}}, "workload.trace_window_s (2) is read only"),
    ({"workload": {"trace_max_batch": 8}}, "workload.trace_max_batch (8) is read only"),
    ({"variant": 5}, "scenario field variant must be a recipe name or a mapping, got 5"),
    ({"faults": [{"device": "gpu", "kind": "reboot", "start_task": 0, "end_task": 5}]},
     "faults[0].kind must be offline or throttle, got 'reboot'"),
    ({"faults": [{"device": 5, "kind": "offline", "start_task": 0, "end_task": 5}]},
     "faults[0].device must name a device, got 5"),
    ({"workload": {"batch": {"dist": "choice", "values": []}}},
     "workload.batch.values must be a non-empty list"),
    ({"workload": {"batch": {"dist": "choice", "values": [4, 8], "weights": [1.0]}}},
     "workload.batch.weights must match values and sum to > 0"),
    # a count of tasks, the episode's or a fault's window, is at least one
    ({"episode_tasks": 0}, "episode_tasks must be >= 1, got 0"),
    ({"faults": [{"device": "gpu", "kind": "throttle", "start_task": 0, "end_task": 5,
                  "factor": 1.5}]}, "faults[0].factor must be in 1e-12..1 (the share of its speed "
                                    "a throttled device keeps), got 1.5"),
    # a stage's time is divided by the factor: 5e-324 made it inf, and step() a RuntimeError
    ({"faults": [{"device": "gpu", "kind": "throttle", "start_task": 0, "end_task": 5,
                  "factor": 5e-324}]}, "faults[0].factor must be in 1e-12..1 (the share of its "
                                      "speed a throttled device keeps), got 5e-324"),
])
def test_an_implausible_scenario_value_names_the_field(raw: dict[Any, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        scenario_from_dict(raw, "test")
    assert message in str(info.value)


def test_the_inclusive_edges_of_each_documented_range_load() -> None:
    """The other side of the refusals above: a bound a field may take loads as given."""
    raw = {"noise": 0, "failed_dispatch_s": 0,
           "cache": {"decay": 1, "train_shift": 0, "precomputed_size": 0},
           "simulator": {"prefetch_depth": 0},
           "workload": {"zipf": 0, "arrival_rate": MIN_RATE, "trace": "azure-conv",
                        "trace_time_scale": MIN_RATE,
                        "burst": {"period": 4, "length": 4, "rate_multiplier": MIN_RATE},
                        "batch": {"value": 4, "min": 4, "max": 4}},
           "faults": [{"device": "gpu", "kind": "throttle", "start_task": 0, "end_task": 1,
                       "factor": 1}]}
    sc = scenario_from_dict(raw, "edges")
    assert (sc.noise, sc.failed_dispatch_s) == (0, 0)
    assert (sc.cache.decay, sc.cache.train_shift, sc.cache.precomputed_size) == (1, 0, 0)
    w = sc.workload
    assert (w.zipf, w.arrival_rate, w.trace_time_scale) == (0, MIN_RATE, MIN_RATE)
    assert w.burst == Burst(4, 4, MIN_RATE) and sc.faults[0].factor == 1
    assert (w.batch.min, w.batch.max, sc.simulator.prefetch_depth) == (4, 4, 0)


def test_the_slowest_throttle_the_loader_takes_steps_to_finite_latencies(tmp_path: Path) -> None:
    """The other side of the throttle's lower bound: its smallest factor, on every device of
    hardware at the slow end of every range and with the largest tasks and noise, still steps
    to a finite latency and reward in both envs."""
    import yaml

    raw_hw = yaml.safe_load((PRESET_DIR / "server.yaml").read_text(encoding="utf-8"))
    raw_hw["disk_bandwidth"] = 1.0
    for device in raw_hw["devices"]:
        device.update(peak_flops=1.0, mem_bandwidth=1.0, launch_overhead=3600.0, setup_s=3600.0)
        device.pop("true_figures", None)
        for table in ("op_efficiency", "pattern_efficiency"):
            device[table] = dict.fromkeys(device[table], 1e-12)
    for link in raw_hw["links"]:
        link.update(bandwidth=1.0, latency=3600.0)
    hardware = tmp_path / "slowest.yaml"
    hardware.write_text(yaml.safe_dump(raw_hw), encoding="utf-8")
    scenario = {"episode_tasks": 3, "noise": 2.0, "hardware": str(hardware),
                "workload": {"batch": 10**9, "prompt_tokens": 10**9, "output_tokens": 10**9},
                "faults": [{"device": name, "kind": "throttle", "factor": 1e-12,
                            "start_task": 0, "end_task": 3} for name in ("cpu", "gpu", "npu")]}
    for env_id in (V0, SPLIT):
        env = gym.make(env_id, scenario=scenario, reward="relative")
        env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(3):
            obs, reward, _, _, info = env.step(env.action_space.sample())
            assert math.isfinite(reward) and math.isfinite(info["latency"])
            assert info["latency"] > 1e40 and env.observation_space.contains(obs)


def test_a_choice_without_weights_and_a_zero_std_survive_to_dict() -> None:
    """to_dict leaves out only weights never given; a parameter that is 0 is still written."""
    workload = {"batch": {"dist": "choice", "values": [4, 8]},
                "prompt_tokens": {"dist": "normal", "mean": 2000, "std": 0}}
    sc = scenario_from_dict({"workload": workload}, "x")
    assert load_scenario(sc.to_dict()) == sc


def test_faults_that_take_every_device_offline_at_once_are_refused() -> None:
    def offline(device: str, start: int, end: int) -> dict[str, Any]:
        return {"device": device, "kind": "offline", "start_task": start, "end_task": end}

    apart = [offline("cpu", 0, 10), offline("gpu", 5, 20), offline("npu", 10, 30)]
    envs.InferenceAllocEnv(scenario_from_dict({"faults": apart}, "apart"))   # never all three
    together = [offline("cpu", 0, 10), offline("gpu", 5, 20), offline("npu", 8, 30)]
    with pytest.raises(ValueError, match="take every device offline at task 8"):
        envs.InferenceAllocEnv(scenario_from_dict({"faults": together}, "together"))


def test_a_fault_past_the_scenarios_own_episode_is_refused_naming_it_and_both_counts() -> None:
    """A fault starting at or after the episode's last task never fired, and nothing said so."""
    late = {"faults": [{"device": "gpu", "kind": "throttle", "factor": 0.5, "start_task": 10,
                        "end_task": 20},
                       {"device": "npu", "kind": "offline", "start_task": 5000, "end_task": 5100}]}
    sc = scenario_from_dict(late, "late.yaml")
    for env_id in (V0, SPLIT):
        with pytest.raises(ValueError, match=re.escape(
                "late.yaml: scenario field faults[1]: start_task 5000 is at or past the "
                "episode's 200 tasks")):
            gym.make(f"envs:{env_id}", scenario=sc)
    for shorter in (10, 199):    # shortening the episode does not excuse a fault never fired
        with pytest.raises(ValueError, match="faults.1.: start_task 5000 is at or past the "
                                             "episode's 200 tasks"):
            gym.make(f"envs:{V0}", scenario=sc, episode_tasks=shorter)
    edge = scenario_from_dict({**late, "episode_tasks": 5000}, "edge.yaml")
    with pytest.raises(ValueError, match="faults.1.: start_task 5000 is at or past the episode's 5000"):
        envs.InferenceAllocEnv(edge)
    envs.InferenceAllocEnv(dataclasses.replace(edge, episode_tasks=5001))   # its last task


@pytest.mark.parametrize("make", [
    lambda: gym.make(f"envs:{V0}", scenario="faults", episode_tasks=30),
    lambda: envs.InferenceAllocEnv("faults", episode_tasks=30),
    lambda: gym.make("envs:InferenceAllocMix-v0", scenarios=["faults", "article"],
                     weights=[1, 0], episode_tasks=30)])
def test_a_fault_past_a_shortened_episode_warns_at_the_line_that_reset_the_env(
        make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warning was reported at envs/inference_alloc.py (stacklevel=1), so a filter on the
    module of the user's code never matched it."""
    import warnings

    env = make()   # tests/conftest.py clears the env's once-per-process record per test
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.reset(seed=0)
    assert [(w.category.__name__, w.filename) for w in caught] == [
        ("UnreachedFaultWarning", __file__)]
    monkeypatch.setattr("envs.inference_alloc._WARNED", set())
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=UnreachedFaultWarning, module=__name__)
        with pytest.raises(UnreachedFaultWarning):
            make().reset(seed=0)


def test_a_fault_past_a_shortened_episode_warns_at_the_line_that_reset_a_vec_env() -> None:
    """Through SB3's DummyVecEnv the warning was reported at SB3's dummy_vec_env.py."""
    import warnings

    from stable_baselines3.common.vec_env import DummyVecEnv

    venv = DummyVecEnv([lambda: gym.make(f"envs:{V0}", scenario="faults", episode_tasks=30)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        venv.reset()
    assert [(w.category.__name__, w.filename) for w in caught] == [
        ("UnreachedFaultWarning", __file__)]


def test_a_fault_past_a_shortened_episode_warns_once() -> None:
    """Episodes shortened by episode_tasks= (--eval-tasks, the online study's samples) are
    legitimate: a fault of the scenario's longer episodes that they do not reach is a warning,
    given once, not a refusal; a longer episode_tasks= reaches a fault its own did not."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")    # once by the env itself, not the warnings filter
        env = gym.make(f"envs:{V0}", scenario="faults", episode_tasks=70)   # faults[1] at 100
        assert not caught        # an env only built (to read its devices) says nothing
        for seed in range(3):
            env.reset(seed=seed)
        gym.make(f"envs:{V0}", scenario="faults", episode_tasks=70).reset(seed=0)
    assert [w.category.__name__ for w in caught] == ["UnreachedFaultWarning"]
    messages = [str(w.message) for w in caught]
    assert messages == ["scenario 'faults': faults[1] (start_task 100) never fires in these "
                        "70-task episodes (episode_tasks=70)"]
    late = scenario_from_dict({"faults": [{"device": "npu", "kind": "offline",
                                           "start_task": 5000, "end_task": 5100}]}, "late")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gym.make(f"envs:{V0}", scenario=late, episode_tasks=6000).reset(seed=0)
        gym.make(f"envs:{V0}", scenario="faults").reset(seed=0)


def test_a_scenario_file_that_is_not_utf8_names_the_file(tmp_path: Any) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"\xff\xfe bad")
    with pytest.raises(ValueError, match=f"scenario file {path} is not UTF-8 text"):
        load_scenario(str(path))


def test_a_scenario_name_with_no_utf8_form_names_the_file_and_the_field(tmp_path: Any) -> None:
    """A lone surrogate ("\\ud800", a YAML escape) in the name loaded; a path field holding
    one was said to hold "a NUL byte"."""
    path = tmp_path / "surrogate.yaml"
    path.write_text('name: "a\\ud800"\n', encoding="utf-8")
    with pytest.raises(ValueError) as info:
        load_scenario(str(path))
    assert str(info.value) == (f"{path}: scenario field name must be UTF-8 text, got "
                               f"'a\\ud800': '\\ud800' is a lone surrogate, which has no UTF-8 "
                               f"form")
    with pytest.raises(ValueError, match=r"^<scenario mapping>: scenario field name must be UTF-8"):
        load_scenario({"name": "a\ud800"})
    path.write_text('hardware: "server\\ud800"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"hardware 'server\\ud800' is neither a preset nor a usable "
                                         r"path: it holds a lone surrogate"):
        load_scenario(str(path))


def test_a_bad_scenario_file_value_names_the_file_and_the_field(tmp_path: Any) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("workload:\n  arrival_rate: -1\n")
    with pytest.raises(ValueError) as info:
        load_scenario(str(path))
    assert str(info.value) == f"{path}: scenario field workload.arrival_rate must be >= 1e-06, got -1"

@pytest.mark.parametrize(
    ("field", "spec", "fragments"),
    [
        # A key of another dist used to be ignored, and the dist drew with a default of 1.
        ("prompt_tokens", {"dist": "normal", "median": 5000, "std": 800},
         ["workload.prompt_tokens.median", "dist: normal", "valid keys: dist, mean, std, min, max"]),
        ("output_tokens", {"dist": "lognormal", "mean": 160},
         ["workload.output_tokens.mean", "dist: lognormal", "median, sigma"]),
        ("batch", {"values": [4, 8, 16]},
         ["workload.batch.values", "dist: constant", "`dist` is omitted"]),
        # ... and so did a missing parameter.
        ("prompt_tokens", {"dist": "normal", "mean": 5000}, ["workload.prompt_tokens", "needs std"]),
        ("output_tokens", {"dist": "lognormal", "median": 160}, ["workload.output_tokens", "needs sigma"]),
        ("prompt_tokens", {"dist": "uniform", "low": 1024}, ["workload.prompt_tokens", "needs high"]),
        ("batch", {"dist": "choice", "weights": [1.0]}, ["workload.batch", "needs values"]),
        ("batch", {"dist": "constant", "min": 2}, ["workload.batch", "needs value"]),
        # Used to load, and fail in numpy at reset.
        ("prompt_tokens", {"dist": "uniform", "low": 4096, "high": 1024},
         ["workload.prompt_tokens", "low <= high"]),
    ],
)
def test_a_bad_distribution_names_the_field(field: str, spec: dict[str, Any],
                                            fragments: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        scenario_from_dict({"workload": {field: spec}}, "test")
    for fragment in fragments:
        assert fragment in str(info.value)


def test_each_dist_draws_with_its_own_parameters() -> None:
    w = scenario_from_dict({"workload": {
        "batch": {"dist": "choice", "values": [4, 8], "weights": [1, 3]},
        "prompt_tokens": {"dist": "normal", "mean": 5000, "std": 800, "max": 8192},
        "output_tokens": {"dist": "uniform", "low": 100, "high": 200},
    }}, "test").workload
    assert (w.batch.values, w.prompt_tokens.mean, w.prompt_tokens.std, w.output_tokens.high) == (
        (4.0, 8.0), 5000.0, 800.0, 200.0)



def _episode(workload: dict[str, Any], n: int = 20000, seed: int = 0, **top: Any) -> Any:
    """A synthetic episode of `n` tasks drawn from a scenario with this workload section."""
    from envs.workload import generate_episode

    scenario = scenario_from_dict({"workload": workload, **top}, "test")
    return generate_episode(scenario, np.random.default_rng(seed), n)


def test_each_dist_draws_from_its_documented_law() -> None:
    """Large samples of each dist match its parameters (choice weights, normal mean and std,
    lognormal median and sigma), sizes are rounded to the nearest integer, and the stage noise
    has median 1 and mean exp(sigma**2 / 2), as the env's docstring says."""
    episode = _episode({
        "batch": {"dist": "choice", "values": [4, 8], "weights": [1, 3]},
        "prompt_tokens": {"dist": "normal", "mean": 5000, "std": 800},
        "output_tokens": {"dist": "lognormal", "median": 160, "sigma": 0.6},
    }, noise=0.5)
    batch, prompt, output = (np.array([getattr(t, k) for t in episode.tasks])
                             for k in ("batch", "prompt_tokens", "output_tokens"))
    assert set(batch) == {4, 8} and np.mean(batch == 8) == pytest.approx(0.75, abs=0.02)
    assert np.mean(prompt) == pytest.approx(5000, abs=30)
    assert np.std(prompt) == pytest.approx(800, rel=0.03)
    assert np.median(output) == pytest.approx(160, rel=0.03)
    assert np.std(np.log(output)) == pytest.approx(0.6, rel=0.03)
    assert np.median(episode.noise) == pytest.approx(1.0, abs=0.02)
    assert np.mean(episode.noise) == pytest.approx(math.exp(0.5 ** 2 / 2), rel=0.02)
    # uniform on [10, 11]: rounding to the nearest size draws 10 and 11 about equally often
    sizes = np.array([t.batch for t in _episode({"batch": {"dist": "uniform", "low": 10,
                                                             "high": 11}}).tasks])
    assert set(sizes) == {10, 11} and np.mean(sizes == 11) == pytest.approx(0.5, abs=0.02)


def test_a_choice_without_weights_draws_each_value_equally_often() -> None:
    """`weights` is optional: a choice without them is uniform over its values (every choice
    test gave weights, so all-zero default weights, or none at all, went unnoticed)."""
    sizes = np.array([t.batch for t in _episode({"batch": {"dist": "choice",
                                                             "values": [2, 4, 8]}}).tasks])
    assert set(sizes) == {2, 4, 8}
    for value in (2, 4, 8):
        assert np.mean(sizes == value) == pytest.approx(1 / 3, abs=0.02)


def test_an_episode_has_three_noise_factors_a_task_and_none_without_noise() -> None:
    """Episode.noise is (n_tasks, 3), one factor per stage: positive with noise, exactly 1
    without."""
    noisy = _episode({}, n=50, noise=0.4).noise
    assert noisy.shape == (50, 3) and (noisy > 0).all() and not (noisy == 1.0).all()
    quiet = _episode({}, n=50, noise=0.0).noise
    assert quiet.shape == (50, 3) and (quiet == 1.0).all()


@pytest.mark.parametrize("field", ["batch", "prompt_tokens", "output_tokens"])
def test_a_size_below_one_from_a_scenario_built_in_code_is_refused(field: str) -> None:
    """The loaders refuse a size below 1, but a `Distribution` built in code is not checked:
    the episode refuses the tasks it would draw (they skip `Task`'s own checks), whichever
    of the three sizes it is."""
    from envs.scenario import Distribution
    from envs.workload import generate_episode

    base = load_scenario("article")
    zero = Distribution(dist="constant", value=0.0, min=0.0)
    scenario = dataclasses.replace(base, workload=dataclasses.replace(base.workload,
                                                                      **{field: zero}))
    with pytest.raises(ValueError, match="generated task sizes must be >= 1"):
        generate_episode(scenario, np.random.default_rng(0), 5)


@pytest.mark.parametrize("rate", [-0.1, 0.0], ids=["negative-arrivals", "infinite-gaps"])
def test_an_arrival_rate_from_a_scenario_built_in_code_that_gives_no_stream_is_refused(
        rate: float) -> None:
    """The loaders refuse a rate this low, but a `Workload` built in code is not checked: the
    episode refuses the arrivals such a rate draws (negative, or infinite) instead of handing the env
    tasks that arrive before the episode starts, or never."""
    from envs.workload import generate_episode

    base = load_scenario("article")
    scenario = dataclasses.replace(base, workload=dataclasses.replace(base.workload,
                                                                      arrival_rate=rate))
    with np.errstate(divide="ignore"), pytest.raises(ValueError, match="arrivals finite and >= 0"):
        generate_episode(scenario, np.random.default_rng(0), 5)


def test_arrival_gaps_scale_with_one_over_the_rate_and_bursts_multiply_it() -> None:
    """Poisson arrivals: on the same seed, doubling the rate halves every gap, and inside a
    burst (the first `length` tasks of each `period`) the rate is multiplied."""
    def gaps(**workload: Any) -> np.ndarray:
        return np.diff([t.arrival for t in _episode(workload, n=100).tasks])

    plain = gaps(arrival_rate=0.1)
    assert np.mean(plain) == pytest.approx(10.0, rel=0.3)
    assert np.allclose(gaps(arrival_rate=0.2), plain / 2, rtol=1e-12)
    burst = gaps(arrival_rate=0.1, burst={"period": 10, "length": 3, "rate_multiplier": 4.0})
    in_burst = np.arange(1, 100) % 10 < 3          # gap i leads to task i + 1
    assert np.allclose(burst, np.where(in_burst, plain / 4, plain), rtol=1e-12)


def test_domains_follow_zipf_and_the_precomputed_cache_holds_the_shifted_ranking() -> None:
    from envs.workload import domain_popularity, precomputed_domains

    scenario = scenario_from_dict({"workload": {"domains": 4, "zipf": 1.0},
                                   "cache": {"precomputed_size": 3, "train_shift": 2}}, "test")
    harmonic = 1 + 1 / 2 + 1 / 3 + 1 / 4
    assert np.allclose(domain_popularity(scenario.workload),
                       [1 / harmonic, 1 / 2 / harmonic, 1 / 3 / harmonic, 1 / 4 / harmonic])
    assert precomputed_domains(scenario) == (2, 3, 0)     # ranks 2, 3, 4 (mod 4) of training


HEADER_AND_ROWS = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                   "2023-11-16 18:15:46.0000000,300,40\n"
                   "2023-11-16 18:15:50.0000000,1200,30\n")


def test_relative_paths_in_a_scenario_resolve_against_its_folder(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "t.csv").write_text(HEADER_AND_ROWS, encoding="utf-8")
    server = (PRESET_DIR / "server.yaml").read_text(encoding="utf-8")
    (folder / "hw.yaml").write_text(server.replace("name: server", "name: my-server"),
                                    encoding="utf-8")
    (folder / "s.yaml").write_text("name: s\nhardware: hw.yaml\nepisode_tasks: 2\n"
                                   "workload: {trace: t.csv}\n", encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    monkeypatch.chdir(elsewhere)
    env = gym.make(f"envs:{V0}", scenario=str(folder / "s.yaml"))
    _, info = env.reset(seed=0)
    assert env.unwrapped.hardware.name == "my-server"
    assert env.unwrapped.scenario.workload.trace == str(folder / "t.csv")
    assert info["task"]["prompt_tokens"] == 300

    # Loaded by a relative path, the scenario still works after the working directory changes.
    monkeypatch.chdir(tmp_path)
    sc = load_scenario("configs/s.yaml")
    monkeypatch.chdir(elsewhere)
    gym.make(f"envs:{V0}", scenario=sc).reset(seed=0)


def test_preset_names_absolute_and_cwd_relative_paths_are_kept(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "configs"
    folder.mkdir()
    for name in ("server", "azure-code"):   # files named like presets do not shadow them
        (folder / name).write_text("not used", encoding="utf-8")
    (tmp_path / "cwd.csv").write_text(HEADER_AND_ROWS, encoding="utf-8")
    (folder / "a.yaml").write_text("hardware: server\nworkload: {trace: azure-code}\n",
                                   encoding="utf-8")
    (folder / "b.yaml").write_text(f"workload: {{trace: {tmp_path / 'cwd.csv'}}}\n",
                                   encoding="utf-8")
    (folder / "c.yaml").write_text("workload: {trace: cwd.csv}\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    a = load_scenario(folder / "a.yaml")
    assert (a.hardware, a.workload.trace) == ("server", "azure-code")
    assert load_scenario(folder / "b.yaml").workload.trace == str(tmp_path / "cwd.csv")
    # Not next to the YAML: left as written, so it still resolves against the working directory.
    assert load_scenario(folder / "c.yaml").workload.trace == "cwd.csv"


def test_a_preset_scenarios_paths_resolve_in_its_folder_whatever_files_the_cwd_holds(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # load_scenario took the working directory as a preset's folder when a file named like the
    # preset lay there, so the preset's `hardware: hw.yaml` named the cwd's hw.yaml.
    presets, cwd = tmp_path / "presets", tmp_path / "cwd"
    presets.mkdir()
    cwd.mkdir()
    (presets / "mine.yaml").write_text("hardware: hw.yaml\n", encoding="utf-8")
    for where in (presets, cwd):
        (where / "hw.yaml").write_text((PRESET_DIR / "server.yaml").read_text(encoding="utf-8"),
                                       encoding="utf-8")
    (cwd / "mine").write_text("name: other\n", encoding="utf-8")
    monkeypatch.setattr("envs.scenario.SCENARIO_DIR", presets)
    monkeypatch.chdir(cwd)
    assert load_scenario("mine").hardware == str(presets / "hw.yaml")
    assert load_scenario("./mine").name == "other"


def test_best_static_is_priced_with_the_tasks_its_devices_cannot_hold() -> None:
    """The search checked memory on the first calibration task only and priced the rest
    wherever the placement put them, free; the env fails them over and charges them."""
    from envs.reference import (
        CALIBRATION_SEED,
        CALIBRATION_TASKS,
        dispatch,
        mean_latency,
        memory_masks,
    )
    from envs.workload import generate_episode
    from inference.simulator import Simulator

    env = envs.InferenceAllocEnv("long-context")
    tasks = generate_episode(env.scenario, np.random.default_rng(CALIBRATION_SEED),
                             CALIBRATION_TASKS).tasks
    masks = memory_masks(env, tasks)
    npu = env.device_names.index("npu")
    fits = [m[2][npu] for m in masks]                   # decode on the NPU
    assert fits[0] and not all(fits)                    # the first task hid the others
    # the env's rule: a masked share moves to the least busy allowed device, and counts
    assert dispatch(((( 0, 1.0),), ((npu, 1.0),), ((npu, 1.0),)),
                    ((True,) * 3, (True, True, False), (False, True, True)),
                    [5.0, 1.0, 0.0]) == ((((0, 1.0),), ((1, 1.0),), ((npu, 1.0),)), 1)
    sim = Simulator(env.nominal_sim.hardware, env.model, env.sim.stages, env.sim.config)
    placement = (0, 1, npu)
    free = mean_latency(sim, tasks, placement)
    charged = mean_latency(sim, tasks, placement, masks, env.scenario.failed_dispatch_s)
    assert charged != free
    bad = sum(not f for f in fits)
    # each failed task pays at least the penalty on its own latency
    assert mean_latency(sim, tasks, placement, masks, 1e3) - charged >= \
        bad * (1e3 - env.scenario.failed_dispatch_s) / len(tasks) * 0.999


def test_best_static_weighs_the_failed_dispatch_penalty_the_scenario_sets() -> None:
    """The search charges each failed dispatch the scenario's `failed_dispatch_s`, as the env
    does: long documents at a rate the cluster keeps up with, where the NPU cannot hold some
    tasks' prefill or decode, and a 100 s penalty. Free failovers, the best static would put
    stages on the NPU and let its misfits move to the least busy device; charged, that
    placement loses to one every task fits. The search's choice is the argmin of
    `mean_latency` with the penalty, not without."""
    import dataclasses

    from envs.reference import (
        CALIBRATION_SEED,
        CALIBRATION_TASKS,
        all_placements,
        dispatch,
        mean_latency,
        memory_masks,
        search_best_static,
    )
    from envs.workload import generate_episode
    from inference.simulator import Simulator

    base = load_scenario("long-context")
    scenario = dataclasses.replace(
        base, failed_dispatch_s=100.0,
        workload=dataclasses.replace(base.workload, arrival_rate=0.01))
    env = envs.InferenceAllocEnv(scenario)
    calibration = dataclasses.replace(scenario, noise=0.0)
    tasks = generate_episode(calibration, np.random.default_rng(CALIBRATION_SEED),
                             CALIBRATION_TASKS).tasks
    masks = memory_masks(env, tasks)
    sim = Simulator(env.nominal_sim.hardware, env.model, env.sim.stages, env.sim.config)

    def argmin(penalty: float) -> tuple[int, ...]:
        return min(all_placements(env.n_devices),
                   key=lambda p: mean_latency(sim, tasks, p, masks, penalty))

    charged, free = argmin(scenario.failed_dispatch_s), argmin(0.0)
    assert charged != free                           # the penalty decides the choice here
    assert sum(dispatch(tuple(((d, 1.0),) for d in free), m, [0.0] * env.n_devices)[1]
               for m in masks) > 0                   # ... as the free choice fails over
    assert search_best_static(env) == charged


def test_mean_latency_is_the_streams_mean_on_a_fresh_cluster() -> None:
    """`mean_latency`'s own value, not only its order over placements: each task of the stream
    run in turn on a fresh cluster, summed and divided by the task count; with masks a failed
    share moves as `dispatch` moves it and pays the penalty given (none by default)."""
    from envs.reference import CALIBRATION_SEED, dispatch, mean_latency, memory_masks
    from envs.workload import generate_episode
    from inference.simulator import Simulator

    env = envs.InferenceAllocEnv("long-context")
    tasks = generate_episode(env.scenario, np.random.default_rng(CALIBRATION_SEED), 300).tasks
    masks = memory_masks(env, tasks)
    npu = env.device_names.index("npu")
    # 12 tasks, 4 of which decode cannot hold on the NPU
    keep = [i for i, m in enumerate(masks) if not m[2][npu]][:4] + list(range(8))
    keep = sorted(set(keep))
    assert 8 < len(keep) <= 12 and not all(masks[i][2][npu] for i in keep)
    tasks, masks = [tasks[i] for i in keep], [masks[i] for i in keep]
    placement = (0, 1, npu)
    shares = ((((0, 1.0),), ((1, 1.0),), ((npu, 1.0),)))

    def by_hand(masked: bool, penalty: float) -> float:
        sim = Simulator(env.nominal_sim.hardware, env.model, env.sim.stages, env.sim.config)
        latencies = []
        for task, mask in zip(tasks, masks, strict=True):
            run, failed = dispatch(shares, mask, sim.state.busy_until) if masked else (shares, 0)
            latencies.append(sim.run(task, run, extra_overhead=failed * penalty).latency)
        return sum(latencies) / len(latencies)

    sim = Simulator(env.nominal_sim.hardware, env.model, env.sim.stages, env.sim.config)
    sim.run(tasks[0], shares)              # a busy cluster: the mean starts from a fresh one
    assert mean_latency(sim, tasks, placement) == pytest.approx(by_hand(False, 0.0), rel=1e-12)
    assert mean_latency(sim, tasks, placement, masks) == pytest.approx(by_hand(True, 0.0),
                                                                       rel=1e-12)
    assert mean_latency(sim, tasks, placement, masks, 7.0) == pytest.approx(by_hand(True, 7.0),
                                                                            rel=1e-12)
    assert by_hand(True, 7.0) > by_hand(True, 0.0)
    assert mean_latency(sim, [], placement) == 0.0


def test_best_static_is_searched_once_whatever_the_episode_length_or_noise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The search runs on its own noiseless calibration tasks, so an env that differs only in
    `episode_tasks` or `noise` reuses it (train.py's training and held-out envs searched twice)."""
    from envs import reference

    monkeypatch.setattr(reference, "_BEST_STATIC", {})
    searches = []
    real = reference.mean_latency
    monkeypatch.setattr(reference, "mean_latency",
                        lambda *args, **kwargs: searches.append(1) or real(*args, **kwargs))
    first = envs.InferenceAllocEnv("edge").planner.best_static
    assert len(searches) == 27
    for kwargs in ({"episode_tasks": 1000}, {"noise": 0.3}, {"episode_tasks": 7, "noise": 0.0}):
        assert envs.InferenceAllocEnv("edge", **kwargs).planner.best_static == first
    assert len(searches) == 27
    assert envs.InferenceAllocEnv("edge", variant="glm-5.3-flash").planner.best_static
    assert len(searches) == 54      # another pipeline is searched on its own


def test_the_best_static_memo_keeps_the_most_recently_used_configurations(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The memo kept every configuration searched (~3.4 kB each) for the whole process; it
    keeps the most recently used, and one it forgot is searched again to the same answer."""
    from envs import reference

    monkeypatch.setattr(reference, "_BEST_STATIC", {})
    monkeypatch.setattr(reference, "BEST_STATIC_MEMO", 2)
    searches = []
    real = reference.mean_latency
    monkeypatch.setattr(reference, "mean_latency",
                        lambda *args, **kwargs: searches.append(1) or real(*args, **kwargs))
    configs = [{}, {"variant": "glm-5.3-flash"}, {"scenario": "edge"}]
    first = [envs.InferenceAllocEnv(**kw).planner.best_static for kw in configs[:2]]
    assert envs.InferenceAllocEnv(**configs[0]).planner.best_static == first[0]   # used again
    searched = len(searches)
    assert envs.InferenceAllocEnv(**configs[2]).planner.best_static   # forgets the flash one
    assert len(reference._BEST_STATIC) == 2 and len(searches) > searched
    searched = len(searches)
    assert envs.InferenceAllocEnv(**configs[0]).planner.best_static == first[0]
    assert len(searches) == searched                            # still remembered
    assert envs.InferenceAllocEnv(**configs[1]).planner.best_static == first[1]
    assert len(searches) > searched and len(reference._BEST_STATIC) == 2


def test_a_scenario_without_sections_takes_the_dataclass_defaults() -> None:
    """scenario_from_dict's fallbacks are the dataclasses' own defaults, not a second copy."""
    from envs.scenario import CacheSpec, Scenario, SimulatorSpec, Workload

    sc = scenario_from_dict({"workload": {"burst": {}}}, "x")
    assert sc.workload == dataclasses.replace(Workload(), burst=Burst())
    assert (sc.cache, sc.simulator) == (CacheSpec(), SimulatorSpec())
    assert scenario_from_dict({}, "empty") == Scenario(name="empty", source="empty")


def test_best_static_is_searched_again_when_the_trace_or_hardware_file_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The process memo keys the search by what it reads: a trace CSV rewritten in the same
    process (heavier requests: another static placement) or a
    hardware file edited under the same name is searched again, not answered from the memo."""
    from envs import reference

    monkeypatch.setattr(reference, "_BEST_STATIC", {})
    trace = tmp_path / "t.csv"

    def write(context: int, generated: int) -> None:
        rows = [f"2023-11-16 18:17:{i // 10:02d}.{i % 10}000000,{context},{generated}"
                for i in range(200)]
        trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")

    write(100, 4)
    light = envs.InferenceAllocEnv(trace=str(trace)).planner.best_static
    write(30000, 1500)
    heavy = envs.InferenceAllocEnv(trace=str(trace)).planner.best_static
    monkeypatch.setattr(reference, "_BEST_STATIC", {})
    assert heavy == envs.InferenceAllocEnv(trace=str(trace)).planner.best_static != light

    hw = tmp_path / "hw.yaml"
    server = (PRESET_DIR / "server.yaml").read_text(encoding="utf-8")
    hw.write_text(server, encoding="utf-8")
    assert 1 in envs.InferenceAllocEnv(hardware=str(hw)).planner.best_static   # the gpu
    slow_gpu = server.replace("peak_flops: 3.12e14", "peak_flops: 3.12e11") \
        .replace("mem_bandwidth: 2.039e12", "mem_bandwidth: 2.039e9")
    assert slow_gpu != server
    hw.write_text(slow_gpu, encoding="utf-8")
    assert 1 not in envs.InferenceAllocEnv(hardware=str(hw)).planner.best_static


@pytest.mark.parametrize("kwargs, what", [
    ({"scenario": "x" * 300}, "scenario"), ({"scenario": "x" * 252}, "scenario"),
    ({"hardware": "x" * 300 + ".yaml"}, "hardware"), ({"hardware": "x" * 252}, "hardware"),
    ({"trace": "x" * 300}, "trace"), ({"trace": "a\0b.csv"}, "trace"),
    ({"scenario": "a\0b.yaml"}, "scenario"),
])
def test_a_name_no_file_can_have_is_one_clear_error(kwargs: dict[str, Any], what: str) -> None:
    # pathlib's is_file/exists raise for a name the file system refuses: a 300-character
    # scenario, hardware file or trace was an OSError traceback ("File name too long"), and
    # 252 characters (a preset's 257 with .yaml) too; a NUL byte a bare "embedded null byte".
    with pytest.raises(ValueError, match=f"^{what} '.*(neither a |NUL byte)"):
        gym.make("envs:InferenceAlloc-v0", **kwargs).reset(seed=0)


def test_a_scenario_naming_hardware_no_file_can_have_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    for hardware in ("x" * 300, "x" * 300 + ".yaml", "x" * 252):
        path.write_text(f"hardware: {hardware}\n", encoding="utf-8")
        with pytest.raises(ValueError, match=r"scenario field hardware 'x+\.\.\.\[\d+ characters elided\]\.\.\.x+(\.yaml)?' .* "
                           "File name too long"):
            load_scenario(str(path))
    path.write_text("workload: {trace: " + "x" * 300 + ".csv}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"^.*s\.yaml: scenario field workload\.trace: trace "
                       r"'x+\.\.\.\[\d+ characters elided\]\.\.\.x+\.csv' .* File name too long"):
        gym.make("envs:InferenceAlloc-v0", scenario=str(path)).reset(seed=0)


@pytest.mark.parametrize("field, text", [
    ("simulator.prefetch_depth", "simulator: {prefetch_depth: 1.0e+300}"),
    ("workload.burst.period", "workload: {burst: {period: 1.0e+300}}"),
])
def test_a_count_past_any_episode_is_refused_naming_its_field(field: str, text: str,
                                                               tmp_path: Path) -> None:
    # both were taken, and reset() failed with a bare OverflowError ("Python int too large to
    # convert to C ssize_t" from the prefetch deque, "... to C long" from numpy's modulo)
    path = tmp_path / "s.yaml"
    path.write_text(text + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"scenario field {field} must be <= 1e\\+06"):
        gym.make("envs:InferenceAlloc-v0", scenario=str(path)).reset(seed=0)


# --- a scenario given as an object survives the env spec's JSON ----------------------------------

def _trajectory(env: gym.Env, seed: int, steps: int) -> list[Any]:
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    out: list[Any] = [obs]
    for _ in range(steps):
        obs, reward, _, _, info = env.step(env.action_space.sample())
        out += [obs, reward, info["latency"]]
    return out


@pytest.mark.parametrize("env_id", [V0, SPLIT])
def test_a_scenario_object_survives_the_env_specs_json(env_id: str) -> None:
    # EnvSpec.to_json wrote the Scenario as dataclasses.asdict, and make() from the spec
    # from_json gave back refused that mapping ("scenario must be a preset name ...").
    bursty = load_scenario("bursty")
    # the faults preset's faults moved into the 12 tasks (at 60 and 100 they are refused)
    faults = tuple(dataclasses.replace(f, start_task=f.start_task // 20, end_task=f.end_task // 15)
                   for f in load_scenario("faults").faults)
    sc = dataclasses.replace(
        load_scenario("faults"), workload=bursty.workload, episode_tasks=12, faults=faults,
        variant={"load": "adaptive", "prefill": "window", "decode": "prefetched"},
        hardware=str(PRESET_DIR / "server.yaml"))
    assert load_scenario(sc.to_dict()) == sc and load_scenario(bursty.to_dict()) == bursty
    env = gym.make(env_id, scenario=sc, hardware=PRESET_DIR / "server.yaml", noise=0.2)
    spec = gym.envs.registration.EnvSpec.from_json(env.spec.to_json())
    again = gym.make(spec)
    assert again.unwrapped.scenario == env.unwrapped.scenario
    assert again.unwrapped.scenario.faults == sc.faults and again.unwrapped.scenario.source == sc.source
    first, second = _trajectory(env, 5, 12), _trajectory(again, 5, 12)
    assert len(first) == len(second) == 37
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


def test_hardware_given_as_an_object_too_small_for_the_weights_is_named_by_its_name() -> None:
    """The refusal printed the Hardware's repr, about 2 KB, for an object or its mapping."""
    from inference.hardware import hardware_to_dict

    server = load_hardware("server")
    small = dataclasses.replace(server, name="tiny-box", devices=tuple(
        dataclasses.replace(d, memory=1e9) for d in server.devices))
    for given in (small, hardware_to_dict(small)):
        with pytest.raises(ValueError, match=r"^hardware 'tiny-box' \(an object\): no device "
                                             r"can hold the weights of model 'glm-9b'") as caught:
            gym.make(f"envs:{V0}", hardware=given)
        assert len(str(caught.value)) < 300


@pytest.mark.parametrize("env_id", [V0, SPLIT])
def test_a_hardware_object_survives_the_env_specs_json(env_id: str) -> None:
    # to_json failed on a Hardware ("keys must be str, int, float, bool or None"): its links
    # are keyed by pairs. The spec now holds the mapping of its YAML schema, read back as such.
    hardware = load_hardware("server").with_device("npu", setup_s=1.5, peak_flops=3.5e14)
    env = gym.make(env_id, hardware=hardware, episode_tasks=12)
    again = gym.make(gym.envs.registration.EnvSpec.from_json(env.spec.to_json()))
    assert again.unwrapped.hardware == hardware
    first, second = _trajectory(env, 5, 12), _trajectory(again, 5, 12)
    assert len(first) == len(second) == 37
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"^hardware <hardware mapping>: devices must be a "
                                         r"non-empty list"):
        gym.make(env_id, hardware={"name": "x", "disk_bandwidth": 1e9, "devices": []})


def test_a_mapping_that_yaml_safe_load_read_a_number_of_as_text_says_how_to_read_it(
        tmp_path: Path) -> None:
    """PyYAML's own safe_load reads `peak_flops: 2.29e14`, as docs/WORKLOADS.md writes numbers, as the
    text '2.29e14' (YAML 1.1 floats need a dot and a signed exponent), and the mapping was
    refused as "must be a number" with no word on why: the refusal now says how to read it.
    Text that is no number, and a file that quotes one on purpose, are refused as before."""
    import yaml

    hint = ("(PyYAML's yaml.safe_load reads 2.29e14, a number with no dot or no exponent sign, "
            "as text: pass the file's path instead, or load the file with "
            "inference.yamlio.safe_load)")
    raw = yaml.safe_load((PRESET_DIR / "server.yaml").read_text(encoding="utf-8"))
    raw["devices"][0]["peak_flops"] = "2.29e14"
    with pytest.raises(ValueError) as caught:
        gym.make(f"envs:{V0}", hardware=raw)
    assert str(caught.value) == (f"hardware <hardware mapping>: devices[{raw['devices'][0]['name']}]"
                                 f".peak_flops must be a number, got '2.29e14' {hint}")
    scenario = yaml.safe_load((SCENARIO_DIR / "article.yaml").read_text(encoding="utf-8"))
    scenario["workload"]["arrival_rate"] = "2.29e14"
    with pytest.raises(ValueError) as caught:
        gym.make(f"envs:{V0}", scenario=scenario)
    assert str(caught.value).endswith(f"arrival_rate must be a finite number, got '2.29e14' {hint}")
    raw["devices"][0]["peak_flops"] = "fast"
    with pytest.raises(ValueError, match=r"must be a number, got 'fast'$"):
        gym.make(f"envs:{V0}", hardware=raw)
    raw["devices"][0]["peak_flops"] = 1.0
    quoted = yaml.safe_dump(raw).replace("peak_flops: 1.0", "peak_flops: '2.29e14'", 1)
    (tmp_path / "quoted.yaml").write_text(quoted, encoding="utf-8")
    with pytest.raises(ValueError, match=r"must be a number, got '2.29e14'$"):
        gym.make(f"envs:{V0}", hardware=str(tmp_path / "quoted.yaml"))


def _edited_edge() -> Any:
    """The edge preset with its gpu's memory and its cpu-gpu link changed: figures no preset
    holds, so an env that read `edge` back instead would step otherwise."""
    edge = load_hardware("edge").with_device("gpu", memory=20_000_000_000)
    cpu, gpu = edge.device_id("cpu"), edge.device_id("gpu")
    link = dataclasses.replace(edge.links[(cpu, gpu)], bandwidth=3e9)
    return dataclasses.replace(edge, links={**edge.links, (cpu, gpu): link, (gpu, cpu): link})


@pytest.mark.parametrize("env_id", [V0, SPLIT])
def test_a_scenario_holding_a_hardware_writes_plain_data_that_makes_the_same_env(
        env_id: str) -> None:
    # The env put a `hardware=` Hardware (or its mapping) in its scenario's str-typed field,
    # and to_dict() kept the object: json.dumps failed ("keys must be str ... not tuple"),
    # and `scenario=` that mapping was refused ("hardware must be a string").
    import json
    hardware = _edited_edge()
    for given in (hardware, hardware_to_dict(hardware)):
        env = gym.make(env_id, hardware=given, episode_tasks=15)
        written = json.loads(json.dumps(env.unwrapped.scenario.to_dict()))
        assert written["hardware"] == hardware_to_dict(hardware)
        again = gym.make(env_id, scenario=written)
        assert again.unwrapped.hardware == hardware
        assert again.unwrapped.scenario == env.unwrapped.scenario
        first, second = _trajectory(env, 3, 12), _trajectory(again, 3, 12)
        assert len(first) == len(second) == 37
        for a, b in zip(first, second, strict=True):
            np.testing.assert_array_equal(a, b)
        # the Scenario object itself, given back as `scenario=`, makes the same env too
        assert gym.make(env_id, scenario=env.unwrapped.scenario).unwrapped.hardware == hardware


def test_a_scenario_yaml_may_hold_its_hardware_inline(tmp_path: Path) -> None:
    import yaml

    from agents.files import write_text
    hardware = _edited_edge()
    sc = dataclasses.replace(load_scenario("article"), hardware=hardware, episode_tasks=15)
    written = sc.to_dict()     # its source key as well: a file's own path is its source
    path = write_text(tmp_path / "inline.yaml", yaml.safe_dump(written, sort_keys=False))
    loaded = load_scenario(str(path))
    assert loaded.source == str(path)
    assert loaded.hardware == hardware
    assert dataclasses.replace(loaded, source="") == dataclasses.replace(sc, source="")
    env = gym.make(V0, scenario=str(path))
    assert env.unwrapped.hardware == hardware
    first = _trajectory(env, 4, 12)
    second = _trajectory(gym.make(V0, scenario=sc), 4, 12)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_scenarios_to_dict_dumped_to_yaml_loads_as_it_is(tmp_path: Path) -> None:
    """to_dict writes `source`, which a YAML file holding that mapping as it is refused as an
    unknown key; the file is its own source, so the key is read over (a string only)."""
    import yaml

    from agents.files import write_text
    sc = load_scenario("bursty")
    path = write_text(tmp_path / "dumped.yaml", yaml.safe_dump(sc.to_dict(), sort_keys=False))
    loaded = load_scenario(str(path))
    assert loaded.source == str(path) != sc.source
    assert dataclasses.replace(loaded, source=sc.source) == sc
    bad = write_text(tmp_path / "bad.yaml", yaml.safe_dump({**sc.to_dict(), "source": [1]}))
    with pytest.raises(ValueError, match=re.escape(
            f"{bad}: scenario field source (where Scenario.to_dict's scenario was read from) "
            f"must be a string")):
        load_scenario(str(bad))


@pytest.mark.parametrize(("edit", "message"), [
    (lambda hw: {**hw, "devices": []}, "devices must be a non-empty list"),
    (lambda hw: {**hw, "disk_bandwidth": -1}, "disk_bandwidth"),
    (lambda hw: {**hw, "links": hw["links"][1:]}, "no link between"),
    (lambda hw: {**hw, "gpus": 2}, "gpus"),
])
def test_a_bad_inline_hardware_is_one_error_naming_the_scenario_field(edit, message: str) -> None:
    raw = load_scenario("article").to_dict()
    del raw["source"]
    raw["hardware"] = edit(hardware_to_dict(load_hardware("edge")))
    with pytest.raises(ValueError) as caught:
        scenario_from_dict(raw, "my.yaml")
    text = str(caught.value)
    assert text.startswith("my.yaml: scenario field hardware (an inline mapping of the "
                           "hardware schema): ")
    assert message in text and "\n" not in text and "<inline hardware>" not in text
    with pytest.raises(ValueError, match=r"^<scenario mapping>: scenario field hardware \(an "
                                         r"inline mapping"):
        gym.make(V0, scenario=raw)


def test_a_scenario_object_holding_a_bad_hardware_is_refused_naming_its_field() -> None:
    bad = load_hardware("edge").with_device("gpu", memory=-1)
    sc = dataclasses.replace(load_scenario("article"), hardware=bad)
    with pytest.raises(ValueError, match=r"^Scenario 'article' \(an object\): scenario field "
                                         r"hardware: hardware 'edge' \(an object\): "
                                         r"devices\[gpu\]\.memory"):
        load_scenario(sc)


@pytest.mark.parametrize(("hardware", "named"), [
    ("edge", "hardware 'edge' lies"),                        # a name as given, as before
    (load_hardware("edge"), "hardware 'edge' (an object) lies"),   # not its 2 KB repr
])
def test_the_envs_latency_error_names_its_hardware(hardware: Any, named: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    env = envs.InferenceAllocEnv(hardware=hardware, episode_tasks=5)
    env.reset(seed=0)
    run = env.sim.run

    def infinite(*args: Any, **kwargs: Any) -> Any:
        result = run(*args, **kwargs)
        result.latency = math.inf
        return result

    monkeypatch.setattr(env.sim, "run", infinite)
    with pytest.raises(RuntimeError, match="simulated to a latency of inf") as caught:
        env.step(env.action_space.sample())
    assert named in str(caught.value) and len(str(caught.value)) < 400


def test_a_path_named_like_a_preset_stays_that_file_in_the_env_and_its_spec(tmp_path, monkeypatch):
    # str(Path("article")) is "article", the preset: a Path given to the env (hardware=) or
    # kept in its JSON spec (scenario=) turned into the packaged preset of that name, against
    # the rule that a Path is always a path. numpy arguments made to_json fail outright.
    (tmp_path / "article").write_text((SCENARIO_DIR / "bursty.yaml").read_text())
    (tmp_path / "server").write_text((PRESET_DIR / "edge.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    env = gym.make(V0, scenario=Path("article"), hardware=Path("server"),
                   episode_tasks=np.int64(9))
    assert env.unwrapped.scenario.name == "bursty" and env.unwrapped.hardware.name == "edge"
    again = gym.make(gym.envs.registration.EnvSpec.from_json(env.spec.to_json()))
    assert again.unwrapped.scenario == env.unwrapped.scenario
    assert again.unwrapped.hardware.name == "edge" and again.unwrapped.scenario.episode_tasks == 9
    # the bare names are still the presets
    assert gym.make(V0, scenario="article", hardware="server").unwrapped.hardware.name == "server"


@pytest.mark.parametrize("raw, message", [
    ({"noise": 7}, "scenario field noise must be <= 2"),
    ({"source": 3}, "scenario field source must be a string"),
    # the mapping dataclasses.asdict writes: every dist's parameters in each Distribution
    (dataclasses.asdict(load_scenario("article")), r"scenario field workload\.batch\.value is not a parameter"),
])
def test_a_mapping_that_is_no_scenario_is_one_clear_error(raw: dict[str, Any], message: str) -> None:
    for make in (load_scenario, lambda raw: gym.make(V0, scenario=raw)):
        with pytest.raises(ValueError, match=f"^<scenario mapping>: {message}") as err:
            make(raw)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("change, message", [
    ({"noise": -1}, "scenario field noise must be >= 0, got -1"),
    ({"failed_dispatch_s": -5}, "scenario field failed_dispatch_s must be >= 0, got -5"),
    ({"episode_tasks": 0}, "scenario field episode_tasks must be >= 1, got 0"),
    ({"workload": dataclasses.replace(load_scenario("article").workload, arrival_rate=-1)},
     r"scenario field workload\.arrival_rate must be >= 1e-06, got -1"),
])
def test_a_scenario_object_out_of_its_ranges_is_refused_as_its_mapping_is(
        change: dict[str, Any], message: str) -> None:
    """The README's way to vary a scenario, `dataclasses.replace` on `load_scenario`'s, skipped
    every check the YAML and the mapping get: noise -1 and failed_dispatch_s -5 (a reward for a
    masked pick) ran, episode_tasks 0 was an IndexError from reset, arrival_rate -1 "generated
    task sizes must be >= 1, domains >= 0, arrivals finite and >= 0"."""
    changed = dataclasses.replace(load_scenario("article"), **change)
    for make in (load_scenario, lambda sc: gym.make(V0, scenario=sc).reset(seed=0)):
        with pytest.raises(ValueError, match=f"^Scenario 'article' \\(an object\\): {message}"):
            make(changed)
    within = dataclasses.replace(load_scenario("article"), noise=0.1, episode_tasks=7)
    assert load_scenario(within) is within


ARTICLE = load_scenario("article")


def _workload(**change: Any) -> dict[str, Any]:
    return {"workload": dataclasses.replace(ARTICLE.workload, **change)}


# Each part of a Scenario with a value of a type its mapping cannot tell from a valid one (the
# loader reads `batch: 1` as a constant, 200.0 as 200): gym.make ran, and reset() or step()
# raised from inside (AttributeError "'int' object has no attribute 'dist'", numpy's TypeError
# on 200.0 tasks) or the simulator's SimConfig refused it naming no scenario field; an
# unknown dist was a KeyError from Distribution.to_dict.
@pytest.mark.parametrize("change, message", [
    ({"episode_tasks": 200.0}, "episode_tasks must be an integer, got 200.0"),
    ({"workload": None}, "workload must be a Workload, got None"),
    ({"faults": [Fault("gpu", "offline", 1, 3)]}, r"faults must be a tuple, got \[Fault\("),
    (_workload(batch=1), "workload.batch must be a Distribution, got 1"),
    (_workload(domains=64.0), "workload.domains must be an integer, got 64.0"),
    (_workload(burst={"period": 4, "length": 2}), "workload.burst must be a Burst, got {"),
    (_workload(burst=Burst(period=4.0, length=2)), "workload.burst.period must be an integer, got 4.0"),
    (_workload(prompt_tokens=Distribution(dist="poisson")),
     "workload.prompt_tokens.dist must be one of normal, lognormal, uniform, choice, constant, "
     "got 'poisson'"),
    (_workload(batch=Distribution(dist="choice", values=[1, 2])),
     r"workload.batch.values must be a tuple, got \[1, 2\]"),
    ({"cache": {"capacity": 4}}, "cache must be a CacheSpec, got {"),
    ({"cache": dataclasses.replace(ARTICLE.cache, capacity=12.0)},
     "cache.capacity must be an integer, got 12.0"),
    ({"simulator": dataclasses.replace(ARTICLE.simulator, prefetch_depth=1.0)},
     "simulator.prefetch_depth must be an integer, got 1.0"),
    ({"faults": ({"device": "gpu", "kind": "offline", "start_task": 1, "end_task": 3},)},
     r"faults\[0\] must be a Fault, got {"),
    ({"faults": (Fault("gpu", "offline", 1.0, 3),)}, r"faults\[0\].start_task must be an integer"),
], ids=lambda value: value if isinstance(value, str) else "")
@pytest.mark.parametrize("env_id", [V0, SPLIT, envs.MIX_ENV_ID])
def test_a_scenario_object_of_a_wrong_type_is_refused_when_the_env_is_made(
        env_id: str, change: dict[str, Any], message: str) -> None:
    changed = dataclasses.replace(ARTICLE, **change)
    scenario = ({"scenarios": [changed, "bursty"]} if env_id == envs.MIX_ENV_ID
                else {"scenario": changed})
    with pytest.raises(ValueError, match=f"^Scenario 'article' \\(an object\\): scenario field "
                                         f"{message}") as err:
        gym.make(env_id, **scenario)     # not reset(): it is refused as it comes in
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("env_id", [V0, SPLIT, envs.MIX_ENV_ID])
def test_a_hardware_object_with_a_mistake_is_refused_when_the_env_is_made(env_id: str) -> None:
    # a NaN memory ran: no device held the weights, and every placement failed over
    hardware = load_hardware("server").with_device("gpu", memory=math.nan)
    scenarios = {"scenarios": ["article", "bursty"]} if env_id == envs.MIX_ENV_ID else {}
    with pytest.raises(ValueError, match=r"^hardware 'server' \(an object\): devices\[gpu\]\.memory "
                                         r"must be a finite number > 0, got nan$"):
        gym.make(env_id, hardware=hardware, **scenarios)


@pytest.mark.parametrize("change, yaml_text", [
    (_workload(batch=Distribution(dist="poisson")), "workload: {batch: {dist: poisson}}"),
    (_workload(output_tokens=Distribution(dist=5)), "workload: {output_tokens: {dist: 5}}"),
])
def test_a_scenario_objects_mistake_is_the_error_its_yaml_gets(
        tmp_path: Path, change: dict[str, Any], yaml_text: str) -> None:
    """The object is read by the YAML's own checks: one message, but for where it came from
    (an unknown dist was a KeyError from Distribution.to_dict; values out of range were the
    YAML's errors already, test_a_scenario_object_out_of_its_ranges_is_refused_as_its_mapping_is)."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml_text + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as from_yaml:
        load_scenario(path)
    with pytest.raises(ValueError) as from_object:
        gym.make(V0, scenario=dataclasses.replace(ARTICLE, **change))
    assert str(from_yaml.value).removeprefix(f"{path}: ") \
        == str(from_object.value).removeprefix("Scenario 'article' (an object): ")


def test_a_valid_scenario_object_passes_as_it_is() -> None:
    # a float field given an int or numpy's number, an int field numpy's integer, a variant
    # given as another mapping, a Distribution with parameters of another dist it never reads
    from types import MappingProxyType
    sc = dataclasses.replace(
        ARTICLE, noise=np.float64(0.1), episode_tasks=np.int64(7), failed_dispatch_s=1,
        variant=MappingProxyType({"load": "direct", "prefill": "window", "decode": "sequential"}),
        workload=dataclasses.replace(ARTICLE.workload, arrival_rate=1,
                                     batch=Distribution(dist="constant", value=4, mean=-5.0)))
    assert load_scenario(sc) is sc
    env = gym.make(V0, scenario=sc)
    assert env.unwrapped.scenario is sc
    env.reset(seed=0)
    env.step(env.action_space.sample())


@pytest.mark.parametrize("text, field, problem", [
    ("hardware: mainframe\n", "hardware", "unknown hardware 'mainframe'"),
    ("hardware: nothere.yaml\n", "hardware", "hardware file nothere.yaml does not exist"),
    ("model: glm-999b\n", "model", "unknown model 'glm-999b'"),
    ("variant: glm-6\n", "variant", "unknown variant 'glm-6'"),
    ("variant: {load: cached, prefill: nope, decode: hierarchical}\n", "variant",
     "unknown prefill implementation 'nope'"),
    ("workload: {trace: azure-cod}\n", "workload.trace", "unknown trace 'azure-cod'"),
    ("faults: [{device: tpu, kind: offline, start_task: 0, end_task: 5}]\n", "faults[0].device",
     "unknown device 'tpu'"),
])
@pytest.mark.parametrize("env_id", [V0, SPLIT])
def test_a_name_in_a_scenario_file_that_names_nothing_is_refused_naming_the_file_and_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env_id: str, text: str, field: str,
        problem: str) -> None:
    # These names are resolved by the env, not by load_scenario: their errors named neither
    # the scenario nor the field ("unknown device 'tpu' in hardware 'server'"), so a user whose
    # own scenario file names the wrong hardware file or device could not tell where it was.
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "mine.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as info:
        gym.make(f"envs:{env_id}", scenario=str(path))
    assert str(info.value).startswith(f"{path}: scenario field {field}: {problem}")


def test_a_name_given_as_an_env_argument_is_refused_without_a_scenario_field() -> None:
    # the same lookups, when the name came from gym.make's arguments, name no scenario field
    for kwargs, problem in (({"hardware": "mainframe"}, "unknown hardware 'mainframe'"),
                            ({"variant": "glm-6"}, "unknown variant 'glm-6'"),
                            ({"trace": "azure-cod"}, "unknown trace 'azure-cod'")):
        with pytest.raises(ValueError) as info:
            gym.make(f"envs:{V0}", **kwargs)
        assert str(info.value).startswith(problem)


def test_best_static_is_searched_again_for_a_stage_implementation_registered_anew(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/EXTENDING.md's own implementation (`IMPLEMENTATIONS[stage][name] = cls`, its arguments in
    `COST_PARAMS[name]`), redefined or given other arguments in one process (a notebook cell
    run again): the memo keyed the search by the implementation's name and answered with the
    first version's placement, where a fresh process searched the new one's."""
    from envs import reference
    from inference.stages.prefill import WindowAttention
    from inference.variants import COST_PARAMS, IMPLEMENTATIONS
    from inference.work import PREPROCESS

    def wide(branchy_by_default: bool) -> type:
        class Wide(WindowAttention):   # prefill as branchy byte-level work: the CPU's kind
            def __init__(self, window: int = 2048, branchy: bool = branchy_by_default) -> None:
                super().__init__(window=window)
                self.branchy = branchy

            def work(self, task, model):
                w = super().work(task, model)
                return w._replace(parts=tuple(p._replace(op=PREPROCESS) for p in w.parts)) \
                    if self.branchy else w
        return Wide

    monkeypatch.setattr(reference, "_BEST_STATIC", {})
    variant = {"load": "direct", "prefill": "wide", "decode": "sequential"}

    def searched(cls: type, params: dict) -> tuple[int, ...]:
        monkeypatch.setitem(IMPLEMENTATIONS["prefill"], "wide", cls)
        monkeypatch.setitem(COST_PARAMS, "wide", params)
        return envs.InferenceAllocEnv(variant=variant, episode_tasks=2).planner.best_static

    first = wide(False)
    for cls, params in ((wide(True), {}), (first, {"branchy": True})):
        monkeypatch.setattr(reference, "_BEST_STATIC", {})      # as a fresh process
        alone = searched(cls, params)
        monkeypatch.setattr(reference, "_BEST_STATIC", {})
        assert searched(first, {}) != alone                     # another placement ...
        assert searched(cls, params) == alone                   # ... not the memo's first one
