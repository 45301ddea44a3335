"""evaluate.py's model discovery: labels, run settings, checkpoints, per-setting baselines; the
summary's statistics (per-seed metrics, t-intervals) and how they are written."""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from agents.commands import invoked_as
from agents.config import ConfigError, EvalConfig, TrainConfig
from agents.config_parsing import to_yaml
from agents.eval_settings import check_inputs, scenarios_of
from agents.evaluation import (
    METRICS,
    episode_latencies,
    episode_metrics,
    fmt_ci,
    make_env,
    markdown_text,
    mean_ci,
    overload_note,
    summary_csv,
    summary_markdown,
)
from agents.model_discovery import ModelEntry, discover_models
from agents.registry import make_policy
from agents.reporting import (
    curve_runs,
    evaluate_agents,
    fmt_summary,
    heldout_seeds,
    work_units,
)
from agents.run_plan import env_for
from agents.sb3_factory import make_sb3
from agents.stats import mean_ci95, t95
from inference.hardware import PRESET_DIR

SPLIT = "InferenceAllocSplit-v0"


def fake_run(root: Path, name: str, **train: object) -> Path:
    """A run folder as train.py leaves it: config.yaml and an (untrained) model.zip."""
    cfg = dataclasses.replace(TrainConfig(), **train)   # type: ignore[arg-type]
    run = root / name
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(to_yaml(cfg))
    make_sb3(cfg.agents[0], env_for(cfg, episode_tasks=10), seed=0).save(run / "model.zip")
    return run


def two_device_hardware(folder: Path) -> Path:
    raw = yaml.safe_load((PRESET_DIR / "server.yaml").read_text())
    raw["devices"] = [d for d in raw["devices"] if d["name"] != "npu"]
    raw["links"] = [lk for lk in raw["links"] if "npu" not in lk["between"]]
    raw["name"] = "two"
    (folder / "two.yaml").write_text(yaml.safe_dump(raw))
    return folder / "two.yaml"


def cfg_for(**kw: object) -> EvalConfig:
    return dataclasses.replace(EvalConfig(seeds=1, episodes=1, episode_tasks=10,
                                          baselines=["best-static", "all-npu"]), **kw)


def test_models_of_one_label_but_different_envs_get_their_own_rows(tmp_path: Path) -> None:
    """A PPO of each env used to pool into one 'ppo' row (n=2)."""
    fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"])
    fake_run(tmp_path / "runs", "b", agents=["ppo"], warmup=["none"], env_id=SPLIT)
    fake_run(tmp_path / "runs", "c", agents=["ppo"], warmup=["none"], seeds=[1])
    entries, _ = discover_models(cfg_for(runs=str(tmp_path / "runs")))
    labels = sorted(e.label for e in entries)
    # the two seeds of the discrete-env PPO still pool; the Split one is apart
    assert labels == ["ppo (InferenceAlloc-v0)", "ppo (InferenceAlloc-v0)",
                      f"ppo ({SPLIT})"]


def test_warm_runs_with_other_conservative_policies_are_apart(tmp_path: Path) -> None:
    fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["all"])
    fake_run(tmp_path / "runs", "b", agents=["ppo"], warmup=["all"], conservative="best-static")
    entries, _ = discover_models(cfg_for(runs=str(tmp_path / "runs")))
    assert sorted(e.label for e in entries) == ["ppo-warm (best-static)",
                                                "ppo-warm (heft-calibrated)"]


def test_models_trained_on_other_scenarios_are_apart(tmp_path: Path) -> None:
    """Every model runs on every scenario evaluated: a PPO trained on article and one trained
    on bursty pooled as two seeds of one "ppo" (runs 2) in each section."""
    fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"])
    fake_run(tmp_path / "runs", "b", agents=["ppo"], warmup=["none"], seeds=[1])
    fake_run(tmp_path / "runs", "c", agents=["ppo"], warmup=["none"], scenario="bursty")
    cfg = cfg_for(runs=str(tmp_path / "runs"), baselines=["best-static"])
    entries, _ = discover_models(cfg)
    rows = [r.row() for r in evaluate_agents(cfg, entries, scenarios_of(cfg, entries))]
    assert [(r["scenario"], r["agent"], r["runs"]) for r in rows if r["kind"] == "model"] == [
        ("article", "ppo (trained on article)", 2), ("article", "ppo (trained on bursty)", 1),
        ("bursty", "ppo (trained on article)", 2), ("bursty", "ppo (trained on bursty)", 1)]


def test_two_runs_of_one_seed_are_not_pooled_as_two_seeds(tmp_path: Path) -> None:
    """`python train.py` run twice into runs/ left two identical seed-0 runs: evaluate.py
    pooled them as two seeds (runs 2), counting one seed's samples twice in n and the CI."""
    for name in ("a", "b"):
        fake_run(tmp_path / "runs", name, agents=["ppo"], warmup=["none"])
    fake_run(tmp_path / "runs", "c", agents=["ppo"], warmup=["none"], seeds=[1])
    fake_run(tmp_path / "runs", "d", agents=["ppo"], warmup=["none"], seeds=[2])
    entries, notes = discover_models(cfg_for(runs=str(tmp_path / "runs")))
    assert sorted(e.label for e in entries) == ["ppo", "ppo", "ppo (a)", "ppo (b)"]
    assert [n.split(":")[0] for n in notes] == ["2 runs of ppo with seed 0"]


def test_a_run_folder_given_as_runs_is_refused_not_read_as_empty(tmp_path: Path) -> None:
    """--runs runs/X (one run) evaluated the baselines alone, saying there were no trained
    models, and wrote them over --out's summary."""
    run = fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"])
    (run / "checkpoints").mkdir()
    with pytest.raises(ConfigError, match=f"{run} is a run folder, not a folder of run folders: "
                                          f"pass --models {run}"):
        discover_models(cfg_for(runs=str(run)))
    entries, _ = discover_models(cfg_for(runs=str(tmp_path / "runs")))
    assert [e.label for e in entries] == ["ppo"]


def test_a_model_zip_older_than_a_checkpoint_is_named_in_a_note(tmp_path: Path) -> None:
    """A --resume stopped after its first checkpoint leaves the old model.zip, which was
    evaluated as the run's without a word."""
    run = fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"])
    _, notes = discover_models(cfg_for(runs=str(tmp_path / "runs")))
    assert not [n for n in notes if "interrupted" in n]
    agent = make_sb3("ppo", env_for(TrainConfig(), episode_tasks=10), seed=0)
    agent.model.learn(32)
    (run / "checkpoints").mkdir()
    agent.save(run / "checkpoints" / "model_32_steps.zip")
    for cfg in (cfg_for(runs=str(tmp_path / "runs")), cfg_for(models=[str(run)])):
        _, notes = discover_models(cfg)
        assert [n for n in notes if "interrupted" in n] == [
            f"a: evaluating model.zip (0 steps), but checkpoint model_32_steps.zip has "
            f"{agent.model.num_timesteps} (an interrupted --resume? python train.py --resume "
            f"{run} finishes it)"]
    with invoked_as("console"):      # a wheel's infer-alloc-evaluate: no train.py there
        _, notes = discover_models(cfg_for(runs=str(tmp_path / "runs")))
    assert [n for n in notes if "interrupted" in n][0].endswith(
        f"(an interrupted --resume? infer-alloc-train --resume {run} finishes it)")


def test_trpo_runs_are_found_and_evaluated_in_the_env_they_trained_in(tmp_path: Path) -> None:
    """evaluate.py --runs finds train.py's TRPO runs, warm-started (the warm-up's policy class
    in the zip) or not, and --models a bare TRPO zip by the env its actions are of; each
    loads as TRPO and is evaluated beside the baselines."""
    from agents.registry import load_policy
    from agents.warmup import WarmActorCriticPolicy, WarmupConfig

    runs = tmp_path / "runs"
    fake_run(runs, "a", agents=["trpo"], warmup=["none"])
    warm = fake_run(runs, "b", agents=["trpo"], warmup=["all"], env_id=SPLIT,
                    conservative="heft-split")
    env = env_for(TrainConfig(env_id=SPLIT), episode_tasks=10)
    make_sb3("trpo", env, seed=0, warmup=WarmupConfig(
        conservative="heft-split", clone_samples=20, clone_epochs=1)).save(warm / "model.zip")
    make_sb3("trpo", env, seed=0).save(tmp_path / "bare")
    assert isinstance(load_policy(warm / "model.zip", env).model.policy, WarmActorCriticPolicy)
    entries, _ = discover_models(cfg_for(runs=str(runs)))
    assert sorted((e.label, e.env_id) for e in entries) == [
        ("trpo", "InferenceAlloc-v0"), ("trpo-warm", SPLIT)]
    [bare], _ = discover_models(cfg_for(models=[str(tmp_path / "bare.zip")]))
    assert (bare.label, bare.env_id) == ("bare", SPLIT)
    cfg = cfg_for(runs=str(runs), baselines=["best-static"])
    rows = [r.row() for r in evaluate_agents(cfg, [*entries, bare], ["article"])]
    models = {r["agent"] for r in rows if r["kind"] == "model"}
    assert models == {"trpo", "trpo-warm", "bare"}
    assert all(np.isfinite(r["mean_latency_s"]) and r["n"] == 1 for r in rows)


def test_a_checkpoint_keeps_its_runs_settings_and_says_its_step(tmp_path: Path) -> None:
    run = fake_run(tmp_path, "run", agents=["a2c"], warmup=["none"], env_id=SPLIT,
                   scenario="bursty")
    (run / "checkpoints").mkdir()
    (run / "model.zip").rename(run / "checkpoints" / "model_64_steps.zip")
    [entry], _ = discover_models(cfg_for(models=[str(run / "checkpoints" / "model_64_steps.zip")]))
    assert (entry.label, entry.env_id, entry.scenario) == ("a2c@64", SPLIT, "bursty")


def test_a_runs_learning_curve_is_named_after_the_run_not_a_checkpoint(tmp_path: Path) -> None:
    run = fake_run(tmp_path, "run", agents=["ppo"], warmup=["none"], seeds=[3])
    (run / "checkpoints").mkdir()
    make_sb3("ppo", make_env(episode_tasks=10), seed=0).save(run / "checkpoints" / "model_64_steps")
    bare = tmp_path / "bare"
    bare.mkdir()
    make_sb3("ppo", make_env(episode_tasks=10), seed=0).save(bare / "model.zip")
    entries, _ = discover_models(cfg_for(models=[str(run), str(bare),
                                                 str(run / "checkpoints" / "model_64_steps.zip")]))
    assert [e.label for e in entries] == ["ppo", "bare", "ppo@64"]
    assert curve_runs(entries) == [("ppo s3", run), ("bare", bare)]



def test_a_model_is_found_by_the_name_sb3s_save_was_given(tmp_path: Path) -> None:
    """`model.save("my_ppo")` writes my_ppo.zip, and SB3's load and `agents.load_policy` read
    it as "my_ppo"; `evaluate.py --models my_ppo` said "model file my_ppo does not exist"."""
    make_sb3("ppo", make_env(episode_tasks=10), seed=0).save(tmp_path / "my_ppo")
    [entry], _ = discover_models(cfg_for(models=[str(tmp_path / "my_ppo")]))
    assert (entry.label, entry.path) == ("my_ppo", tmp_path / "my_ppo.zip")


