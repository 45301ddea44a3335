"""train.py and evaluate.py end to end: run folders, TensorBoard tags, results/, resume, bad input."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from agents.config import (
    ARTICLE_SEEDS,
    EVAL_SEEDS,
    HELDOUT_SEED,
    MAX_CLONE_SAMPLES,
    MAX_EPISODES,
    MAX_EVAL_SEEDS,
    MAX_N_ENVS,
    MAX_SEED,
    MIN_ONLINE_SEEDS,
    ConfigError,
    EvalConfig,
    TrainConfig,
)
from agents.config_parsing import build_parser, parse_config, read_yaml_options, to_yaml
from agents.files import atomic_path, leftover_temp_files, zip_target
from agents.plots import read_scalars
from agents.reporting import heldout_seeds
from agents.run_folder import saved_steps
from agents.sb3_hyperparams import (
    MAX_LAYER_WIDTH,
    check_keys,
    check_override_types,
    constructor_defaults,
    load_hyperparams,
)
from envs.scenario import MAX_EPISODE_TASKS

ROOT = Path(__file__).resolve().parent.parent
TINY_HP = {"n_steps": 16, "batch_size": 16, "n_epochs": 2}
TINY = ["--hp", *(f"{k}={v}" for k, v in TINY_HP.items()), "--episode-tasks", "40",
        "--clone-samples", "50", "--eval-tasks", "40", "--no-progress-bar"]
RUN_NAME = re.compile(r"^InferenceAlloc-v0__ppo(-warm)?__[01]__\d+(-\d+)?$")
OUR_TAGS = ("latency/mean", "latency/p95", "latency/vs_static", "latency/per_sample",
            "cache/hit_rate", "charts/SPS")
OUTPUTS = ("summary.csv", "summary.md", "latency_cdf.png", "learning_curves.png",
           "stabilization.png", "stabilization.md")


# A bound on one train.py or evaluate.py process, to end a hung one, not to time it: the
# longest (test_evaluate_writes_every_result's evaluation) took 10 s on an idle 2-core
# machine and 32 s with both cores busy; 120 s left a CI machine shared with other jobs
# under 4x that.
JOB_TIMEOUT_S = 600


def script(name: str, *args: str, timeout: float = JOB_TIMEOUT_S
           ) -> subprocess.CompletedProcess:
    """`name` run in the test's own empty folder (conftest's): run in the checkout, evaluate.py
    evaluated the checkout's runs/ (a user's, or the main job's beside the tests)."""
    return subprocess.run([sys.executable, str(ROOT / name), *args], text=True,
                          capture_output=True, timeout=timeout)


def checkpoint_at(run: Path, steps: int) -> Path:
    """A checkpoint of `steps` steps in the run folder `run`, as a resume finds it (a zip whose
    SB3 data records the steps): an unfinished run, which --resume and evaluate.py tell apart
    from one killed before its first checkpoint."""
    path = run / "checkpoints" / f"model_{steps}_steps.zip"
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("data", json.dumps({"num_timesteps": steps}))
    return path


