"""Hardware presets and profiles, and the errors bad input gets (each naming what is wrong)."""

from __future__ import annotations

import copy
import dataclasses
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from inference.hardware import (
    FRACTION_MIN,
    PRESET_DIR,
    RATE_RANGE,
    SECONDS_MAX,
    Hardware,
    Link,
    hardware_from_dict,
    load_hardware,
    preset_names,
)
from inference.model_config import get_model
from inference.simulator import SimConfig, Simulator
from inference.task import Task
from inference.variants import build_stages, resolve_variant, variant_label
from inference.yamlio import safe_load

SERVER_RAW = safe_load((PRESET_DIR / "server.yaml").read_text())


def edited(change) -> dict:
    """A deep copy of the server preset's YAML data with `change` applied to it."""
    raw = copy.deepcopy(SERVER_RAW)
    change(raw)
    return raw


def device(raw: dict, name: str) -> dict:
    return next(d for d in raw["devices"] if d["name"] == name)


# --- presets -------------------------------------------------------------------------------


def test_presets_load_and_cite_their_sources():
    assert {"server", "edge"} <= set(preset_names())
    for name in preset_names():
        hw = load_hardware(name)
        assert hw.device_names and {d.kind for d in hw.devices} == {"cpu", "gpu", "npu"}
        for d in hw.devices:
            assert isinstance(d.source, str) and d.source.strip(), f"{name}/{d.name} has no source"
        for a in range(len(hw.devices)):
            for b in range(len(hw.devices)):
                if a != b:
                    assert hw.link(a, b) == hw.link(b, a)


def test_a_yaml_path_loads_like_the_preset(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text((PRESET_DIR / "server.yaml").read_text())
    assert load_hardware(path) == load_hardware("server")
    assert load_hardware(str(path)) == load_hardware("server")


def test_every_preset_preprocesses_at_one_scalar_cores_rate_on_its_cpu():
    """Loading's branchy byte-level work runs on one CPU core (1e9..2e10 ops/s, a few ops a
    cycle), and an order of magnitude slower on an accelerator. The edge preset gave its CPU
    10% of the 12 cores' vector peak (2.9e11 ops/s, 72x the server CPU), and its GPU and NPU
    more than the server's CPU."""
    for name in preset_names():
        hw = load_hardware(name)
        rate = {d.kind: d.peak_flops * d.op_efficiency["preprocess"] for d in hw.devices}
        assert 1e9 <= rate["cpu"] <= 2e10, (name, rate)
        assert max(rate["gpu"], rate["npu"]) * 10 <= rate["cpu"], (name, rate)


def test_the_edge_preset_shares_one_memory_system():
    assert len({d.memory_domain for d in load_hardware("edge").devices}) == 1
    assert len({d.memory_domain for d in load_hardware("server").devices}) == 3


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["batch", "prompt_tokens", "output_tokens"])
@pytest.mark.parametrize("value", [0, -1, 2.5, True])
def test_a_task_needs_positive_integer_sizes(field, value):
    sizes = {"batch": 16, "prompt_tokens": 5000, "output_tokens": 256, field: value}
    with pytest.raises(ValueError, match=f"Task.{field}"):
        Task(**sizes)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"domain": -1}, "domain"),
    ({"arrival": -1.0}, "arrival"),
    ({"arrival": float("nan")}, "arrival"),
    ({"arrival": True}, "arrival"),     # a bool is not a time (True arrived at 1 s)
    ({"arrival": "0"}, "arrival"),
    ({"domain": True}, "domain"),
])
def test_a_task_needs_a_valid_domain_and_arrival(kwargs, field):
    with pytest.raises(ValueError, match=f"Task.{field}"):
        Task(16, 5000, 256, **kwargs)


def test_numpy_scalars_are_taken_as_numbers_and_stored_plain():
    # Sizes drawn with numpy were refused by Task, SimConfig and ModelConfig ("must be a positive
    # integer, got np.int64(16)") while the env took a numpy episode_tasks; now every
    # constructor takes them, and stores plain ints and floats (json can write those).
    import json

    from inference.model_config import ModelConfig
    from inference.stages.decode import HierarchicalDecode

    task = Task(np.int64(16), np.int32(5000), np.uint16(256), np.int8(3), np.float32(1.5))
    assert task == Task(16, 5000, 256, 3, 1.5)
    assert json.dumps(dataclasses.asdict(task)) == json.dumps(dataclasses.asdict(Task(16, 5000, 256, 3, 1.5)))
    assert all(type(getattr(task, f)) is int for f in ("batch", "prompt_tokens", "output_tokens", "domain"))
    assert type(task.arrival) is float
    config = SimConfig(prefetch_depth=np.int64(2), cache_capacity=np.int64(4),
                       contention=np.float32(0.5), precomputed_domains=[np.int64(1), 2])
    assert config == SimConfig(prefetch_depth=2, cache_capacity=4, contention=0.5,
                               precomputed_domains=(1, 2))
    assert type(config.prefetch_depth) is int and config.precomputed_domains == (1, 2)
    shape = ModelConfig("m", np.int64(2), 64, 128, 4, 2, 100)
    assert type(shape.n_layers) is int and shape == ModelConfig("m", 2, 64, 128, 4, 2, 100)
    assert type(HierarchicalDecode(block_size=np.int64(16)).block_size) is int
    # numpy's bools stay refused, as Python's are
    for bad in (np.bool_(True), True):
        with pytest.raises(ValueError, match="Task.batch"):
            Task(bad, 5000, 256)
        with pytest.raises(ValueError, match="SimConfig.prefetch_depth"):
            SimConfig(prefetch_depth=bad)


def test_unknown_names_are_refused_with_the_known_ones():
    server = load_hardware("server")
    with pytest.raises(ValueError, match="unknown device 'tpu'.*cpu, gpu, npu"):
        server.device_id("tpu")
    # a scenario's fault on device NPU: no guess, as difflib compares case
    with pytest.raises(ValueError, match=r"unknown device 'NPU' \(did you mean 'npu'\?\) in "
                                         r"hardware 'server'; devices: cpu, gpu, npu$"):
        server.device_id("NPU")
    sim = Simulator(server, get_model("glm-9b"), build_stages("glm-5.3"))
    with pytest.raises(ValueError, match="tpu"):
        sim.execute(Task(1, 10, 10), ("cpu", "tpu", "gpu"))
    with pytest.raises(ValueError, match="unknown hardware 'datacenter'.*server"):
        load_hardware("datacenter")
    for path in ("no/such/profile.yaml", "profile.yml"):          # either YAML suffix: a file
        with pytest.raises(ValueError, match=f"hardware file {path} does not exist"):
            load_hardware(path)
    with pytest.raises(ValueError, match=f"hardware file {PRESET_DIR} is a folder"):
        load_hardware(PRESET_DIR)
    with pytest.raises(ValueError, match="unknown model 'glm-999b'"):
        get_model("glm-999b")
    with pytest.raises(ValueError, match="unknown variant 'glm-6'"):
        resolve_variant("glm-6")
    with pytest.raises(ValueError, match="unknown decode implementation 'paged'"):
        resolve_variant({"load": "direct", "prefill": "window", "decode": "paged"})