def test_a_runs_best_model_is_evaluated_beside_its_final_model(tmp_path: Path) -> None:
    """train.py --select-best's best_model.zip is the run's other model: given with its run
    folder, both shared the label "ppo" (and, as two runs of one seed, were each renamed after
    the one folder they share, still one label); it reads "ppo@best", on the run's curve."""
    import shutil

    run = fake_run(tmp_path, "run", agents=["ppo"], warmup=["none"], seeds=[3])
    shutil.copy(run / "model.zip", run / "best_model.zip")
    entries, notes = discover_models(cfg_for(models=[str(run), str(run / "best_model.zip")]))
    assert [e.label for e in entries] == ["ppo", "ppo@best"] and notes == []
    assert [e.seed for e in entries] == [3, 3]
    assert curve_runs(entries) == [("ppo s3", run)]
    [alone], _ = discover_models(cfg_for(models=[str(run / "best_model.zip")]))
    assert alone.label == "ppo@best" and curve_runs([alone]) == [("ppo s3", run)]

def test_a_model_given_twice_is_evaluated_once(tmp_path: Path, monkeypatch) -> None:
    """A run folder and its model.zip (or one path twice) pooled as two runs: n and the
    95% CI were those of twice the samples."""
    run = fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"])
    monkeypatch.chdir(tmp_path)
    cfg = cfg_for(models=[str(run), str(run / "model.zip"), "runs/a/model.zip"],
                  baselines=["best-static"])
    entries, notes = discover_models(cfg)
    assert [e.path for e in entries] == [run / "model.zip"]
    assert len(notes) == 2 and all("the same model as" in n for n in notes)
    rows = [r.row() for r in evaluate_agents(cfg, entries, ["article"])]
    assert [(r["agent"], r["runs"], r["n"]) for r in rows] == [("ppo", 1, 1),
                                                               ("best-static", 1, 1)]


def test_a_model_named_as_a_baseline_is_not_pooled_with_it(tmp_path: Path) -> None:
    """A saved policy zip named all-cpu.zip shared the all-cpu baseline's row: n was twice
    the seeds and the 95% CI that of the doubled samples."""
    make_policy("all-cpu", make_env(episode_tasks=10)).save(tmp_path / "all-cpu.zip")
    cfg = cfg_for(models=[str(tmp_path / "all-cpu.zip")], seeds=2,
                  baselines=["all-cpu", "best-static"])
    entries, _ = discover_models(cfg)
    rows = [r.row() for r in evaluate_agents(cfg, entries, ["article"])]
    assert [(r["agent"], r["kind"], r["n"]) for r in rows] == [
        ("all-cpu (model)", "model", 2), ("all-cpu", "baseline", 2), ("best-static", "baseline", 2)]
    assert rows[0]["mean_latency_s"] == rows[1]["mean_latency_s"]     # the same policy


@pytest.mark.parametrize(("text", "expected"), [
    # what the file gives: the default warm-up specs were shown as the file's
    ("agents: [ppo, dqn]\nseeds: [0, 1]\n", "agents ['ppo', 'dqn'], no warmup, seeds [0, 1]"),
    ("agents: []\n", "agents [], "),                  # was an IndexError traceback
    ("agents: [td3]\nwarmup: [none]\n", "agents ['td3']"),
    ("seeds: []\nwarmup: [none]\n", "seeds []"),
])
def test_a_config_yaml_that_is_no_runs_is_named_not_taken_for_one(text: str, expected: str,
                                                                  tmp_path: Path) -> None:
    """A train.py --config file beside a model gave the model its first agent's label (a DQN
    shown as "ppo"); a hand-edited run config with no agent was a traceback, in evaluate.py and
    train.py --resume alike."""
    from agents.resume import resume_run

    run = fake_run(tmp_path / "runs", "a", agents=["dqn"], warmup=["none"])
    (run / "config.yaml").write_text(text)
    with pytest.raises(ConfigError, match="is not a run's config") as err:
        discover_models(cfg_for(models=[str(run / "model.zip")]))
    assert expected in str(err.value)
    with pytest.raises(ConfigError, match="is not a run's config"):
        resume_run(TrainConfig(resume="a", log_dir=str(tmp_path / "runs")), {"resume"})


def test_another_agents_model_in_a_run_folder_is_refused_naming_both(tmp_path: Path) -> None:
    """A DQN's model.zip copied into a PPO run's folder was scored as "ppo", without a word."""
    run = fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"])
    make_sb3("dqn", env_for(TrainConfig(), episode_tasks=10), seed=0).save(run / "model.zip")
    for cfg in (cfg_for(runs=str(tmp_path / "runs")), cfg_for(models=[str(run)])):
        with pytest.raises(ConfigError) as err:
            discover_models(cfg)
        assert str(err.value).startswith(
            f"model file {run / 'model.zip'} holds a dqn model, but its run's config "
            f"{run / 'config.yaml'} trains ppo"), err.value


def test_a_model_of_other_hardware_gets_a_section_with_baselines_on_it(tmp_path: Path) -> None:
    """Models ran on their own hardware, the baselines on the scenario's, in one table."""
    two = two_device_hardware(tmp_path)
    fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"])
    fake_run(tmp_path / "runs", "b", agents=["ppo"], warmup=["none"], hardware=str(two))
    cfg = cfg_for(runs=str(tmp_path / "runs"))
    entries, _ = discover_models(cfg)
    notes = check_inputs(cfg, entries, scenarios_of(cfg, entries))
    # all-npu is skipped where there is no NPU, with a note, rather than failing the run
    assert notes == ["article (hardware two): skipping baseline all-npu (the hardware has no "
                     "such device; it has cpu, gpu)"]
    results = evaluate_agents(cfg, entries, scenarios_of(cfg, entries))
    rows = {(r.scenario, r.agent): float(np.mean(np.concatenate(r.latencies))) for r in results}
    assert set(rows) == {("article", "ppo"), ("article", "best-static"), ("article", "all-npu"),
                         ("article (hardware two)", "ppo"),
                         ("article (hardware two)", "best-static")}
    assert rows[("article", "best-static")] != rows[("article (hardware two)", "best-static")]


def refusal(cfg: EvalConfig, scenarios: list[str]) -> str:
    """The ConfigError `check_inputs` refuses `cfg`'s models on `scenarios` with."""
    entries, _ = discover_models(cfg)
    with pytest.raises(ConfigError) as refused:
        check_inputs(cfg, entries, scenarios)
    return str(refused.value)


def test_every_scenario_is_checked_before_any_is_evaluated(tmp_path: Path) -> None:
    """A later scenario whose hardware the model does not fit failed mid-run, with a traceback."""
    two = two_device_hardware(tmp_path)
    (tmp_path / "small.yaml").write_text(f"name: small\nhardware: {two}\n")
    fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"])
    cfg = cfg_for(runs=str(tmp_path / "runs"), scenarios=["article", str(tmp_path / "small.yaml")],
                  baselines=["best-static"])
    assert re.search(r"trained on hardware of 3 devices.*has 2 \(cpu, gpu\)"
                     r".*\(scenario .*small.yaml\); its run was trained on "
                     r"the hardware of --scenarios article: evaluate it on "
                     r"those, or give hardware of as many devices with "
                     r"evaluate.py --hardware FILE$", refusal(cfg, cfg.scenarios))


def test_a_run_whose_hardware_file_changed_since_is_told_to_restore_it(tmp_path: Path) -> None:
    """A run trained with --hardware FILE, the file edited since to another device count: the
    refusal said "load it with hardware of 3 devices", naming no option of evaluate.py."""
    hardware = tmp_path / "mine.yaml"
    hardware.write_text((PRESET_DIR / "server.yaml").read_text())
    fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"], hardware=str(hardware))
    hardware.write_text(two_device_hardware(tmp_path).read_text())
    cfg = cfg_for(runs=str(tmp_path / "runs"), baselines=["best-static"])
    assert re.search(rf"trained on hardware of 3 devices.*has 2 \(cpu, gpu\)"
                     rf".*; its run was trained with --hardware {re.escape(str(hardware))}, "
                     rf"which has changed since: restore that file, or give "
                     rf"the hardware it was trained on with evaluate.py "
                     rf"--hardware FILE$", refusal(cfg, ["article"]))


def test_a_bare_zip_of_other_hardware_is_told_to_give_it_with_hardware(tmp_path: Path) -> None:
    """A zip of SB3's save() records no hardware, so evaluate.py runs it on the scenario's;
    trained on a profile of 2 devices it was refused with "load it with hardware of 2
    devices", which named no option of evaluate.py. A run folder's model needs no hint."""
    two = two_device_hardware(tmp_path)
    make_sb3("ppo", make_env(hardware=str(two), episode_tasks=10), seed=0).save(tmp_path / "m")
    cfg = cfg_for(models=[str(tmp_path / "m.zip")], baselines=["best-static"])
    entries, _ = discover_models(cfg)
    with pytest.raises(ConfigError, match=r"has 3 \(cpu, gpu, npu\).*evaluate\.py --hardware"):
        check_inputs(cfg, entries, ["article"])
    with invoked_as("console"), pytest.raises(ConfigError, match=r"infer-alloc-evaluate "
                                                                     r"--hardware FILE$"):
        check_inputs(cfg, entries, ["article"])
    assert check_inputs(dataclasses.replace(cfg, hardware=str(two)), entries, ["article"]) == []
    fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"])
    run_cfg = cfg_for(runs=str(tmp_path / "runs"), baselines=["best-static"], hardware=str(two))
    with pytest.raises(ConfigError) as refused:
        check_inputs(run_cfg, discover_models(run_cfg)[0], ["article"])
    assert "has 2 (cpu, gpu)" in str(refused.value) and "--hardware" not in str(refused.value)


def test_a_model_file_gone_since_discovery_is_a_config_error_naming_it(tmp_path: Path) -> None:
    """check_inputs is where a model that will not load is one line (ConfigError) before any
    work: a file removed after discovery too, not a FileNotFoundError traceback."""
    gone = tmp_path / "gone.zip"
    with pytest.raises(ConfigError, match=re.escape(f"model file {gone} does not exist")):
        check_inputs(cfg_for(baselines=["best-static"]), [ModelEntry("ppo", gone)], ["article"])


def test_hardware_given_on_the_command_line_is_named_in_the_section(tmp_path: Path) -> None:
    """`evaluate.py --hardware edge` left the summary titled "article", as if on the server."""
    cfg = cfg_for(runs=str(tmp_path / "runs"), baselines=["best-static"], hardware="edge")
    results = evaluate_agents(cfg, [], ["article"])
    assert [(r.scenario, r.agent) for r in results] == [("article (hardware edge)", "best-static")]
    cfg = cfg_for(runs=str(tmp_path / "runs"), baselines=["best-static"], hardware="server")
    assert [r.scenario for r in evaluate_agents(cfg, [], ["article"])] == ["article"]


