"""docs/CALIBRATION.md's parameter tables state the shipped values.

Each row of the tables under "Hardware", "Cost model", "Scenario", "Learner" and "The article
job" is found by its parameter cell and the figures it states are compared with the ones the
project loads (the preset, scenario and hyper-parameter files through their loaders, the cost
model's and the article job's module constants): an edit to either side alone fails here,
naming the row.

Not checked, because they state no shipped value:
  * the "rows it moves" cells: article targets and measured results (22%, 2.17x, ...), which
    `evaluate.py --reproduce-article` measures;
  * measured outcomes and history in the "why" cells: the arrival rate's 45-52% busy GPU
    (seeds 10000-10004, 600 tasks; "said ~85%"), the hierarchical decode's former 1/16 + 2%
    and the figures it moved (2.12x -> 2.09x, ...), the prefetcher's former "1/lookahead"
    extra copies;
  * plausibility claims: dense GEMMs "reach 45-65% of peak", preprocess "one scalar core of
    112" (the core count lives only in a comment of the preset);
  * the device model names (2 x Xeon Platinum 8480+, A100 80GB SXM, Ascend 910) and BF16 /
    AMX: labels, which the figures of their rows pin down;
  * the `learning_rate` row's empty "why", and the prose under the Learner table;
  * the article job table's "rows" cells and its "Flash-optimized's allocator" and "the loss
    row's job" rows: measured ratios and choices of method, not shipped values.
Every table row states at least one figure, so no row is skipped whole.
docs/WORKLOADS.md states none of these values: its YAML examples are a made-up `two-gpu` profile and
`chat` scenario, and its "(default)" notes are the loaders' defaults, not the article's.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from pathlib import Path

import pytest

from envs import ENV_IDS
from envs.scenario import Scenario, load_scenario
from inference.hardware import PATTERNS, DeviceProfile, Hardware, load_hardware
from inference.model_config import get_model
from inference.stages import decode, load, prefill
from inference.task import Task
from inference.variants import COST_PARAMS, build_stages

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "CALIBRATION.md"
NUMBER = r"\d+(?:\.\d+)?(?:e[-+]?\d+)?"
UNITS = {"": 1.0, "bit": 1 / 8, "s": 1.0, "tasks/s": 1.0, "%": 1e-2, "KiB": 1024.0, "GB": 1e9,
         "GB/s": 1e9, "TB/s": 1e12, "TFLOP/s": 1e12}


def _plain(text: str) -> str:
    return " ".join(text.split())


@lru_cache(maxsize=4)
def _tables(doc: Path) -> dict[str, list[list[str]]]:
    """Each `## ` section's table rows, as cells with their whitespace collapsed."""
    sections: dict[str, list[list[str]]] = {}
    rows: list[list[str]] = []
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            rows = sections.setdefault(_plain(line[3:]), [])
        elif line.lstrip().startswith("|") and not re.fullmatch(r"[\s|:-]+", line):
            rows.append([_plain(cell) for cell in line.strip().strip("|").split("|")])
    return sections


def section(name: str) -> tuple[str, list[list[str]]]:
    """The heading and table rows of the one section whose heading starts with `name`."""
    found = [(h, rows) for h, rows in _tables(DOC).items()
             if h.casefold().startswith(name.casefold())]
    assert len(found) == 1, (f"{DOC.name}: {len(found)} sections headed {name!r}; "
                             f"headings: {list(_tables(DOC))}")
    return found[0]


def section_file(name: str) -> Path:
    """The file a section's heading names, as `Hardware (`inference/presets/server.yaml`)`."""
    heading, _ = section(name)
    path = re.search(r"`([^`]+\.yaml)`", heading)
    assert path, f"{DOC.name}: section {heading!r} names no YAML file"
    return ROOT / path.group(1)