@pytest.mark.parametrize("spec", [
    ["load", "prefill", "decode"],      # the stage names, but no implementations
    ("glm-5.3",),
    None,
])
def test_a_variant_neither_a_recipe_name_nor_a_mapping_is_refused_by_kind(spec):
    with pytest.raises(ValueError, match="recipe name or a mapping, got"):
        resolve_variant(spec)


@pytest.mark.parametrize("spec", [
    {"load": "direct", "prefill": "window"},                                    # a stage missing
    {"load": "direct", "prefill": "window", "decode": "sequential", "sample": "greedy"},
])
def test_a_variant_mapping_needs_exactly_the_three_stages(spec):
    """A missing stage was a bare KeyError and an extra one silently dropped."""
    with pytest.raises(ValueError, match="needs exactly the stages load, prefill, decode"):
        resolve_variant(spec)


def test_a_folder_named_like_a_preset_does_not_hide_it(tmp_path, monkeypatch):
    # Run from a directory holding an `edge/` and an `article/` folder (a project's own
    # folders): the bare preset names still name the presets ("... is a folder" before).
    from envs import InferenceAllocEnv
    (tmp_path / "edge").mkdir()
    (tmp_path / "server").mkdir()
    (tmp_path / "article").mkdir()
    monkeypatch.chdir(tmp_path)
    assert load_hardware("edge") == load_hardware(PRESET_DIR / "edge.yaml")
    env = InferenceAllocEnv(scenario="edge", episode_tasks=2)
    assert env.hardware.name == "edge" and env.scenario.name == "edge"
    assert InferenceAllocEnv(scenario="article", hardware="server").hardware.name == "server"
    # A folder given as a path is still refused as one.
    with pytest.raises(ValueError, match="hardware file edge is a folder"):
        load_hardware(Path("edge"))
    with pytest.raises(ValueError, match="is a folder"):
        load_hardware("./edge")

