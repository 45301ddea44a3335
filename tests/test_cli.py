"""`python -m inference` and the package's import surface."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from inference.__main__ import build_parser, compare, main
from inference.hardware import load_hardware
from inference.messages import SHOWN_MAX, did_you_mean, shown
from inference.model_config import get_model
from inference.simulator import Simulator
from inference.task import Task
from inference.variants import build_stages, resolve_variant

ROOT = Path(__file__).resolve().parent.parent


def test_flash_is_slower_than_glm_on_the_article_task():
    outcomes = compare(build_parser().parse_args([]))
    latency = {o.label: o.result.latency for o in outcomes}
    assert list(latency) == ["glm-5.3", "glm-5.3-flash", "glm-5.3-flash-opt"]
    assert latency["glm-5.3-flash"] > latency["glm-5.3"]
    assert latency["glm-5.3-flash-opt"] < latency["glm-5.3-flash"]


def test_the_table_names_every_variant_and_metric(capsys):
    assert main(["--variants", "glm-5.3,cached+window+sequential", "--cache-hit"]) == 0
    assert main(["--variants", "glm-5.3, cached + window + sequential"]) == 0
    out = capsys.readouterr().out
    for text in ("glm-5.3", "cached+window+sequential", "memory stall", "attention share",
                 "KV wait", "vs glm-5.3", "hit", "load=cached (CachedLoad)"):
        assert text in out


def test_a_variant_given_twice_is_one_column(capsys):
    """glm-5.3,glm-5.3 (or the recipe spelt out, direct+window+sequential) printed two
    identical columns under one name."""
    assert main(["--variants", "glm-5.3,glm-5.3-flash,glm-5.3, direct+window+sequential"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "glm-5.3-flash" in line)
    assert header.split().count("glm-5.3") == 1 and header.split().count("glm-5.3-flash") == 1
    assert out.count("glm-5.3: load=direct") == 1


def test_a_stage_too_big_for_its_device_is_named(capsys):
    """The simulator prices any placement; the table says which stages would not fit."""
    assert main(["--variants", "glm-5.3", "--batch", "100000", "--prompt-tokens", "100000",
                 "--placement", "cpu,gpu,npu"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1
    assert "prefill on gpu needs" in notes[0] and "decode on npu needs" in notes[0]
    assert "load on cpu" not in notes[0]       # the direct loader holds no batch-sized buffer
    # 100000 x 100000 tokens fit no device: the envs run such a stage on the device with the
    # most memory, not "a device that holds it" (there is none)
    largest = max(load_hardware("server").devices, key=lambda device: device.memory)
    assert (f"no device holds prefill, decode: the envs would run such a stage on "
            f"{largest.name}, the device with the most memory") in notes[0]
    assert main(["--variants", "glm-5.3"]) == 0   # the article task fits: no note
    assert "note:" not in capsys.readouterr().out


def test_the_note_says_a_stage_that_fits_another_device_moves_there(capsys):
    """A prefill too big for the GPU that the CPU's memory holds: the envs move it there."""
    argv = ["--variants", "glm-5.3", "--batch", "64", "--prompt-tokens", "200000"]
    sim = Simulator(load_hardware("server"), get_model("glm-9b"),
                    build_stages(resolve_variant("glm-5.3")))
    need = sim.stages[1].work(Task(64, 200000, 256), sim.model).memory_need(
        sim.model.weight_bytes)
    memory = {device.name: device.memory for device in sim.hardware.devices}
    assert memory["gpu"] < need <= memory["cpu"]      # the case this test is about
    assert main(argv) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "prefill on gpu needs" in notes[0]
    assert notes[0].endswith("the envs would move it to a device that holds it, at the "
                             "failed-dispatch cost)")


