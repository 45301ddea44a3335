"""InferenceAllocMix-v0 (envs/scenario_mix.py) and train.py / evaluate.py on several scenarios."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml
from gymnasium.utils.env_checker import check_env
from stable_baselines3.common.callbacks import BaseCallback

import envs
from envs import MIX_ENV_ID, load_scenario
from envs.scenario_mix import ScenarioMixEnv


def mix(**kwargs) -> gym.Env:
    kwargs.setdefault("scenarios", ["article", "bursty"])
    kwargs.setdefault("episode_tasks", 5)
    return gym.make(f"envs:{MIX_ENV_ID}", **kwargs)


def rollout(env: gym.Env, seed: int, episodes: int) -> list[tuple[str, list[float]]]:
    """(scenario, latencies) of each episode, every stage on device 1, from reset(seed)."""
    out = []
    for episode in range(episodes):
        _, info = env.reset(seed=seed if episode == 0 else None)
        latencies, done = [], False
        while not done:
            _, _, terminated, truncated, step = env.step(np.array([1, 1, 1]))
            assert step["scenario"] == info["scenario"]
            latencies.append(step["latency"])
            done = terminated or truncated
        out.append((info["scenario"], latencies))
    return out


def test_one_seed_gives_one_trajectory_and_every_scenario_plays() -> None:
    first, again, other = rollout(mix(), 7, 12), rollout(mix(), 7, 12), rollout(mix(), 8, 12)
    assert first == again
    assert first != other
    assert {name for name, _ in first} == {"article", "bursty"}


def test_a_scenario_of_weight_zero_never_plays() -> None:
    played = {name for name, _ in rollout(mix(weights=[0, 1]), 0, 10)}
    assert played == {"bursty"}


@pytest.mark.parametrize("env_id", envs.ENV_IDS)
def test_the_mix_has_its_scenarios_spaces_and_passes_gymnasiums_checker(env_id: str) -> None:
    env = mix(env_id=env_id)
    own = gym.make(f"envs:{env_id}", scenario="bursty")
    assert env.observation_space == own.observation_space
    assert env.action_space == own.action_space
    check_env(env.unwrapped, skip_render_check=True)


def test_a_mix_reads_its_current_episodes_configuration() -> None:
    from agents.static import unwrap_env

    env = mix()
    names = set()
    for seed in range(6):
        _, info = env.reset(seed=seed)
        assert env.unwrapped.scenario.name == info["scenario"]
        assert unwrap_env(env).scenario.name == info["scenario"]
        names.add(info["scenario"])
    assert names == {"article", "bursty"}


@pytest.mark.parametrize(("scenarios", "what"), [
    (["article", "edge"], "hardware figures"),
    (["article", dataclasses.replace(load_scenario("bursty"), variant="glm-5.3")], "variant"),
])
def test_a_mix_of_another_setting_is_refused_in_one_line_naming_both(scenarios, what) -> None:
    with pytest.raises(ValueError, match=rf"scenarios 'article' and '\w+' cannot be mixed: "
                                         rf"their {what} \(article: ") as caught:
        mix(scenarios=scenarios)
    assert "\n" not in str(caught.value)
    # the env's user sets them with its keywords (train.py's, with its options)
    assert str(caught.value).endswith("(hardware= and variant= set them for all)")


@pytest.mark.parametrize("mixed", ["hardware", "variant", "twice"])
def test_train_py_refuses_a_bad_mix_naming_its_own_options(mixed, tmp_path, capsys) -> None:
    """train.py passed on the env's refusals as they were, advising the env's keywords
    (hardware=, weights=) to a user who has --scenario, --hardware and --variant (and no
    weights). No run folder is made."""
    from agents.train_cli import SCRIPT, main

    bursty = str(Path(envs.__file__).parent / "scenarios" / "bursty.yaml")
    other = tmp_path / "b2.yaml"
    other.write_text(Path(bursty).read_text(encoding="utf-8").replace(
        "name: bursty", "name: b2").replace("variant: glm-5.3-flash", "variant: glm-5.3"),
        encoding="utf-8")
    scenarios, message = {
        "hardware": (["article", "edge"], "--scenario 'article' and 'edge' cannot be mixed: "
                     "their hardware figures (article: server; edge: edge) differ"),
        "variant": (["article", str(other)], "--scenario 'article' and 'b2' cannot be mixed: "
                    "their variant (article: glm-5.3-flash; b2: glm-5.3) differ"),
        "twice": (["bursty", bursty], f"--scenario 'bursty' is given twice (as bursty and "
                  f"{bursty}): give each scenario once"),
    }[mixed]
    runs = tmp_path / "runs"
    assert main(["--scenario", *scenarios, "--log-dir", str(runs)], prog=SCRIPT) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{SCRIPT}: error: {message}") and err.count("\n") == 1, err
    if mixed != "twice":
        assert err.endswith("; give scenarios of one hardware, variant and model (--hardware "
                            "and --variant set them for all)\n"), err
    assert "=" not in err
    assert not runs.exists()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"scenarios": "article"}, "scenarios must be a list of two or more"),
    ({"scenarios": ["article"]}, "two or more scenarios"),
    ({"scenarios": ["article", "article"]}, "'article' is given twice"),
    ({"weights": [1]}, "weights must be 2 numbers"),
    ({"weights": [1, -1]}, "finite numbers >= 0"),
    ({"weights": [0, 0]}, "must not all be 0"),
    ({"env_id": "InferenceAlloc-v1"}, "did you mean 'InferenceAlloc-v0'"),
])
def test_bad_mix_arguments_are_refused(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        mix(**kwargs)


def test_the_oracle_and_heft_act_in_every_scenario_of_a_mix() -> None:
    """The oracle reads the live env: built on the mix, it must read the env of the episode
    playing now, not the one current when it was built (whose task it checked the observation
    against, and refused)."""
    from agents import make_policy

    env = mix(reference=True)
    oracle, heft = make_policy("oracle", env), make_policy("heft-calibrated", env)
    played = set()
    for seed in range(6):
        obs, info = env.reset(seed=seed)
        played.add(info["scenario"])
        done = False
        while not done:
            action, _ = oracle.predict(obs)
            assert env.action_space.contains(heft.predict(obs)[0])
            obs, _, _, done, step = env.step(action)
            assert step["placement"] == step["oracle_placement"]
    assert played == {"article", "bursty"}


def test_train_config_takes_one_scenario_as_before_and_several_as_a_list(tmp_path: Path) -> None:
    from agents.config import ConfigError, TrainConfig
    from agents.config_parsing import parse_config, read_yaml_options, to_yaml

    one, _ = parse_config(TrainConfig, ["--scenario", "article"])
    assert one.scenario == "article"
    assert to_yaml(one) == to_yaml(TrainConfig())
    assert "scenario: article\n" in to_yaml(one)
    two, _ = parse_config(TrainConfig, ["--scenario", "article", "bursty"])
    assert two.scenario == ["article", "bursty"]
    path = tmp_path / "c.yaml"
    path.write_text(to_yaml(two), encoding="utf-8")
    assert TrainConfig(**read_yaml_options(TrainConfig, path)) == two
    with pytest.raises(ConfigError, match="--scenario 'article' is given twice"):
        parse_config(TrainConfig, ["--scenario", "article", "article"])
    path.write_text("scenario: [article, [bursty]]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="option scenario must be text"):
        read_yaml_options(TrainConfig, path)


def test_a_run_on_two_scenarios_resumes_and_is_evaluated_on_each(tmp_path: Path) -> None:
    from agents import reporting
    from agents.config import ConfigError, EvalConfig, TrainConfig
    from agents.run_plan import read_run_config
    from agents.run_scores import comparison_table
    from agents.training import train

    runs = tmp_path / "runs"
    config = TrainConfig(scenario=["article", "bursty"], warmup=["none"], timesteps=48,
                         checkpoint_interval=32, log_dir=str(runs), episode_tasks=10,
                         eval_tasks=10, eval_interval=0, progress_bar=False)
    (result,) = train(config, report=lambda line: None)
    assert result.run_dir.name.startswith("InferenceAlloc-v0__ppo__0__")
    saved = read_run_config(result.run_dir / "config.yaml")
    assert saved.scenario == ["article", "bursty"]
    table = comparison_table(config, [result])
    assert table is not None and "scenario article (trained on article, bursty)" in table
    (resumed,) = train(TrainConfig(resume=str(result.run_dir), timesteps=80,
                                   progress_bar=False),
                       {"resume", "timesteps"}, report=lambda line: None)
    assert resumed.steps == 80
    assert read_run_config(result.run_dir / "config.yaml").scenario == ["article", "bursty"]
    out = tmp_path / "results"
    reporting.run(EvalConfig(runs=str(runs), seeds=1, episodes=1, episode_tasks=10,
                             baselines=["best-static"], no_online=True, out=str(out),
                             progress_bar=False), report=lambda line: None)
    rows = (out / "summary.csv").read_text(encoding="utf-8").splitlines()
    assert {tuple(r.split(",")[:2]) for r in rows[1:]} == {
        (s, a) for s in ("article", "bursty") for a in ("ppo", "best-static")}
    with pytest.raises(ConfigError, match="cannot be mixed"):
        train(dataclasses.replace(config, scenario=["article", "edge"]))
    assert sorted(p.name for p in runs.iterdir()) == [result.run_dir.name]


def table_sections(table: str) -> dict[str, dict[str, tuple[str, str]]]:
    """train.py's comparison table as {scenario: {agent: (mean latency, vs best-static)}}, in
    the order of its sections."""
    sections: dict[str, dict[str, tuple[str, str]]] = {}
    for line in table.splitlines():
        if line.startswith("Held-out episode: "):
            rows = sections.setdefault(line.split("scenario ")[1].split(" ")[0].rstrip(","), {})
        elif line.startswith("| ") and not line.startswith("| agent "):
            agent, mean, _, vs = (cell.strip() for cell in line.strip("|").split("|"))
            rows[agent] = (mean, vs)
    return sections


def test_the_table_of_a_mix_run_has_a_section_per_scenario_also_when_resumed(
        tmp_path: Path) -> None:
    """train.py's table of a mix showed the first scenario's held-out episode alone: a policy
    trained on article and bursty went unscored on bursty until evaluate.py. Each scenario's
    section scores the final model and that scenario's baselines on its held-out episode (the
    same --eval-seed and --eval-tasks), against its own best-static; a resume's table too."""
    from agents.config import TrainConfig
    from agents.evaluation import episode_latencies, make_env
    from agents.registry import load_policy, make_policy
    from agents.run_scores import comparison_table
    from agents.training import train

    def expected(run_dir: Path, scenario: str) -> tuple[str, str]:
        env = make_env(scenario=scenario, episode_tasks=12)
        model = episode_latencies(load_policy(run_dir / "model.zip", env), env, 10000)
        static = episode_latencies(make_policy("best-static", env), env, 10000)
        return f"{model.mean():.2f}", f"{model.mean() / static.mean():.3f}"

    config = TrainConfig(scenario=["article", "bursty"], warmup=["none"], timesteps=32,
                         checkpoint_interval=16, log_dir=str(tmp_path), episode_tasks=10,
                         eval_tasks=12, eval_interval=0, progress_bar=False)
    (result,) = train(config, report=lambda line: None)
    resume = TrainConfig(resume=str(result.run_dir), timesteps=48, progress_bar=False)
    for cfg in (config, resume):
        if cfg is resume:       # after the first's checks: it replaces model.zip
            (result,) = train(resume, {"resume", "timesteps"}, report=lambda line: None)
            assert result.steps == 48
        table = comparison_table(cfg, [result])
        assert table is not None
        sections = table_sections(table)
        assert list(sections) == ["article", "bursty"], table
        assert table.count("(trained on article, bursty)") == 2, table
        for scenario, rows in sections.items():
            assert list(rows) == ["ppo", "best-static", "all-gpu", "heft", "heft-calibrated"]
            assert rows["best-static"][1] == "1.000"
            assert rows["ppo"] == expected(result.run_dir, scenario), (scenario, table)
        assert sections["article"]["best-static"] != sections["bursty"]["best-static"]