def row(table: str, parameter: str) -> list[str]:
    """The cells of the row of `table` whose parameter cell is `parameter` (or starts with it:
    some rows give their figures in that cell), whitespace and case aside."""
    heading, rows = section(table)
    key = _plain(parameter).casefold()
    found = ([r for r in rows if r[0].casefold() == key]
             or [r for r in rows if r[0].casefold().startswith(key)])
    assert len(found) == 1, (f"{DOC.name}, {heading}: {len(found)} rows for parameter "
                             f"{parameter!r} (renamed or removed?); parameters: "
                             f"{[r[0] for r in rows[1:]]}")
    assert len(found[0]) >= 3, f"{DOC.name}, {heading}: row {parameter!r} lost its cells"
    return found[0]


def stated(cell: str, text: str, where: str) -> list[str]:
    """The figures of `cell` where `text` has `{n}`; fails naming the row if it reads otherwise."""
    pattern = re.escape(text).replace(re.escape("{n}"), f"({NUMBER})").replace(r"\ ", r"\s*")
    match = re.search(pattern, cell, re.IGNORECASE)
    assert match, f"{DOC.name}, row {where!r}: {cell!r} no longer reads {text!r}"
    return list(match.groups())


def per_device(cell: str, where: str, unit: str = "") -> dict[str, str]:
    """`cpu 0.45, gpu 0.60, gpu/npu 1e-6`: the figure each device is given (`unit` optional:
    `cpu 0, gpu 0.5 s`)."""
    out: dict[str, str] = {}
    for item in cell.split(","):
        match = re.fullmatch(rf"\s*([\w/]+)\s+({NUMBER})\s*(?:{re.escape(unit)})?\s*", item)
        assert match, f"{DOC.name}, row {where!r}: {item.strip()!r} is not 'device figure'"
        out.update(dict.fromkeys(match.group(1).split("/"), match.group(2)))
    return out


def assert_states(where: str, text: str, shipped: float, at: str, unit: str = "",
                  rounded: bool = False) -> None:
    """The doc's `text` (in `unit`) is the shipped value found `at`; `rounded`: to the digits
    the doc gives (a datasheet's 2.039 TB/s, stated as 2.04)."""
    value = shipped / UNITS[unit]
    if rounded:
        same = round(value, len(text.partition(".")[2])) == float(text)
    else:
        same = math.isclose(float(text), value, rel_tol=1e-9)
    unit = f" {unit}" if unit else ""
    assert same, f"{DOC.name}, row {where!r} states {text}{unit}; {at} ships {value:.6g}{unit}"


# ---- Hardware ----------------------------------------------------------------------------------

def _hardware() -> Hardware:
    return load_hardware(section_file("Hardware"))


def _device(hardware: Hardware, name: str) -> DeviceProfile:
    return hardware.devices[hardware.device_id(name)]


def test_the_hardware_table_describes_the_article_scenarios_hardware():
    scenario_hardware = _scenario().hardware
    assert scenario_hardware == section_file("Hardware").stem, (
        f"{DOC.name}'s Hardware table describes {section_file('Hardware').name}, the article "
        f"scenario runs on {scenario_hardware}")


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_the_cpu_and_gpu_rows_state_their_datasheet_figures(name):
    device = _device(_hardware(), name)
    where = f"{name.upper()}:"
    cell = row("Hardware", where)[1]
    assert device.peak_flops == device.nominal[0], f"{where} states one speed, {name} has two"
    at = f"{name}'s"
    assert_states(where, stated(cell, "{n} TFLOP/s", where)[0], device.peak_flops,
                  f"{at} peak_flops", "TFLOP/s")
    bandwidth = re.search(rf"({NUMBER}) (GB/s|TB/s)", cell)
    assert bandwidth, f"{DOC.name}, row {where!r}: {cell!r} states no bandwidth"
    assert_states(where, bandwidth.group(1), device.mem_bandwidth, f"{at} mem_bandwidth",
                  bandwidth.group(2), rounded=True)
    memory = re.search(rf"({NUMBER}) GB(?!/)", cell)
    if memory:   # the CPU row states no memory
        assert_states(where, memory.group(1), device.memory, f"{at} memory", "GB")