def test_a_preset_name_is_the_preset_even_where_a_file_of_that_name_exists(tmp_path, monkeypatch):
    # `--hardware server` read a file `server` in the working directory when there was one,
    # while a scenario's `hardware: server` counted as the preset (not rewritten to the file
    # next to it) and then loaded that same cwd file: one rule now, the preset.
    import dataclasses

    from agents.config import TrainConfig
    from agents.eval_settings import _context_key
    from agents.run_plan import absolute_files
    from envs import InferenceAllocEnv
    from envs.scenario import SCENARIO_DIR, load_scenario
    mine = yaml.safe_load((PRESET_DIR / "server.yaml").read_text(encoding="utf-8"))
    mine["name"] = "my-server"
    folder = tmp_path / "configs"
    folder.mkdir()
    for where in (tmp_path, folder):
        (where / "server").write_text(yaml.safe_dump(mine), encoding="utf-8")
    (folder / "s.yaml").write_text("name: s\nhardware: server\n", encoding="utf-8")
    (tmp_path / "article").write_text("name: my-article\nhardware: ./server\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert load_hardware("server").name == "server"
    assert load_hardware("./server").name == load_hardware(Path("server")).name == "my-server"
    assert InferenceAllocEnv(hardware="server", episode_tasks=2).hardware.name == "server"
    sc = load_scenario(folder / "s.yaml")
    assert sc.hardware == "server" and InferenceAllocEnv(sc).hardware.name == "server"
    # the same for a scenario preset, and the paths in it resolve as in the preset's folder
    preset = dataclasses.replace(load_scenario(SCENARIO_DIR / "article.yaml"), source="article")
    assert load_scenario("article") == preset
    assert load_scenario("./article").name == "my-article"
    # a run's saved config and evaluate's settings read the names the same way
    config = TrainConfig(scenario="article", hardware="server")
    assert absolute_files(config) == config
    moved = absolute_files(dataclasses.replace(config, hardware="./server"))
    assert moved.hardware == str(tmp_path / "server")
    assert _context_key("article", "server", None)[:2] == (
        "article", str((PRESET_DIR / "server.yaml").resolve()))

def test_a_preset_name_in_another_case_is_no_preset_on_a_case_blind_file_system(monkeypatch):
    """On Windows and macOS, whose file systems find SERVER.yaml for server.yaml, "SERVER" and
    "Article" were presets, named so in a run's config.yaml and in evaluate.py's sections,
    while Linux refused both: a config written there did not run here. A preset's name is
    spelt as its file lists it, on every file system."""
    import os

    from envs.scenario import SCENARIO_DIR, load_scenario
    from inference.hardware import preset_file

    real_is_file = Path.is_file

    def case_blind(self: Path) -> bool:   # as Windows and macOS answer
        if self.parent.is_dir():
            for entry in os.listdir(self.parent):
                if entry.lower() == self.name.lower():
                    return real_is_file(self.parent / entry)
        return real_is_file(self)

    monkeypatch.setattr(Path, "is_file", case_blind)
    assert preset_file("server", PRESET_DIR) == PRESET_DIR / "server.yaml"
    assert preset_file("SERVER", PRESET_DIR) is None
    assert preset_file("Article", SCENARIO_DIR) is None
    with pytest.raises(ValueError, match=r"unknown hardware 'SERVER': not a preset"):
        load_hardware("SERVER")
    with pytest.raises(ValueError, match=r"unknown scenario 'Article' \(did you mean 'article'"):
        load_scenario("Article")
    assert load_hardware("server").name == "server"

@pytest.mark.parametrize(("change", "field"), [
    (lambda r: r["links"][0].update(bandwidth=0), r"links\[0\]\.bandwidth"),
    (lambda r: device(r, "gpu").update(mem_bandwidth=0.0), r"devices\[gpu\]\.mem_bandwidth"),
    (lambda r: r.update(disk_bandwidth=-6.9e9), "disk_bandwidth"),
    (lambda r: device(r, "npu")["true_figures"].update(peak_flops=0),
     r"devices\[npu\]\.true_figures\.peak_flops"),
    (lambda r: device(r, "cpu").pop("memory"), r"devices\[cpu\]\.memory"),
    (lambda r: device(r, "cpu").pop("peak_flops"), r"devices\[cpu\]\.peak_flops"),
    (lambda r: device(r, "gpu")["op_efficiency"].pop("dynamic"),
     r"devices\[gpu\]\.op_efficiency\.dynamic"),
    (lambda r: device(r, "gpu")["pattern_efficiency"].update(random=1.5),
     r"devices\[gpu\]\.pattern_efficiency\.random"),
    (lambda r: device(r, "gpu").update(kind="fpga"), r"devices\[gpu\]\.kind"),
    (lambda r: r.pop("disk_bandwidth"), "disk_bandwidth"),
    (lambda r: r.update(links=r["links"][:2]), "no link between gpu and npu"),
    (lambda r: r["links"][0].update(between=["cpu", "tpu"]),
     r"links\[0\]\.between names unknown device 'tpu'; devices: cpu, gpu, npu$"),
    (lambda r: r["links"][0].update(between=["CPU", "gpu"]),
     r"unknown device 'CPU' \(did you mean 'cpu'\?\); devices: cpu, gpu, npu$"),
    (lambda r: r.update(devices=[]), "devices"),
    # positive but implausible figures used to give inf/NaN latencies instead of an error
    (lambda r: device(r, "gpu").update(peak_flops=1e-300), r"devices\[gpu\]\.peak_flops must lie in"),
    (lambda r: r["links"][0].update(bandwidth=1e-300), r"links\[0\]\.bandwidth must lie in"),
    (lambda r: r.update(disk_bandwidth=1e-300), r"disk_bandwidth must lie in \[1, 1e\+30\]"),
    (lambda r: device(r, "cpu").update(launch_overhead=1e308), r"launch_overhead must lie in"),
    (lambda r: device(r, "gpu")["op_efficiency"].update(dynamic=1e-300),
     r"op_efficiency\.dynamic must be a fraction in \[1e-12, 1\]"),
    (lambda r: device(r, "gpu").update(setup_s=1e308), r"setup_s must be at most 3600"),
    (lambda r: r["links"][0].update(between=[["cpu"], "gpu"]), "unknown device"),  # unhashable
    (lambda r: r["links"].append(dict(r["links"][0])), r"links\[3\] links .* again"),
    (lambda r: device(r, "gpu").update(source=[1]), r"devices\[gpu\]\.source must be a string"),
    (lambda r: r["links"].append({"between": ["gpu", "gpu"], "bandwidth": 1e9, "latency": 1e-6}),
     r"links\[3\]\.between must name two different devices"),
    (lambda r: device(r, "npu").update(memory_domain=""),
     r"devices\[npu\]\.memory_domain must be a non-empty string"),
    # a name no comma-separated placement can write (static:..., --placement): it loaded, and
    # static:cpu,gpu,0,gpu,0 was 'a static placement names three devices'
    (lambda r: device(r, "gpu").update(name="gpu,0"), r"devices\[1\]\.name .*comma.*'gpu,0'"),
    (lambda r: device(r, "gpu").update(name=" gpu"), r"devices\[1\]\.name .*spaces.*' gpu'"),
    # a number: python -m inference --placement 2,gpu,gpu read it as device id 2 (the npu),
    # evaluate.py's static:2,gpu,gpu as the name
    (lambda r: device(r, "gpu").update(name="2"),
     r"devices\[1\]\.name must not be all digits: a placement takes a device's id .*'2'$"),
    # a lone surrogate (a YAML escape "\ud800"): it loaded, and a run failed writing it out
    (lambda r: device(r, "gpu").update(name="g\ud800"),
     r"devices\[1\]\.name must be UTF-8 text, got 'g\\ud800': '\\ud800' is a lone "
     r"surrogate, which has no UTF-8 form$"),
    # a repeated name: 'device names must be unique, got [...]' named no field
    (lambda r: device(r, "npu").update(name="gpu"),
     r"devices\[2\]\.name 'gpu' is devices\[1\]'s already; device names must be unique$"),
    # a figure written as text (quoted in the YAML) or as yes/no: a TypeError from the range
    # check, or True taken as 1 (a one-second link latency)
    (lambda r: device(r, "gpu").update(peak_flops="9.89e14"),
     r"devices\[gpu\]\.peak_flops must be a number, got '9\.89e14'"),
    (lambda r: r["links"][0].update(latency=True), r"links\[0\]\.latency must be a number, got True"),
    (lambda r: device(r, "gpu").update(setup_s="0.5"),
     r"devices\[gpu\]\.setup_s must be a number, got '0\.5'"),
    # a time of zero: the rates' range starts at 1 and refuses it anyway, a time's does not
    (lambda r: r["links"][0].update(latency=0), r"links\[0\]\.latency must be a finite number > 0"),
    (lambda r: device(r, "cpu").update(launch_overhead=0.0),
     r"devices\[cpu\]\.launch_overhead must be a finite number > 0"),
])
def test_a_bad_profile_names_the_offending_field(change, field):
    with pytest.raises(ValueError, match=field) as info:
        hardware_from_dict(edited(change), "test")
    assert str(info.value).startswith("hardware test: ")     # and the file it came from


SERVER = load_hardware("server")
NAN = float("nan")


def _gpu(**changes):
    return lambda hw: hw.with_device("gpu", **changes)


def _link(pair, link):
    """`hw` with the link between the devices of ids `pair` replaced, both ways."""
    def change(hw):
        links = {**hw.links, pair: link, pair[::-1]: link}
        return Hardware(hw.name, hw.devices, links, hw.disk_bandwidth)
    return change


def _without_link(hw):
    links = {pair: link for pair, link in hw.links.items() if set(pair) != {1, 2}}
    return Hardware(hw.name, hw.devices, links, hw.disk_bandwidth)


def _simulator(hw):
    return Simulator(hw, get_model("glm-9b"), build_stages("glm-5.3"))


# A Hardware, DeviceProfile or Link built or edited in Python was taken as it was: a NaN, a
# negative memory, an unknown kind ran (latencies of NaN, or of a device that could hold no
# weights), a wrong type was a TypeError deep in the cost model. Each is now the YAML's error
# for the same mistake, as the object reaches load_hardware or a Simulator.
@pytest.mark.parametrize(("change", "yaml_change", "message"), [
    # Hardware
    (lambda hw: dataclasses.replace(hw, disk_bandwidth=NAN), lambda r: r.update(disk_bandwidth=NAN),
     "disk_bandwidth must be a finite number > 0, got nan"),
    (lambda hw: dataclasses.replace(hw, disk_bandwidth=-7e9), lambda r: r.update(disk_bandwidth=-7e9),
     "disk_bandwidth must be a finite number > 0, got -7000000000.0"),
    (lambda hw: dataclasses.replace(hw, disk_bandwidth="fast"), lambda r: r.update(disk_bandwidth="fast"),
     "disk_bandwidth must be a number, got 'fast'"),
    (_without_link, lambda r: r.update(links=r["links"][:2]),
     "no link between gpu and npu; every pair of devices needs one"),
    # DeviceProfile
    (_gpu(memory=-8e10), lambda r: device(r, "gpu").update(memory=-8e10),
     r"devices\[gpu\]\.memory must be a finite number > 0, got -80000000000\.0"),
    (_gpu(memory=NAN), lambda r: device(r, "gpu").update(memory=NAN),
     r"devices\[gpu\]\.memory must be a finite number > 0, got nan"),
    (_gpu(kind="tpu"), lambda r: device(r, "gpu").update(kind="tpu"),
     r"devices\[gpu\]\.kind must be one of cpu, gpu, npu, got 'tpu'"),
    (_gpu(setup_s="0.5"), lambda r: device(r, "gpu").update(setup_s="0.5"),
     r"devices\[gpu\]\.setup_s must be a number, got '0\.5'"),
    (_gpu(op_efficiency={**SERVER.devices[1].op_efficiency, "dynamic": 1.5}),
     lambda r: device(r, "gpu")["op_efficiency"].update(dynamic=1.5),
     r"devices\[gpu\]\.op_efficiency\.dynamic must be a fraction in \[1e-12, 1\], got 1\.5"),
    (_gpu(op_efficiency=[0.6, 0.5, 0.2, 0.02]), lambda r: device(r, "gpu").update(op_efficiency=[0.6]),
     r"devices\[gpu\]\.op_efficiency must be a mapping with keys dense, attention, dynamic, "
     r"preprocess"),
    # Link: named by the pair of device ids the object keys it by
    (_link((0, 1), Link(NAN, 1e-5)), lambda r: r["links"][0].update(bandwidth=NAN),
     r"links\[\(0, 1\)\]\.bandwidth must be a finite number > 0, got nan"),
    (_link((0, 1), Link(6.4e10, -1e-5)), lambda r: r["links"][0].update(latency=-1e-5),
     r"links\[\(0, 1\)\]\.latency must be a finite number > 0, got -1e-05"),
    (_link((0, 1), Link("fast", 1e-5)), lambda r: r["links"][0].update(bandwidth="fast"),
     r"links\[\(0, 1\)\]\.bandwidth must be a number, got 'fast'"),
])
@pytest.mark.parametrize("entry", [load_hardware, _simulator])
def test_a_hardware_objects_mistake_is_the_error_its_yaml_gets(change, yaml_change, message, entry):
    with pytest.raises(ValueError) as from_object:
        entry(change(SERVER))
    assert re.fullmatch(f"hardware 'server' \\(an object\\): {message}", str(from_object.value))
    with pytest.raises(ValueError) as from_yaml:
        hardware_from_dict(edited(yaml_change), "server.yaml")
    yaml_message = str(from_yaml.value).removeprefix("hardware server.yaml: ")
    assert re.sub(r"^links\[0\]", "links[(0, 1)]", yaml_message) \
        == str(from_object.value).removeprefix("hardware 'server' (an object): ")


@pytest.mark.parametrize(("change", "message"), [
    # the figure in force is the object's peak_flops; the YAML holds it under true_figures
    (_gpu(peak_flops=-1.0), r"devices\[gpu\]\.peak_flops must be a finite number > 0, got -1\.0"),
    (_gpu(launch_overhead=NAN), r"devices\[gpu\]\.launch_overhead must be a finite number > 0, got nan"),
    # the spec sheet's is in nominal; the YAML holds it at the device's top level
    (_gpu(nominal=(3.12e14, -2.0, 5e-6)),
     r"devices\[gpu\]\.nominal\[1\] \(the spec sheet's mem_bandwidth\) must be a finite number "
     r"> 0, got -2\.0"),
])
@pytest.mark.parametrize("entry", [load_hardware, _simulator])
def test_a_hardware_objects_bad_figure_is_named_as_the_object_holds_it(change, message, entry):
    """An edited peak_flops=-1 was refused as "true_figures.peak_flops", and a bad nominal as
    "mem_bandwidth": the YAML's names for the two, which the object has neither of."""
    with pytest.raises(ValueError, match=f"^hardware 'server' \\(an object\\): {message}$"):
        entry(change(SERVER))


def _asymmetric(hw):
    return Hardware(hw.name, hw.devices, {**hw.links, (1, 0): Link(1.0, 1.0)}, hw.disk_bandwidth)


# What no YAML can write: a part of another type than a Hardware holds, a link keyed by no
# pair of device ids, or one way only
@pytest.mark.parametrize(("change", "message"), [
    (lambda hw: dataclasses.replace(hw, devices=list(hw.devices)),
     r"devices must be a tuple, got \[DeviceProfile\("),
    (lambda hw: dataclasses.replace(hw, devices=(hw.devices[0], "gpu", hw.devices[2])),
     r"devices\[1\] must be a DeviceProfile, got 'gpu'"),
    (_gpu(nominal=[9.89e14, 3.35e12, 5e-6]),
     r"devices\[gpu\]\.nominal must be a tuple of the spec sheet's peak_flops, mem_bandwidth, "
     r"launch_overhead, got \[989000000000000\.0, 3350000000000\.0, 5e-06\]"),
    (lambda hw: dataclasses.replace(hw, links=list(hw.links.values())),
     r"links must be a dict of Links keyed by \(a, b\) pairs of device ids, got \[Link\("),
    (lambda hw: dataclasses.replace(hw, links={**hw.links, (0, 5): hw.links[(0, 1)]}),
     r"links key \(0, 5\) must be a pair \(a, b\) of two different device ids in 0\.\.2"),
    (_link((0, 1), (6.4e10, 1e-5)), r"links\[\(0, 1\)\] must be a Link, got \(64000000000\.0, 1e-05\)"),
    (_asymmetric, r"links\[\(1, 0\)\] must be links\[\(0, 1\)\], Link\(bandwidth=31500000000\.0, "
                  r"latency=1e-05\), as one link joins two devices both ways; got Link\(bandwidth=1\.0, "
                  r"latency=1\.0\)$"),
])
@pytest.mark.parametrize("entry", [load_hardware, _simulator])
def test_a_hardware_object_no_yaml_could_give_is_refused_naming_the_field(change, message, entry):
    with pytest.raises(ValueError, match=f"^hardware 'server' \\(an object\\): {message}"):
        entry(change(SERVER))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"hardware": "server"}, "hardware must be a Hardware .*, got 'server'"),
    ({"model": "glm-9b"}, "model must be a ModelConfig .*, got 'glm-9b'"),
    ({"config": {"prefetch_depth": 2}}, r"config must be a SimConfig or None, got \{'prefetch_depth': 2\}"),
    ({"stages": ("direct", "window", "sequential")}, "stages must be one implementation per stage"),
])
def test_a_simulator_refuses_what_is_not_its_config_objects(kwargs, message):
    # each was an AttributeError from inside ('str' object has no attribute 'devices', ...)
    args = {"hardware": SERVER, "model": get_model("glm-9b"), "stages": build_stages("glm-5.3"),
            **kwargs}
    with pytest.raises(ValueError, match=f"^{message}"):
        Simulator(**args)