class SeenScenarios(BaseCallback):
    """The scenarios of the steps a run trained on (``info["scenario"]``, every sub-env's):
    train.py --callbacks names it, and builds it fresh for each run, so it records them in
    `seen`, which the test clears first."""

    seen: set[str] = set()

    def _on_step(self) -> bool:
        SeenScenarios.seen.update(info["scenario"] for info in self.locals["infos"])
        return True


TINY_PPO = ["--hp", "n_steps=16", "batch_size=16", "n_epochs=1"]


@pytest.mark.parametrize(("agent", "options"), [
    ("dqn", []),                                     # behind its FlatDiscreteActions
    ("maskable-ppo", TINY_PPO),                      # asks the mix for its action masks
    ("ppo", ["--env", "split", *TINY_PPO]),          # InferenceAllocSplit-v0 in each scenario
    pytest.param("ppo", ["--vec-env", "subproc", "--n-envs", "2", *TINY_PPO],  # worker processes
                 marks=pytest.mark.slow),        # ~10 s: starting the workers
], ids=["dqn", "maskable-ppo", "split", "subproc"])
def test_train_py_trains_each_kind_of_run_on_a_mix(agent, options, tmp_path, capsys) -> None:
    """A tiny run of each learner, env and vec-env that train.py takes, on article + bursty:
    it trains on both (each step's info), its config.yaml records both, and its table scores
    its model on each scenario's held-out episode."""
    from agents.train_cli import SCRIPT, main

    SeenScenarios.seen.clear()
    runs = tmp_path / "runs"
    assert main(["--agents", agent, "--scenario", "article", "bursty", "--warmup", "none",
                 "--timesteps", "64", "--episode-tasks", "5", "--eval-tasks", "10",
                 "--eval-interval", "0", "--checkpoint-interval", "0", "--log-dir", str(runs),
                 "--no-progress-bar", "--callbacks", f"{__name__}:SeenScenarios", *options],
                prog=SCRIPT) == 0
    assert SeenScenarios.seen == {"article", "bursty"}
    (run,) = runs.iterdir()
    saved = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    assert saved["scenario"] == ["article", "bursty"] and saved["agents"] == [agent]
    split = "split" in options
    assert saved["env_id"] == ("InferenceAllocSplit-v0" if split else "InferenceAlloc-v0")
    sections = table_sections(capsys.readouterr().out)
    assert list(sections) == ["article", "bursty"]
    for rows in sections.values():
        assert rows["best-static"][1] == "1.000"
        assert list(rows)[0] == agent and ("heft-split" in rows) == split


