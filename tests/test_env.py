"""Tests for the Gymnasium adapter: API conformance, determinism, validation, info and masks."""

from __future__ import annotations

import inspect
import math
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import hypothesis
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env as gym_check_env
from hypothesis import strategies as st
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import envs
from envs.inference_alloc import UnreachedFaultWarning
from envs.inference_alloc_split import sequences_of
from envs.observation import device_entries
from envs.scenario import MAX_EPISODE_TASKS, MAX_NOISE, MIN_RATE

IDS = envs.ENV_IDS
V0, SPLIT = IDS
SCENARIOS = envs.scenario_names()
# A test that runs `faults` for its first fault only (pyproject.toml makes the warning an error)
PAST_FAULTS = pytest.mark.filterwarnings("ignore::envs.inference_alloc.UnreachedFaultWarning")


def make(env_id: str = V0, **kwargs: Any) -> gym.Env:
    return gym.make(f"envs:{env_id}", **kwargs)


def one_hot_split(placement: tuple[int, int, int], n_devices: int = 3) -> np.ndarray:
    """A Split action that puts each stage wholly on one device."""
    action = -np.ones((3, n_devices), dtype=np.float32)
    for stage, dev in enumerate(placement):
        action[stage, dev] = 1.0
    return action.reshape(-1)