def test_a_hardware_changed_in_place_after_its_check_is_checked_again():
    """A Hardware passed once passes again unread while it equals what its mapping read back
    as (the env checks it three times): a change made in place since, to a device's dict or a
    link, is read, in the hardware and in its nominal view."""
    hw = copy.deepcopy(SERVER)      # its dicts its own
    _simulator(hw)
    view = hw.nominal_view()
    hw.devices[1].op_efficiency["dense"] = NAN
    for changed in (hw, view, hw.nominal_view()):
        with pytest.raises(ValueError, match=r"devices\[gpu\]\.op_efficiency\.dense must be"):
            _simulator(changed)
    hw.devices[1].op_efficiency["dense"] = SERVER.devices[1].op_efficiency["dense"]
    _simulator(hw)
    hw.links[(0, 2)] = Link(1.0, 1.0)
    with pytest.raises(ValueError, match=r"links\[\(2, 0\)\] must be links\[\(0, 2\)\]"):
        _simulator(hw)


def test_a_valid_hardware_object_passes_as_it_is():
    # an int or numpy figure where a float is, another mapping of efficiencies, true figures
    # apart from the nominal ones (what with_device sets)
    from types import MappingProxyType
    hw = SERVER.with_device("gpu", memory=80_000_000_000, peak_flops=np.float64(5e14),
                            op_efficiency=MappingProxyType(dict(SERVER.devices[1].op_efficiency)))
    assert load_hardware(hw) is hw
    assert _simulator(hw).hardware is hw
    assert _simulator(hw.nominal_view()).hardware.devices[1].peak_flops == SERVER.devices[1].nominal[0]