def test_summary_csv_gives_each_rows_hardware_and_variant_in_columns_of_their_own(
        tmp_path: Path) -> None:
    """A section on other hardware or another variant is one combined label in `scenario`
    ("article (hardware edge, variant glm-5.3)"): to group by hardware or variant, a reader
    had to parse it. `hardware` and `variant` now hold the names the section uses (the
    scenario's own where the label leaves them out), after every earlier column, so readers
    by name or by position read as before."""
    from envs.scenario import load_scenario
    from inference.variants import variant_label

    fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"])
    fake_run(tmp_path / "runs", "b", agents=["ppo"], warmup=["none"], hardware="edge",
             variant="glm-5.3")
    cfg = cfg_for(runs=str(tmp_path / "runs"), baselines=["best-static"])
    entries, _ = discover_models(cfg)
    text = summary_csv(r.row() for r in evaluate_agents(cfg, entries, ["article"]))
    header, *rows = list(csv.reader(io.StringIO(text)))
    earlier = ["scenario", "agent", "kind", "runs", "n",
               *(k for m in METRICS for k in (m, f"{m}_ci95"))]
    assert header == [*earlier, "hardware", "variant", "vs_best_static_over_runs",
                      "vs_best_static_over_runs_ci95"]
    own = load_scenario("article")
    settings = {(row[0], row[-4], row[-3]) for row in rows}
    assert settings == {("article", own.hardware, variant_label(own.variant)),
                        ("article (hardware edge, variant glm-5.3)", "edge", "glm-5.3")}


def test_a_run_on_a_stage_implementation_of_the_users_own_is_named_with_the_way_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run trained on an implementation its user registered in their own process failed
    every run of --runs with a bare "unknown prefill implementation 'wide'", naming no run and
    no remedy: the refusal now names the run, and says how to evaluate it or leave it out."""
    from inference import variants
    from inference.stages.prefill import WindowAttention

    monkeypatch.setitem(variants.IMPLEMENTATIONS["prefill"], "wide", WindowAttention)
    fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"])
    wide = fake_run(tmp_path / "runs", "b", agents=["ppo"], warmup=["none"],
                    variant="direct+wide+sequential")
    monkeypatch.undo()      # evaluate.py's process: the module registering it is not imported
    cfg = cfg_for(runs=str(tmp_path / "runs"), baselines=["best-static"])
    entries, _ = discover_models(cfg)
    with pytest.raises(ConfigError) as refused:
        check_inputs(cfg, entries, ["article"])
    message = str(refused.value)
    assert message.startswith(f"run {wide} trained on variant 'direct+wide+sequential': "
                              "unknown prefill implementation 'wide'")
    assert ("import mystages, agents.evaluate_cli; agents.evaluate_cli.main([...])"
            in message)
    assert "--models" in message and "\n" not in message


def test_a_hardware_file_without_a_yaml_suffix_is_that_file(tmp_path: Path) -> None:
    """load_hardware reads any file that exists, whatever its suffix: the section's hardware
    is that file (its devices decide the baselines), not a preset of its name."""
    hw = two_device_hardware(tmp_path).rename(tmp_path / "two.hw")
    cfg = cfg_for(runs=str(tmp_path / "runs"), hardware=str(hw))
    notes = check_inputs(cfg, [], ["article"])
    assert notes == [f"article (hardware {hw}): skipping baseline all-npu (the hardware has no "
                     "such device; it has cpu, gpu)"]
    results = evaluate_agents(cfg, [], ["article"])
    assert [(r.scenario, r.agent) for r in results] == [(f"article (hardware {hw})",
                                                          "best-static")]


def test_one_hardware_spelt_two_ways_is_one_section(tmp_path: Path) -> None:
    """`edge` and `.../presets/edge.yaml` were two contexts with one title: the baselines ran
    twice into one row (n doubled); two files named hw.yaml shared a title the other way."""
    fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"], hardware="edge")
    fake_run(tmp_path / "runs", "b", agents=["ppo"], warmup=["none"], seeds=[1],
             hardware=str(PRESET_DIR / "edge.yaml"))
    cfg = cfg_for(runs=str(tmp_path / "runs"), baselines=["best-static"])
    entries, _ = discover_models(cfg)
    results = evaluate_agents(cfg, entries, ["article"])
    assert {(r.scenario, r.agent, r.runs, len(r.samples)) for r in results} == {
        ("article (hardware edge)", "ppo", 2, 2), ("article (hardware edge)", "best-static", 1, 1)}
    for sub in ("x", "y"):
        (tmp_path / sub).mkdir()
        two_device_hardware(tmp_path / sub)
    fake_run(tmp_path / "runs2", "a", agents=["ppo"], warmup=["none"],
             hardware=str(tmp_path / "x" / "two.yaml"))
    fake_run(tmp_path / "runs2", "b", agents=["ppo"], warmup=["none"],
             hardware=str(tmp_path / "y" / "two.yaml"))
    cfg = cfg_for(runs=str(tmp_path / "runs2"), baselines=["best-static"])
    entries, _ = discover_models(cfg)
    sections = {r.scenario for r in evaluate_agents(cfg, entries, ["article"])}
    assert sections == {f"article (hardware {tmp_path / sub / 'two.yaml'})" for sub in ("x", "y")}


def test_two_scenario_files_of_one_name_are_two_sections(tmp_path: Path) -> None:
    """a/conv.yaml and b/conv.yaml were both titled "conv": their results pooled as one
    scenario's (n doubled, the means a blend). A file named like a preset is told apart too."""
    paths = []
    for sub, rate in (("a", 0.01), ("b", 0.04)):
        (tmp_path / sub).mkdir()
        paths.append(tmp_path / sub / "conv.yaml")
        paths[-1].write_text(f"name: conv\nworkload: {{arrival_rate: {rate}}}\n")
    (tmp_path / "article.yaml").write_text("name: article\nworkload: {arrival_rate: 0.04}\n")
    cfg = cfg_for(runs=str(tmp_path / "runs"), baselines=["best-static"], episode_tasks=20)
    scenarios = [*map(str, paths), "article", str(tmp_path / "article.yaml")]
    results = evaluate_agents(cfg, [], scenarios)
    assert [(r.scenario, len(r.samples)) for r in results] == [
        (str(paths[0]), 1), (str(paths[1]), 1), ("article", 1), (str(tmp_path / "article.yaml"), 1)]
    alone = evaluate_agents(cfg, [], [str(paths[0])])
    assert [r.scenario for r in alone] == ["conv"]     # no other of its name: the short one


def test_nothing_to_evaluate_is_refused_before_any_file_is_written(tmp_path: Path) -> None:
    """`baselines: []` in a --config YAML, with no run folder, wrote an empty summary.csv,
    summary.md and latency_cdf.png over --out's and exited 0; so did baselines the hardware
    cannot run (all-npu on two devices), each only skipped with a note."""
    from agents import reporting

    out = tmp_path / "results"
    cfg = cfg_for(runs=str(tmp_path), baselines=[], no_online=True, out=str(out),
                  progress_bar=False)
    with pytest.raises(ConfigError, match=r"nothing to evaluate: no trained model .*--runs "
                                          + re.escape(str(tmp_path)) + r".*--baselines: none"):
        reporting.run(cfg, report=lambda _: None)
    assert not out.exists()
    cfg = cfg_for(runs=str(tmp_path), baselines=["all-npu"],
                  hardware=str(two_device_hardware(tmp_path)))
    with pytest.raises(ConfigError, match=r"no baseline the hardware can run \(--baselines: all-npu\)"):
        check_inputs(cfg, [], ["article"])
    # one runnable baseline, or one model, is something to evaluate
    assert check_inputs(dataclasses.replace(cfg, baselines=["all-npu", "best-static"]), [],
                        ["article"]) == ["article (hardware two): skipping baseline all-npu "
                                         "(the hardware has no such device; it has cpu, gpu)"]


def test_a_baseline_given_twice_is_evaluated_once(tmp_path: Path) -> None:
    """`--baselines all-gpu all-gpu` pooled the same episodes twice into one row: n = 2 runs'
    worth of samples and a 95% CI of 0 from one seed (train.py runs a repeated agent once)."""
    cfg = cfg_for(baselines=["all-gpu", "best-static", "all-gpu"])
    results = evaluate_agents(cfg, [], ["article"])
    assert [(r.agent, len(r.samples)) for r in results] == [("all-gpu", 1), ("best-static", 1)]
    assert work_units(cfg, [], ["article"]) == 2
    cfg = cfg_for(baselines=["all-npu", "best-static", "all-npu"],
                  hardware=str(two_device_hardware(tmp_path)))
    assert check_inputs(cfg, [], ["article"]) == [
        "article (hardware two): skipping baseline all-npu (the hardware has no such device; "
        "it has cpu, gpu)"]


def test_a_misspelt_all_baseline_is_refused_and_a_gated_one_skipped(tmp_path: Path) -> None:
    fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"],
             hardware=str(two_device_hardware(tmp_path)))
    cfg = cfg_for(runs=str(tmp_path / "runs"), baselines=["best-static", "all-gpus"])
    entries, _ = discover_models(cfg)
    with pytest.raises(ConfigError, match="unknown baseline 'all-gpus'"):   # not "skipping"
        check_inputs(cfg, entries, ["article"])
    cfg = dataclasses.replace(cfg, baselines=["best-static", "gated-all-npu"])
    assert check_inputs(cfg, entries, ["article"]) == [
        "article (hardware two): skipping baseline gated-all-npu (the hardware has no such "
        "device; it has cpu, gpu)"]


