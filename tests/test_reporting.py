"""evaluate.py's model discovery: labels, run settings, checkpoints, per-setting baselines."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml

from agents.config import ConfigError, EvalConfig, TrainConfig, to_yaml
from agents.reporting import (
    check_inputs,
    discover_models,
    evaluate_agents,
    fmt_summary,
    scenarios_of,
)
from agents.sb3_factory import make_sb3
from agents.training import env_for
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


def test_a_checkpoint_keeps_its_runs_settings_and_says_its_step(tmp_path: Path) -> None:
    run = fake_run(tmp_path, "run", agents=["a2c"], warmup=["none"], env_id=SPLIT,
                   scenario="bursty")
    (run / "checkpoints").mkdir()
    (run / "model.zip").rename(run / "checkpoints" / "model_64_steps.zip")
    [entry], _ = discover_models(cfg_for(models=[str(run / "checkpoints" / "model_64_steps.zip")]))
    assert (entry.label, entry.env_id, entry.scenario) == ("a2c@64", SPLIT, "bursty")


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


def test_every_scenario_is_checked_before_any_is_evaluated(tmp_path: Path) -> None:
    """A later scenario whose hardware the model does not fit failed mid-run, with a traceback."""
    two = two_device_hardware(tmp_path)
    (tmp_path / "small.yaml").write_text(f"name: small\nhardware: {two}\n")
    fake_run(tmp_path / "runs", "a", agents=["ppo"], warmup=["none"])
    cfg = cfg_for(runs=str(tmp_path / "runs"), scenarios=["article", str(tmp_path / "small.yaml")],
                  baselines=["best-static"])
    entries, _ = discover_models(cfg)
    with pytest.raises(ConfigError, match=r"could not be loaded as ppo.*\(scenario .*small.yaml\)"):
        check_inputs(cfg, entries, cfg.scenarios)


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


def test_learning_curves_add_a_held_out_panel_when_runs_log_eval(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """learning_curves.png showed the training stream alone; runs that log eval/ (train.py's
    held-out episode) get a second panel, with a line for each run that has the curve."""
    from torch.utils.tensorboard import SummaryWriter

    from agents import plots

    runs = []
    for name, with_eval in (("a", True), ("b", False)):
        writer = SummaryWriter(str(tmp_path / name))
        for step in range(0, 50, 10):
            writer.add_scalar("latency/vs_static", 1.5 - step / 100, step)
            if with_eval:
                writer.add_scalar("eval/vs_best_static", 1.2 - step / 100, step)
        writer.close()
        runs.append((name, tmp_path / name))
    seen: list[tuple[str, list[str]]] = []
    finish = plots._finish

    def capture(fig, axes, target):
        seen.extend((ax.get_ylabel(), sorted(line.get_label() for line in ax.get_lines()))
                    for ax in axes)
        return finish(fig, axes, target)

    monkeypatch.setattr(plots, "_finish", capture)
    assert plots.learning_curves(runs, tmp_path / "two.png").is_file()
    assert seen == [("latency/vs_static", ["a", "b", "best static"]),
                    ("eval/vs_best_static", ["a", "best static"])]
    seen.clear()
    plots.learning_curves(runs[1:], tmp_path / "one.png")
    assert seen == [("latency/vs_static", ["b", "best static"])]