def test_a_mix_trains_with_the_hyperparameters_of_the_env_it_plays_in() -> None:
    from agents.sb3_factory import env_id_of
    from agents.warmup import attach_warmup  # noqa: F401  (imports as training does)

    assert env_id_of(mix(env_id=envs.ENV_IDS[1])) == envs.ENV_IDS[1]
    assert env_id_of(mix()) == envs.ENV_IDS[0]
    assert isinstance(mix().unwrapped, ScenarioMixEnv)
    # the short names and the "envs:" prefix, as train.py's --env and gym.make take them
    for name, env_id in (("split", envs.ENV_IDS[1]), ("discrete", envs.ENV_IDS[0]),
                         (f"envs:{envs.ENV_IDS[1]}", envs.ENV_IDS[1])):
        assert env_id_of(mix(env_id=name)) == env_id


def test_a_refused_reset_leaves_the_mix_as_it_was() -> None:
    """As the scenario env's own: reset(options=...) is refused before anything changes. The
    mix had drawn the next scenario first: a step after the refusal played that scenario's
    episode, one left half-played before (or never started: a RuntimeError), and the draws
    after it were not those of the same mix without the refused call."""
    def play(env: gym.Env, refuse: bool) -> list[str]:
        _, info = env.reset(seed=0)
        played = [info["scenario"]]
        for _ in range(6):
            env.step(np.array([1, 1, 1]))       # each episode left part-played
            if refuse:
                with pytest.raises(ValueError, match="reset\\(\\) takes no options"):
                    env.reset(options={"episode_tasks": 3})
                _, _, _, _, step = env.step(np.array([1, 1, 1]))
                assert step["scenario"] == played[-1]
            _, info = env.reset()
            played.append(info["scenario"])
        return played

    played = play(mix(), refuse=True)
    assert played == play(mix(), refuse=False)
    assert set(played) == {"article", "bursty"}