def test_the_cdf_has_a_panel_per_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sections other than a bare scenario name were dropped from latency_cdf.png."""
    from agents import plots, reporting

    panels: dict[str, list[str]] = {}

    def capture(cdf: dict, path: Path) -> Path:
        panels.update({section: sorted(curves) for section, curves in cdf.items()})
        return path

    monkeypatch.setattr(plots, "latency_cdf", capture)
    fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"], hardware="edge")
    reporting.run(cfg_for(runs=str(tmp_path / "runs"), baselines=["best-static"],
                          no_online=True, out=str(tmp_path / "results"), progress_bar=False),
                  report=lambda _: None)
    assert panels == {"article (hardware edge)": ["best-static", "ppo"]}


def test_the_console_table_keeps_its_columns_under_long_section_and_run_names() -> None:
    rows = [{"scenario": s, "agent": a, "mean_latency_s": m, "vs_best_static": v}
            for s, a, m, v in (("article", "best-static", 43.65, 1.0),
                               ("article (variant glm-5.3)", "ppo", 26.82, 1.985),
                               ("article (hardware edge)", "ppo-warm-conservative-seed-12",
                                6377.63, 1.335))]
    lines = fmt_summary(rows).splitlines()
    # every number column ends where its heading does
    assert len({len(line) for line in lines}) == 1, lines
    assert lines[0].index("mean (s)") + len("mean (s)") == lines[2].index("26.82") + len("26.82")


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list:
    """The axes of every figure agents.plots saves, as its _finish receives them."""
    from agents import plots

    axes: list = []
    finish = plots._finish

    def capture(fig, ax_list, target):
        axes.extend(ax_list)
        return finish(fig, ax_list, target)

    monkeypatch.setattr(plots, "_finish", capture)
    return axes


def write_scalars(folder: Path, tag: str, values: dict[int, float]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step, value in values.items():
        writer.add_scalar(tag, value, step)
    writer.close()


def test_learning_curves_add_a_held_out_panel_when_runs_log_eval(tmp_path: Path, drawn: list
                                                                  ) -> None:
    """learning_curves.png showed the training stream alone; runs that log eval/ (train.py's
    held-out episode) get a second panel, with a line for each run that has the curve."""
    from agents import plots

    runs = []
    for name, with_eval in (("a", True), ("b", False)):
        write_scalars(tmp_path / name, "latency/vs_static", {s: 1.5 - s / 100 for s in range(0, 50, 10)})
        if with_eval:
            write_scalars(tmp_path / name, "eval/vs_best_static",
                          {s: 1.2 - s / 100 for s in range(0, 50, 10)})
        runs.append((name, tmp_path / name))

    def seen() -> list[tuple[str, list[str]]]:
        return [(ax.get_ylabel(), sorted(line.get_label() for line in ax.get_lines()))
                for ax in drawn]

    assert plots.learning_curves(runs, tmp_path / "two.png").is_file()
    assert seen() == [("latency/vs_static", ["a", "b", "best static"]),
                      ("eval/vs_best_static", ["a", "best static"])]
    assert "first scenario" not in drawn[1].get_title()
    drawn.clear()
    plots.learning_curves(runs[1:], tmp_path / "one.png")
    assert seen() == [("latency/vs_static", ["b", "best static"])]
    # a run on several scenarios: its eval/ panel is its first's, the mix's mean a third
    write_scalars(tmp_path / "mixed", "latency/vs_static", {0: 1.4, 10: 1.3})
    write_scalars(tmp_path / "mixed", "eval/vs_best_static", {0: 1.1, 10: 1.0})
    write_scalars(tmp_path / "mixed", "eval/mix_vs_best_static", {0: 0.9, 10: 0.8})
    drawn.clear()
    plots.learning_curves([*runs, ("mixed", tmp_path / "mixed")], tmp_path / "three.png")
    assert seen() == [("latency/vs_static", ["a", "b", "best static", "mixed"]),
                      ("eval/vs_best_static", ["a", "best static", "mixed"]),
                      ("eval/mix_vs_best_static", ["best static", "mixed"])]
    # the held-out panel says whose line is a mix's first scenario; without a mix, nothing
    assert drawn[1].get_title().endswith("(mixed: the first scenario trained on)")
    assert "first scenario" not in drawn[0].get_title() + drawn[2].get_title()


def test_the_held_out_panel_is_drawn_raw_and_the_training_panel_always(tmp_path: Path,
                                                                        drawn: list) -> None:
    from agents import plots

    held_out = {s: float(s % 3) for s in range(0, 240, 10)}        # 24 logs, more than `smooth`
    write_scalars(tmp_path / "a", "eval/vs_best_static", held_out)
    plots.learning_curves([("a", tmp_path / "a")], tmp_path / "c.png", smooth=4)
    training, evaluation = drawn
    assert [line.get_label() for line in training.get_lines()] == ["best static"]
    (line, _) = evaluation.get_lines()
    assert list(line.get_xdata()) == list(held_out) and list(line.get_ydata()) == list(held_out.values())


def test_held_out_points_are_marked_and_best_static_is_a_visible_line_at_1(tmp_path: Path,
                                                                           drawn: list) -> None:
    """The held-out panel's few raw evaluations are drawn as points on their line, its title
    naming no moving average (the smoothed training stream is a plain line, its title naming
    the window); each panel's best-static reference is a line one can see, at 1 (the curves
    are latency / best-static's)."""
    from agents import plots

    write_scalars(tmp_path / "a", "latency/vs_static", {s: 1.5 - s / 100 for s in range(0, 50, 10)})
    write_scalars(tmp_path / "a", "eval/vs_best_static", {s: 1.2 - s / 100 for s in range(0, 50, 10)})
    plots.learning_curves([("a", tmp_path / "a")], tmp_path / "c.png", smooth=3)
    titles = {ax.get_ylabel(): ax.get_title() for ax in drawn}
    assert titles["latency/vs_static"].endswith(", moving average of 3 logs")
    assert "moving average" not in titles["eval/vs_best_static"]
    markers = {ax.get_ylabel(): {line.get_label(): line.get_marker() for line in ax.get_lines()}
               for ax in drawn}
    assert markers["latency/vs_static"]["a"] in (None, "None", "")
    assert markers["eval/vs_best_static"]["a"] == "o"
    for ax in drawn:
        (best,) = [line for line in ax.get_lines() if line.get_label() == "best static"]
        assert list(best.get_ydata()) == [1.0, 1.0] and best.get_linewidth() > 0


def test_a_figure_widens_by_a_panel_per_panel_and_the_curves_share_one_scale(
        tmp_path: Path, drawn: list) -> None:
    """Each panel keeps its width however many there are (scenarios in the CDF, curves in the
    learning curves), and the two learning-curve panels share the y axis, so that the
    training stream and the held-out episode read on one scale."""
    from agents import plots

    def width(ax) -> float:
        return ax.figure.get_size_inches()[0]

    plots.latency_cdf({"article": {"heft": np.array([1.0])}}, tmp_path / "one.png")
    plots.latency_cdf({s: {"heft": np.array([1.0])} for s in ("article", "bursty")},
                      tmp_path / "two.png")
    one, two, _ = drawn
    assert width(two) == pytest.approx(2 * width(one))
    drawn.clear()
    write_scalars(tmp_path / "b", "latency/vs_static", {s: 1.5 - s / 100 for s in range(0, 50, 10)})
    plots.learning_curves([("b", tmp_path / "b")], tmp_path / "c1.png")
    write_scalars(tmp_path / "a", "latency/vs_static", {s: 3.0 - s / 100 for s in range(0, 50, 10)})
    write_scalars(tmp_path / "a", "eval/vs_best_static", {s: 0.5 + s / 100 for s in range(0, 50, 10)})
    plots.learning_curves([("a", tmp_path / "a")], tmp_path / "c2.png")
    single, training, held_out = drawn
    assert width(training) == pytest.approx(2 * width(single))
    assert training.get_ylim() == held_out.get_ylim()


def test_a_latency_cdf_of_no_scenarios_is_an_empty_figure(tmp_path: Path, drawn: list) -> None:
    from agents import plots

    assert plots.latency_cdf({}, tmp_path / "empty.png").is_file()
    assert drawn == []


def test_learning_curves_read_each_runs_events_once(tmp_path: Path, drawn: list,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a folder's events frames every record in it whatever tag is asked for (a long
    run's latency/per_sample: 200,000 a 200,000-step run), and each panel read them again:
    evaluate.py read a run once per curve. The panels get the curves as before."""
    from agents import event_scalars, plots

    for name in ("a", "b"):
        write_scalars(tmp_path / name, "latency/vs_static", {s: 1.5 - s / 100 for s in range(0, 50, 10)})
        write_scalars(tmp_path / name, "eval/vs_best_static", {s: 1.2 - s / 100 for s in range(0, 50, 10)})
    reads: list[Path] = []
    records = event_scalars.records

    def counted(path: Path, offset: int = 0):
        reads.append(path)
        return records(path, offset)

    monkeypatch.setattr(event_scalars, "records", counted)
    plots.learning_curves([("a", tmp_path / "a"), ("b", tmp_path / "b")], tmp_path / "c.png")
    assert sorted(reads) == sorted(tmp_path.glob("*/events.out.tfevents.*"))
    assert len(reads) == 4                                      # two files a run, each once
    assert [len(ax.get_lines()) for ax in drawn] == [3, 3]      # a, b and best static each


def test_a_resumed_runs_scalars_keep_the_newer_of_each_step(tmp_path: Path) -> None:
    from agents.plots import read_scalars

    write_scalars(tmp_path, "latency/vs_static", dict.fromkeys(range(5), 1.0))
    write_scalars(tmp_path, "latency/vs_static", dict.fromkeys(range(3, 6), 2.0))   # resumed at 3
    steps, values = read_scalars(tmp_path, "latency/vs_static")
    assert list(steps) == list(range(6)) and list(values) == [1.0] * 3 + [2.0] * 3
    assert [len(a) for a in read_scalars(tmp_path, "no/such_tag")] == [0, 0]


def accumulated(run_dir: Path, tags: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """What read_scalar_tags returned when it read through tensorboard's EventAccumulator: its
    scalars (10,000 a tag), by wall time, a step logged again replacing those at it and past."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 10_000})
    acc.Reload()
    found = {}
    for tag in tags:
        kept: list = []
        for event in sorted(acc.Scalars(tag) if tag in acc.Tags()["scalars"] else [],
                            key=lambda e: e.wall_time):
            while kept and kept[-1].step >= event.step:
                kept.pop()
            kept.append(event)
        found[tag] = (np.array([e.step for e in kept]), np.array([e.value for e in kept]))
    return found


def assert_same_curves(got: dict, expected: dict) -> None:
    assert list(got) == list(expected)
    for tag, (steps, values) in expected.items():
        assert got[tag][0].dtype == steps.dtype and got[tag][1].dtype == values.dtype, tag
        np.testing.assert_array_equal(got[tag][0], steps, err_msg=tag)
        np.testing.assert_array_equal(got[tag][1], values, err_msg=tag)


def all_scalar_tags(run_dir: Path) -> list[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    return sorted(EventAccumulator(str(run_dir), size_guidance={"scalars": 1}).Reload()
                  .Tags()["scalars"])


def test_a_trained_runs_curves_are_tensorboards_reader_s(tmp_path: Path) -> None:
    """The events are framed and parsed here (EventAccumulator took ~47 s a million steps):
    every scalar of a real run, SB3's and ours, reads as EventAccumulator showed it."""
    from agents.config import TrainConfig
    from agents.plots import read_scalar_tags
    from agents.training import train

    config = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=64, checkpoint_interval=0,
                         log_dir=str(tmp_path), episode_tasks=20, eval_tasks=20,
                         progress_bar=False, hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1})
    (result,) = train(config, report=lambda line: None)
    tags = all_scalar_tags(result.run_dir)
    assert {"latency/per_sample", "latency/vs_static", "eval/vs_best_static",
            "train/loss"} <= set(tags)
    tags += ["no/such_tag"]
    assert_same_curves(read_scalar_tags(result.run_dir, tags), accumulated(result.run_dir, tags))


def write_session(folder: Path, points: dict[str, range], purge_step: int | None = None) -> None:
    """An events file of its own in `folder` (a session of a run), its points after a restart
    marker at `purge_step` (as a run resumed from a checkpoint writes one)."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder), purge_step=purge_step)
    for tag, steps in points.items():
        for step in steps:
            writer.add_scalar(tag, step / 7 + len(tag), step)
    writer.close()


def test_a_resumed_runs_files_read_as_tensorboards_reader_reads_them(tmp_path: Path) -> None:
    """Three sessions, each a file: the second restarted at 5 (its marker drops the first's
    points from 5 on, of every tag, though it logs one tag again), the third logs 6-8 again
    without one (the newer win). A tag whose name holds another's is not that one."""
    from agents.plots import read_scalar_tags

    write_session(tmp_path, {"x/ab": range(10), "x/abc": range(10), "x/other": range(10)})
    write_session(tmp_path, {"x/ab": range(5, 8)}, purge_step=5)
    write_session(tmp_path, {"x/ab": range(6, 9), "x/other": range(6, 9)})
    assert len(list(tmp_path.iterdir())) == 3
    tags = ["x/ab", "x/other", "x/abc", "x/a"]
    got = read_scalar_tags(tmp_path, tags)
    assert_same_curves(got, accumulated(tmp_path, tags))
    assert list(got["x/ab"][0]) == list(range(9))
    assert list(got["x/abc"][0]) == list(range(5))       # the marker dropped 5-9
    assert list(got["x/other"][0]) == [0, 1, 2, 3, 4, 6, 7, 8]
    assert len(got["x/a"][0]) == 0