def test_the_note_says_the_envs_refuse_hardware_holding_the_weights_nowhere(tmp_path, capsys):
    """Where no device holds the weights, the envs refuse the hardware outright (they do not
    move the stage), and the note says so instead of a dispatch the envs would never run."""
    import yaml

    from inference.hardware import PRESET_DIR
    profile = yaml.safe_load((PRESET_DIR / "edge.yaml").read_text())
    for device in profile["devices"]:
        device["memory"] = 1e9
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(profile))
    assert main(["--variants", "glm-5.3", "--hardware", str(path)]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1
    assert notes[0].endswith(f"(the envs refuse hardware {profile['name']} for model glm-9b: "
                             f"no device holds its weights)")


def test_forcing_the_cache_changes_the_load_time():
    def load(flag: str) -> float:
        args = build_parser().parse_args(["--variants", "glm-5.3-flash", flag])
        return compare(args)[0].result.load

    assert load("--cache-hit") < load("--cache-miss")


@pytest.mark.parametrize(("argv", "message"), [
    (["--prompt-tokens", "0"], "prompt_tokens"),
    (["--output-tokens", "-5"], "output_tokens"),
    (["--placement", "cpu,tpu,gpu"], "unknown device 'tpu'"),
    (["--placement", "cpu,gpu"], "one device per stage"),
    (["--placement", "\u00b2,gpu,gpu"], "unknown device '\u00b2'"),   # a digit int() refuses
    (["--hardware", "mainframe"], "unknown hardware 'mainframe'"),
    (["--variants", "glm-6"], "unknown variant 'glm-6'"),
    (["--variants", "cached+window"], "one implementation per stage"),
    # no variant has a loading cache to force: the flag changed nothing, unannounced
    (["--variants", "glm-5.3", "--cache-hit"],
     "--cache-hit: no variant of --variants glm-5.3 has a loading cache"),
    (["--variants", "direct+window+sequential", "--cache-miss"],
     "--cache-miss: no variant of --variants direct+window+sequential has a loading cache"),
])
def test_bad_input_exits_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_count_takes_a_whole_number_in_float_notation():
    """--prompt-tokens 1e4 was an "invalid int value", as train.py's --timesteps 1e5 was."""
    args = build_parser().parse_args(["--prompt-tokens", "1e4", "--batch", "16.0"])
    assert (args.prompt_tokens, args.batch) == (10_000, 16)
    assert type(args.prompt_tokens) is int and type(args.batch) is int
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--batch", "2.5"])


def test_the_default_placement_on_hardware_without_its_devices_says_to_give_placement(
        cpu_npu_hardware, capsys):
    """The default cpu,gpu,gpu on a profile without a device named gpu was 'unknown device
    'gpu'': a user who gave no --placement could not tell where 'gpu' came from."""
    path = cpu_npu_hardware
    assert main(["--hardware", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "default --placement cpu,gpu,gpu" in err and "give --placement" in err, err
    assert "devices: cpu, npu" in err, err
    assert main(["--hardware", str(path), "--placement", "cpu,npu,npu"]) == 0


def test_python_m_inference_runs_and_import_stays_light():
    run = subprocess.run([sys.executable, "-m", "inference"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert all(v in run.stdout for v in ("glm-5.3-flash-opt", "glm-5.3-flash", "vs glm-5.3"))
    probe = ("import sys, inference; "
             "print(sorted(m for m in ('torch', 'gymnasium', 'stable_baselines3', 'envs', "
             "'agents') if m in sys.modules))")
    imported = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
    assert imported.stdout.strip() == "[]", imported.stderr


LONG = "y" * 2500 + "z" * 2500   # its head and its tail differ


@pytest.mark.parametrize("args", [
    ["--variants", LONG], ["--variants", f"adaptive+{LONG}+prefetched"],
    ["--placement", f"{LONG},gpu,gpu"], ["--placement", LONG], ["--hardware", LONG],
    ["--domain", LONG], [LONG], ["--model", LONG],
])
def test_a_huge_value_is_shown_shortened_in_the_error(args, capsys):
    """A 5000-character value was echoed whole, burying the message: it is cut to its head and
    tail, saying how many characters were left out."""
    try:
        assert main(args) == 2
    except SystemExit as exc:   # argparse's own refusal (--domain, --model, an extra value)
        assert exc.code == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert len(err) < 400 and "characters elided]" in err, err
    assert "y" * 30 in err and "z" * 30 in err, err


def test_a_huge_model_name_is_refused_in_one_short_line_naming_the_option(capsys):
    """argparse's `choices` echoed a refused --model whole: 10000 characters of error."""
    with pytest.raises(SystemExit) as exc:
        main(["--model", "m" * 10000])
    assert exc.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if "m" * 30 in line]
    assert len(lines) == 1 and len(lines[0]) < 300, lines
    assert "--model" in lines[0] and "characters elided]" in lines[0]
    assert "known models: glm-9b" in lines[0]


HUGE_INT = "9" * 4000      # int() takes it (its limit is 4300 digits)


@pytest.mark.parametrize(("argv", "names"), [
    (["--batch", "-" + HUGE_INT], "Task.batch"),
    (["--domain", "-" + HUGE_INT], "Task.domain"),
    (["--placement", f"cpu,gpu,{HUGE_INT}"], "placement[decode]"),
    (["--placement", f"cpu,gpu,{HUGE_INT * 2}"], "unknown device"),   # past int()'s limit
])
def test_a_huge_number_is_shown_shortened_in_the_error(argv, names, capsys):
    """The checks behind the CLI echoed a 4000-digit number whole; past int()'s limit the
    placement's error was int()'s own, naming neither the option nor the value."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and len(err) < 300, err
    assert names in err and "characters elided]" in err, err


def test_shown_keeps_a_normal_value_whole_and_cuts_a_huge_one():
    assert shown("edge") == "'edge'" and shown(Path("a/b.yaml")) == "'a/b.yaml'"
    assert shown("a/b", quote=False) == "a/b" and shown([1, 2]) == "[1, 2]"
    assert shown("x" * 150) == repr("x" * 150)
    text = "h" * 100 + "m" * 4800 + "t" * 100
    short = shown(text)
    head, rest = short.split("...[")
    count, tail = rest.split(" characters elided]...")
    assert head == repr(text)[:len(head)] and tail == repr(text)[-len(tail):]
    assert len(head) + int(count) + len(tail) == len(repr(text)) and len(short) <= SHOWN_MAX


def test_shown_keeps_the_first_half_and_last_quarter_of_a_value_past_its_limit():
    """As documented: up to `limit` characters whole; a longer one cut to the first half and the
    last quarter of the limit (SHOWN_MAX is long enough for one character more to be cut)."""
    assert shown("w" * SHOWN_MAX, quote=False) == "w" * SHOWN_MAX
    assert "elided" in shown("w" * (SHOWN_MAX + 1), quote=False)
    for limit in (SHOWN_MAX, 100, 41):
        assert shown("w" * limit, quote=False, limit=limit) == "w" * limit
        text = "".join(chr(ord("a") + i % 26) for i in range(2 * limit))
        head, rest = shown(text, quote=False, limit=limit).split("...[")
        tail = rest.split(" characters elided]...")[1]
        assert (head, tail) == (text[:limit // 2], text[len(text) - limit // 4:])


def test_an_elision_that_saves_nothing_shows_the_value_whole():
    """A value just past a small limit is no shorter with its middle elided: it is shown whole,
    and a shortened one is always strictly shorter than the value."""
    for length in range(9, 120):
        text = "v" * length
        short = shown(text, quote=False, limit=8)
        assert short == text or len(short) < len(text)


# --- what the table prints -------------------------------------------------------------------

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def printed_table(out: str) -> dict[str, list[str]]:
    """The printed table as {metric: cells}, the variant labels under "": the rich table's rows
    between its borders, or the plain one's columns (two or more spaces apart), which run from
    the line under the title to the first recipe line ("label: load=...")."""
    lines = out.splitlines()[1:]
    if any(line.startswith("┃") for line in lines):
        rows = [[c.strip() for c in re.split("[│┃]", line)[1:-1]]
                for line in lines if line.startswith(("│", "┃"))]
    else:
        table = lines[:next(i for i, line in enumerate(lines) if ": load=" in line)]
        rows = [[""] + table[0].split()] + [re.split(r"\s{2,}", line.strip()) for line in table[1:]]
    return {row[0]: row[1:] for row in rows}


def seconds(cell: str) -> float:
    """'160.166 ms' -> 0.160166, checking the unit keeps the figure in [1, 1000)."""
    if cell == "0":
        return 0.0
    number, unit = cell.split()
    assert 1 <= abs(float(number)) < 1000 or unit == "ns", cell
    return float(number) * UNITS[unit]


@pytest.mark.parametrize("table", ["rich", "plain"])
def test_the_table_prints_each_variants_figures(table, capsys, monkeypatch):
    """Every cell is its variant's result: the times in a unit that keeps them in [1, 1000),
    the six parts adding up to the latency, the attention share of load + compute + memory
    stall, the cache's outcome and the latency relative to the first variant. Piped (not a
    terminal, 80 columns), four variants' columns are printed whole, not squeezed."""
    monkeypatch.setenv("COLUMNS", "80")
    if table == "plain":   # rich not installed: the plain-text fallback
        monkeypatch.setitem(sys.modules, "rich.console", None)
    argv = ["--variants", "glm-5.3,glm-5.3-flash,glm-5.3-flash-opt,adaptive+window+prefetched",
            "--cache-hit"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    rows = printed_table(out)
    outcomes = compare(build_parser().parse_args(argv))
    first = outcomes[0].result.latency
    assert rows[""] == [o.label for o in outcomes]
    parts = ("overhead", "queue", "load", "transfer", "compute", "memory stall")
    for k, o in enumerate(outcomes):
        r = o.result
        assert seconds(rows["latency"][k]) == pytest.approx(r.latency, rel=1e-3)
        for part in parts:
            assert seconds(rows[part][k]) == pytest.approx(r.breakdown()[part.replace(" ", "_")],
                                                            rel=1e-3)
        assert sum(seconds(rows[part][k]) for part in parts) == pytest.approx(r.latency, rel=1e-3)
        assert seconds(rows["attention"][k]) == pytest.approx(r.attention, rel=1e-3)
        assert seconds(rows["KV wait"][k]) == pytest.approx(r.kv_wait, rel=1e-3)
        share = 100 * r.attention / (r.load + r.compute + r.memory_stall)
        assert float(rows["attention share"][k].removesuffix("%")) == pytest.approx(share, abs=0.05)
        assert rows["cache"][k] == {None: "n/a", True: "hit", False: "miss"}[r.cache_hit]
        assert float(rows["vs glm-5.3"][k].removesuffix("x")) == pytest.approx(r.latency / first,
                                                                               abs=0.005)
    assert [rows["cache"][k] for k in (0, 1)] == ["n/a", "hit"]   # both outcomes are shown
    assert "0" in rows["queue"]                                    # ... and a zero time
    lines = out.splitlines()
    if table == "plain":   # right-aligned columns under the labels: every line as long
        table_lines = lines[1:next(i for i, line in enumerate(lines) if ": load=" in line)]
        assert len({len(line) for line in table_lines}) == 1, table_lines
    else:                  # a rule under the breakdown and under the attention figures only
        rules = [lines[i - 1] for i, line in enumerate(lines) if line.startswith("├")]
        assert [rule.split("│")[1].strip() for rule in rules] == ["memory stall", "KV wait"]


def test_times_are_shown_in_the_largest_unit_they_reach():
    from inference.__main__ import fmt_time

    assert [fmt_time(t) for t in (0, 1.0, 0.25, 1e-3, 2.5e-5, 1e-6, 4.2e-9, 1234.5)] == [
        "0", "1.000 s", "250.000 ms", "1.000 ms", "25.000 us", "1.000 us", "4.200 ns",
        "1234.500 s"]


@pytest.mark.parametrize(("flag", "said"), [
    ([], "cache as a fresh simulator has it"),
    (["--cache-hit"], "cache forced hit (variants that have one)"),
    (["--cache-miss"], "cache forced miss (variants that have one)"),
])
def test_the_title_says_how_the_cache_was_set(flag, said, capsys):
    assert main(["--variants", "glm-5.3-flash", *flag]) == 0
    title = capsys.readouterr().out.splitlines()[0]
    assert title.endswith(f"| {said}"), title


def test_no_flags_price_the_packages_example_task():
    """The defaults are the task inference's docstring prices (and Task's default domain)."""
    args = build_parser().parse_args([])
    example = Task(batch=16, prompt_tokens=5000, output_tokens=256)
    assert Task(args.batch, args.prompt_tokens, args.output_tokens, args.domain) == example


def edge_profile(tmp_path: Path, memory: dict[str, float], drop: str = "") -> str:
    """The edge preset with the devices' memory set (bytes) and, optionally, one device left out."""
    import yaml

    from inference.hardware import PRESET_DIR
    raw = yaml.safe_load((PRESET_DIR / "edge.yaml").read_text(encoding="utf-8"))
    raw["devices"] = [d for d in raw["devices"] if d["name"] != drop]
    raw["links"] = [link for link in raw["links"] if drop not in link["between"]]
    for device in raw["devices"]:
        device["memory"] = float(memory.get(device["name"], device["memory"]))
    path = tmp_path / "edge-memory.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return str(path)


def test_the_default_placement_names_the_first_device_the_hardware_lacks(tmp_path, capsys):
    """Without a cpu (but with a gpu) the default cpu,gpu,gpu's missing device is the cpu."""
    assert main(["--hardware", edge_profile(tmp_path, {}, drop="cpu")]) == 2
    err = capsys.readouterr().err
    assert "names device 'cpu'" in err and "devices: gpu, npu" in err, err


def test_the_notes_envs_rule_holds_a_need_of_exactly_a_devices_memory(tmp_path, capsys):
    """As the envs (need <= memory fits; weights > the most memory refuses): weights of
    exactly the largest memory are held, and a stage needing exactly it fits that device."""
    model = get_model("glm-9b")
    sim = Simulator(load_hardware("edge"), model, build_stages(resolve_variant("glm-5.3")))
    prefill = sim.stages[1].work(Task(16, 5000, 256), model).memory_need(model.weight_bytes)
    decode = sim.stages[2].work(Task(16, 5000, 256), model).memory_need(model.weight_bytes)
    assert model.weight_bytes < min(prefill, decode)     # the cases below rest on it

    def note(memory: dict[str, float], placement: str) -> str:
        argv = ["--variants", "glm-5.3", "--hardware", edge_profile(tmp_path, memory),
                "--placement", placement]
        assert main(argv) == 0
        (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("note:")]
        return line

    weights = float(model.weight_bytes)
    held = note(dict.fromkeys(("cpu", "gpu", "npu"), weights), "cpu,gpu,gpu")
    assert "no device holds prefill, decode" in held and "refuse" not in held, held
    fits = note({"cpu": weights, "gpu": prefill, "npu": weights}, "cpu,gpu,npu")
    assert f"decode on npu needs {decode / 1e9:,.0f} GB of its {weights / 1e9:,.0f} GB" in fits
    assert "prefill on" not in fits, fits
    assert fits.endswith("the envs would move it to a device that holds it, at the "
                         "failed-dispatch cost)"), fits


def test_did_you_mean_names_the_nearest_valid_name_only_when_one_is_near():
    assert did_you_mean(["episode_task"], ["name", "episode_tasks"]) == \
        " (did you mean 'episode_tasks'?)"
    assert did_you_mean(["lr"], ["learning_rate"]) == ""        # nothing alike: no guess
    assert did_you_mean([5], ["5"]) == ""                      # a YAML key that is no string
    # several unknown names: each near one named with its guess, the others left out
    assert did_you_mean(["a_x", "episode_task", "gpus"], ["episode_tasks", "gpu"]) == \
        " (did you mean 'episode_tasks' for 'episode_task', 'gpu' for 'gpus'?)"


def test_did_you_mean_with_prefixes_gives_a_name_the_one_choice_it_begins():
    flags = ["--timesteps", "--log-dir", "--log-every"]
    assert did_you_mean(["--time"], flags) == ""                # too unlike for difflib alone
    assert did_you_mean(["--time"], flags, prefixes=True) == " (did you mean '--timesteps'?)"
    # beginning two: the nearest by difflib, if any is near
    assert did_you_mean(["--log"], flags, prefixes=True) == ""
    assert did_you_mean(["--log-di"], flags, prefixes=True) == " (did you mean '--log-dir'?)"


def test_did_you_mean_ignoring_case_guesses_as_the_choices_spell_it():
    """Names read in any case (agent names, all-<device> of a hardware YAML's A100) compare
    lower-cased, and the guess keeps the choice's own spelling."""
    assert did_you_mean(["ALL-A10"], ["heft", "all-A100"], ignore_case=True) == \
        " (did you mean 'all-A100'?)"
    assert did_you_mean(["HEFT_CALIBRATED"], ["heft-calibrated"], ignore_case=True) == \
        " (did you mean 'heft-calibrated'?)"
    assert did_you_mean(["ALL-A10"], ["all-A100"]) == ""       # case counts unless ignored


def _error_of(build) -> str:
    with pytest.raises(ValueError) as err:      # ConfigError and UnknownPolicyName are ValueErrors
        build()
    return str(err.value)


@pytest.mark.parametrize("site", ["scenario key", "hardware key", "scenario preset",
                                  "hardware preset", "variant", "implementation", "device",
                                  "train option", "hyper-parameter", "train agent", "baseline",
                                  "warm-up part", "env id", "trace", "model"])
def test_each_unknown_name_error_puts_the_nearest_valid_name_first(site, tmp_path):
    """Among twenty options or agent names the one meant was hard to find: each error of a
    mistyped name guesses it, before its list of every valid one (still there)."""
    import yaml

    from agents.config import TrainConfig
    from agents.config_parsing import read_yaml_options
    from agents.evaluation import make_env
    from agents.registry import make_fixed_policy
    from agents.run_plan import plan
    from agents.sb3_hyperparams import check_keys
    from agents.warmup import WarmupConfig
    from envs.inference_alloc import InferenceAllocEnv
    from envs.scenario import load_scenario
    from inference.hardware import PRESET_DIR, hardware_from_dict

    server = yaml.safe_load((PRESET_DIR / "server.yaml").read_text())
    server["disk_bandwith"] = server.pop("disk_bandwidth")
    (tmp_path / "c.yaml").write_text("episode_task: 5\n")
    builds = {
        "scenario key": (lambda: load_scenario({"name": "x", "episode_task": 5}), "episode_tasks"),
        "hardware key": (lambda: hardware_from_dict(server), "disk_bandwidth"),
        "scenario preset": (lambda: load_scenario("artcle"), "article"),
        "hardware preset": (lambda: load_hardware("sever"), "server"),
        "variant": (lambda: resolve_variant("glm-5.3-flsh"), "glm-5.3-flash"),
        "implementation": (lambda: resolve_variant({"load": "cachd", "prefill": "window",
                                                    "decode": "sequential"}), "cached"),
        "device": (lambda: load_hardware("server").device_id("gpus"), "gpu"),
        "train option": (lambda: read_yaml_options(TrainConfig, tmp_path / "c.yaml"),
                         "episode_tasks"),
        "hyper-parameter": (lambda: check_keys("ppo", {"learning_rat": 0.1}), "learning_rate"),
        "train agent": (lambda: plan(TrainConfig(agents=["ppo2"])), "ppo"),
        "baseline": (lambda: make_fixed_policy("HEFT_CALIBRATED", InferenceAllocEnv(),
                                               "baseline"), "heft-calibrated"),
        "warm-up part": (lambda: WarmupConfig.from_parts("clon"), "clone"),
        "env id": (lambda: make_env("InferenceAlloc-v1", "article"), "InferenceAlloc-v0"),
        "trace": (lambda: InferenceAllocEnv({"name": "x", "workload": {"trace": "azure-cod"}}),
                  "azure-code"),
        "model": (lambda: get_model("glm9b"), "glm-9b"),
    }
    build, meant = builds[site]
    message = _error_of(build)
    assert f"(did you mean {meant!r}?)" in message, message
    guess = message.index("did you mean")
    assert meant in message[guess + len(meant) + 16:], message      # and the full list after it


@pytest.mark.parametrize("encoding, said", [("cp1252", "hw\\u2192"), ("utf-8", "hw\u2192")])
def test_a_path_the_console_cannot_show_is_escaped_not_the_end_of_the_table(
        encoding, said, tmp_path, monkeypatch):
    """On a stdout in cp1252 (Windows, the output redirected) a hardware path with an arrow in
    its title raised UnicodeEncodeError: no table, a traceback, exit 1. It is escaped, as
    stderr escapes; a UTF-8 stdout prints it as it is; the stream's handler is back after."""
    import io

    from inference.hardware import PRESET_DIR

    folder = tmp_path / "hw\u2192"
    folder.mkdir()
    (folder / "server.yaml").write_bytes((PRESET_DIR / "server.yaml").read_bytes())
    stdout = io.TextIOWrapper(io.BytesIO(), encoding=encoding)
    monkeypatch.setattr(sys, "stdout", stdout)
    assert main(["--variants", "glm-5.3", "--hardware", str(folder / "server.yaml")]) == 0
    assert stdout.errors == "strict"
    stdout.flush()
    out = stdout.buffer.getvalue().decode(encoding)
    assert f"hardware {tmp_path}{os.sep}{said}{os.sep}server.yaml" in out
    assert "glm-5.3: load=" in out   # the recipe lines, printed after the table


def test_a_stdout_that_need_not_or_cannot_be_reconfigured_is_left_as_it_is(monkeypatch):
    """printable_stdout changes a strict stream's handler alone: a notebook's stream, strict
    but without reconfigure, prints as it does (no TypeError from a missing method), and one
    whose handler is another ("replace") keeps it."""
    import io

    from inference.messages import printable_stdout

    class NotebookStream(io.StringIO):
        errors = "strict"

    notebook = NotebookStream()
    monkeypatch.setattr(sys, "stdout", notebook)
    with printable_stdout():
        print("a \u2192 b")
    assert notebook.getvalue() == "a \u2192 b\n"
    replacing = io.TextIOWrapper(io.BytesIO(), encoding="cp1252", errors="replace")
    monkeypatch.setattr(sys, "stdout", replacing)
    with printable_stdout():
        print("a \u2192 b")
    replacing.flush()
    assert replacing.errors == "replace" and replacing.buffer.getvalue() == b"a ? b\n"


def test_printable_stdout_restores_the_handler_past_an_error_and_stands_a_reader_gone(
        monkeypatch):
    """The strict handler is back after an error inside, which goes on as raised; and a reader
    gone (train.py | head) or a stream closed, met as the handler is restored (it flushes
    first), is no second error over the CLI's own status."""
    import io

    from inference.messages import printable_stdout

    stdout = io.TextIOWrapper(io.BytesIO(), encoding="cp1252")
    monkeypatch.setattr(sys, "stdout", stdout)
    with pytest.raises(KeyError), printable_stdout():
        raise KeyError("mine")
    assert stdout.errors == "strict"

    class GoneReader(io.RawIOBase):
        gone = True

        def writable(self) -> bool:
            return True

        def write(self, data) -> int:
            if self.gone:
                raise BrokenPipeError(32, "Broken pipe")
            return len(data)

    reader = GoneReader()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(reader),
                                                        encoding="cp1252"))
    with printable_stdout():
        print("a \u2192 b")      # buffered: written, and refused, as the handler is restored
    reader.gone = False          # the stream's own flush, as it is collected, goes through
    closed = io.TextIOWrapper(io.BytesIO(), encoding="cp1252")
    monkeypatch.setattr(sys, "stdout", closed)
    with printable_stdout():
        closed.close()


def test_python_m_inference_takes_whole_flags_only_and_names_the_one_meant(capsys):
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["--batc", "3"])
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "error: unrecognized arguments: --batc 3 (did you mean '--batch'?)")
    assert build_parser().parse_args(["--batch=3"]).batch == 3


