"""The user's docs (the README and the guides it hands its detail to) say what the project does:
their Python examples run as printed, and the figures, defaults, flags and tags they quote are
read back from the code, so that an edit to either side alone fails here."""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import io
import itertools
import re
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# the README and the guides it hands its detail to: one manual, split by topic, read as one
MANUAL = (README, ROOT / "docs" / "USAGE.md", ROOT / "docs" / "WORKLOADS.md",
          ROOT / "docs" / "EXTENDING.md")


def _manual() -> str:
    return "\n\n".join(doc.read_text(encoding="utf-8") for doc in MANUAL)


BLOCKS = [(f"{doc.name} python block {index}", block) for doc in MANUAL
          for index, block in enumerate(re.findall(r"```python\n(.*?)```",
                                                   doc.read_text(encoding="utf-8"), re.S))]


def test_the_manual_has_its_python_examples():
    assert len(BLOCKS) >= 6
    assert any(name.startswith("README.md") for name, _ in BLOCKS)


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=lambda index: BLOCKS[index][0])
def test_a_readme_example_runs(index):
    name, block = BLOCKS[index]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, name, "exec"), {})
    ratio = re.search(r"vs best-static: ([\d.]+)", out.getvalue())
    if ratio is not None:   # the own-policy example: a ratio a queue-aware rule keeps below 1
        assert 0.0 < float(ratio.group(1)) < 1.0, out.getvalue()
        assert "'samples_to_stabilise'" in out.getvalue()


def test_the_readmes_glm_9b_weight_size_is_the_models():
    """The hardware example sizes a device's memory against the glm-9b weights it states; the
    figure is the model's (a shape edit that changed it would leave the README's advice wrong)."""
    from inference.model_config import get_model
    stated = re.search(r"glm-9b: ([\d.]+e\d+)\)", _manual())
    assert stated is not None
    assert float(stated.group(1)) == float(f"{get_model('glm-9b').weight_bytes:.2e}")