def test_the_npu_row_states_its_nominal_and_true_figures():
    device = _device(_hardware(), "npu")
    cells = row("Hardware", "NPU:")
    nominal, true, bandwidth, memory = stated(
        cells[1], "{n} TFLOP/s nominal, {n} true, {n} TB/s, {n} GB", "NPU:")
    assert_states("NPU:", nominal, device.nominal[0], "npu's peak_flops", "TFLOP/s")
    assert_states("NPU:", true, device.peak_flops, "npu's true_figures.peak_flops", "TFLOP/s")
    assert_states("NPU:", bandwidth, device.mem_bandwidth, "npu's mem_bandwidth", "TB/s")
    assert_states("NPU:", memory, device.memory, "npu's memory", "GB")
    faster = stated(cells[2], "true speed +{n}%", "NPU:")[0]
    assert_states("NPU:", faster, device.speed_ratio - 1, "npu's true / nominal - 1", "%",
                  rounded=True)


@pytest.mark.parametrize(("parameter", "field", "key"), [
    ("`op_efficiency.dense`", "op_efficiency", "dense"),
    ("`op_efficiency.attention`", "op_efficiency", "attention"),
    ("`op_efficiency.dynamic`", "op_efficiency", "dynamic"),
    ("`op_efficiency.preprocess`", "op_efficiency", "preprocess"),
    ("`pattern_efficiency.random`", "pattern_efficiency", "random"),
])
def test_an_efficiency_row_states_every_devices_value(parameter, field, key):
    hardware = _hardware()
    figures = per_device(row("Hardware", parameter)[1], parameter)
    assert sorted(figures) == sorted(hardware.device_names), (
        f"{DOC.name}, row {parameter!r} gives {sorted(figures)}, the devices are "
        f"{sorted(hardware.device_names)}")
    for name, text in figures.items():
        shipped = getattr(_device(hardware, name), field)[key]
        assert_states(parameter, text, shipped, f"{name}'s {field}.{key}")


def test_the_setup_row_states_every_devices_setup_time():
    hardware = _hardware()
    figures = per_device(row("Hardware", "`setup_s`")[1], "`setup_s`", unit="s")
    assert sorted(figures) == sorted(hardware.device_names)
    for name, text in figures.items():
        assert_states("`setup_s`", text, _device(hardware, name).setup_s, f"{name}'s setup_s", "s")


def test_the_cache_hit_rate_row_states_the_cpus_rates():
    where = "`cache_hit_rate`"
    sequential, random = stated(row("Hardware", where)[1], "cpu seq {n}, random {n}", where)
    rates = _device(_hardware(), "cpu").cache_hit_rate
    assert_states(where, sequential, rates["sequential"], "cpu's cache_hit_rate.sequential")
    assert_states(where, random, rates["random"], "cpu's cache_hit_rate.random")


# ---- Cost model --------------------------------------------------------------------------------

def test_the_window_row_states_the_cost_models_window():
    text = stated(row("Cost model", "window")[1], "{n} tokens", "window")[0]
    for variant in ("window", "gated"):
        assert_states("window", text, COST_PARAMS[variant]["window"],
                      f"COST_PARAMS[{variant!r}]['window']")


def test_the_pairwise_weight_row_states_its_flops_and_passes():
    where = "pairwise weight FLOPs / passes"
    flops, passes = stated(row("Cost model", where)[1], "{n} per pair and head, {n} passes", where)
    assert_states(where, flops, prefill.PAIR_WEIGHT_FLOPS, "prefill.PAIR_WEIGHT_FLOPS")
    assert_states(where, passes, prefill.PAIR_WEIGHT_PASSES, "prefill.PAIR_WEIGHT_PASSES")


def _kv_pattern(decoder: decode.HierarchicalDecode) -> str:
    """The access pattern the cost model prices a decoder's KV reads in."""
    work = decoder.work(Task(batch=1, prompt_tokens=64, output_tokens=8),
                        get_model(_scenario().model))
    return PATTERNS[next(part.pattern for part in work.parts if part.tag == "kv")]