@pytest.mark.parametrize("cut", [1, 4, 20, 37])
def test_an_events_file_cut_short_ends_at_its_last_whole_record(tmp_path: Path, cut: int
                                                                 ) -> None:
    """A run killed while writing a record: the file's earlier records read, the next file's
    too, as EventAccumulator reads them, where the cut record had been a crash."""
    from agents.plots import read_scalar_tags

    write_session(tmp_path, {"x/ab": range(10)})
    (first,) = tmp_path.iterdir()
    write_session(tmp_path, {"x/ab": range(10, 12)})
    with first.open("r+b") as f:
        f.truncate(first.stat().st_size - cut)
    got = read_scalar_tags(tmp_path, ["x/ab"])
    assert_same_curves(got, accumulated(tmp_path, ["x/ab"]))
    assert list(got["x/ab"][0]) == [*range(9), 10, 11]


def test_a_file_system_that_cannot_map_files_gets_them_read(tmp_path: Path, monkeypatch
                                                            ) -> None:
    """The records are framed on a memory map; where the file system refuses one (mmap raises
    OSError), the file is read whole and framed alike, a cut record still ending it."""
    import mmap

    from agents.plots import read_scalar_tags

    write_session(tmp_path, {"x/ab": range(10)})
    (first,) = tmp_path.iterdir()
    write_session(tmp_path, {"x/ab": range(10, 12)})
    with first.open("r+b") as f:
        f.truncate(first.stat().st_size - 4)
    mapped = read_scalar_tags(tmp_path, ["x/ab"])

    def refused(*args, **kwargs):
        raise OSError(19, "No such device")

    monkeypatch.setattr(mmap, "mmap", refused)
    assert_same_curves(read_scalar_tags(tmp_path, ["x/ab"]), mapped)
    assert list(mapped["x/ab"][0]) == [*range(9), 10, 11]


def test_a_curve_of_more_than_10000_points_is_thinned_evenly(tmp_path: Path) -> None:
    """EventAccumulator kept a random sample of 10,000 points a tag; they are 10,000 evenly
    spaced, the first and last among them, the same at each read. 10,000 are all kept."""
    from agents.event_scalars import MAX_POINTS
    from agents.plots import read_scalar_tags

    written = 12_345
    write_session(tmp_path, {"x/long": range(written), "x/edge": range(MAX_POINTS)})
    got = read_scalar_tags(tmp_path, ["x/long", "x/edge"])
    steps, values = got["x/long"]
    assert len(steps) == MAX_POINTS and steps[0] == 0 and steps[-1] == written - 1
    gaps = np.diff(steps)
    assert gaps.min() >= 1 and gaps.max() - gaps.min() <= 1      # even, none twice
    np.testing.assert_array_equal(values, (steps / 7 + len("x/long")).astype(np.float32))
    assert_same_curves(read_scalar_tags(tmp_path, ["x/long"]), {"x/long": got["x/long"]})
    assert_same_curves({"x/edge": got["x/edge"]}, accumulated(tmp_path, ["x/edge"]))


def test_an_events_file_that_cannot_be_read_is_named(tmp_path: Path, unreadable) -> None:
    """One without read permission, or a folder of that name, was a PermissionError or
    IsADirectoryError traceback out of TensorBoard's reader."""
    from agents.plots import read_scalars

    write_scalars(tmp_path, "latency/vs_static", {0: 1.0})
    (events,) = tmp_path.glob("events.out.tfevents.*")
    folder = tmp_path / f"{events.name}.x"
    folder.mkdir()
    with pytest.raises(ValueError, match=re.escape(
            f"TensorBoard events file {folder} is a folder, not an events file")):
        read_scalars(tmp_path, "latency/vs_static")
    folder.rmdir()
    unreadable(events)
    with pytest.raises(ValueError, match=re.escape(
            f"TensorBoard events file {events} cannot be read: Permission denied")):
        read_scalars(tmp_path, "latency/vs_static")


def test_the_events_files_checked_are_those_read_the_folder_listed_once(
        tmp_path: Path, monkeypatch) -> None:
    """check_events names the files read_scalar_tags then reads, in EventAccumulator's order:
    a folder's events files by name (not another file, nor TensorBoard's .profile-empty), or
    an events file given itself. The folder was listed twice a read, once to check it."""
    from agents.event_scalars import check_events
    from agents.plots import read_scalars

    write_session(tmp_path, {"x/ab": range(3)})
    write_session(tmp_path, {"x/ab": range(3, 5)})
    made = sorted(tmp_path.glob("events.out.tfevents.*"))
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "events.out.tfevents.0.profile-empty").write_bytes(b"")
    assert check_events(tmp_path) == made and len(made) == 2
    assert check_events(made[1]) == [made[1]] and check_events(tmp_path / "notes.txt") == []
    assert list(read_scalars(made[1], "x/ab")[0]) == [3, 4]
    listed = []
    iterdir = Path.iterdir

    def counted(self: Path):
        listed.append(self)
        return iterdir(self)

    monkeypatch.setattr(Path, "iterdir", counted)
    assert list(read_scalars(tmp_path, "x/ab")[0]) == list(range(5))
    assert listed == [tmp_path]


def test_an_events_file_that_cannot_be_read_is_refused_before_any_output(
        tmp_path: Path, monkeypatch) -> None:
    """It was read for learning_curves.png after summary.csv, summary.md and latency_cdf.png
    were written: the evaluation then ended in a traceback beside them."""
    from agents import reporting

    run = fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"])
    (run / "events.out.tfevents.1.host").mkdir()
    out = tmp_path / "results"
    with pytest.raises(ConfigError, match="events.out.tfevents.1.host is a folder"):
        reporting.run(cfg_for(runs=str(tmp_path / "runs"), out=str(out), no_online=True,
                              progress_bar=False), report=lambda line: None)
    assert not out.exists()


def test_the_latency_cdf_steps_to_1_per_agent_on_a_log_axis(tmp_path: Path, drawn: list) -> None:
    from agents import plots

    plots.latency_cdf({"article": {"heft": np.array([3.0, 1.0, 2.0]), "ppo": np.array([5.0])},
                       "bursty": {"heft": np.array([1.0])}}, tmp_path / "cdf.png")
    assert [ax.get_title() for ax in drawn] == ["latency CDF: article", "latency CDF: bursty"]
    lines = {line.get_label(): line for line in drawn[0].get_lines()}
    assert sorted(lines) == ["heft", "ppo"] and drawn[0].get_xscale() == "log"
    assert list(lines["heft"].get_xdata()) == [1.0, 2.0, 3.0]
    assert list(lines["heft"].get_ydata()) == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_a_label_with_dollars_or_a_leading_underscore_is_drawn_as_written(tmp_path: Path,
                                                                          drawn: list) -> None:
    """Matplotlib reads "$...$" as mathtext (a model file ppo_$5_$10.zip stopped evaluate.py
    with a ParseSyntaxException after summary.csv was written) and leaves a label that starts
    with "_" out of the legend: each name is shown as the CSV spells it."""
    from agents import plots

    names = ["ppo_$5_$10", "_ppo", "heft"]
    plots.latency_cdf({"a$b$": {n: np.array([1.0, 2.0]) for n in names}}, tmp_path / "c.png")
    plots.stabilization({n: [np.full(30, 1.0)] for n in names}, tmp_path / "s.png",
                        title="online: a$b$")
    for ax in drawn:
        legend = ax.get_legend()
        assert [t.get_text() for t in legend.get_texts()] == names
        assert not any(t.get_parse_math() for t in [*legend.get_texts(), ax.title])
    assert [ax.get_title() for ax in drawn] == ["latency CDF: a$b$", "online: a$b$"]

def test_more_agents_than_colours_stay_apart_and_the_legend_leaves_the_curves(
        tmp_path: Path, drawn: list) -> None:
    """Past the colour cycle's 10 colours, agents 11, 12, ... took agents 1, 2, ...'s colour
    and line (every --baselines and a few models: two indistinguishable curves), and the
    legend of 17 entries covered the curves. Each keeps a colour-and-dash of its own, and a
    legend that long stands below the panel."""
    from agents import plots

    names = [f"agent-{i}" for i in range(17)]
    plots.latency_cdf({"article": {n: np.arange(1.0, 3.0 + i) for i, n in enumerate(names)}},
                      tmp_path / "cdf.png")
    (ax,) = drawn
    styles = [(line.get_color(), line.get_linestyle()) for line in ax.get_lines()]
    assert len(set(styles)) == len(names)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(ax.figure)     # the saved figure, closed: laid out again
    canvas.draw()
    renderer = canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    below = ax.get_tightbbox(renderer, bbox_extra_artists=[])    # ticks and axis label too
    assert legend.y1 < below.y0 and legend.x0 >= below.x0 - 1 and legend.x1 <= below.x1 + 1
    # a short legend stays where it was, inside the panel
    drawn.clear()
    plots.latency_cdf({"article": {n: np.arange(1.0, 4.0) for n in names[:3]}},
                      tmp_path / "few.png")
    FigureCanvasAgg(drawn[0].figure).draw()
    assert drawn[0].get_legend().get_window_extent().y0 > drawn[0].get_window_extent().y0


def test_the_stabilization_plot_draws_the_mean_a_t_band_and_sample_200(tmp_path: Path,
                                                                       drawn: list) -> None:
    """Two seeds at 1 s and 3 s: mean 2, half-width t95(1) x std / sqrt(2) = t95(1), cut at 0."""
    from agents import plots

    plots.stabilization({"ppo": [np.full(300, 1.0), np.full(300, 3.0)],
                         "static": [np.full(300, 2.5)]}, tmp_path / "s.png", window=1)
    (ax,) = drawn
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["ppo"].get_ydata()) == [2.0] * 300
    assert any(list(line.get_xdata()) == [plots.STABILIZATION_LINE] * 2 for line in lines.values())
    (band,) = ax.collections                                 # one seed: no band
    low, high = band.get_paths()[0].vertices[:, 1].min(), band.get_paths()[0].vertices[:, 1].max()
    assert (low, high) == pytest.approx((0.0, 2.0 + t95(1)))
    assert ax.get_ylabel() == "latency (s), rolling mean of 1"


def test_the_stabilization_plot_marks_sample_200_only_within_the_runs(tmp_path: Path,
                                                                      drawn: list) -> None:
    """With --online-samples 60 the marker at sample 200 stretched the x axis to 200: the
    curves filled the left 30% of the panel, beside an empty 70%."""
    from agents import plots

    plots.stabilization({"ppo": [np.full(60, 1.0), np.full(60, 3.0)]}, tmp_path / "s.png")
    (ax,) = drawn
    assert all(max(line.get_xdata()) < 60 for line in ax.get_lines())
    assert ax.get_xlim()[1] < 70 and not ax.texts


def test_the_rolling_mean_starts_at_sample_0() -> None:
    """Until the window fills, each point is the mean of the samples so far."""
    from agents.plots import _smooth

    assert _smooth(np.array([2.0, 4.0, 6.0, 8.0]), 3).tolist() == [2.0, 3.0, 4.0, 6.0]
    assert _smooth(np.array([2.0, 4.0]), 2).tolist() == [2.0, 3.0]
    assert _smooth(np.array([2.0, 4.0]), 1).tolist() == [2.0, 4.0]