def test_ci_and_contributing_run_the_readmes_test_command():
    """CI runs the README's test command, and CONTRIBUTING.md names it: a flag added to one (as
    `-n auto`, the workers) and not the others would test the suite one way and document another."""
    root = README.parent
    (command,) = re.findall(r"^# set-up \+ the tests.*\n.*&& (python -m pytest[^\n]*)$",
                            README.read_text(encoding="utf-8"), re.M)
    assert command in (root / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert re.search(rf"^{re.escape(command)} +# the README's test command$",
                     (root / "CONTRIBUTING.md").read_text(encoding="utf-8"), re.M)


# ---- figures and defaults the manual's prose quotes -------------------------------------------
# Each is read from the manual and compared with what the project loads, so that an edit to
# either side alone fails here (measured figures, which need minutes of training, are not).

def _text() -> str:
    return " ".join(_manual().split())


def _quoted(pattern: str) -> list[str]:
    """The groups of `pattern` in the manual's whitespace-collapsed text; fails if it is gone."""
    match = re.search(pattern, _text())
    assert match is not None, f"the README and its guides no longer read {pattern!r}: update this test"
    return list(match.groups())


def _yaml_example(intro: str) -> list[str]:
    """The lines of the ```yaml block right after the paragraph that starts with `intro`."""
    text = _manual()
    block = re.search(re.escape(intro) + r"[^\n]*\n+```yaml\n(.*?)```", text, re.S)
    assert block is not None, f"the manual has no YAML example after {intro!r}"
    return block.group(1).splitlines()


def _scenario_comments() -> dict[tuple[str, ...], str]:
    """The scenario example's comment on each field's line (after its `#`), keyed by the
    field's path (`workload`, `arrival_rate`)."""
    comments: dict[tuple[str, ...], str] = {}
    section: tuple[str, ...] = ()
    for line in _yaml_example("A scenario ("):
        field = re.match(r"(\s*)(\w+):\s*(.*)", line)
        if field is None:
            continue        # a comment's continuation line, or a fault's list entry
        indent, key, rest = field.groups()
        path = (*section, key) if indent else (key,)
        comments[path] = rest.partition("#")[2]
        if not indent:
            section = (key,)
    return comments


def _scenario_defaults() -> dict[tuple[str, ...], str]:
    """The scenario example's `# (default)` notes, keyed by the field's path; a field without
    a note maps to ''."""
    notes = {path: re.match(r"\s*\(([^)]*)\)", comment)
             for path, comment in _scenario_comments().items()}
    return {path: note.group(1) if note else "" for path, note in notes.items()}


def test_the_readmes_scenario_example_gives_every_field_and_the_loaders_defaults():
    from dataclasses import fields, is_dataclass

    from envs.scenario import Distribution, Scenario, scenario_from_dict

    loaded = scenario_from_dict({}, "chat.yaml")     # every field left to its default
    notes = _scenario_defaults()
    schema = {(f.name,) for f in fields(Scenario)} - {("source",)}
    for f in fields(Scenario):
        value = getattr(loaded, f.name)
        if is_dataclass(value):
            schema |= {(f.name, g.name) for g in fields(value)}
    assert schema <= set(notes), f"README's scenario example lacks {sorted(schema - set(notes))}"
    sections = {(path[0],) for path in notes if len(path) == 2}   # workload:, cache:, ...
    for path, note in notes.items():
        if path in sections or path == ("description",):     # description: free text
            continue
        assert note, f"README's scenario example gives {'.'.join(path)} no (default)"
        value = loaded
        for part in path:
            value = getattr(value, part)
        where = f"README's scenario example: {'.'.join(path)} ({note})"
        if note == "none":
            assert value in (None, ()), f"{where}; the loader's default is {value!r}"
        elif note == "the file's name":
            assert value == "chat", f"{where}; the loader names it {value!r}"
        elif isinstance(value, Distribution):
            assert (value.dist, value.value) == ("constant", float(note)), f"{where}; {value!r}"
        elif isinstance(value, (int, float)):
            assert float(note) == value, f"{where}; the loader's default is {value!r}"
        elif isinstance(value, tuple):      # a pair, [a, b] as YAML writes it
            assert yaml.safe_load(note) == list(value), f"{where}; the loader's default is {value!r}"
        else:
            assert note == value, f"{where}; the loader's default is {value!r}"


def _hardware_example() -> tuple[dict, dict[tuple[str, ...], str]]:
    """The README's hardware example as loaded, and each key's comment, keyed by its path
    (`disk_bandwidth`, `devices`/`memory_domain`: a device's, `links`/`latency`: a link's)."""
    from inference.yamlio import safe_load

    lines = _yaml_example("A hardware profile (")
    comments: dict[tuple[str, ...], str] = {}
    section: tuple[str, ...] = ()
    for line in lines:
        field = re.match(r"(\s*)(?:- )?\{?(\w+):[^#]*#?(.*)", line)
        if field is None:
            continue        # a comment's continuation line
        indent, key, comment = field.groups()
        if not indent:
            section = (key,)
            comments[section] = comment
        elif line.lstrip().startswith("- {"):                  # a link, one mapping a line
            comments.update({(*section, k): comment for k in re.findall(r"(\w+):", line)})
        else:
            comments[(*section, key)] = comment
    return safe_load("\n".join(lines)), comments


def test_the_readmes_hardware_example_gives_every_field_and_the_loaders_defaults():
    """CONTRIBUTING.md: "the README's hardware example lists every field", as the scenario
    example is held to: each key the loader takes is in it; completed with the server's CPU
    (which its link names, "the other devices"), it loads; each field its comments call
    optional loads without it, at the default they give, and every other one is required."""
    import copy

    from inference import hardware
    from inference.hardware import OP_CLASSES, PATTERNS, hardware_from_dict
    from inference.yamlio import safe_load

    raw, comments = _hardware_example()
    device = raw["devices"][0]
    assert sorted(raw) == sorted(hardware._HARDWARE_KEYS)
    assert sorted(device) == sorted(hardware._DEVICE_KEYS)
    assert sorted(raw["links"][0]) == sorted(hardware._LINK_KEYS)
    assert sorted(device["op_efficiency"]) == sorted(OP_CLASSES)
    assert sorted(device["pattern_efficiency"]) == sorted(device["cache_hit_rate"]) \
        == sorted(PATTERNS)
    true_fields = _quoted(r"`true_figures` may set ((?:`\w+`,? )+and `\w+`)")[0]
    assert sorted(re.findall(r"`(\w+)`", true_fields)) == sorted(hardware._TRUE_FIELDS)
    server = safe_load((hardware.PRESET_DIR / "server.yaml").read_text(encoding="utf-8"))
    raw["devices"].append(next(d for d in server["devices"] if d["name"] == "cpu"))
    loaded = hardware_from_dict(raw, "two-gpu.yaml")
    assert loaded.devices[0].memory_domain == device["memory_domain"]
    for path, comment in comments.items():
        if path in (("devices",), ("links",)):
            continue
        without = copy.deepcopy(raw)
        parent = without["devices"][0] if path[0] == "devices" else \
            without["links"][0] if path[0] == "links" else without
        del parent[path[-1]]
        where = f"README's hardware example: {'.'.join(path)} ({comment.strip()})"
        if "optional" not in comment:
            with pytest.raises(ValueError, match=path[-1]):
                hardware_from_dict(without, "two-gpu.yaml")
            continue
        default = hardware_from_dict(without, "two-gpu.yaml")
        stated = re.search(r"\(default:? ([^)]*)\)", comment)
        if stated is None:      # optional, no default stated: true_figures, source
            continue
        shipped = default.name if path == ("name",) else getattr(default.devices[0], path[-1])
        words = {"the path as given": "two-gpu.yaml", "the name": device["name"]}
        note = stated.group(1)
        expected = words[note] if note in words else float(note)
        assert shipped == expected, f"{where}; the loader's default is {shipped!r}"


def _range_holds(where: str, build, low: float, high: float, low_open: bool = False,
                 whole: bool = False) -> None:
    """`build(value)` takes `low` (or, `low_open`, refuses it) and `high`, and refuses a value
    just past either (by 1 where the values are `whole`): the range the README states for
    `where` is the loader's."""
    below, above = (low - 1, high + 1) if whole else \
        (low * (1 - 1e-3) if low else -1e-3, high * (1 + 1e-3))
    for value, taken in ((low, not low_open), (high, True), (below, False), (above, False)):
        if taken:
            build(value)
        else:
            with pytest.raises(ValueError):
                build(value)
                pytest.fail(f"README: {where} in {low:g}..{high:g}; the loader took {value!r}")


def test_the_readmes_stated_ranges_are_the_loaders():
    """The ranges the README gives a hardware profile's and a scenario's figures are the ones
    their loaders take, bound for bound (each is read from the README)."""
    import copy

    from envs.scenario import scenario_from_dict
    from inference.hardware import PRESET_DIR, hardware_from_dict
    from inference.yamlio import safe_load

    server = safe_load((PRESET_DIR / "server.yaml").read_text(encoding="utf-8"))

    def device(key: str, sub: str | None = None):
        def build(value: float) -> None:
            raw = copy.deepcopy(server)
            parent = raw["devices"][0][key] if sub else raw["devices"][0]
            parent[sub or key] = value
            hardware_from_dict(raw)
        return build

    def link_latency(value: float) -> None:
        raw = copy.deepcopy(server)
        raw["links"][0]["latency"] = value
        hardware_from_dict(raw)

    fraction = float(_quoted(r"fractions in \[([\de.-]+), 1\]")[0])
    _range_holds("op_efficiency", device("op_efficiency", "dense"), fraction, 1.0)
    _range_holds("cache_hit_rate", device("cache_hit_rate", "random"), fraction, 1.0)
    low, high = _quoted(r"\(FLOP/s, bytes/s, bytes\) lie in \[([\de.]+), ([\de.]+)\]")
    for key in ("peak_flops", "mem_bandwidth", "memory"):
        _range_holds(key, device(key), float(low), float(high))
    seconds = float(_quoted(r"`launch_overhead` and link `latency` in \(0, (\d+)\] s")[0])
    _range_holds("launch_overhead", device("launch_overhead"), 0.0, seconds, low_open=True)
    _range_holds("link latency", link_latency, 0.0, seconds, low_open=True)
    setup = float(_quoted(r"`setup_s` in \[0, (\d+)\] s")[0])
    _range_holds("setup_s", device("setup_s"), 0.0, setup)

    def scenario(*path: str, fault: bool = False):
        def build(value: float) -> None:
            raw: dict = {}
            parent = raw
            for part in path[:-1]:
                parent = parent.setdefault(part, {})
            parent[path[-1]] = value
            if fault:
                raw = {"faults": [{"device": "gpu", "kind": "throttle", "factor": value,
                                   "start_task": 0, "end_task": 1}]}
            scenario_from_dict(raw, "chat.yaml")
        return build

    notes = {" ".join(path): note for path, note in _scenario_comments().items()}
    for key, path in (("episode_tasks", ("episode_tasks",)), ("noise", ("noise",)),
                      ("workload arrival_rate", ("workload", "arrival_rate")),
                      ("simulator contention", ("simulator", "contention"))):
        bounds = re.search(r"([\de.-]+)\.\.([\de.]+)", notes[key])
        assert bounds is not None, f"README's scenario example gives {key} no range"
        _range_holds(key, scenario(*path), float(bounds.group(1)), float(bounds.group(2)),
                     whole=key == "episode_tasks")
    decay = re.search(r"in \[([\de.-]+), 1\]", notes["cache decay"])
    assert decay is not None
    _range_holds("cache decay", scenario("cache", "decay"), float(decay.group(1)), 1.0)
    factor = re.search(r"factor: speed, ([\de.-]+)\.\.1", notes["faults"])
    assert factor is not None
    _range_holds("a fault's factor", scenario("factor", fault=True), float(factor.group(1)), 1.0)
    sigma = float(_quoted(r"`lognormal` \(`median` > 0, `sigma` <= (\d+)\)")[0])
    _range_holds("sigma", lambda value: scenario("workload", "batch")(
        {"dist": "lognormal", "median": 8, "sigma": value}), 0.0, sigma)
    low, high = _quoted(r"clamped to `min`\.\.`max` \(([\de.]+)\.\.([\de.]+) by default")
    batch = scenario_from_dict({}, "chat.yaml").workload.batch
    assert (batch.min, batch.max) == (float(low), float(high))


def test_the_readmes_tensorboard_intervals_are_sb3s_log_intervals():
    """train.py passes no `log_interval`, so SB3's defaults set how often the grouped scalars
    are written (the README once said every rollout for all on-policy agents; A2C's is 100)."""
    import inspect

    from agents.sb3_hyperparams import ALGORITHMS, load_hyperparams
    from envs import ENV_IDS

    a2c_every, discrete_steps, split_steps, off_policy_every = _quoted(
        r"PPO, MaskablePPO, TRPO and RecurrentPPO every rollout, A2C every (\d+) rollouts "
        r"\(([\d,]+) steps on "
        r"`InferenceAlloc-v0`, ([\d,]+) on the Split env\), DQN and SAC every (\d+) episodes")

    def interval(agent: str) -> int:
        return inspect.signature(ALGORITHMS[agent].learn).parameters["log_interval"].default

    assert interval("ppo") == interval("maskable-ppo") == interval("trpo") == 1
    assert interval("recurrent-ppo") == 1
    assert interval("a2c") == int(a2c_every)
    for env_id, steps in zip(ENV_IDS, (discrete_steps, split_steps), strict=True):
        n_steps = load_hyperparams("a2c", env_id, False)["n_steps"]
        assert int(steps.replace(",", "")) == int(a2c_every) * n_steps, (env_id, n_steps)
    assert interval("dqn") == interval("sac") == int(off_policy_every)


def test_the_readmes_trpo_settings_are_its_yamls_in_both_envs():
    """The README's TRPO settings, with which docs/LEARNERS.md's figures were measured: one step
    per rollout of n_steps tasks under target_kl; both envs' sections of trpo.yaml hold them."""
    from agents.sb3_hyperparams import load_hyperparams
    from envs import ENV_IDS

    n_steps, target_kl = _quoted(r"`trpo` is sb3-contrib's TRPO, in both envs: one step per "
                                 r"(\d+)-task rollout, whose KL to the rollout's policy stays "
                                 r"under ([\d.]+)")
    for env_id in ENV_IDS:
        params = load_hyperparams("trpo", env_id)
        assert (params["n_steps"], params["target_kl"]) == (int(n_steps), float(target_kl))


def test_the_readmes_recurrent_ppo_is_ppos_update_on_its_lstm_in_both_envs():
    """docs/LEARNERS.md's RecurrentPPO figures were measured with PPO's values on an LSTM of the
    units the README names: recurrent-ppo.yaml holds them in both envs, cold and warm-started,
    and its policy is the LSTM one."""
    from agents.sb3_hyperparams import load_hyperparams
    from envs import ENV_IDS

    policy, units = _quoted(r"`recurrent-ppo` is sb3-contrib's RecurrentPPO, in both envs: PPO's "
                            r"update \(PPO's values, copied\s+into `recurrent-ppo.yaml`: editing "
                            r"`ppo.yaml` does not change it\) on an LSTM policy \(`(\w+)`, (\d+) "
                            r"units\)")
    for env_id, warm in itertools.product(ENV_IDS, (False, True)):
        params = load_hyperparams("recurrent-ppo", env_id, warm_start=warm)
        kwargs = params.pop("policy_kwargs")
        assert (params.pop("policy"), kwargs.pop("lstm_hidden_size")) == (policy, int(units))
        ppo = load_hyperparams("ppo", env_id, warm_start=warm)
        del ppo["policy"]
        assert {**params, "policy_kwargs": kwargs} == ppo, (env_id, warm)


def test_the_readmes_scenario_list_and_episode_lengths_are_the_presets():
    import envs
    from envs.scenario import load_scenario

    listed = re.findall(r"`([\w-]+)`", _quoted(r"Scenarios \(`envs/scenarios/\*\.yaml`, or your "
                                               r"own YAML\): (.*?)\. Real workloads")[0])
    assert sorted(listed) == envs.scenario_names()
    assert _quoted(r"`(\w+)` \(default\), `long-context`")[0] == "article"
    short, preset, others = _quoted(r"\(the scenario's: (\d+) for `([\w-]+)`, (\d+) for the "
                                    r"other presets\)")
    for name in envs.scenario_names():
        stated = short if name == preset else others
        assert load_scenario(name).episode_tasks == int(stated), (name, stated)


def test_the_readmes_space_sizes_are_the_envs():
    import gymnasium as gym

    from agents.sb3_factory import FlatDiscreteActions
    from inference.hardware import load_hardware

    fixed, per_device = _quoted(r"observation \(`(\d+) \+ (\d+) \* D` entries\)")
    flat = int(_quoted(r"turns the three device ids into `Discrete\((\d+)\)`")[0])
    for hardware in ("server", "edge"):
        devices = len(load_hardware(hardware).devices)
        env = gym.make("envs:InferenceAlloc-v0", hardware=hardware)
        assert env.observation_space.shape == (int(fixed) + int(per_device) * devices,)
        assert FlatDiscreteActions(env).action_space.n == flat == devices ** 3
        env.close()


def test_the_readmes_device_lookup_by_name_finds_the_device_on_hardware_of_another_order(
        tmp_path):
    """Your own policy: the README's constructor line finds the NPU where a hardware file lists
    it elsewhere than third, where an index written in would mean another device."""
    import gymnasium as gym
    import yaml

    from inference.hardware import PRESET_DIR

    (line,) = _quoted(r"\(`(def __init__\(self, env\): [^`]+)`\)")
    namespace: dict = {}
    exec(f"class Rule:\n    {line}\n", namespace)
    raw = yaml.safe_load((PRESET_DIR / "server.yaml").read_text(encoding="utf-8"))
    raw["devices"].reverse()
    (tmp_path / "reversed.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    env = gym.make("envs:InferenceAlloc-v0", hardware=str(tmp_path / "reversed.yaml"))
    assert env.unwrapped.device_names[namespace["Rule"](env).npu] == "npu"
    assert env.unwrapped.device_names[2] != "npu"      # the index the README warns of
    env.close()


def test_the_readmes_cli_defaults_and_article_job_are_the_shipped_ones():
    from agents import article_job
    from agents.config import ARTICLE_SEEDS, EVAL_SEEDS, HELDOUT_SEED, EvalConfig, TrainConfig

    train, evaluation = TrainConfig(), EvalConfig()
    assert int(_quoted(r"`--validation-seed`, (\d+) by default")[0]) == train.validation_seed
    first, seeds, episodes = _quoted(r"held-out seeds (\d+), \d+, \.\.\. \(`--seeds` of them, "
                                     r"(\d+) by default\), `episode_latencies\(policy, env, "
                                     r"seed, episodes=(\d+)\)` each, as `--episodes \3`")
    assert (int(first), int(seeds), int(episodes)) == (HELDOUT_SEED, EVAL_SEEDS,
                                                       evaluation.episodes)
    assert int(_quoted(r"the article's figures, (\d+) held-out seeds")[0]) == ARTICLE_SEEDS
    words = {"five": 5, "six": 6, "seven": 7, "eight": 8}
    points, tasks = _quoted(r"The (\w+) points \(~[\d.]+ s a ([\d,]+)-task episode\)")
    assert words[points] == train.timesteps // train.eval_interval + 1   # step 0 too
    assert int(tasks.replace(",", "")) == train.eval_tasks
    job, clients = _quoted(r"a job of (\d+) `article` requests sent by (\d+) closed-loop clients")
    assert (int(job), int(clients)) == (article_job.JOB_TASKS, article_job.JOB_CLIENTS)
    cap = _quoted(r"`--article-clients K` sends them from K clients, at most the job's (\d+) "
                  r"requests")[0]
    assert int(cap) == article_job.JOB_TASKS
    open_loop, scale = _quoted(r"the open-loop job instead \((\d+) requests, ([\d.]+)x the live "
                               r"rate\)")
    assert int(open_loop) == article_job.OPEN_LOOP_TASKS
    assert float(scale) == article_job.JOB_TIME_SCALE
    placement = _quoted(r"`python -m inference`'s default `--placement ([\w,]+)`")[0]
    assert placement == importlib.import_module("inference.__main__").DEFAULT_PLACEMENT



def test_the_readmes_count_caps_are_the_ones_the_options_refuse_past():
    from agents import config

    n_envs, episodes, clone = _quoted(r"`--n-envs` ([\d,]+), `evaluate.py`'s `--episodes` and "
                                      r"`--seeds` ([\d,]+), `--clone-samples` ([\d,]+)\)")
    assert int(n_envs.replace(",", "")) == config.MAX_N_ENVS
    assert int(episodes.replace(",", "")) == config.MAX_EPISODES == config.MAX_EVAL_SEEDS
    assert int(clone.replace(",", "")) == config.MAX_CLONE_SAMPLES


def test_the_readmes_harnesses_step_the_env_it_says_they_step():
    """The harness the README says steps `env.unwrapped` bypasses a wrapper given with `env`;
    the one it says steps `env` as given shows the policy the wrapper's observations, while
    its best-static and oracle (which refuse an observation outside [0, 1]) run on the bare
    env."""
    import gymnasium as gym
    import numpy as np

    from agents.evaluation import episode_latencies
    from agents.online import deploy

    bare = _quoted(r"`(\w+)` steps `env\.unwrapped`, so a wrapper given with `env` is not applied")
    given = _quoted(r"`(\w+)` steps the policy through `env` as given, its wrappers included")
    beside = _quoted(r"and (best-static and the oracle) beside it on `env\.unwrapped`")
    assert beside == ["best-static and the oracle"]
    runs = {"episode_latencies": lambda policy, env: episode_latencies(policy, env, seed=0),
            "deploy": lambda policy, env: deploy(policy, env, 5, learn=False, seed=0,
                                                 references=True)}

    class Recorder:
        def __init__(self):
            self.seen = []

        def predict(self, obs, state=None, episode_start=None, deterministic=True):
            self.seen.append(np.asarray(obs))
            return np.zeros(3, dtype=np.int64), state

    for name in (*bare, *given):
        env = gym.make("envs:InferenceAlloc-v0", episode_tasks=5)
        wrapped = gym.wrappers.TransformObservation(env, lambda obs: obs - 2.0, None)
        policy = Recorder()
        runs[name](policy, wrapped)
        outside = [bool(np.all(obs < 0.0)) for obs in policy.seen]
        assert outside == [name in given] * 5, name


# ---- the names the docs give: command-line flags and TensorBoard tags -------------------------
# A renamed option or tag left the README's (or docs/'s, CONTRIBUTING.md's) name behind; these read
# each name back from the parsers and from the code that writes the tags.

DOCS = (*MANUAL, ROOT / "docs" / "CALIBRATION.md", ROOT / "docs" / "REWARDS.md",
        ROOT / "docs" / "LEARNERS.md", ROOT / "CONTRIBUTING.md")
# how many commands each writes at least: fewer found means the reading below broke
MIN_COMMANDS = {"README.md": 10, "USAGE.md": 5, "WORKLOADS.md": 3, "EXTENDING.md": 5,
                "CALIBRATION.md": 10, "REWARDS.md": 3, "LEARNERS.md": 3, "CONTRIBUTING.md": 4}
# docs that name no TensorBoard tag (one they name later is checked all the same)
TAGLESS = {"LEARNERS.md"}
COMMAND = re.compile(r"(train\.py|evaluate\.py|python -m inference|bench/bench_\w+\.py)")
FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*")
OTHER_TOOLS = {"--logdir": "tensorboard", "--samples_per_plugin": "tensorboard",
               "--index-url": "pip"}   # the README's, not ours
TAG = re.compile(r"(?<![\w/.-])((?:latency|devices|cache|eval|charts|final|warmup)/[\w*<>]*)")


class _Parser(Exception):
    """Raised in place of parsing: carries the parser a script built."""

    def __init__(self, parser):
        super().__init__()
        self.parser = parser


def _flags_of(parser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _bench_flags(script: Path, monkeypatch) -> set[str]:
    """The flags of a bench script's parser, which its main() builds and parses at once."""
    def caught(self, *args, **kwargs):
        raise _Parser(self)

    spec = importlib.util.spec_from_file_location(f"{script.stem}_flags", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with monkeypatch.context() as patch:
        patch.setattr("argparse.ArgumentParser.parse_args", caught)
        with pytest.raises(_Parser) as built:
            module.main([])
    return _flags_of(built.value.parser)


@pytest.fixture(scope="module")
def command_flags() -> dict[str, set[str]]:
    from agents.config import EvalConfig, TrainConfig
    from agents.config_parsing import build_parser

    flags = {"train.py": _flags_of(build_parser(TrainConfig)),
             "evaluate.py": _flags_of(build_parser(EvalConfig)),
             "python -m inference": _flags_of(
                 importlib.import_module("inference.__main__").build_parser())}
    with pytest.MonkeyPatch.context() as monkeypatch:
        for script in sorted((ROOT / "bench").glob("bench_*.py")):
            flags[f"bench/{script.name}"] = _bench_flags(script, monkeypatch)
    return flags


def _commands(text: str) -> list[tuple[str, str]]:
    """(command, what follows it) for each command a doc writes with its options: a line of a
    ```bash block (to `&&` or `#`) or an inline code span."""
    spans = [part.split("#")[0] for block in re.findall(r"```bash\n(.*?)```", text, re.S)
             for line in block.splitlines() for part in line.split("&&")]
    spans += re.findall(r"`([^`\n]+(?:\n[^`\n]+)?)`", re.sub(r"```.*?```", "", text, flags=re.S))
    found = [COMMAND.search(span) for span in spans]
    return [(m.group(1), m.string[m.end():]) for m in found if m is not None]


def test_every_file_of_docs_is_checked():
    """A guide or measurement file added to docs/ gets the checks below (flags, tags, commands):
    one left out of DOCS would drift from the code unseen."""
    assert sorted((ROOT / "docs").glob("*.md")) == sorted(d for d in DOCS if d.parent.name == "docs")
    assert set(MIN_COMMANDS) == {doc.name for doc in DOCS}


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.name)
def test_every_flag_a_doc_gives_is_one_of_a_command(doc, command_flags):
    text = doc.read_text(encoding="utf-8")
    every = set().union(*command_flags.values())
    unknown = sorted(set(FLAG.findall(text)) - every - set(OTHER_TOOLS))
    assert not unknown, f"{doc.name} gives flags no command takes: {unknown}"
    commands = _commands(text)
    assert len(commands) >= MIN_COMMANDS[doc.name], f"{doc.name}'s commands were not found: {commands}"
    for command, rest in commands:
        wrong = [flag for flag in FLAG.findall(rest) if flag not in command_flags[command]]
        assert not wrong, f"{doc.name}: `{command}{rest}`: {command} takes no {wrong}"


def _written_tags() -> list[str]:
    """The TensorBoard tags the code records: as the literal it writes, or as an f-string's
    pattern (`devices/{d}_share`: `devices/*_share`)."""
    tags = []
    for path in sorted(ROOT.glob("*/*.py")) + sorted(ROOT.glob("*.py")):
        if path.parts[-2] in ("tests", "bench"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                text = "".join(part.value if isinstance(part, ast.Constant) else "*"
                               for part in node.values)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            if TAG.fullmatch(text):
                tags.append(text)
    return tags


@pytest.mark.parametrize("doc", DOCS, ids=lambda doc: doc.name)
def test_every_tensorboard_tag_a_doc_names_is_one_the_code_writes(doc):
    """`latency/per_sample`, a group (`devices/`) or a family (`final/best_*`,
    `devices/<d>_share`): each is, or matches, a tag the callbacks or the trainer record."""
    written = _written_tags()
    assert "latency/per_sample" in written and "devices/*_share" in written, written
    named = set(TAG.findall(doc.read_text(encoding="utf-8")))
    assert "eval/" in named or doc.name in TAGLESS, \
        f"{doc.name}: no tags found ({named}): update this test"
    for tag in sorted(named):
        pattern = re.sub(r"<\w+>|\\\*", ".*", re.escape(tag)) + (".*" if tag.endswith("/") else "")
        assert any(re.fullmatch(pattern, t.replace("*", "x")) for t in written), (
            f"{doc.name} names the TensorBoard tag {tag!r}, which no code writes; written: "
            f"{sorted(set(written))}")


def test_contributings_tensorboard_groups_are_the_ones_the_code_writes():
    """CONTRIBUTING.md's groups for a new scalar: it listed `losses/`, which nothing writes
    (SB3's losses are its own `train/`, TRPO's too), and left out `final/`."""
    row = re.search(r"\| a TensorBoard scalar \|.*\| a group: (.*) \|",
                    (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"))
    assert row is not None, "CONTRIBUTING.md has no TensorBoard scalar row"
    listed = re.findall(r"`(\w+)/`", row.group(1).split("(")[0])    # not SB3's, in brackets
    assert sorted(listed) == sorted({tag.split("/")[0] for tag in _written_tags()})


def test_the_readmes_agents_are_the_ones_train_py_trains_in_the_envs_they_act_in():
    """The Agents section lists the SB3 learners, names the ones that act in one env alone, and
    the env section says which each env takes: a learner added to the registry (trpo) and
    left out of either read as unknown, or as taking one env only."""
    from agents.registry import SB3_NAMES
    from agents.sb3_hyperparams import ALGORITHMS, ONLY_ENV
    from envs import ENV_IDS

    listed = _quoted(r"and the SB3 agents ((?:`[\w-]+`,? )+and `[\w-]+`) \(hyper-parameters")[0]
    assert re.findall(r"`([\w-]+)`", listed) == list(SB3_NAMES) == list(ALGORITHMS)
    split, discrete = _quoted(r"`train.py` and `evaluate.py` take ([\w, ]+) on it, and "
                              r"([\w, ]+) on `InferenceAlloc-v0`")
    for env_id, named in ((ENV_IDS[1], split), (ENV_IDS[0], discrete)):
        classes = {ALGORITHMS[a].__name__ for a in ALGORITHMS if ONLY_ENV.get(a, env_id) == env_id}
        assert set(re.split(r",? and |, ", named)) == classes, env_id


def test_the_readme_names_what_of_a_model_zip_differs_from_process_to_process(tmp_path):
    """docs/USAGE.md's Reproducibility lists what a run twice does not write alike. In a model zip, beside the
    times, SB3 writes each class it names as the text of its attributes, and a function's
    text is its memory address, another in every process: a zip of the same weights compared
    entry by entry, the listed ones left out, differed in those classes, unlisted."""
    import json

    import gymnasium as gym

    from agents.sb3_factory import make_sb3
    from agents.sb3_hyperparams import ALGORITHMS, ONLY_ENV
    from envs import ENV_IDS

    usage = " ".join((ROOT / "docs" / "USAGE.md").read_text(encoding="utf-8").split())
    section = usage.split("## Reproducibility", 1)[1]
    named = set(re.findall(r"`(\w+)`", section))
    for agent in ALGORITHMS:
        env = gym.make(f"envs:{ONLY_ENV.get(agent, ENV_IDS[0])}", episode_tasks=10)
        path = tmp_path / f"{agent}.zip"
        make_sb3(agent, env, seed=0).model.save(path)
        with zipfile.ZipFile(path) as saved:
            data = json.loads(saved.read("data"))
        placed = {key for key, value in data.items()
                  if re.search(r" at 0x[0-9a-f]+", json.dumps(value))}
        assert placed, f"{agent}: no memory address in its zip's data: the test reads nothing"
        assert placed <= named, (f"{agent}'s zip holds memory addresses in {sorted(placed - named)}"
                                 f", which docs/USAGE.md's Reproducibility does not name")


def _whole_commands(cls: type) -> list[tuple[str, list[str]]]:
    """(doc, arguments) of each command of `cls`'s script (train.py or evaluate.py) the docs
    write in full: not a mention of a flag whose value the sentence gives (`train.py --reward`),
    nor `--help`; a `...` (arguments left out) is dropped, the ones given stand."""
    import shlex

    from agents.config import TrainConfig
    from agents.config_parsing import build_parser

    script = "train.py" if cls is TrainConfig else "evaluate.py"
    takes_value = {option for action in build_parser(cls)._actions if action.nargs in (None, "+")
                   and action.option_strings and action.const is None
                   for option in action.option_strings}
    found = []
    for doc in DOCS:
        for command, rest in _commands(doc.read_text(encoding="utf-8")):
            argv = [arg for arg in shlex.split(rest) if arg != "..."]
            if command == script and argv and argv[-1] not in takes_value and "--help" not in argv:
                found.append((doc.name, argv))
    return found


def test_every_train_command_a_doc_gives_passes_train_pys_checks():
    """Each `train.py ...` the docs write gets past the checks train.py makes before any run
    (its options' values, the agents in that env, the warm-up's conservative policy there):
    CALIBRATION.md gave `--conservative heft-split` twice without the Split env it needs,
    which train.py refuses at once. A --resume (which needs a run) and a policy or callback of
    the README's mine.py are parsed alone."""
    from agents.config import ConfigError, TrainConfig
    from agents.config_parsing import parse_config
    from agents.run_plan import plan

    commands = _whole_commands(TrainConfig)
    assert len(commands) >= 15, f"the docs' train.py commands were not found: {commands}"
    for doc, argv in commands:
        try:
            config, _ = parse_config(TrainConfig, argv)
            if config.resume is None and not any("mine:" in arg for arg in argv):
                plan(config)
        except (ConfigError, SystemExit) as exc:
            pytest.fail(f"{doc}: `train.py {' '.join(argv)}` is refused: {exc}")


def test_every_evaluate_command_a_doc_gives_parses():
    from agents.config import ConfigError, EvalConfig
    from agents.config_parsing import parse_config

    commands = _whole_commands(EvalConfig)
    assert len(commands) >= 10, f"the docs' evaluate.py commands were not found: {commands}"
    for doc, argv in commands:
        try:
            parse_config(EvalConfig, argv)
        except (ConfigError, SystemExit) as exc:
            pytest.fail(f"{doc}: `evaluate.py {' '.join(argv)}` is refused: {exc}")
