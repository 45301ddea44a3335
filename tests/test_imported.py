"""Policies of your own named <module>:<attribute> (agents.imported), in make_policy, the
baselines of evaluate.py and train.py's conservative policy."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import importlib
import json
import re
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from test_cli_scripts import load_main

from agents.evaluation import episode_latencies
from agents.imported import is_import_name
from agents.registry import make_fixed_policy, make_policy, policy_env_id, valid_names
from agents.sb3_factory import make_sb3
from agents.warmup import WarmupConfig

USER_MODULE = '''
import numpy as np

from agents.base import Policy
from envs.observation import decode_observation


class ShortestQueue:
    """Every stage on the online device with the least queued work."""

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        seen = decode_observation(obs)
        queue = [b if up else np.inf for b, up in zip(seen.backlog, seen.online)]
        return np.full(3, int(np.argmin(queue))), state


class OnDevice:
    """Every stage on one device, chosen by name from the env's hardware."""

    def __init__(self, env, device="gpu"):
        self.action = np.full(3, env.unwrapped.device_names.index(device))

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return self.action, state


def on_cpu(env):
    return OnDevice(env, "cpu")


ready = OnDevice.__new__(OnDevice)
ready.action = np.full(3, 1)


class BadEnv:
    env_id = "CartPole-v1"

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return np.zeros(3), state


class EvenSplit:
    """Split env: each stage's work in equal shares over every device."""

    env_id = "InferenceAllocSplit-v0"

    def __init__(self, env):
        self.shape = env.unwrapped.action_space.shape

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return np.ones(self.shape, dtype=np.float32), state


not_a_policy = 3


def builds_nothing(env):
    return "a string"


class Seeded:
    """Its own optional argument first: a seed, not the env."""

    def __init__(self, seed=0):
        self.seed = seed

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return np.full(3, self.seed % 3), state


class StreamSeeded(Policy):
    """Random device ids, its generator restarted at each stream as our random policy's."""

    def __init__(self):
        self.rng = np.random.default_rng(0)

    def start_stream(self, seed):
        self.rng = np.random.default_rng(seed)

    def act(self, obs):
        return self.rng.integers(0, 3, size=3)


class LiveCurrentDevice(OnDevice):
    """Reads the env it was built with as it acts (here: nothing, but it says it does)."""

    reads_live_env = True


class TwoStages:
    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return np.zeros(2, dtype=int), state


class FarDevice:
    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return np.full(3, 7), state


class BuggyInit:
    def __init__(self, env):
        self.devices = len(None)

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return np.zeros(3, dtype=int), state


class ActionAlone:
    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return np.zeros(3, dtype=int)


class FlatIndexAlone:
    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return 0


class ListAlone:
    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return [0, 0, 0]


class ListPair:
    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return [[1, 1, 1], state]


class Rules:
    """Rules of one module, reached by a dotted attribute."""

    @staticmethod
    def on_cpu(env):
        return OnDevice(env, "cpu")


def on_device_of(environment, device="cpu"):
    """Its env argument named otherwise: still the env, having no default."""
    return OnDevice(environment, device)


def on_cpu_given(env=None):
    """An optional env: named env, so it is the env."""
    return OnDevice(env, "cpu")


class Named(OnDevice):
    name = "my-rule"


class SplitDeviceIds:
    """Split env, answering device ids: the warm-up hands them on one-hot."""

    env_id = "InferenceAllocSplit-v0"
    device = 1

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        return np.full(3, self.device), state


class SplitFarDevice(SplitDeviceIds):
    device = 7


class SplitBelowDevices(SplitDeviceIds):
    device = -1