def test_weights_may_be_a_numpy_array() -> None:
    """np.ones(n) or a probability vector: refused as "must be 2 numbers ... got array([1, 1])"."""
    env = mix(weights=np.array([0.0, 2.0]))
    assert list(env.unwrapped.weights) == [0.0, 1.0]
    assert {name for name, _ in rollout(env, 0, 4)} == {"bursty"}
    with pytest.raises(ValueError, match="weights must be 2 numbers"):
        mix(weights=np.ones((2, 1)))


def test_weights_past_the_float_range_together_weigh_as_their_proportions() -> None:
    """Finite weights summing to inf (1e308 twice) were accepted, each divided by that sum
    to 0, and reset() failed: "probabilities do not sum to 1"."""
    env = mix(weights=[1e308, 1e308])
    assert list(env.unwrapped.weights) == [0.5, 0.5]
    assert rollout(env, 4, 6) == rollout(mix(weights=[1, 1]), 4, 6)
    assert list(mix(weights=[1e308, 0.5e308]).unwrapped.weights) == pytest.approx([2 / 3, 1 / 3])


def test_a_mix_of_scenario_objects_paths_and_numpy_arguments_survives_its_specs_json() -> None:
    """As InferenceAlloc-v0's spec does: the mix's kept its arguments as given, so
    `env.spec.to_json()` failed on a Path or a numpy array of weights, and wrote a Scenario as
    dataclasses.asdict, which the env made from `EnvSpec.from_json` refused."""
    faster = dataclasses.replace(load_scenario("article"), name="article-fast", workload=dataclasses.
                                 replace(load_scenario("article").workload, arrival_rate=0.05))
    bursty = Path(envs.__file__).parent / "scenarios" / "bursty.yaml"
    env = mix(scenarios=[faster, bursty], weights=np.array([1.0, 3.0]), episode_tasks=np.int64(4))
    again = gym.make(gym.envs.registration.EnvSpec.from_json(env.spec.to_json()))
    assert [e.scenario for e in again.unwrapped.envs] == [e.scenario for e in env.unwrapped.envs]
    assert list(again.unwrapped.weights) == [0.25, 0.75]
    played = rollout(env, 3, 6)
    assert played == rollout(again, 3, 6)
    assert {name for name, _ in played} == {"article-fast", "bursty"}