# --- the summary's statistics ------------------------------------------------------------------


def test_the_t_interval_by_hand() -> None:
    """t(0.975, n - 1) * sd / sqrt(n), sd with n - 1: 1, 2, 3 has sd 1 and t(0.975, 2) 4.303."""
    assert (t95(1), t95(2), t95(30)) == (12.706, 4.303, 2.042)
    mean, half = mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.303 / np.sqrt(3), rel=1e-12)
    mean, half = mean_ci95([5.0])
    assert mean == 5.0 and np.isnan(half)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t95(0)
    with pytest.raises(ValueError, match="at least one value"):
        mean_ci95([])


def test_the_t_half_width_grows_with_the_spread_of_the_values() -> None:
    """1, 2, 3 has sd 1, so it cannot tell sd x t from t / sd: 2, 4, 6 (sd 2) and 1, 3, 5, 7
    (sd 2.58) can."""
    mean, half = mean_ci95([2.0, 4.0, 6.0])
    assert mean == 4.0 and half == pytest.approx(4.303 * 2.0 / np.sqrt(3), rel=1e-12)
    values = [1.0, 3.0, 5.0, 7.0]
    sd = np.sqrt(sum((v - 4.0) ** 2 for v in values) / 3)
    assert mean_ci95(values)[1] == pytest.approx(3.182 * sd / 2.0, rel=1e-12)
    assert mean_ci95([10 * v for v in values])[1] == pytest.approx(10 * mean_ci95(values)[1])


def test_the_t_quantile_past_the_table_is_students_not_the_normals() -> None:
    """Beyond 30 degrees of freedom t95 was 1.96: t(0.975, 31) is 2.0395, so an interval over
    32 values was 4% too narrow. Exact quantiles (SciPy's t.ppf) to 10 decimals."""
    exact = {31: 2.0395134464, 40: 2.0210753903, 60: 2.0002978220, 120: 1.9799304051,
             1000: 1.9623390808}
    for dof, value in exact.items():
        # the four-term series is off by 3e-8 at 31 degrees of freedom, less beyond
        assert t95(dof) == pytest.approx(value, abs=1e-7), dof
    values = [t95(d) for d in range(1, 2000)]
    assert all(a > b for a, b in zip(values, values[1:], strict=False))   # no step down at 31
    assert values[-1] > 1.96


def test_a_metric_undefined_on_some_seeds_is_the_mean_of_the_others() -> None:
    assert mean_ci([1.0, float("nan"), 3.0]) == mean_ci95([1.0, 3.0])
    assert all(np.isnan(v) for v in mean_ci([float("nan")]))


def test_episode_metrics_by_hand() -> None:
    latency = np.array([1.0, 2.0, 3.0, 4.0])
    m = episode_metrics(latency, np.array([2.0, 2.0, 2.0, 6.0]), np.full(4, 1.0))
    # numpy's default (linear) percentiles of 1..4: 1 + 3 q / 100
    assert m == pytest.approx({"mean_latency_s": 2.5, "p50_latency_s": 2.5,
                               "p95_latency_s": 3.85, "p99_latency_s": 3.97,
                               "vs_best_static": 2.5 / 3, "gap_to_oracle": 1.5}, rel=1e-12)


def test_summary_cells_keep_every_digit_and_show_the_interval() -> None:
    # 6 significant digits wrote 144610 where summary.md showed 144609.963
    rows = [{"agent": "a,b", "mean_latency_s": 144609.96312345678, "mean_latency_s_ci95": float("nan")}]
    text = summary_csv(rows)
    assert text == 'agent,mean_latency_s,mean_latency_s_ci95\n"a,b",144609.96312345678,\n'
    assert float(next(csv.DictReader(io.StringIO(text)))["mean_latency_s"]) == rows[0]["mean_latency_s"]
    # numpy's float64 (what np.mean gives) as a plain float, not numpy 2's "np.float64(2.5)"
    assert summary_csv([{"agent": "a", "p95_latency_s": np.float64(2.5)}]) == "agent,p95_latency_s\na,2.5\n"
    # no rows (any iterable, a generator too) is an empty file, not rows[0]'s IndexError
    assert summary_csv(r for r in []) == ""
    # every label reads back as written (a model file's name may hold quotes)
    labels = ['my "best" ppo', "a,b", 'x"', "plain"]
    text = summary_csv([{"agent": a, "n": 1} for a in labels])
    assert [r[0] for r in csv.reader(io.StringIO(text))] == ["agent", *labels]
    nan = float("nan")
    row = {"scenario": "article", "agent": "ppo|v2", "n": 1,
           **{k: v for m in METRICS for k, v in ((m, 1.0), (f"{m}_ci95", nan))}}
    [line] = [x for x in summary_markdown([row], [0], 1).splitlines() if "ppo" in x]
    assert line.startswith(r"| ppo\|v2 | 1 |") and line.replace(r"\|", "").count("|") == 9
    assert fmt_ci(1.23456, 0.1) == "1.235 ± 0.100"
    assert fmt_ci(1.23456, float("nan")) == "1.235"
    assert fmt_ci(float("nan"), 0.1) == "-"


def test_a_label_with_a_line_break_stays_one_row_of_the_markdown_table() -> None:
    """A model file's name may hold a newline (or a scenario file's path a "|"): the row split
    in two, or the heading ran into the next line, and the table lost its shape on GitHub."""
    nan = float("nan")
    metrics = {k: v for m in METRICS for k, v in ((m, 1.0), (f"{m}_ci95", nan))}
    rows = [{"scenario": "my|sc\nenario", "agent": "new\nline\r\nppo", "n": 1, **metrics},
            {"scenario": "my|sc\nenario", "agent": "plain", "n": 1, **metrics}]
    lines = summary_markdown(rows, [0], 1).splitlines()
    header = next(i for i, x in enumerate(lines) if x.startswith("| agent |"))
    table = lines[header:header + 4]
    assert [x.replace(r"\|", "").count("|") for x in table] == [9] * 4
    assert table[2].startswith("| new line ppo | 1 |")
    assert lines[header - 2] == r"## my\|sc enario"


@pytest.mark.parametrize("label", ["mine:__Fast__", "mine:*Fast*", "mine:<Fast>", "a`b`c",
                                   "[x](y)", "~~gone~~", "back\\slash|pipe"])
def test_a_label_with_markdown_marks_reads_as_written_in_both_tables(label: str) -> None:
    """A policy of one's own is named <module>:<attribute>, which Python lets hold "_" and
    more: mine:__Fast__ rendered as a bold "mine:Fast" and mine:<Fast> as an HTML tag that
    vanished, in summary.md and stabilization.md alike. Each mark is escaped, so that undoing
    Markdown's escapes gives the label back; a plain name is left as it is."""
    from agents.evaluation import OnlineStudy, online_markdown

    nan = float("nan")
    row = {"scenario": "article", "agent": label, "n": 1,
           **{k: v for m in METRICS for k, v in ((m, 1.0), (f"{m}_ci95", nan))}}
    study = OnlineStudy(metrics={label: [{"early_drop": 0.1}]})
    for text in (summary_markdown([row], [0], 1), online_markdown(study, [0], 10, "article")):
        [line] = [x for x in text.splitlines() if x.startswith("| ") and "agent" not in x]
        cell = re.split(r"(?<!\\)\|", line)[1].strip()
        assert re.sub(r"\\(.)", r"\1", cell) == label
        assert not re.search(r"(?<!\\)[*_`<>\[\]~]", cell), cell
    assert markdown_text("heft-calibrated ppo-warm+guard@1000") == "heft-calibrated ppo-warm+guard@1000"


def test_the_markdown_summary_ends_with_the_modules_definitions() -> None:
    """The "Definitions" section is the evaluation module's list of them (ratio to best
    static, gap to the oracle, 95% CI), not the docstring's overview above that list."""
    import agents.evaluation as evaluation

    text = summary_markdown([], [0], 1)
    definitions = text.split("## Definitions")[1]
    for term in ("*ratio to best static*", "*gap to the oracle*", "*95% CI*"):
        assert term in definitions
    assert "online_study" in evaluation.__doc__ and "online_study" not in definitions


def test_the_markdowns_definitions_are_written_under_python_OO_too() -> None:
    """summary.md's and stabilization.md's Definitions are docstrings, which ``python -OO``
    (PYTHONOPTIMIZE=2) strips: both sections came out empty there, and the files differed by
    the interpreter's optimisation level."""
    import subprocess
    import sys

    from agents.evaluation import OnlineStudy, online_markdown

    probe = ("from agents.evaluation import OnlineStudy, online_markdown, summary_markdown\n"
             "import agents.evaluation, sys\n"
             "assert agents.evaluation.__doc__ is None   # -OO stripped it\n"
             "study = OnlineStudy(metrics={'ppo': [{'early': 1.0}]})\n"
             "sys.stdout.write(summary_markdown([], [0], 1) + '\\0' + "
             "online_markdown(study, [1], 600, 'article'))\n")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-OO", "-c", probe], capture_output=True,
                          text=True, cwd=root, encoding="utf-8")
    assert done.returncode == 0, done.stderr
    summary, online = done.stdout.split("\0")
    study = OnlineStudy(metrics={"ppo": [{"early": 1.0}]})
    assert summary == summary_markdown([], [0], 1) and "*ratio to best static*" in summary
    assert online == online_markdown(study, [1], 600, "article") and "early_drop:" in online


def test_the_markdown_summary_says_what_its_n_column_counts() -> None:
    """Each table has a column ``n`` that its text never explained: a reader could not tell
    seeds from episodes, or a model's training runs from its seeds."""
    nan = float("nan")
    row = {"scenario": "article", "agent": "ppo", "n": 4,
           **{k: v for m in METRICS for k, v in ((m, 1.0), (f"{m}_ci95", nan))}}
    text = summary_markdown([row], [0, 1], 3)
    assert "| agent | n |" in text
    definitions = text.split("## Definitions")[1].split("\n- ")
    [n_column] = [d for d in definitions if d.lstrip("- ").startswith("*n*")]
    for counted in ("held-out seed", "training run", "episodes"):
        assert counted in " ".join(n_column.split())


def test_make_env_builds_the_variant_it_is_given() -> None:
    from inference.variants import resolve_variant, variant_label

    label = variant_label(resolve_variant("glm-5.3"))
    assert make_env().unwrapped.variant != label          # the article scenario's own is Flash
    assert make_env(variant="glm-5.3").unwrapped.variant == label


def test_make_env_prices_static_only_where_asked() -> None:
    """A held-out env does not pay for pricing best-static (one simulation more per step),
    and its spec reads as before price_static existed; price_static=True prices it, under
    the latency reward too."""
    plain, priced = make_env(episode_tasks=2), make_env(episode_tasks=2, price_static=True)
    assert "price_static" not in plain.spec.kwargs and priced.spec.kwargs["price_static"] is True
    for env, prices in ((plain, False), (priced, True)):
        env.reset(seed=0)
        info = env.step(np.zeros(env.action_space.shape, dtype=env.action_space.dtype))[4]
        assert ("static_latency" in info) == prices


def test_the_episodes_of_a_seed_follow_on_from_one_another() -> None:
    """`episodes` consecutive episodes of one stream: the first is the seed's one-episode run,
    the next ones other tasks (not the first episode again)."""
    env = make_env(episode_tasks=10)
    policy = make_policy("best-static", env)
    two = episode_latencies(policy, env, seed=3, episodes=2)
    assert len(two) == 20
    assert np.array_equal(two[:10], episode_latencies(policy, env, seed=3))
    assert not np.array_equal(two[10:], two[:10])