def _assert_block_overhead(where: str, figures: list[str], block_size: int) -> None:
    """`figures` = the `{n}/{n} + {n}%` of a block decoder's summaries and table entries."""
    summaries, table = decode.block_read_overhead(get_model(_scenario().model), block_size)
    per, blocks, percent = figures
    assert_states(where, str(float(per) / float(blocks)), summaries,
                  "decode.block_read_overhead's summaries")
    assert_states(where, percent, table, "decode.block_read_overhead's block table", "%",
                  rounded=True)


def test_the_hierarchical_decode_row_states_its_extra_reads_and_layout():
    where = "hierarchical decode: block summaries + tables"
    _, value, why = row("Cost model", where)[:3]
    block_size = COST_PARAMS["hierarchical"]["block_size"]
    _assert_block_overhead(where, stated(value, "{n}/{n} + {n}% extra KV bytes", where),
                           block_size)
    pattern = _kv_pattern(build_stages("glm-5.3-flash")[2])
    assert f"{pattern} pattern" in value, f"{DOC.name}, row {where!r}: {pattern} pattern shipped"
    assert_states(where, stated(why, "block size {n}", where)[0], block_size,
                  "COST_PARAMS['hierarchical']['block_size']")
    model = get_model(_scenario().model)
    summaries, table = decode.block_read_overhead(model, block_size)
    block_bytes = decode.INDEX_ENTRY_BYTES / table   # a block's K and V, one layer
    figures = stated(why, "{n} x {n} tokens x {n} KV heads x {n} x {n} bytes = {n} KiB", where)
    *factors, kib = figures
    assert_states(where, str(math.prod(float(f) for f in factors)), block_bytes,
                  "a block's K and V bytes (decode.block_read_overhead)")
    _, tokens, heads, width, nbytes = factors
    assert_states(where, tokens, block_size, "COST_PARAMS['hierarchical']['block_size']")
    assert_states(where, heads, model.n_kv_heads, f"{model.name}'s n_kv_heads")
    assert_states(where, width, model.head_dim, f"{model.name}'s head_dim")
    assert_states(where, nbytes, model.dtype_bytes, f"{model.name}'s dtype_bytes")
    assert_states(where, kib, block_bytes, "a block's K and V bytes", "KiB")
    keys, halves, tokens = stated(why, "{n}/({n} x {n}) of that", where)
    assert_states(where, keys, decode.SUMMARY_KEYS_PER_BLOCK, "decode.SUMMARY_KEYS_PER_BLOCK")
    assert_states(where, tokens, block_size, "COST_PARAMS['hierarchical']['block_size']")
    assert_states(where, str(float(keys) / (float(halves) * float(tokens))), summaries,
                  "decode.block_read_overhead's summaries")
    bits = stated(why, "one int{n} physical block id", where)[0]
    assert_states(where, bits, decode.INDEX_ENTRY_BYTES, "decode.INDEX_ENTRY_BYTES", "bit")
    entry, kib = stated(why, "{n} B / {n} KiB", where)
    assert_states(where, entry, decode.INDEX_ENTRY_BYTES, "decode.INDEX_ENTRY_BYTES")
    assert_states(where, kib, block_bytes, "a block's K and V bytes", "KiB")

def test_the_prefetched_decode_row_states_its_extra_reads_and_pattern():
    where = "prefetched decode"
    value = row("Cost model", where)[1]
    pattern = _kv_pattern(build_stages("glm-5.3-flash-opt")[2])
    assert value.startswith(f"{pattern} pattern"), (
        f"{DOC.name}, row {where!r}: {value!r}; the {pattern} pattern is shipped")
    *overhead, mispredicted = stated(value, "({n}/{n} + {n}%), + {n}% mispredicted", where)
    _assert_block_overhead(where, overhead, COST_PARAMS["prefetched"]["block_size"])
    calibrated = stated(row("Cost model", where)[2], "The {n}% is calibrated", where)[0]
    for text in (mispredicted, calibrated):
        assert_states(where, text, decode.MISPREDICT_FRACTION, "decode.MISPREDICT_FRACTION", "%")