def test_two_scenarios_of_one_name_are_told_apart_from_one_given_twice(tmp_path: Path) -> None:
    """A copy of bursty.yaml with another arrival rate keeps its name: it was refused as
    "'bursty' is given twice", of two scenarios that differ."""
    bursty = load_scenario("bursty")
    faster = dataclasses.replace(bursty, source=str(tmp_path / "fast.yaml"), workload=dataclasses.
                                 replace(bursty.workload, arrival_rate=0.1))
    with pytest.raises(ValueError, match=r"scenarios 2 and 3 are both named 'bursty' \(bursty; "
                                         r".*fast\.yaml\): .*a name of its own") as caught:
        mix(scenarios=["article", "bursty", faster])
    assert "given twice" not in str(caught.value)
    same = str(Path(envs.__file__).parent / "scenarios" / "bursty.yaml")
    with pytest.raises(ValueError, match="'bursty' is given twice"):
        mix(scenarios=["bursty", same])


def test_scenario_weights_draw_the_training_episodes_and_a_resume_may_change_them(
        tmp_path: Path, capsys) -> None:
    """--scenario-weights: a weight of 0 keeps a scenario out of training (its section of the
    table still scores the model there), config.yaml records them, and a resume may change
    them (a curriculum), checked against the run's own scenarios."""
    from agents.train_cli import SCRIPT, main

    runs = tmp_path / "runs"
    common = ["--no-progress-bar", "--callbacks", f"{__name__}:SeenScenarios"]
    SeenScenarios.seen.clear()
    assert main(["--scenario", "article", "bursty", "--scenario-weights", "0", "1",
                 "--warmup", "none", "--timesteps", "48", "--episode-tasks", "5",
                 "--eval-tasks", "10", "--eval-interval", "0", "--checkpoint-interval", "16",
                 "--log-dir", str(runs), *TINY_PPO, *common], prog=SCRIPT) == 0
    assert SeenScenarios.seen == {"bursty"}
    (run,) = runs.iterdir()
    saved = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    assert saved["scenario_weights"] == [0.0, 1.0]
    assert list(table_sections(capsys.readouterr().out)) == ["article", "bursty"]
    resume = ["--resume", run.name, "--log-dir", str(runs), *common]
    assert main([*resume, "--timesteps", "64", "--scenario-weights", "1", "2", "3"],
                prog=SCRIPT) == 2
    assert ("--scenario-weights needs one weight per --scenario (2), got 3"
            in capsys.readouterr().err)
    SeenScenarios.seen.clear()
    assert main([*resume, "--timesteps", "96", "--scenario-weights", "1", "0"],
                prog=SCRIPT) == 0
    assert SeenScenarios.seen == {"article"}
    saved = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    assert saved["scenario_weights"] == [1.0, 0.0] and saved["timesteps"] == 96