def test_a_malformed_or_incomplete_yaml_file_is_a_value_error(tmp_path: Path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: broken\ndevices: [\n  {name: cpu, kind: cpu\n")
    with pytest.raises(ValueError, match=r"malformed YAML at line \d+, column \d+: ") as info:
        load_hardware(broken)
    assert "broken.yaml" in str(info.value)
    # one line naming the file, not PyYAML's quote of the source from "<unicode string>"
    assert "\n" not in str(info.value) and "<unicode string>" not in str(info.value)
    missing = tmp_path / "missing.yaml"
    missing.write_text(yaml.safe_dump(edited(lambda r: device(r, "npu").pop("launch_overhead"))))
    with pytest.raises(ValueError, match=r"devices\[npu\]\.launch_overhead is missing") as info:
        load_hardware(missing)
    assert str(missing) in str(info.value)


@pytest.mark.parametrize(("placement", "message"), [
    (("cpu", "gpu"), "one device per stage"),
    ((0, 1, 7), "not a device id"),
    ((0, 1, 3), "not a device id"),       # one past the last of the 3 devices
    ((-1, 1, 1), "not a device id"),      # would index the last device
    ((0, 1, 1.5), "device id or name"),
    (np.ones((3, 2)), "shape"),
    (np.array([[1, 0, 0], [0, 0, 0], [0, 1, 0]]), "'prefill' is all zero"),
    (np.array([[1, 0, 0], [0, -1, 2], [0, 1, 0]]), ">= 0, got -1.0 for stage 'prefill' on device 'gpu'"),
    (np.array([[1, 0, 0], [0, 1, 0], [0, 1, np.nan]]), "got nan for stage 'decode' on device 'npu'"),
])
def test_a_bad_placement_is_refused(placement, message):
    sim = Simulator(load_hardware("server"), get_model("glm-9b"), build_stages("glm-5.3"))
    with pytest.raises(ValueError, match=message):
        sim.shares(placement)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"prefetch_depth": -1}, "prefetch_depth"),
    ({"contention": float("inf")}, "contention"),
    ({"cache_capacity": 0}, "cache_capacity"),
    ({"cache_decay": 0.0}, "cache_decay"),
    # 1 / 5e-324 is inf: the decayed counts turned NaN and the cache froze on its first entries
    ({"cache_decay": 5e-324}, r"cache_decay must be in \[1e-300, 1\]"),
    ({"precomputed_domains": (-3,)}, "precomputed_domains"),
    # the scenario loader's bounds: beyond them an overhead made every latency inf, and a
    # depth past ssize_t an OverflowError in Simulator()
    ({"replacement_overhead_s": 1e308}, r"replacement_overhead_s must be in \[0, 3600\]"),
    ({"contention": 11.0}, r"contention must be in \[0, 10\]"),
    ({"contention": float("nan")}, "contention"),
    ({"prefetch_depth": 10**30}, r"prefetch_depth must be an integer in 0\.\.1000000"),
])
def test_a_bad_sim_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SimConfig(**kwargs)


def test_an_unknown_resident_device_is_refused():
    with pytest.raises(ValueError, match="tpu"):
        Simulator(load_hardware("server"), get_model("glm-9b"), build_stages("glm-5.3"),
                  SimConfig(resident=("tpu",)))


def test_exponent_only_floats_read_as_numbers_everywhere():
    data = safe_load("a: 1e9\nb: -3E-4\nc: 2.5e14\nd: '1e9'\ne: 7\nf: e5")
    assert data == {"a": 1e9, "b": -3e-4, "c": 2.5e14, "d": "1e9", "e": 7, "f": "e5"}
    from agents.sb3_hyperparams import parse_overrides

    assert parse_overrides(["learning_rate=3e-4"]) == {"learning_rate": 3e-4}


def test_a_yaml_error_without_a_place_or_a_problem_is_its_own_message_on_one_line():
    from yaml.error import Mark, MarkedYAMLError

    from inference.yamlio import describe_yaml_error
    assert describe_yaml_error(yaml.YAMLError("bad\n   input")) == "bad input"
    assert describe_yaml_error(MarkedYAMLError(problem="no place")) == "no place"
    somewhere = Mark("f", 0, 2, 4, None, None)
    assert describe_yaml_error(MarkedYAMLError(context="while reading", problem_mark=somewhere)) \
        == "line 3, column 5: while reading"


def test_a_path_as_deep_as_taken_is_usable_and_one_deeper_is_not(tmp_path: Path):
    from inference.yamlio import MAX_PATH_DEPTH, unusable_path
    deepest = Path(*["d"] * MAX_PATH_DEPTH)
    assert len(deepest.parts) == MAX_PATH_DEPTH and unusable_path(deepest) is None
    assert f"more than the {MAX_PATH_DEPTH} taken" in unusable_path(deepest / "d")


def test_a_path_with_no_utf8_form_is_unusable_as_such_not_for_a_nul_byte():
    """os.stat's UnicodeEncodeError is a ValueError: '\\ud800' (a scenario's hardware: or
    workload.trace: escape) was said to hold a NUL byte."""
    from inference.yamlio import unusable_path
    assert "lone surrogate" in unusable_path("server\ud800.yaml")
    assert unusable_path("a\0b") == "it holds a NUL byte"


def test_why_a_name_is_unusable_does_not_repeat_the_name(tmp_path: Path):
    """The reason follows the name, which the caller shows shortened: the OS error's own text
    ("File name too long") and not its str, which quotes the whole 300-character name again."""
    from inference.yamlio import unusable_path
    name = str(tmp_path / ("x" * 300))
    reason = unusable_path(name)
    assert reason and "x" * 300 not in reason and "Errno" not in reason


def test_a_key_given_twice_is_refused_not_silently_replaced(tmp_path: Path):
    # PyYAML keeps the last one: the second `workload:` dropped the first's arrival_rate.
    with pytest.raises(yaml.YAMLError, match=r"duplicate key 'a' \(first given on line 1\)"):
        safe_load("a: 1\nb: {c: 2}\na: 3\n")
    with pytest.raises(yaml.YAMLError, match="duplicate key 'c'"):
        safe_load("b: {c: 1, c: 2}\n")
    # a key overriding one brought in by a merge key is YAML's way of extending a mapping
    assert safe_load("base: &b {x: 1, y: 2}\nd: {<<: *b, x: 3}\n")["d"] == {"x": 3, "y": 2}
    from envs.scenario import load_scenario

    scenario = tmp_path / "twice.yaml"
    scenario.write_text("name: twice\nworkload:\n  arrival_rate: 0.5\nnoise: 0.0\n"
                        "workload:\n  batch: 16\n")
    with pytest.raises(ValueError, match=r"twice\.yaml: malformed YAML at line 5, column 1: "
                                         r"found duplicate key 'workload'"):
        load_scenario(str(scenario))



def test_a_value_pyyaml_cannot_read_is_a_yaml_error_naming_its_key_and_place(tmp_path: Path):
    """PyYAML's int() of a number past Python's 4300-digit limit raised a bare ValueError (a
    traceback out of train.py --config, a line naming neither file nor field elsewhere), as
    its constructors did for an explicit tag they cannot read (KeyError for !!bool)."""
    from inference.yamlio import describe_yaml_error
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    if limit:
        huge = "1" + "0" * limit
        with pytest.raises(yaml.YAMLError, match=rf"a: a number of more than {limit} digits"):
            safe_load(f"a: {huge}\n")
        with pytest.raises(yaml.YAMLError, match=rf"^a number of more than {limit} digits"):
            safe_load(f"[1, {huge}]\n")        # in a list: no key to name
        path = tmp_path / "huge.yaml"
        path.write_text((PRESET_DIR / "server.yaml").read_text(encoding="utf-8")
                        .replace("disk_bandwidth: 6.9e9", f"disk_bandwidth: {huge}"))
        with pytest.raises(ValueError, match=r"^hardware file .*huge\.yaml: malformed YAML at "
                                             r"line 10, column 17: disk_bandwidth: a number of "
                                             rf"more than {limit} digits$"):
            load_hardware(path)
        assert safe_load(f"a: {huge[:limit]}\n") == {"a": int(huge[:limit])}   # at the limit
    for value, problem in [("!!int abc", "'abc' is not a valid int"),
                           ("!!int 1e3", "'1e3' is not a valid int"),
                           ("!!float x", "'x' is not a valid float"),
                           ("!!bool maybe", "'maybe' is not a valid bool"),
                           ("!!timestamp soon", "'soon' is not a valid timestamp")]:
        with pytest.raises(yaml.YAMLError) as info:
            safe_load(f"key: {value}\n")
        assert describe_yaml_error(info.value) == f"line 1, column 6: key: {problem}"
    assert safe_load("a: !!int '12'\nb: 0x1F\nc: !!bool yes\n") == {"a": 12, "b": 31, "c": True}