def load_main(name: str):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py") + "_cli", ROOT / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def train_refusal(args: list[str], tmp_path: Path, capsys) -> str:
    """train.py's error line refusing `args`, made before any run folder (under `tmp_path`)."""
    assert load_main("train.py")([*args, "--log-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and not (tmp_path / "runs").exists()
    return err


def events(run_dir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def unordered_steps(acc: EventAccumulator) -> dict[str, list[int]]:
    """Each scalar tag whose steps, as TensorBoard reads them, do not strictly increase."""
    steps = {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    return {tag: s for tag, s in steps.items() if any(np.diff(s) <= 0)}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    runs = tmp_path_factory.mktemp("train") / "runs"
    done = script("train.py", "--timesteps", "256", "--seeds", "0", "1", "--warmup", "none",
                  "all", "--checkpoint-interval", "128", "--eval-interval", "100",
                  "--log-dir", str(runs), *TINY)
    assert done.returncode == 0, done.stderr
    return runs, done


def test_train_makes_a_run_folder_per_agent_warmup_and_seed(trained) -> None:
    runs, done = trained
    folders = sorted(runs.iterdir())
    assert len(folders) == 4 and all(RUN_NAME.match(f.name) for f in folders), folders
    for run in folders:
        assert (run / "config.yaml").is_file() and saved_steps(run / "model.zip") == 256
        warm_state = ["model_warmup_128_steps.json", "model_warmup_256_steps.json"] \
            if "-warm__" in run.name else []
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
            "model_128_steps.zip", "model_256_steps.zip", *warm_state]
        assert (run / "warmup.json").is_file() == ("-warm__" in run.name)
        config, _ = parse_config(TrainConfig, ["--config", str(run / "config.yaml")])
        assert config.timesteps == 256 and len(config.agents) == len(config.seeds) == 1
        # every hyper-parameter the run used, not only the overrides: the config reproduces
        # the run after the YAML changes
        # (a warm run's: its env's warm_start values, since it fine-tunes a clone)
        warm = config.warmup == ["all"]
        assert config.hp == {**load_hyperparams("ppo", config.env_id, warm_start=warm),
                             **TINY_HP}
    assert leftover_temp_files(runs) == []
    table = done.stdout[done.stdout.index("| agent |"):]
    for row in ("| ppo (seed 0) |", "| ppo-warm (seed 1) |", "| best-static |", "| all-gpu |",
                "| heft |", "| heft-calibrated |"):
        assert row in table
    assert done.stdout.count("finished ppo") == 4


def test_a_runs_config_training_other_runs_with_its_hyperparameters_is_refused(
        trained, tmp_path: Path) -> None:
    """A run's config.yaml holds every hyper-parameter of that run, a warm start's included:
    a cold run's file with `--warmup none all` trained ppo-warm at the cold learning rate,
    which undoes its clone, and on --env-id InferenceAllocSplit-v0 the discrete env's values.
    Its hp_of record says what they depend on (agent, env id, warm start), and plan() refuses
    other runs; runs that take the same values are taken (other seeds, a warm-up that clones
    too), and so is the file without hp_of or hp, or with every value of hp given by --hp."""
    from agents.run_plan import plan

    runs, _ = trained
    cold = next(r for r in sorted(runs.iterdir()) if "-warm__" not in r.name) / "config.yaml"
    warm = next(r for r in sorted(runs.iterdir()) if "-warm__" in r.name) / "config.yaml"

    def planned(path: Path, *flags: str) -> list[str]:
        config, given = parse_config(TrainConfig, ["--config", str(path), *flags])
        return [spec.label for spec in plan(config, given.hp_source, given.hp_of)]

    with pytest.raises(ConfigError, match=rf"^hp {{.*}} in {re.escape(str(cold))} is every "
                                          rf"hyper-parameter of ppo on InferenceAlloc-v0, from "
                                          rf"scratch, as the file's hp_of records, and would "
                                          rf"train ppo on InferenceAlloc-v0, fine-tuning a clone "
                                          rf"with them"):
        planned(cold, "--warmup", "none", "all")
    with pytest.raises(ConfigError, match=r"would train ppo on InferenceAllocSplit-v0, from "
                                          r"scratch with them"):
        planned(cold, "--env-id", "InferenceAllocSplit-v0")
    with pytest.raises(ConfigError, match=r"of ppo on InferenceAlloc-v0, fine-tuning a clone, "
                                          r"as .* would train ppo on InferenceAlloc-v0, from "
                                          r"scratch, dqn on InferenceAlloc-v0, fine-tuning a "
                                          r"clone, dqn on InferenceAlloc-v0, from scratch with"):
        planned(warm, "--agents", "ppo", "dqn", "--warmup", "all", "none")
    with pytest.raises(ConfigError, match=r"^--hp \{'gamma': 0.5\} and hp .* are every"):
        planned(warm, "--warmup", "none", "--hp", "gamma=0.5")
    assert planned(cold, "--seeds", "5", "6") == ["ppo", "ppo"]
    assert planned(warm) == ["ppo-warm"]
    # the hyper-parameters depend on whether the run fine-tunes a clone, not on the guard
    assert planned(warm, "--warmup", "clone") == ["ppo-warm-clone"]
    assert planned(cold, "--warmup", "conservative,guard") == ["ppo-warm-conservative+guard"]
    text = cold.read_text()
    (record,) = re.findall(r"\nhp_of: \{agent: ppo, env_id: InferenceAlloc-v0, warm_start: "
                           r"false, hp: [0-9a-f]{16}\}\n", text)
    unrecorded = tmp_path / "unrecorded.yaml"
    unrecorded.write_text(text.replace(record, "\n"))
    assert planned(unrecorded, "--warmup", "none", "all") == ["ppo", "ppo-warm"]
    config = yaml.safe_load(text)
    # hp cut down to the values one means to set: the user's, the record no longer of them
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump({**config, "hp": {"n_steps": 32}}))
    assert planned(edited, "--warmup", "none", "all") == ["ppo", "ppo-warm"]
    every = [f"{key}={json.dumps(value)}" for key, value in config["hp"].items()]
    assert planned(cold, "--warmup", "all", "--hp", *every) == ["ppo-warm"]
    del config["hp"]
    no_hp = tmp_path / "no-hp.yaml"
    no_hp.write_text(yaml.safe_dump(config))
    assert planned(no_hp, "--warmup", "none", "all") == ["ppo", "ppo-warm"]
    # a damaged record is named as what it is: the run folder was unusable, "unknown option"
    damaged = tmp_path / "damaged.yaml"
    damaged.write_text(text.replace(record, "\nhp_of:\n"))
    with pytest.raises(ConfigError, match=rf"^config file {re.escape(str(damaged))}: unknown "
                                          rf"option 'hp_of', the name of a run's record in its "
                                          rf"config.yaml, and not one as a run writes it"):
        planned(damaged)


def test_the_hp_digest_is_of_the_hp_as_config_yaml_reads_them_back() -> None:
    """hp_of's digest round-tripped the hp through PyYAML's loader, config.yaml through the
    project's, which reads a bare 1e-3 as a number: a run given learning_rate '1e-3' recorded
    a digest its own file never gave, and the file's hp_of was never applied."""
    from agents.config import hp_digest
    from inference.yamlio import safe_load

    hp = {"learning_rate": "1e-3", "n_steps": 16}
    assert hp_digest(hp) == hp_digest(safe_load(yaml.safe_dump(hp))) == hp_digest(
        {"learning_rate": 0.001, "n_steps": 16})
    assert hp_digest(hp) != hp_digest({"learning_rate": 0.002, "n_steps": 16})


@pytest.mark.parametrize(("agent", "hp"), [
    ("ppo", {"n_steps": 16, "batch_size": 16, "n_epochs": 1}), ("dqn", {})])
def test_the_events_estimate_is_within_a_fifth_of_a_runs_events_file(
        tmp_path: Path, agent: str, hp: dict) -> None:
    """events_notes' sizes come from the README's measured bytes a point and a write: a run's
    events file, written by the run itself, is within 20% of what run_events_bytes says."""
    from agents.events_size import run_events_bytes
    from agents.sb3_hyperparams import hyperparams_with
    from agents.training import train

    config = TrainConfig(agents=[agent], warmup=["none"], timesteps=2_000, hp=hp,
                         log_dir=str(tmp_path), episode_tasks=50, eval_tasks=0,
                         checkpoint_interval=0, progress_bar=False)
    (result,) = train(config, report=lambda line: None)
    written = sum(f.stat().st_size for f in result.run_dir.rglob("events.out.tfevents.*"))
    params = hyperparams_with(agent, config.env_id, config.hp, warm_start=False)
    estimate = run_events_bytes(agent, params, config, 1, None)
    assert 0.8 < estimate / written < 1.2, (estimate, written)


def test_a_plan_whose_events_would_fill_a_disk_is_told_how_to_thin_them(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """Ten million PPO steps wrote ~1.5 GB of events a run (a per-sample point every task, the
    other scalars every 16-step rollout) with no word of --per-sample-interval or
    --log-interval. A plan above 1 GB says so before its first run, with the size they give;
    a plan below it, or thinned below it, says nothing."""
    import agents.training as training
    from agents.events_size import events_notes
    from agents.run_plan import plan
    from agents.run_records import RunFailed

    def notes(*flags: str) -> list[str]:
        config, _ = parse_config(TrainConfig, list(flags))
        return events_notes(config, plan(config))

    (note,) = notes("--timesteps", "10000000")
    sizes = [float(x) for x in re.findall(r"about (\d+\.\d+) GB", note)]
    assert note.startswith("note: the 2 runs will write about") and len(sizes) == 2, note
    assert sizes[0] > 2.0 and sizes[1] < sizes[0] / 10, note
    assert "--per-sample-interval 100 --log-interval 10" in note
    assert notes() == []                                        # the default job: ~18 MB
    assert notes("--timesteps", "10000000", "--per-sample-interval", "100",
                 "--log-interval", "10") == []
    (one,) = notes("--timesteps", "20000000", "--agents", "a2c", "--warmup", "none")
    # a2c writes every 100 rollouts by default: --log-interval 10 would write more often
    assert one.startswith("note: the run will write about")
    assert "--per-sample-interval 100 makes it" in one and "--log-interval" not in one, one
    thinned = float(re.findall(r"about (\d+\.\d+) GB", one)[1])
    assert thinned < float(re.findall(r"about (\d+\.\d+) GB", one)[0]) / 10
    started = []

    def train_run(config, spec):
        started.append(capsys.readouterr().err)
        raise RunFailed("not trained here")

    monkeypatch.setattr(training, "train_run", train_run)
    load_main("train.py")(["--timesteps", "10000000", "--log-dir", str(tmp_path / "runs"),
                           "--no-progress-bar"])
    assert started[0].count("GB of TensorBoard events") == 1, started
    assert all("TensorBoard events" not in err for err in started[1:])


def test_warm_runs_on_a_trace_without_select_best_are_told_of_the_drift(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """On azure-conv at 0.05 a warm PPO's fine-tuning left a good clone (0.72x best-static) for
    a placement at 1.17x, which the relative reward and the guard did not see; --select-best
    kept the clone. A plan that trains so says it before its first run, and no other does."""
    import agents.training as training
    from agents.run_plan import drift_notes
    from agents.run_records import RunFailed

    trace = tmp_path / "azure.yaml"
    trace.write_text("name: azure\nworkload: {trace: azure-conv, trace_time_scale: 0.05}\n")

    def notes(*flags: str) -> list[str]:
        config, _ = parse_config(TrainConfig, ["--scenario", str(trace), *flags])
        return drift_notes(config, list(config.warmup))

    (note,) = notes()
    assert note.startswith(f"note: the warm runs fine-tune a clone on a replayed trace ({trace}) "
                           f"with the relative reward") and "--select-best keeps the clone" in note
    assert notes("--warmup", "clone") == [note]
    for flags in (["--select-best"], ["--warmup", "none"], ["--warmup", "conservative,guard"],
                  ["--reward", "normalised"]):
        assert notes(*flags) == [], flags
    config, _ = parse_config(TrainConfig, [])
    assert drift_notes(config, list(config.warmup)) == []      # the article: no trace
    # train.py says it once, before the first run
    started = []

    def train_run(config, spec):
        started.append(capsys.readouterr().err)
        raise RunFailed("not trained here")

    monkeypatch.setattr(training, "train_run", train_run)
    load_main("train.py")(["--scenario", str(trace), "--seeds", "0", "1", "--log-dir",
                           str(tmp_path / "runs"), "--no-progress-bar"])
    assert started[0].count("note: the warm runs fine-tune a clone") == 1, started
    assert all("fine-tune a clone" not in err for err in started[1:])


def test_a_trace_span_too_short_for_the_held_out_episode_is_refused_before_training(
        tmp_path: Path, capsys) -> None:
    """The held-out episode's env is built once the run has trained: a span of 50 batches
    with --eval-tasks 60 failed there, a traceback and exit 1 after the training. plan()
    now builds it first: one line, exit 2, no run folder."""
    rows = [f"2023-11-16 18:{i // 60:02d}:{i % 60:02d}.000000,{1000 + i},{10 + i % 7}"
            for i in range(100)]      # one request a second: each a batch of its own
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                    + "\n".join(rows) + "\n")
    scenario = tmp_path / "half.yaml"
    scenario.write_text("name: half\nworkload: {trace: t.csv, trace_span: [0.5, 1]}\n")
    runs = tmp_path / "runs"
    code = load_main("train.py")(["--scenario", str(scenario), "--warmup", "none",
                                  "--episode-tasks", "20", "--eval-tasks", "60",
                                  "--log-dir", str(runs), "--no-progress-bar"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert ("scenario field workload.trace_span: the span [0.5, 1.0] holds 50 of the 100 "
            "batches") in err and "fewer than an episode's 60 tasks" in err, err
    assert not runs.exists()


def test_tensorboard_holds_our_tags_the_config_and_hparams(trained) -> None:
    runs, _ = trained
    for run in runs.iterdir():
        acc = events(run)
        scalars = set(acc.Tags()["scalars"])
        assert set(OUR_TAGS) <= scalars, set(OUR_TAGS) - scalars
        devices = {t for t in scalars if t.startswith("devices/")}
        assert {"devices/gpu_utilisation", "devices/gpu_share"} <= devices
        assert {"train/value_loss", "final/vs_best_static"} <= scalars    # SB3's and ours
        per_sample = [e.step for e in acc.Scalars("latency/per_sample")]
        assert per_sample == list(range(256))
        # one point per step on every curve: PPO's last update's train/ values, which SB3
        # leaves unwritten, were written by the final/ dump at the step its last rollout's
        # dump had written train/ already
        assert not unordered_steps(acc), unordered_steps(acc)
        assert "config/text_summary" in acc.Tags()["tensors"]
        assert "_hparams_/session_start_info" in acc.PluginTagToContent("hparams")
        # the held-out curve: step 0 (before any update), each --eval-interval crossed, and
        # the saved model at the end, which the run's final/ row measures on the same episode
        means = acc.Scalars("eval/latency_mean")
        assert [e.step for e in means] == [0, 100, 200, 256]
        ratios = [e.value for e in acc.Scalars("eval/vs_best_static")]
        statics = [m.value / r for m, r in zip(means, ratios, strict=True)]   # best-static's
        assert statics == pytest.approx([statics[0]] * 4, rel=1e-5) and statics[0] > 0
        assert ratios[-1] == pytest.approx(acc.Scalars("final/vs_best_static")[-1].value, rel=1e-6)
        p95 = [e.value for e in acc.Scalars("eval/latency_p95")]
        assert all(p >= m.value for p, m in zip(p95, means, strict=True))
        # a cloned learner's imitation of the conservative policy, once, at step 0
        clone = {t: acc.Scalars(t) for t in scalars if t.startswith("warmup/clone_")}
        if "-warm__" in run.name:
            assert sorted(clone) == ["warmup/clone_heldout_agreement",
                                     "warmup/clone_train_agreement"]
            assert all(len(v) == 1 and v[0].step == 0 and 0 <= v[0].value <= 1
                       for v in clone.values())
        else:
            assert clone == {}
        # who acted: the share of the last --metrics-window tasks, not the last task's 0/1
        acting = [e.value for e in acc.Scalars("warmup/conservative_acting")] \
            if "-warm__" in run.name else []
        assert all(0 <= v <= 1 for v in acting) and (not acting or acting[0] == 1.0)
        assert ("-warm__" not in run.name) or any(0 < v < 1 for v in acting), acting


@pytest.mark.parametrize("agent", ["ppo", "dqn"])
def test_held_out_evaluation_leaves_training_unchanged(agent: str, tmp_path: Path) -> None:
    """eval/ runs the model on its own env with deterministic actions: the same run with and
    without it trains the same weights, to the bit."""
    import torch

    from agents.registry import load_policy
    from agents.run_plan import env_for

    main = load_main("train.py")
    weights = []
    for interval in ("0", "50"):
        runs = tmp_path / f"every{interval}"
        assert main(["--agents", agent, "--warmup", "none", "--timesteps", "160",
                     "--eval-interval", interval, "--checkpoint-interval", "0",
                     "--log-dir", str(runs), "--episode-tasks", "40", "--eval-tasks", "40",
                     "--no-progress-bar", "--hp", "learning_starts=32" if agent == "dqn"
                     else "n_steps=32"]) == 0
        (run,) = runs.iterdir()
        assert ("eval/latency_mean" in events(run).Tags()["scalars"]) == (interval != "0")
        env = env_for(TrainConfig(agents=[agent]))
        policy = load_policy(run / "model.zip", env)
        weights.append([t.detach().clone() for t in policy.model.policy.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*weights, strict=True))


def test_evaluate_writes_every_result(trained, tmp_path: Path) -> None:
    runs, _ = trained
    out = tmp_path / "results"
    done = script("evaluate.py", "--runs", str(runs), "--out", str(out), "--episodes", "1",
                  "--episode-tasks", "30", "--seeds", "2", "--online-samples", "60",
                  "--online-seeds", "1", "--no-progress-bar")
    assert done.returncode == 0, done.stderr
    for name in OUTPUTS:
        assert (out / name).is_file(), name
    # what it says it wrote is each file by its path (was "wrote None" had a writer lost it)
    said = sorted(line for line in done.stdout.splitlines() if line.startswith("wrote "))
    assert said == sorted(f"wrote {out / name}" for name in OUTPUTS), done.stdout
    for png in out.glob("*.png"):
        with Image.open(png) as image:
            image.verify()
            assert image.format == "PNG" and image.size[0] > 100
    rows = (out / "summary.csv").read_text().splitlines()
    agents = [line.split(",")[1] for line in rows[1:]]
    assert agents == ["ppo", "ppo-warm", "all-cpu", "all-gpu", "all-npu", "best-static",
                      "heft", "heft-calibrated", "oracle"]
    assert "mean_latency_s_ci95" in rows[0] and "gap_to_oracle" in rows[0]
    assert "± " in (out / "summary.md").read_text()
    assert "early_degradation" in (out / "stabilization.md").read_text()
    assert leftover_temp_files(out) == []


def test_evaluate_without_runs_says_how_to_train(tmp_path: Path) -> None:
    main = load_main("evaluate.py")
    out = tmp_path / "results"
    args = ["--runs", str(tmp_path / "none"), "--out", str(out), "--episodes", "1",
            "--episode-tasks", "20", "--seeds", "1", "--baselines", "best-static", "heft",
            "--no-online", "--no-progress-bar"]
    # a --runs folder that is not there is a typo, not "no runs yet": one line, nothing written
    assert main(args) == 2
    assert not out.exists()
    (tmp_path / "none").write_text("a file")        # was "no such folder", though it is there
    with pytest.raises(ConfigError, match=f"--runs {re.escape(str(tmp_path / 'none'))} is a "
                                          f"file, not a folder"):
        EvalConfig(runs=str(tmp_path / "none")).validate()
    assert main(args) == 2
    (tmp_path / "none").unlink()
    (tmp_path / "none").mkdir()
    assert main(args) == 0
    assert (out / "summary.csv").read_text().count("\n") == 3
    assert not (out / "learning_curves.png").exists()


def test_models_of_a_folder_that_is_no_run_says_so_without_the_resume_hint(
        tmp_path: Path, capsys) -> None:
    """A folder without config.yaml is no run of train.py's: it was called an unfinished run
    to continue with --resume, which refuses it too. With config.yaml the hint stays."""
    main = load_main("evaluate.py")
    args = ["--out", str(tmp_path / "r"), "--no-online", "--no-progress-bar"]
    plain = tmp_path / "plain"
    plain.mkdir()
    assert main(["--models", str(plain), *args]) == 2
    err = capsys.readouterr().err
    assert f"--models {plain} is not a run folder (no config.yaml, no model.zip)" in err
    assert "--resume" not in err
    (plain / "config.yaml").write_text("agent: ppo\n")
    checkpoint_at(plain, 32)
    assert main(["--models", str(plain), *args]) == 2
    assert f"continue it with: python train.py --resume {plain}" in capsys.readouterr().err


def test_an_evaluation_into_an_earlier_ones_folder_mixes_no_outputs_unannounced(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """With no runs, it said "no learning_curves.png" and left the earlier evaluation's beside
    the new summary; the files of a study it skips are that study's: kept, and named so."""
    from types import SimpleNamespace

    import agents.reporting as reporting
    from agents import plots
    from agents.files import write_text

    main = load_main("evaluate.py")
    out = tmp_path / "results"
    out.mkdir()
    for name in ("learning_curves.png", "stabilization.png", "stabilization.md"):
        (out / name).write_text("an earlier evaluation's")
    (tmp_path / "runs").mkdir()
    assert main(["--runs", str(tmp_path / "runs"), "--out", str(out), "--episodes", "1",
                 "--episode-tasks", "20", "--seeds", "1", "--baselines", "best-static",
                 "--no-online", "--no-progress-bar"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert not (out / "learning_curves.png").exists()
    assert f"no learning_curves.png (removed the one of an earlier evaluation from {out})" in said
    assert (out / "stabilization.png").read_text() == "an earlier evaluation's"
    assert (f"kept stabilization.png, stabilization.md in {out} from an earlier evaluation "
            f"(--no-online skips the online study)") in said
    # --online, the study alone (stubbed: its figures are not what this test is about)
    monkeypatch.setattr(reporting, "online_study", lambda *a, **k: SimpleNamespace(curves={}))
    monkeypatch.setattr(reporting, "online_markdown", lambda *a, **k: "study\n")
    monkeypatch.setattr(plots, "stabilization", lambda curves, target, title: write_text(
        target, "new"))
    assert main(["--online", "--out", str(out), "--no-progress-bar"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert (out / "stabilization.png").read_text() == "new"
    assert (f"kept summary.csv, summary.md, latency_cdf.png in {out} from an earlier evaluation "
            f"(--online runs the online study alone)") in said
    assert sorted(p.name for p in out.iterdir()) == [
        "latency_cdf.png", "stabilization.md", "stabilization.png", "summary.csv", "summary.md"]


def test_an_online_study_says_when_it_raises_seeds_to_its_floor(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """`--online --seeds 1` ran 5 seeds and said nothing of it on screen (its help says "at
    least 5"); --online-seeds 1 is taken as given, and --seeds 6 needs no word."""
    from types import SimpleNamespace

    from agents import plots, reporting
    from agents.files import write_text

    seeds: list[int] = []

    def study(agents, study_seeds, *args, **kwargs):
        seeds.append(len(study_seeds))
        return SimpleNamespace(curves={})

    monkeypatch.setattr(reporting, "online_study", study)
    monkeypatch.setattr(reporting, "online_markdown", lambda *a, **k: "study\n")
    monkeypatch.setattr(plots, "stabilization", lambda curves, target, title: write_text(
        target, "new"))
    main = load_main("evaluate.py")
    said = []
    for flags in (["--seeds", "1"], ["--online-seeds", "1"], ["--seeds", "6"]):
        assert main(["--online", "--out", str(tmp_path / "r"), "--no-progress-bar",
                     *flags]) == 0
        said.append(" ".join(capsys.readouterr().out.split()))
    assert seeds == [5, 1, 6]
    notice = "the online study runs at least 5 seeds: 5 in place of --seeds 1 (--online-seeds N "
    assert notice in said[0]
    assert all("at least 5 seeds" not in text for text in said[1:])


@pytest.mark.slow
def test_the_readmes_heft_split_figures_are_what_its_command_measures(tmp_path: Path) -> None:
    # The README quotes the command beside the figures; a cost-model change moved them once
    # without the text following (15.1 / 30.3 / 43.0 s against a measured 15.0 / 30.2 / 42.9).
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    quoted = re.search(r"its mean latency is ([\d.]+) s, against ([\d.]+) s for `heft-calibrated` "
                       r"and ([\d.]+) s for `best-static` \(`python evaluate.py --baselines "
                       r"heft-split heft-calibrated best-static --no-online --out results/split`",
                       readme)
    assert quoted is not None, "the README's heft-split sentence changed: update this test"
    out = tmp_path / "split"
    assert load_main("evaluate.py")(["--baselines", "heft-split", "heft-calibrated", "best-static",
                                     "--no-online", "--out", str(out), "--no-progress-bar",
                                     "--runs", str(tmp_path)]) == 0
    rows = {row["agent"]: float(row["mean_latency_s"])
            for row in csv.DictReader((out / "summary.csv").open(encoding="utf-8"))}
    measured = [f"{rows[name]:.1f}" for name in ("heft-split", "heft-calibrated", "best-static")]
    assert list(quoted.groups()) == measured


def test_evaluate_rejects_a_negative_client_count(tmp_path: Path, capsys) -> None:
    main = load_main("evaluate.py")
    out = tmp_path / "results"
    assert main(["--reproduce-article", "--article-clients", "-1", "--out", str(out)]) == 2
    assert "--article-clients must be >= 0" in capsys.readouterr().err
    assert not out.exists()


def test_evaluate_refuses_more_article_clients_than_the_job_has_requests(tmp_path: Path,
                                                                         capsys) -> None:
    """--article-clients 1e9 was taken for a job of 1,000 requests, each client sending one at
    a time: the refusal names both counts, and the job's own count is taken."""
    from agents.article_job import JOB_TASKS

    main = load_main("evaluate.py")
    out = tmp_path / "results"
    assert main(["--reproduce-article", "--article-clients", "1e9", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"evaluate.py: error: --article-clients 1,000,000,000 is more clients than the article "
        f"job has requests ({JOB_TASKS:,}): give at most {JOB_TASKS:,} (0: the open-loop job)\n")
    assert main(["--reproduce-article", "--article-clients", str(JOB_TASKS + 1), "--out",
                 str(out)]) == 2
    assert not out.exists()
    EvalConfig(out=str(out), reproduce_article=True, article_clients=JOB_TASKS).validate()


def test_evaluate_reproduce_article_says_it_wrote_article_md(tmp_path, monkeypatch,
                                                            capsys) -> None:
    """--reproduce-article printed its table and no "wrote" line, the one mode of evaluate.py
    that did not name the file it wrote (the job itself is stubbed: its figures are
    tests/test_article.py's)."""
    from agents import article

    def job(out_dir, seeds, tick, **kw):
        (Path(out_dir) / "article.md").write_text("| figure |\n", encoding="utf-8")

    monkeypatch.setattr(article, "reproduce", job)
    out = tmp_path / "results"
    out.mkdir()
    assert load_main("evaluate.py")(["--reproduce-article", "--seeds", "1", "--out", str(out),
                                     "--no-progress-bar"]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("wrote ")]
    assert said == [f"wrote {out / 'article.md'}"] and (out / "article.md").is_file()


def test_resume_continues_the_run_in_its_folder(trained, tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    first = script("train.py", "--timesteps", "128", "--checkpoint-interval", "64", "--seeds",
                   "0", "--warmup", "none", "--log-dir", str(runs), *TINY)
    assert first.returncode == 0, first.stderr
    (run,) = runs.iterdir()
    # Simulate a run killed right after its first checkpoint.
    (run / "model.zip").unlink()
    (run / "checkpoints" / "model_128_steps.zip").unlink()
    evaluate = load_main("evaluate.py")
    for models, message in ((run, f"continue it with: python train.py --resume {run}"),
                            (runs / "nothing", "does not exist")):
        assert evaluate(["--models", str(models), "--out", str(tmp_path / "r"), "--no-online"]) == 2
        assert message in capsys.readouterr().err
    resumed = script("train.py", "--resume", "--log-dir", str(runs), "--timesteps", "256",
                     "--no-progress-bar", "--eval-tasks", "40")
    assert resumed.returncode == 0, resumed.stderr
    assert list(runs.iterdir()) == [run]
    assert "256 steps (192 new) in" in resumed.stdout     # steps/s counts this session's only
    assert evaluate(["--models", str(runs), "--out", str(tmp_path / "r"), "--no-online"]) == 2
    assert f"{runs} is a folder of run folders, not a run: pass --runs {runs}" in \
        capsys.readouterr().err
    uninterrupted = next(d for d in trained[0].iterdir() if "__ppo__0__" in d.name)
    assert saved_steps(run / "model.zip") == saved_steps(uninterrupted / "model.zip") == 256
    assert len(list(run.glob("events.out.tfevents.*"))) == 2
    steps, _ = read_scalars(run, "latency/per_sample")
    assert list(steps) == list(range(256))       # earlier events kept, the rest continued
    # TensorBoard too drops the killed run's events past the checkpoint resumed from (steps
    # 65-127), which the resumed run logs again: its curves went back from 128 to 64. The
    # per-task latency of index 64, which the killed run wrote, it keeps: the resumed run
    # leaves its own out (agents.callbacks.drop_events_past), or it showed index 64 twice
    acc = events(run)
    per_sample = [e.step for e in acc.Scalars("latency/per_sample")]
    assert per_sample == list(range(256))
    assert unordered_steps(acc) == {}
    again = script("train.py", "--resume", run.name, "--log-dir", str(runs), "--scenario",
                   "bursty")
    assert again.returncode == 2 and "only" in again.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (["--agents", "ppo", "qlearning"], "ppo, a2c, dqn, maskable-ppo, sac"),
    (["--scenario", "nowhere"], "article, bursty, edge"),
    (["--hardware", "mainframe"], "edge, server"),
    (["--warmup", "lots"], "conservative, clone, guard"),
    (["--conservative", "psychic"], "heft-calibrated"),
    # a learner would act untrained as the "conservative" policy; the list then offers none
    (["--conservative", "ppo"], "'ppo' is a learning agent; it needs a fixed policy: all-cpu"),
    # without warm-up too: the name went unnoticed until the config was reused with warm-up on
    (["--warmup", "none", "--conservative", "psychic"], "unknown --conservative policy 'psychic'"),
    (["--warmup", "none", "--conservative", "ppo"], "'ppo' is a learning agent"),
    (["--hp", "warp_speed=9"], "warp_speed"),
    (["--reward", "fast"], "--reward must be one of latency, relative, normalised, got 'fast'"),
    (["--reward", "normalized"], "got 'normalized' (did you mean 'normalised'?)"),
    (["--env-id", "InferenceAllocSplit-v0", "--agents", "dqn"], "discrete actions"),
    (["--agents", "sac"], "sac needs continuous (Box) actions: it trains on "
                          "InferenceAllocSplit-v0 (train.py --env InferenceAllocSplit-v0)"),
    (["--hp", "gamma=abc"], "gamma must be a number"),
    (["--hp", "n_steps=abc"], "n_steps must be an integer"),
    (["--hp", "n_steps=64.5"], "n_steps must be an integer"),
    (["--hp", "learning_rate=true"], "learning_rate must be a number"),
    (["--seeds", "-1"], "--seeds: seeds must lie in 0 .."),
    (["--seeds", "99999999999999999999"], "got 99999999999999999999"),
    (["--eval-seed", "-1"], "--eval-seed: seeds must lie"),
    (["--n-envs", "2", "--seeds", "2147483647"], "got 2147483647 .. 2147483648"),
    (["--episode-tasks", "1000000000000"], "--episode-tasks must lie in 1..1000000"),  # was numpy's
    # each failed the run that had started, with a traceback (the env's refusal, an OverflowError)
    (["--eval-tasks", "1000001"], "--eval-tasks is an episode's tasks, at most 1000000, got "
                                  "1000001"),
    (["--metrics-window", str(2**63)], f"--metrics-window must be at most 1000000000, got "
                                       f"{2**63}"),
    # SB3 took these without a word (n_epochs=0 then failed deep inside its loop)
    (["--hp", "gamma=1.5"], "gamma must be in [0.0, 1.0], got 1.5"),
    (["--hp", "clip_range=-1"], "clip_range must be >= 1e-09, got -1"),
    (["--hp", "n_epochs=0"], "n_epochs must be >= 1, got 0"),
    (["--hp", "stats_window_size=-1"], "stats_window_size must be >= 0, got -1"),
    (["--agents", "dqn", "--hp", "train_freq=0"], "train_freq must be an integer >= 1 or a pair"),
    (["--agents", "dqn", "--hp", "train_freq=[4, epoch]"], "[n, episode] with n >= 1 (e.g. 4 "
                                                          "or [4, episode]), got [4, 'epoch']"),
    # net_arch's list given as policy_kwargs itself: unchecked, an AttributeError traceback
    (["--hp", "policy_kwargs=[64, 64]"], "hyper-parameter policy_kwargs must be a mapping (e.g. "
                                         "{net_arch: [64, 64]}), got [64, 64]"),
    # the oracle decides one live env's task: it failed inside the first run, after cloning
    (["--conservative", "oracle", "--n-envs", "2"], "oracle cannot act for --n-envs 2 envs"),
    (["--conservative", "gated-oracle", "--n-envs", "3", "--warmup", "conservative,guard"],
     "use --n-envs 1, or --warmup clone"),
    # ... and so cannot with its one env in a worker process either (it read the trainer's own)
    (["--conservative", "oracle", "--vec-env", "subproc"],
     "--conservative oracle cannot act for --vec-env subproc"),
    (["--conservative", "gated-oracle", "--vec-env", "subproc", "--n-envs", "2"],
     "use --vec-env dummy, or --warmup clone"),
    (["--vec-env", "subprocess"], "--vec-env must be one of dummy, subproc, got 'subprocess' "
                                  "(did you mean 'subproc'?)"),
])
def test_train_bad_input_lists_the_valid_names(args, expected, tmp_path, capsys) -> None:
    main = load_main("train.py")
    assert main([*args, "--log-dir", str(tmp_path / "runs"), "--timesteps", "32"]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_dqn_trains_with_a_train_freq_pair_from_hp_or_its_yaml(tmp_path: Path,
                                                              monkeypatch) -> None:
    """[n, episode] came as a YAML list, and SB3 refused it: it takes a tuple only."""
    import shutil

    import agents.sb3_hyperparams as hyperparams

    main = load_main("train.py")
    args = ["--agents", "dqn", "--warmup", "none", "--timesteps", "40", "--episode-tasks", "20",
            "--eval-tasks", "0", "--checkpoint-interval", "0", "--no-progress-bar"]
    assert main([*args, "--hp", "train_freq=[1, episode]", "--log-dir",
                 str(tmp_path / "hp")]) == 0
    (run,) = (tmp_path / "hp").iterdir()
    assert yaml.safe_load((run / "config.yaml").read_text())["hp"]["train_freq"] == [1, "episode"]
    shutil.copytree(hyperparams.HYPERPARAMS_DIR, tmp_path / "hyperparams")
    text = (tmp_path / "hyperparams" / "dqn.yaml").read_text()
    assert "  train_freq: 1\n" in text
    (tmp_path / "hyperparams" / "dqn.yaml").write_text(
        text.replace("  train_freq: 1\n", "  train_freq: [1, episode]\n"))
    monkeypatch.setattr(hyperparams, "HYPERPARAMS_DIR", tmp_path / "hyperparams")
    assert main([*args, "--log-dir", str(tmp_path / "yaml")]) == 0


def test_a_conservative_that_never_acts_may_be_the_oracle_with_several_envs(tmp_path) -> None:
    from agents.run_plan import plan

    cfg = TrainConfig(conservative="oracle", n_envs=2, log_dir=str(tmp_path / "runs"))
    assert len(plan(dataclasses.replace(cfg, warmup=["clone"]))) == 1       # it only clones
    assert len(plan(dataclasses.replace(cfg, n_envs=1))) == 2


def test_without_warmup_a_conservative_the_env_cannot_take_is_left_be(tmp_path) -> None:
    """heft-split acts in the Split env only: a name, not a mistake, when nothing warms up."""
    from agents.run_plan import plan

    cfg = TrainConfig(conservative="heft-split", warmup=["none"], log_dir=str(tmp_path / "r"))
    assert len(plan(cfg)) == 1
    with pytest.raises(ConfigError, match="heft-split"):
        plan(dataclasses.replace(cfg, warmup=["all"]))


@pytest.mark.parametrize(("entry", "expected"), [
    ("n_epoch: 10", "ppo.yaml, InferenceAlloc-v0: unknown ppo hyper-parameter 'n_epoch'"),
    ("gamma: abc", "ppo.yaml, InferenceAlloc-v0: hyper-parameter gamma must be a number"),
    ("seed: 3", "hyper-parameter seed is set by the trainer"),
    ("warm_start: {learning_rat: 1.0e-4}",
     "ppo.yaml, InferenceAlloc-v0: unknown ppo hyper-parameter 'learning_rat'"),
    ("warm_start: {learning_rate: abc}",
     "ppo.yaml, InferenceAlloc-v0: hyper-parameter learning_rate must be a number"),
    ("warm_start: {ent_coef: 1000000000000000000000000000000}",
     "ppo.yaml, InferenceAlloc-v0: hyper-parameter ent_coef must be written as a float"),
    ("warm_start: 1.0e-4", "InferenceAlloc-v0.warm_start must map hyper-parameter names"),
    ("warm_start: 0", "InferenceAlloc-v0.warm_start must map hyper-parameter names"),  # not none
    ("policy_kwargs: relu",
     "ppo.yaml, InferenceAlloc-v0: hyper-parameter policy_kwargs must be a mapping"),
    # a broken edit was a yaml traceback: one line naming the file and the line
    ("n_steps: 32", "ppo.yaml: malformed YAML at line 3, column 3: found duplicate key"),
    ("\tgamma: 0.9", "ppo.yaml: malformed YAML at line 3"),
    # SB3's own assert, after the YAML's checks: a traceback, where --hp's was one line
    ("batch_size: 1", "ppo.yaml for ppo: `batch_size` must be greater than 1"),
])
def test_a_bad_hyperparameter_yaml_is_refused_before_training(entry, expected, tmp_path, capsys,
                                                               monkeypatch) -> None:
    """A typo'd key in agents/hyperparams/ppo.yaml was a bare TypeError traceback, and a value
    of the wrong type failed only once training had started (--hp was checked, the YAML not)."""
    import agents.sb3_hyperparams as hyperparams
    (tmp_path / "ppo.yaml").write_text(f"InferenceAlloc-v0:\n  n_steps: 16\n  {entry}\n")
    monkeypatch.setattr(hyperparams, "HYPERPARAMS_DIR", tmp_path)
    main = load_main("train.py")
    assert main(["--warmup", "none", "--log-dir", str(tmp_path / "runs"), "--timesteps", "32"]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("typo", ["InferenceAloc-v0", "discrete", "InferenceAllocSplit-v0x"])
def test_a_hyperparameter_yaml_keyed_by_an_unknown_env_is_refused(typo, tmp_path, capsys,
                                                                  monkeypatch) -> None:
    """Beside a good section, a section under a misspelt env id was never read: the values
    tuned there went unused, without a word."""
    import agents.sb3_hyperparams as hyperparams
    (tmp_path / "ppo.yaml").write_text(f"InferenceAlloc-v0:\n  n_steps: 16\n{typo}:\n  n_steps: 64\n")
    monkeypatch.setattr(hyperparams, "HYPERPARAMS_DIR", tmp_path)
    main = load_main("train.py")
    assert main(["--warmup", "none", "--log-dir", str(tmp_path / "runs"), "--timesteps", "32"]) == 2
    err = capsys.readouterr().err
    assert f"ppo.yaml: unknown env id {typo!r}" in err and "InferenceAllocSplit-v0" in err
    assert err.count("\n") == 1 and not (tmp_path / "runs").exists()


def test_an_unknown_agent_or_a_trainers_key_is_named_as_such() -> None:
    """An unknown agent is named with the known ones (not a missing <agent>.yaml), and a key
    the trainer sets points to the option that sets it: seed to --seeds, the others to none."""
    with pytest.raises(ValueError, match="unknown SB3 agent 'qlearning'; known: ppo, a2c"):
        load_hyperparams("qlearning", "InferenceAlloc-v0")
    with pytest.raises(ValueError, match=r"seed is set by the trainer, not here \(train.py --seeds\)"):
        check_keys("ppo", {"seed": 1})
    with pytest.raises(ValueError, match="device is set by the trainer, not here") as device:
        check_keys("ppo", {"device": "cpu"})
    assert "--seeds" not in str(device.value)


@pytest.mark.parametrize(("key", "pointer"), [
    ("n_timesteps", "train.py's --timesteps"), ("normalize", "train.py's --normalize"),
    ("n_envs", "train.py's --n-envs"), ("frame_stack", "train.py has none"),
    ("env_wrapper", "train.py has none"), ("callback", "train.py's --callbacks"),
])
def test_an_rl_zoo_option_among_the_hyperparameters_points_to_train_py(key, pointer, tmp_path,
                                                                       capsys) -> None:
    """rl-baselines3-zoo's YAMLs carry these beside the agent's keywords: n_timesteps was met
    with "did you mean 'n_steps'?", whose advice set PPO's rollout to the run's length."""
    main = load_main("train.py")
    assert main(["--hp", f"{key}=1", "--warmup", "none", "--timesteps", "32",
                 "--log-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert f"{key} is an rl-baselines3-zoo option, not a ppo hyper-parameter" in err
    assert pointer in err and "did you mean" not in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("agent", ["algos:qrdqn", "qrdqn", "PPO2"])
def test_an_agent_train_py_cannot_train_lists_the_learners_and_the_way_for_ones_own(
        agent: str, tmp_path: Path, capsys) -> None:
    """`--agents algos:qrdqn` was refused listing "every policy name: ..., <module>:<attribute>",
    the very form refused as valid: train.py trains the built-in learners alone. The refusal
    lists those, and says where a learner of one's own runs (README, the online study)."""
    main = load_main("train.py")
    assert main(["--agents", agent, "--log-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"train.py: error: unknown agent '{agent}'"), err
    assert ("(did you mean 'ppo'?)" in err) == (agent == "PPO2"), err
    assert ("train.py trains ppo, a2c, dqn, maskable-ppo, sac, trpo, recurrent-ppo, the "
            "built-in Stable-Baselines3 and sb3-contrib learners; ") in err, err
    assert "python evaluate.py --online --online-agents <module>:<builder>" in err, err
    assert "CONTRIBUTING.md" in err and "<module>:<attribute>" not in err, err
    assert "heft" not in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()
    # plan(), reached from Python with a config that skipped validate(), says the same
    from agents.run_plan import plan

    with pytest.raises(ConfigError) as refused:
        plan(dataclasses.replace(TrainConfig(), agents=[agent]))
    assert "python evaluate.py --online --online-agents" in str(refused.value)
    assert "<module>:<attribute>" not in str(refused.value)


def test_a_layer_width_may_be_the_largest_the_error_names() -> None:
    """The widths' range 1..MAX_LAYER_WIDTH is closed: its top is taken, one more refused."""
    check_override_types("ppo", {}, {"policy_kwargs": {"net_arch": [MAX_LAYER_WIDTH, 1]}})
    with pytest.raises(ValueError, match=f"each width an integer in 1..{MAX_LAYER_WIDTH}"):
        check_override_types("ppo", {}, {"policy_kwargs": {"net_arch": [MAX_LAYER_WIDTH + 1]}})


def test_bad_input_exits_cleanly_from_the_command_line(tmp_path: Path) -> None:
    done = script("train.py", "--agents", "qlearning", "--log-dir", str(tmp_path / "runs"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "valid names" in done.stderr or "trains ppo" in done.stderr


def test_train_checks_its_output_folder_and_config_values_first(tmp_path: Path, capsys) -> None:
    main = load_main("train.py")
    a_file = tmp_path / "f.txt"
    a_file.write_text("not a folder")
    for log_dir, message in ((a_file, "exists and is not a folder"),
                             (a_file / "runs", "is a file, not a folder")):
        assert main(["--log-dir", str(log_dir), "--timesteps", "32"]) == 2
        assert message in capsys.readouterr().err
    config = tmp_path / "c.yaml"
    for text, message in (("hp: [noeq]\n", "option hp: hyper-parameter override 'noeq'"),
                          (b"seeds: [\xff]\n", "is not UTF-8 text"),
                          ("agents: [ppo\n  seeds: 1\n",
                           "is not valid YAML at line 2, column 8: expected ',' or ']'")):
        config.write_bytes(text if isinstance(text, bytes) else text.encode())
        assert main(["--config", str(config), "--log-dir", str(tmp_path / "runs")]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
        assert err.count("\n") == 1 and str(config) in err      # one line, naming the file
    assert a_file.read_text() == "not a folder" and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("name", ["train.py", "evaluate.py"])
def test_the_help_is_the_same_under_python_OO(name: str) -> None:
    """``python -OO`` strips docstrings, and --help's text is the CLI module's docstring: it
    read as the config dataclass's signature there ("TrainConfig(agents: 'list[str]' = ...")."""
    helps = [subprocess.run([sys.executable, *flags, str(ROOT / name), "--help"], text=True,
                            capture_output=True, timeout=JOB_TIMEOUT_S, check=True).stdout
             for flags in ([], ["-OO"])]
    assert helps[0] == helps[1] and "Options resolve as" in helps[1]


def test_a_run_folder_whose_name_is_not_utf8_is_refused_first(tmp_path: Path, capsys) -> None:
    """A --log-dir holding a byte that is not UTF-8 (a Latin-1 folder name on a UTF-8 system,
    read as a surrogate escape) built each run's model and ended it in a UnicodeEncodeError
    traceback from TensorBoard's writer, which encodes its file's path in UTF-8."""
    main = load_main("train.py")
    latin1 = tmp_path / os.fsdecode(b"r\xfcns")
    for flag in ("--log-dir", "--resume"):
        assert main([flag, str(latin1), "--timesteps", "32", "--eval-tasks", "0",
                     "--warmup", "none", "--no-progress-bar"]) == 2
        err = capsys.readouterr().err
        assert f"{flag} " in err and "the byte 0xfc, which is not UTF-8" in err
        assert err.count("\n") == 1 and "Traceback" not in err
    assert not latin1.exists()


def test_a_run_folder_named_in_utf8_under_an_ascii_locale_is_refused_first(tmp_path: Path
                                                                          ) -> None:
    """Under LC_ALL=C with Python's UTF-8 mode and locale coercion off, Python reads file names
    as ASCII, so a name in UTF-8 reached TensorBoard's writer as surrogate escapes: the run's
    traceback as for a Latin-1 name, whose message (a byte "not UTF-8") would mislead here."""
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    done = subprocess.run([sys.executable, str(ROOT / "train.py"), "--log-dir", "r\u00fcns",
                           "--timesteps", "32", "--eval-tasks", "0", "--warmup", "none",
                           "--no-progress-bar"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=JOB_TIMEOUT_S)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "Python reads file names here as ascii, not UTF-8" in done.stderr
    assert "PYTHONUTF8=1" in done.stderr and not any(tmp_path.iterdir())


@pytest.mark.parametrize(("name", "args"), [
    ("train.py", ["--timesteps", "32", "--eval-tasks", "0", "--warmup", "none"]),  # runs/ relative
    ("evaluate.py", ["--no-online", "--out", "{tmp}/results"]),                     # --out absolute
])
def test_a_working_directory_removed_under_the_shell_is_refused_first(
        tmp_path: Path, name: str, args: list[str]) -> None:
    """A working directory removed while the shell stood in it: torch could not load ("Intel
    oneMKL FATAL ERROR: Cannot load libtorch_cpu.so", status 2, whatever the paths), and a
    relative --log-dir read "cannot create runs: No such file or directory". One line says
    what is wrong, before torch loads."""
    gone = tmp_path / "gone"
    gone.mkdir()
    command = " ".join(shlex.quote(a) for a in (
        sys.executable, str(ROOT / name), *(a.format(tmp=tmp_path) for a in args),
        "--no-progress-bar"))
    done = subprocess.run(["bash", "-c", f'cd "$0" && rmdir "$0" && exec {command}', str(gone)],
                          capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert done.returncode == 2 and done.stderr == (
        f"{name}: error: the working directory {str(gone)!r} no longer exists (removed after "
        "the shell entered it): cd to a folder that does, and run it again\n")
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_cannot_be_read_is_one_error_line_naming_it(tmp_path: Path, capsys,
                                                              unreadable) -> None:
    """A --config, scenario, hardware, trace or model file without read permission was a
    PermissionError traceback (exit 1) out of train.py and evaluate.py."""
    from agents.base import POLICY_FILE
    from envs.traces import TRACES
    from inference.hardware import PRESET_DIR

    config = tmp_path / "c.yaml"
    config.write_text("timesteps: 32\n")
    hardware = tmp_path / "hw.yaml"
    hardware.write_text((PRESET_DIR / "server.yaml").read_text())
    scenario = tmp_path / "sc.yaml"
    scenario.write_text("episode_tasks: 20\n")
    trace = tmp_path / "t.csv"
    trace.write_text(TRACES["azure-code"].read_text().split("\n", 60)[0])
    traced = tmp_path / "traced.yaml"
    traced.write_text(f"workload: {{trace: {trace}}}\n")
    model = tmp_path / "m.zip"
    with zipfile.ZipFile(model, "w") as zf:
        zf.writestr(POLICY_FILE, json.dumps({"name": "all-gpu", "config": {}}))
    runs, out = tmp_path / "runs", tmp_path / "results"
    train = ["--timesteps", "32", "--log-dir", str(runs), "--no-progress-bar"]
    evaluation = ["--no-online", "--seeds", "1", "--out", str(out), "--no-progress-bar"]
    for script_name, args, path, what in (
            ("train.py", ["--config", str(config), *train], config, "config file"),
            ("train.py", ["--scenario", str(scenario), *train], scenario, "scenario file"),
            ("train.py", ["--hardware", str(hardware), *train], hardware, "hardware file"),
            ("train.py", ["--scenario", str(traced), *train], trace, ""),
            ("evaluate.py", ["--models", str(model), *evaluation], model, "model file")):
        unreadable(path)
        assert load_main(script_name)(args) == 2
        err = capsys.readouterr().err
        assert f"{what} {path}".strip() in err and "cannot be read: Permission denied" in err, err
        assert err.count("\n") == 1 and "Traceback" not in err
    assert not runs.exists() and not out.exists()


def test_an_output_folder_that_is_a_broken_link_says_so(tmp_path: Path, capsys) -> None:
    """A --log-dir or --out that is a symbolic link to a folder since removed (or under one):
    the error was "cannot create LINK: File exists", of a path that seems not to exist."""
    link = tmp_path / "results"
    link.symlink_to(tmp_path / "moved")
    for script_name, flag in (("train.py", "--log-dir"), ("evaluate.py", "--out")):
        for given in (link, link / "deeper"):
            assert load_main(script_name)([flag, str(given)]) == 2
            err = capsys.readouterr().err
            assert (f"{link} is a symbolic link to {tmp_path / 'moved'}, which does not exist"
                    in err), err
    assert not (tmp_path / "moved").exists()


def test_the_output_folder_check_leaves_a_folder_another_process_makes_be(
        tmp_path: Path, monkeypatch) -> None:
    """Two train.py started at once into a new --log-dir: each checked that it could make the
    folder by making it and removing it again, so the one that found it made a moment sooner
    was refused ("cannot create runs: File exists"), and the check could remove the folder
    the other was about to make its run in. The check makes a folder of its own instead."""
    from agents.config import TrainConfig
    from agents.config_parsing import parse_config

    runs = tmp_path / "runs"
    original = Path.mkdir

    def the_other_process_first(self, *args, **kwargs):
        if self == runs and not runs.exists():
            original(self)             # the other train.py, a moment sooner
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", the_other_process_first)
    parse_config(TrainConfig, ["--log-dir", str(runs)])     # not refused
    assert [p.name for p in tmp_path.iterdir()] in ([], ["runs"])    # nothing of the check's


def test_a_whole_float_where_an_integer_hyper_parameter_goes_is_made_one() -> None:
    """--hp n_steps=1e3 (YAML's 1000.0) was refused as "must be an integer", where train.py's
    --timesteps 1e3 is taken; SB3 itself needs the int (a float n_steps sized no buffer). A
    fraction stays refused, and a float where a float goes stays a float."""
    from agents.sb3_hyperparams import hyperparams_with

    params = hyperparams_with("ppo", "InferenceAlloc-v0",
                              {"n_steps": 1e3, "batch_size": 50.0, "learning_rate": 1.0})
    assert (params["n_steps"], params["batch_size"]) == (1000, 50)
    assert type(params["n_steps"]) is int and type(params["batch_size"]) is int
    assert type(params["learning_rate"]) is float
    for bad in (1000.5, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="n_steps must be an integer"):
            hyperparams_with("ppo", "InferenceAlloc-v0", {"n_steps": bad})


def _ints_only(value) -> bool:
    """Every number in `value` (nested lists and mappings) is an int, none a float."""
    if isinstance(value, dict):
        return all(map(_ints_only, value.values()))
    if isinstance(value, list):
        return all(map(_ints_only, value))
    return not isinstance(value, float)


@pytest.mark.parametrize("agent, kwargs, built", [
    ("ppo", {"net_arch": [64.0, 1e2]}, {"net_arch": [64, 100]}),
    ("ppo", {"net_arch": {"pi": [32.0], "vf": [16]}, "activation_fn": "relu"},
     {"net_arch": {"pi": [32], "vf": [16]}, "activation_fn": "relu"}),
    ("recurrent-ppo", {"lstm_hidden_size": 32.0, "n_lstm_layers": 1.0},
     {"lstm_hidden_size": 32, "n_lstm_layers": 1}),
])
def test_a_whole_float_among_the_policys_sizes_is_made_an_integer(agent, kwargs, built) -> None:
    """A width written 64.0 was refused, where n_steps=1e3 is taken; a fraction stays refused.
    The sizes reach SB3 as ints (a float width fails inside torch as the net is built)."""
    from agents.sb3_hyperparams import hyperparams_with

    sizes = hyperparams_with(agent, "InferenceAlloc-v0", {"policy_kwargs": kwargs})["policy_kwargs"]
    assert {key: sizes[key] for key in built} == built and _ints_only(sizes)
    fraction = ({"net_arch": [64.5]} if agent == "ppo" else {"lstm_hidden_size": 32.5})
    with pytest.raises(ValueError, match="must be"):
        hyperparams_with(agent, "InferenceAlloc-v0", {"policy_kwargs": {**kwargs, **fraction}})


def test_none_turns_off_what_sb3_lets_be_none_and_a_warm_starts_overrides_fail_up_front(
        tmp_path, capsys):
    # the Split env's warm_start sets target_kl 0.03: null (SB3's default, "no limit") must
    # replace it, and a mistyped value fail before any run, not as a traceback once it starts
    from agents.sb3_hyperparams import hyperparams_with

    assert hyperparams_with("ppo", "InferenceAllocSplit-v0", {"target_kl": None},
                            warm_start=True)["target_kl"] is None
    with pytest.raises(ValueError, match="gamma must be a number"):
        hyperparams_with("ppo", "InferenceAlloc-v0", {"gamma": None})
    assert load_main("train.py")(["--env-id", "InferenceAllocSplit-v0", "--conservative", "heft-split",
                 "--hp", "target_kl=abc", "--log-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "target_kl must be a number" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("override", "message"), [
    ("target_kl=abc", "target_kl must be a number"),
    ("target_kl=-1", "target_kl must be >= 1e-09"),
    ("target_kl=0", "target_kl must be >= 1e-09"),
    ("clip_range_vf=lin_0.2", "clip_range_vf must be a number"),
])
def test_a_number_sb3_defaults_to_none_is_checked_when_given(override, message, tmp_path, capsys):
    # SB3's default None left them unchecked: target_kl=abc failed inside the run, after its
    # folder was made, and target_kl <= 0 stopped every update after its first minibatch
    main = load_main("train.py")
    assert main(["--hp", override, "--warmup", "none", "--timesteps", "32",
                 "--log-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_output_folder_that_cannot_be_made_is_one_line_before_any_work(tmp_path: Path,
                                                                     capsys) -> None:
    # os.access says yes to root under /proc (and on a root-squashed share): only mkdir knows
    for script_name, flag in (("train.py", "--log-dir"), ("evaluate.py", "--out")):
        assert load_main(script_name)([flag, "/proc/no-such-entry/out"]) == 2
        err = capsys.readouterr().err
        assert "cannot create /proc/no-such-entry" in err and "Traceback" not in err
    # a folder that can be made is checked the same way and not left behind by the check
    from agents.config import TrainConfig
    from agents.config_parsing import parse_config

    parse_config(TrainConfig, ["--log-dir", str(tmp_path / "a" / "b")])
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(("args", "expected"), [
    (["--seed-base", "-1"], "--seed-base: seeds must lie in 0 .."),
    (["--seeds", "10", "--seed-base", "2147483640"], "2147483640 .. 2147483649"),
    (["--online", "--models", "x.zip"], "--models is not used there"),
    (["--reproduce-article", "--models", "x.zip"], "--models is not used there"),
    (["--online", "--reproduce-article"], "separate studies"),
    (["--online", "--no-online"], "contradict"),
    (["--reproduce-article", "--scenarios", "bursty"], "--scenarios is not used there"),
    (["--online", "--scenarios", "article", "bursty"], "one scenario"),
    (["--online", "--baselines", "heft"], "--baselines is not used there: --online"),
    # the study runs --online-seeds seeds: --seeds beside it counted nothing
    (["--online", "--seeds", "7", "--online-seeds", "5"],
     "--seeds is not used there: --online runs --online-seeds seeds"),
    (["--reproduce-article", "--hardware", "edge"], "--hardware is not used there"),
    (["--reproduce-article", "--online-samples", "50"], "--online-samples is not used there"),
    (["--models", "x.zip", "--runs", "elsewhere"], "--runs is not used there: --models"),
    (["--article-clients", "2"], "only --reproduce-article runs the article job"),
    (["--no-online", "--online-seeds", "3"], "--no-online skips the online study"),
    (["--baselines", "gated-dqn"], "baseline 'gated-dqn' is a learning agent"),
    # --seeds is a count here, a list in train.py: a seed typed as a count would run for days
    (["--seeds", "10000"], "pass --seeds 1 --seed-base 10000"),
    (["--online-seeds", "5000"], "pass --online-seeds 1 --seed-base 5000"),
    (["--online", "--online-reward", "speed"],
     "--online-reward must be one of latency, relative, normalised, got 'speed'"),
    (["--no-online", "--online-reward", "latency"], "--no-online skips the online study"),
    (["--reproduce-article", "--online-reward", "latency"], "--online-reward is not used there"),
    # the env's refusal named its episode_tasks, no option of evaluate.py's
    (["--online", "--online-samples", "1000001"], "--online-samples is an episode's tasks, at "
                                                  "most 1000000, got 1000001"),
])
def test_evaluate_rejects_options_it_would_ignore_or_fail_on_late(args, expected, tmp_path,
                                                                   capsys) -> None:
    main = load_main("evaluate.py")
    assert main([*args, "--out", str(tmp_path / "results"), "--no-progress-bar"]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
    assert not (tmp_path / "results").exists()


def test_evaluate_online_reward_reaches_the_study_and_its_markdown(tmp_path: Path) -> None:
    main = load_main("evaluate.py")
    out = tmp_path / "results"
    assert main(["--online", "--online-reward", "normalised", "--online-samples", "20",
                 "--online-seeds", "1", "--out", str(out), "--no-progress-bar"]) == 0
    assert "on the normalised reward" in (out / "stabilization.md").read_text()


def test_evaluate_online_names_the_hardware_it_ran_on(tmp_path: Path) -> None:
    """--online --hardware edge wrote 'Scenario article' alone, and the plot's title 'article':
    read as the server's study. The summary's sections name a --hardware (section_of)."""
    main = load_main("evaluate.py")
    out = tmp_path / "results"
    assert main(["--online", "--hardware", "edge", "--online-samples", "20",
                 "--online-seeds", "1", "--out", str(out), "--no-progress-bar"]) == 0
    assert (out / "stabilization.md").read_text().splitlines()[2].startswith(
        "Scenario article (hardware edge); ")


def test_an_unknown_baseline_is_the_only_line_and_lists_fixed_policies(tmp_path, capsys) -> None:
    main = load_main("evaluate.py")
    assert main(["--baselines", "nope", "--runs", str(tmp_path), "--no-online",
                 "--out", str(tmp_path / "results")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""          # not "no trained models ...; evaluating the baselines"
    (line,) = captured.err.splitlines()
    assert line.startswith("evaluate.py: error: unknown baseline 'nope'; valid names: all-cpu")
    assert "ppo" not in line and "static:cpu,gpu,gpu" not in line and "static:<load>" in line


def test_evaluate_seeds_given_as_a_list_says_it_is_a_count(tmp_path, capsys) -> None:
    main = load_main("evaluate.py")
    with pytest.raises(SystemExit) as info:     # argparse's exit, with our hint
        main(["--seeds", "0", "1", "2", "--out", str(tmp_path / "results")])
    assert info.value.code == 2
    assert "unrecognized arguments: 1 2 (--seeds is a count here" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("script, argv, meant", [
    ("train.py", ["--agent", "ppo"], "'--agents'"),
    ("train.py", ["--time", "64"], "'--timesteps'"),
    ("evaluate.py", ["--seed", "3"], "'--seeds'"),
    ("evaluate.py", ["--onlin"], "'--online'"),
])
def test_an_abbreviated_flag_is_refused_naming_the_flag_it_is_nearest_to(
        script, argv, meant, tmp_path, capsys) -> None:
    """argparse's prefix matching ran `--agent ppo` as `--agents ppo`: a flag added later
    with that prefix would have turned a working command line into another flag's or an
    ambiguous one. Only whole flag names are taken; the refusal names the nearest."""
    with pytest.raises(SystemExit) as info:
        load_main(script)([*argv, "--log-dir" if script == "train.py" else "--out",
                           str(tmp_path / "out")])
    assert info.value.code == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert line.endswith(f"error: unrecognized arguments: {' '.join(argv)} (did you mean "
                         f"{meant}?)"), line
    assert not (tmp_path / "out").exists()


def test_a_whole_flag_with_its_value_after_an_equals_sign_is_still_taken() -> None:
    config, given = parse_config(EvalConfig, ["--seeds=3"])
    assert config.seeds == 3 and given == {"seeds"}


@pytest.mark.parametrize("script, argv, says", [
    ("train.py", ["--timesteps", "nan"], "argument --timesteps: invalid int value: 'nan'"),
    ("train.py", ["--timesteps", "12.5"], "argument --timesteps: invalid int value: '12.5'"),
    ("train.py", ["--timesteps", ""], "argument --timesteps: invalid int value: ''"),
    ("train.py", ["--time", "5"], "unrecognized arguments: --time 5"),
    ("train.py", ["foo"], "unrecognized arguments: foo"),
    ("evaluate.py", ["--baselines"], "argument --baselines: expected at least one argument"),
    ("evaluate.py", ["--episodes", "x"], "argument --episodes: invalid int value: 'x'"),
])
def test_argparse_own_refusals_are_one_line(script, argv, says, tmp_path, capsys) -> None:
    """argparse printed its usage, 13 to 21 lines of every option, above its error line, which
    a refusal of ours (--timesteps 0) never did: the line that says what is wrong was lost
    under it. Every refusal is the one line, exit status 2."""
    with pytest.raises(SystemExit) as info:
        load_main(script)([*argv, "--log-dir" if script == "train.py" else "--out",
                           str(tmp_path / "out")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{script}: error: {says}"), err
    assert not (tmp_path / "out").exists()


def test_many_long_unrecognized_arguments_are_shortened_together(capsys) -> None:
    # each was shortened alone, so fifty 150-character strays still filled the screen
    with pytest.raises(SystemExit):
        parse_config(EvalConfig, [f"stray{i}-" + "x" * 150 for i in range(50)])
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "unrecognized" in x]
    assert "stray0-" in line and "characters elided" in line
    assert len(line) < 400


def test_evaluate_checks_its_output_folder_first(tmp_path: Path, capsys) -> None:
    main = load_main("evaluate.py")
    a_file = tmp_path / "results"
    a_file.write_text("keep me")
    assert main(["--out", str(a_file), "--no-online", "--no-progress-bar"]) == 2
    assert "--out" in capsys.readouterr().err and a_file.read_text() == "keep me"


def test_evaluate_names_a_missing_or_corrupt_model(tmp_path: Path, capsys) -> None:
    main = load_main("evaluate.py")
    bad = tmp_path / "bad.zip"
    base = ["--out", str(tmp_path / "results"), "--no-online", "--no-progress-bar"]
    assert main(["--models", str(bad), *base]) == 2
    assert str(bad) in capsys.readouterr().err
    bad.write_bytes(b"PK\x03\x04 this is not a model")
    assert main(["--models", str(bad), *base]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err
    assert main(["--scenarios", "nowhere", *base]) == 2
    assert "article" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_a_failed_run_leaves_nothing_half_made(tmp_path: Path, monkeypatch, capsys) -> None:
    from agents.sb3_factory import SB3Agent

    main = load_main("train.py")
    runs = tmp_path / "runs"
    args = ["--timesteps", "128", "--warmup", "none", "--checkpoint-interval", "32",
            "--log-dir", str(runs), *TINY]
    original = SB3Agent.learn

    def fail_at_once(self, total_timesteps, callback=None, **kwargs):
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(SB3Agent, "learn", fail_at_once)
    assert main(args) == 1
    assert "removed" in capsys.readouterr().err
    assert list(runs.iterdir()) == []          # no checkpoint yet: no folder

    def fail_after_a_checkpoint(self, total_timesteps, callback=None, **kwargs):
        original(self, 64, callback=callback, **kwargs)
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(SB3Agent, "learn", fail_after_a_checkpoint)
    assert main(args) == 1
    assert "--resume" in capsys.readouterr().err
    (run,) = runs.iterdir()                    # kept, resumable, but no final model
    assert not (run / "model.zip").exists() and (run / "checkpoints" / "model_64_steps.zip").is_file()
    assert leftover_temp_files(runs) == []


def test_a_failed_run_does_not_stop_the_runs_after_it(tmp_path: Path, monkeypatch, capsys) -> None:
    """A seed whose training died (a NaN in the Split env's PPO, seen at 58k steps) ended the
    whole command: the seeds and agents after it never ran."""
    from agents.sb3_factory import SB3Agent

    main = load_main("train.py")
    runs = tmp_path / "runs"
    original, calls = SB3Agent.learn, []

    def first_fails(self, total_timesteps, callback=None, **kwargs):
        calls.append(self.model.seed)
        if len(calls) == 1:
            raise RuntimeError("simulated NaN")
        return original(self, total_timesteps, callback=callback, **kwargs)

    monkeypatch.setattr(SB3Agent, "learn", first_fails)
    assert main(["--timesteps", "64", "--warmup", "none", "--seeds", "0", "1",
                 "--checkpoint-interval", "0", "--log-dir", str(runs), *TINY]) == 1
    out, err = capsys.readouterr()
    assert calls == [0, 1]
    assert "simulated NaN" in err and "going on with the other runs" in err
    assert err.rstrip().splitlines()[-1].startswith("train.py: error: 1 of 2 runs failed: run ")
    (run,) = runs.iterdir()                    # seed 1's, finished; seed 0's removed
    assert "__1__" in run.name and (run / "model.zip").is_file()
    # and its row in the table, named by its seed ("ppo" alone read as seed 0's)
    assert "finished ppo seed 1" in out and "| ppo (seed 1) |" in out


def test_an_interrupt_stops_the_whole_plan_and_keeps_a_resumable_run(tmp_path: Path, monkeypatch,
                                                                     capsys) -> None:
    """Ctrl-C is no failed run to go on from (agents/training.py's docstring): the plan stops,
    the seeds after it never start, and the run interrupted after a checkpoint is kept
    without model.zip, the command to continue it said."""
    from agents.sb3_factory import SB3Agent

    main = load_main("train.py")
    runs = tmp_path / "runs"
    original, calls = SB3Agent.learn, []

    def interrupted_after_a_checkpoint(self, total_timesteps, callback=None, **kwargs):
        calls.append(self.model.seed)
        original(self, 64, callback=callback, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(SB3Agent, "learn", interrupted_after_a_checkpoint)
    assert main(["--timesteps", "128", "--warmup", "none", "--seeds", "0", "1",
                 "--checkpoint-interval", "32", "--log-dir", str(runs), *TINY]) == 130
    _, err = capsys.readouterr()
    assert calls == [0]                        # seed 1's run never started
    (run,) = runs.iterdir()
    assert f"run {run.name} interrupted; kept" in err and f"--resume {run.name}" in err
    assert not (run / "model.zip").exists()
    assert (run / "checkpoints" / "model_64_steps.zip").is_file()


@pytest.mark.parametrize(("console", "evaluate"), [(False, "python evaluate.py"),
                                                    (True, "infer-alloc-evaluate")])
def test_an_interrupt_after_the_model_is_saved_says_the_run_is_complete(
        console: bool, evaluate: str, tmp_path: Path, monkeypatch, capsys) -> None:
    """Ctrl-C while the saved model is scored on the held-out episode (the last minute of a
    run): train.py said "interrupted" alone, which reads as a run lost. Its training is
    complete and kept: the message says so and how to evaluate it, as the user has it
    (infer-alloc-train, a wheel's console script, has infer-alloc-evaluate beside it)."""
    import agents.run_training as run_training
    from agents.train_cli import main as console_main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_training, "score_final_model", interrupted)
    runs = tmp_path / "runs"
    main = console_main if console else load_main("train.py")
    assert main(["--timesteps", "64", "--warmup", "none", "--checkpoint-interval", "0",
                 "--log-dir", str(runs), *TINY]) == 130
    (run,) = runs.iterdir()
    assert saved_steps(run / "model.zip") == 64
    err = capsys.readouterr().err
    assert f"run {run.name} interrupted after its training finished; kept {run}" in err
    assert f"(its model.zip is complete: evaluate it with: {evaluate} --models {run})" in err


@pytest.mark.parametrize("stop", ["ctrl-c", "full disk"])
def test_a_run_stopped_before_it_learns_leaves_no_folder(tmp_path: Path, monkeypatch, capsys,
                                                         stop: str) -> None:
    """Ctrl-C while a run set up its held-out episode (best-static's run of --eval-tasks tasks,
    seconds long), or a full disk when TensorBoard opened its events file: the new run folder
    was left behind, an events file alone in it, unmentioned; the disk's error a traceback."""
    import errno
    import os

    import agents.run_training as run_training

    def stopped(*args, **kwargs):
        if stop == "ctrl-c":
            raise KeyboardInterrupt
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(run_training, "held_out_eval" if stop == "ctrl-c" else "tensorboard_logger",
                        stopped)
    runs = tmp_path / "runs"
    assert load_main("train.py")(["--timesteps", "64", "--warmup", "none",
                                  "--eval-interval", "32", "--log-dir", str(runs),
                                  *TINY]) == (130 if stop == "ctrl-c" else 1)
    err = capsys.readouterr().err
    assert list(runs.iterdir()) == [] and "(no checkpoint)" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("refusal", ["reader gone", "full disk"])
def test_evaluate_py_writes_its_files_past_a_stdout_that_takes_no_more(
        tmp_path: Path, refusal: str) -> None:
    """`evaluate.py | head` whose head has exited: the next line printed was a BrokenPipeError
    traceback, and Python's flush at exit a second one ("Exception ignored"); when that was
    handled, the job still ended there, silently, its files unwritten (the table is printed
    before them). `> /dev/full`: an OSError traceback, the files unwritten too. The job goes
    on and writes them, with one line on stderr; a full disk fails its status."""
    full = Path("/dev/full")
    if refusal == "full disk" and not full.exists():
        pytest.skip("no /dev/full on this platform")
    read_end, write_end = os.pipe()
    os.close(read_end)                  # the reader is gone before the first line
    out = tmp_path / "results"
    try:
        with full.open("w") if refusal == "full disk" else contextlib.nullcontext() as disk:
            done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"),
                                   "--baselines", "all-gpu", "--no-online", "--seeds", "1",
                                   "--episodes", "1", "--episode-tasks", "5", "--out", str(out),
                                   "--no-progress-bar"],
                                  stdout=write_end if disk is None else disk,
                                  stderr=subprocess.PIPE, text=True, timeout=JOB_TIMEOUT_S)
    finally:
        os.close(write_end)
    lost = ("the reader of stdout has gone (Broken pipe)" if disk is None
            else "cannot write to stdout (No space left on device)")
    assert (done.returncode, done.stderr) == (
        0 if disk is None else 1, f"evaluate.py: {lost}; the job carries on without it\n")
    assert sorted(p.name for p in out.iterdir()) == ["latency_cdf.png", "summary.csv",
                                                     "summary.md"]
    assert "all-gpu" in (out / "summary.md").read_text()


def deliver_sigterm() -> None:
    """What the process does on SIGTERM (SLURM's scancel, a job's time limit, docker stop): its
    handler run where the process is, as the interpreter runs it, without sending a signal."""
    import signal

    handler = signal.getsignal(signal.SIGTERM)
    assert callable(handler), f"SIGTERM's handler is {handler!r}: the process dies on the spot"
    handler(signal.SIGTERM, None)


@pytest.mark.parametrize("checkpointed", [True, False])
def test_sigterm_stops_train_py_as_ctrl_c_does(tmp_path: Path, monkeypatch, capsys,
                                               checkpointed: bool) -> None:
    """SIGTERM killed train.py where it stood: no message, exit -15, a run folder without
    a checkpoint left behind (--resume then refused it) and a checkpoint's temp file where it
    was being written. It is handled as Ctrl-C: the run kept (with the command to continue
    it) or removed, exit status 143, SIGTERM's earlier handler back once main returns.
    While the run trains, the stop waits for the end of the step it came in (never raised
    inside TensorBoard's events writer, whose lock it could leave held): the checkpoint that
    step saves after it came is kept, and the run goes no further."""
    import signal

    from stable_baselines3.common.callbacks import BaseCallback

    from agents.sb3_factory import SB3Agent

    main = load_main("train.py")
    runs = tmp_path / "runs"
    original = SB3Agent.learn
    at = 64 if checkpointed else 1
    went_on: list[int] = []

    class Sigterm(BaseCallback):
        """Sends SIGTERM in step `at`, before the run's own callbacks (the checkpoint's)."""

        def _on_step(self) -> bool:
            if self.num_timesteps == at:
                deliver_sigterm()
                went_on.append(self.num_timesteps)
            return True

    def learn(self, total_timesteps, callback=None, **kwargs):
        return original(self, total_timesteps, callback=[Sigterm(), *callback], **kwargs)

    monkeypatch.setattr(SB3Agent, "learn", learn)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["--timesteps", "128", "--warmup", "none", "--checkpoint-interval", "32",
                 "--log-dir", str(runs), *TINY]) == 143
    assert went_on == [at]
    assert signal.getsignal(signal.SIGTERM) == before
    err = capsys.readouterr().err
    assert err.rstrip().splitlines()[-1] == "train.py: terminated (SIGTERM)"
    assert leftover_temp_files(runs) == []
    if checkpointed:
        (run,) = runs.iterdir()
        assert f"run {run.name} interrupted; kept" in err and f"--resume {run.name}" in err
        assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
            "model_32_steps.zip", "model_64_steps.zip"]
        assert not (run / "model.zip").exists()
    else:
        assert list(runs.iterdir()) == [] and "(no checkpoint)" in err


@pytest.mark.parametrize("when", ["in the last update", "as the logger closes"])
def test_a_sigterm_after_the_last_step_keeps_the_finished_model(tmp_path: Path, monkeypatch,
                                                                capsys, when: str) -> None:
    """A stop in the training's last update (after the last step's callbacks) waits for
    model.zip, then stops the run's scoring; one as the scored run closes its events writer,
    past the last safe point, was raised as their block ended, with no word of the run. Either
    way the run is kept, finished, and said to be."""
    from stable_baselines3.common.callbacks import BaseCallback

    import agents.run_training as run_training
    from agents.sb3_factory import SB3Agent

    main = load_main("train.py")
    runs = tmp_path / "runs"
    if when == "in the last update":
        original = SB3Agent.learn

        class SigtermAtTheEnd(BaseCallback):
            def _on_step(self) -> bool:
                return True

            def _on_training_end(self) -> None:
                deliver_sigterm()

        def learn(self, total_timesteps, callback=None, **kwargs):
            return original(self, total_timesteps, callback=[SigtermAtTheEnd(), *callback],
                            **kwargs)

        monkeypatch.setattr(SB3Agent, "learn", learn)
    else:
        made = run_training.tensorboard_logger

        def tensorboard_logger(folder):
            logger = made(folder)
            close = logger.close

            def close_with_a_sigterm():
                deliver_sigterm()
                close()

            logger.close = close_with_a_sigterm
            return logger

        monkeypatch.setattr(run_training, "tensorboard_logger", tensorboard_logger)
    assert main(["--timesteps", "64", "--warmup", "none", "--log-dir", str(runs), *TINY]) == 143
    (run,) = runs.iterdir()
    err = capsys.readouterr().err
    assert f"run {run.name} interrupted after its training finished; kept" in err
    assert (run / "model.zip").is_file()


def test_a_sigterm_that_also_ends_the_subproc_workers_is_told_as_the_stop(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """SLURM's SIGTERM goes to every process of the job: a SubprocVecEnv's workers end as the
    trainer waits for their step, whose pipes then fail it. The stop, waiting for the end of
    the step, came second: the run was told as failed (an EOFError), with no word of what it
    kept. It is told as the stop it was."""
    import signal

    from stable_baselines3.common.vec_env import SubprocVecEnv

    main = load_main("train.py")
    runs = tmp_path / "runs"
    original = SubprocVecEnv.step_wait
    steps = []

    def step_wait(self):
        steps.append(1)
        if len(steps) == 40:    # past the checkpoint at step 64 (two envs a step)
            for process in self.processes:
                process.terminate()
                process.join()
            deliver_sigterm()
        return original(self)

    monkeypatch.setattr(SubprocVecEnv, "step_wait", step_wait)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["--timesteps", "256", "--warmup", "none", "--checkpoint-interval", "64",
                 "--vec-env", "subproc", "--n-envs", "2", "--log-dir", str(runs), *TINY]) == 143
    assert len(steps) == 40 and signal.getsignal(signal.SIGTERM) == before
    err = capsys.readouterr().err
    (run,) = runs.iterdir()
    assert f"run {run.name} interrupted; kept" in err and "failed" not in err
    assert err.rstrip().splitlines()[-1] == "train.py: terminated (SIGTERM)"
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["model_64_steps.zip"]


def test_sigterm_stops_evaluate_py_as_ctrl_c_does(tmp_path: Path, monkeypatch, capsys) -> None:
    """evaluate.py on SIGTERM: exit status 143 and its interrupt message, not a silent -15."""
    from agents import reporting

    def terminated(cfg, report=print):
        deliver_sigterm()
        raise AssertionError("SIGTERM's handler returned")

    monkeypatch.setattr(reporting, "run", terminated)
    assert load_main("evaluate.py")(["--out", str(tmp_path / "r"), "--no-online"]) == 143
    assert "evaluate.py: terminated (SIGTERM)" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "heavy"), [("train.py", "agents.training"),
                                             ("evaluate.py", "agents.reporting")])
def test_ctrl_c_while_the_modules_load_is_one_line(monkeypatch, capsys, name: str,
                                                  heavy: str) -> None:
    """Ctrl-C in a CLI's first seconds, while torch and SB3 load: a traceback, exit -2."""
    import types

    class Loading(types.ModuleType):
        def __getattr__(self, attribute: str):
            if attribute.startswith("__"):       # what tracebacks and pytest look up
                raise AttributeError(attribute)
            raise KeyboardInterrupt

    monkeypatch.setitem(sys.modules, heavy, Loading(heavy))
    try:
        status = load_main(name)(["--no-progress-bar"])
    except KeyboardInterrupt:
        pytest.fail("the interrupt went through main: a traceback")
    assert status == 130
    assert capsys.readouterr().err.startswith(f"{name}: interrupted")


def test_an_interrupted_evaluation_names_what_it_wrote_and_what_is_older(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """Ctrl-C in the online study, over a folder of an earlier evaluation: evaluate.py said
    "files already written are complete" and had named none of them (its "wrote" lines came
    at the end), so the new summary and the earlier stabilization.* read as one evaluation.
    Each file is named as it is written, and the earlier ones left as such."""
    from agents import reporting

    out, runs = tmp_path / "results", tmp_path / "runs"      # no runs: the baseline alone
    out.mkdir()
    runs.mkdir()
    for name in OUTPUTS:
        (out / name).write_text("an earlier evaluation's\n")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(reporting, "online_study", interrupted)
    assert load_main("evaluate.py")(["--runs", str(runs), "--out", str(out),
                                     "--baselines", "best-static", "--episodes", "1",
                                     "--episode-tasks", "20", "--seeds", "1",
                                     "--no-progress-bar"]) == 130
    said, err = capsys.readouterr()
    wrote = [line for line in said.splitlines() if line.startswith("wrote ")]
    assert wrote == [f"wrote {out / name}" for name in ("summary.csv", "summary.md",
                                                        "latency_cdf.png")]
    assert (f"stabilization.png, stabilization.md in {out} are from an earlier evaluation"
            in said)
    assert "evaluate.py: interrupted" in err


def test_a_failed_evaluation_leaves_no_temp_or_partial_file(trained, tmp_path: Path,
                                                            monkeypatch, capsys) -> None:
    """A full disk while a plot is written: no half-written file, no temp file, and one line
    that names the file it could not write (it was a traceback through PIL, exit status 1)."""
    import errno
    import os

    import matplotlib.figure

    def crash_mid_write(self, fname, *args, **kwargs):
        Path(fname).write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", crash_mid_write)
    out = tmp_path / "results"
    main = load_main("evaluate.py")
    assert main(["--runs", str(trained[0]), "--out", str(out), "--episodes", "1",
                 "--episode-tasks", "20", "--seeds", "1", "--baselines", "best-static",
                 "--no-online", "--no-progress-bar"]) == 1
    assert sorted(p.name for p in out.iterdir()) == ["summary.csv", "summary.md"]
    assert leftover_temp_files(out) == []
    err = capsys.readouterr().err
    assert err.rstrip().splitlines()[-1] == (f"evaluate.py: error: cannot write "
                                             f"{out / 'latency_cdf.png'}: No space left on device")
    assert "Traceback" not in err


def test_a_full_disk_fails_the_run_in_one_line_naming_the_file(tmp_path: Path, monkeypatch,
                                                               capsys) -> None:
    """A full disk while a checkpoint is written: the run's error named no file, under some
    fifty lines of traceback through SB3, zipfile and torch (a traceback is for a bug)."""
    import errno
    import os

    from stable_baselines3 import PPO

    def disk_full(self, path, *args, **kwargs):
        Path(path).write_bytes(b"PK half a zip")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(PPO, "save", disk_full)
    runs = tmp_path / "runs"
    assert load_main("train.py")(["--timesteps", "64", "--warmup", "none",
                                  "--checkpoint-interval", "32", "--log-dir", str(runs),
                                  *TINY]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert (f"cannot write {runs}/InferenceAlloc-v0__ppo__0__" in err
            and "/checkpoints/model_32_steps.zip: No space left on device" in err)
    assert list(runs.iterdir()) == [] and "(no checkpoint)" in err


@pytest.mark.parametrize("when", ["training", "after training", "closing its events"])
def test_a_full_disk_under_tensorboards_writer_is_one_line_naming_the_run(
        tmp_path: Path, monkeypatch, capsys, when: str) -> None:
    """TensorBoard writes its events from a thread of its own: on a full disk that thread
    printed its traceback, the run's next scalar met the error again, and the events file's
    close in the clean-up a third time, which replaced the run's error with a traceback naming
    no run. After training (final/ scalars) model.zip is complete, and the line says so."""
    import errno
    import os
    import threading

    from stable_baselines3.common.logger import Logger
    from tensorboard.compat.tensorflow_stub.io import gfile

    import agents.run_training as run_training

    # pytest's own hook takes a thread's traceback out of capsys' sight: this one sees it
    died: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(args.exc_value))
    refused = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if when == "closing its events":
        def close(self) -> None:
            raise refused

        monkeypatch.setattr(Logger, "close", close)
    elif when == "training":
        append, calls = gfile.LocalFileSystem.append, []

        def fills_up(self, *args, **kwargs):
            calls.append(1)
            if len(calls) > 20:     # the events file's first records go through
                raise refused
            return append(self, *args, **kwargs)

        monkeypatch.setattr(gfile.LocalFileSystem, "append", fills_up)
    else:
        def score_final_model(*args, **kwargs):
            raise refused

        monkeypatch.setattr(run_training, "score_final_model", score_final_model)
    runs = tmp_path / "runs"
    code = load_main("train.py")(["--timesteps", "64", "--warmup", "none",
                                  "--checkpoint-interval", "0", "--log-dir", str(runs), *TINY])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and "Exception in thread" not in err
    assert died == []
    if when == "training":
        assert err.count("\n") == 2 and list(runs.iterdir()) == []
        assert f"failed (the file system refused a write in {runs}/InferenceAlloc-v0__ppo__0__" \
               in err and ": No space left on device); removed" in err
    else:
        (run,) = runs.iterdir()
        assert (run / "model.zip").is_file() and err.count("\n") == 2    # as a run's crash
        assert f"train.py: error: 1 of 1 runs failed: run {run.name} finished training, then " \
               f"the file system refused a write in {run}: No space left on device;" in err
        assert f"model.zip is complete: evaluate it with: python evaluate.py --models {run}" in err


def test_a_write_refused_after_one_runs_training_lets_the_plan_go_on(
        monkeypatch, tmp_path: Path, capsys) -> None:
    """A write refused after a run's training (its model.zip complete) ended the whole plan:
    the seeds still to come were never trained and the finished runs' table never printed,
    where a write refused during training went on. It is now that run's failure: the others
    train, the table shows them, and the job exits 1 naming it."""
    import errno

    import agents.run_training as run_training

    original, calls = run_training.score_final_model, []

    def refused_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(*args, **kwargs)

    monkeypatch.setattr(run_training, "score_final_model", refused_once)
    runs = tmp_path / "runs"
    code = load_main("train.py")(["--timesteps", "32", "--warmup", "none", "--seeds", "0", "1",
                                  "--checkpoint-interval", "0", "--eval-tasks", "10",
                                  "--log-dir", str(runs), *TINY])
    captured = capsys.readouterr()
    assert code == 1 and len(calls) == 2 and "Traceback" not in captured.err
    first, second = sorted(runs.iterdir(), key=lambda p: p.name.split("__")[2])
    assert "__ppo__0__" in first.name and "__ppo__1__" in second.name
    assert (first / "model.zip").is_file() and (second / "model.zip").is_file()
    assert f"train.py: error: 1 of 2 runs failed: run {first.name} finished training" \
        in captured.err
    assert "| ppo (seed 1) |" in captured.out and "| ppo (seed 0) |" not in captured.out


@contextlib.contextmanager
def lock_refused(run_dir: Path, *args, **kwargs):
    """agents.locks.holding as a run folder without write permission meets it."""
    import errno

    from agents.files import WriteFailed

    path = run_dir / ".train.lock"
    try:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))
    except OSError as exc:
        raise WriteFailed(f"cannot write {path}: {exc.strerror}") from exc
    yield


@pytest.mark.parametrize("refused", ["lock", "folder"])
def test_a_write_refused_before_a_runs_training_ends_the_plan_in_one_line(
        monkeypatch, tmp_path: Path, capsys, refused: str) -> None:
    """A WriteFailed names its file and is no bug of ours, whatever the OSError behind it. One
    refused before training (the run folder's lock, for want of permission; the run folder
    itself, on a full disk) meets every run alike: it ends the plan in one line, without the
    OSError's traceback, and leaves no empty run folder (when train() went on past a refused
    lock, each run printed the traceback above its line and left its folder; a refused folder
    was a traceback)."""
    import errno

    import agents.run_training as run_training

    mkdir = Path.mkdir

    def full(self, *args, **kwargs):
        if self.name.startswith("InferenceAlloc-v0__"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return mkdir(self, *args, **kwargs)

    if refused == "lock":
        monkeypatch.setattr(run_training, "holding", lock_refused)
        said, why = "cannot write", "/.train.lock: Permission denied\n"
    else:
        monkeypatch.setattr(Path, "mkdir", full)
        said, why = "cannot make the run folder", ": No space left on device\n"
    runs = tmp_path / "runs"
    code = load_main("train.py")(["--timesteps", "32", "--warmup", "none", "--seeds", "0", "1",
                                  "--log-dir", str(runs), *TINY])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and err.count("\n") == 1
    assert err.startswith(f"train.py: error: {said} {runs}/InferenceAlloc-v0__ppo__0__")
    assert err.endswith(why)
    assert list(runs.iterdir()) == []


def test_a_plan_stopped_by_a_refused_write_still_shows_the_runs_finished_before_it(
        monkeypatch, tmp_path: Path, capsys) -> None:
    """The second seed's lock refused: the first seed's run had finished, its model saved, but
    the WriteFailed left train() without its result, and train.py printed no table."""
    import agents.run_training as run_training

    holding, calls = run_training.holding, []

    def second_refused(run_dir, *args, **kwargs):
        calls.append(run_dir)
        return (holding if len(calls) == 1 else lock_refused)(run_dir, *args, **kwargs)

    monkeypatch.setattr(run_training, "holding", second_refused)
    runs = tmp_path / "runs"
    code = load_main("train.py")(["--timesteps", "32", "--warmup", "none", "--seeds", "0", "1",
                                  "--checkpoint-interval", "0",
                                  "--log-dir", str(runs), *TINY])
    captured = capsys.readouterr()
    assert code == 1 and "Traceback" not in captured.err and len(calls) == 2
    (run,) = runs.iterdir()
    assert "__ppo__0__" in run.name and (run / "model.zip").is_file()
    assert "| agent |" in captured.out
    table = captured.out[captured.out.index("| agent |"):]
    assert "| ppo (seed 0) |" in table and "| best-static |" in table
    assert "seed 1" not in table
    assert captured.err == (f"train.py: error: cannot write {calls[1]}/.train.lock: Permission "
                            f"denied; the plan stopped at run 2 of 2: 1 finished before it\n")


@pytest.mark.parametrize("job, args, code", [
    ("train", ["--help"], 0), ("train", ["--seeds", "-1"], 2), ("train", ["--timesteps", "x"], 2),
    ("evaluate", ["--help"], 0), ("evaluate", ["--seeds", "0"], 2),
    ("evaluate", ["--eval-tasks", "3"], 2),
])
def test_help_and_a_refused_option_answer_without_loading_torch(job: str, args: list[str],
                                                                  code: int, tmp_path: Path) -> None:
    """Each took 2.5-3 s, most of it importing torch and SB3 before the options were read."""
    probe = (f"import sys\nfrom agents.{job}_cli import main\n"
             f"try:\n    code = main({args!r}, prog='{job}.py')\n"
             f"except SystemExit as exc:\n    code = exc.code\n"
             f"print(code, sorted(m for m in ('torch', 'stable_baselines3', 'sb3_contrib') "
             f"if m in sys.modules), file=sys.stderr)")
    run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.stderr.splitlines()[-1] == f"{code} []", run.stderr


@pytest.mark.parametrize("job", ["train", "evaluate"])
@pytest.mark.parametrize("stop, line, code", [
    ("raise KeyboardInterrupt", "interrupted", 130),
    ("os.kill(os.getpid(), signal.SIGTERM)", "terminated (SIGTERM)", 143),
])
def test_a_stop_while_the_modules_load_is_one_line(job: str, stop: str, line: str, code: int,
                                                   tmp_path: Path) -> None:
    """Ctrl-C in the job's first quarter second, while `import agents` loaded every policy,
    gymnasium and numpy, was a traceback, and SIGTERM a silent exit: here each stops the job
    as numpy is imported."""
    probe = (f"import os, signal, sys\n"
             f"class Stop:\n"
             f"    def find_spec(self, name, path=None, target=None):\n"
             f"        if name == 'numpy':\n"
             f"            {stop}\n"
             f"sys.meta_path.insert(0, Stop())\n"
             f"sys.path.insert(0, {str(ROOT)!r})\n"
             f"from {job} import main\n"
             f"sys.exit(main(['--help']))\n")
    run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    kept = " (files already written are complete)" if job == "evaluate" else ""
    assert (run.returncode, run.stderr) == (code, f"{job}.py: {line}{kept}\n")


def folder_of_length(root: Path, length: int) -> Path:
    """A folder under `root` whose path is `length` characters long, made of 200-character
    names (each under NAME_MAX), for paths just short of the system's PATH_MAX."""
    folder = root
    while len(str(folder)) < length:
        left = length - len(str(folder)) - 1     # characters for the next name, after its "/"
        name = min(200, left)
        if left - name == 1:    # a "/" alone would be left: it looped on folder / "" forever
            name -= 1
        folder = folder / ("d" * name)
    assert len(str(folder)) == length
    return folder


@pytest.mark.skipif(os.name != "posix", reason="PATH_MAX: POSIX")
@pytest.mark.parametrize("room", [-1, len("/.train.lock") - 1, 20, "warm"])
def test_a_log_dir_just_short_of_the_path_limit_says_to_shorten_it(room: int | str, tmp_path: Path,
                                                                   capsys, monkeypatch) -> None:
    """The run folder fits the path limit and its files do not: train.py said only "File name
    too long" for its lock (`room` 11), and, past it, TensorBoard's events file (`room` 20)
    died in a thread with a traceback, and a checkpoint after the training before it, the run
    then removed and the plan gone on to the next. Refused before the run folder is made, as
    one over the limit itself is (`room` -1). A run with warm-up was refused after cloning,
    and a plan's later run of a longer name after the earlier ones had trained: now every
    run's paths are checked before any starts."""
    from agents.run_folder import run_files

    limit = os.pathconf(tmp_path, "PC_PATH_MAX") - 1          # its count includes the NUL
    name = f"InferenceAlloc-v0__ppo__0__{'9' * 10}"             # the run's name, as long
    warm = room == "warm"       # room for the cold run's files, not for the warm run's longer name
    room = max(len(f"/{f}") for f in run_files(32)) + 2 if warm else room
    runs = folder_of_length(tmp_path, limit - len(f"/{name}") - room)
    calls: list[str] = []
    monkeypatch.setattr("agents.training.train_run", lambda *args: calls.append("trained"))
    # the cold run's name fits; the warm one's (-warm) is the longer
    code = load_main("train.py")(["--timesteps", "32", "--warmup", "none", "all", "--log-dir",
                                  str(runs), *TINY])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    label = "ppo-warm" if warm else "ppo"
    assert err.startswith(f"train.py: error: cannot write in {runs}/InferenceAlloc-v0__{label}__0__")
    assert err.endswith(f" characters, past the system's limit of {limit}; give a shorter "
                        f"--log-dir\n")
    assert calls == [] and not runs.exists()        # no run started, no folder made


def test_a_thread_dying_of_a_refused_write_alone_goes_unprinted(monkeypatch) -> None:
    import errno
    import threading

    from agents.files import quiet_refused_writes_in_threads

    def die(exc: BaseException) -> None:
        raise exc

    printed: list[str] = []     # the hook before ours: Python's prints (pytest's warns)
    monkeypatch.setattr(threading, "excepthook", lambda args: printed.append(str(args.exc_value)))
    before = threading.excepthook
    with quiet_refused_writes_in_threads():
        for exc in (OSError(errno.ENOSPC, "disk full"), ValueError("a bug"), OSError("other"),
                    OSError(errno.EDQUOT, "quota"), OSError(errno.EROFS, "read-only")):
            thread = threading.Thread(target=die, args=(exc,))
            thread.start()
            thread.join()
    assert threading.excepthook is before
    assert printed == ["a bug", "other"]


def test_evaluate_py_prints_no_thread_dying_of_a_refused_write(monkeypatch, capsys) -> None:
    """Its plots' and TensorBoard reads' threads meet a full disk as train.py's writer does."""
    import errno
    import threading

    from agents import reporting

    died: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: died.append(args.exc_value))

    def run(cfg, report=print):
        def die() -> None:
            raise OSError(errno.ENOSPC, "disk full")

        thread = threading.Thread(target=die)
        thread.start()
        thread.join()
        return []

    monkeypatch.setattr(reporting, "run", run)
    assert load_main("evaluate.py")(["--no-online", "--seeds", "1"]) == 0
    assert died == []


def test_a_refused_write_naming_its_file_is_said_with_the_file(tmp_path: Path) -> None:
    import errno
    import os

    from agents.run_training import _failure

    unnamed = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert _failure(unnamed, tmp_path) == \
        f"the file system refused a write in {tmp_path}: No space left on device"
    named = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "config.yaml"))
    assert _failure(named, tmp_path) == f"OSError: {named}"
    assert str(tmp_path / "config.yaml") in _failure(named, tmp_path)


def test_an_atomic_write_replaces_the_target_only_once_complete(tmp_path: Path) -> None:
    target = tmp_path / "new" / "deeper" / "table.md"          # its folders are made
    with atomic_path(target) as tmp:
        tmp.write_text("complete")
        assert tmp.parent == target.parent and not target.exists()
    assert target.read_text() == "complete"
    with pytest.raises(OSError, match="disk full"), atomic_path(target) as tmp:
        tmp.write_text("partial")
        raise OSError("disk full")
    assert target.read_text() == "complete"                    # left as it was
    assert leftover_temp_files(tmp_path) == []


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names an fd by /proc/self/fd")
def test_an_atomic_write_reaches_the_disk_before_and_after_its_rename(tmp_path: Path,
                                                                      monkeypatch) -> None:
    """Each temp file's content is synced before any rename, and the folders' entries after
    the last: else a power loss soon after a save could bring back a renamed, empty model."""
    import os

    from agents.files import atomic_paths

    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (
        events.append(("sync", os.readlink(f"/proc/self/fd/{fd}"))), real_fsync(fd))[-1])
    monkeypatch.setattr(os, "replace", lambda src, dst: (
        events.append(("rename", str(dst))), real_replace(src, dst))[-1])
    targets = [tmp_path / "replay_buffer.pkl", tmp_path / "sub" / "model.zip"]
    with atomic_paths(targets) as temps:
        for tmp in temps:
            tmp.write_text("saved")
    assert events == [*(("sync", str(tmp)) for tmp in temps),
                      *(("rename", str(target)) for target in targets),
                      ("sync", str(tmp_path)), ("sync", str(tmp_path / "sub"))]

    def folder_refuses(fd):     # once renamed, the files are written: no WriteFailed then
        if os.path.isdir(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", folder_refuses)
    with atomic_paths(targets) as temps:
        for tmp in temps:
            tmp.write_text("again")
    assert [t.read_text() for t in targets] == ["again", "again"]


def test_a_write_to_a_read_only_folder_names_the_target(tmp_path: Path, monkeypatch) -> None:
    """--resume of a run in a read-only folder (a read-only mount): removing the temp file
    that was never made raised the file system's "Read-only file system" on the temp file's
    name, as a traceback, in place of the error naming the file."""
    import errno
    import os

    from agents.files import WriteFailed

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    target = tmp_path / "config.yaml"
    monkeypatch.setattr(Path, "write_text", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    refused = re.escape(f"cannot write {target}: Read-only file")
    with pytest.raises(WriteFailed, match=refused), atomic_path(target) as tmp:
        tmp.write_text("complete")


def test_files_that_belong_together_replace_theirs_all_or_none(tmp_path: Path,
                                                               monkeypatch) -> None:
    """A model and the files a resume reads beside it: a failure while writing one leaves
    every target as it was, and Ctrl-C or SIGTERM during the renames waits for the last."""
    import os
    import signal

    from agents.files import WriteFailed, atomic_paths
    from agents.interrupts import Terminated, sigterm_as_interrupt

    targets = [tmp_path / "replay_buffer.pkl", tmp_path / "sub" / "model.zip"]
    with atomic_paths(targets) as temps:
        for tmp in temps:
            tmp.write_text("old")
    with pytest.raises(WriteFailed, match=re.escape(f"cannot write {targets[1]}: disk full")), \
            atomic_paths(targets) as temps:
        temps[0].write_text("new")
        raise OSError(28, "disk full", str(temps[1]))
    assert [t.read_text() for t in targets] == ["old", "old"]
    assert leftover_temp_files(tmp_path) == []
    real_replace = os.replace
    for signum, stopped in ((signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)):
        renamed = []

        def replace(src, dst, signum=signum, renamed=renamed):
            if not renamed:
                signal.raise_signal(signum)     # as the first file lands
            real_replace(src, dst)
            renamed.append(dst)

        monkeypatch.setattr(os, "replace", replace)
        # Python's own Ctrl-C handler, as a CLI in a terminal has it (a job started in the
        # background by a shell inherits SIGINT ignored, and Python then sets none)
        inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            with sigterm_as_interrupt(), pytest.raises(stopped), atomic_paths(targets) as temps:
                for tmp in temps:
                    tmp.write_text(f"after {signum.name}")
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        finally:
            signal.signal(signal.SIGINT, inherited)
        assert [t.read_text() for t in targets] == [f"after {signum.name}"] * 2


def test_leftover_temp_files_finds_every_temp_form_at_any_depth(tmp_path: Path) -> None:
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    temps = [tmp_path / "run" / ".config.yaml.7.tmp",                    # atomic_path's
             tmp_path / "run" / "checkpoints" / ".model.7.tmp.zip"]      # SB3Agent.save's, once
    for path in (*temps, tmp_path / "run" / "model.zip"):
        path.write_text("")
    assert leftover_temp_files(tmp_path) == sorted(temps)
    assert leftover_temp_files(tmp_path / "none") == []


def test_a_model_path_gets_zip_appended_as_sb3_names_it(tmp_path: Path) -> None:
    assert zip_target(tmp_path / "ppo.v1") == tmp_path / "ppo.v1.zip"
    assert zip_target(tmp_path / "ppo.zip") == tmp_path / "ppo.zip"
    (tmp_path / "dir.zip").mkdir()
    with pytest.raises(ValueError, match="it is a folder"):
        zip_target(tmp_path / "dir")
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'f'} is a file, not a folder")):
        zip_target(tmp_path / "f" / "sub" / "model")


def test_config_file_and_flags_resolve_in_order(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("timesteps: 5000\nseeds: [3, 4]\nhp: {learning_rate: 0.001}\n")
    config, given = parse_config(TrainConfig, ["--config", str(path), "--seeds", "7",
                                               "--hp", "n_steps=64"])
    assert (config.timesteps, config.seeds) == (5000, [7])
    assert config.hp == {"learning_rate": 0.001, "n_steps": 64}     # flags merge over the file
    assert {"timesteps", "seeds", "hp"} <= given
    # policy_kwargs merges as the hyper-parameters' layers do: a flat merge dropped the
    # file's net_arch for the flag's activation_fn (and the first --hp's for the second's)
    path.write_text("hp: {policy_kwargs: {net_arch: [8]}, gamma: 0.5}\n")
    config, _ = parse_config(TrainConfig, ["--config", str(path), "--hp",
                                           "policy_kwargs={activation_fn: relu}"])
    assert config.hp == {"policy_kwargs": {"net_arch": [8], "activation_fn": "relu"},
                         "gamma": 0.5}
    config, _ = parse_config(TrainConfig, ["--hp", "policy_kwargs={net_arch: [8]}", "--hp",
                                           "policy_kwargs={activation_fn: relu}"])
    assert config.hp == {"policy_kwargs": {"net_arch": [8], "activation_fn": "relu"}}
    path.write_text("timestep: 5\n")
    with pytest.raises(ValueError, match="unknown option 'timestep'"):
        parse_config(TrainConfig, ["--config", str(path)])


@pytest.mark.parametrize("script, args, note", [
    ("evaluate.py", ["--eval-tasks", "5"], "--eval-tasks is train.py's option, not evaluate.py's"),
    ("evaluate.py", ["--eval-tasks", "5", "--timesteps=3"],
     "--eval-tasks, --timesteps are train.py's options, not evaluate.py's"),
    ("train.py", ["--out", "x"], "--out is evaluate.py's option, not train.py's"),
    # --episodes is also near train.py's --episode-tasks, which means something else
    ("train.py", ["--episodes", "5"], "--episodes is evaluate.py's option, not train.py's"),
    ("train.py", ["--no-such-flag"], None),        # neither's: no note
])
def test_an_option_of_the_other_script_is_refused_naming_whose_it_is(
        script: str, args: list[str], note: str | None, tmp_path: Path, monkeypatch, capsys) -> None:
    """The two share most options: evaluate.py's "unrecognized arguments: --eval-tasks 5"
    read as a typo of an option it has. Such a flag gets no guess at a flag of this script
    besides: "(did you mean '--episode-tasks'?)" after the note sent train.py's user to an
    option of another meaning."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        load_main(script)(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"{script}: error: unrecognized arguments: " in err
    assert (f"({note})" in err) if note else "option, not" not in err
    assert ("did you mean" not in err) if note else True
    assert list(tmp_path.iterdir()) == []


def test_a_typo_beside_an_option_of_the_other_script_still_gets_its_guess(capsys) -> None:
    with pytest.raises(SystemExit):
        load_main("train.py")(["--episodes", "5", "--timestep", "3"])
    err = capsys.readouterr().err
    assert err.rstrip().endswith("(--episodes is evaluate.py's option, not train.py's) "
                                 "(did you mean '--timesteps'?)")


@pytest.mark.parametrize("cls, key, note", [
    (EvalConfig, "agents", "agents is train.py's option, not evaluate.py's"),   # a run's config.yaml
    (TrainConfig, "episodes", "episodes is evaluate.py's option, not train.py's"),
    (TrainConfig, "timestep", None),               # neither's: a typo, its guess kept
])
def test_a_config_file_option_of_the_other_script_is_refused_naming_whose_it_is(
        cls: type, key: str, note: str | None, tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"{key}: [ppo]\n" if key == "agents" else f"{key}: 3\n")
    if note is None:
        with pytest.raises(ConfigError, match=r"unknown option 'timestep' \(did you mean "
                                              r"'timesteps'\?\); options: "):
            parse_config(cls, ["--config", str(path)])
        return
    with pytest.raises(ConfigError, match=rf"unknown option '{key}' \({note}\); options: "):
        parse_config(cls, ["--config", str(path)])


def test_a_bad_value_in_a_config_file_is_refused_naming_the_file(tmp_path: Path, capsys,
                                                                   monkeypatch) -> None:
    """It was refused in its flag's words alone ("--seeds must be >= 1, got 0"), as if typed
    on a command line that had no --seeds."""
    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text("seeds: 0\n")
    assert load_main("evaluate.py")(["--config", "c.yaml", "--no-progress-bar"]) == 2
    assert capsys.readouterr().err == "evaluate.py: error: --seeds must be >= 1, got 0 (from c.yaml)\n"
    # given on the command line, in the words it had, whatever else the file sets
    Path("c.yaml").write_text("episodes: 1\n")
    assert load_main("evaluate.py")(["--config", "c.yaml", "--seeds", "0"]) == 2
    assert capsys.readouterr().err == "evaluate.py: error: --seeds must be >= 1, got 0\n"
    # a flag given overrides the file's value, and is the one refused
    Path("c.yaml").write_text("seeds: 3\n")
    assert load_main("evaluate.py")(["--config", "c.yaml", "--seeds", "0"]) == 2
    assert capsys.readouterr().err == "evaluate.py: error: --seeds must be >= 1, got 0\n"
    # a refusal of two options, one from each: the file's is named
    Path("c.yaml").write_text("eval_seed: 3\n")
    with pytest.raises(ConfigError, match=r"^--validation-seed 3 is --eval-seed's: .*; give "
                                          r"another --validation-seed \(--eval-seed from c\.yaml\)$"):
        parse_config(TrainConfig, ["--config", "c.yaml", "--select-best",
                                   "--validation-seed", "3"])
    # a seed range's refusal, its wording kept
    Path("c.yaml").write_text("seeds: [-1]\n")
    with pytest.raises(ConfigError, match=r"^--seeds: seeds must lie in .*, got -1 "
                                          r"\(from c\.yaml\)$"):
        parse_config(TrainConfig, ["--config", "c.yaml"])


@pytest.mark.parametrize("file_hp, flags, source", [
    ("{n_epoch: 3}", [], "hp {'n_epoch': 3} in c.yaml"),
    # beside keys of its own: each part where it was set
    ("{n_epoch: 3}", ["--hp", "gamma=0.9"], "--hp {'gamma': 0.9} and hp {'n_epoch': 3} in c.yaml"),
    ("{gamma: 0.9}", ["--hp", "n_epoch=3"], "--hp {'n_epoch': 3} and hp {'gamma': 0.9} in c.yaml"),
    ("{n_epoch: 2}", ["--hp", "n_epoch=3"], "--hp {'n_epoch': 3}"),   # the command line's, over the file's
    ("{}", ["--hp", "n_epoch=3"], "--hp {'n_epoch': 3}"),
    # policy_kwargs merges: the file's keys that the command line's leaves
    ("{policy_kwargs: {net_arch: [8], activation_fn: tanh}}",
     ["--hp", "n_epoch=3", "policy_kwargs={activation_fn: relu}"],
     "--hp {'n_epoch': 3, 'policy_kwargs': {'activation_fn': 'relu'}} and "
     "hp {'policy_kwargs': {'net_arch': [8]}} in c.yaml"),
    ("{policy_kwargs: {activation_fn: tanh}}", ["--hp", "n_epoch=3", "policy_kwargs={activation_fn: relu}"],
     "--hp {'n_epoch': 3, 'policy_kwargs': {'activation_fn': 'relu'}}"),
    # another mapping is replaced whole, not merged: the file's is not in force
    ("{rollout_buffer_kwargs: {gamma: 0.5}}", ["--hp", "n_epoch=3", "rollout_buffer_kwargs={}"],
     "--hp {'n_epoch': 3, 'rollout_buffer_kwargs': {}}"),
])
def test_hyperparameters_refused_once_the_agents_are_built_name_where_each_was_set(
        file_hp: str, flags: list[str], source: str, tmp_path: Path, capsys, monkeypatch) -> None:
    """train.py checks --hp as it builds the agents, after parse_config, whose own refusals of
    the file's values name it. The file's hp was refused as "--hp {...}", as if typed on the
    command line, and a policy_kwargs set in both places was shown merged, as the command
    line's."""
    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text(f"hp: {file_hp}\nwarmup: [none]\n")
    err = train_refusal(["--config", "c.yaml", *flags, "--timesteps", "32"], tmp_path, capsys)
    assert err.startswith(f"train.py: error: {source} for ppo: unknown ppo hyper-parameter 'n_epoch'")
    assert err.count("c.yaml") == ("c.yaml" in source)


@pytest.mark.parametrize("cls", [TrainConfig, EvalConfig])
def test_every_boolean_a_config_file_sets_a_flag_sets_back(cls, tmp_path: Path) -> None:
    """`online: true` in a file could not be switched off: --online was store_true alone, and
    --no-online (the other option of that choice) was refused as contradicting it."""
    folder = {"log_dir": str(tmp_path / "runs"), "out": str(tmp_path / "results")}
    names = {f.name for f in dataclasses.fields(cls)}
    base = {k: v for k, v in folder.items() if k in names}
    # --no-x, but --no-online's other option is --online: one choice of three (only, skip, both)
    back = {"no_online": "--online"}
    for f in dataclasses.fields(cls):
        if f.type not in ("bool", bool):
            continue
        path = tmp_path / f"{f.name}.yaml"
        path.write_text(yaml.safe_dump({**base, f.name: not f.default}))
        flag = back.get(f.name, "--" + ("" if f.default else "no-") + f.name.replace("_", "-"))
        config, _ = parse_config(cls, ["--config", str(path), flag])
        assert getattr(config, f.name) == f.default, f.name


def test_a_list_or_mapping_flag_given_twice_adds_to_itself() -> None:
    """argparse kept the last of a repeated flag: --hp gamma=0.5 --hp n_steps=64 trained with
    the YAML's gamma, and --agents ppo --agents a2c trained a2c alone."""
    config, _ = parse_config(TrainConfig, ["--hp", "gamma=0.5", "--hp", "n_steps=64",
                                           "--agents", "ppo", "--agents", "a2c"])
    assert config.hp == {"gamma": 0.5, "n_steps": 64}
    assert config.agents == ["ppo", "a2c"]
    config, _ = parse_config(TrainConfig, ["--hp", "gamma=0.5", "--hp", "gamma=0.7"])
    assert config.hp == {"gamma": 0.7}                                  # the later value wins


@pytest.mark.parametrize(("bad", "flag"), [
    ({"agents": []}, "--agents"), ({"warmup": []}, "--warmup"), ({"seeds": []}, "--seeds"),
    ({"timesteps": 0}, "--timesteps"), ({"n_envs": 0}, "--n-envs"),
    ({"n_envs": MAX_N_ENVS + 1}, "--n-envs"), ({"clone_samples": MAX_CLONE_SAMPLES + 1},
                                               "--clone-samples"),
    ({"checkpoint_interval": -1}, "--checkpoint-interval"),
    ({"keep_checkpoints": -1}, "--keep-checkpoints"),
    ({"metrics_window": 0}, "--metrics-window"), ({"eval_tasks": -1}, "--eval-tasks"),
    ({"per_sample_interval": 0}, "--per-sample-interval"), ({"log_interval": 0}, "--log-interval"),
    ({"eval_interval": -1}, "--eval-interval"), ({"clone_samples": 9}, "--clone-samples"),
    ({"episode_tasks": 0}, "--episode-tasks"),
    ({"episode_tasks": MAX_EPISODE_TASKS + 1}, "--episode-tasks"),
    ({"seeds": [MAX_SEED + 1]}, "--seeds"), ({"eval_seed": MAX_SEED + 1}, "--eval-seed"),
])
def test_train_config_refuses_a_value_just_past_each_bound(bad, flag, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(flag)):
        TrainConfig(log_dir=str(tmp_path / "runs"), **bad).validate()


@pytest.mark.parametrize(("script", "args", "says"), [
    ("train.py", ["--clone-samples", "1e12", "--warmup", "all", "--timesteps", "32"],
     f"--clone-samples must lie in 10 .. {MAX_CLONE_SAMPLES:,}, got 1000000000000"),
    ("train.py", ["--n-envs", "100000", "--timesteps", "32"],
     f"--n-envs must lie in 1 .. {MAX_N_ENVS:,}, got 100000"),
    ("evaluate.py", ["--episodes", "1e9"],
     f"--episodes must lie in 1 .. {MAX_EPISODES:,}, got 1000000000"),
])
def test_a_huge_count_is_refused_in_one_line_naming_its_cap(script, args, says, tmp_path,
                                                            capsys) -> None:
    """They had no cap: --clone-samples 1e12 collected for days, --n-envs 100000 built that
    many envs (with --vec-env subproc, that many processes) and --episodes 1e9 ran for years,
    each silently; --seeds was already capped at 1,000."""
    out = ["--log-dir" if script == "train.py" else "--out", str(tmp_path / "out")]
    assert load_main(script)([*args, *out]) == 2
    err = capsys.readouterr().err
    assert err == f"{script}: error: {says}\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("agent, n_envs, timesteps", [("ppo", 4, 32), ("dqn", 3, 32)])
def test_train_says_when_whole_rollouts_train_more_steps_than_asked(agent, n_envs, timesteps,
                                                                    tmp_path, capsys) -> None:
    """SB3 collects n_steps x n_envs steps before each update (DQN train_freq x n_envs) and
    stops only after one: --n-envs 64 --timesteps 32 trained 1,024 steps without a word. The
    run is as it was; a note before it names both numbers, and the one it names is the one
    trained."""
    hp = [f"n_steps={TINY_HP['n_steps']}"] if agent == "ppo" else []
    argv = ["--agents", agent, "--n-envs", str(n_envs), "--timesteps", str(timesteps),
            "--warmup", "none", "--eval-tasks", "0", "--checkpoint-interval", "0",
            "--episode-tasks", "40", "--no-progress-bar", "--log-dir", str(tmp_path / "runs"),
            *(["--hp", *hp] if hp else [])]
    assert load_main("train.py")(argv) == 0
    out, err = capsys.readouterr()
    (note,) = [line for line in err.splitlines() if line.startswith("note:")]
    trained = int(re.search(rf"^note: {agent} trains ([\d,]+) steps, not --timesteps "
                            rf"{timesteps}: SB3 collects ", note)[1].replace(",", ""))
    assert trained > timesteps and f"finished {agent} seed 0: {trained} steps" in out, (note, out)
    assert f"--n-envs {n_envs} = " in note

    # a count that whole rollouts divide trains what it asks: no note
    argv[argv.index("--timesteps") + 1] = str(trained)
    assert load_main("train.py")(argv) == 0
    out, err = capsys.readouterr()
    assert "note:" not in err and f"finished {agent} seed 0: {trained} steps" in out


def test_train_config_takes_every_bound_and_documented_zero(tmp_path: Path) -> None:
    """The edges the --help texts document: 0 turns checkpoints, the table and eval/ off, and
    keeps every checkpoint."""
    for edge in ({"timesteps": 1, "n_envs": 1, "metrics_window": 1, "per_sample_interval": 1,
                  "log_interval": 1, "clone_samples": 10, "episode_tasks": 1, "seeds": [0],
                  "eval_seed": 0},
                 {"checkpoint_interval": 0, "keep_checkpoints": 0, "eval_tasks": 0,
                  "eval_interval": 0, "episode_tasks": MAX_EPISODE_TASKS, "seeds": [MAX_SEED], "eval_seed": MAX_SEED},
                 # --select-best chooses at every step's point, on a one-task episode
                 {"select_best": True, "eval_interval": 1, "eval_tasks": 1},
                 {"n_envs": MAX_N_ENVS, "clone_samples": MAX_CLONE_SAMPLES}):
        TrainConfig(log_dir=str(tmp_path / "runs"), **edge).validate()



@pytest.mark.parametrize(("bad", "message"), [
    # the validation episode must be neither the test episode nor one the learner trains on
    ({"validation_seed": HELDOUT_SEED}, "--validation-seed 10000 is --eval-seed's"),
    ({"validation_seed": 7, "eval_seed": 7}, "--validation-seed 7 is --eval-seed's"),
    ({"validation_seed": 3, "seeds": [0, 3]}, "--validation-seed 3 is a training workload seed"),
    ({"validation_seed": 5, "seeds": [2], "n_envs": 4},
     "--validation-seed 5 is a training workload seed (--seeds 2 trains on 2 .. 5)"),
    ({"validation_seed": HELDOUT_SEED + MAX_EVAL_SEEDS - 1}, "evaluate.py's held-out seeds"),
    ({"validation_seed": -1}, "--validation-seed: seeds must lie"),
    ({"validation_seed": MAX_SEED + 1}, "--validation-seed: seeds must lie"),
    # it chooses at the eval/ points, on an episode of --eval-tasks tasks
    ({"eval_interval": 0}, "--select-best chooses at the --eval-interval points: give "
                           "--eval-interval > 0"),
    ({"eval_tasks": 0}, "--select-best runs an episode of --eval-tasks tasks: give "
                        "--eval-tasks > 0"),
])
def test_train_config_refuses_a_validation_episode_that_cannot_choose_honestly(
        bad, message, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        TrainConfig(log_dir=str(tmp_path / "runs"), select_best=True, **bad).validate()


def test_select_best_is_off_by_default_and_its_seed_refused_without_it(tmp_path: Path) -> None:
    """The default run is unchanged: no selection, and no check of a seed it does not use
    (--seeds 20000 trains as before); --validation-seed given alone would do nothing."""
    from agents.config import VALIDATION_SEED

    config, _ = parse_config(TrainConfig, ["--log-dir", str(tmp_path)])
    assert not config.select_best and config.validation_seed == VALIDATION_SEED
    assert not HELDOUT_SEED <= VALIDATION_SEED < HELDOUT_SEED + MAX_EVAL_SEEDS
    TrainConfig(log_dir=str(tmp_path), seeds=[VALIDATION_SEED]).validate()
    with pytest.raises(ConfigError, match=re.escape(
            "--validation-seed is used only with --select-best")):
        parse_config(TrainConfig, ["--log-dir", str(tmp_path), "--validation-seed", "7"])
    config, _ = parse_config(TrainConfig, ["--log-dir", str(tmp_path), "--select-best",
                                           "--validation-seed", "7"])
    assert config.select_best and config.validation_seed == 7
    TrainConfig(log_dir=str(tmp_path), select_best=True, seeds=[0, 1], n_envs=2,
                validation_seed=3, eval_seed=4).validate()      # next to both: fine

@pytest.mark.parametrize(("bad", "flag"), [
    ({"seeds": 0}, "--seeds"), ({"seeds": MAX_EVAL_SEEDS + 1}, "--seeds"),
    ({"online_seeds": 0}, "--online-seeds"), ({"online_seeds": MAX_EVAL_SEEDS + 1}, "--online-seeds"),
    ({"episodes": 0}, "--episodes"), ({"episodes": MAX_EPISODES + 1}, "--episodes"),
    ({"online_samples": 9}, "--online-samples"),
    ({"episode_tasks": 0}, "--episode-tasks"),
    ({"episode_tasks": MAX_EPISODE_TASKS + 1}, "--episode-tasks"),
    ({"reproduce_article": True, "seeds": 1, "seed_base": MAX_SEED + 1}, "--seed-base"),
    ({"online": True, "article_clients": 3}, "--article-clients is not used there: --online"),
    ({"reproduce_article": True, "online_seeds": 5}, "--online-seeds is not used there"),
    # the seeds --seed-base must leave room for are those that run: not the ignored flag's
    ({"reproduce_article": True, "seeds": 1, "online_seeds": 5, "seed_base": MAX_SEED},
     "--online-seeds is not used there"),
    ({"no_online": True, "online_seeds": 10, "seed_base": MAX_SEED - 4},
     "--online-seeds is not used there"),
    ({"online": True, "scenarios": ["bursty", "bursty", "edge"]}, "one scenario"),
])
def test_eval_config_refuses_a_value_just_past_each_bound(bad, flag, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(flag)):
        EvalConfig(out=str(tmp_path / "results"), **bad).validate()


def test_eval_config_takes_every_bound_and_documented_zero(tmp_path: Path) -> None:
    out = str(tmp_path / "results")
    # a one-task episode, as train.py's --episode-tasks takes (evaluate.py's floor was 2)
    EvalConfig(out=out, seeds=MAX_EVAL_SEEDS, online_seeds=1, episodes=1, online_samples=10,
               episode_tasks=1, seed_base=0).validate()
    TrainConfig(log_dir=str(tmp_path / "runs"), episode_tasks=1).validate()
    EvalConfig(out=out, episodes=MAX_EPISODES).validate()
    EvalConfig(out=out, no_online=True, episode_tasks=MAX_EPISODE_TASKS,
               seed_base=MAX_SEED - 4).validate()
    # the reproduction runs its own seeds, not the online study's 5: one seed fits at the top
    EvalConfig(out=out, reproduce_article=True, article_clients=0, seeds=1,
               seed_base=MAX_SEED).validate()
    EvalConfig(out=out, online=True, scenarios=["bursty", "bursty"]).validate()   # one scenario
    assert EvalConfig(online=True, seeds=2).online_seed_count() == MIN_ONLINE_SEEDS
    assert EvalConfig(online=True, seeds=2, online_seeds=3).online_seed_count() == 3
    assert EvalConfig(seeds=2).online_seed_count() == 2


def test_the_article_reproduction_defaults_to_its_own_seed_count(tmp_path: Path) -> None:
    out = str(tmp_path / "results")
    # 10 seeds by default (its seed-mean-curve rows need them); the evaluation's 5 otherwise
    assert heldout_seeds(EvalConfig(out=out, reproduce_article=True)) == \
        [HELDOUT_SEED + i for i in range(ARTICLE_SEEDS)]
    assert heldout_seeds(EvalConfig(out=out)) == [HELDOUT_SEED + i for i in range(EVAL_SEEDS)]
    assert EvalConfig(online=True).online_seed_count() == max(EVAL_SEEDS, MIN_ONLINE_SEEDS)
    # --seeds given is taken as it is, fewer too (a quick check)
    assert heldout_seeds(EvalConfig(out=out, reproduce_article=True, seeds=2)) == \
        [HELDOUT_SEED, HELDOUT_SEED + 1]
    # the top seed base fits 10 seeds' room only when they are asked for
    with pytest.raises(ConfigError, match="--seed-base"):
        EvalConfig(out=out, reproduce_article=True, seed_base=MAX_SEED - 5).validate()


def test_an_unwritable_output_folder_is_refused_first(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("agents.config.os.access", lambda path, mode: False)   # root writes anywhere
    with pytest.raises(ConfigError, match=re.escape(f"--out {tmp_path / 'r'}: {tmp_path} is not "
                                                    "writable")):
        EvalConfig(out=str(tmp_path / "r")).validate()

@pytest.mark.parametrize("typed", ["1e5", "100000.0", "100_000", "1.0e+5"])
def test_an_integer_option_takes_a_whole_number_in_float_notation(typed: str, tmp_path: Path) -> None:
    """Step counts are often written 1e5: it was argparse's "invalid int value", and in a
    config file (which YAML reads as a float) "must be an integer", though a scenario file
    takes episode_tasks: 200.0. A fraction is still refused (the test below, and here)."""
    config, _ = parse_config(TrainConfig, ["--timesteps", typed, "--seeds", typed])
    assert config.timesteps == 100_000 and config.seeds == [100_000]
    assert type(config.timesteps) is int
    path = tmp_path / "c.yaml"
    path.write_text(f"timesteps: {typed}\n")
    config, _ = parse_config(TrainConfig, ["--config", str(path)])
    assert config.timesteps == 100_000 and type(config.timesteps) is int
    for fraction in ("1.5e0", "inf", "nan", "1e400"):
        with pytest.raises(SystemExit):
            parse_config(TrainConfig, ["--timesteps", fraction])
    # 1e300 was taken, and its checkpoints' names then refused as too long for --log-dir
    path.write_text("timesteps: 1e300\n")
    with pytest.raises(ConfigError, match=r"^--timesteps must lie in 1 \.\. 1,000,000,000,000, got 10000000"):
        parse_config(TrainConfig, ["--config", str(path)])
    assert parse_config(TrainConfig, ["--timesteps", "1e12"])[0].timesteps == 10**12


@pytest.mark.parametrize(("text", "message"), [
    ("progress_bar: 'no'\n", "option progress_bar must be true or false, got 'no'"),
    ("timesteps: true\n", "option timesteps must be an integer, got True"),
    ("timesteps: 1.5\n", "option timesteps must be an integer, got 1.5"),
    ("timesteps: .inf\n", "option timesteps must be an integer, got inf"),
    ("seeds: [0, x]\n", "option seeds must be an integer, got 'x'"),
    ("hp: 5\n", "option hp must be a mapping of key: value, got 5"),
    ("scenario:\n", "option scenario must not be empty"),
    # a list, mapping or boolean for a text option was its repr: a folder named "['runs']"
    ("log_dir: [runs]\n", "option log_dir must be text (a name or path), got ['runs']"),
    ("agents: [ppo, [dqn]]\n", "option agents must be text (a name or path), got ['dqn']"),
    ("hardware: {name: edge}\n", "option hardware must be text (a name or path), got {'name'"),
    ("resume: true\n", "option resume must be text (a name or path), got True"),
    ("- timesteps: 5\n", "must hold a mapping of option: value"),
])
def test_a_config_file_value_of_the_wrong_type_names_the_file_and_option(
        text, message, tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        read_yaml_options(TrainConfig, path)
    assert str(path) in str(info.value)
    with pytest.raises(ConfigError, match=f"config file {re.escape(str(tmp_path / 'none.yaml'))} "
                                          "does not exist"):
        read_yaml_options(TrainConfig, tmp_path / "none.yaml")


def test_a_config_file_takes_kebab_keys_scalars_for_lists_and_empty_optionals(
        tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("")
    assert read_yaml_options(TrainConfig, path) == {}                 # an empty file: no options
    path.write_text("clone-samples: 20\nseeds: 3\nhardware:\nhp: [gamma=0.5]\nscenario: 7\n")
    assert read_yaml_options(TrainConfig, path) == {
        "clone_samples": 20, "seeds": [3], "hardware": None, "hp": {"gamma": 0.5},
        "scenario": "7"}


def test_an_option_given_in_both_spellings_in_a_config_file_is_refused(tmp_path: Path) -> None:
    # the YAML loader refuses a key given twice, but these are two keys of one option: the
    # later one replaced the earlier without a word
    path = tmp_path / "c.yaml"
    path.write_text("episode-tasks: 5\nepisode_tasks: 7\n")
    with pytest.raises(ConfigError, match="option episode_tasks is given twice"):
        read_yaml_options(TrainConfig, path)


def test_a_config_file_takes_the_command_lines_aliases(tmp_path: Path) -> None:
    """--env is --env-id on the command line; `env:` in a file was an unknown option."""
    path = tmp_path / "c.yaml"
    path.write_text("env: InferenceAllocSplit-v0\n")
    assert read_yaml_options(TrainConfig, path) == {"env_id": "InferenceAllocSplit-v0"}
    path.write_text("env: InferenceAllocSplit-v0\nenv-id: InferenceAlloc-v0\n")
    with pytest.raises(ConfigError, match="option env_id is given twice "
                                          r"\(env and env-id are one option\)"):
        read_yaml_options(TrainConfig, path)
    path.write_text("envs: InferenceAlloc-v0\n")
    with pytest.raises(ConfigError, match=r"unknown option 'envs' \(did you mean 'env'\?\); options: .*env, env_id"):
        read_yaml_options(TrainConfig, path)


def test_a_dumped_config_reads_back_in_field_order(tmp_path: Path) -> None:
    config, _ = parse_config(TrainConfig, ["--seeds", "3", "4", "--hp", "gamma=0.5",
                                           "--no-progress-bar", "--log-dir", str(tmp_path)])
    text = to_yaml(config)
    assert list(yaml.safe_load(text)) == [f.name for f in dataclasses.fields(TrainConfig)]
    path = tmp_path / "config.yaml"
    path.write_text(text)
    assert parse_config(TrainConfig, ["--config", str(path)])[0] == config


def test_help_shows_each_options_default() -> None:
    from agents.warmup import WarmupConfig

    text = " ".join(build_parser(TrainConfig).format_help().split())
    assert "(default: 60000)" in text and "(default: ['ppo'])" in text
    assert "(default: True)" in text            # --progress-bar/--no-progress-bar
    clone = next(" ".join(action.help.split()) for action in build_parser(TrainConfig)._actions
                 if action.dest == "clone_samples")
    # its own words, not appended twice, with the number a user would otherwise look up
    assert f"(default: {WarmupConfig().clone_samples}, WarmupConfig's)" in clone
    assert "(default: None)" not in clone


@pytest.mark.parametrize("cls", [TrainConfig, EvalConfig], ids=lambda cls: cls.__name__)
def test_every_options_help_states_its_default_once(cls) -> None:
    """A help text that used the word "default" for something else lost its default:
    --keep-checkpoints ("at the default interval") showed none, nor --no-online ("the
    default evaluation")."""
    helps = {action.dest: " ".join((action.help or "").split())
             for action in build_parser(cls)._actions if action.dest not in ("help", "config")}
    for dest, text in helps.items():
        assert text.count("(default:") == 1, f"{dest}: {text}"
    if cls is TrainConfig:
        assert helps["keep_checkpoints"].endswith(f"(default: {TrainConfig().keep_checkpoints})")


def test_help_names_every_agent_train_py_trains_with_the_envs_it_acts_in() -> None:
    """--agents' help lists the learners: one the registry gained (trpo) was missing there."""
    from agents.sb3_hyperparams import ALGORITHMS, ONLY_ENV

    text = " ".join(build_parser(TrainConfig).format_help().split())
    agents = text.split("--agents X [X ...]")[2].split("--warmup")[0]
    for group in re.findall(r"([\w, -]+?) \(([\w-]+ only|both envs)\)", agents):
        names, where = [n.strip() for n in group[0].lstrip(":, ").split(",")], group[1]
        for name in names:
            assert ONLY_ENV.get(name, "both envs") == where.removesuffix(" only"), (name, where)
    listed = re.findall(r"[a-z][\w-]*", re.sub(r"\([^)]*\)|SB3 agents to train", "", agents))
    assert sorted(listed) == sorted(ALGORITHMS)


def test_help_says_which_runs_ignore_the_warmup_options() -> None:
    """--conservative and --clone-samples apply per warm-up spec (a shared flag set serves
    --warmup none all), so a run without warm-up, or without cloning, takes them and ignores
    them: --help says so, and that --eval-tasks 0 leaves --eval-interval nothing to run."""
    text = " ".join(build_parser(TrainConfig).format_help().split())

    def help_of(flag: str, following: str) -> str:
        return text.split(f"{flag} {flag[2:].upper().replace('-', '_')}")[2].split(following)[0]

    assert "ignored by --warmup none runs" in help_of("--conservative", "--clone-samples")
    assert "ignored by runs whose --warmup spec does not clone" in help_of("--clone-samples",
                                                                          "--scenario")
    assert "none with --eval-tasks 0" in help_of("--eval-interval", "--select-best")


def test_a_subproc_run_trains_and_resumes_as_a_dummy_one(tmp_path: Path) -> None:
    """--vec-env subproc steps the same envs in worker processes: the same scalars (every
    tag and point but the clock's) and the same model as dummy, with what reads the trainer's
    own env (warm-up: its conservative phase, cloning, guard) and --normalize, whose statistics
    moved on SubprocVecEnv's float64 rewards; a resume may switch between the two."""
    import torch
    from stable_baselines3 import PPO

    main = load_main("train.py")
    args = ["--warmup", "all", "--n-envs", "2", "--normalize", "--episode-tasks", "20",
            "--clone-samples", "40", "--eval-tasks", "10", "--eval-interval", "64",
            "--checkpoint-interval", "64", "--no-progress-bar",
            "--hp", "n_steps=32", "batch_size=32", "n_epochs=1"]
    runs = {}
    for first, then in (("dummy", "dummy"), ("subproc", "dummy"), ("dummy", "subproc")):
        log = tmp_path / f"{first}-{then}"
        assert main([*args, "--timesteps", "64", "--vec-env", first, "--log-dir", str(log)]) == 0
        assert main(["--resume", "--timesteps", "128", "--vec-env", then, "--log-dir", str(log),
                     "--no-progress-bar"]) == 0
        (run,) = log.iterdir()
        acc = events(run)
        runs[first, then] = (
            {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]
             if tag not in ("time/fps", "charts/SPS")},
            PPO.load(run / "model.zip", device="cpu").policy.state_dict(),
            yaml.safe_load((run / "config.yaml").read_text())["vec_env"])
    expected, weights, _ = runs["dummy", "dummy"]
    assert {"latency/per_sample", "warmup/conservative_acting", "train/loss"} <= expected.keys()
    for (first, then), (scalars, state, recorded) in runs.items():
        assert scalars == expected, (first, then)
        assert all(torch.equal(state[k], weights[k]) for k in weights), (first, then)
        assert recorded == then


def test_a_resume_with_subproc_refuses_an_oracle_that_acts(tmp_path: Path, capsys,
                                                           monkeypatch) -> None:
    """The check of a new run holds for a resumed one: its guard would read the trainer's env.
    It refuses before the envs are built: it started the worker processes first."""
    import agents.resume as resume

    main = load_main("train.py")
    args = ["--log-dir", str(tmp_path), "--no-progress-bar"]
    assert main(["--warmup", "conservative,guard", "--conservative", "oracle", "--timesteps",
                 "32", "--checkpoint-interval", "32", "--episode-tasks", "20", "--eval-tasks",
                 "0", "--hp", "n_steps=16", "batch_size=16", "n_epochs=1", *args]) == 0
    built: list[str] = []
    real = resume.build_vec_env
    monkeypatch.setattr(resume, "build_vec_env",
                        lambda config, *a, **k: built.append(config.vec_env) or real(config, *a, **k))
    assert main(["--resume", "--timesteps", "64", "--vec-env", "subproc", *args]) == 2
    assert "use --vec-env dummy, or --warmup clone" in capsys.readouterr().err
    assert built == []


def test_a_resume_past_the_conservative_phase_refuses_an_oracle_guard_with_subproc(
        tmp_path: Path, capsys) -> None:
    """Its 200 steps done, the conservative acts again only when the guard trips, and then
    with the trainer's env still: refused as it is before, not let through for having no
    steps left."""
    main = load_main("train.py")
    args = ["--log-dir", str(tmp_path), "--no-progress-bar"]
    assert main(["--warmup", "conservative,guard", "--conservative", "oracle", "--timesteps",
                 "224", "--checkpoint-interval", "224", "--episode-tasks", "20", "--eval-tasks",
                 "0", "--hp", "n_steps=16", "batch_size=16", "n_epochs=1", *args]) == 0
    capsys.readouterr()
    assert main(["--resume", "--timesteps", "256", "--vec-env", "subproc", *args]) == 2
    assert "--conservative oracle cannot act for --vec-env subproc" in capsys.readouterr().err


def test_a_resumed_run_that_fails_shows_what_failed_it(tmp_path: Path, monkeypatch,
                                                       capsys) -> None:
    """A bug in training gets its traceback, then the one line saying what was kept, as a new
    run's failure; a file the resume cannot write (its config.yaml, on a read-only mount) the
    one line alone. Each exits 1: the run failed, the command line was right."""
    import errno
    import os

    from agents.sb3_factory import SB3Agent

    main = load_main("train.py")
    args = ["--log-dir", str(tmp_path), "--no-progress-bar"]
    assert main(["--warmup", "none", "--timesteps", "32", "--checkpoint-interval", "32",
                 "--episode-tasks", "20", "--eval-tasks", "0", "--hp", "n_steps=16",
                 "batch_size=16", "n_epochs=1", *args]) == 0
    (run,) = tmp_path.iterdir()
    capsys.readouterr()

    def crash(self, *args, **kwargs):
        raise RuntimeError("simulated crash")

    with monkeypatch.context() as patched:
        patched.setattr(SB3Agent, "learn", crash)
        assert main(["--resume", "--timesteps", "64", *args]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: simulated crash" in err
    assert err.splitlines()[-1].startswith(f"train.py: error: run {run.name} failed "
                                           f"(RuntimeError: simulated crash); kept {run}")

    real_write = Path.write_text

    def read_only_config(self, *args, **kwargs):
        if ".config.yaml." in self.name:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", read_only_config)
    assert main(["--resume", "--timesteps", "64", *args]) == 1
    assert capsys.readouterr().err == (f"train.py: error: cannot write {run}/config.yaml: "
                                       f"Read-only file system\n")


def test_a_resumed_run_starts_its_envs_on_the_resume_seeds(tmp_path: Path, monkeypatch) -> None:
    """SB3's load seeds the env it is given with the model's saved seed (its _setup_model calls
    set_random_seed), which overrode the resume seeds build_vec_env had given: the resumed run
    reset its envs on seeds 3 and 4 again and replayed the task streams it began on."""
    import agents.resume as resume
    from envs.inference_alloc import InferenceAllocEnv

    main = load_main("train.py")
    args = ["--log-dir", str(tmp_path / "runs"), "--no-progress-bar"]
    assert main(["--warmup", "none", "--seeds", "3", "--n-envs", "2", "--timesteps", "32",
                 "--checkpoint-interval", "0", "--episode-tasks", "30", "--eval-tasks", "0",
                 "--hp", "n_steps=16", "batch_size=16", "n_epochs=1", *args]) == 0
    seeds: list[int | None] = []
    reset = InferenceAllocEnv.reset

    def spy(self, *, seed=None, options=None):
        seeds.append(seed)
        return reset(self, seed=seed, options=options)

    monkeypatch.setattr(InferenceAllocEnv, "reset", spy)
    assert main(["--resume", "--timesteps", "64", *args]) == 0
    first = resume.resume_seed(3, 32)
    assert seeds[:2] == [first, first + 1], seeds


def dqn_run(runs: Path) -> tuple[Any, Path, list[str]]:
    """train.py's main, a DQN run of 96 steps under `runs` saved as model.zip alone (no
    checkpoint) with its replay buffer, and the options a resume of it takes."""
    main = load_main("train.py")
    args = ["--log-dir", str(runs), "--no-progress-bar"]
    assert main(["--agents", "dqn", "--warmup", "none", "--timesteps", "96",
                 "--checkpoint-interval", "0", "--episode-tasks", "30", "--eval-tasks", "0",
                 *args]) == 0
    (run,) = runs.iterdir()
    return main, run, args


def test_a_resumed_dqn_keeps_its_replay_buffer_and_no_eval_means_no_table(
        tmp_path: Path, capsys) -> None:
    """Resuming from model.zip used to start DQN from an empty buffer (only checkpoints saved
    one), and a run trained with --eval-tasks 0 crashed after resuming, building the table."""
    from stable_baselines3.common.save_util import load_from_pkl

    main, run, args = dqn_run(tmp_path / "runs")
    assert load_from_pkl(run / "replay_buffer.pkl").size() == 96
    capsys.readouterr()
    assert main(["--resume", "--timesteps", "128", *args]) == 0     # --eval-tasks 0 is saved
    out = capsys.readouterr().out
    assert "128 steps (32 new)" in out and "| agent |" not in out
    assert load_from_pkl(run / "replay_buffer.pkl").size() == 128    # 96 kept + 32 new
    # a model saved without its buffer goes on from an empty one, as before, but says so
    (run / "replay_buffer.pkl").unlink()
    assert main(["--resume", "--timesteps", "160", *args]) == 0
    assert capsys.readouterr().err == (f"note: no replay buffer was saved with {run / 'model.zip'} "
                                       f"(a run keeps the newest checkpoint's alone): dqn goes on "
                                       f"from an empty one\n")
    assert load_from_pkl(run / "replay_buffer.pkl").size() == 32
    # agents/training.py's docstring (where train.py --help sends a reader) names every file
    import agents.training
    for f in run.iterdir():
        name = "events.out.tfevents.*" if f.name.startswith("events.out.tfevents.") else f.name
        assert f"``{name}``" in agents.training.__doc__, name


def test_a_resume_stopped_as_its_model_is_saved_keeps_the_old_models_files(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """The replay buffer was saved, then Ctrl-C came as model.zip was written: the old
    model.zip stayed beside the new buffer, and a later resume trained on the pair."""
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.save_util import load_from_pkl

    main, run, args = dqn_run(tmp_path / "runs")
    before = folder_state(run)
    real_save = BaseAlgorithm.save

    def stopped(self, path, *rest, **kwargs):
        if ".model.zip." in Path(path).name:
            raise KeyboardInterrupt
        return real_save(self, path, *rest, **kwargs)

    monkeypatch.setattr(BaseAlgorithm, "save", stopped)
    assert main(["--resume", "--timesteps", "128", *args]) == 130
    assert load_from_pkl(run / "replay_buffer.pkl").size() == 96
    # the model's files as they were; the logs (events, and tensorboard.json, whose record
    # of 128 steps a resume from 96 passes over) and config.yaml (rewritten alike) moved on
    logs = ("events.out", "tensorboard.json", "config.yaml")
    after = folder_state(run)
    assert {k: v for k, v in after.items() if not k.startswith(logs)} == {
        k: v for k, v in before.items() if not k.startswith(logs)}
    assert leftover_temp_files(run) == []


def test_a_run_killed_before_its_first_checkpoint_is_refused_naming_what_to_do(
        tmp_path: Path, capsys) -> None:
    """A run killed (SIGKILL, out of memory) before its first checkpoint keeps its folder:
    --resume said only "has no checkpoint or model to resume from", and evaluate.py sent it
    to --resume ("unfinished run? continue it with: ... --resume")."""
    main = load_main("train.py")
    runs = tmp_path / "runs"
    assert main(["--agents", "ppo", "--warmup", "none", "--hp", "n_steps=32", "batch_size=32",
                 "--episode-tasks", "20", "--eval-tasks", "0", "--checkpoint-interval", "32",
                 "--timesteps", "64", "--log-dir", str(runs), "--no-progress-bar"]) == 0
    (run,) = runs.iterdir()
    shutil.rmtree(run / "checkpoints")      # as a kill at step 20 leaves it
    (run / "model.zip").unlink()
    capsys.readouterr()
    assert main(["--resume", "--log-dir", str(runs)]) == 2
    assert capsys.readouterr().err == (
        f"train.py: error: run {run} has no checkpoint or model to resume from (it stopped "
        f"before its first checkpoint: every 32 steps); remove it and train a new run "
        f"(python train.py without --resume)\n")
    evaluate = load_main("evaluate.py")
    assert evaluate(["--models", str(run), "--out", str(tmp_path / "r"), "--no-online"]) == 2
    err = capsys.readouterr().err
    assert "nothing to evaluate or resume; remove it" in err and "--resume" not in err


def test_a_run_stopped_after_its_last_checkpoint_is_continued_by_a_resume(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """Stopped after its checkpoint of the whole --timesteps, as model.zip was written: that
    checkpoint is saved within the last rollout, before its update, so it is not the run's
    model and is not saved as one. --resume says to give a larger total, and that resume
    continues it to a model.zip, each TensorBoard step shown once."""
    from stable_baselines3.common.base_class import BaseAlgorithm

    main = load_main("train.py")
    runs = tmp_path / "runs"
    args = ["--agents", "ppo", "--warmup", "none", "--hp", "n_steps=32", "batch_size=32",
            "--episode-tasks", "20", "--eval-tasks", "20", "--eval-interval", "32",
            "--checkpoint-interval", "32", "--log-dir", str(runs), "--no-progress-bar"]
    real_save = BaseAlgorithm.save

    def stopped(self, path, *rest, **kwargs):
        if ".model.zip." in Path(path).name:
            raise KeyboardInterrupt
        return real_save(self, path, *rest, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(BaseAlgorithm, "save", stopped)
        assert main([*args, "--timesteps", "64"]) == 130
    (run,) = runs.iterdir()
    assert not (run / "model.zip").exists()
    capsys.readouterr()
    assert main(["--resume", str(run)]) == 2
    assert capsys.readouterr().err.endswith(
        "already has 64 steps; give --timesteps above that (the new total) to continue it\n")
    assert main(["--resume", str(run), "--timesteps", "96"]) == 0
    assert saved_steps(run / "model.zip") == 96
    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    steps = {tag: [e.step for e in acc.Scalars(tag)]
             for tag in ("final/latency_mean", "latency/per_sample")}
    assert steps == {"final/latency_mean": [96], "latency/per_sample": list(range(96))}


def test_a_resumed_warm_runs_guard_trips_continue_from_its_checkpoint(tmp_path: Path) -> None:
    """The warm-up's trip count was not saved: warmup/guard_trips restarted at 0 on --resume."""
    import json

    main = load_main("train.py")
    runs = tmp_path / "runs"
    args = ["--log-dir", str(runs), "--no-progress-bar"]
    assert main(["--agents", "ppo", "--warmup", "conservative,guard", "--timesteps", "64",
                 "--checkpoint-interval", "32", "--hp", "n_steps=32", "batch_size=32",
                 "--episode-tasks", "20", "--eval-tasks", "0", *args]) == 0
    (run,) = runs.iterdir()
    for path, steps in ((run / "checkpoints" / "model_warmup_32_steps.json", 32),
                        (run / "warmup.json", 64)):
        state = json.loads(path.read_text())
        assert set(state) == {"num_timesteps", "guard_trips", "cooldown",
                              "conservative_ratios", "learner_ratios"}
        assert state["num_timesteps"] == steps
    # as if the guard had tripped 7 times by the end of the first session
    for path in (run / "warmup.json", run / "checkpoints" / "model_warmup_64_steps.json"):
        path.write_text(json.dumps({"num_timesteps": 64, "guard_trips": 7}))
    assert main(["--resume", "--timesteps", "128", *args]) == 0
    trips = {step: value for step, value in zip(*read_scalars(run, "warmup/guard_trips"),
                                                 strict=True)}
    assert max(trips) == 128 and all(trips[s] >= 7 for s in trips if s > 64), trips
    assert json.loads((run / "warmup.json").read_text())["guard_trips"] >= 7
    assert leftover_temp_files(run) == []


def test_a_warm_up_state_of_another_step_is_not_restored_and_a_bad_one_is_refused(
        tmp_path: Path) -> None:
    import json

    from agents.run_folder import restore_warmup_state
    from agents.warmup import WarmupConfig, WarmupController

    ctl = WarmupController(None, WarmupConfig(clone=False))
    path = tmp_path / "warmup.json"
    path.write_text(json.dumps({"num_timesteps": 96, "guard_trips": 3}))
    restore_warmup_state(ctl, path, 64)          # a model.zip whose own save failed after it
    restore_warmup_state(ctl, tmp_path / "none.json", 64)        # a run from before
    (tmp_path / "bad.json").write_text('{"num_timesteps": 64, "guard')
    restore_warmup_state(ctl, tmp_path / "bad.json", 64)         # unreadable: as none saved
    assert ctl.guard_trips == 0
    restore_warmup_state(ctl, path, 96)
    assert ctl.guard_trips == 3
    path.write_text(json.dumps({"num_timesteps": 96, "guard_trips": -1}))
    with pytest.raises(ValueError, match="guard_trips must be an integer >= 0"):
        restore_warmup_state(ctl, path, 96)


def test_the_train_table_runs_only_baselines_the_hardware_and_env_can(tmp_path: Path) -> None:
    """A hardware with no device called gpu crashed the table after training (all-gpu)."""
    import yaml

    from agents.config import TrainConfig
    from agents.run_scores import table_baselines
    from inference.hardware import PRESET_DIR

    raw = yaml.safe_load((PRESET_DIR / "server.yaml").read_text())
    raw["devices"][1]["name"] = "accel"                 # still of kind gpu
    for link in raw["links"]:
        link["between"] = ["accel" if d == "gpu" else d for d in link["between"]]
    (tmp_path / "hw.yaml").write_text(yaml.safe_dump(raw))
    no_gpu = TrainConfig(hardware=str(tmp_path / "hw.yaml"))
    assert table_baselines(no_gpu) == ["best-static", "heft", "heft-calibrated"]
    assert table_baselines(TrainConfig()) == ["best-static", "all-gpu", "heft", "heft-calibrated"]
    split = TrainConfig(env_id="InferenceAllocSplit-v0")
    assert table_baselines(split)[-1] == "heft-split"      # the baseline to beat there


def test_a_run_records_its_files_absolutely_and_resumes_given_its_own_config(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """config.yaml kept --hardware as typed ("my.yaml"): resume and evaluate then failed from
    any other folder; and --resume refused the run's own config.yaml as --config."""
    import shutil

    import yaml

    from inference.hardware import PRESET_DIR

    main = load_main("train.py")
    where = tmp_path / "hw"
    where.mkdir()
    shutil.copy(PRESET_DIR / "server.yaml", where / "my.yaml")
    monkeypatch.chdir(where)
    runs = tmp_path / "runs"
    assert main(["--agents", "ppo", "--warmup", "none", "--hardware", "my.yaml", "--timesteps",
                 "64", "--checkpoint-interval", "32", "--hp", "n_steps=32", "batch_size=32",
                 "--episode-tasks", "20", "--eval-tasks", "0", "--log-dir", str(runs),
                 "--no-progress-bar"]) == 0
    (run,) = runs.iterdir()
    assert yaml.safe_load((run / "config.yaml").read_text())["hardware"] == str(where / "my.yaml")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["--resume", str(run), "--config", str(run / "config.yaml"),
                 "--timesteps", "96"]) == 0
    assert "96 steps (32 new)" in capsys.readouterr().out
    monkeypatch.chdir(where)                                # the same file, spelt relative
    assert main(["--resume", str(run), "--hardware", "my.yaml", "--timesteps", "128"]) == 0
    assert main(["--resume", str(run), "--config", str(run / "config.yaml"), "--timesteps", "160",
                 "--seeds", "5"]) == 2                      # a changed value is still refused
    assert "may change (got --seeds); resume without them" in capsys.readouterr().err


def test_a_resume_takes_the_runs_own_command_line_with_its_hp(tmp_path: Path, capsys) -> None:
    """config.yaml's hp holds every hyper-parameter the run used, --hp the overrides alone:
    the run's own command line run again with --resume (what a researcher does after an
    interruption) was refused as "only ... may change (got hp)". Another value is refused."""
    main = load_main("train.py")
    runs = tmp_path / "runs"
    command = ["--agents", "ppo", "--warmup", "none", "--hp", "n_steps=32", "batch_size=32",
               "policy_kwargs={net_arch: [8]}", "--episode-tasks", "20", "--eval-tasks", "0",
               "--checkpoint-interval", "32", "--log-dir", str(runs), "--no-progress-bar"]
    assert main([*command, "--timesteps", "64"]) == 0
    capsys.readouterr()
    assert main([*command, "--timesteps", "96", "--resume"]) == 0, capsys.readouterr().err
    assert "96 steps (32 new)" in capsys.readouterr().out
    assert main([*command, "--timesteps", "128", "--resume", "--hp", "n_steps=64"]) == 2
    assert "may change (got --hp)" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "saved", "given"), [("--eval-seed", 10000, "5"),
                                                      ("--eval-tasks", 40, "1000")])
def test_a_resume_keeps_the_runs_held_out_episode(flag: str, saved: int, given: str,
                                                  tmp_path: Path, capsys) -> None:
    """--resume took another --eval-seed or --eval-tasks: the later eval/ and final/ points
    came from another held-out episode, on the same curves as the earlier ones."""
    main = load_main("train.py")
    run = tmp_path / "InferenceAlloc-v0__ppo__0__1"
    run.mkdir()
    (run / "config.yaml").write_text(to_yaml(TrainConfig(warmup=["none"], eval_tasks=40,
                                                         log_dir=str(tmp_path))))
    args = ["--resume", run.name, "--log-dir", str(tmp_path), "--timesteps", "128"]
    assert main([*args, flag, given]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {given} is not the run's {flag} {saved}" in err, err
    assert "start a new run" in err
    assert main([*args, flag, str(saved)]) == 2       # its own value is fine: on to the
    assert "has no checkpoint or model" in capsys.readouterr().err   # next check



def test_a_resume_keeps_the_runs_validation_episode(tmp_path: Path, capsys) -> None:
    """--select-best's best model so far was chosen on the run's validation episode: a resume
    on another would compare later models with it on unequal terms."""
    main = load_main("train.py")
    run = tmp_path / "InferenceAlloc-v0__ppo__0__1"
    run.mkdir()
    (run / "config.yaml").write_text(to_yaml(TrainConfig(warmup=["none"], eval_tasks=40,
                                                         select_best=True,
                                                         log_dir=str(tmp_path))))
    args = ["--resume", run.name, "--log-dir", str(tmp_path), "--timesteps", "128"]
    assert main([*args, "--validation-seed", "7"]) == 2
    err = capsys.readouterr().err
    assert "on its own validation episode: --validation-seed 7 is not the run's " \
           "--validation-seed 20000" in err, err
    assert main([*args, "--validation-seed", "20000"]) == 2     # its own value is fine
    assert "has no checkpoint or model" in capsys.readouterr().err

def test_a_resume_changing_both_held_out_options_and_more_names_eval_seed(
        tmp_path: Path, capsys) -> None:
    """Of several refused options, the held-out episode's is named (the one a user most likely
    means), --eval-seed before --eval-tasks."""
    main = load_main("train.py")
    run = tmp_path / "InferenceAlloc-v0__ppo__0__1"
    run.mkdir()
    (run / "config.yaml").write_text(to_yaml(TrainConfig(warmup=["none"], eval_tasks=40,
                                                         log_dir=str(tmp_path))))
    assert main(["--resume", run.name, "--log-dir", str(tmp_path), "--timesteps", "128",
                 "--seeds", "3", "--eval-tasks", "1000", "--eval-seed", "5"]) == 2
    err = capsys.readouterr().err
    assert "--eval-seed 5 is not the run's --eval-seed 10000" in err, err
    assert "--eval-tasks" not in err and "may change" not in err


def tiny_run(log_dir: Path, *args: str) -> Path:
    """A run of 32 steps (its model.zip and checkpoint alike) under `log_dir`, trained here."""
    assert load_main("train.py")([
        "--warmup", "none", "--timesteps", "32", "--checkpoint-interval", "32",
        "--episode-tasks", "20", "--eval-tasks", "0", "--hp", "n_steps=16", "batch_size=16",
        "n_epochs=1", "--log-dir", str(log_dir), "--no-progress-bar", *args]) == 0
    (run,) = log_dir.iterdir()
    return run


def folder_state(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` and its content: what a refused resume must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def rewrite_zip(path: Path, change) -> None:
    """`path`'s zip written again with each entry's bytes as `change(name, data)` gives them
    (None drops the entry)."""
    with zipfile.ZipFile(path) as zf:
        entries = {name: zf.read(name) for name in zf.namelist()}
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries.items():
            if (kept := change(name, data)) is not None:
                zf.writestr(name, kept)


def test_evaluating_a_run_on_a_setting_edited_since_says_so(tmp_path: Path, capsys) -> None:
    """A run's hardware file edited after training (a figure, the devices the same): evaluate.py
    scored the model on the new setting without a word, beside the curves and scores of the
    old. Now a note names the run, the scenario, the parts and what to restore. Nothing is
    said where the setting is as it was, where --hardware gives another on purpose, or for a
    scenario the run did not train on."""
    from inference.hardware import PRESET_DIR

    hardware = tmp_path / "mine.yaml"
    hardware.write_text((PRESET_DIR / "server.yaml").read_text())
    runs = tmp_path / "runs"
    run = tiny_run(runs, "--hardware", str(hardware))
    main = load_main("evaluate.py")

    def said(*flags: str) -> str:
        capsys.readouterr()
        assert main(["--runs", str(runs), "--out", str(tmp_path / "results"), "--episodes", "1",
                     "--episode-tasks", "10", "--seeds", "1", "--baselines", "best-static",
                     "--no-online", "--no-progress-bar", *flags]) == 0
        return " ".join(capsys.readouterr().out.split())

    note = "has changed since the run trained on it"
    assert note not in said()       # the setting as it was, at another --episode-tasks
    raw = yaml.safe_load(hardware.read_text())
    gpu = next(d for d in raw["devices"] if d["name"] == "gpu")
    gpu["peak_flops"] = float(gpu["peak_flops"]) / 2   # the same three devices: the model loads on it
    hardware.write_text(yaml.safe_dump(raw))
    assert (f"ppo ({run.name}): scenario article {note} (its hardware figures): evaluated "
            f"on it as it is now; restore hardware {hardware} as it was to evaluate the model "
            f"on the setting it was trained on") in said()
    assert note not in said("--hardware", str(hardware))    # another hardware on purpose
    assert note not in said("--scenarios", "bursty")        # not what it trained on


@pytest.mark.parametrize("case", ["other hardware", "other hardware, unrecorded", "other agent",
                                  "truncated policy.pth", "no policy.pth"])
def test_a_resume_whose_model_cannot_be_loaded_is_one_line_naming_it(
        case: str, tmp_path: Path, cpu_npu_hardware: str, capsys) -> None:
    """SB3's load of the run's model was a traceback out of --resume: its hardware file
    edited since ("Observation spaces do not match"), another agent's zip in its place
    ("Action spaces do not match"), a damaged zip ("PytorchStreamReader failed", "Names of
    parameters do not match"). Now one line naming the file, exit 2, the folder untouched."""
    from agents.run_plan import env_for
    from agents.sb3_factory import make_sb3
    from inference.hardware import PRESET_DIR

    runs = tmp_path / "runs"
    run = tiny_run(runs, "--hardware", cpu_npu_hardware)
    model = run / "model.zip"
    shutil.rmtree(run / "checkpoints")     # model.zip the one model to resume from
    if case == "other hardware":           # the run's hardware file, three devices now
        Path(cpu_npu_hardware).write_text((PRESET_DIR / "edge.yaml").read_text())
        # config.yaml's record of the setting names it before the model is loaded
        expected = ("has changed since the run started (its hardware figures, by",
                    f"restore hardware {cpu_npu_hardware} as it was, train a new run")
    elif case == "other hardware, unrecorded":     # a run folder older than that record
        config = run / "config.yaml"
        config.write_text(config.read_text().split("\n# what each scenario's")[0] + "\n")
        Path(cpu_npu_hardware).write_text((PRESET_DIR / "edge.yaml").read_text())
        expected = (f"model file {model} was trained on hardware of 2 devices",
                    f"its hardware {cpu_npu_hardware} is not the hardware the run was trained "
                    f"on; restore it as it was, or train a new run")
    elif case == "other agent":
        make_sb3("dqn", env_for(TrainConfig(hardware=cpu_npu_hardware)), seed=0).save(model)
        expected = (f"model file {model} holds a dqn model of InferenceAlloc-v0, not a ppo "
                    f"model", "restore the run's own file")
    elif case == "truncated policy.pth":
        rewrite_zip(model, lambda name, data: data[:len(data) // 2] if name == "policy.pth"
                    else data)
        # torch's own words follow (2.13: "PytorchStreamReader failed ...", 2.3: "negative
        # seek value")
        expected = (f"model file {model} could not be loaded as ppo: ",
                    "restore the run's own file")
    else:
        rewrite_zip(model, lambda name, data: None if name == "policy.pth" else data)
        expected = (f"model file {model} could not be loaded as ppo", "restore the run's own file")
    before = folder_state(run)
    capsys.readouterr()
    assert load_main("train.py")(["--resume", "--log-dir", str(runs), "--timesteps", "64",
                                  "--no-progress-bar"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"train.py: error: cannot resume {run.name}")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert all(part in err for part in expected), err
    assert ".;" not in err      # torch's sentence ends before the advice
    assert folder_state(run) == before


def refused_in(monkeypatch, folder: Path, *, listing: bool) -> None:
    """`folder` as a user meets it without read permission (`listing`: chmod 311, it cannot be
    listed) or without search permission (chmod 644, nothing in it can be looked at): the
    system calls raise PermissionError. Root, who runs the tests in CI, ignores the bits."""
    import errno

    real_stat, real_scandir, real_listdir = os.stat, os.scandir, os.listdir
    real_path_stat, real_iterdir = Path.stat, Path.iterdir
    base = os.fspath(folder.absolute())

    def where(path) -> str | None:
        path = os.fspath(path)
        return None if isinstance(path, bytes) else os.path.join(os.getcwd(), path)

    def refuse(path, inside: bool) -> None:
        full = where(path)
        if full is None:
            return
        if (full.startswith(base + os.sep) if inside else os.path.normpath(full) == base):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))

    def stat(path, *args, **kwargs):
        if not listing:
            refuse(path, inside=True)
        return real_stat(path, *args, **kwargs)

    def lister(real):
        def listed(path=".", *args, **kwargs):
            if listing:
                refuse(path, inside=False)
            return real(path, *args, **kwargs)
        return listed

    def path_stat(self, *args, **kwargs):    # Python 3.10's Path.stat bound os.stat at import
        stat(self)
        return real_path_stat(self, *args, **kwargs)

    def iterdir(self):
        lister(lambda path: None)(self)
        return real_iterdir(self)

    monkeypatch.setattr(os, "stat", stat)
    monkeypatch.setattr(os, "scandir", lister(real_scandir))
    monkeypatch.setattr(os, "listdir", lister(real_listdir))
    monkeypatch.setattr(Path, "stat", path_stat)
    monkeypatch.setattr(Path, "iterdir", iterdir)


@pytest.mark.parametrize("listing", [True, False], ids=["chmod 311", "chmod 644"])
@pytest.mark.parametrize("where", ["runs", "run folder"])
def test_a_folder_that_cannot_be_read_is_one_line_naming_it(where: str, listing: bool,
                                                            tmp_path: Path, monkeypatch,
                                                            capsys) -> None:
    """evaluate.py --runs and train.py --resume in a folder of runs, or at a run folder, the
    user may not read: a PermissionError traceback out of pathlib's iterdir or is_file."""
    runs = tmp_path / "runs"
    run = tiny_run(runs)
    folder = runs if where == "runs" else run
    name = f"--log-dir {runs}" if where == "runs" else f"run folder {run}"
    with monkeypatch.context() as patched:
        refused_in(patched, folder, listing=listing)
        capsys.readouterr()
        assert load_main("train.py")(["--resume", "--log-dir", str(runs), "--timesteps", "64",
                                      "--no-progress-bar"]) == 2
        err = capsys.readouterr().err
        assert err == f"train.py: error: {name} cannot be read: Permission denied\n", err
        assert load_main("evaluate.py")(["--runs", str(runs), "--out", str(tmp_path / "r"),
                                         "--no-online", "--no-progress-bar"]) == 2
        err = capsys.readouterr().err
        assert err == (f"evaluate.py: error: {name.replace('--log-dir', '--runs')} cannot be "
                       f"read: Permission denied\n"), err
    assert not (tmp_path / "r").exists()


def test_a_named_run_resumes_from_a_folder_of_runs_that_cannot_be_listed(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """A run named is looked up, not listed: chmod 311 runs (search, no read) resumes it."""
    runs = tmp_path / "runs"
    run = tiny_run(runs)
    refused_in(monkeypatch, runs, listing=True)
    assert load_main("train.py")(["--resume", run.name, "--log-dir", str(runs),
                                  "--timesteps", "64", "--no-progress-bar"]) == 0
    assert "64 steps (32 new)" in capsys.readouterr().out


@pytest.mark.parametrize("unreadable", ["older", "newer"])
def test_resume_latest_reads_the_folders_only_down_to_the_newest_run(
        unreadable: str, tmp_path: Path, monkeypatch, capsys) -> None:
    """An older folder that cannot be read (another user's run, chmod 700) refused every
    --resume latest; the newest one is still refused, as it may be the run meant."""
    runs = tmp_path / "runs"
    newer = tiny_run(runs)
    time = re.search(r"__(\d+)$", newer.name).group(1)
    older = runs / newer.name.replace(time, str(int(time) - 100))
    shutil.copytree(newer, older)
    refused_in(monkeypatch, older if unreadable == "older" else newer, listing=False)
    capsys.readouterr()
    code = load_main("train.py")(["--resume", "--log-dir", str(runs), "--timesteps", "64",
                                  "--no-progress-bar"])
    out, err = capsys.readouterr()
    if unreadable == "older":
        assert code == 0 and "64 steps (32 new)" in out, err
        assert newer.name in out
    else:
        assert (code, err) == (2, f"train.py: error: run folder {newer} cannot be read: "
                                  f"Permission denied\n")


def test_a_run_folder_without_its_config_yaml_is_named_so(tmp_path: Path, capsys) -> None:
    """--resume of a run folder whose config.yaml is gone said "no run ... (runs there: none)"
    though the folder and its checkpoints were there."""
    runs = tmp_path / "runs"
    run = tiny_run(runs)
    (run / "config.yaml").unlink()
    main = load_main("train.py")
    for name in ("latest", run.name):
        capsys.readouterr()
        assert main(["--resume", name, "--log-dir", str(runs), "--timesteps", "64"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"train.py: error: run folder {run} has no config.yaml: its model "
                              f"at 32 steps is there"), err
        assert "restore it as the run wrote it" in err and err.count("\n") == 1
    (runs / "other").mkdir()        # a folder of no run, named
    assert main(["--resume", "other", "--log-dir", str(runs), "--timesteps", "64"]) == 2
    assert f"{runs / 'other'} is not a run folder: it has no config.yaml" in \
        capsys.readouterr().err


def test_a_run_whose_models_cannot_be_read_says_why(tmp_path: Path, capsys) -> None:
    """A truncated model.zip and no checkpoint: "has no checkpoint or model to resume from",
    beside the model.zip."""
    runs = tmp_path / "runs"
    run = tiny_run(runs)
    shutil.rmtree(run / "checkpoints")
    model = run / "model.zip"
    model.write_bytes(model.read_bytes()[:1000])
    assert load_main("train.py")(["--resume", "--log-dir", str(runs), "--timesteps", "64"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"train.py: error: run {run} has no readable checkpoint or model to "
                          f"resume from: model file {model} is not a Stable-Baselines3 model "
                          f"zip (File is not a zip file); restore the run's files"), err


def test_a_newest_save_that_cannot_be_read_is_not_passed_over(tmp_path: Path, capsys) -> None:
    """A truncated model.zip beside an older checkpoint: --resume went back to the checkpoint
    without a word (for DQN, from an empty replay buffer). It is refused, naming the file; moved
    aside, the run resumes from the checkpoint."""
    runs = tmp_path / "runs"
    run = tiny_run(runs, "--timesteps", "48", "--checkpoint-interval", "32")
    model = run / "model.zip"
    model.write_bytes(model.read_bytes()[:1000])
    main = load_main("train.py")
    capsys.readouterr()
    assert main(["--resume", "--log-dir", str(runs), "--timesteps", "64",
                 "--no-progress-bar"]) == 2
    checkpoint = run / "checkpoints" / "model_32_steps.zip"
    assert capsys.readouterr().err == (
        f"train.py: error: cannot resume {run.name} from its newest save: model file {model} "
        f"is not a Stable-Baselines3 model zip (File is not a zip file); restore it, or move it "
        f"out of the run folder to resume from {checkpoint} at 32 steps\n")
    model.rename(tmp_path / "damaged.zip")
    assert main(["--resume", "--log-dir", str(runs), "--timesteps", "64",
                 "--no-progress-bar"]) == 0
    assert "64 steps (32 new)" in capsys.readouterr().out


def test_an_empty_run_config_is_refused_as_such(tmp_path: Path, capsys) -> None:
    """An empty config.yaml was read as the defaults, and refused as a run of warm-up specs
    ['none', 'all'] that the file never named."""
    runs = tmp_path / "runs"
    run = tiny_run(runs)
    (run / "config.yaml").write_text("")
    expected = f"{run / 'config.yaml'} is empty: a run folder's config.yaml holds the options"
    assert load_main("train.py")(["--resume", "--log-dir", str(runs), "--timesteps", "64"]) == 2
    err = capsys.readouterr().err
    assert expected in err and "warmup" not in err, err
    assert load_main("evaluate.py")(["--runs", str(runs), "--out", str(tmp_path / "r"),
                                     "--no-online", "--no-progress-bar"]) == 2
    assert expected in capsys.readouterr().err


def test_a_name_repeated_in_a_list_option_counts_once_but_a_mixs_scenario_is_refused(
        tmp_path: Path) -> None:
    """--agents ppo ppo, --seeds 0 0 and --warmup none none train each run once; evaluate.py's
    --online-agents ppo oracle ppo was refused alone among the lists. It counts once too. A
    --scenario repeated in a mix could mean "draw it more often": refused, naming the way."""
    config, _ = parse_config(EvalConfig, ["--online", "--online-agents", "ppo", "oracle", "ppo",
                                          "--out", str(tmp_path / "r")])
    assert config.online_agents == ["ppo", "oracle"]
    with pytest.raises(ConfigError, match=re.escape(
            "--scenario 'article' is given twice: give each scenario once (--scenario-weights "
            "draws one more often)")):
        parse_config(TrainConfig, ["--scenario", "article", "bursty", "article", "--log-dir",
                                   str(tmp_path / "runs")])


def test_seeds_given_twice_train_once_and_skipped_studies_take_no_seeds(tmp_path: Path) -> None:
    from agents.config import EvalConfig
    from agents.run_plan import plan

    specs = plan(TrainConfig(agents=["ppo"], warmup=["none"], seeds=[0, 0, 1],
                             log_dir=str(tmp_path / "runs")))
    assert [s.seed for s in specs] == [0, 1]
    last = 2**31 - 1
    for kwargs in ({"no_online": True}, {}, {"online_seeds": 1}):   # the study takes --seeds
        EvalConfig(seeds=1, seed_base=last, out=str(tmp_path / "r"), **kwargs).validate()
    for kwargs in ({"online": True}, {"online_seeds": 2}):    # 5 (--online) or 2 seeds: too many
        with pytest.raises(ConfigError, match="--seed-base"):
            EvalConfig(seeds=1, seed_base=last, out=str(tmp_path / "r"), **kwargs).validate()


@pytest.mark.parametrize("script_name, flag", [
    ("train.py", "--config"), ("train.py", "--scenario"), ("train.py", "--hardware"),
    ("train.py", "--log-dir"), ("train.py", "--resume"),
    ("evaluate.py", "--config"), ("evaluate.py", "--models"), ("evaluate.py", "--runs"),
    ("evaluate.py", "--out"), ("evaluate.py", "--scenarios"), ("evaluate.py", "--hardware"),
])
@pytest.mark.parametrize("name", ["x" * 300, "x" * 300 + ".yaml", "a\0b",
                                  pytest.param("a/" * 1100, id="1100-folders-deep")])
def test_a_path_option_no_file_can_have_is_one_line(script_name, flag, name, tmp_path, capsys):
    # pathlib's is_file/exists raise for a name the file system refuses: each of these was an
    # OSError traceback ("File name too long"), or a bare "embedded null byte"; a path 1100
    # folders deep was a RecursionError traceback from pathlib's mkdir(parents=True)
    main = load_main(script_name)
    out = ["--log-dir" if script_name == "train.py" else "--out", str(tmp_path / "out")]
    assert main([flag, name, *(out if flag not in out else [])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and any(
        why in err for why in ("File name too long", "NUL byte", "folders deep")), err
    assert not (tmp_path / "out").exists()


LONG = "y" * 2500 + "z" * 2500   # its head and its tail differ


@pytest.mark.parametrize("script_name, args", [
    ("train.py", ["--scenario", LONG]), ("train.py", ["--hardware", LONG]),
    ("train.py", ["--variant", LONG]), ("train.py", ["--env-id", LONG]),
    ("train.py", ["--warmup", LONG]), ("train.py", ["--agents", LONG]),
    ("train.py", ["--hp", f"learning_rate={LONG}"]), ("train.py", ["--seeds", LONG]),
    ("evaluate.py", ["--scenarios", LONG]), ("evaluate.py", [LONG]),
    ("train.py", ["--scenario", "/tmp/" + "d/" * 1000 + "s.yaml"]),
])
def test_a_huge_value_is_shown_shortened_in_the_error(script_name, args, tmp_path, capsys):
    """A 5000-character value was echoed whole (twice for --warmup): the message was lost in
    it. It is cut to its head and tail, saying how many characters were left out."""
    main = load_main(script_name)
    out = ["--log-dir" if script_name == "train.py" else "--out", str(tmp_path / "out")]
    with contextlib.suppress(SystemExit):   # argparse's own refusals exit
        assert main([*args, *out, "--timesteps", "1"] if script_name == "train.py"
                    else [*args, *out]) == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert len(err) < 1000 and "characters elided]" in err, err
    value = args[-1].partition("=")[2] or args[-1]
    assert value[:30] in err and value[-30:] in err, err


@pytest.mark.parametrize("override", ["n_epochs=[1, 2]", "gamma={a: 1}", "learning_rate=[0.1]",
                                      "normalize_advantage=[true]"])
def test_a_list_or_mapping_for_a_scalar_hyperparameter_is_refused_before_training(
        override: str, tmp_path: Path, capsys) -> None:
    # it was passed to SB3 as it was, and each run failed inside its training with a
    # traceback ("'list' object cannot be interpreted as an integer")
    main = load_main("train.py")
    assert main(["--hp", override, "--warmup", "none", "--timesteps", "32",
                 "--log-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"hyper-parameter {override.split('=')[0]} must be" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("policy", ["CnnPolicy", "MultiInputPolicy", "FooPolicy", "[64]"])
def test_a_policy_other_than_mlp_is_refused_before_training(policy: str, tmp_path: Path,
                                                           capsys) -> None:
    # CnnPolicy was SB3's six-line image advice, MultiInputPolicy an AttributeError traceback:
    # the observation is one flat vector, and warm-up runs swap in an MlpPolicy subclass
    main = load_main("train.py")
    assert main(["--hp", f"policy={policy}", "--warmup", "none", "--timesteps", "32",
                 "--log-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "hyper-parameter policy must be MlpPolicy" in err and "flat vector" in err
    assert not (tmp_path / "runs").exists()


def test_a_policy_in_the_yaml_is_checked_too(tmp_path: Path, monkeypatch) -> None:
    import agents.sb3_hyperparams as hyperparams
    (tmp_path / "ppo.yaml").write_text("InferenceAlloc-v0:\n  policy: CnnPolicy\n")
    monkeypatch.setattr(hyperparams, "HYPERPARAMS_DIR", tmp_path)
    with pytest.raises(ValueError, match="ppo.yaml, InferenceAlloc-v0: hyper-parameter policy "
                                         "must be MlpPolicy"):
        load_hyperparams("ppo", "InferenceAlloc-v0")
    # another file, not the first rewritten: the table is read once per version of a file (its
    # inode, size and times), and a rewrite of the same size within one tick of a coarse
    # file-system clock (a jiffy on ext4 before Linux 6.13) is the version read already
    mlp = tmp_path / "mlp"
    mlp.mkdir()
    (mlp / "ppo.yaml").write_text("InferenceAlloc-v0:\n  policy: MlpPolicy\n")
    monkeypatch.setattr(hyperparams, "HYPERPARAMS_DIR", mlp)
    assert load_hyperparams("ppo", "InferenceAlloc-v0")["policy"] == "MlpPolicy"


@pytest.mark.parametrize("env, overrides, message", [
    ("discrete", ["policy_kwargs={log_std_init: -2}"],
     "policy_kwargs.log_std_init shapes a Gaussian over continuous actions, and "
     "InferenceAlloc-v0's actions are discrete"),
    ("discrete", ["policy_kwargs={use_expln: true}"], "policy_kwargs.use_expln shapes a Gaussian"),
    ("split", ["sde_sample_freq=4"], "sde_sample_freq acts only with gSDE (use_sde: true)"),
    ("split", ["policy_kwargs={full_std: false}"], "policy_kwargs.full_std acts only with gSDE"),
])
def test_a_hyperparameter_the_agent_would_ignore_is_refused_before_training(
        env: str, overrides: list[str], message: str, tmp_path: Path, capsys) -> None:
    # SB3 took each and trained exactly what it trained without it: the discrete env's policy
    # has no Gaussian, and gSDE's settings do nothing with use_sde off
    main = load_main("train.py")
    assert main(["--env", env, "--hp", *overrides, "--warmup", "none", "--timesteps", "32",
                 "--log-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "drop it" in err
    assert not (tmp_path / "runs").exists()


def test_gsdes_settings_with_use_sde_and_defaults_without_it_are_taken() -> None:
    from agents.sb3_hyperparams import hyperparams_with

    split = "InferenceAllocSplit-v0"
    on = hyperparams_with("ppo", split, {"use_sde": True, "sde_sample_freq": 4,
                                         "policy_kwargs": {"full_std": False}})
    assert on["sde_sample_freq"] == 4 and on["policy_kwargs"]["full_std"] is False
    # SB3's own values change nothing, given or not; the Split env's Gaussian keeps its spread
    off = hyperparams_with("ppo", split, {"sde_sample_freq": -1,
                                          "policy_kwargs": {"full_std": True}})
    assert off["policy_kwargs"]["log_std_init"] == -0.5
    with pytest.raises(ValueError, match="agent would ignore it"):
        hyperparams_with("a2c", "InferenceAlloc-v0", {"policy_kwargs": {"log_std_init": 0.0}})


def test_sacs_log_std_init_without_gsde_is_refused_and_taken_with_it() -> None:
    """SAC's actor reads log_std_init (and clip_mean) for gSDE alone: without it a layer
    outputs the log-std, and a --hp policy_kwargs={log_std_init: -1} trained what it trained
    without it, though PPO's Gaussian in the same env takes it."""
    from agents.sb3_hyperparams import hyperparams_with

    split = "InferenceAllocSplit-v0"
    for key, value in (("log_std_init", -1.0), ("clip_mean", 1.0)):
        with pytest.raises(ValueError, match=rf"^policy_kwargs.{key} acts only with gSDE"):
            hyperparams_with("sac", split, {"policy_kwargs": {key: value}})
        on = hyperparams_with("sac", split, {"use_sde": True, "policy_kwargs": {key: value}})
        assert on["policy_kwargs"][key] == value
    assert hyperparams_with("sac", split, {"policy_kwargs": {"log_std_init": -3}})
    assert hyperparams_with("ppo", split, {"policy_kwargs": {"log_std_init": -1.0}})


@pytest.mark.parametrize("env_id, policy_kwargs, message", [
    # a Gaussian's setting is refused in the discrete env whatever its value, SB3's default too
    ("InferenceAlloc-v0", {"full_std": True}, "policy_kwargs.full_std shapes a Gaussian"),
    ("InferenceAlloc-v0", {"use_expln": False}, "policy_kwargs.use_expln shapes a Gaussian"),
    # in the Split env, gSDE's off: use_expln at anything but SB3's default (False) is ignored
    ("InferenceAllocSplit-v0", {"use_expln": True}, "policy_kwargs.use_expln acts only with gSDE"),
])
def test_each_gaussian_and_gsde_setting_is_refused_where_it_is_ignored(
        env_id: str, policy_kwargs: dict, message: str) -> None:
    from agents.sb3_hyperparams import hyperparams_with

    with pytest.raises(ValueError, match=rf"^{re.escape(message)}"):
        hyperparams_with("ppo", env_id, {"policy_kwargs": policy_kwargs})
    if env_id != "InferenceAlloc-v0":     # and taken with gSDE on
        on = hyperparams_with("ppo", env_id, {"use_sde": True, "policy_kwargs": policy_kwargs})
        assert on["policy_kwargs"]["use_expln"] is True


@pytest.mark.parametrize("override", ["gamma=.nan", "learning_rate=.inf", "ent_coef=-.inf",
                                      "clip_range=.nan", "vf_coef=1e300"])
def test_a_non_finite_hyperparameter_is_refused_before_training(override: str, tmp_path: Path,
                                                                capsys) -> None:
    # NaN passed the range checks (clip_range=.nan trained without a word), inf trained to NaN
    # weights and 1e300 overflowed SB3's float32 tensors, each run failing with a traceback
    main = load_main("train.py")
    assert main(["--hp", override, "--warmup", "none", "--timesteps", "32",
                 "--log-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must be a finite number" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("agent, override, message", [
    ("ppo", "ent_coef=1000000000000000000000000000000",
     "hyper-parameter ent_coef must be written as a float when it is this large (e.g. 1e+30)"),
    ("a2c", "vf_coef=100000000000000000000", "hyper-parameter vf_coef must be written as a float"),
    ("ppo", "stats_window_size=1000000000000000000000000000000",
     "hyper-parameter stats_window_size must be an integer of at most 9223372036854775807"),
])
def test_an_integer_beyond_64_bits_is_refused_before_training(agent: str, override: str,
                                                              message: str, tmp_path: Path,
                                                              capsys) -> None:
    # below float32's largest, it passed the finite check, and numpy and torch failed on it
    # once training had started (OverflowError: int too big to convert), a traceback per run
    main = load_main("train.py")
    assert main(["--agents", agent, "--hp", override, "--warmup", "none", "--timesteps", "32",
                 "--log-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("agent, overrides, message", [
    # numpy's MemoryError traceback as the model was built
    ("dqn", ["buffer_size=1000000000000"],
     "hyper-parameter buffer_size=1000000000000 needs a replay buffer of at least "),
    # numpy's "array is too big" as the model was built, naming no key
    ("ppo", ["n_steps=1000000000000000000"],
     "hyper-parameter n_steps=1000000000000000000 needs a rollout buffer of at least "),
    # a MemoryError inside the run, at its first gradient step
    ("dqn", ["batch_size=1000000000000", "learning_starts=0"],
     "hyper-parameter batch_size=1000000000000 needs at least "),
    pytest.param("dqn", ["n_steps=1000000000000", "learning_starts=0"],
                 "hyper-parameters batch_size=32 and n_steps=1000000000000 need at least ",
                 marks=pytest.mark.skipif("n_steps" not in constructor_defaults("dqn"),
                                          reason="DQN takes n_steps from SB3 2.6 on")),
    # torch's "IntArrayRef contains an int that cannot be represented as a SymInt" in the run
    ("trpo", ["sub_sampling_factor=4611686018427387904", "normalize_advantage=false"],
     "hyper-parameter sub_sampling_factor must be at most the rollout's n_steps x n_envs "
     "(64 x 1 = 64), got 4611686018427387904: a larger one keeps the same one transition"),
])
def test_a_size_beyond_what_the_machine_holds_is_refused_before_training(
        agent: str, overrides: list[str], message: str, tmp_path: Path, capsys) -> None:
    assert message in train_refusal(["--agents", agent, "--hp", *overrides, "--warmup", "none",
                                     "--timesteps", "64"], tmp_path, capsys)


def test_a_large_number_written_as_a_float_or_within_64_bits_is_still_taken() -> None:
    from agents.sb3_hyperparams import hyperparams_with, parse_overrides

    # the refusal's own suggestion is taken, as the integers numpy and torch take are
    taken = hyperparams_with("ppo", "InferenceAlloc-v0", parse_overrides(["ent_coef=1e+30"]))
    assert taken["ent_coef"] == 1e30 and isinstance(taken["ent_coef"], float)
    for key in ("ent_coef", "stats_window_size"):
        assert hyperparams_with("ppo", "InferenceAlloc-v0", {key: 2**63 - 1})[key] == 2**63 - 1


@pytest.mark.parametrize("agent, arch", [("ppo", "[-1, 64]"), ("ppo", "[1e18, 64]"),
                                         ("ppo", "[0, 64]"), ("a2c", "[64, true]"),
                                         ("ppo", "{pi: [64], qf: [64]}"), ("ppo", "64"),
                                         ("dqn", "{pi: [64], vf: [64]}")])
def test_a_net_arch_sb3_cannot_build_is_refused_before_training(agent: str, arch: str,
                                                                tmp_path: Path, capsys) -> None:
    # [-1, 64] and [1e18, 64] were torch tracebacks once the net was built, [0, 64] trained a
    # zero-width layer; DQN takes the list form only
    main = load_main("train.py")
    assert main(["--agents", agent, "--hp", f"policy_kwargs={{net_arch: {arch}}}",
                 "--warmup", "none", "--timesteps", "32",
                 "--log-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "policy_kwargs.net_arch must be" in err
    assert not (tmp_path / "runs").exists()


def test_a_net_arch_in_a_config_file_is_checked_and_the_valid_forms_pass(tmp_path: Path,
                                                                         capsys) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("hp: {policy_kwargs: {net_arch: [-1, 64]}}\n")
    main = load_main("train.py")
    assert main(["--config", str(path), "--warmup", "none", "--timesteps", "32",
                 "--log-dir", str(tmp_path / "runs")]) == 2
    assert "policy_kwargs.net_arch must be" in capsys.readouterr().err
    for name, arch in [("ppo", [64, 64]), ("ppo", []), ("ppo", {"pi": [8], "vf": [16, 16]}),
                       ("maskable-ppo", {"pi": [8]}), ("a2c", None), ("dqn", [32])]:
        check_override_types(name, {}, {"policy_kwargs": {"net_arch": arch}})


@pytest.mark.parametrize("script_name, flag", [
    ("train.py", "--config"), ("train.py", "--scenario"), ("train.py", "--hardware"),
    ("train.py", "--log-dir"), ("train.py", "--resume"),
    ("evaluate.py", "--config"), ("evaluate.py", "--models"), ("evaluate.py", "--runs"),
    ("evaluate.py", "--out"), ("evaluate.py", "--scenarios"), ("evaluate.py", "--hardware"),
])
@pytest.mark.parametrize("name", ["", " ", "\t"])
def test_a_blank_path_option_is_one_line_naming_it(script_name, flag, name, tmp_path, capsys,
                                                   monkeypatch):
    # Path("") is the working directory: --out "" wrote summary.* there, --resume "" resumed
    # the newest run; --out " " and --log-dir " " made a folder named " "
    monkeypatch.chdir(tmp_path)
    main = load_main(script_name)
    out = ["--log-dir" if script_name == "train.py" else "--out", str(tmp_path / "out")]
    quick = (["--timesteps", "32", "--warmup", "none", "--eval-tasks", "0"]   # if it ran
             if script_name == "train.py" else
             ["--seeds", "1", "--episodes", "1", "--episode-tasks", "2", "--baselines",
              "all-cpu", "--no-online"])
    assert main([flag, name, *(out if flag not in out else []), *quick,
                 "--no-progress-bar"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{flag} {name!r}: a path must not be empty" in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_blank_path_in_a_config_file_is_refused(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("c.yaml").write_text("out: ' '\nseeds: 1\nepisodes: 1\nepisode_tasks: 2\n"
                              "baselines: [all-cpu]\nno_online: true\n")
    assert load_main("evaluate.py")(["--config", "c.yaml", "--no-progress-bar"]) == 2
    assert "--out ' ': a path must not be empty" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [tmp_path / "c.yaml"]


@pytest.mark.parametrize("script_name, flag, where", [
    *[(script, flag, where) for where in ("/dev/null", "folder")
      for script, flag in (("train.py", "--config"), ("train.py", "--scenario"),
                           ("train.py", "--hardware"), ("evaluate.py", "--config"),
                           ("evaluate.py", "--scenarios"), ("evaluate.py", "--hardware"))],
    ("evaluate.py", "--models", "/dev/null"),     # a folder there is a run folder
])
def test_a_folder_or_device_given_as_a_file_is_named_so(script_name, flag, where, tmp_path,
                                                        capsys):
    # each "did not exist", as a missing file does (--config and --models, also a folder)
    folder = tmp_path / "conf.yaml"
    folder.mkdir()
    name = where if where == "/dev/null" else str(folder)
    main = load_main(script_name)
    out = ["--log-dir" if script_name == "train.py" else "--out", str(tmp_path / "out")]
    assert main([flag, name, *out, "--no-progress-bar"]) == 2
    err = capsys.readouterr().err
    expected = "is not a regular file" if where == "/dev/null" else "is a folder, not a"
    assert err.count("\n") == 1 and f"{name} {expected}" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("prog", ["train.py", "evaluate.py", "inference"])
def test_an_unknown_long_option_with_a_long_value_is_shortened(prog: str, capsys) -> None:
    """argparse built "ambiguous option: --x=<value> could match ..." from the raw argument
    itself, so a 10000-character value came back whole; abbreviations are refused now, as
    unrecognized, and that refusal shortens it too."""
    from inference.__main__ import main as inference_main
    main = inference_main if prog == "inference" else load_main(prog)
    option = {"inference": "--cache-", "train.py": "--e", "evaluate.py": "--o"}[prog]
    with pytest.raises(SystemExit) as info:
        main([f"{option}={'x' * 10000}"])
    assert info.value.code == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert f"unrecognized arguments: {option}=xxx" in line and "characters elided" in line
    assert len(line) < 400


def said(main, argv: list[str], capsys) -> tuple[int, str, str]:
    """`main(argv)`'s exit status (argparse's SystemExit included), stdout and stderr."""
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize(("script_name", "command", "bad_value", "hint"), [
    ("train.py", "infer-alloc-train", ["--timesteps", "0"], ["--resume", "--log-dir", "none"]),
    ("evaluate.py", "infer-alloc-evaluate", ["--episodes", "0"], ["--models", "unfinished"]),
])
def test_the_console_script_answers_as_the_script_under_its_own_name(
        script_name: str, command: str, bad_value: list[str], hint: list[str], tmp_path: Path,
        monkeypatch, capsys) -> None:
    """A wheel install runs the scripts' code as infer-alloc-train / infer-alloc-evaluate (its
    [project.scripts]): the same help, refusals and statuses, each line naming the command
    run, and --help's options and examples, and a hint saying what to run next, the commands a
    wheel user has (no `python train.py` there), in that call only."""
    from importlib.metadata import EntryPoint

    import agents.config_parsing
    from agents.commands import command as run_command

    script = load_main(script_name)
    (target,) = [line.split("=")[1].strip() for line in
                 (ROOT / "pyproject.toml").read_text().splitlines()
                 if line.startswith(f"{command} =")]
    console = EntryPoint(command, target.strip('"'), "console_scripts").load()

    (script_status, script_help, _), (status, help_text, _) = (
        said(main, ["--help"], capsys) for main in (script, console))
    assert script_status == status == 0
    assert script_help.startswith(f"usage: {script_name} ") and help_text.startswith(f"usage: {command} ")
    description, options = help_text.split("\n\n", 1)[1].split("\noptions:\n")
    script_description, script_options = script_help.split("\n\n", 1)[1].split("\noptions:\n")
    wheel_names = {"python train.py": "infer-alloc-train", "train.py": "infer-alloc-train",
                   "python evaluate.py": "infer-alloc-evaluate",
                   "evaluate.py": "infer-alloc-evaluate"}
    for checkout, wheel in wheel_names.items():
        script_options = script_options.replace(checkout, wheel)
    # argparse wraps the longer names anew, breaking lines at their hyphens too
    assert "".join(options.split()) == "".join(script_options.split())
    assert f"python {script_name}" in script_description and script_name not in description
    assert description == script_description.replace(f"python {script_name}", command)
    assert "train.py" not in help_text and "evaluate.py" not in help_text

    # the hint says what to run next as the user runs it, then the checkout's form again
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "config.yaml").write_text("agent: ppo\n")   # a run, unfinished
    checkpoint_at(tmp_path / "unfinished", 32)
    monkeypatch.chdir(tmp_path)
    (script_status, _, script_err), (status, _, err) = (
        said(main, hint, capsys) for main in (script, console))
    assert script_status == status == 2
    assert "python train.py --resume" in script_err or "train one with: python train.py" in script_err
    assert err == script_err.replace(script_name, command, 1).replace(
        "python train.py", "infer-alloc-train")
    assert run_command("train") == "python train.py"

    for argv in (["--no-such-option"], bad_value):
        (script_status, _, script_err), (status, _, err) = (
            said(main, argv, capsys) for main in (script, console))
        assert script_status == status == 2
        assert script_err.splitlines()[-1].startswith(f"{script_name}: error: ")
        assert err.splitlines()[-1] == script_err.splitlines()[-1].replace(script_name, command, 1)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(agents.config_parsing, "parse_config", interrupted)
    (script_status, _, script_err), (status, _, err) = (
        said(main, [], capsys) for main in (script, console))
    assert script_status == status == 130
    assert script_err.startswith(f"{script_name}: interrupted")
    assert err == script_err.replace(script_name, command, 1)


@pytest.mark.parametrize(("module", "script_name", "hint", "expected"), [
    ("agents.train_cli", "train.py", ["--resume", "--log-dir", "none"],
     "no run to resume under none/ (train one with: python -m agents.train_cli)"),
    ("agents.evaluate_cli", "evaluate.py", ["--models", "unfinished"],
     "(unfinished run? continue it with: python -m agents.train_cli --resume unfinished)"),
])
def test_python_m_runs_the_cli_named_as_it_ran(module: str, script_name: str, hint: list[str],
                                              expected: str, tmp_path: Path) -> None:
    """`python -m agents.train_cli` imported the module and exited 0, having done nothing (no
    __main__ guard). It runs the job as train.py does, its usage, examples, error lines and
    hints naming the jobs as it ran them (python -m, which a wheel install has too)."""
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", module, *args], cwd=tmp_path, text=True,
                              capture_output=True, timeout=JOB_TIMEOUT_S,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})

    command = f"python -m {module}"
    helped = run("--help")
    assert (helped.returncode, helped.stderr) == (0, "")
    assert helped.stdout.startswith(f"usage: {command} ") and f"\n    {command} --" in helped.stdout
    assert "train.py" not in helped.stdout and "evaluate.py" not in helped.stdout
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "config.yaml").write_text("agent: ppo\n")   # a run, unfinished
    checkpoint_at(tmp_path / "unfinished", 32)
    refused = run(*hint)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith(f"{command}: error: ") and expected in refused.stderr
    assert refused.stderr.count("\n") == 1 and "python train.py" not in refused.stderr


def _console_refusal(case: str, tmp: Path) -> str:
    """What `case`, a refusal or note that names train.py or evaluate.py, says."""
    import zipfile

    from agents.commands import named
    from agents.model_discovery import discover_models
    from agents.resume import resume_run
    from agents.run_plan import plan, read_run_config
    from agents.sb3_factory import saved_model_info
    from agents.sb3_hyperparams import check_agent_env

    run = tmp / "runs" / "a"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(to_yaml(TrainConfig(agents=["ppo"], warmup=["none"])))
    calls = {
        "validation seed": lambda: TrainConfig(select_best=True,
                                               validation_seed=HELDOUT_SEED + 1).validate(),
        "no runs folder": lambda: EvalConfig(runs=str(tmp / "nope")).validate(),
        "zoo callback": lambda: check_keys("ppo", {"callback": "mine.MyCallback"}),
        "seed": lambda: check_keys("ppo", {"seed": 1}),
        "agent's env": lambda: check_agent_env("sac", "InferenceAlloc-v0"),
        "unknown agent": lambda: plan(TrainConfig(agents=["psychic"])),
        "not a run": lambda: read_run_config(tmp / "plan.yaml"),
        "unfinished run": lambda: discover_models(EvalConfig(runs=str(tmp / "runs")))[1],
        "kept episode": lambda: resume_run(TrainConfig(resume="a", log_dir=str(tmp / "runs"),
                                                       eval_seed=HELDOUT_SEED + 1),
                                           {"resume", "log_dir", "eval_seed"}),
        "no agent named": lambda: saved_model_info(tmp / "bare.zip"),
        "named": lambda: named("continue it with python train.py; see evaluate.py's --runs"),
    }
    (tmp / "plan.yaml").write_text(to_yaml(TrainConfig(agents=["ppo", "dqn"])))
    with zipfile.ZipFile(tmp / "bare.zip", "w") as zf:
        zf.writestr("data", "{}")
    try:
        answer = calls[case]()
    except ValueError as exc:
        return str(exc)
    return str(answer)


@pytest.mark.parametrize(("case", "expected"), [
    ("validation seed", "among infer-alloc-evaluate's held-out seeds"),
    ("no runs folder", "(infer-alloc-train's runs are under its --log-dir"),
    ("zoo callback", "name yours with infer-alloc-train's --callbacks"),
    ("seed", "set by the trainer, not here (infer-alloc-train --seeds)"),
    ("agent's env", "(infer-alloc-train --env InferenceAllocSplit-v0)"),
    ("unknown agent", "infer-alloc-train trains ppo"),
    ("not a run", "as infer-alloc-train writes it"),
    ("unfinished run", "no model.zip (unfinished; infer-alloc-train --resume"),
    ("unfinished run", "train some with `infer-alloc-train`"),
    ("kept episode", "start a new run (infer-alloc-train without --resume)"),
    ("no agent named", "train them with infer-alloc-train)"),
    ("named", "continue it with infer-alloc-train; see infer-alloc-evaluate's --runs"),
])
def test_each_refusal_and_note_names_the_jobs_as_the_console_script_ran(
        case: str, expected: str, tmp_path: Path) -> None:
    """Run as infer-alloc-train or infer-alloc-evaluate (a wheel, which has neither script), a
    message that names the other job, or this one, names it as the user has it: "train.py's
    --env" sent a wheel user to a file they do not have."""
    from agents.commands import invoked_as

    with invoked_as("console"):
        message = _console_refusal(case, tmp_path)
    assert expected in message, message
    assert "train.py" not in message and "evaluate.py" not in message, message


def test_evaluate_py_on_a_cp1252_stdout_writes_every_result_past_a_path_it_cannot_show(
        tmp_path: Path) -> None:
    """A Windows console's stdout redirected to a file is cp1252: "wrote <out>/summary.csv"
    with an arrow in <out> raised UnicodeEncodeError after summary.csv, and summary.md and the
    CDF were never written (exit 1, a traceback). The arrow is printed escaped and the
    evaluation goes on."""
    out = tmp_path / "results\u2192"
    done = subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--baselines", "all-gpu",
                           "--no-online", "--seeds", "1", "--episodes", "1",
                           "--episode-tasks", "5", "--out", str(out), "--no-progress-bar"],
                          capture_output=True, timeout=JOB_TIMEOUT_S,
                          env={**os.environ, "PYTHONIOENCODING": "cp1252"})
    assert (done.returncode, done.stderr) == (0, b"")
    assert sorted(p.name for p in out.iterdir()) == ["latency_cdf.png", "summary.csv",
                                                     "summary.md"]
    assert f"wrote {tmp_path}{os.sep}results\\u2192{os.sep}summary.md".encode() in done.stdout


def test_train_py_on_a_latin1_stdout_prints_its_table_past_a_path_it_cannot_show(
        tmp_path: Path, monkeypatch) -> None:
    """On a latin-1 stdout a --log-dir with an arrow raised UnicodeEncodeError at the run's
    "finished" line: its table never printed, exit 1 for a run that had trained."""
    import io

    stdout = io.TextIOWrapper(io.BytesIO(), encoding="latin-1")
    monkeypatch.setattr(sys, "stdout", stdout)
    runs = tmp_path / "runs\u2192"
    assert load_main("train.py")(["--timesteps", "32", "--warmup", "none", "--log-dir",
                                  str(runs), *TINY]) == 0
    stdout.flush()
    said = stdout.buffer.getvalue().decode("latin-1")
    assert f"runs\\u2192{os.sep}InferenceAlloc-v0__ppo__0__" in said
    assert "vs best-static" in said   # the comparison table, printed last


def test_write_text_writes_the_lines_as_given_where_the_platform_ends_them_otherwise(
        tmp_path: Path, monkeypatch) -> None:
    """Text mode on Windows writes each "\\n" as "\\r\\n" (os.linesep): summary.csv, config.yaml
    and the tables differed from Linux's in every line, and a label holding a line break read
    back from summary.csv with a "\\r" added to it. They are written as given, on every
    platform."""
    from agents.evaluation import summary_csv
    from agents.files import write_text

    real = Path.write_text

    def windows_text_mode(self, data, encoding=None, errors=None, newline=None):
        # newline=None turns each "\n" written into os.linesep, "\r\n" on Windows
        return real(self, data.replace("\n", "\r\n") if newline is None else data,
                    encoding=encoding, errors=errors, newline="")

    monkeypatch.setattr(Path, "write_text", windows_text_mode)
    text = summary_csv([{"agent": "my\nppo", "mean_latency_s": 1.5}])
    target = write_text(tmp_path / "summary.csv", text)
    assert target.read_bytes() == text.encode("utf-8")
    with target.open(newline="", encoding="utf-8") as file:
        assert [row["agent"] for row in csv.DictReader(file)] == ["my\nppo"]


def test_train_py_names_a_scenario_or_hardware_file_as_evaluate_py_does(
        tmp_path: Path, capsys) -> None:
    """train.py's table heading gave a scenario file's whole path where evaluate.py's section
    gives its name: a file goes by its name, and by its path only where two trained on share
    one."""
    for folder, scenario in (("a", "article"), ("b", "bursty")):
        (tmp_path / folder).mkdir()
        shutil.copy(ROOT / "envs" / "scenarios" / f"{scenario}.yaml", tmp_path / folder / "mine.yaml")
    shutil.copy(ROOT / "inference" / "presets" / "server.yaml", tmp_path / "box.yaml")

    def headings(*scenarios: Path) -> list[str]:
        args = ["--timesteps", "32", "--warmup", "none", "--log-dir", str(tmp_path / "runs"),
                "--hardware", str(tmp_path / "box.yaml"), *TINY]
        for scenario in scenarios:
            args += ["--scenario", str(scenario)]
        capsys.readouterr()
        assert load_main("train.py")(args) == 0
        return [line for line in capsys.readouterr().out.splitlines()
                if line.startswith("Held-out episode: ")]

    (heading,) = headings(tmp_path / "a" / "mine.yaml")
    assert heading.startswith("Held-out episode: InferenceAlloc-v0, scenario mine "
                              "(hardware box), workload seed"), heading
    both = [tmp_path / "a" / "mine.yaml", tmp_path / "b" / "mine.yaml"]
    assert [h.split(", workload seed")[0] for h in headings(*both)] == [
        f"Held-out episode: InferenceAlloc-v0, scenario {s} (hardware box) (trained on "
        f"{both[0]}, {both[1]})" for s in both]


def test_a_whole_number_in_the_yaml_does_not_make_a_float_hyperparameter_an_integer() -> None:
    """ppo.yaml's `learning_rate: 1` made its warm_start's 1e-4 "must be an integer (e.g. 1)",
    even for runs without warm-up; the type is the constructor's, a float."""
    from agents.sb3_hyperparams import check_override_types

    assert check_override_types("ppo", {"learning_rate": 1}, {"learning_rate": 1e-4}) == \
        {"learning_rate": 1e-4}
    assert check_override_types("ppo", {"ent_coef": 0}, {"ent_coef": 0.01}) == {"ent_coef": 0.01}
    with pytest.raises(ValueError, match="n_steps must be an integer"):
        check_override_types("ppo", {"n_steps": 16.0}, {"n_steps": 16.5})
    # DQN's `max_grad_norm: float = 10`: the annotation's type, not the default's
    assert check_override_types("dqn", {}, {"max_grad_norm": 0.5}) == {"max_grad_norm": 0.5}


def test_a_resume_checks_the_runs_hyperparameters_as_config_does(tmp_path: Path,
                                                                  capsys) -> None:
    """An edited config.yaml's NaN learning rate, unknown key or n_epochs of -3 resumed and
    trained without a word, though --config refuses the same file."""
    main = load_main("train.py")
    runs = tmp_path / "runs"
    base = ["--warmup", "none", "--eval-tasks", "0", "--episode-tasks", "20",
            "--no-progress-bar", "--log-dir", str(runs)]
    assert main([*base, "--timesteps", "32", "--hp", "n_steps=16", "batch_size=16"]) == 0
    (run,) = runs.iterdir()
    config = run / "config.yaml"
    saved = config.read_text(encoding="utf-8")
    for edit, said in (("  learning_rate: .nan\n", "learning_rate must be a finite number"),
                       ("  bogus_key: 7\n", "unknown ppo hyper-parameter 'bogus_key'"),
                       ("  n_epochs: -3\n", "n_epochs must be >= 1, got -3")):
        key = edit.split(":")[0]
        lines = [line for line in saved.splitlines(keepends=True)
                 if not line.startswith(f"{key}:")]
        at = lines.index("hp:\n") + 1
        config.write_text("".join([*lines[:at], edit, *lines[at:]]), encoding="utf-8")
        assert main([*base, "--resume", run.name, "--timesteps", "64"]) == 2
        err = capsys.readouterr().err
        assert f"--resume {run.name}: {config}'s hp for ppo: " in err and said in err
        assert err.count("\n") == 1
    config.write_text(saved, encoding="utf-8")
    assert main([*base, "--resume", run.name, "--timesteps", "64"]) == 0


@pytest.mark.parametrize(("agent", "hp", "said"), [
    ("dqn", ["buffer_size=1"], "buffer_size must hold at least batch_size=32 transitions, got 1"),
    ("dqn", ["buffer_size=8", "batch_size=32"], "got 8: each gradient step"),
    # SB3 keeps buffer_size // n_envs a sub-env
    ("dqn", ["buffer_size=33", "--n-envs", "5"], "got 33 (30 kept over 5 envs)"),
])
def test_a_replay_buffer_smaller_than_a_batch_is_refused(tmp_path: Path, capsys, agent: str,
                                                         hp: list[str], said: str) -> None:
    """DQN trained on a buffer of one transition, drawn batch_size times a step, unsaid."""
    code = load_main("train.py")(["--agents", agent, "--warmup", "none", "--timesteps", "64",
                                  "--eval-tasks", "0", "--log-dir", str(tmp_path / "runs"),
                                  "--hp", *hp])
    err = capsys.readouterr().err
    assert code == 2 and said in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()