def big_batch_scenario(tmp_path: Path, failed_dispatch_s: float = 0.75) -> Path:
    """Batches the NPU (32 GB, ~19 GB of weights) cannot hold for prefill or decode."""
    path = tmp_path / "big.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: big
        hardware: server
        variant: glm-5.3-flash
        episode_tasks: 6
        failed_dispatch_s: {failed_dispatch_s}
        workload:
          arrival_rate: 0.05
          batch: 32
          prompt_tokens: 8192
          output_tokens: 4096
        """), encoding="utf-8")
    return path


def server_with(tmp_path: Path, field: str, **values: Any) -> Path:
    """The server preset with other values of one device `field`, by device name (the devices
    not named keep the preset's)."""
    import yaml

    from inference.hardware import PRESET_DIR

    raw = yaml.safe_load((PRESET_DIR / "server.yaml").read_text())
    for device in raw["devices"]:
        device[field] = values.pop(device["name"], device[field])
    assert not values, f"no such device: {values}"
    path = tmp_path / f"server-{field}.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def server_with_memory(tmp_path: Path, **memory: float) -> Path:
    """The server preset with other device memories, by device name (each device keeps its own
    memory domain, as in the preset)."""
    return server_with(tmp_path, "memory", **memory)


# --- API conformance ---------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("env_id", IDS)
def test_env_checkers_pass_without_warnings(env_id: str, scenario: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # the faults preset's faults start past these 12 tasks: the env says so, as it should
        warnings.simplefilter("ignore", UnreachedFaultWarning)
        gym_check_env(make(env_id, scenario=scenario, episode_tasks=12).unwrapped)
        sb3_check_env(make(env_id, scenario=scenario, episode_tasks=12))
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []


@pytest.mark.parametrize("env_id", IDS)
def test_make_works_in_a_fresh_process_without_importing_envs(env_id: str, tmp_path: Path) -> None:
    code = textwrap.dedent(f"""\
        import sys
        import gymnasium as gym
        assert "envs" not in sys.modules
        env = gym.make("envs:{env_id}", episode_tasks=3)
        obs, _ = env.reset(seed=0)
        env.action_space.seed(0)
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        print(type(env.unwrapped).__name__, obs.shape, reward < 0, info["latency"] > 0)
        """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    expected = {V0: "InferenceAllocEnv", SPLIT: "InferenceAllocSplitEnv"}[env_id]
    assert proc.stdout.split() == [expected, "(26,)", "True", "True"]


# --- determinism -------------------------------------------------------------------------------


def rollout(env_id: str, seed: int, n_tasks: int = 40, **kwargs: Any) -> list[tuple[Any, ...]]:
    """A whole episode with an action sequence fixed by its own seed (independent of `seed`)."""
    env = make(env_id, episode_tasks=n_tasks, **kwargs)
    env.action_space.seed(1234)
    actions = [env.action_space.sample() for _ in range(n_tasks)]
    obs, info = env.reset(seed=seed)
    out: list[tuple[Any, ...]] = [(obs, info)]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs, reward, terminated, truncated, info))
    assert truncated and not terminated
    return out


def assert_identical(a: Any, b: Any, where: str = "") -> None:
    """Recursive equality; floats must match exactly (NaN only matches NaN)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_identical(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_identical(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, where
        assert np.array_equal(a, b, equal_nan=True), where
    elif isinstance(a, (float, np.floating)):
        assert isinstance(b, (float, np.floating)), where
        assert a == b or (math.isnan(a) and math.isnan(b)), f"{where}: {a!r} != {b!r}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize("env_id", IDS)
def test_same_seed_gives_identical_episodes(env_id: str) -> None:
    first = rollout(env_id, seed=7, reference=True)
    second = rollout(env_id, seed=7, reference=True)
    assert_identical(first, second, "episode")
    other = rollout(env_id, seed=8, reference=True)
    assert not np.array_equal(np.stack([s[0] for s in first]), np.stack([s[0] for s in other]))
    assert [s[1] for s in first[1:]] != [s[1] for s in other[1:]]


@pytest.mark.parametrize("env_id", IDS)
def test_same_seed_gives_identical_episodes_whatever_the_string_hash_seed(
        env_id: str, tmp_path: Path) -> None:
    """Python salts str hashes per process: a set of names iterated on the way to a decision,
    an observation or `info` would give one seed two trajectories in two processes, which
    the in-process test above cannot see."""
    code = textwrap.dedent(f"""\
        import hashlib
        import gymnasium as gym
        import envs
        digest = hashlib.sha256()
        for scenario in ("article", "faults", "bursty", "edge"):
            env = gym.make("{env_id}", scenario=scenario, episode_tasks=40)
            obs, info = env.reset(seed=5)
            env.action_space.seed(5)
            digest.update(obs.tobytes() + repr(info).encode())
            for _ in range(40):
                obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
                digest.update(obs.tobytes() + repr((reward, terminated, truncated, info)).encode())
        print(digest.hexdigest())
        """)
    digests = set()
    for hash_seed in ("0", "1"):
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120,
                              env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert proc.returncode == 0, proc.stderr
        digests.add(proc.stdout.strip())
    assert len(digests) == 1, digests


# --- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(("env_id", "action", "match"), [
    (V0, np.array([0, 0, 3]), "device ids in 0..2"),
    (V0, np.array([0, -1, 0]), "device ids in 0..2"),
    (V0, np.array([0, 1]), "shape"),
    (V0, np.zeros((3, 3), dtype=np.int64), "shape"),
    (V0, np.array([0.0, np.nan, 1.0]), "integer device ids"),
    (V0, np.array([0.0, 1.5, 1.0]), "integer device ids"),     # not device 1
    (V0, [1e20, 1, 2], "device ids in 0..2"),   # past int64: numpy warned of its cast first
    # bools used to run as device ids 0/1; strings failed with numpy's own message
    (V0, np.array([True, False, True]), "action must hold integer device ids, not booleans"),
    (V0, [True, False, True], "action must hold integer device ids, not booleans"),
    (V0, [True, 0, 1], "action must hold integer device ids, not booleans"),   # numpy: ints
    (SPLIT, [0.5] * 8 + [True], r"action entries must be numbers in \[-1, 1\], not booleans"),
    (SPLIT, [[0.5, 0.5, 0.5]] * 2 + [[0.5, np.True_, 0.5]],
     r"action entries must be numbers in \[-1, 1\], not booleans"),
    (V0, np.array(["1", "0", "2"]), "action must hold integer device ids, not dtype .U1"),
    (SPLIT, np.array(["a"] * 9), r"action entries must be numbers in \[-1, 1\], not dtype .U1"),
    (SPLIT, ["0.5"] * 9, r"action entries must be numbers in \[-1, 1\], not dtype .U3"),
    (SPLIT, np.ones(9, dtype=bool), r"action entries must be numbers in \[-1, 1\], not booleans"),
    (SPLIT, np.zeros(8, dtype=np.float32), "shape"),
    # the (3, D) matrix the flat action is read as: outside the Box (its contains() says so
    # too), and SB3 sends the flat shape; it used to run, while the error named only (9,)
    (SPLIT, np.zeros((3, 3), dtype=np.float32), r"action must have shape \(9,\) \(stage-major\), "
                                                 r"got \(3, 3\)"),
    (SPLIT, np.array([0, 0, 0, 0, np.nan, 0, 0, 0, 0], dtype=np.float32), "finite"),
    (SPLIT, np.array([0, 0, 0, 0, 0, 0, 0, 0, 1.5], dtype=np.float32), r"\[-1, 1\]"),
    (SPLIT, np.array([-1.001, 0, 0, 0, 0, 0, 0, 0, 0]), r"\[-1, 1\]"),
])
def test_bad_action_is_a_value_error(env_id: str, action: Any, match: str) -> None:
    env = make(env_id, episode_tasks=5)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=match), warnings.catch_warnings():
        warnings.simplefilter("error")   # one clear error, no numpy warning before it
        env.step(action)
    # the failed call changed nothing: a valid step still works and places the first task
    obs, reward, _, _, info = env.step(env.action_space.sample())
    assert math.isfinite(reward) and info["task"]["arrival"] == 0.0


@pytest.mark.parametrize("action", [np.array([2.0, 0.0, 1.0]), [2.0, 0.0, 1.0],
                                    np.array([2, 0, 1], dtype=np.uint8)])
def test_whole_numbers_of_any_dtype_are_device_ids(action: Any) -> None:
    """An action off the int64 fast path (floats that are whole numbers, other int dtypes)
    places the task as the same device ids given as integers do."""
    steps = []
    for given in (action, np.array([2, 0, 1])):
        env = make(V0, episode_tasks=3)
        env.reset(seed=0)
        steps.append(env.step(given))
    assert steps[0][4]["placement"] == ("npu", "cpu", "gpu")
    assert_identical(steps[0], steps[1], "step")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"scenario": "no-such-scenario"}, "unknown scenario 'no-such-scenario'"),
    ({"hardware": "tpu-pod"}, "unknown hardware 'tpu-pod'"),
    ({"variant": "glm-6"}, "unknown variant 'glm-6'"),
    ({"variant": {"load": "direct", "prefill": "window"}}, "variant mapping"),
    ({"reward": "throughput"}, "reward must be one of latency, relative, normalised"),
    ({"reward": "normalized"}, r"got 'normalized' \(did you mean 'normalised'\?\)$"),
    ({"episode_tasks": 0}, r"episode_tasks must be an integer in 1\.\.1000000"),
    ({"episode_tasks": 2.5}, "episode_tasks must be an integer"),
    ({"episode_tasks": 10**12}, "episode_tasks must be an integer"),   # was a 7 TiB MemoryError
    ({"noise": -0.1}, r"noise must be a number in \[0, 2.0\]"),
    ({"noise": float("nan")}, r"noise must be a number in \[0, 2.0\]"),
    ({"noise": 1000.0}, r"noise must be a number in \[0, 2.0\]"),  # latency inf, obs off-space
    ({"reference": "no"}, "reference must be True or False"),      # a string counted as True
    ({"price_static": "yes"}, "price_static must be True or False, got .yes."),
    # 1 and 1.0 passed as equal to True (and 0 to False), where a flag is meant
    ({"reference": 1}, r"^reference must be True or False, got 1$"),
    ({"reference": 0}, r"^reference must be True or False, got 0$"),
    ({"price_static": 1.0}, r"^price_static must be True or False, got 1\.0$"),
    ({"price_static": np.int64(0)}, r"^price_static must be True or False, got "),
    ({"trace": "no-such-trace"}, "unknown trace 'no-such-trace'"),
    ({"trace": Path("/no/such.csv")}, "trace file not found"),     # a Path is a path
    ({"trace": ""}, "unknown trace ''; known names"),   # was: "trace file . is a folder"
    ({"trace": 3}, "trace must be a trace name or a CSV path, got 3"),
    ({"scenario": None}, "scenario must be a preset name .* or a path to a YAML file, got None"),
    ({"scenario": "/"}, "scenario file / is a folder, not a YAML file"),
    ({"hardware": ""}, "hardware must be a preset name"),
    ({"hardware": 3}, "hardware must be a preset name .* got 3"),   # was: os.fspath TypeError
    ({"hardware": b"server"}, "hardware must be a preset name"),
    ({"variant": {"load": {"a": 1}, "prefill": "dynamic", "decode": "hierarchical"}},
     "unknown load implementation"),                               # was: unhashable dict
    ({"variant": {1: "x", "load": "direct", "prefill": "dynamic", "decode": "hierarchical"}},
     "variant mapping needs exactly the stages"),                  # was: int < str TypeError
])
@pytest.mark.parametrize("env_id", IDS)
def test_bad_argument_is_a_value_error(env_id: str, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make(env_id, **kwargs)


@pytest.mark.parametrize("flag", [True, False, np.True_, np.False_])
def test_a_flag_takes_a_bool_numpys_too(flag: Any) -> None:
    env = envs.InferenceAllocEnv(reference=flag, price_static=flag)
    assert env.reference is bool(flag)


@pytest.mark.parametrize("kwargs", [
    {"episode_tasks": 1}, {"episode_tasks": MAX_EPISODE_TASKS}, {"noise": 0}, {"noise": MAX_NOISE},
    {"trace": "azure-conv", "trace_time_scale": MIN_RATE},
    {"trace": "azure-conv", "trace_time_scale": 1 / MIN_RATE},
])
def test_an_argument_at_an_end_of_its_range_is_taken(kwargs: dict[str, Any]) -> None:
    """The ranges the errors name are closed: each end is a valid argument."""
    env = envs.InferenceAllocEnv(**kwargs)
    for key, value in kwargs.items():
        if key != "trace":
            held = env.scenario.workload if key == "trace_time_scale" else env.scenario
            assert getattr(held, key) == value


def test_numpy_numbers_are_numbers() -> None:
    env = make(V0, noise=np.float32(0.1), episode_tasks=np.int64(3))
    assert env.unwrapped.scenario.noise == pytest.approx(0.1)
    assert env.unwrapped.scenario.episode_tasks == 3


@pytest.mark.parametrize("env_cls", [envs.InferenceAllocEnv, envs.InferenceAllocSplitEnv])
def test_unknown_render_mode_is_a_value_error(env_cls: type) -> None:
    # direct construction: gym.make would first warn about the mode itself. "human" is the
    # README's too, but only through gym.make (HumanRendering): the refusal says so, where it
    # listed None, 'ansi' and 'rgb_array' alone
    with pytest.raises(ValueError, match="render_mode must be None, 'ansi' or 'rgb_array'") as no:
        env_cls(render_mode="human")
    assert "'human' through gym.make(" in str(no.value), no.value


def test_malformed_trace_row_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,many,21\n"
        "2023-11-16 18:15:51.0000000,1200,30\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match=r"line 3\b.*ContextTokens.*'many'"):
        make(V0, trace=str(path))


def test_a_valid_trace_csv_replays(tmp_path: Path) -> None:
    path = tmp_path / "ok.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.0000000,300,40\n"
        "2023-11-16 18:15:46.1000000,900,20\n"      # same 0.5 s window: one batch of 2
        "2023-11-16 18:15:50.0000000,1200,30\n"
        "\n  \n",                                    # blank lines at the end are no rows
        encoding="utf-8",
    )
    env = make(V0, trace=str(path), episode_tasks=10)
    _, info = env.reset(seed=0)
    assert info["task"] | {"domain": 0} == {"batch": 2, "prompt_tokens": 900, "output_tokens": 40,
                                            "domain": 0, "arrival": 0.0}
    steps = 0
    truncated = False
    while not truncated:
        _, _, _, truncated, _ = env.step(env.action_space.sample())
        steps += 1
    assert steps == 2    # the trace ran out before episode_tasks


@pytest.mark.parametrize("env_id", IDS)
def test_step_before_reset_and_after_the_end_say_reset(env_id: str) -> None:
    raw = make(env_id, episode_tasks=2).unwrapped
    with pytest.raises(RuntimeError, match=r"call reset\(\) before step\(\)"):
        raw.step(raw.action_space.sample())
    with pytest.raises(RuntimeError, match=r"call reset\(\) before action_masks\(\)"):
        raw.action_masks()
    with pytest.raises(RuntimeError, match=r"call reset\(\) before stage_masks\(\)"):
        raw.stage_masks()
    wrapped = make(env_id, episode_tasks=2)
    with pytest.raises(ResetNeeded, match="reset"):
        wrapped.step(wrapped.action_space.sample())
    raw.reset(seed=0)
    raw.step(raw.action_space.sample())
    *_, truncated, _ = raw.step(raw.action_space.sample())
    assert truncated
    with pytest.raises(RuntimeError, match="reset"):
        raw.step(raw.action_space.sample())


@pytest.mark.parametrize("env_id", IDS)
def test_reset_refuses_options_it_would_ignore(env_id: str) -> None:
    env = make(env_id, episode_tasks=3)
    first, _ = env.reset(seed=0, options=None)
    assert np.array_equal(env.reset(seed=0, options={})[0], first)   # what vector envs pass
    for options in ({"episode_tasks": 10}, "fast"):
        with pytest.raises(ValueError, match="reset.. takes no options"):
            env.reset(seed=1, options=options)
    # the refused reset changed nothing: the episode of seed 0 goes on
    assert len([env.step(env.action_space.sample()) for _ in range(3)]) == 3


# --- observations and info ---------------------------------------------------------------------


@pytest.mark.parametrize(("env_id", "scenario"), [
    (V0, "article"), (V0, "faults"), (V0, "edge"), (V0, "long-context"),
    (SPLIT, "article"), (SPLIT, "bursty"),
])
def test_observation_and_info_over_an_episode(env_id: str, scenario: str) -> None:
    n_tasks = 130 if scenario == "faults" else 40   # the faults start at task 60
    env = make(env_id, scenario=scenario, episode_tasks=n_tasks, reference=True)
    env.action_space.seed(3)
    obs, info = env.reset(seed=11)
    space = env.observation_space
    devices = env.unwrapped.device_names
    assert space.shape == (26,) and space.dtype == np.float32
    assert obs.dtype == np.float32 and space.contains(obs)
    assert set(info["task"]) == {"batch", "prompt_tokens", "output_tokens", "domain", "arrival"}
    steps, truncated = 0, False
    def shown(obs: np.ndarray) -> tuple[int, int, int]:   # the task sizes an observation shows
        return round(obs[0] * 64), round(obs[1] * 32768), round(obs[2] * 2048)

    def sizes(task: dict[str, Any]) -> tuple[int, int, int]:
        return task["batch"], task["prompt_tokens"], task["output_tokens"]

    assert shown(obs) == sizes(info["task"])            # reset's info: the first task to place
    while not truncated:
        to_place = shown(obs)
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        steps += 1
        assert not terminated
        assert sizes(info["task"]) == to_place             # a step's info: the task it placed
        assert obs.dtype == np.float32 and space.contains(obs), obs
        latency = info["latency"]
        assert latency > 0 and reward == -latency
        assert set(info["breakdown"]) == {"overhead", "queue", "load", "transfer", "compute",
                                          "memory_stall"}
        assert all(v >= -1e-9 for v in info["breakdown"].values()), info["breakdown"]
        assert math.isclose(sum(info["breakdown"].values()), latency, rel_tol=1e-9)
        assert len(info["placement"]) == 3
        assert all(any(d in p for d in devices) for p in info["placement"])
        assert info["cache_hit"] in (None, True, False)
        assert set(info["utilisation"]) == set(devices)
        assert all(0.0 <= u <= 1.0 for u in info["utilisation"].values())
        assert math.isclose(sum(info["share"].values()), 1.0, rel_tol=1e-9)
        static, oracle = info["static_latency"], info["oracle_latency"]
        assert oracle <= static + 1e-9
        if env_id == V0:
            # Same state and noise, and the oracle tries every whole placement: a lower bound on
            # any V0 action (a masked pick only adds failed-dispatch overhead). Split actions can
            # spread a stage over devices and legitimately beat it, so not checked there.
            assert oracle <= latency + 1e-9, (oracle, latency, info["placement"])
        assert len(info["oracle_placement"]) == 3 and len(info["static_placement"]) == 3
    assert steps == n_tasks
    assert shown(obs) == sizes(info["task"])    # the final observation: the last task again


def test_device_seconds_count_the_set_up_of_a_re_placement() -> None:
    """The same task on the same placement, after the same or another placement: the
    re-placed one keeps its devices busy for exactly the set-ups longer."""
    kept, moved = make(V0, episode_tasks=2), make(V0, episode_tasks=2)
    kept.reset(seed=0)
    moved.reset(seed=0)
    first_kept = kept.step(np.array([0, 1, 1]))[-1]
    first_moved = moved.step(np.array([0, 2, 2]))[-1]      # prefill and decode on the NPU
    assert first_kept["device_s"] > 0 and first_moved["device_s"] != first_kept["device_s"]
    after_kept, after_moved = (env.step(np.array([0, 1, 1]))[-1] for env in (kept, moved))
    sim = kept.unwrapped.sim
    gpu_set_up = sim.hardware.devices[1].setup_s + sim.config.replacement_overhead_s
    assert gpu_set_up > 0
    assert after_moved["device_s"] - after_kept["device_s"] == pytest.approx(2 * gpu_set_up)


def test_info_without_reference_has_no_reference_latencies() -> None:
    env = make(V0, episode_tasks=3)
    env.reset(seed=0)
    info = env.step(np.array([0, 1, 2]))[-1]
    assert "oracle_latency" not in info and "static_latency" not in info


@pytest.mark.parametrize("env_id", IDS)
def test_price_static_prices_static_under_the_latency_reward(env_id: str) -> None:
    """price_static=True gives the latency reward the static references the relative reward
    computes (the same figures on the same trajectory), and no oracle."""
    def infos(**kwargs: Any) -> list[tuple[float, dict[str, Any]]]:
        env = make(env_id, episode_tasks=15, **kwargs)
        env.action_space.seed(3)
        env.reset(seed=6)
        return [env.step(env.action_space.sample())[1::3] for _ in range(15)]

    priced, relative = infos(price_static=True), infos(reward="relative")
    keys = ("static_latency", "static_service", "static_placement")
    for (reward, info), (_, info_rel) in zip(priced, relative, strict=True):
        assert reward == -info["latency"] and "oracle_latency" not in info
        assert [info[k] for k in keys] == [info_rel[k] for k in keys]
        assert info["latency"] == info_rel["latency"]


def test_oracle_placement_reproduces_the_oracle_latency() -> None:
    """Acting with the oracle's placement gives exactly the oracle latency (same state, noise)."""
    env = make(V0, episode_tasks=30, reference=True)
    raw = env.unwrapped
    env.reset(seed=5)
    for _ in range(30):
        ref = raw.planner.references(raw._current_task(), raw._episode.noise[raw._index],
                                     raw.stage_masks())
        action = np.array([raw.device_names.index(d) for d in ref["oracle_placement"]])
        info = env.step(action)[-1]
        assert info["latency"] == info["oracle_latency"] == ref["oracle_latency"]


def test_oracle_ties_go_to_the_first_allowed_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented tie rule: among placements of equal latency, the first allowed one in
    `all_placements` order (cpu before gpu before npu, the load stage's device varying last)."""
    from types import SimpleNamespace

    raw = make(V0, episode_tasks=3).unwrapped
    raw.reset(seed=0)
    monkeypatch.setattr(raw.sim, "run", lambda *args, **kwargs: SimpleNamespace(latency=2.0))
    task, noise = raw._current_task(), raw._episode.noise[0]
    allowed = ((True,) * 3,) * 3
    assert raw.planner.oracle(task, noise, allowed) == (2.0, (0, 0, 0))
    no_cpu_decode = ((True,) * 3, (True,) * 3, (False, True, True))
    assert raw.planner.oracle(task, noise, no_cpu_decode) == (2.0, (0, 0, 1))


def test_the_oracle_keeps_to_the_masks(tmp_path: Path) -> None:
    """Big batches the NPU cannot hold for prefill or decode: the oracle never places those
    stages there, though the simulator would price the placement."""
    env = make(V0, scenario=str(big_batch_scenario(tmp_path)), reference=True)
    raw = env.unwrapped
    env.reset(seed=0)
    for _ in range(6):
        masks = raw.stage_masks()
        info = env.step(np.array([0, 1, 1]))[-1]
        placement = [raw.device_names.index(name) for name in info["oracle_placement"]]
        assert all(masks[stage, dev] for stage, dev in enumerate(placement)), placement


@pytest.mark.parametrize("env_id", IDS)
def test_render_ansi_names_placement_and_latency(env_id: str) -> None:
    env = make(env_id, episode_tasks=3, render_mode="ansi")
    env.reset(seed=0)
    assert "no task" in env.render()
    action = np.array([0, 1, 2]) if env_id == V0 else one_hot_split((0, 1, 2))
    info = env.step(action)[-1]
    line = env.render()
    assert isinstance(line, str) and "\n" not in line
    assert "cpu,gpu,npu" in line
    assert f"latency={info['latency']:8.3f}s" in line
    assert make(env_id, episode_tasks=3).unwrapped.render() is None   # no render_mode


@pytest.mark.parametrize("env_id", IDS)
def test_render_rgb_array_draws_placement_queues_and_latency(env_id: str) -> None:
    from envs.render import DEVICE_COLOURS, GAP, HORIZON_S, PANEL_GAP, ROW, TRACK, WIDTH

    env = make(env_id, episode_tasks=3, render_mode="rgb_array")
    env.reset(seed=0)
    raw = env.unwrapped
    empty = env.render()
    assert empty.dtype == np.uint8 and empty.shape[1:] == (WIDTH, 3)
    action = np.array([0, 1, 2]) if env_id == V0 else one_hot_split((0, 1, 2))
    info = env.step(action)[-1]
    frame = env.render()
    assert frame.shape == empty.shape and not np.array_equal(frame, empty)

    def row(top: int) -> np.ndarray:
        return frame[top + ROW // 2]           # the middle line of the bar at `top`

    for stage, device in enumerate((0, 1, 2)):     # a stage per row, in its device's colour
        assert (row(PANEL_GAP + stage * (ROW + GAP)) == DEVICE_COLOURS[device]).all()
    backlog_top = PANEL_GAP + 3 * (ROW + GAP) + PANEL_GAP
    now = raw._current_task().arrival
    for d, busy in enumerate(raw.sim.state.busy_until):
        filled = int((row(backlog_top + d * (ROW + GAP)) != TRACK).any(axis=1).sum())
        assert filled == pytest.approx(min(max(busy - now, 0.0) / HORIZON_S, 1.0) * WIDTH, abs=2)
    latency_top = backlog_top + 3 * (ROW + GAP) + PANEL_GAP
    filled = int((row(latency_top) != TRACK).any(axis=1).sum())
    assert filled == pytest.approx(min(info["latency"] / HORIZON_S, 1.0) * WIDTH, abs=3)


def test_rgb_frame_greys_an_offline_device_and_caps_a_queue_past_the_horizon() -> None:
    from envs.render import (
        DEVICE_COLOURS,
        GAP,
        HORIZON_S,
        OFFLINE,
        PANEL_GAP,
        ROW,
        TRACK,
        WIDTH,
        draw_frame,
    )

    frame = draw_frame(3, None, [-5.0, 0.5 * HORIZON_S, 1.5 * HORIZON_S], [True, False, True], None)
    top = PANEL_GAP + 3 * (ROW + GAP) + PANEL_GAP + ROW // 2
    idle, offline, long = (frame[top + d * (ROW + GAP)] for d in range(3))
    assert (idle == TRACK).all()                                  # no negative queue drawn
    assert (offline[:WIDTH // 2] == OFFLINE).all() and (offline[WIDTH // 2:] == TRACK).all()
    assert (long[:WIDTH - 4] == DEVICE_COLOURS[2]).all() and (long[WIDTH - 4:] == 255).all()


@pytest.mark.parametrize("n_devices", [1, 3, 8])
def test_rgb_frame_bars_are_row_tall_on_background_with_a_panel_gap_margin(n_devices: int) -> None:
    """Every bar, the latency bar included, is ROW pixels whole inside the frame, with
    background between bars and at least PANEL_GAP of it above the first and below the last."""
    from envs.render import BACKGROUND, GAP, PANEL_GAP, ROW, draw_frame

    frame = draw_frame(n_devices, None, [0.0] * n_devices, [True] * n_devices, None)
    column = frame[:, 0]
    stage_tops = [PANEL_GAP + s * (ROW + GAP) for s in range(3)]
    backlog_tops = [stage_tops[-1] + ROW + GAP + PANEL_GAP + d * (ROW + GAP)
                    for d in range(n_devices)]
    latency_top = backlog_tops[-1] + ROW + GAP + PANEL_GAP
    is_bar = np.zeros(len(frame), dtype=bool)
    for top in [*stage_tops, *backlog_tops, latency_top]:
        is_bar[top:top + ROW] = True
    assert latency_top + ROW + PANEL_GAP <= len(frame)
    assert (column[is_bar] != BACKGROUND).any(axis=1).all()
    assert (column[~is_bar] == BACKGROUND).all()


def test_rgb_frame_splits_a_bar_left_to_right_in_its_parts_order() -> None:
    """A stage split 1/4 : 3/4 between devices 0 and 2; a latency of queue then compute."""
    from envs.render import (
        DEVICE_COLOURS,
        GAP,
        HORIZON_S,
        PANEL_GAP,
        PART_COLOURS,
        ROW,
        TRACK,
        WIDTH,
        draw_frame,
    )

    frame = draw_frame(3, [[(0, 0.25), (2, 0.75)], [], []], [0.0] * 3, [True] * 3,
                       {"compute": 0.5 * HORIZON_S, "queue": 0.25 * HORIZON_S})
    stage = frame[PANEL_GAP + ROW // 2]
    quarter = WIDTH // 4
    assert (stage[:quarter] == DEVICE_COLOURS[0]).all()
    assert (stage[quarter:] == DEVICE_COLOURS[2]).all()
    latency = frame[PANEL_GAP + 3 * (ROW + GAP) + PANEL_GAP + 3 * (ROW + GAP) + PANEL_GAP
                    + ROW // 2]
    assert (latency[:quarter] == PART_COLOURS["queue"]).all()
    assert (latency[quarter:3 * quarter] == PART_COLOURS["compute"]).all()
    assert (latency[3 * quarter:] == TRACK).all()


def test_rgb_frame_caps_only_a_queue_longer_than_the_horizon() -> None:
    """A queue of exactly HORIZON_S fills the bar in its device's colour, no cap (the cap of a
    longer one: test_rgb_frame_greys_an_offline_device_and_caps_a_queue_past_the_horizon)."""
    from envs.render import DEVICE_COLOURS, GAP, HORIZON_S, PANEL_GAP, ROW, draw_frame

    frame = draw_frame(1, None, [HORIZON_S], [True], None)
    assert (frame[PANEL_GAP + 3 * (ROW + GAP) + PANEL_GAP + ROW // 2] == DEVICE_COLOURS[0]).all()


@pytest.mark.parametrize(("backlogs", "online"), [(4, 3), (3, 2), (2, 2)])
def test_rgb_frame_needs_a_backlog_and_an_online_flag_per_device(backlogs: int,
                                                                 online: int) -> None:
    from envs.render import draw_frame

    with pytest.raises(ValueError, match=rf"per device \(3\), got {backlogs} and {online}"):
        draw_frame(3, None, [0.0] * backlogs, [True] * online, None)


@pytest.mark.parametrize("env_id", IDS)
def test_human_render_mode_shows_the_rgb_array_frames_through_gymnasium(env_id: str) -> None:
    """The README's claim: `render_mode="human"` is Gymnasium's HumanRendering over our
    `rgb_array` frames, so a window needs only pygame, not a mode of our own."""
    from gymnasium.wrappers import HumanRendering

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # gym.make warns that it applies the wrapper
        env = gym.make(env_id, episode_tasks=3, render_mode="human")
    wrapper = env
    while not isinstance(wrapper, HumanRendering):
        assert isinstance(wrapper, gym.Wrapper), "gym.make did not apply HumanRendering"
        wrapper = wrapper.env
    assert env.unwrapped.render_mode == "rgb_array"


def test_sb3_make_vec_env_builds_the_env_by_id() -> None:
    """SB3's make_vec_env asks for render_mode="rgb_array" when given an env id."""
    from stable_baselines3.common.env_util import make_vec_env

    venv = make_vec_env(V0, n_envs=2, seed=0, env_kwargs={"episode_tasks": 5})
    obs = venv.reset()
    assert obs.shape == (2, 26)
    frames = venv.get_images()
    assert len(frames) == 2 and frames[0].ndim == 3


@pytest.mark.parametrize("env_id", IDS)
def test_an_async_vector_env_steps_as_the_sync_one(env_id: str) -> None:
    """Gymnasium's AsyncVectorEnv (each env pickled into a process of its own) gives the
    trajectories of its SyncVectorEnv, over next-step autoresets too: env i is the env seeded
    seed + i, each its own stream. Its processes start by forkserver, Python 3.14's default on
    Linux: under fork (earlier Pythons') nothing is pickled, and Python 3.13 warns of forking
    the test process's threads."""
    def rollout(mode: str) -> list[np.ndarray]:
        start = {"context": "forkserver"} if mode == "async" else {}
        vec = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, vector_kwargs=start,
                           episode_tasks=4, reward="relative")
        steps = [vec.reset(seed=5)[0]]
        vec.action_space.seed(0)
        for _ in range(10):              # episodes of 4 tasks: steps 4 and 9 reset the envs
            obs, reward, _, truncated, info = vec.step(vec.action_space.sample())
            placed = info.get("_latency", np.zeros(2, bool))     # none on a step of resets
            latency = np.where(placed, info.get("latency", 0.0), np.nan)
            steps += [obs, reward, truncated, latency]
        vec.close()
        return steps

    sync = rollout("sync")
    assert all(np.array_equal(a, b, equal_nan=True)
               for a, b in zip(sync, rollout("async"), strict=True))
    latency = sync[4::4]                 # of each step: step 4, the reset's, places no task
    assert np.isnan(latency[4]).all() and not np.isnan(np.delete(latency, [4, 9], axis=0)).any()
    for i in range(2):
        assert np.array_equal(sync[0][i], make(env_id, episode_tasks=4).reset(seed=5 + i)[0])
    assert not np.array_equal(sync[0][0], sync[0][1])


@pytest.mark.parametrize("env_id", IDS)
def test_relative_reward_is_one_minus_latency_over_static(env_id: str) -> None:
    env = make(env_id, episode_tasks=25, reward="relative")
    env.action_space.seed(0)
    env.reset(seed=2)
    rewards = []
    for _ in range(25):
        _, reward, _, _, info = env.step(env.action_space.sample())
        assert reward == 1.0 - info["latency"] / info["static_latency"]
        rewards.append(reward)
    assert len(set(rewards)) > 1


def test_relative_reward_of_the_static_placement_is_zero() -> None:
    env = make(V0, episode_tasks=20, reward="relative")
    placement = np.array(env.unwrapped.planner.best_static)
    env.reset(seed=4)
    for _ in range(20):
        reward = env.step(placement)[1]
        assert reward == 0.0


@pytest.mark.parametrize("env_id", IDS)
def test_normalised_reward_is_one_minus_latency_over_static_service(env_id: str) -> None:
    env = make(env_id, episode_tasks=40, reward="normalised")
    env.action_space.seed(0)
    env.reset(seed=2)
    queued = 0
    for _ in range(40):
        _, reward, _, _, info = env.step(env.action_space.sample())
        assert reward == 1.0 - info["latency"] / info["static_service"]
        assert 0.0 < info["static_service"] <= info["static_latency"]
        queued += info["static_service"] < info["static_latency"]
    assert queued > 0     # static waited somewhere: the two references differ


@pytest.mark.parametrize("env_id", IDS)
def test_a_static_reference_too_short_for_the_clock_still_gives_a_finite_reward(
        env_id: str) -> None:
    """Times are absolute floats: a one-token task queued behind tasks of 1e9 sequences of
    1e9 tokens (sizes the loader takes) finishes near 1e19 s, where floats are 4096 s apart,
    so static's service (latency less queue) came out 0 and the normalised reward divided by
    it (ZeroDivisionError). Such a duration counts as one tick of the clock there: the
    reward is finite, and below 0 (the agent waited the whole queue)."""
    sizes = {"dist": "choice", "values": [1, 10**9]}
    scenario = {"episode_tasks": 12, "noise": 0.0,
                "workload": {"arrival_rate": 1e6, "batch": sizes, "prompt_tokens": sizes,
                             "output_tokens": 1}}
    for reward_kind in ("normalised", "relative"):
        env = make(env_id, scenario=scenario, reward=reward_kind)
        raw = env.unwrapped
        static = raw.planner.best_static
        action = (np.array(static) if env_id == V0
                  else np.array([1.0 if d == s else -1.0 for s in static
                                 for d in range(raw.n_devices)], dtype=np.float32))
        env.reset(seed=0)
        unmeasurable = 0
        for _ in range(12):
            _, reward, _, _, info = env.step(action)
            assert math.isfinite(reward)
            if info["static_service"] == 0.0:
                unmeasurable += 1
                assert reward < 0.0 if reward_kind == "normalised" else reward == 0.0
        assert unmeasurable > 0


def _edge_hardware(folder: Path, edge: str) -> str:
    """The server preset with every figure at one end of its documented range."""
    import yaml

    from inference.hardware import PRESET_DIR

    raw = yaml.safe_load((PRESET_DIR / "server.yaml").read_text(encoding="utf-8"))
    slow = edge == "slowest"
    rate, overhead = (1.0, 3600.0) if slow else (1e30, 1e-300)
    raw["disk_bandwidth"] = rate
    for link in raw["links"]:
        link.update(bandwidth=rate, latency=overhead)
    for device in raw["devices"]:
        device.update(peak_flops=rate, mem_bandwidth=rate, launch_overhead=overhead,
                      setup_s=3600.0 if slow else 0.0)
        for table in ("op_efficiency", "pattern_efficiency"):
            device[table] = dict.fromkeys(device[table], 1e-12 if slow else 1.0)
        # the fast edge on the spec sheet only: heft and best-static plan with 1e30, truth is 1
        device["true_figures"] = None if slow else {"peak_flops": 1.0, "mem_bandwidth": 1.0}
    path = folder / f"{edge}.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def edge_hardware(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("edges")
    return {"server": "server", **{edge: _edge_hardware(folder, edge)
                                   for edge in ("slowest", "fastest-on-paper")}}


_SIZE_EDGES = st.sampled_from([1, 10**9, {"dist": "choice", "values": [1, 10**9]}])


@hypothesis.settings(max_examples=12, deadline=None)
@hypothesis.given(env_id=st.sampled_from(IDS), reward=st.sampled_from(["latency", "relative", "normalised"]),
       hardware=st.sampled_from(["server", "slowest", "fastest-on-paper"]),
       noise=st.sampled_from([0.0, MAX_NOISE]), rate=st.sampled_from([MIN_RATE, 1 / MIN_RATE]),
       batch=_SIZE_EDGES, prompt=_SIZE_EDGES, output=_SIZE_EDGES,
       model=st.sampled_from(["tiny", "glm-9b"]), throttled=st.booleans())
# a one-token task behind tasks of 1e9 sequences: static's service rounded to 0 (see above)
@hypothesis.example(env_id=V0, reward="normalised", hardware="server", noise=0.0, rate=1 / MIN_RATE,
         batch={"dist": "choice", "values": [1, 10**9]},
         prompt={"dist": "choice", "values": [1, 10**9]}, output=1, model="glm-9b",
         throttled=False)
def test_values_at_the_edges_of_their_ranges_step_within_the_envs_promises(
        edge_hardware: dict[str, str], env_id: str, reward: str, hardware: str, noise: float,
        rate: float, batch: Any, prompt: Any, output: Any, model: str, throttled: bool) -> None:
    """What the loaders accept, the env runs: mixes of range edges (hardware at either end of
    every figure, the largest sizes and noise, the extreme rates, the smallest throttle factor
    and cache decay) step to observations inside the box and finite rewards and info."""
    scenario = {"episode_tasks": 12, "noise": noise, "model": model,
                "hardware": edge_hardware[hardware], "variant": "glm-5.3-flash-opt",
                "cache": {"decay": 1e-300, "capacity": 1},
                "workload": {"arrival_rate": rate, "batch": batch, "prompt_tokens": prompt,
                             "output_tokens": output},
                "faults": [{"device": "gpu", "kind": "throttle", "factor": 1e-12,
                            "start_task": 0, "end_task": 12}] if throttled else []}
    env = make(env_id, scenario=scenario, reward=reward)
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    for _ in range(12):
        obs, value, _, _, info = env.step(env.action_space.sample())
        assert obs.dtype == np.float32 and env.observation_space.contains(obs)
        assert math.isfinite(value)
        numbers = [info["latency"], info["device_s"], *info["breakdown"].values(),
                   *info["speed_ratio"].values(), *info["utilisation"].values(),
                   info.get("static_latency", 0.0), info.get("static_service", 0.0)]
        assert all(math.isfinite(x) for x in numbers), info


def test_normalised_reward_of_the_static_placement_is_minus_its_queue_share() -> None:
    """Acting as static, the agent is static: its reward is minus the share of its latency
    it queued (0 exactly where it did not queue, as the relative reward is throughout)."""
    env = make(V0, episode_tasks=60, reward="normalised")
    placement = np.array(env.unwrapped.planner.best_static)
    env.reset(seed=4)
    for _ in range(60):
        _, reward, _, _, info = env.step(placement)
        queue = info["breakdown"]["queue"]
        assert reward == pytest.approx(-queue / (info["latency"] - queue), rel=1e-9, abs=1e-12)
        assert (reward == 0.0) == (queue == 0.0)


def test_normalised_reward_charges_a_backlog_the_relative_one_does_not() -> None:
    """Every stage on the GPU builds a queue there, behind which static waits too in the
    same state: the relative reward scores it above static although its latency is higher.
    The normalised reward prices the task against static's service time, queue left out,
    and scores it below static."""
    def run(reward: str, placement: Any) -> tuple[float, float]:
        env = make(V0, episode_tasks=100, reward=reward)
        env.reset(seed=1)
        steps = [env.step(np.array(placement)) for _ in range(100)]
        return (float(np.mean([s[1] for s in steps])),
                float(np.mean([s[4]["latency"] for s in steps])))

    static = make(V0).unwrapped.planner.best_static
    gpu = (1, 1, 1)
    assert make(V0).unwrapped.device_names[1] == "gpu" and tuple(static) != gpu
    (rel_static, lat_static), (rel_gpu, lat_gpu) = run("relative", static), run("relative", gpu)
    (norm_static, _), (norm_gpu, _) = run("normalised", static), run("normalised", gpu)
    assert lat_gpu > 1.1 * lat_static
    assert rel_gpu > rel_static                  # the blind spot
    assert norm_gpu < norm_static                # charged


def test_static_reference_pays_its_own_failed_dispatches(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A static placement a task does not fit fails over and pays the penalty, as an agent
    acting with it does: acting with it still scores exactly the static reference."""
    monkeypatch.setattr("envs.reference.search_best_static", lambda env: (0, 2, 2))
    env = make(V0, scenario=str(big_batch_scenario(tmp_path)), reward="relative")
    env.reset(seed=0)
    for _ in range(6):
        _, reward, _, _, info = env.step(np.array([0, 2, 2]))
        assert info["failed_dispatch"] == 2 and info["static_placement"] == ("cpu", "npu", "npu")
        assert info["static_latency"] == info["latency"] and reward == 0.0


# --- masks -------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_id", IDS)
def test_action_masks_shape_and_dtype(env_id: str) -> None:
    env = make(env_id, episode_tasks=3)
    env.reset(seed=0)
    masks = env.unwrapped.action_masks()
    assert masks.shape == (9,) and masks.dtype == np.bool_
    assert masks.all()    # article: every device online and able to hold every stage


@pytest.mark.parametrize("n_tasks", [pytest.param(70, marks=PAST_FAULTS), 120])
@pytest.mark.parametrize("env_id", IDS)
def test_masks_of_the_final_observation(env_id: str, n_tasks: int) -> None:
    """A gymnasium vector env resets a finished env on its next step, so a loop asks for the
    masks of the final observation (the last task, NPU offline in tasks 60-119 of `faults`).
    With 120 tasks the fault window closes with the last one: the final observation still
    shows the devices as that task left them, the NPU offline."""
    vec = gym.vector.SyncVectorEnv([lambda: make(env_id, scenario="faults", episode_tasks=n_tasks)])
    vec.reset(seed=0)
    for step in range(n_tasks + 1):   # the last step resets the env
        masks = np.stack(vec.call("action_masks"))
        assert masks.shape == (1, 9)
        truncated = vec.step(vec.action_space.sample())[3]
        assert truncated[0] == (step == n_tasks - 1)
    raw = make(env_id, scenario="faults", episode_tasks=n_tasks).unwrapped
    obs, _ = raw.reset(seed=0)
    for _ in range(n_tasks):
        obs = raw.step(raw.action_space.sample())[0]
    npu = raw.device_names.index("npu")
    assert obs[6 + 4 * npu] == 0.0                    # the final observation: the NPU offline
    assert not raw.stage_masks()[:, npu].any() and raw.stage_masks()[:, :npu].all()
    with pytest.raises(RuntimeError, match="episode is over"):
        raw.step(raw.action_space.sample())


def test_npu_masked_for_a_batch_it_cannot_hold(tmp_path: Path) -> None:
    env = make(V0, scenario=str(big_batch_scenario(tmp_path)))
    raw = env.unwrapped
    env.reset(seed=0)
    masks = raw.action_masks().reshape(3, 3)
    npu, gpu = raw.device_names.index("npu"), raw.device_names.index("gpu")
    assert masks[0].all()                          # loading needs no weights: fits everywhere
    assert not masks[1, npu] and not masks[2, npu]
    assert masks[1, gpu] and masks[2, gpu]


@pytest.mark.parametrize(("offline", "fallback"), [(None, "gpu"), ("gpu", "npu")])
def test_a_stage_no_device_can_hold_may_run_on_the_online_device_with_most_memory(
        tmp_path: Path, offline: str | None, fallback: str) -> None:
    """Big batches whose prefill and decode (weights included) fit no memory, 30/33/32 GB on
    cpu/gpu/npu: those stages may run only on the online device with the most memory."""
    path = big_batch_scenario(tmp_path)
    if offline:
        path.write_text(path.read_text() + f"faults: [{{device: {offline}, kind: offline, "
                        "start_task: 0, end_task: 6}]\n", encoding="utf-8")
    hardware = server_with_memory(tmp_path, cpu=3.0e10, gpu=3.3e10, npu=3.2e10)
    env = make(V0, scenario=str(path), hardware=str(hardware))
    raw = env.unwrapped
    env.reset(seed=0)
    masks = raw.stage_masks()
    only = [name == fallback for name in raw.device_names]
    assert masks[0].tolist() == [name != offline for name in raw.device_names]
    assert masks[1].tolist() == only and masks[2].tolist() == only


@pytest.mark.parametrize("env_id", IDS)
def test_hardware_on_which_the_models_weights_fit_no_device_is_refused(
        tmp_path: Path, env_id: str) -> None:
    """glm-9b's ~18.8 GB of weights on devices of 16 GB each: every prefill and decode used to
    fall back to the device with the most memory and run there priced as if it fit, so every
    policy's latency was a fiction, without a word."""
    hardware = server_with_memory(tmp_path, cpu=1.6e10, gpu=1.6e10, npu=1.6e10)
    with pytest.raises(ValueError) as info:
        make(env_id, hardware=str(hardware))
    message = str(info.value)
    assert str(hardware) in message and "glm-9b" in message, message
    assert "no device" in message and "memory" in message, message
    # one device that holds them is enough: the others' stages fail over per task as before
    make(env_id, hardware=str(server_with_memory(tmp_path, cpu=1.6e10, gpu=2.0e10,
                                                 npu=1.6e10))).reset(seed=0)


@pytest.mark.parametrize("env_id", IDS)
def test_masked_pick_is_a_failed_dispatch_not_an_error(env_id: str, tmp_path: Path) -> None:
    env = make(env_id, scenario=str(big_batch_scenario(tmp_path, failed_dispatch_s=0.75)))
    raw = env.unwrapped
    npu = raw.device_names.index("npu")
    env.reset(seed=0)
    placement = (0, npu, npu)
    action = np.array(placement) if env_id == V0 else one_hot_split(placement)
    _, reward, _, _, info = env.step(action)
    assert info["failed_dispatch"] == 2
    assert "npu" not in info["placement"][1] and "npu" not in info["placement"][2]
    # first task: no re-placement overhead yet, so the overhead is exactly the failed dispatches
    assert info["breakdown"]["overhead"] == 2 * 0.75
    assert math.isfinite(reward)
    # a valid placement on the next task fails nothing: its only overhead is the set-up of
    # each stage that moved to a device that did not run it for the first task
    setup = {dev.name: dev.setup_s + raw.sim.config.replacement_overhead_s
             for dev in raw.hardware.devices}
    first = info["placement"]
    gpu = raw.device_names.index("gpu")
    ok = np.array((0, gpu, gpu)) if env_id == V0 else one_hot_split((0, gpu, gpu))
    info = env.step(ok)[-1]
    assert info["failed_dispatch"] == 0
    assert info["placement"] == (raw.device_names[0], "gpu", "gpu")
    moved = sum(setup[new] for old, new in zip(first, info["placement"], strict=True)
                if old != new)
    assert moved > 0     # the first task's prefill and decode fell back off the gpu
    assert info["breakdown"]["overhead"] == pytest.approx(moved, rel=1e-12)
    # ... and the same placement again pays no set-up either
    info = env.step(ok)[-1]
    assert info["failed_dispatch"] == 0
    assert info["breakdown"]["overhead"] == 0.0


def split_action(weights: Any) -> np.ndarray:
    """A Split action from a (3, D) matrix of per-stage weights in [0, 1]."""
    return (2.0 * np.asarray(weights, dtype=np.float32) - 1.0).reshape(-1)


@pytest.mark.parametrize("exact", [False, True])
def test_split_share_that_fits_runs_where_the_whole_batch_would_not(tmp_path: Path,
                                                                   exact: bool) -> None:
    """Half of a big batch's prefill and decode fits the NPU (half the footprint plus the weights)
    though the whole batch does not: the share runs there, no failed dispatch. The masks keep
    their whole-batch meaning. `exact`: the NPU's memory is exactly what the larger half needs
    (a share that fills a memory fits it, as a whole stage does)."""
    scenario = str(big_batch_scenario(tmp_path))
    hardware = {}
    if exact:
        probe = make(SPLIT, scenario=scenario).unwrapped
        probe.reset(seed=0)
        need = max(work.footprint for work in probe._task_works(probe._current_task())[1:])
        hardware["hardware"] = str(server_with_memory(
            tmp_path, npu=0.5 * need + probe._weight_bytes))
    env = make(SPLIT, scenario=scenario, **hardware)
    raw = env.unwrapped
    env.reset(seed=0)
    works = raw._task_works(raw._current_task())
    npu = raw.device_names.index("npu")
    memory, weights = raw._device_memory[npu], raw._weight_bytes
    for work in works[1:]:
        assert work.footprint + weights > memory >= 0.5 * work.footprint + weights
    masks = raw.stage_masks()
    assert not masks[1, npu] and not masks[2, npu]      # whole batch: still masked
    info = env.step(split_action([[1, 0, 0], [0, 1, 1], [0, 1, 1]]))[-1]
    assert info["failed_dispatch"] == 0
    assert info["placement"][1:] == ("gpu:16/32+npu:16/32",) * 2
    assert info["breakdown"]["overhead"] == 0.0


def test_split_share_too_big_for_its_device_still_fails_over(tmp_path: Path) -> None:
    env = make(SPLIT, scenario=str(big_batch_scenario(tmp_path, failed_dispatch_s=0.75)))
    env.reset(seed=0)
    info = env.step(split_action([[1, 0, 0], [0, 0.1, 0.9], [0, 1, 0]]))[-1]
    assert info["failed_dispatch"] == 1              # 0.9 of the prefill does not fit the NPU
    assert "npu" not in info["placement"][1]
    assert info["breakdown"]["overhead"] == 0.75


def test_split_shares_in_one_memory_domain_are_summed(tmp_path: Path) -> None:
    """On the edge SoC the devices share one memory: half the batch on the GPU and half on the
    NPU hold the whole batch in it, which does not fit, so both shares fail over."""
    env = make(SPLIT, scenario=str(big_batch_scenario(tmp_path)), hardware="edge")
    raw = env.unwrapped
    env.reset(seed=0)
    work, weights = raw._task_works(raw._current_task())[1], raw._weight_bytes
    assert 0.5 * work.footprint + weights <= min(raw._device_memory) < work.footprint + weights
    info = env.step(split_action([[1, 0, 0], [0, 1, 1], [1, 0, 0]]))[-1]
    assert info["failed_dispatch"] == 2
    assert info["placement"][1] == "cpu"             # the fallback: the device listed first


def test_a_domain_peer_without_a_share_holds_none_of_the_stage(tmp_path: Path) -> None:
    """A memory domain of some but not all devices (the NPU moved into the GPU's): a share on
    the NPU is checked against the shares of its domain, and the GPU, which takes none of the
    stage, adds nothing to it. Half the batch fits the NPU, so the CPU and NPU halves both run."""
    env = make(SPLIT, scenario=str(big_batch_scenario(tmp_path)),
               hardware=str(server_with(tmp_path, "memory_domain", npu="gpu-hbm")))
    raw = env.unwrapped
    env.reset(seed=0)
    npu = raw.device_names.index("npu")
    assert raw._memory_peers[npu] == (raw.device_names.index("gpu"), npu)
    memory, weights = raw._device_memory[npu], raw._weight_bytes
    for work in raw._task_works(raw._current_task())[1:]:
        assert work.footprint + weights > memory >= 0.5 * work.footprint + weights
    assert not raw.stage_masks()[1:, npu].any()      # whole batch: masked
    info = env.step(split_action([[1, 0, 0], [1, 0, 1], [1, 0, 1]]))[-1]
    assert info["failed_dispatch"] == 0
    assert info["placement"][1:] == ("cpu:16/32+npu:16/32",) * 2


def test_failed_split_share_moves_to_a_device_that_holds_the_whole_stage(tmp_path: Path) -> None:
    """A share that fails over goes to a device that may hold the whole stage, not to one that
    only holds its own small share (which the moved share would overfill)."""
    env = make(SPLIT, scenario=str(big_batch_scenario(tmp_path)),
               hardware=str(server_with_memory(tmp_path, gpu=3.0e10)))
    raw = env.unwrapped
    env.reset(seed=0)
    gpu = raw.device_names.index("gpu")
    work, weights = raw._task_works(raw._current_task())[1], raw._weight_bytes
    # 0.3 of 32 sequences: the GPU takes 10 of them, the NPU 22
    assert 10 / 32 * work.footprint + weights <= raw._device_memory[gpu] < work.footprint + weights
    assert raw.stage_masks()[1].tolist() == [True, False, False]
    raw.sim.state.busy_until[0] = 1e3      # the CPU has the longest backlog, the GPU none
    info = env.step(split_action([[1, 0, 0], [0, 0.3, 0.7], [1, 0, 0]]))[-1]
    assert info["failed_dispatch"] == 1
    assert info["placement"][1] == "cpu:22/32+gpu:10/32"


def fixed_batch_scenario(tmp_path: Path, batch: int) -> str:
    """The article's stream with every task a batch of `batch` sequences."""
    path = tmp_path / f"batch{batch}.yaml"
    path.write_text(f"name: batch{batch}\nepisode_tasks: 4\nworkload: {{batch: {batch}}}\n",
                    encoding="utf-8")
    return str(path)


def rows_of_sequences(weights: Any, batch: int) -> list[list[int]]:
    """`sequences_of` of each row (stage) of `weights`."""
    return [sequences_of(row, batch) for row in np.asarray(weights, dtype=np.float64).tolist()]


@pytest.mark.parametrize("batch", [1, 2, 3, 5, 7, 16, 32, 64, 100])
def test_sequences_of_sum_to_the_batch(batch: int) -> None:
    rng = np.random.default_rng(batch)
    weights = rng.random((200, 3)) * (rng.random((200, 3)) > 0.3)
    weights[weights.sum(axis=1) == 0, 0] = 1.0
    rows = rows_of_sequences(weights, batch)
    assert all(type(n) is int for row in rows for n in row)
    counts = np.array(rows)
    assert (counts >= 0).all()
    assert (counts.sum(axis=1) == batch).all()
    assert (counts[weights == 0] == 0).all()                  # a zero weight: no sequence
    quota = batch * weights / weights.sum(axis=1, keepdims=True)
    assert (np.abs(counts - quota) < 1).all()                 # each within a sequence of its due
    assert (counts[quota < 1 / 3] == 0).all()                 # under 1/D of one: none, ever


def test_sequences_of_give_a_batch_of_one_to_the_largest_weight() -> None:
    weights = [[0.2, 0.5, 0.3], [0.4, 0.3, 0.3], [0.01, 0.01, 0.02], [1.0, 1.0, 1.0]]
    assert rows_of_sequences(weights, 1) == [[0, 1, 0], [1, 0, 0], [0, 0, 1],
                                             [1, 0, 0]]   # a tie: the first


def test_sequences_of_give_under_half_a_sequence_nothing() -> None:
    """A sliver (2% of a 16-sequence stage, a third of a sequence) runs nowhere."""
    assert sequences_of([1.0, 1.0, 0.0425], 16) == [8, 8, 0]
    assert sequences_of([0.45, 0.45, 0.1], 4) == [2, 2, 0]    # 0.4 of one
    assert sequences_of([0.4, 0.4, 0.2], 4) == [2, 1, 1]      # 0.8: one


def test_sequences_of_break_ties_by_device_order() -> None:
    assert sequences_of([1.0, 1.0, 1.0], 4) == [2, 1, 1]
    assert sequences_of([1.0, 1.0, 1.0], 5) == [2, 2, 1]
    assert sequences_of([0.0, 1.0, 1.0], 3) == [0, 2, 1]
    for _ in range(3):    # the same weights, the same counts
        assert sequences_of([0.5, 0.25, 0.25], 2) == [1, 1, 0]


def test_sequences_of_match_the_largest_remainder_method_on_random_weights() -> None:
    """The env's per-row Python rounding against the method written in numpy, array-wise, on
    weights of any scale (heft-split's and the env's lie in [0, 1], but any non-negative
    weights with a positive sum are rounded alike)."""
    rng = np.random.default_rng(7)
    for _ in range(2000):
        d, batch = int(rng.integers(1, 6)), int(rng.integers(1, 65))
        scale = 10.0 ** rng.uniform(-3.0, 3.0)
        w = rng.uniform(0.0, scale, (3, d)) * (rng.uniform(size=(3, d)) > 0.3)
        w[w.sum(axis=1) == 0, 0] = 1.0
        quota = batch * w / w.sum(axis=1, keepdims=True)
        expected = np.floor(quota).astype(np.int64)
        order = np.argsort(-np.where(w > 0, quota - expected, -1.0), axis=1, kind="stable")
        for row, ranked in enumerate(order):
            expected[row, ranked[:batch - expected[row].sum()]] += 1
        assert rows_of_sequences(w, batch) == expected.tolist(), (w, batch)


def test_split_env_gives_each_device_whole_sequences(tmp_path: Path) -> None:
    """A stage's batch splits data-parallel: a weight worth under half a sequence gives its
    device no share (it paid the share's fixed costs in full), info and the observed previous
    placement hold multiples of 1 / B, and a batch of one runs each stage on one device."""
    env = make(SPLIT, scenario=fixed_batch_scenario(tmp_path, 32), render_mode="ansi")
    raw = env.unwrapped
    env.reset(seed=0)
    # prefill's CPU and decode's NPU are due a third of a sequence; the load splits 11, 11, 10
    obs, *_, info = env.step(split_action([[1, 1, 1], [0.01, 0.7, 0.3], [0, 1, 0.01]]))
    assert info["placement"] == ("cpu:11/32+gpu:11/32+npu:10/32", "gpu:22/32+npu:10/32", "gpu")
    assert "cpu:11/32+gpu:11/32+npu:10/32,gpu:22/32+npu:10/32,gpu " in raw.render()
    previous = obs[5 + 4 * raw.n_devices:].reshape(3, 3) * 32
    np.testing.assert_allclose(previous, [[11, 11, 10], [0, 22, 10], [0, 32, 0]], atol=1e-5)
    assert info["share"] == pytest.approx({"cpu": 11 / 96, "gpu": 65 / 96, "npu": 20 / 96})
    single = make(SPLIT, scenario=fixed_batch_scenario(tmp_path, 1))
    single.reset(seed=0)
    info = single.step(split_action([[0.3, 0.3, 0.4], [0.5, 0.9, 0.8], [1, 1, 1]]))[-1]
    assert info["placement"] == ("npu", "gpu", "cpu")


# --- measurements the agent observes -----------------------------------------------------------


def test_measured_speed_ratio_approaches_true_over_nominal() -> None:
    """Prefill alternates between the NPU (true peak ~15% above its datasheet) and the GPU (true
    = nominal): the measured ratio, nominal / observed prefill time, goes to true / nominal."""
    env = make(V0, episode_tasks=60, noise=0.0)
    raw = env.unwrapped
    names = raw.device_names
    cpu, gpu, npu = (names.index(n) for n in ("cpu", "gpu", "npu"))
    npu_profile = raw.hardware.devices[npu]
    true_over_nominal = npu_profile.peak_flops / npu_profile.nominal[0]   # from true_figures
    assert true_over_nominal > 1.1
    gpu_profile = raw.hardware.devices[gpu]
    assert gpu_profile.peak_flops == gpu_profile.nominal[0]
    env.reset(seed=0)
    on_npu = 0
    for i in range(60):
        action = np.array([cpu, npu, npu] if i % 2 == 0 else [cpu, gpu, gpu])
        obs, *_, info = env.step(action)
        on_npu += info["placement"][1] == "npu"   # (a batch the NPU cannot hold falls back)
    assert on_npu >= 20
    ratio = info["speed_ratio"]
    assert ratio["npu"] == pytest.approx(true_over_nominal, abs=0.01), ratio
    assert ratio["gpu"] == pytest.approx(1.0, abs=1e-9), ratio
    assert ratio["cpu"] == pytest.approx(1.0, abs=1e-9), ratio    # true = nominal as well
    for d, name in enumerate(names):
        assert obs[7 + 4 * d] == pytest.approx(min(ratio[name] / 2.0, 1.0), abs=1e-6)


def test_the_speed_ratio_is_measured_on_prefills_device_on_every_prefill(tmp_path: Path) -> None:
    """An NPU truly 3x its datasheet runs prefill, the GPU decode: the NPU's ratio leaves 1 at
    the first step, though each short-text prefill takes well under a second, and the GPU's
    (true = nominal, and only decoding) stays at 1. Past 2 the observation caps the entry
    at 1 (ratio / 2, <= 1 in the docstring's table)."""
    import yaml

    from inference.hardware import PRESET_DIR

    raw_hw = yaml.safe_load((PRESET_DIR / "server.yaml").read_text(encoding="utf-8"))
    (npu_spec,) = [d for d in raw_hw["devices"] if d["name"] == "npu"]
    npu_spec["true_figures"] = {"peak_flops": 3 * float(npu_spec["peak_flops"])}
    hardware = tmp_path / "fast-npu.yaml"
    hardware.write_text(yaml.safe_dump(raw_hw), encoding="utf-8")
    env = make(V0, scenario="short-text", hardware=str(hardware), noise=0.0, episode_tasks=12)
    raw = env.unwrapped
    cpu, gpu, npu = (raw.device_names.index(n) for n in ("cpu", "gpu", "npu"))
    env.reset(seed=0)
    ratios = []
    for _ in range(12):
        obs, *_, info = env.step(np.array([cpu, npu, gpu]))
        assert info["placement"] == ("cpu", "npu", "gpu")
        assert raw._last[1].stage_time[1] < 1.0          # a sub-second prefill is measured too
        ratio = info["speed_ratio"]
        assert ratio["gpu"] == ratio["cpu"] == 1.0
        assert ratio["npu"] != (ratios[-1] if ratios else 1.0)
        ratios.append(ratio["npu"])
        for d, name in enumerate(raw.device_names):
            assert obs[7 + 4 * d] == pytest.approx(min(ratio[name] / 2.0, 1.0), abs=1e-6)
    assert ratios[0] > 1.0 and max(ratios) > 2.0 and obs[7 + 4 * npu] == 1.0



def test_a_split_loads_share_leaves_the_prefill_speed_measurement_alone() -> None:
    """The speed ratio is nominal over observed *prefill* time: a prefill wholly on the NPU
    measures the same ratio whether the load stage before it ran whole or split over two devices
    (the nominal time is priced at the prefill's own share, not the load's)."""
    ratios = {}
    for load in ((1.0, 1.0, -1.0), (-1.0, -1.0, 1.0)):   # split cpu/gpu, or wholly on the npu
        env = make(SPLIT, noise=0.0, episode_tasks=2)
        raw = env.unwrapped
        npu = raw.device_names.index("npu")
        action = one_hot_split((npu, npu, npu))
        action[:3] = load
        env.reset(seed=0)
        *_, info = env.step(action)
        assert info["placement"][1:] == ("npu", "npu")
        assert ("+" in info["placement"][0]) == (load[0] == 1.0)
        ratios[load] = info["speed_ratio"]["npu"]
    split, whole = ratios.values()
    assert whole > 1.0            # the NPU is truly faster than its datasheet: measured at once
    assert split == pytest.approx(whole, rel=1e-12)

def test_sizes_past_the_scales_observe_as_one(tmp_path: Path) -> None:
    """A batch over 64, a prompt over 32768 tokens and an output over 2048 each observe as 1
    (the table's `<= 1`), inside the observation box."""
    path = tmp_path / "huge.yaml"
    path.write_text("name: huge\nepisode_tasks: 2\n"
                    "workload: {batch: 100, prompt_tokens: 40000, output_tokens: 3000}\n",
                    encoding="utf-8")
    env = make(V0, scenario=str(path))
    obs, info = env.reset(seed=0)
    assert (info["task"]["batch"], info["task"]["prompt_tokens"],
            info["task"]["output_tokens"]) == (100, 40000, 3000)
    assert obs[:3].tolist() == [1.0, 1.0, 1.0] and env.observation_space.contains(obs)
    obs = env.step(np.array([0, 1, 1]))[0]
    assert obs[:3].tolist() == [1.0, 1.0, 1.0] and env.observation_space.contains(obs)


def test_utilisation_of_a_sub_second_first_task_is_its_busy_share(tmp_path: Path) -> None:
    """A one-token task alone on the GPU finishes in milliseconds: its utilisation is the GPU's
    busy time over the time booked, that finish, not over some floor of the horizon."""
    path = tmp_path / "tiny.yaml"
    path.write_text("name: tiny\nepisode_tasks: 2\nnoise: 0\n"
                    "workload: {batch: 1, prompt_tokens: 16, output_tokens: 1}\n",
                    encoding="utf-8")
    env = make(V0, scenario=str(path))
    raw = env.unwrapped
    gpu = raw.device_names.index("gpu")
    env.reset(seed=0)
    info = env.step(np.array([gpu, gpu, gpu]))[-1]
    state = raw.sim.state
    assert info["latency"] < 0.1 and state.busy_until[gpu] == max(state.busy_until) > 0
    assert info["utilisation"]["gpu"] == pytest.approx(
        state.busy_time[gpu] / state.busy_until[gpu], rel=1e-12)
    assert info["utilisation"]["gpu"] > 0.5
    assert info["utilisation"]["cpu"] == info["utilisation"]["npu"] == 0.0


@pytest.mark.parametrize("variant", ["glm-5.3", "glm-5.3-flash"])   # no loader cache, a cache
def test_observation_entries_follow_the_docstring_table(variant: str) -> None:
    """Each per-device entry and the cache and previous-placement entries, recomputed from the
    state the observed task finds, by the table of `InferenceAllocEnv`'s docstring."""
    env = make(V0, scenario="bursty", variant=variant, episode_tasks=40)
    env.action_space.seed(1)
    raw = env.unwrapped
    d_count = raw.n_devices
    weights = raw.model.weight_bytes
    obs, _ = env.reset(seed=2)
    queued = 0
    for _ in range(39):
        obs, *_, info = env.step(env.action_space.sample())
        task, state = raw._current_task(), raw.sim.state
        cached = raw.sim.stages[0].cache_kind is not None
        assert obs[3] == ((task.domain in state.cache_entries) if cached else 0.5)
        for d, profile in enumerate(raw.hardware.devices):
            backlog = max(state.busy_until[d] - task.arrival, 0.0)
            queued += backlog > 0
            free = 1.0 - weights / profile.memory if state.resident[d] else 1.0
            assert obs[4 + 4 * d: 7 + 4 * d] == pytest.approx(
                [backlog / (backlog + 60.0), free, float(state.online[d])], abs=1e-6)
        previous = np.zeros((3, d_count))
        for stage, name in enumerate(info["placement"]):
            previous[stage, raw.device_names.index(name)] = 1.0
        assert np.array_equal(obs[5 + 4 * d_count:], previous.reshape(-1))
    assert queued > 10                                     # the backlogs were not all zero



@pytest.mark.parametrize(("hardware", "shown"), [("server", (0.98, 0.77, 0.41)),
                                                  ("edge", (0.41, 0.41, 0.41))])
def test_free_memory_entries_stay_at_the_docstrings_values(hardware: str, shown: tuple) -> None:
    """The docstring's note: every device holds the weights from reset and never drops them,
    so each free-memory entry stays at 1 - weights / memory, the values it states, through an
    episode of random placements (which run every stage on every device)."""
    env = make(V0, scenario="article", hardware=hardware, episode_tasks=60)
    env.action_space.seed(0)
    raw = env.unwrapped
    free = device_entries(raw.n_devices, "free_memory")
    obs, _ = env.reset(seed=0)
    seen = {tuple(obs[free].tolist())}
    truncated = False
    while not truncated:
        obs, *_, truncated, _ = env.step(env.action_space.sample())
        seen.add(tuple(obs[free].tolist()))
    (only,) = seen
    assert [round(x, 2) for x in only] == list(shown)

@pytest.mark.parametrize("env_id", IDS)
def test_reset_observes_a_fresh_machine_even_after_an_episode(env_id: str) -> None:
    """reset()'s observation, the first of a second episode too, shows what no task has yet
    changed: no backlog, the speed ratios at 1 (1 / 2 in the table's scaling), no recent cache
    hits and no previous task's shares (the table's last 3 D entries)."""
    env = make(env_id, variant="glm-5.3-flash-opt", episode_tasks=30)   # a cache that hits
    env.action_space.seed(0)
    d_count = env.unwrapped.n_devices
    previous = slice(5 + 4 * d_count, None)
    for episode in range(2):
        obs, _ = env.reset(seed=episode)
        for d in range(d_count):
            assert obs[4 + 4 * d] == 0.0 and obs[7 + 4 * d] == 0.5, (episode, obs)
        assert obs[4 + 4 * d_count] == 0.0
        assert not obs[previous].any(), (episode, obs[previous])
        truncated = False
        while not truncated:
            obs, *_, truncated, _ = env.step(env.action_space.sample())
        # the episode changed each of them
        assert obs[previous].any() and obs[4 + 4 * d_count] > 0.0
        assert any(obs[7 + 4 * d] != 0.5 for d in range(d_count))


def test_recent_cache_hit_rate_is_the_ema_of_the_loaders_hits() -> None:
    from envs.inference_alloc import HIT_EMA

    env = make(V0, episode_tasks=150)
    raw = env.unwrapped
    index = 4 + 4 * raw.n_devices
    obs, _ = env.reset(seed=3)
    assert obs[index] == 0.0
    ema, hits = 0.0, 0
    for _ in range(150):
        obs, *_, info = env.step(np.array([0, 1, 1]))
        assert info["cache_hit"] in (True, False)     # the article's loader has a cache
        hits += info["cache_hit"]
        ema += HIT_EMA * (float(info["cache_hit"]) - ema)
        assert obs[index] == pytest.approx(ema, abs=1e-6), (obs[index], ema)
    assert hits > 0 and ema > 0.0


def test_a_throttled_device_computes_one_over_factor_slower_in_the_fault_window(
        tmp_path: Path) -> None:
    """Identical tasks, no noise, an idle cluster: prefill and decode on the GPU take 1/factor
    as long while the scenario throttles it, and as long as before once the fault ends."""
    path = tmp_path / "throttle.yaml"
    path.write_text(textwrap.dedent("""\
        name: throttle
        hardware: server
        variant: glm-5.3-flash
        episode_tasks: 12
        noise: 0
        workload: {arrival_rate: 0.0001, batch: 16, prompt_tokens: 4096, output_tokens: 128}
        faults:
          - {device: gpu, kind: throttle, factor: 0.5, start_task: 4, end_task: 8}
        """), encoding="utf-8")
    env = make(V0, scenario=str(path))
    raw = env.unwrapped
    (fault,) = raw.scenario.faults
    gpu = raw.device_names.index("gpu")
    env.reset(seed=0)
    compute = []
    for _ in range(12):
        info = env.step(np.array([0, gpu, gpu]))[-1]
        assert info["placement"] == ("cpu", "gpu", "gpu")
        compute.append(info["breakdown"]["compute"] + info["breakdown"]["memory_stall"])
    healthy = compute[1]
    assert healthy > 0
    for i, seconds in enumerate(compute):
        throttled = fault.start_task <= i < fault.end_task
        expected = healthy / fault.factor if throttled else healthy
        assert seconds == pytest.approx(expected, rel=1e-9), (
            f"task {i} ({'throttled' if throttled else 'healthy'}): {seconds} s, "
            f"expected {expected} s")


def test_failed_dispatch_ties_go_to_the_device_listed_first() -> None:
    """The documented tie rule of the fallback: equal backlogs -> the lowest device id, so the
    order of a hardware file's devices matters (all-npu on cpu,gpu,npu vs gpu,cpu,npu)."""
    from envs.reference import dispatch

    masks = ((True, True, False),) * 3
    shares = (((2, 1.0),),) * 3
    assert dispatch(shares, masks, [0.0, 0.0, 0.0]) == ((((0, 1.0),),) * 3, 3)
    assert dispatch(shares, masks, [1.0, 0.0, 0.0]) == ((((1, 1.0),),) * 3, 3)


def test_utilisation_is_busy_time_over_the_time_booked_not_clamped() -> None:
    """Under a backlog a device's booked work runs past the task just finished: busy time over
    that task's finish exceeded 1 and was clamped to 1, hiding idle gaps. Over the time booked
    so far it is a measured share, below 1 where the device sat idle."""
    env = gym.make(V0, scenario="bursty", episode_tasks=200)
    env.reset(seed=0)
    base = env.unwrapped
    unclamped = 0
    for i in range(200):
        # prefill and decode alternate between gpu and npu: each backs up behind the other
        _, _, _, truncated, info = env.step([0, 1, 1] if i % 2 else [0, 2, 2])
        state = base.sim.state
        finish = info["task"]["arrival"] + info["latency"]
        horizon = max(state.busy_until)
        for busy, used in zip(state.busy_time, info["utilisation"].values(), strict=True):
            assert used == pytest.approx(busy / horizon, rel=1e-12) and 0.0 <= used <= 1.0
            unclamped += busy / finish > 1.0 and used < 1.0   # the clamp reported 1.0 here
        if truncated:
            break
    assert unclamped > 10


# ---- the class docstrings as help() shows them ------------------------------------------------
# Read from the docstring and compared with the code, so that an edit to either side alone fails
# here: the Arguments, the spaces, every row of the observation table and the info keys.

def _sections(cls: type) -> dict[str, str]:
    """A class docstring's `## ` sections by heading, each as its (dedented) text."""
    text = inspect.getdoc(cls) or ""
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {heading.strip(): body for heading, body in zip(parts[1::2], parts[2::2], strict=True)}


def _arguments(cls: type) -> dict[str, str]:
    """The `- `name`: text` bullets of the Arguments section, each text on one line."""
    bullets = re.split(r"^- `(\w+)`: ", _sections(cls)["Arguments"], flags=re.M)[1:]
    return {name: " ".join(text.split()) for name, text in zip(bullets[::2], bullets[1::2],
                                                                strict=True)}


def _ticked(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def _stated_default(text: str) -> str:
    stated = re.search(r"[Dd]efault (the scenario's|`[^`]*`)", text)
    assert stated is not None, f"no default stated in {text!r}"
    return stated.group(1)


def test_every_env_argument_is_documented_with_its_default() -> None:
    """The Arguments of `InferenceAllocEnv`'s docstring are `__init__`'s parameters, no more
    and no fewer, each stating the default the signature has (None: the scenario's own value)
    and that gym.make's registration passes."""
    from envs.inference_alloc import InferenceAllocEnv

    documented = _arguments(InferenceAllocEnv)
    parameters = dict(inspect.signature(InferenceAllocEnv.__init__).parameters)
    parameters.pop("self")
    assert list(documented) == [p for p in documented if p in parameters]   # none extra
    assert set(documented) == set(parameters)                              # none missing
    for name, parameter in parameters.items():
        default, stated = parameter.default, _stated_default(documented[name])
        if default is None:
            assert stated in ("the scenario's", "`None`"), (name, stated)
        else:
            assert stated == f"`{default}`", (name, stated, default)
    for env_id in IDS:
        for name, value in gym.spec(env_id).kwargs.items():
            assert value == parameters[name].default, (env_id, name)


@pytest.mark.parametrize("env_id", IDS)
def test_both_envs_take_every_documented_argument_at_its_default(env_id: str) -> None:
    """The Split env documents its arguments by pointing to InferenceAlloc-v0's: each of them,
    given at its default, makes the env gym.make makes without any."""
    from envs.inference_alloc import InferenceAllocEnv

    defaults = {name: parameter.default for name, parameter
                in inspect.signature(InferenceAllocEnv.__init__).parameters.items()
                if name in _arguments(InferenceAllocEnv)}
    given, plain = make(env_id, **defaults).unwrapped, make(env_id).unwrapped
    assert (given.scenario, given.reward_kind, given.reference, given.render_mode) == (
        plain.scenario, plain.reward_kind, plain.reference, plain.render_mode)
    if env_id == SPLIT:
        assert "arguments" in _sections(type(given))["Description"]


def test_the_arguments_list_the_values_the_env_accepts() -> None:
    """The names each argument lists (presets, recipes, rewards, traces, render modes) and the
    ranges it states are the ones the code knows."""
    from envs.inference_alloc import REWARDS, InferenceAllocEnv
    from envs.traces import TRACES
    from inference.hardware import preset_names
    from inference.variants import VARIANTS

    args = _arguments(InferenceAllocEnv)

    def listed(name: str, intro: str) -> set[str]:
        found = re.search(re.escape(intro) + r"[^(]*\(([^)]*)\)", args[name])
        assert found is not None, (name, intro)
        return set(_ticked(found.group(1)))

    assert listed("scenario", "preset name") == set(SCENARIOS)
    assert listed("hardware", "preset name") == set(preset_names())
    assert listed("variant", "recipe") == set(VARIANTS)
    assert set(_ticked(args["reward"].split("(see Rewards)")[0])) == set(REWARDS)
    assert set(_ticked(args["trace"].split(" or a CSV path")[0])) == set(TRACES)
    modes = _ticked(re.sub(r"\([^)]*\)", "", args["render_mode"].split(". ")[0]))
    assert set(modes) == {"None", *InferenceAllocEnv.metadata["render_modes"]}

    def bounds(name: str) -> tuple[float, float]:
        found = re.search(r"\(([\d,.]+) \.\. ([\d,.]+)\)", args[name])
        assert found is not None, name
        low, high = (float(x.replace(",", "")) for x in found.groups())
        return low, high

    assert bounds("episode_tasks") == (1, MAX_EPISODE_TASKS)
    assert bounds("noise") == (0, MAX_NOISE)


def _space(text: str, n_devices: int) -> gym.Space:
    """The first backticked space of `text` (`Box(...)`, `MultiDiscrete(...)`) with D devices."""
    expression = next(t for t in _ticked(text) if re.match(r"(Box|MultiDiscrete)\(", t))
    return eval(expression, {"Box": gym.spaces.Box, "MultiDiscrete": gym.spaces.MultiDiscrete,
                             "float32": np.float32, "D": n_devices})


@pytest.mark.parametrize("env_id", IDS)
@pytest.mark.parametrize("hardware", ["server", "cpu-npu"])
def test_the_docstring_spaces_are_the_envs(env_id: str, hardware: str,
                                           cpu_npu_hardware: str) -> None:
    """The Action Space and Observation Space sections' spaces, with D devices, are the ones the
    env builds, on 3 devices and on 2; and the observation's stated length for D = 3 adds up."""
    from envs.inference_alloc import InferenceAllocEnv

    env = make(env_id, hardware=cpu_npu_hardware if hardware == "cpu-npu" else hardware)
    d_count = env.unwrapped.n_devices
    assert d_count == (2 if hardware == "cpu-npu" else 3)
    assert _space(_sections(type(env.unwrapped))["Action Space"], d_count) == env.action_space
    observation = _sections(InferenceAllocEnv)["Observation Space"]
    assert _space(observation, d_count) == env.observation_space
    stated = re.search(r"with D = (\d+) devices, (\d+) entries", observation)
    assert stated is not None
    assert _space(observation, int(stated.group(1))).shape == (int(stated.group(2)),)


def _table_rows() -> list[tuple[str, str, str]]:
    """(index formula, observation, scaling) of each row of the observation table."""
    from envs.inference_alloc import InferenceAllocEnv

    rows = []
    for line in _sections(InferenceAllocEnv)["Observation Space"].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and cells[0] not in ("index", "") \
                and not set(cells[0]) <= set("-"):
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def _row_indices(formula: str, n_devices: int) -> dict[int, tuple[int, int]]:
    """Entry -> (stage s, device d) of a row's index formula, over every s and d it names."""
    # as written, products are juxtaposed: `4 + 4d`, `5 + 4D + D s + d`
    expression = re.sub(r"([\dDds])\s*(?=[Dds])", r"\1 * ", formula)
    names = set(re.findall(r"[A-Za-z]", formula))
    stages = range(3) if "s" in names else (0,)
    devices = range(n_devices) if "d" in names else (0,)
    return {eval(expression, {"d": d, "D": n_devices, "s": s}): (s, d)
            for s in stages for d in devices}


# Each table row by the words its observation starts with -> what it observes, unscaled, as
# (state of the env before the observed task, stage s, device d, previous shares) -> number.
# The scaling column then turns that into the entry: an expression of the row's variable.
_ROW_QUANTITIES: dict[str, tuple[str, Any]] = {
    "batch size": ("batch", lambda e, s, d, p: e._current_task().batch),
    "prompt tokens": ("n", lambda e, s, d, p: e._current_task().prompt_tokens),
    "output tokens": ("m", lambda e, s, d, p: e._current_task().output_tokens),
    "cache signal": ("x", lambda e, s, d, p: 0.5 if e.sim.stages[0].cache_kind is None
                     else float(e._current_task().domain in e.sim.state.cache_entries)),
    "device d backlog": ("b", lambda e, s, d, p: max(
        e.sim.state.busy_until[d] - e._current_task().arrival, 0.0)),
    "device d free memory": ("x", lambda e, s, d, p: 1.0 - e.model.weight_bytes
                             / e.hardware.devices[d].memory if e.sim.state.resident[d] else 1.0),
    "device d online": ("x", lambda e, s, d, p: float(e.sim.state.online[d])),
    "device d measured speed ratio": ("r", lambda e, s, d, p: p["speed"][e.device_names[d]]),
    "recent cache hit rate": ("x", lambda e, s, d, p: p["hit_rate"]),
    "previous task's share": ("x", lambda e, s, d, p: p["shares"][s][e.device_names[d]]),
}


def _label_shares(label: str) -> dict[str, float]:
    """Device -> share of one stage's info placement label (`gpu`, `cpu:11/32+gpu:21/32`)."""
    shares = {}
    for part in label.split("+"):
        name, _, count = part.partition(":")
        numerator, _, denominator = count.partition("/")
        shares[name] = int(numerator) / int(denominator) if count else 1.0
    return shares


def _entry(scaling: str, variable: str, value: float) -> float:
    """An entry by the table's scaling column: `batch / 64, <= 1`, `b / (b + 60)`, `fraction`."""
    expression, _, cap = scaling.partition(", <=")
    if expression in ("as is", "fraction", "0 or 1"):
        entry = value
    else:
        entry = eval(expression, {variable: value})
    return min(entry, float(cap)) if cap else entry


@pytest.mark.parametrize(("env_id", "scenario", "variant", "hardware"), [
    pytest.param(V0, "faults", "glm-5.3-flash", None,   # a cache that hits and misses, a device offline
                 marks=PAST_FAULTS),
    (SPLIT, "bursty", "glm-5.3-flash-opt", None),  # split shares, queues
    (V0, "article", "glm-5.3", "cpu-npu"),        # no loader cache, two devices
])
def test_every_observation_entry_is_its_table_rows_scaling_of_the_state(
        env_id: str, scenario: str, variant: str, hardware: str | None,
        cpu_npu_hardware: str) -> None:
    """Each table row, by its index formula and scaling column as written, recomputed from
    the state the observed task finds (the hit rate as the EMA the row states, of the info's
    cache hits), and the rows' indices cover the observation once each."""
    env = make(env_id, scenario=scenario, variant=variant, episode_tasks=70,
               hardware=cpu_npu_hardware if hardware else None)
    env.action_space.seed(3)
    raw = env.unwrapped
    d_count = raw.n_devices
    rows = _table_rows()
    hit_row = next(row for row in rows if row[1].startswith("recent cache hit rate"))
    weight = re.search(r"EMA, weight ([\d.]+)", hit_row[1])
    assert weight is not None
    seen: dict[str, Any] = {"hit_rate": 0.0, "speed": dict.fromkeys(raw.device_names, 1.0),
                            "shares": [dict.fromkeys(raw.device_names, 0.0)] * 3}
    obs, _ = env.reset(seed=4)
    offline = hits = 0
    for step in range(70):
        covered: list[int] = []
        for formula, observation, scaling in rows:
            key = next(k for k in _ROW_QUANTITIES if observation.startswith(k))
            variable, quantity = _ROW_QUANTITIES[key]
            for index, (s, d) in _row_indices(formula, d_count).items():
                covered.append(index)
                value = quantity(raw, s, d, seen)
                assert obs[index] == pytest.approx(_entry(scaling, variable, value), abs=1e-6), (
                    step, formula, observation)
        assert sorted(covered) == list(range(len(obs)))
        offline += not all(raw.sim.state.online)
        if step == 69:
            break
        obs, *_, info = env.step(env.action_space.sample())
        if info["cache_hit"] is not None:
            hits += info["cache_hit"]
            seen["hit_rate"] += float(weight.group(1)) * (info["cache_hit"] - seen["hit_rate"])
        seen["speed"] = info["speed_ratio"]
        seen["shares"] = [{**dict.fromkeys(raw.device_names, 0.0), **_label_shares(label)}
                          for label in info["placement"]]
    assert (offline > 0) == (scenario == "faults")
    assert (hits > 0) == (variant != "glm-5.3")


def test_the_info_section_names_the_keys_step_returns() -> None:
    """Info's per-step keys (outside its parentheses), the breakdown's parts and the task's
    fields are what `step()` returns; the reference keys those that `reference=True` adds."""
    from envs.inference_alloc import InferenceAllocEnv

    text = " ".join(_sections(InferenceAllocEnv)["Info"].split())
    per_step = text[text.index("Per step:"):text.index("With `price_static")]
    outside = per_step
    while re.search(r"\([^()]*\)", outside):
        outside = re.sub(r"\([^()]*\)", "", outside)
    env = make(V0, reference=True, episode_tasks=2)
    env.reset(seed=0)
    info = env.step(env.action_space.sample())[-1]
    references = set(_ticked(text[text.index("With `price_static"):text.index("`reset()`")]))
    references -= {"price_static=True", "reference=True", 'reward="relative"',
                   'reward="normalised"'}
    assert set(_ticked(outside)) | references == set(info)
    breakdown = re.search(r"`breakdown` \(([^:]*):", per_step)
    task = re.search(r"`task` \((.*?) of the task this step placed", per_step)
    assert breakdown is not None and task is not None
    assert breakdown.group(1).split(", ") == list(info["breakdown"])
    fields = [f.strip() for f in re.sub(r"\([^()]*\)", "", task.group(1)).split(",")]
    assert fields == list(info["task"])


ENV_KEYWORDS = ("scenario, hardware, variant, episode_tasks, reward, trace, noise, reference, "
                "render_mode, trace_time_scale, price_static")
MIX = envs.MIX_ENV_ID
TWO = ["article", "bursty"]


@pytest.mark.parametrize(("env_id", "kwargs", "expected"), [
    (V0, {"scenarioo": "article"},
     f"InferenceAllocEnv takes no keyword 'scenarioo' (did you mean 'scenario'?); its "
     f"keywords: {ENV_KEYWORDS}"),
    (SPLIT, {"rewad": "relative", "noize": 0.1},
     "InferenceAllocSplitEnv takes no keywords 'rewad', 'noize' (did you mean 'reward' for "
     f"'rewad', 'noise' for 'noize'?); its keywords: {ENV_KEYWORDS}"),
    (V0, {"speed": 2}, f"InferenceAllocEnv takes no keyword 'speed'; its keywords: "
                       f"{ENV_KEYWORDS}"),
    # a mix's own and those it hands on to its scenarios' envs, which take no scenario=
    (MIX, {"scenarios": TWO, "weight": [1, 2]},
     "ScenarioMixEnv takes no keyword 'weight' (did you mean 'weights'?); its keywords: "
     "scenarios, weights, env_id, hardware, variant, episode_tasks, reward, trace, noise, "
     "reference, render_mode, trace_time_scale, price_static"),
    (MIX, {"scenario": "article"}, "ScenarioMixEnv takes no keyword 'scenario' (did you mean "
                                   "'scenarios'?)"),
    (MIX, {"scenarios": TWO, "env_id": SPLIT, "rewards": "relative"},
     "ScenarioMixEnv takes no keyword 'rewards' (did you mean 'reward'?)"),
])
def test_a_keyword_an_env_does_not_take_is_named_with_the_nearest_and_all_it_takes(
        env_id: str, kwargs: dict, expected: str) -> None:
    """Python's own TypeError ("InferenceAllocEnv.__init__() got an unexpected keyword
    argument 'scenarioo'", for the Split env and a mix's too) named neither the keyword meant
    nor those the env takes. Still a TypeError, for code that catches one."""
    with pytest.raises(TypeError) as raised:
        gym.make(env_id, **kwargs)
    assert str(raised.value).startswith(expected), raised.value
    env_class = gym.envs.registration.load_env_creator(gym.spec(env_id).entry_point)
    with pytest.raises(TypeError, match=re.escape(expected)):     # built directly, alike
        env_class(**kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"weights": [1, 2]}, {"env_id": SPLIT}])
def test_a_mix_without_scenarios_says_what_they_are_with_an_example(kwargs: dict) -> None:
    """Python's "ScenarioMixEnv.__init__() missing 1 required positional argument:
    'scenarios'" said neither what they are nor how to give them. Still a TypeError, as for a
    keyword the env does not take."""
    expected = (f"ScenarioMixEnv needs the keyword 'scenarios': a list of two or more "
                f"scenarios, one drawn for each episode, each a preset name, a YAML path, a "
                f"Scenario or its mapping (e.g. gymnasium.make('{MIX}', scenarios=['article', "
                f"'bursty']))")
    with pytest.raises(TypeError) as raised:
        gym.make(MIX, **kwargs)
    assert str(raised.value).startswith(expected), raised.value
    with pytest.raises(TypeError, match=rf"^{re.escape(expected)}$"):     # built directly
        envs.scenario_mix.ScenarioMixEnv(**kwargs)
    # given by keyword or by position, the example's scenarios make a mix
    assert gym.make(MIX, scenarios=TWO, **kwargs).unwrapped.names == tuple(TWO)
    assert envs.scenario_mix.ScenarioMixEnv(TWO, **kwargs).names == tuple(TWO)


def test_the_envs_keywords_are_those_their_signatures_give() -> None:
    """The check knows each keyword the env takes: every one of them still makes the env."""
    assert ", ".join(inspect.signature(envs.InferenceAllocEnv).parameters) == ENV_KEYWORDS
    for env_id in (V0, SPLIT):
        env = gym.make(env_id, scenario="bursty", hardware="server", variant=None,
                       episode_tasks=3, reward="relative", trace=None, noise=0.0,
                       reference=False, render_mode="ansi", trace_time_scale=None,
                       price_static=True)
        unwrapped = env.unwrapped
        assert (unwrapped.scenario.name, unwrapped.scenario.episode_tasks,
                unwrapped.render_mode) == ("bursty", 3, "ansi")
        env.reset(seed=0)
        assert "static_latency" in env.step(env.action_space.sample())[-1]     # priced
    mix = gym.make(MIX, scenarios=TWO, weights=[1, 3], env_id=SPLIT, episode_tasks=3)
    assert mix.unwrapped.weights.tolist() == [0.25, 0.75]


@pytest.mark.parametrize("env_id", [V0, SPLIT, MIX])
def test_a_numpy_integer_seed_is_the_seed_of_its_value(env_id: str) -> None:
    """reset(seed=np.int64(5)), a seed as `rng.integers` hands it out, was Gymnasium's
    "Seed must be a python integer"; other types are still Gymnasium's to refuse."""
    kwargs = {"scenarios": ["article", "bursty"]} if env_id == MIX else {}
    runs = []
    for seed in (5, np.int64(5), np.uint32(5)):
        env = gym.make(env_id, episode_tasks=4, **kwargs)
        obs, _ = env.reset(seed=seed)
        action = np.zeros(env.action_space.shape, dtype=env.action_space.dtype)
        runs.append([obs, *(env.step(action)[0] for _ in range(3))])
    for run in runs[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(run, runs[0], strict=True))
    with pytest.raises(gym.error.Error, match="python integer"):
        gym.make(env_id, episode_tasks=4, **kwargs).reset(seed=5.0)