def test_held_out_seeds_count_from_the_seed_base() -> None:
    cfg = cfg_for(seed_base=500, seeds=3)
    assert heldout_seeds(cfg) == [500, 501, 502]
    assert heldout_seeds(cfg, 2) == [500, 501]      # the online study's own count


@pytest.mark.parametrize("episodes", [1, 2])
def test_a_section_whose_workload_overloads_the_hardware_is_noted(tmp_path: Path,
                                                                  episodes: int) -> None:
    """As train.py's table: evaluate.py printed short-text's latencies, mostly queueing, with no
    word why; the note goes to the console and under the section's table in summary.md."""
    from agents import reporting

    printed: list[str] = []
    reporting.run(cfg_for(scenarios=["article", "short-text"], episode_tasks=200,
                          episodes=episodes, baselines=["best-static"], no_online=True,
                          out=str(tmp_path / "results"), progress_bar=False),
                  report=printed.append)
    notes = [line for line in printed if "note:" in line]
    assert len(notes) == 1 and notes[0].startswith("short-text: note: best-static's latency"), \
        printed
    summary = (tmp_path / "results" / "summary.md").read_text()
    short_text = summary.split("## short-text")[1].split("## ")[0]
    assert notes[0].removeprefix("short-text: ") in short_text
    assert "note:" not in summary.split("## article")[1].split("## ")[0]


def test_the_overload_note_is_best_statics_on_the_first_held_out_episode() -> None:
    """The note says best-static's latency grows: it is judged on best-static's episode of the
    first held-out seed (the reference run), not on the oracle's beside it."""
    cfg = cfg_for(scenarios=["short-text"], episode_tasks=200, seeds=2, seed_base=500,
                  baselines=["best-static", "oracle"])
    results = {r.agent: r for r in evaluate_agents(cfg, [], ["short-text"])}
    static, oracle = results["best-static"], results["oracle"]
    assert static.note is not None
    assert static.note == overload_note(static.latencies[0])
    assert oracle.note == static.note
    # the seeds tell the two agents' notes (and the seeds' own) apart
    assert overload_note(oracle.latencies[0]) != static.note
    assert overload_note(static.latencies[1]) != static.note


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """[total, ticks] of each tqdm.auto bar opened (the run's bars are imported when run)."""
    import tqdm.auto

    opened: list[list[int]] = []

    class Bar:
        def __init__(self, total: int, **_: object) -> None:
            opened.append([total, 0])

        def __enter__(self) -> Bar:
            return self

        def __exit__(self, *_: object) -> None:
            pass

        def update(self, n: int) -> None:
            opened[-1][1] += n

        def clear(self) -> None:
            pass

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    return opened


def test_the_progress_bar_ends_full_with_the_online_study(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bars: list[list[int]]) -> None:
    """The bar's total counts every agent x context x seed and every online agent x seed, and
    each of them ticks once: a total short of the ticks overruns it, one past them never fills."""
    from agents import plots, reporting

    def study(agents, seeds, *_, tick, **__):    # the real one's ticks: one per agent and seed
        for _ in range(len(agents) * len(seeds)):
            tick()
        return dataclasses.make_dataclass("Study", ["curves"])({})

    monkeypatch.setattr(reporting, "online_study", study)
    monkeypatch.setattr(reporting, "online_markdown", lambda *_: "study\n")
    monkeypatch.setattr(plots, "stabilization", lambda _, target, title: target)
    reporting.run(cfg_for(baselines=["best-static", "all-cpu"], seeds=2, online_seeds=2,
                          runs=str(tmp_path / "runs"), out=str(tmp_path / "results")),
                  report=lambda _: None)
    # 2 baselines x 2 seeds, then the 4 default online agents x 2 seeds
    assert bars == [[2 * 2 + len(reporting.DEFAULT_ONLINE) * 2] * 2]
    bars.clear()                    # --online: the study's agents alone
    reporting.run(EvalConfig(online=True, online_seeds=2, out=str(tmp_path / "online")),
                  report=lambda _: None)
    assert bars == [[len(reporting.FULL_ONLINE) * 2] * 2]


def test_a_split_model_brings_heft_split_unless_baselines_are_given(tmp_path: Path) -> None:
    """heft-split is the baseline a Split model has to beat: added to the default baselines,
    never to ones asked for."""
    from agents import reporting

    fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"], env_id=SPLIT)
    base = dataclasses.replace(cfg_for(runs=str(tmp_path / "runs"), no_online=True,
                                       progress_bar=False, out=str(tmp_path / "results")),
                               baselines=EvalConfig().baselines)
    for cfg, expected in ((base, [*EvalConfig().baselines, "heft-split"]),
                          (dataclasses.replace(base, baselines=["best-static"]), ["best-static"])):
        reporting.run(cfg, report=lambda _: None)
        with open(tmp_path / "results" / "summary.csv") as f:
            rows = list(csv.DictReader(f))
        assert [r["agent"] for r in rows if r["kind"] == "baseline"] == expected


def test_a_curve_label_drops_the_checkpoints_step_alone(tmp_path: Path) -> None:
    """Only the step _entry appends comes off: a run folder named with an @ (here one of two
    runs of a seed, so the label names the folder) keeps its name on the curve."""
    from agents.model_discovery import ModelEntry

    run = tmp_path / "lr@3"
    entry = ModelEntry("ppo@64 (lr@3)", run / "checkpoints" / "model_64_steps.zip",
                       run_dir=run, seed=0)
    assert curve_runs([entry]) == [("ppo (lr@3) s0", run)]


def test_a_checkpoint_zip_not_named_by_step_keeps_the_runs_label(tmp_path: Path) -> None:
    """Only a `_<N>_steps` file under checkpoints/ gets `@N`; another zip there is the run's."""
    run = fake_run(tmp_path, "run", agents=["ppo"], warmup=["none"])
    (run / "checkpoints").mkdir()
    (run / "model.zip").rename(run / "checkpoints" / "best.zip")
    [entry], _ = discover_models(cfg_for(models=[str(run / "checkpoints" / "best.zip")]))
    assert entry.label == "ppo"


def test_models_tells_a_folder_of_runs_from_a_run_by_its_model_zip(tmp_path: Path) -> None:
    """A folder with model.zip is a run, whatever its subfolders hold; one without, over runs
    that are unfinished (config.yaml alone), is a folder of runs, not a run missing its zip."""
    outer = fake_run(tmp_path, "outer", agents=["ppo"], warmup=["none"])
    fake_run(outer, "inner", agents=["ppo"], warmup=["none"])
    [entry], _ = discover_models(cfg_for(models=[str(outer)]))
    assert entry.path == outer / "model.zip"
    runs = tmp_path / "runs"
    (fake_run(runs, "a", agents=["ppo"], warmup=["none"]) / "model.zip").unlink()
    with pytest.raises(ConfigError, match="is a folder of run folders, not a run"):
        discover_models(cfg_for(models=[str(runs)]))


def test_an_unknown_hardware_name_is_a_config_error(tmp_path: Path) -> None:
    """A name that is no preset and no file is looked for as a preset's YAML, and refused as
    one with the error's own message (a ConfigError: evaluate.py's exit 2, no traceback)."""
    cfg = cfg_for(runs=str(tmp_path / "runs"), baselines=["best-static"], hardware="no-such-hw")
    with pytest.raises(ConfigError, match="no-such-hw"):
        check_inputs(cfg, [], ["article"])


def test_the_article_job_gets_article_clients_only_when_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bars: list[list[int]]) -> None:
    """--article-clients N reaches the article job (without it, the job's own default holds),
    as --jobs does, and its bar over the seeds fills as the job ticks once per seed."""
    from agents import article
    from agents.reporting import reproduce_article

    got: list[dict] = []

    def job(out, seeds, tick, **kw):
        got.append(kw)
        for _ in seeds:
            tick()

    monkeypatch.setattr(article, "reproduce", job)
    for clients, jobs in ((3, 1), (0, 2), (None, 0)):
        reproduce_article(EvalConfig(out=str(tmp_path), reproduce_article=True, seeds=2,
                                     article_clients=clients, progress_bar=False, jobs=jobs))
    assert got == [{"clients": 3, "jobs": 1}, {"clients": 0, "jobs": 2}, {"jobs": 0}]
    assert bars == [[2, 2]] * 3


