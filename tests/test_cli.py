"""`python -m inference` and the package's import surface."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inference.__main__ import build_parser, compare, main
from inference.hardware import load_hardware
from inference.messages import SHOWN_MAX, shown
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
])
def test_bad_input_exits_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


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