@pytest.mark.parametrize(("options", "message"), [
    (["--scenario-weights", "1", "2"], "--scenario-weights weighs several --scenario"),
    (["--scenario", "article", "bursty", "--scenario-weights", "1"],
     "needs one weight per --scenario (2), got 1"),
    (["--scenario", "article", "bursty", "--scenario-weights", "1", "-1"],
     "must be finite and >= 0, not all 0, got [1.0, -1.0]"),
    (["--scenario", "article", "bursty", "--scenario-weights", "0", "0"], "not all 0"),
    (["--scenario", "article", "bursty", "--scenario-weights", "1", "nan"], "must be finite"),
    # refused as the option, not as the env's weights= keyword train.py has not
    (["--scenario", "article", "bursty", "--scenario-weights", "1", "inf"],
     "--scenario-weights must be finite and >= 0, not all 0, got [1.0, inf]"),
])
def test_bad_scenario_weights_are_refused_before_any_run(options, message, tmp_path,
                                                         capsys) -> None:
    from agents.train_cli import SCRIPT, main

    assert main([*options, "--log-dir", str(tmp_path / "runs"), "--timesteps", "16"],
                prog=SCRIPT) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("weights", [["1e308", "1e308"], ["5e-324", "0"], ["0", "0"],
                                     ["1", "-1"], ["1", "nan"], ["1", "inf"]])
def test_train_py_takes_the_scenario_weights_the_mix_takes(weights) -> None:
    """--scenario-weights is checked as the env's weights are, before anything is written:
    1e308 1e308 passed it, and the run (and a resume, which writes config.yaml first) failed
    at the mix's reset."""
    from agents.config import ConfigError, TrainConfig
    from agents.config_parsing import parse_config
    from envs.scenario_mix import _probabilities

    try:
        _probabilities([float(w) for w in weights], 2)
    except ValueError:
        with pytest.raises(ConfigError, match="--scenario-weights"):
            parse_config(TrainConfig, ["--scenario", "article", "bursty",
                                       "--scenario-weights", *weights])
        return
    config, _ = parse_config(TrainConfig, ["--scenario", "article", "bursty",
                                           "--scenario-weights", *weights])
    env = mix(weights=config.scenario_weights)
    env.reset(seed=0)
    assert sum(env.unwrapped.weights) == pytest.approx(1.0)