def test_a_device_name_in_a_yaml_file_with_no_utf8_form_names_the_file(tmp_path: Path):
    path = tmp_path / "surrogate.yaml"
    path.write_text((PRESET_DIR / "server.yaml").read_text(encoding="utf-8")
                    .replace("name: cpu", 'name: "c\\ud800"').replace("[cpu,", '["c\\ud800",'),
                    encoding="utf-8")
    with pytest.raises(ValueError, match=r"^hardware .*surrogate\.yaml: devices\[0\]\.name must "
                                         r"be UTF-8 text"):
        load_hardware(path)


def test_the_duplicate_key_check_sees_aliased_keys_and_not_merged_ones():
    # A key given twice through an alias is still given twice: the check compared key nodes
    # by identity, and both uses of an alias are the anchored node, so the last one won.
    with pytest.raises(yaml.YAMLError, match="found duplicate key 'batch'"):
        safe_load("key: &k batch\nworkload:\n  *k : 1\n  *k : 4\n")
    with pytest.raises(yaml.YAMLError, match="found duplicate key 'x'"):
        safe_load("&x x: 1\n*x : 2\n")
    # A merge source with its own merge key, aliased again: PyYAML flattens the source in
    # place when the first mapping merges it, so the check (reading the node's pairs) saw the
    # merged-in `x` beside the source's own `x` and refused this valid document.
    # `c` gets the source's own `x` (PyYAML 6.0.4's own merge gives it the merged-in 1).
    text = "c:\n  <<: &b\n    <<: {x: 1}\n    x: 2\n  y: 0\nd: *b\n"
    assert safe_load(text) == {"c": {"x": 2, "y": 0}, "d": {"x": 2}}


@pytest.mark.parametrize(("text", "expected"), [
    # A merge source that merges: its own key overrides what it merges, whether the source is
    # read before the mapping merging it or inside it (PyYAML 6.0.4 gave c.x == 1 both ways).
    ("b: &b\n  <<: {x: 1}\n  x: 2\nc:\n  <<: *b\n  y: 0\n",
     {"b": {"x": 2}, "c": {"x": 2, "y": 0}}),
    ("c:\n  <<: &b\n    <<: [{x: 1}]\n    x: 2\n  y: 0\nd: *b\n",
     {"c": {"x": 2, "y": 0}, "d": {"x": 2}}),
    # Of a list of mappings merged, an earlier one overrides a later one.
    ("a: &a {x: 1, y: 1}\nb: &b {x: 2, z: 2}\nc: {<<: [*a, *b], w: 0}\n",
     {"a": {"x": 1, "y": 1}, "b": {"x": 2, "z": 2}, "c": {"x": 1, "y": 1, "z": 2, "w": 0}}),
    ("c: {<<: [{x: 1}, {x: 2, <<: {x: 3, y: 3}}]}\n", {"c": {"x": 1, "y": 3}}),
    # The mapping's own key overrides a merged one, wherever it is written.
    ("a: &a {x: 1, y: 1}\nc: {x: 3, <<: *a}\n", {"a": {"x": 1, "y": 1}, "c": {"x": 3, "y": 1}}),
    # One source merged twice, once overridden: neither use changes the other or the source.
    ("a: &a {x: 1}\nb: {<<: *a, x: 3}\nc: {<<: *a, y: 2}\nd: *a\n",
     {"a": {"x": 1}, "b": {"x": 3}, "c": {"x": 1, "y": 2}, "d": {"x": 1}}),
    # A bare `=` key is the string, as in yaml.safe_load (the duplicate check failed on its tag).
    ("=: 1\n", {"=": 1}),
])
def test_merge_keys_follow_the_yaml_spec(text, expected):
    assert safe_load(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("a: 1\nb:\n  x: 0\n  <<: 3\n", "line 4, column 7: a merge key .* not a scalar"),
    ("a: &a {x: 1}\nb:\n  <<:\n    - *a\n    - [x]\n", "line 5, column 7: .* not a sequence"),
    ("a: &a {x: 1}\nb:\n  <<:\n", "line 3, column 6: a merge key"),
    # YAML keys are unique, the merge key too: PyYAML 6.0.3 let the second `<<` win, 6.0.4 the first.
    ("a: &a {x: 1}\nb: &b {x: 2}\nc:\n  <<: *a\n  <<: *b\n",
     r"line 5, column 3: found duplicate key '<<' \(first given on line 4\)"),
    ("b: {<<: {x: 1, x: 2}}\n", "found duplicate key 'x'"),
    ("a: &a\n  <<: *a\n", "merges itself"),
])
def test_a_bad_merge_key_names_its_line(text, message):
    from inference.yamlio import describe_yaml_error
    with pytest.raises(yaml.YAMLError) as raised:
        safe_load(text)
    assert re.search(message, describe_yaml_error(raised.value))