def test_a_settings_key_follows_the_working_directory_and_an_edited_scenario(tmp_path: Path,
                                                                            monkeypatch) -> None:
    # In one process (a notebook, a sweep) a relative scenario path was resolved once and kept:
    # from another folder, or after the file's `hardware:` changed, the key named the first
    # file and its hardware, so a section was titled (and its models matched) by a stale file.
    from agents.eval_settings import Context, section_of
    for folder, hardware in (("a", "server"), ("b", "edge")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "my.yaml").write_text(f"hardware: {hardware}\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path / "a")
    assert section_of(Context("my.yaml", "edge", None)) == "my (hardware edge)"
    monkeypatch.chdir(tmp_path / "b")
    assert Context("my.yaml", None, None).key()[0] == str(tmp_path / "b" / "my.yaml")
    assert section_of(Context("my.yaml", "edge", None)) == "my"
    (tmp_path / "b" / "my.yaml").write_text("hardware: server\n", encoding="utf-8")
    assert section_of(Context("my.yaml", "edge", None)) == "my (hardware edge)"


def test_the_baselines_a_setting_runs_follow_an_edited_hardware_file(tmp_path: Path) -> None:
    # The device names were read once per setting and kept for the process: a hardware file
    # whose gpu was renamed still ran all-gpu (and failed there), in the next evaluation.
    from agents.eval_settings import Context, runnable_baselines
    hardware = tmp_path / "hw.yaml"
    text = (PRESET_DIR / "server.yaml").read_text(encoding="utf-8")
    hardware.write_text(text, encoding="utf-8")
    cfg = EvalConfig(baselines=["best-static", "all-gpu"])
    ctx = Context("article", str(hardware), None)
    assert runnable_baselines(cfg, ctx) == ["best-static", "all-gpu"]
    renamed = yaml.safe_load(text)
    for device in renamed["devices"]:
        device["name"] = device["name"].replace("gpu", "fastgpu")
    for link in renamed["links"]:
        link["between"] = [d.replace("gpu", "fastgpu") for d in link["between"]]
    hardware.write_text(yaml.safe_dump(renamed), encoding="utf-8")
    assert runnable_baselines(cfg, ctx) == ["best-static"]


def test_a_setting_of_a_scenario_holding_its_hardware_inline_names_it_by_its_name(
        tmp_path: Path) -> None:
    # A scenario YAML may hold its hardware inline (a mapping of the hardware schema): the
    # setting's key read it as a path (TypeError in preset_file), and the baselines' devices
    # from a file it has none of.
    from agents.eval_settings import Context, runnable_baselines, section_of, setting_names
    from envs.scenario import load_scenario
    from inference.hardware import hardware_to_dict, load_hardware
    raw = load_scenario("article").to_dict()
    del raw["source"]
    hardware = hardware_to_dict(load_hardware("edge").with_device("gpu", memory=2e10))
    for device in hardware["devices"]:   # a device no file of that name has
        device["name"] = device["name"].replace("npu", "dsp")
    for link in hardware["links"]:
        link["between"] = [end.replace("npu", "dsp") for end in link["between"]]
    raw["hardware"] = hardware
    (tmp_path / "my.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    own = Context(str(tmp_path / "my.yaml"), None, None)
    assert section_of(own) == "my" and setting_names(own) == ("edge", "glm-5.3-flash")
    # another hardware given: the section names it, as for a scenario naming its hardware
    assert section_of(Context(own.scenario, "server", None), [own]) == "my (hardware server)"
    cfg = EvalConfig(baselines=["best-static", "all-gpu", "all-npu"])
    assert runnable_baselines(cfg, own) == ["best-static", "all-gpu"]   # it has no npu
    assert runnable_baselines(cfg, Context(own.scenario, "server", None)) == [
        "best-static", "all-gpu", "all-npu"]


def test_a_model_row_pooling_training_runs_says_its_interval_is_of_pooled_samples() -> None:
    """A model row's n is seeds x training runs, and its 95% CI treats them as independent
    samples, though every run is scored on the same held-out seeds: the interval is narrower
    than one over the runs (docs/REWARDS.md's first table: 0.039 over 15 pairs where the three runs'
    means give 0.096). The summary said "seeds x training runs" and no more."""
    import agents.evaluation as evaluation

    metrics = {k: v for m in METRICS for k, v in ((m, 1.0), (f"{m}_ci95", 0.1))}
    rows = [{"scenario": "article", "agent": "ppo", "kind": "model", "runs": 3, "n": 15,
             **metrics},
            {"scenario": "article", "agent": "dqn", "kind": "model", "runs": 1, "n": 5,
             **metrics},
            {"scenario": "article", "agent": "best-static", "kind": "baseline", "runs": 1,
             "n": 5, **metrics}]
    text = summary_markdown(rows, [0, 1, 2, 3, 4], 1)
    tables = text.split("## Definitions")[0]
    [note] = [p for p in tables.split("\n\n") if "pooled" in p]
    assert "ppo (n = 5 seeds x 3 training runs)" in note
    assert "dqn" not in note and "best-static" not in note
    assert "pooled" not in summary_markdown(rows[1:], [0, 1, 2, 3, 4], 1).split("## Def")[0]
    assert "not independent" in (evaluation.__doc__ or "")


def test_a_pooled_model_row_gives_the_interval_over_its_runs_means() -> None:
    """The note said the pooled interval is narrower than one over the runs' means, and gave
    no such interval: a reader comparing two agents had only the overconfident one. Now the
    row holds the ratio's mean and t-interval over the runs' own means, and the note says it."""
    from agents.evaluation import AgentResult
    from agents.stats import mean_ci95

    result = AgentResult("ppo", "article", "model", runs=3)
    by_run = [[0.70, 0.72, 0.71], [0.90, 0.92, 0.91], [0.80, 0.79, 0.81]]   # runs differ
    for run, ratios in enumerate(by_run):
        for ratio in ratios:
            result.samples.append({m: ratio for m in METRICS})
            result.sample_runs.append(run)
    row = result.row()
    mean, ci = mean_ci95([float(np.mean(r)) for r in by_run])
    assert row["vs_best_static_over_runs"] == pytest.approx(mean)
    assert row["vs_best_static_over_runs_ci95"] == pytest.approx(ci)
    assert ci > 3 * row["vs_best_static_ci95"]       # the pooled one understates the spread
    text = summary_markdown([row], [0, 1, 2], 1)
    assert (f"ppo (n = 3 seeds x 3 training runs; vs best static over the runs' means: "
            f"{mean:.3f} ± {ci:.3f})") in text
    single = AgentResult("dqn", "article", "model", runs=1, samples=[{m: 1.0 for m in METRICS}],
                         sample_runs=[0]).row()
    assert math.isnan(single["vs_best_static_over_runs"])


def test_evaluate_py_records_which_run_each_sample_is_of(tmp_path: Path) -> None:
    """Two runs of one label: every sample knows its run, so the row's interval over runs is
    the t-interval of the two runs' own means."""
    from agents.reporting import evaluate_agents
    from agents.stats import mean_ci95

    for seed in (0, 1):
        fake_run(tmp_path / "runs", f"s{seed}", agents=["ppo"], warmup=["none"], seeds=[seed])
    cfg = cfg_for(runs=str(tmp_path / "runs"), seeds=2, baselines=["best-static"])
    entries, _ = discover_models(cfg)
    (ppo,) = [r for r in evaluate_agents(cfg, entries, ["article"]) if r.kind == "model"]
    assert ppo.runs == 2 and ppo.sample_runs == [0, 0, 1, 1]
    per_run = [np.mean([s["vs_best_static"] for s in ppo.samples[i:i + 2]]) for i in (0, 2)]
    assert ppo.row()["vs_best_static_over_runs"] == pytest.approx(mean_ci95(per_run)[0])


def test_online_agents_chooses_the_studys_agents_and_is_refused_where_no_study_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """evaluate.py's study ran a fixed set: trpo, which online_study takes, was out of reach of
    the CLI. --online-agents names them, in order, for --online and the default evaluation; a
    name the study does not take, one given twice, or the option where no study runs is one
    ConfigError before anything runs."""
    from agents import plots, reporting

    studied: list[tuple[str, ...]] = []
    jobs: list[int] = []

    def study(agents, seeds, *_, tick, **kw):
        studied.append(tuple(agents))
        jobs.append(kw["jobs"])
        return dataclasses.make_dataclass("Study", ["curves"])({})

    monkeypatch.setattr(reporting, "online_study", study)
    monkeypatch.setattr(reporting, "online_markdown", lambda *_: "study\n")
    monkeypatch.setattr(plots, "stabilization", lambda _, target, title: target)
    reporting.run(EvalConfig(online=True, online_seeds=2, online_agents=["trpo-warm", "oracle"],
                             out=str(tmp_path / "online")), report=lambda _: None)
    reporting.run(cfg_for(baselines=["best-static"], seeds=1, online_seeds=1,
                          online_agents=["trpo"], runs=str(tmp_path / "runs"),
                          out=str(tmp_path / "results")), report=lambda _: None)
    reporting.run(EvalConfig(online=True, online_seeds=2, out=str(tmp_path / "full"), jobs=0),
                  report=lambda _: None)
    assert studied == [("trpo-warm", "oracle"), ("trpo",), reporting.FULL_ONLINE]
    assert jobs == [1, 1, 0]    # --jobs reaches the study

    refusals = [
        (dict(online=True, online_agents=["trpo-wram"]), r"--online-agents must be one of ppo, "
                                                          r"ppo-warm, dqn, dqn-warm, trpo, "
                                                          r"trpo-warm, recurrent-ppo, "
                                                          r"recurrent-ppo-warm, best-static, "
                                                          r"heft-calibrated, oracle, got "
                                                          r"'trpo-wram' \(did you mean "
                                                          r"'trpo-warm'\?\)"),
        # the default evaluation's study too: refused before its evaluation, not after
        (dict(online_agents=["ppo", "a2c"]), "--online-agents must be one of .* got 'a2c'"),
        (dict(online=True, online_agents=[]), "needs at least one agent"),
        (dict(no_online=True, online_agents=["ppo"]), "--online-agents is not used there: "
                                                      "--no-online skips the online study"),
        (dict(reproduce_article=True, online_agents=["ppo"]), "--online-agents is not used "
                                                              "there: --reproduce-article"),
    ]
    for options, message in refusals:
        with pytest.raises(ConfigError, match=message):
            EvalConfig(out=str(tmp_path / "refused"), **options).validate()
    assert not (tmp_path / "refused").exists()


def test_a_training_scenario_is_matched_however_evaluate_py_spells_it(tmp_path: Path,
                                                                       monkeypatch) -> None:
    """The setting note matched a run's scenario by its text: trained on /abs/sc.yaml and
    evaluated as ./sc.yaml from its folder, an edit of its hardware went unnoted."""
    from agents.eval_settings import _same_scenario

    (tmp_path / "sc.yaml").write_text("name: sc\n")
    (tmp_path / "article.yaml").write_text("name: mine\n")
    monkeypatch.chdir(tmp_path)
    assert _same_scenario(str(tmp_path / "sc.yaml"), "./sc.yaml")
    assert _same_scenario(str(tmp_path / "sc.yaml"), "sc.yaml")
    assert _same_scenario("article", "article")
    assert not _same_scenario("article", str(tmp_path / "article.yaml"))   # the preset
    assert not _same_scenario(str(tmp_path / "sc.yaml"), "bursty")


@pytest.mark.parametrize(("n", "k"), [(0, 4), (3, 4), (4, 4), (5, 4), (7, 2), (12_345, 10_000),
                                      (123_457, 4000)])
def test_evenly_spaced_picks_k_indices_the_first_and_last_among_them_none_twice(n: int,
                                                                               k: int) -> None:
    """The one thinning of a long curve (event_scalars' MAX_POINTS) and of a latency CDF's
    steps (plots' CDF_POINTS), each written out in its module before: up to `k` items all of
    them, past it `k`, evenly spaced from the first to the last, each the index nearest its
    even place."""
    from agents.stats import evenly_spaced

    picked = evenly_spaced(n, k)
    assert len(picked) == min(n, k) and picked.dtype == np.int64
    if n <= k:
        assert list(picked) == list(range(n))
        return
    assert picked[0] == 0 and picked[-1] == n - 1
    gaps = np.diff(picked)
    assert gaps.min() >= 1 and gaps.max() - gaps.min() <= 1      # even, none twice
    assert np.abs(picked - np.linspace(0, n - 1, k)).max() <= 0.5


@pytest.mark.parametrize("n", [1, 7, 4000, 4001, 123_457])
def test_the_latency_cdf_draws_exact_steps_at_most_cdf_points_of_them(n: int, tmp_path: Path,
                                                                       monkeypatch) -> None:
    """latency_cdf drew a step per task: a minute for 8 agents of 2 million tasks. Past
    CDF_POINTS it draws that many, at evenly spaced ranks from the least to the greatest
    latency, each the exact fraction of tasks at or below it; up to it, every task."""
    import matplotlib.axes

    from agents import plots

    rng = np.random.default_rng(n)
    latencies = np.round(rng.lognormal(3, 1, n), 1)    # rounded: ties, as queues give
    full_x = np.sort(latencies)
    full_f = np.arange(1, n + 1) / n
    x, f = plots.cdf_points(latencies)
    assert len(x) == min(n, plots.CDF_POINTS)
    assert x[0] == full_x[0] and x[-1] == full_x[-1] and f[-1] == 1.0
    ranks = np.rint(f * n).astype(int) - 1
    assert np.array_equal(x, full_x[ranks]) and np.array_equal(f, full_f[ranks])
    assert np.diff(ranks).max(initial=0) <= max(1, math.ceil((n - 1) / (plots.CDF_POINTS - 1)))
    drawn = []
    real_step = matplotlib.axes.Axes.step

    def step(self, x, y, *args, **kwargs):
        drawn.append((np.asarray(x), np.asarray(y)))
        return real_step(self, x, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "step", step)
    plots.latency_cdf({"article": {"heft": latencies}}, tmp_path / "cdf.png")
    ((drawn_x, drawn_f),) = drawn
    assert np.array_equal(drawn_x, x) and np.array_equal(drawn_f, f)