def test_a_whole_number_is_an_integer_or_a_float_of_one_and_never_a_bool():
    """inference.checks.is_whole: what config files and --hp take for a count (YAML reads 1e5
    as a float)."""
    import numpy as np

    from inference.checks import is_whole

    assert all(is_whole(v) for v in (3, 1e5, 200.0, np.int64(4), np.float32(8.0), 0))
    assert not any(is_whole(v) for v in (1.5, float("inf"), float("nan"), True, np.bool_(True),
                                         "3", None))


@pytest.mark.parametrize("flag", ["--batch", "--prompt-tokens", "--output-tokens"])
def test_a_size_past_the_scenarios_cap_is_refused_naming_the_option(flag, capsys):
    """The counts had no upper limit: --batch 1e300 exited 0, printing "latency inf s" and
    "queue nan ns". The cap is the one scenarios and traces put on a size."""
    from inference.task import MAX_SIZE
    with pytest.raises(SystemExit) as exc:
        main([flag, "1e300"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f"python -m inference: error: argument {flag}: must be at most "
                   f"{MAX_SIZE:,.0f} (the scenarios' and traces' cap on a size), got '1e300'")
    with pytest.raises(SystemExit):
        main([flag, str(int(MAX_SIZE) + 1)])
    args = build_parser().parse_args([flag, "1e9"])   # the cap itself is taken
    assert getattr(args, flag[2:].replace("-", "_")) == int(MAX_SIZE)


def test_a_placement_cannot_mean_a_device_named_by_digits(tmp_path, capsys):
    """A device named '2' loaded; --placement 2,gpu,gpu then ran on device id 2 (the npu),
    while evaluate.py's static:2,gpu,gpu read the name: the hardware refuses such a name."""
    path = tmp_path / "digits.yaml"
    path.write_text((ROOT / "inference" / "presets" / "server.yaml").read_text(encoding="utf-8")
                    .replace("name: cpu", "name: '2'").replace("[cpu,", "['2',"),
                    encoding="utf-8")
    assert main(["--hardware", str(path), "--placement", "2,gpu,gpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "digits.yaml: devices[0].name must not be all digits" \
        in err, err


def _huge_int_file(tmp_path: Path, key: str, text: str = "") -> tuple[Path, int]:
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    if not limit:
        pytest.skip("this Python puts no limit on int() of a string")
    path = tmp_path / "huge.yaml"
    path.write_text(f"{text}{key}: 1{'0' * limit}\n", encoding="utf-8")
    return path, limit


@pytest.mark.parametrize("job", ["train", "evaluate"])
def test_a_config_number_past_the_digit_limit_exits_2_naming_file_and_option(
        job, tmp_path, capsys):
    """`timesteps: 1000...0` (4401 digits) in a --config file was a traceback, exit 1: PyYAML's
    int() of it raised a ValueError no reader caught."""
    from agents import evaluate_cli, train_cli
    path, limit = _huge_int_file(tmp_path, "timesteps" if job == "train" else "episodes")
    cli = train_cli if job == "train" else evaluate_cli
    assert cli.main(["--config", str(path)], prog=f"{job}.py") == 2
    err = capsys.readouterr().err.strip()
    key = "timesteps" if job == "train" else "episodes"
    assert err == (f"{job}.py: error: config file {path} is not valid YAML at line 1, column "
                   f"{len(key) + 3}: {key}: a number of more than {limit} digits"), err


def test_a_scenario_or_override_number_past_the_digit_limit_names_where(tmp_path, capsys):
    """Int()'s own refusal ("Exceeds the limit (4300 digits) for integer string conversion ...
    use sys.set_int_max_str_digits()") named neither the file nor the field."""
    from agents import train_cli
    path, limit = _huge_int_file(tmp_path, "  prompt_tokens", "name: huge\nworkload:\n")
    assert train_cli.main(["--scenario", str(path)], prog="train.py") == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"train.py: error: scenario file {path}: malformed YAML at line 3, column "
                   f"18: prompt_tokens: a number of more than {limit} digits"), err
    assert train_cli.main(["--hp", f"n_steps=1{'0' * limit}"], prog="train.py") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "hyper-parameter override 'n_steps=" in err
    assert err.endswith(f"value is not valid YAML (line 1, column 1: a number of more than "
                        f"{limit} digits)"), err