def scalar_points(run_dir: Path) -> dict[str, dict[int, float]]:
    """Every scalar tag of a run folder's events: {tag: {step: value}}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def mix_selection(tmp_path: Path, timesteps: int):
    """A tiny PPO run on article and bursty with eval/ points every 16 steps and
    --select-best."""
    from agents.config import TrainConfig

    return TrainConfig(scenario=["article", "bursty"], warmup=["none"], timesteps=timesteps,
                       checkpoint_interval=0, log_dir=str(tmp_path), episode_tasks=10,
                       eval_tasks=12, eval_interval=16, select_best=True, progress_bar=False,
                       hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1})


def test_a_mix_runs_eval_and_select_best_on_every_scenario(tmp_path: Path) -> None:
    """A mix's eval/ curves and --select-best ran on the first scenario alone: a model that
    got worse on bursty could be kept as the best, and no curve showed it. Each point now
    runs every scenario's episode: eval/<scenario>/ curves and their mean beside the first's
    (which keeps the eval/ tags), the best chosen on the mean ratio over the scenarios'
    validation episodes, and its row in each section of the table."""
    from agents.evaluation import episode_latencies, make_env
    from agents.registry import load_policy, make_policy
    from agents.run_folder import read_best_record
    from agents.run_scores import comparison_table
    from agents.training import train

    config = mix_selection(tmp_path, timesteps=48)
    (result,) = train(config, report=lambda line: None)

    def ratio(model: str, scenario: str, seed: int) -> tuple[np.ndarray, float]:
        env = make_env(scenario=scenario, episode_tasks=12)
        latency = episode_latencies(load_policy(result.run_dir / model, env), env, seed)
        static = episode_latencies(make_policy("best-static", env), env, seed)
        return latency, float(latency.mean()) / float(static.mean())

    points = scalar_points(result.run_dir)
    steps = sorted(points["eval/vs_best_static"])
    assert steps == [0, 16, 32, 48]
    for step in steps:
        article = points["eval/article/vs_best_static"][step]
        bursty = points["eval/bursty/vs_best_static"][step]
        assert article == points["eval/vs_best_static"][step]      # the first's, as before
        assert points["eval/mix_vs_best_static"][step] == pytest.approx((article + bursty) / 2)
        assert points["eval/bursty/latency_mean"][step] > 0
    # the final model's point is its run of each scenario's held-out episode, taken as is
    for scenario in ("article", "bursty"):
        latency, vs = ratio("model.zip", scenario, config.eval_seed)
        assert points[f"eval/{scenario}/vs_best_static"][48] == pytest.approx(vs)
    assert np.array_equal(result.other_scenarios["bursty"],
                          ratio("model.zip", "bursty", config.eval_seed)[0])

    record = read_best_record(result.run_dir / "best_model.json")
    assert record is not None and record.scenarios == ["article", "bursty"]
    chosen = [ratio("best_model.zip", s, config.validation_seed)[1] for s in record.scenarios]
    assert record.vs_best_static == pytest.approx(np.mean(chosen))
    validation = points["eval/validation_vs_best_static"]
    assert record.vs_best_static == pytest.approx(min(validation.values()))
    assert record.num_timesteps == min(validation, key=lambda s: (validation[s], s))

    table = comparison_table(config, [result])
    assert table is not None
    for scenario, rows in table_sections(table).items():
        best = [agent for agent in rows if "validation-chosen" in agent]
        assert best == [f"ppo (best @ {record.num_timesteps} steps, validation-chosen)"]
        latency, _ = ratio("best_model.zip", scenario, config.eval_seed)
        assert rows[best[0]][0] == f"{latency.mean():.2f}", (scenario, table)


def test_a_resumed_mix_scores_a_best_chosen_on_its_first_scenario_again(tmp_path: Path) -> None:
    """A mix's best_model.json written before mixes were scored whole has no scenarios: its
    ratio is the first scenario's, which a later model's mean over the scenarios must not be
    compared with. The resume scores the kept best_model.zip on every validation episode and
    writes its record again; a one-scenario record without scenarios is kept as it is."""
    import json

    from agents.resume import best_so_far
    from agents.run_folder import read_best_record
    from agents.training import train

    config = mix_selection(tmp_path, timesteps=32)
    (result,) = train(config, report=lambda line: None)
    path = result.run_dir / "best_model.json"
    whole = read_best_record(path)
    assert whole is not None and whole.scenarios == ["article", "bursty"]
    old = json.loads(path.read_text())
    del old["scenarios"]
    old["vs_best_static"] = 0.001           # the first scenario's, unlike the mix's mean
    path.write_text(json.dumps(old))
    again = best_so_far(result.run_dir, config)
    assert again == whole and read_best_record(path) == whole
    one = dataclasses.replace(config, scenario="article")
    path.write_text(json.dumps(old))        # on one scenario, the record stands
    kept = best_so_far(result.run_dir, one)
    assert kept is not None and kept.scenarios is None and kept.vs_best_static == 0.001