def test_the_loader_rows_state_its_bytes_and_ops():
    where = "loader:"
    raw, ops = stated(row("Cost model", where)[0],
                      "{n} raw bytes / token, {n} ops / byte preprocessing", where)
    assert_states(where, raw, load.RAW_BYTES_PER_TOKEN, "load.RAW_BYTES_PER_TOKEN")
    assert_states(where, ops, load.PREPROCESS_OPS_PER_BYTE, "load.PREPROCESS_OPS_PER_BYTE")
    where = "cache hit path:"
    parameter, value = row("Cost model", where)[:2]
    validate, apply = stated(parameter, "validate {n} + apply {n} ops / raw byte", where)
    assert_states(where, validate, load.VALIDATE_OPS_PER_BYTE, "load.VALIDATE_OPS_PER_BYTE")
    assert_states(where, apply, load.APPLY_OPS_PER_BYTE, "load.APPLY_OPS_PER_BYTE")
    share = (load.VALIDATE_OPS_PER_BYTE + load.APPLY_OPS_PER_BYTE) / load.PREPROCESS_OPS_PER_BYTE
    assert_states(where, stated(value, "{n} of a full preprocess", where)[0], share,
                  "load's (validate + apply) / preprocess ops")


# ---- Scenario ----------------------------------------------------------------------------------

def _scenario() -> Scenario:
    return load_scenario(section_file("Scenario"))


def test_the_arrival_and_replacement_rows_state_the_scenarios_values():
    scenario = _scenario()
    rate = stated(row("Scenario", "arrival rate")[1], "{n} tasks/s", "arrival rate")[0]
    assert_states("arrival rate", rate, scenario.workload.arrival_rate, "workload.arrival_rate",
                  "tasks/s")
    where = "replacement_overhead_s"
    overhead = stated(row("Scenario", where)[1], "{n} s", where)[0]
    assert_states(where, overhead, scenario.simulator.replacement_overhead_s,
                  "simulator.replacement_overhead_s", "s")


def test_the_batch_mix_row_states_the_batch_sizes():
    batch = _scenario().workload.batch
    value, why = row("Scenario", "batch mix")[1:3]
    low, high, percent, below = stated(value, "{n}..{n}, {n}% below {n}", "batch mix")
    article = stated(why, "{n}% of test cases", "batch mix")[0]
    assert batch.dist == "choice", f"the batch mix is {batch.dist}, not a choice of sizes"
    assert_states("batch mix", low, min(batch.values), "workload.batch's smallest value")
    assert_states("batch mix", high, max(batch.values), "workload.batch's largest value")
    weights = batch.weights or (1.0,) * len(batch.values)
    share = sum(w for v, w in zip(batch.values, weights, strict=True) if v < float(below))
    for text in (percent, article):
        assert_states("batch mix", text, share / sum(weights),
                      f"workload.batch's weight below {below}", "%")


def test_the_prompt_and_output_rows_state_their_distributions():
    workload = _scenario().workload
    prompts, outputs = workload.prompt_tokens, workload.output_tokens
    value, why = row("Scenario", "prompts")[1:3]
    mean, std = stated(value, "normal({n}, {n})", "prompts")
    thousands = stated(why, "{n}K-token inputs", "prompts")[0]
    assert_states("prompts", thousands, prompts.mean / 1000, "workload.prompt_tokens.mean / 1000",
                  rounded=True)
    assert prompts.dist == "normal", f"prompt_tokens are {prompts.dist}, the row says normal"
    assert_states("prompts", mean, prompts.mean, "workload.prompt_tokens.mean")
    assert_states("prompts", std, prompts.std, "workload.prompt_tokens.std")
    median, sigma = stated(row("Scenario", "outputs")[1], "log-normal, median {n}, sigma {n}",
                           "outputs")
    assert outputs.dist == "lognormal", f"output_tokens are {outputs.dist}, the row: log-normal"
    assert_states("outputs", median, outputs.median, "workload.output_tokens.median")
    assert_states("outputs", sigma, outputs.sigma, "workload.output_tokens.sigma")