def laughs(levels: int) -> str:
    """A "billion laughs": each of `levels` anchored lists holds ten aliases of the one before."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("text", "message"), [
    # PyYAML composes recursively: a RecursionError traceback out of every YAML reader
    ("x: " + "[" * 5000 + "]" * 5000 + "\n", "line 1, column 103: values nested more than 100 "
                                             "levels deep"),
    ("".join("  " * i + f"k{i}:\n" for i in range(800)), "line 100, column 199: values nested"),
    # loaded at once as shared lists, but a message echoing one (its repr) ran for ever
    (laughs(9), "line 1, column 1: aliases repeat values more than 100,000 times"),
    ("&a [x, *a]\n", "line 1, column 1: an alias names a node it is part of"),
], ids=["deep-flow", "deep-block", "billion-laughs", "recursive"])
def test_a_yaml_bomb_is_one_error_naming_where(text, message):
    from inference.yamlio import describe_yaml_error
    with pytest.raises(yaml.YAMLError) as raised:
        safe_load(text)
    assert describe_yaml_error(raised.value).startswith(message)


def test_yaml_nests_and_repeats_as_deep_and_often_as_taken():
    from inference.yamlio import MAX_ALIASED_VALUES, MAX_DEPTH
    deepest = safe_load("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    for _ in range(MAX_DEPTH - 1):
        deepest = deepest[0]
    assert deepest == []
    # `x` given once and repeated by as many aliases as taken; one more is refused
    def repeated(n: int) -> str:
        return "a: &a x\nb: [" + "*a, " * n + "]\n"

    assert safe_load(repeated(MAX_ALIASED_VALUES))["b"] == ["x"] * MAX_ALIASED_VALUES
    with pytest.raises(yaml.YAMLError, match="aliases repeat values more than"):
        safe_load(repeated(MAX_ALIASED_VALUES + 1))
    assert safe_load(laughs(4))["l3"][9][9][9] == ["x"] * 10


def test_a_hardware_file_nested_too_deep_is_a_value_error_naming_it(tmp_path: Path):
    path = tmp_path / "deep.yaml"
    path.write_text((PRESET_DIR / "server.yaml").read_text()
                    + "source: " + "[" * 300 + "]" * 300 + "\n")
    with pytest.raises(ValueError, match=f"^hardware file {re.escape(str(path))}: malformed YAML "
                                         f"at line [0-9]+, column [0-9]+: values nested more "
                                         f"than 100 levels deep$"):
        load_hardware(path)


def renamed(section: dict, old: str, new: str) -> None:
    section[new] = section.pop(old)


@pytest.mark.parametrize(("change", "key", "where"), [
    # Each of these used to load, the misspelt key dropped and its default used instead.
    (lambda r: renamed(device(r, "npu"), "true_figures", "true_figure"),
     "true_figure", r"devices\[npu\]"),                      # lost the NPU's +15% true speed
    (lambda r: renamed(device(r, "gpu"), "setup_s", "setup_S"),
     "setup_S", r"devices\[gpu\]"),                          # zeroed the set-up cost
    (lambda r: renamed(device(r, "cpu"), "memory_domain", "memory_domian"),
     "memory_domian", r"devices\[cpu\]"),
    (lambda r: renamed(device(r, "gpu"), "name", "nmae"), "nmae", r"devices\[1\]"),
    (lambda r: renamed(device(r, "npu")["true_figures"], "peak_flops", "peak_flop"),
     "peak_flop", r"devices\[npu\]\.true_figures"),
    (lambda r: renamed(r["links"][2], "latency", "latncy"), "latncy", r"links\[2\]"),
    (lambda r: renamed(r, "disk_bandwidth", "disk_bandwith"), "disk_bandwith", "top level"),
])
def test_an_unknown_key_is_refused_naming_it_where_it_is_and_the_valid_keys(change, key, where):
    # each a typo of a valid key, which the error guesses before listing them all
    with pytest.raises(ValueError, match=rf"{where} has unknown key\(s\) '{key}' "
                                         r"\(did you mean '(\w+)'\?\); valid keys: ") as info:
        hardware_from_dict(edited(change), "test")
    valid = str(info.value).split("valid keys: ")[1].split(", ")
    assert key not in valid and len(valid) >= 3
    guess = re.search(r"did you mean '(\w+)'", str(info.value))
    assert guess and guess.group(1) in valid


def test_the_ends_of_each_range_an_error_states_are_taken():
    """The ranges the errors state are closed where they say so: "a fraction in [1e-12, 1]",
    "must lie in [1, 1e+30]", "(0, 3600]", "at most 3600". An efficiency of 1 is an ideal
    device, not a mistake."""
    def ends(r: dict) -> None:
        gpu = device(r, "gpu")
        gpu["op_efficiency"].update(dense=1, dynamic=FRACTION_MIN)
        gpu["pattern_efficiency"].update(sequential=1.0)
        gpu["cache_hit_rate"].update(random=FRACTION_MIN)
        gpu.update(memory=RATE_RANGE[1], launch_overhead=SECONDS_MAX, setup_s=SECONDS_MAX)
        r["links"][0].update(bandwidth=RATE_RANGE[0], latency=SECONDS_MAX)

    hw = hardware_from_dict(edited(ends), "test")
    gpu = hw.devices[hw.device_id("gpu")]
    assert (gpu.op_efficiency["dense"], gpu.op_efficiency["dynamic"]) == (1.0, FRACTION_MIN)
    assert gpu.pattern_efficiency["sequential"] == 1.0
    assert gpu.cache_hit_rate["random"] == FRACTION_MIN
    assert (gpu.memory, gpu.launch_overhead, gpu.setup_s) == (RATE_RANGE[1], SECONDS_MAX, SECONDS_MAX)
    first = SERVER_RAW["links"][0]["between"]
    link = hw.link(hw.device_id(first[0]), hw.device_id(first[1]))
    assert (link.bandwidth, link.latency) == (RATE_RANGE[0], SECONDS_MAX)


def test_a_negative_setup_cost_asks_for_a_number_at_least_zero():
    with pytest.raises(ValueError, match=r"devices\[gpu\]\.setup_s must be a finite number >= 0"):
        hardware_from_dict(edited(lambda r: device(r, "gpu").update(setup_s=-0.5)), "test")
    zero = hardware_from_dict(edited(lambda r: device(r, "gpu").update(setup_s=0)), "test")
    assert zero.devices[zero.device_id("gpu")].setup_s == 0.0


@pytest.mark.parametrize(("links", "message"), [
    ({"cpu-gpu": {"bandwidth": 1e9, "latency": 1e-5}}, "links must be a list of mappings"),
    (["cpu", "gpu"], r"links\[0\] must be a mapping"),
    (0, "links must be a list of mappings"),     # read as no links: "no link between ..."
])
def test_links_not_written_as_a_list_of_mappings_say_so(links, message):
    with pytest.raises(ValueError, match=message) as info:
        hardware_from_dict(edited(lambda r: r.update(links=links)), "test")
    assert ".between" not in str(info.value)   # it used to blame links[0].between


@pytest.mark.parametrize("value", [0, False, "", []])
def test_true_figures_that_are_no_mapping_are_refused(value):
    # `or {}` read a falsy one as "the nominal figures"; null and absent still are
    with pytest.raises(ValueError, match=r"devices\[npu\]\.true_figures must be a mapping"):
        hardware_from_dict(edited(lambda r: device(r, "npu").update(true_figures=value)), "test")
    nominal = hardware_from_dict(edited(lambda r: device(r, "npu").pop("true_figures")), "test")
    null = hardware_from_dict(edited(lambda r: device(r, "npu").update(true_figures=None)), "test")
    assert null == nominal


@pytest.mark.parametrize(("change", "message"), [
    ({"n_layers": 0}, "n_layers must be a positive integer"),
    ({"vocab": 2.5}, "vocab must be a positive integer"),
    ({"dtype_bytes": True}, "dtype_bytes must be a positive integer"),   # not 1 byte, as Task
    ({"hidden": 4100}, r"hidden \(4100\) must be divisible by n_heads \(32\)"),
    ({"n_kv_heads": 3}, r"n_heads \(32\) must be divisible by n_kv_heads \(3\)"),
    # a name is what errors, labels and a mix's comparison show: 5 passed, None too
    ({"name": 5}, "ModelConfig.name must be a non-empty string, got 5"),
    ({"name": ""}, "ModelConfig.name must be a non-empty string, got ''"),
])
def test_a_bad_model_shape_names_the_field(change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(get_model("glm-9b"), **change)


def test_every_model_size_may_be_one():
    """1 is a positive integer: one layer, a one-byte (int8) dtype, one KV head (multi-query
    attention) are shapes the checks take."""
    from inference.model_config import ModelConfig
    smallest = ModelConfig("one", 1, 1, 1, 1, 1, 1, dtype_bytes=1)
    assert smallest.head_dim == smallest.kv_dim == 1
    assert dataclasses.replace(get_model("glm-9b"), n_kv_heads=1, dtype_bytes=1).kv_dim == 128


def test_a_seed_is_checked_against_the_range_torch_seeds_from():
    """check_seed takes exactly what torch's manual_seed takes, [-2**63, 2**64): each end is a
    seed torch accepts, one past either end one it refuses only inside ``run()`` (torch 2.3
    raises RuntimeError there, later versions ValueError)."""
    import torch

    from inference.model_config import check_seed
    for seed in (-2**63, 2**64 - 1):
        assert check_seed(seed) == seed
        torch.Generator().manual_seed(seed)
    for seed in (-2**63 - 1, 2**64):
        with pytest.raises((ValueError, RuntimeError)):
            torch.Generator().manual_seed(seed)
        with pytest.raises(ValueError, match=r"seed must be an integer in \[-2\*\*63, 2\*\*64\)"):
            check_seed(seed)


def test_true_figures_are_charged_and_the_nominal_view_restores_every_spec_figure():
    """A device's `true_figures` replace its spec-sheet FLOP/s, bandwidth and launch overhead;
    `nominal_view` gives all three back, and nothing else changes."""
    gpu = device(SERVER_RAW, "gpu")
    true = {"peak_flops": gpu["peak_flops"] * 0.8, "mem_bandwidth": gpu["mem_bandwidth"] * 0.7,
            "launch_overhead": gpu["launch_overhead"] * 3}
    hardware = hardware_from_dict(edited(lambda r: device(r, "gpu").update(true_figures=true)))
    charged = hardware.devices[hardware.device_id("gpu")]
    assert {k: getattr(charged, k) for k in true} == pytest.approx(true)
    assert charged.speed_ratio == pytest.approx(0.8)
    believed = hardware.nominal_view().devices[hardware.device_id("gpu")]
    assert {k: getattr(believed, k) for k in true} == pytest.approx({k: gpu[k] for k in true})
    assert believed.speed_ratio == 1.0
    assert dataclasses.replace(believed, **true) == charged


def test_a_device_without_a_memory_domain_is_alone_in_its_own():
    """docs/WORKLOADS.md: `memory_domain` is optional, "default: the name" -- not the device's kind, which
    is only a label: two GPUs given no domain have one each, and a decode on one runs beside a
    decode on the other as fast as alone (one shared domain would slow both by contention)."""
    def two_gpus_no_domains(raw: dict) -> None:
        for dev in raw["devices"]:
            dev.pop("memory_domain", None)
            dev.pop("setup_s", None)    # no set-up: the second task starts beside the first
        device(raw, "npu")["kind"] = "gpu"

    hw = hardware_from_dict(edited(two_gpus_no_domains), "test")
    assert [d.kind for d in hw.devices].count("gpu") == 2
    assert [d.memory_domain for d in hw.devices] == [d.name for d in hw.devices]
    sim = Simulator(hw, get_model("glm-9b"), build_stages("glm-5.3"), SimConfig(contention=1.0))
    task = Task(batch=16, prompt_tokens=5000, output_tokens=256)
    first = sim.execute(task, ("cpu", "gpu", "gpu"))
    second = sim.execute(task, ("cpu", "npu", "npu"))
    assert second.finish - second.stage_time[2] < first.finish    # the two decodes overlap
    for result, name in ((first, "gpu"), (second, "npu")):
        alone = sim.stage_seconds(result.works[2], hw.device_id(name))
        assert result.stage_time[2] == pytest.approx(alone, rel=1e-12), name


def test_a_variant_label_is_the_recipe_name_or_the_implementations_joined():
    assert variant_label({"load": "cached", "prefill": "dynamic", "decode": "hierarchical"}) \
        == "glm-5.3-flash"
    assert variant_label({"decode": "prefetched", "load": "direct", "prefill": "gated"}) \
        == "direct+gated+prefetched"


def test_a_variant_is_also_its_label_load_prefill_decode():
    """train.py --variant, a scenario's variant: and the env's variant= refused the mix that
    python -m inference --variants takes and evaluate.py's sections print (variant_label):
    'unknown variant 'adaptive+window+hierarchical''."""
    mix = {"load": "adaptive", "prefill": "window", "decode": "hierarchical"}
    assert resolve_variant("adaptive+window+hierarchical") == mix
    assert resolve_variant(" adaptive + window + hierarchical ") == mix
    assert resolve_variant(variant_label(mix)) == mix
    assert resolve_variant("cached+dynamic+hierarchical") == resolve_variant("glm-5.3-flash")
    with pytest.raises(ValueError, match=r"variant mix 'cached\+window' needs one implementation "
                                         r"per stage \(load\+prefill\+decode\)"):
        resolve_variant("cached+window")
    with pytest.raises(ValueError, match=r"unknown prefill implementation 'windw' \(did you mean "
                                         r"'window'\?\)"):
        resolve_variant("adaptive+windw+hierarchical")
    from envs import InferenceAllocEnv
    env = InferenceAllocEnv("article", variant="adaptive+window+hierarchical", episode_tasks=2)
    assert env.variant == "adaptive+window+hierarchical"
    assert [type(s).__name__ for s in env.sim.stages] == [
        type(s).__name__ for s in build_stages(mix)]


def test_a_path_named_like_a_preset_with_no_such_file_says_to_give_the_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Path is always a file; with none there, the error named the preset it lists ("unknown
    hardware 'server': not a preset (edge, server)"), which contradicts itself."""
    from envs.scenario import load_scenario
    monkeypatch.chdir(tmp_path)
    for name, what, load in (("server", "hardware", load_hardware),
                             ("edge", "scenario", load_scenario)):
        with pytest.raises(ValueError, match=rf"^{what} '{name}' was given as a Path, which is "
                                             rf"always read as a file, and there is no such "
                                             rf"file; for the preset, give its name as a "
                                             rf"string: '{name}'$"):
            load(Path(name))
        load(name)
    with pytest.raises(ValueError, match="^unknown hardware 'mainframe': not a preset"):
        load_hardware(Path("mainframe"))


def test_the_hardware_schema_in_the_module_docstring_lists_every_key_the_loader_reads() -> None:
    """The YAML schema help(inference.hardware) shows names every key of each mapping the
    loader accepts (it refuses any other), the device kinds, op classes and access patterns,
    and only figures `true_figures` may override."""
    import textwrap

    import inference.hardware as hardware

    block = (hardware.__doc__ or "").split("::\n", 1)[1].lstrip("\n").split("\n\n")[0]
    raw = safe_load(textwrap.dedent(block))
    device, link = raw["devices"][0], raw["links"][0]
    assert set(raw) == set(hardware._HARDWARE_KEYS)
    assert set(device) == set(hardware._DEVICE_KEYS)
    assert set(link) == set(hardware._LINK_KEYS)
    kinds = re.search(r"kind: \w+ +# ([\w |]+)\n", block)
    assert kinds is not None
    assert tuple(kinds.group(1).split(" | ")) == hardware.DEVICE_KINDS
    assert tuple(device["op_efficiency"]) == hardware.OP_CLASSES
    assert tuple(device["pattern_efficiency"]) == tuple(device["cache_hit_rate"]) == hardware.PATTERNS
    assert set(device["true_figures"]) <= set(hardware._TRUE_FIELDS)