'''


@contextlib.contextmanager
def module_in_cwd(source: str, prefix: str, tmp_path: Path, monkeypatch) -> Iterator[str]:
    """A module of the user's, `source`, in the working directory (`tmp_path`, not on
    sys.path) under a name of its own, forgotten by the process afterwards."""
    name = f"{prefix}_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.chdir(tmp_path)
    try:
        yield name
    finally:
        sys.modules.pop(name, None)


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch) -> Iterator[str]:
    """A module of the user's in the working directory (not on sys.path), imported by name."""
    with module_in_cwd(USER_MODULE, "mine", tmp_path, monkeypatch) as name:
        yield name


@pytest.fixture(scope="module")
def env() -> gym.Env:
    return gym.make("envs:InferenceAlloc-v0", scenario="article", episode_tasks=40)


def test_the_pattern_is_a_module_and_an_attribute_and_leaves_static_alone(env) -> None:
    assert is_import_name("mine:ShortestQueue") and is_import_name("pkg.mod:Rules.fifo")
    assert is_import_name(" mine:ShortestQueue ")      # read without the spaces around it
    # static:gpu reads as <module>:<attribute> too: it is the fixed placement's, in any case
    for name in ("static:cpu,gpu,gpu", "STATIC:cpu,gpu,gpu", "static:gpu", "Static:gpu",
                 " static:gpu", "heft",
                 "gated-mine:X", "mine:", ":X", "mine:X:Y", "1mine:X"):
        assert not is_import_name(name), name
    assert "<module>:<attribute>" in valid_names()
    # and so it is told what a static placement takes, not that no module static was found
    with pytest.raises(ValueError, match="a static placement names three devices"):
        make_fixed_policy("Static:gpu", env, "baseline")


def test_each_kind_of_attribute_builds_the_policy_it_names(user_module: str, env) -> None:
    devices = env.unwrapped.device_names
    cpu, gpu = devices.index("cpu"), devices.index("gpu")
    obs, _ = env.unwrapped.reset(seed=3)
    # a class taking no argument, one taking the env (with a keyword passed on), a function,
    # a ready object
    assert make_policy(f"{user_module}:ShortestQueue", env).predict(obs)[0].shape == (3,)
    assert list(make_policy(f"{user_module}:OnDevice", env).predict(obs)[0]) == [gpu] * 3
    assert list(make_policy(f"{user_module}:OnDevice", env, device="cpu").predict(obs)[0]) \
        == [cpu] * 3
    assert list(make_policy(f"{user_module}:on_cpu", env).predict(obs)[0]) == [cpu] * 3
    # a dotted attribute is followed (a function on a class)
    assert list(make_policy(f"{user_module}:Rules.on_cpu", env).predict(obs)[0]) == [cpu] * 3
    mod = sys.modules[user_module]
    assert make_policy(f"{user_module}:ready", env).policy is mod.ready
    # a batch is answered a row at a time, though OnDevice answers one action whatever it gets
    batch = np.stack([obs, obs])
    assert make_policy(f"{user_module}:on_cpu", env).predict(batch)[0].tolist() == [[cpu] * 3] * 2
    one = make_policy(f"{user_module}:ShortestQueue", env)
    np.testing.assert_array_equal(one.predict(obs[None])[0], one.predict(obs)[0][None])
    # gated, as any name; named by the name it was given (its refusals read "gated-oneatatime")
    gated = make_policy(f"gated-{user_module}:on_cpu", env)
    assert type(gated).__name__ == "GatedScheduling"
    assert gated.name == f"gated-{user_module}:on_cpu"
    with pytest.raises(ValueError, match=f"^gated-{user_module}:on_cpu reads the env's own"):
        gated.predict(obs * 5)


def test_an_imported_policy_scores_as_the_same_policy_built_by_hand(user_module: str,
                                                                     env) -> None:
    named = episode_latencies(make_policy(f"{user_module}:ShortestQueue", env), env, seed=10000)
    by_hand = episode_latencies(sys.modules[user_module].ShortestQueue(), env, seed=10000)
    np.testing.assert_array_equal(named, by_hand)
    all_gpu = episode_latencies(make_policy("all-gpu", env), env, seed=10000)
    assert not np.array_equal(named, all_gpu)       # it is not some default policy


@pytest.mark.parametrize("prefix", ["", "gated-"])
def test_a_policy_that_restarts_at_each_stream_is_told_through_the_wrapper(
        user_module: str, env, prefix: str) -> None:
    """A Policy of yours with start_stream (a generator restarted per stream, as ours) scores a
    stream alike whatever it ran before: behind OneAtATime it was never told."""
    policy = make_policy(f"{prefix}{user_module}:StreamSeeded", env)
    first = episode_latencies(policy, env, seed=10001)
    episode_latencies(policy, env, seed=10000)
    np.testing.assert_array_equal(episode_latencies(policy, env, seed=10001), first)


def test_the_split_env_is_the_attributes_own_say(user_module: str) -> None:
    assert policy_env_id(f"{user_module}:ShortestQueue") == "InferenceAlloc-v0"
    assert policy_env_id(f"{user_module}:EvenSplit") == "InferenceAllocSplit-v0"
    assert policy_env_id(f"gated-{user_module}:EvenSplit") == "InferenceAllocSplit-v0"
    split = gym.make("envs:InferenceAllocSplit-v0", scenario="article", episode_tasks=20)
    latency = episode_latencies(make_policy(f"{user_module}:EvenSplit", split), split, seed=1)
    assert latency.shape == (20,) and np.all(latency > 0)
    # each in the other's env: refused when built, not by the env at its first step
    with pytest.raises(ValueError, match=r"acts in InferenceAllocSplit-v0 \(its env_id\), not "
                                         r"InferenceAlloc-v0"):
        make_policy(f"{user_module}:EvenSplit", gym.make("envs:InferenceAlloc-v0"))
    with pytest.raises(ValueError, match="acts in InferenceAlloc-v0, not InferenceAllocSplit-v0; "
                                         "a policy of InferenceAllocSplit-v0 sets env_id"):
        make_policy(f"{user_module}:ShortestQueue", split)


@pytest.mark.parametrize(("attribute", "expected"), [
    ("Shortestqueue", "has no attribute 'Shortestqueue' (did you mean 'ShortestQueue'?)"),
    ("not_a_policy", "is a int: it must be a policy (with predict()), or a class or function"),
    ("BadEnv", "env_id must be one of InferenceAlloc-v0, InferenceAllocSplit-v0, got "
               "'CartPole-v1'"),
])
def test_a_name_that_builds_no_policy_is_one_clear_error(user_module: str, env, attribute: str,
                                                         expected: str) -> None:
    with pytest.raises(ValueError, match="baseline: policy .*" + re.escape(expected)):
        make_fixed_policy(f"{user_module}:{attribute}", env, "baseline")


def test_an_optional_first_argument_is_the_policys_own_not_the_env(user_module: str,
                                                                       env) -> None:
    # Seeded(seed=0) bound (env,) and took the env for its seed
    assert make_policy(f"{user_module}:Seeded", env).seed == 0
    assert make_policy(f"{user_module}:Seeded", env, seed=2).seed == 2
    # the env, though: a first argument without a default whatever its name, and an optional
    # one named env (built without it, on_cpu_given(None) fails on None's devices)
    cpu = env.unwrapped.device_names.index("cpu")
    obs, _ = env.reset(seed=0)
    for attribute in ("on_device_of", "on_cpu_given"):
        assert list(make_policy(f"{user_module}:{attribute}", env).predict(obs)[0]) == [cpu] * 3


def test_a_built_object_without_predict_or_a_factory_that_fits_no_call_is_refused(
        user_module: str, env) -> None:
    with pytest.raises(ValueError, match="built a str, which has no predict"):
        make_policy(f"{user_module}:builds_nothing", env)
    with pytest.raises(ValueError, match="takes neither the env alone nor no argument"):
        make_policy(f"{user_module}:OnDevice", env, colour="red")
    with pytest.raises(ValueError, match="is an object: it takes no keywords"):
        make_policy(f"{user_module}:ready", env, device="cpu")


def test_a_policy_that_reads_its_live_env_refuses_a_batch_as_the_oracle_does(
        user_module: str, env) -> None:
    """Its rows were each answered from the one env it was built with, whichever env they came
    from (only train.py's plan refused it, for --n-envs above 1); one observation, or a batch of
    one, it answers as before."""
    obs, _ = env.reset(seed=0)
    policy = make_policy(f"{user_module}:LiveCurrentDevice", env)
    with pytest.raises(ValueError, match=r"reads the live env's current task \(reads_live_env\), "
                                         r"so it takes one observation or a batch of one, got a "
                                         r"batch of 2"):
        policy.predict(np.stack([obs, obs]))
    assert policy.predict(obs)[0].shape == (3,)
    assert policy.predict(obs[None])[0].shape == (1, 3)
    # one that does not say so is answered row by row
    assert make_policy(f"{user_module}:on_cpu", env).predict(np.stack([obs, obs]))[0].shape == (2, 3)


@pytest.mark.parametrize("attribute", ["ActionAlone", "FlatIndexAlone"])
def test_a_predict_without_an_action_state_pair_is_refused_naming_the_policy(
        user_module: str, env, attribute: str) -> None:
    """In a loop of yours too, not only in the CLIs' first-action check: the wrapper unpacked
    the pair, so the action alone read 'too many values to unpack' (or a TypeError, for an int
    action), naming no policy; a pair of an action and a state is unpacked as before."""
    obs, _ = env.reset(seed=0)
    policy = make_policy(f"{user_module}:{attribute}", env)
    for observation in (obs, np.stack([obs, obs])):
        with pytest.raises(ValueError, match=re.escape(f"policy '{user_module}:{attribute}': "
                                                       f"predict() must return (action, state)")):
            policy.predict(observation)
    action, state = make_policy(f"{user_module}:ShortestQueue", env).predict(obs, state="kept")
    assert action.shape == (3,) and state == "kept"


def test_a_list_pair_is_an_answer_and_a_list_action_alone_is_not(user_module: str, env) -> None:
    """[action, state] answers as (action, state) does, its action an array as SB3's predict
    answers; a list action alone ([0, 0, 0]: no state) is refused, not read as the action 0
    with the state 0."""
    obs, _ = env.reset(seed=0)
    policy = make_policy(f"{user_module}:ListPair", env)
    action, state = policy.predict(obs, state="kept")
    assert isinstance(action, np.ndarray) and action.tolist() == [1, 1, 1] and state == "kept"
    assert policy.predict(np.stack([obs, obs]))[0].tolist() == [[1, 1, 1]] * 2
    with pytest.raises(ValueError, match=re.escape(f"policy '{user_module}:ListAlone': predict() "
                                                   f"must return (action, state)")):
        make_policy(f"{user_module}:ListAlone", env).predict(obs)


def test_a_policy_is_called_by_its_own_name_else_by_the_one_it_was_built_from(
        user_module: str, env) -> None:
    """A name of its own is kept (gated too); a subclass of our Policy that sets none has only
    the base class's 'policy', which named no policy: its refusals read "policy 'policy'"."""
    assert make_policy(f"{user_module}:Named", env).name == "my-rule"
    assert make_policy(f"gated-{user_module}:Named", env).name == "gated-my-rule"
    assert make_policy(f"{user_module}:StreamSeeded", env).name == f"{user_module}:StreamSeeded"
    assert make_policy(f"gated-{user_module}:StreamSeeded", env).name == \
        f"gated-{user_module}:StreamSeeded"


def test_an_imported_policy_copies_and_pickles_as_the_policy_it_wraps(user_module: str,
                                                                      env) -> None:
    """Reading the policy's attributes through, the wrapper looked for its own policy before it
    had one (as copy and pickle build it): a RecursionError."""
    import copy
    import pickle

    obs, _ = env.reset(seed=0)
    policy = make_policy(f"{user_module}:on_cpu", env)
    for twin in (copy.deepcopy(policy), pickle.loads(pickle.dumps(policy))):
        np.testing.assert_array_equal(twin.predict(obs)[0], policy.predict(obs)[0])
        assert twin.name == policy.name


def test_a_bug_in_its_constructor_names_the_policy_and_the_line(user_module: str, env) -> None:
    """make_fixed_policy turns a ValueError or TypeError into the CLIs' one line: one of your
    constructor's own read 'baseline: object of type 'NoneType' has no len()', naming neither
    the policy nor where."""
    with pytest.raises(ValueError, match=r"baseline: policy '\w+:BuggyInit': building it raised "
                                         r"TypeError: object of type 'NoneType' has no len\(\) "
                                         r"\(.*\w+\.py, line \d+\)"):
        make_fixed_policy(f"{user_module}:BuggyInit", env, "baseline")


RAISING = """
    def no_gpu(env):
        raise RuntimeError("no GPU here")


    def no_key():
        return {}["missing"]


    def interrupted(env):
        raise KeyboardInterrupt


    def exits(env):
        raise SystemExit(3)
    """


def test_whatever_your_factory_raises_is_one_line_naming_it_before_anything_runs(
        tmp_path: Path, monkeypatch, capsys, env) -> None:
    """A RuntimeError or KeyError of your factory's own (a ValueError or TypeError was named
    already) was a traceback from train.py's check and evaluate.py's baselines alike. Ctrl-C
    and sys.exit inside it stay what they are."""
    with module_in_cwd(RAISING, "raising", tmp_path, monkeypatch) as module:
        with pytest.raises(ValueError, match=rf"^baseline: policy '{module}:no_key': building it "
                                             rf"raised KeyError: 'missing' \(.*{module}\.py, "
                                             rf"line 7\)$"):
            make_fixed_policy(f"{module}:no_key", env, "baseline")
        with pytest.raises(KeyboardInterrupt):
            make_fixed_policy(f"{module}:interrupted", env, "baseline")
        with pytest.raises(SystemExit):
            make_fixed_policy(f"{module}:exits", env, "baseline")
        capsys.readouterr()
        assert load_main("train.py")(["--conservative", f"{module}:no_gpu", "--log-dir", "runs",
                                      "--no-progress-bar"]) == 2
        err = capsys.readouterr().err
        assert err == (f"train.py: error: --conservative policy: policy '{module}:no_gpu': "
                       f"building it raised RuntimeError: no GPU here ({tmp_path / module}.py, "
                       f"line 3)\n")
        (tmp_path / "runs").mkdir()
        assert load_main("evaluate.py")(["--runs", "runs", "--out", "results", "--baselines",
                                         "heft", f"{module}:no_key", "--no-online",
                                         "--no-progress-bar"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"baseline: policy '{module}:no_key': building it raised KeyError" in err
        assert list((tmp_path / "runs").iterdir()) == [] and not (tmp_path / "results").exists()


def test_a_missing_module_is_named_with_where_it_was_looked_for(tmp_path: Path, monkeypatch,
                                                                env) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"no module named 'nowhere_xyz' in the working "
                                         r"directory \(" + re.escape(str(tmp_path))):
        make_policy("nowhere_xyz:Policy", env)
    # one of our names mistyped with a colon reads as a module, and is pointed to
    with pytest.raises(ValueError, match=r"no module named 'heft'.* \(did you mean "
                                         r"'heft-calibrated'\?\)"):
        make_fixed_policy("heft:calibrated", env, "baseline")
    (tmp_path / "mine_xyz.py").write_text("")
    with pytest.raises(ValueError, match=r"no module named 'mine_xyz.py' .*; name the module, "
                                         r"mine_xyz, not its file"):
        make_policy("mine_xyz.py:Policy", env)
    # whatever a module's code raises as it is imported: one line naming what and where. A
    # ValueError or TypeError read "baseline: invalid literal for int() with base 10: 'x'",
    # naming nothing; a module that imports one that does not exist is what importing it
    # raised, not "no module named broken_xyz"; the others, a syntax error too, were tracebacks
    raising = [
        ("valueerror_xyz", "\n\nN = int('x')\n", r"baseline: policy 'valueerror_xyz:P': importing "
         r"valueerror_xyz raised ValueError: invalid literal .* \(.*valueerror_xyz\.py, line 3\)"),
        ("typeerror_xyz", "N = len(None)\n", r"baseline: policy 'typeerror_xyz:P': importing "
         r"typeerror_xyz raised TypeError: .* \(.*typeerror_xyz\.py, line 1\)"),
        ("broken_xyz", "import missing_dependency_xyz\n", r"^policy 'broken_xyz:P': importing "
         r"broken_xyz raised ModuleNotFoundError: No module named 'missing_dependency_xyz' "
         r"\(.*broken_xyz\.py, line 1\)$"),
        ("runtime_xyz", "\nraise RuntimeError('no GPU here')\n", r"importing runtime_xyz raised "
         r"RuntimeError: no GPU here \(.*runtime_xyz\.py, line 2\)$"),
        ("syntax_xyz", "x = 1\ndef f(:\n    pass\n", r"importing syntax_xyz raised SyntaxError: "
         r".* \(.*syntax_xyz\.py, line 2\)$"),
    ]
    for module, source, message in raising:
        (tmp_path / f"{module}.py").write_text(source)
        with pytest.raises(ValueError, match=message):
            if message.startswith("baseline"):
                make_fixed_policy(f"{module}:P", env, "baseline")
            else:
                make_policy(f"{module}:P", env)
    assert str(tmp_path) not in sys.path        # the import's own path entry is taken back


def test_a_policy_written_as_a_file_or_with_a_dot_is_told_its_module_attribute_form(
        tmp_path: Path, monkeypatch, env) -> None:
    """`pol/rules.py:X` and `./mine.py:X` were "unknown baseline", and `mine.X` got no "did you
    mean mine:X": each now says the form meant, found without importing (running) the module."""
    from agents.config import ConfigError, EvalConfig

    monkeypatch.chdir(tmp_path)
    policy = "class P:\n    def predict(self, obs, state=None, episode_start=None, " \
             "deterministic=True):\n        return [0, 1, 1], state\n"
    (tmp_path / "pkg_dotform").mkdir()
    (tmp_path / "pkg_dotform" / "__init__.py").write_text("")
    (tmp_path / "pkg_dotform" / "rules.py").write_text(policy)
    (tmp_path / "mine_dotform.py").write_text(policy)
    form = ("(a module is named by its dotted import name, importable from the working "
            "directory or sys.path, not by its file")
    for name, meant in (("pkg_dotform/rules.py:P", "pkg_dotform.rules:P"),
                        ("./mine_dotform.py:P", "mine_dotform:P")):
        with pytest.raises(ValueError) as caught:
            make_fixed_policy(name, env, "baseline")
        assert str(caught.value).startswith(f"unknown baseline '{name}' {form}: write "
                                            f"'{meant}'); valid names: "), caught.value
    with pytest.raises(ValueError, match=re.escape(f"unknown baseline '/abs/mine_dotform.py:P' "
                                                   f"{form}); valid names: ")):
        make_fixed_policy("/abs/mine_dotform.py:P", env, "baseline")
    for name, meant in (("mine_dotform.P", "mine_dotform:P"),
                        ("pkg_dotform.rules.P", "pkg_dotform.rules:P")):
        with pytest.raises(ValueError, match=re.escape(f"unknown agent '{name}' (did you mean "
                                                       f"'{meant}'?); valid names: ")):
            make_policy(name, env)
        with pytest.raises(ConfigError, match=re.escape(f"got '{name}' (did you mean "
                                                        f"'{meant}'?); or one of yours")):
            EvalConfig(online_agents=[name]).validate()
    assert "pkg_dotform" not in sys.modules and "mine_dotform" not in sys.modules   # nothing ran
    with pytest.raises(ValueError, match=r"^unknown agent 'nowhere_dotform\.P'; valid names: "):
        make_policy("nowhere_dotform.P", env)     # no such module: no guess
    try:
        assert make_fixed_policy("pkg_dotform.rules:P", env, "baseline")   # the form told works
    finally:
        for module in ("pkg_dotform", "pkg_dotform.rules"):
            sys.modules.pop(module, None)


def test_a_module_already_imported_under_the_name_is_named_by_its_file(tmp_path: Path,
                                                                     monkeypatch, env) -> None:
    """random.py in the working directory: Python's own random, imported already, is the one
    taken; 'random has no attribute P' did not say which random that was."""
    import random

    monkeypatch.chdir(tmp_path)
    (tmp_path / "random.py").write_text("P = 1\n")
    with pytest.raises(ValueError, match=r"random \(" + re.escape(random.__file__)
                       + r"\) has no attribute 'P'"):
        make_policy("random:P", env)


def test_evaluate_puts_your_policy_in_the_tables_beside_the_baselines(user_module: str,
                                                                      tmp_path: Path) -> None:
    main = load_main("evaluate.py")
    out = tmp_path / "results"
    (tmp_path / "runs").mkdir()
    name = f"{user_module}:ShortestQueue"
    assert main(["--runs", str(tmp_path / "runs"), "--out", str(out), "--episodes", "1",
                 "--episode-tasks", "30", "--seeds", "2", "--baselines", "all-gpu", name,
                 "--no-online", "--no-progress-bar"]) == 0
    rows = {row["agent"]: row for row in csv.DictReader((out / "summary.csv").open())}
    assert set(rows) == {"all-gpu", name}
    # the mean over the two held-out seeds is the policy's own, measured here by hand
    env = gym.make("envs:InferenceAlloc-v0", scenario="article", episode_tasks=30)
    mod = sys.modules[user_module]
    by_hand = np.concatenate([episode_latencies(mod.ShortestQueue(), env, seed=s)
                              for s in (10000, 10001)])
    mean_column = next(k for k in rows[name] if k.startswith("mean"))
    assert float(rows[name][mean_column]) == pytest.approx(by_hand.mean(), rel=1e-3)


def test_evaluate_refuses_a_missing_policy_before_writing_anything(tmp_path: Path, monkeypatch,
                                                                   capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    main = load_main("evaluate.py")
    assert main(["--runs", "runs", "--out", "results", "--baselines", "heft", "nowhere_xyz:P",
                 "--no-online", "--no-progress-bar"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no module named 'nowhere_xyz'" in err
    assert not (tmp_path / "results").exists()
    # one of our names mistyped with a colon is pointed to here too, as a baseline's
    assert main(["--runs", "runs", "--out", "results", "--baselines", "heft:calibrated",
                 "--no-online", "--no-progress-bar"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "baseline: policy 'heft:calibrated': no module named" in err
    assert err.endswith("(did you mean 'heft-calibrated'?)\n")


def test_the_zip_of_a_policy_class_of_yours_is_refused_naming_the_class_to_evaluate(
        user_module: str, tmp_path: Path, capsys, monkeypatch) -> None:
    """A Policy subclass of yours saves, but only ours load back by name: --models said
    "unknown saved policy 'policy'", the base class's name, and not what to do instead. The
    class the zip records is what --baselines then takes."""
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(user_module)
    path = module.StreamSeeded().save(tmp_path / "mine.zip")
    main = load_main("evaluate.py")
    assert main(["--models", str(path), "--out", "results", "--no-online",
                 "--no-progress-bar"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown saved policy 'policy'" in err
    assert err.rstrip().endswith(f"evaluate a policy of yours by its class, as --baselines "
                                 f"{user_module}:StreamSeeded")
    assert not (tmp_path / "results").exists()
    assert main(["--baselines", f"{user_module}:StreamSeeded", "--out", "results", "--seeds",
                 "1", "--episode-tasks", "5", "--no-online", "--no-progress-bar"]) == 0


def test_a_zip_without_an_importable_class_is_told_the_pattern(tmp_path: Path) -> None:
    """A class of a script run as __main__ (or a zip saved before the class was recorded)
    names no module to import: the hint gives the pattern."""
    from agents.registry import load_policy

    env = gym.make("envs:InferenceAlloc-v0", scenario="article", episode_tasks=5)
    for saved, said in [({"name": "mine", "config": {}, "class": "__main__:Mine"},
                         "as --baselines <module>:<attribute> (it was saved from a script "
                         "run as __main__: name the class by its module)"),
                        ({"name": "mine", "config": {}}, "as --baselines <module>:<attribute>")]:
        path = tmp_path / "m.zip"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("policy.json", json.dumps(saved))
        with pytest.raises(ValueError) as info:
            load_policy(path, env)
        assert str(info.value).endswith(said)


def test_train_takes_your_policy_as_the_conservative_one(user_module: str,
                                                         tmp_path: Path) -> None:
    from agents.config import ConfigError, TrainConfig
    from agents.run_plan import plan

    cfg = TrainConfig(conservative=f"{user_module}:on_cpu", log_dir=str(tmp_path / "r"))
    assert len(plan(cfg)) == 2
    # a warm-up run acts with it: a policy written for one observation (OnDevice answers one
    # action to the VecEnv's batch of one) failed deep in PPO's update
    main = load_main("train.py")
    assert main(["--conservative", f"{user_module}:on_cpu", "--warmup", "conservative",
                 "--timesteps", "80", "--hp", "n_steps=16", "batch_size=16",
                 "--log-dir", str(tmp_path / "runs"), "--no-progress-bar",
                 "--eval-tasks", "20", "--checkpoint-interval", "0"]) == 0
    assert len(list((tmp_path / "runs").glob("*ppo-warm*/model.zip"))) == 1
    # in worker processes too: the check for policies that read the live env built it on a
    # VecEnv, and OnDevice's constructor, reading the env's devices, failed with a traceback
    assert len(plan(dataclasses.replace(cfg, vec_env="subproc", n_envs=2))) == 2
    with pytest.raises(ConfigError, match="no module named 'nowhere_xyz'"):
        plan(TrainConfig(conservative="nowhere_xyz:P", log_dir=str(tmp_path / "r")))
    # without warm-up too, as any name no policy has (the config reused with warm-up on failed
    # only then); one of the other env is a name, left be, as heft-split is
    with pytest.raises(ConfigError, match="no module named 'nowhere_xyz'"):
        plan(TrainConfig(conservative="nowhere_xyz:P", warmup=["none"], log_dir=str(tmp_path / "r")))
    assert len(plan(TrainConfig(conservative=f"{user_module}:EvenSplit", warmup=["none"],
                                log_dir=str(tmp_path / "r")))) == 1


def test_dqns_warm_up_builds_your_conservative_on_the_env_in_its_own_actions(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """A conservative of yours that loads a PPO model of InferenceAlloc-v0 onto the env it is
    given (PPO.load(zip, env=env)): train.py's check built it on the env, but DQN's warm-up on
    FlatDiscreteActions' Discrete(27), and SB3 refused the load inside the run with a traceback
    ('Action spaces do not match'). It is built on the env in its own actions, as ours are,
    and the warm-up maps its device ids onto DQN's index."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from agents.sb3_factory import FlatDiscreteActions
    from agents.warmup import own_actions_env

    model_zip = tmp_path / "ppo.zip"
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=20)
    PPO("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=1, seed=0).learn(16).save(model_zip)
    source = f"""
        from stable_baselines3 import PPO


        def from_zip(env):
            return PPO.load({str(model_zip)!r}, env=env)
        """
    with module_in_cwd(source, "zipped", tmp_path, monkeypatch) as module:
        name = f"{module}:from_zip"
        assert load_main("train.py")([
            "--agents", "dqn", "--warmup", "all", "--conservative", name, "--timesteps", "40",
            "--clone-samples", "50", "--eval-tasks", "0", "--checkpoint-interval", "0",
            "--log-dir", str(tmp_path / "runs"), "--no-progress-bar"]) == 0
        assert "Traceback" not in capsys.readouterr().err
        assert len(list((tmp_path / "runs").glob("*dqn-warm*/model.zip"))) == 1
        # built as a run builds it (on the first sub-env, behind DQN's wrapper and a Monitor),
        # it acts as the saved model does
        first = Monitor(FlatDiscreteActions(gym.make("envs:InferenceAlloc-v0", episode_tasks=20)))
        agent = make_sb3("dqn", first, seed=0, vec_env=DummyVecEnv([lambda: first]),
                         warmup=WarmupConfig(conservative=name, clone=False, guard=False))
    obs, _ = first.reset(seed=3)
    expected, _ = PPO.load(model_zip).predict(obs, deterministic=True)
    np.testing.assert_array_equal(agent.warmup.actions(obs[None]), expected[None])
    assert own_actions_env(first) is first.env.env      # DQN's wrapper left out
    other = Monitor(env)
    assert own_actions_env(other) is other              # a PPO's env, as it is


def test_a_resume_from_another_folder_names_the_missing_module(user_module: str, tmp_path: Path,
                                                               monkeypatch, capsys) -> None:
    """A run's config.yaml names its conservative policy as given: resumed where the module
    is not found, the warm-up's rebuild of it failed with a traceback."""
    main = load_main("train.py")
    runs = tmp_path / "runs"
    assert main(["--conservative", f"{user_module}:on_cpu", "--warmup", "conservative",
                 "--timesteps", "32", "--hp", "n_steps=16", "batch_size=16", "--log-dir",
                 str(runs), "--no-progress-bar", "--eval-tasks", "0"]) == 0
    (run,) = runs.iterdir()
    saved = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    sys.modules.pop(user_module, None)      # a new process would not have it
    capsys.readouterr()
    assert main(["--resume", "--log-dir", str(runs), "--timesteps", "64",
                 "--no-progress-bar"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no module named '{user_module}'" in err
    assert str(elsewhere) in err and run.name in err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == saved


def test_a_policy_that_reads_its_live_env_cannot_act_for_several_envs(user_module: str,
                                                                     tmp_path: Path) -> None:
    """reads_live_env: it decides from the one env it was built with, so it answers the rows
    of n envs from that env's task. The oracle's own predict refuses a batch; one of yours,
    answered row by row, was taken for --n-envs 2 as for --vec-env subproc it is not."""
    from agents.config import ConfigError, TrainConfig
    from agents.run_plan import plan

    cfg = TrainConfig(conservative=f"{user_module}:LiveCurrentDevice",
                      log_dir=str(tmp_path / "r"))
    assert len(plan(cfg)) == 2
    with pytest.raises(ConfigError, match=r"LiveCurrentDevice cannot act for --n-envs 2 envs at "
                                          r"once \(policy '[\w:]+' reads the live env's current "
                                          r"task \(reads_live_env\), so it takes one observation "
                                          r"or a batch of one, got a batch of 2\)"):
        plan(dataclasses.replace(cfg, n_envs=2))
    with pytest.raises(ConfigError, match=r"LiveCurrentDevice cannot act for --vec-env subproc"):
        plan(dataclasses.replace(cfg, vec_env="subproc"))
    # without a conservative phase or a guard it only clones, on one env
    assert len(plan(dataclasses.replace(cfg, n_envs=2, warmup=["clone"]))) == 1


@pytest.mark.parametrize(("attribute", "refusal"), [
    ("TwoStages", "action must have shape (3,)"),
    ("FarDevice", "action entries must be device ids in 0..2"),
    # no (action, state) pair: the bare unpacking error named no policy, and an int action
    # alone ('cannot unpack non-iterable int object') was a TypeError traceback
    ("ActionAlone", "its predict() failed on a first task: policy '{name}': predict() must "
                    "return (action, state) as Stable-Baselines3's does, got array([0, 0, 0])"),
    ("FlatIndexAlone", "its predict() failed on a first task: policy '{name}': predict() must "
                       "return (action, state) as Stable-Baselines3's does, got 0"),
])
def test_a_policy_whose_actions_the_env_refuses_is_refused_before_anything_runs(
        user_module: str, tmp_path: Path, monkeypatch, capsys, attribute: str,
        refusal: str) -> None:
    """As a conservative policy it failed deep in a run (a warm-up without cloning: 'zip()
    argument 2 is shorter than argument 1', or torch's Categorical support), as a baseline with
    the env's traceback once evaluate.py's models had run, neither naming the policy."""
    from agents.config import ConfigError, TrainConfig
    from agents.run_plan import plan

    name = f"{user_module}:{attribute}"
    refusal = refusal.format(name=name)
    for warmup in ("conservative", "all"):
        with pytest.raises(ConfigError, match=re.escape(name) + ".*" + re.escape(refusal)):
            plan(TrainConfig(conservative=name, warmup=[warmup], log_dir=str(tmp_path / "r")))
    (tmp_path / "runs").mkdir()
    capsys.readouterr()
    assert load_main("evaluate.py")(["--runs", "runs", "--out", "results", "--baselines", "heft",
                                     name, "--no-online", "--no-progress-bar"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"baseline {name}" in err and refusal in err
    assert not (tmp_path / "results").exists()


def test_a_split_env_conservative_answering_device_ids_is_checked_as_the_warm_up_hands_them(
        user_module: str, tmp_path: Path) -> None:
    """The warm-up hands device ids on one-hot in the Split env's Box, and so does the check
    of its first action: ids it takes are taken, and ids past the devices (or below 0) are one
    line naming the policy, as in the discrete env. One-hot, 7 was an IndexError traceback
    ('index 7 is out of bounds for axis 2'), and -1 the last device, silently."""
    from agents.config import ConfigError, TrainConfig
    from agents.run_plan import plan

    def config(attribute: str) -> TrainConfig:
        return TrainConfig(env_id="InferenceAllocSplit-v0", agents=["ppo"], warmup=["all"],
                           conservative=f"{user_module}:{attribute}", log_dir=str(tmp_path / "r"))

    assert len(plan(config("SplitDeviceIds"))) == 1
    for attribute, ids in (("SplitFarDevice", "[7, 7, 7]"), ("SplitBelowDevices", "[-1, -1, -1]")):
        with pytest.raises(ConfigError, match=re.escape(
                f"--conservative policy {user_module}:{attribute}: the env refuses its action on "
                f"a first task: action entries must be device ids in 0..2, got {ids}")):
            plan(config(attribute))


class Counter:
    """A stateful policy of one observation: its state counts the steps since its episode
    started, and its action is that count (at most 2) on every stage."""

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        count = 0 if state is None or bool(episode_start) else state
        return np.full(3, min(count, 2)), count + 1


def test_each_row_of_a_batch_keeps_its_own_state_and_episode_start() -> None:
    """A batch's rows are the streams of several envs. Each row was handed the state the row
    before it returned, and the whole batch's episode starts: row 1 counted on from row 0's
    steps, and a start in one env restarted none (an array of several is not one bool)."""
    from agents.imported import OneAtATime, RowStates

    policy = OneAtATime(Counter())
    obs = np.zeros((2, 4), dtype=np.float32)
    actions, state = policy.predict(obs, None, np.array([True, True]))
    assert actions[:, 0].tolist() == [0, 0] and isinstance(state, RowStates)
    actions, state = policy.predict(obs, state, np.array([False, False]))
    assert actions[:, 0].tolist() == [1, 1] and list(state) == [2, 2]
    actions, state = policy.predict(obs, state, np.array([False, True]))   # env 1 restarts
    assert actions[:, 0].tolist() == [2, 0] and list(state) == [3, 1]
    # one observation is the policy's own call, its state its own
    action, one = policy.predict(obs[0], 5, False)
    assert action.tolist() == [2, 2, 2] and one == 6
    # a stateless policy's batch state stays None, as SB3's feed-forward policies return
    stateless = OneAtATime(make_policy("all-gpu", gym.make("envs:InferenceAlloc-v0")))
    assert stateless.predict(obs, None, np.array([True, False]))[1] is None


class Tally:
    """A stateful policy of one observation whose state is a pair, as a recurrent policy's
    (h, c) is: the steps counted since its episode started, and a tag. An all-zero observation
    (an idle env) it does not count: no state. Its action is the count (at most 2)."""

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        if not np.any(obs):
            return np.zeros(3, dtype=int), None
        count, tag = (0, "new") if state is None or bool(episode_start) else state
        return np.full(3, min(count, 2)), (count + 1, tag)


def test_a_state_or_episode_start_given_for_the_whole_batch_is_each_rows() -> None:
    """Only a batch's own RowStates is split between its rows: a state of the caller's (a
    pair here, as long as the batch) is every row's, and so is one episode start, a bool or
    an array of one. States of a batch of another size are no row's own: with every env
    starting anew, each row starts afresh."""
    from agents.imported import OneAtATime

    policy = OneAtATime(Tally())
    two = np.ones((2, 4), dtype=np.float32)
    actions, state = policy.predict(two, (1, "mine"), np.array([False, False]))
    assert actions[:, 0].tolist() == [1, 1] and list(state) == [(2, "mine"), (2, "mine")]
    for start in (True, np.array([True])):
        actions, restarted = policy.predict(two, state, start)
        assert actions[:, 0].tolist() == [0, 0] and list(restarted) == [(1, "new")] * 2
    actions, _ = policy.predict(np.ones((3, 4), dtype=np.float32), state, np.ones(3, bool))
    assert actions[:, 0].tolist() == [0, 0, 0]


def test_a_row_without_a_state_leaves_the_other_rows_theirs() -> None:
    """A batch's state was None only where every row's is: an idle env's None (row 0) would
    have dropped the count of the busy env beside it."""
    from agents.imported import OneAtATime

    policy = OneAtATime(Tally())
    obs = np.array([[0, 0, 0, 0], [1, 1, 1, 1]], dtype=np.float32)
    _, state = policy.predict(obs, None, np.array([True, True]))
    actions, state = policy.predict(obs, state, np.array([False, False]))
    assert actions[:, 0].tolist() == [0, 1] and list(state) == [None, (2, "new")]


class Rotating:
    """A stateful policy whose state is its own step count within the episode, (device of
    every stage) = count % 3: what it does on a task depends on the state handed back."""

    def __init__(self) -> None:
        self.starts: list[int] = []     # the step indices (over the stream) that began episodes
        self.steps = 0

    def predict(self, obs, state=None, episode_start=None, deterministic=True):
        if episode_start is not None and bool(np.all(episode_start)):
            self.starts.append(self.steps)
            state = 0
        self.steps += 1
        count = 0 if state is None else state
        return np.full(3, count % 3), count + 1


def test_evaluation_rollouts_and_cloning_hand_a_policy_back_its_state_and_episode_starts(
        ) -> None:
    """episode_latencies, the online harness's rollout and behaviour cloning's collection
    called predict(obs) alone: a policy keeping its memory in its state (an LSTM's; Rotating)
    got None every time, and acted on every task as on an episode's first."""
    from agents.cloning import collect
    from agents.imported import OneAtATime
    from agents.online import rollout

    env = gym.make("envs:InferenceAlloc-v0", scenario="article", episode_tasks=6)
    base = env.unwrapped
    by_hand = []
    for seed in (10000, None):
        base.reset(seed=seed)
        for count in range(6):
            info = base.step(np.full(3, count % 3))[-1]
            by_hand.append(info["latency"])
    policy = Rotating()
    assert episode_latencies(policy, env, 10000, episodes=2).tolist() == by_hand
    assert policy.starts == [0, 6]                    # each episode's first task, alone
    policy = Rotating()
    assert [i["latency"] for i in rollout(policy, env, 6, 10000)] == by_hand[:6]
    assert policy.starts == [0]
    policy = Rotating()
    data = collect(env, OneAtATime(policy), 12, gamma=0.9, seed=10000)
    assert data["actions"][:, 0].tolist() == [0, 1, 2, 0, 1, 2] * 2 and policy.starts == [0, 6]


def test_a_policy_is_handed_its_state_across_episodes_as_sb3_hands_it() -> None:
    """SB3's evaluate_policy keeps handing a model the state it returned, a new episode
    flagged by episode_start alone (the model resets what it resets): one counting over the
    stream (across its episodes) keeps its count."""
    from agents.base import StreamActor

    given = []

    class Counter:
        def predict(self, obs, state=None, episode_start=None, deterministic=True):
            given.append((state, bool(episode_start[0])))
            return np.zeros(3, dtype=np.int64), (state or 0) + 1

    actor = StreamActor(Counter())
    actor.act(None), actor.act(None)
    actor.new_episode()
    actor.act(None)
    assert given == [(None, True), (1, False), (2, True)]