def test_the_domains_row_states_the_domains_and_caches():
    scenario = _scenario()
    where = "domains / cache"
    domains, zipf, precomputed, shift, capacity = stated(
        row("Scenario", where)[1], "{n} domains, Zipf {n}; precomputed cache = {n} domains of a "
        "training mix shifted by {n} ranks; adaptive capacity {n}", where)
    assert_states(where, domains, scenario.workload.domains, "workload.domains")
    assert_states(where, zipf, scenario.workload.zipf, "workload.zipf")
    assert_states(where, precomputed, scenario.cache.precomputed_size, "cache.precomputed_size")
    assert_states(where, shift, scenario.cache.train_shift, "cache.train_shift")
    assert_states(where, capacity, scenario.cache.capacity, "cache.capacity")


# ---- Learner -----------------------------------------------------------------------------------
# The table gives the hyper-parameters of InferenceAlloc-v0, the article's env (the Split env's
# own are in the prose below it). SB3 comes in with the loader: imported here, not at the top.

def _hyperparams(agent: str, warm_start: bool = False) -> dict:
    from agents.sb3_hyperparams import load_hyperparams

    return load_hyperparams(agent, ENV_IDS[0], warm_start)


def test_the_learner_table_names_ppos_file():
    assert section_file("Learner").stem == "ppo"


def test_the_cold_ppo_rows_state_its_hyperparameters():
    cold = _hyperparams("ppo")
    where = "n_steps / batch_size"
    steps = stated(row("Learner", where)[1], "{n}", where)[0]
    assert_states(where, steps, cold["n_steps"], "ppo.yaml's n_steps")
    assert_states(where, steps, cold["batch_size"], "ppo.yaml's batch_size")
    for key in ("ent_coef", "learning_rate"):
        assert_states(key, stated(row("Learner", key)[1], "{n}", key)[0], cold[key],
                      f"ppo.yaml's {key}")


@pytest.mark.parametrize(("parameter", "agent"), [
    ("`warm_start: {learning_rate}`", "ppo"),
    ("DQN's `warm_start:", "dqn"),
    ("MaskablePPO's `warm_start:", "maskable-ppo"),
])
def test_a_warm_start_row_states_the_warm_values_and_the_cold_rate_they_replace(parameter, agent):
    cold, warm = _hyperparams(agent), _hyperparams(agent, warm_start=True)
    parameter_cell, value, why = row("Learner", parameter)[:3]
    keys = re.search(r"\{([^}]*)\}", parameter_cell)
    assert keys, f"{DOC.name}, row {parameter!r} names no warm_start keys"
    names = [key.strip() for key in keys.group(1).split(",")]
    changed = sorted(key for key in warm if warm[key] != cold.get(key))
    assert sorted(names) == changed, (f"{DOC.name}, row {parameter!r} names {names}; "
                                      f"{agent}.yaml's warm_start changes {changed}")
    if agent != "ppo":   # the table's own file is ppo.yaml; the other rows name theirs
        assert f"`{agent}.yaml`" in parameter_cell, f"row {parameter!r} names no {agent}.yaml"
    figures = stated(value, ", ".join(["{n}"] * len(names)), parameter)
    for key, text in zip(names, figures, strict=True):
        assert_states(parameter, text, warm[key], f"{agent}.yaml's warm_start.{key}")
    assert_states(parameter, stated(why, "at {n}", parameter)[0], cold["learning_rate"],
                  f"{agent}.yaml's learning_rate")


def test_the_dqn_row_states_the_cold_exploration_it_replaces():
    where = "DQN's `warm_start:"
    cold = _hyperparams("dqn")
    start, fraction = stated(row("Learner", where)[2],
                             "from epsilon {n} it acted at random over the clone for the first "
                             "{n}% of training", where)
    assert_states(where, start, cold["exploration_initial_eps"],
                  "dqn.yaml's exploration_initial_eps")
    assert_states(where, fraction, cold["exploration_fraction"],
                  "dqn.yaml's exploration_fraction", "%")


# ---- The article job --------------------------------------------------------------------------

@pytest.mark.parametrize(("parameter", "names"), [
    ("`JOB_CLIENTS`", ("JOB_CLIENTS",)),
    ("`JOB_TASKS`", ("JOB_TASKS",)),
    ("`JOB_TIME_SCALE`, `OPEN_LOOP_TASKS`", ("JOB_TIME_SCALE", "OPEN_LOOP_TASKS")),
])
def test_an_article_job_row_states_its_constants(parameter, names):
    from agents import article_job

    value, why = row("The article job", parameter)[1:3]
    figures = stated(value, ", ".join(["{n}"] * len(names)), parameter)
    for name, text in zip(names, figures, strict=True):
        assert_states(parameter, text, getattr(article_job, name), f"article_job.{name}")
    if "JOB_TIME_SCALE" in names:   # the why cell restates the open loop's speed-up
        assert_states(parameter, stated(why, "requests {n}x faster", parameter)[0],
                      article_job.JOB_TIME_SCALE, "article_job.JOB_TIME_SCALE")


def test_the_online_samples_row_states_the_studys_length():
    from agents import article

    text = stated(row("The article job", "online samples")[1], "{n}", "online samples")[0]
    assert_states("online samples", text, article.ONLINE_SAMPLES, "article.ONLINE_SAMPLES")


# ---- the checks themselves ---------------------------------------------------------------------

def test_a_renamed_row_fails_naming_it(tmp_path, monkeypatch):
    doc = tmp_path / "CALIBRATION.md"
    doc.write_text(DOC.read_text(encoding="utf-8").replace("| arrival rate |", "| arrivals |"),
                   encoding="utf-8")
    monkeypatch.setattr(f"{__name__}.DOC", doc)
    with pytest.raises(AssertionError, match="rows for parameter 'arrival rate'"):
        row("Scenario", "arrival rate")


def test_a_figure_that_differs_fails_naming_the_row_and_the_file():
    with pytest.raises(AssertionError, match=r"row 'x' states 0.5 s; npu's setup_s ships 4 s"):
        assert_states("x", "0.5", 4.0, "npu's setup_s", "s")
    with pytest.raises(AssertionError, match="ships 2.039 TB/s"):
        assert_states("x", "2.03", 2.039e12, "gpu's mem_bandwidth", "TB/s", rounded=True)


def _schema_example(doc: str) -> dict:
    """The YAML block of a module docstring's "schema ... ::" example, parsed."""
    import textwrap

    from inference.yamlio import safe_load

    block = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    return safe_load(textwrap.dedent(block))     # as the loaders read YAML: 6.9e9 a number


def test_the_schema_examples_state_the_figures_of_the_presets_they_name():
    """envs.scenario's example said `name: article` with another arrival rate (0.12, the
    preset's 0.022), batch mix and replacement overhead; inference.hardware's said `name:
    server` with an H100's figures beside the server's A100."""
    import envs.scenario
    import inference.hardware
    from inference.yamlio import safe_load

    example = _schema_example(envs.scenario.__doc__)
    preset = safe_load((Path(envs.scenario.__file__).parent / "scenarios" / "article.yaml").read_text())

    def same(shown: dict, real: dict, where: str) -> None:
        for key, value in real.items():
            if key == "description":
                continue
            assert key in shown, f"{where}{key}"
            if isinstance(value, dict):
                same(shown[key], value, f"{where}{key}.")
            else:
                assert shown[key] == value, f"{where}{key}: {shown[key]} != {value}"

    same(example, preset, "")
    example = _schema_example(inference.hardware.__doc__)
    server = safe_load((Path(inference.hardware.__file__).parent / "presets" / "server.yaml").read_text())
    assert (example["name"], example["disk_bandwidth"]) == (server["name"], server["disk_bandwidth"])
    (shown,) = example["devices"]
    real = next(d for d in server["devices"] if d["name"] == shown["name"])
    same(shown, {k: v for k, v in real.items() if k != "source"}, "devices[gpu].")
    (link,) = example["links"]
    assert link in server["links"]
