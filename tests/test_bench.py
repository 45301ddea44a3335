"""The bench/ scripts' command lines (their figures are timings, which no test checks)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def bench_main(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_bench", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.mark.parametrize(("placement", "message"), [
    ("cpu,npx,gpu", "unknown device 'npx'"),
    ("cpu,gpu", "one device per stage"),
])
def test_a_bad_simulator_placement_is_a_usage_error_before_any_timing(placement, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench_main("bench_simulator")(["--placement", placement, "--runs", "1", "--repeats", "1"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and message in err and out == ""


def test_the_simulator_bench_takes_device_ids_as_python_m_inference_does(capsys):
    bench_main("bench_simulator")(["--placement", "0,1,1", "--runs", "2", "--repeats", "1"])
    assert "placement 0,1,1" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["bench_env", "bench_planning", "bench_simulator"])
def test_every_bench_option_shows_its_default(name, capsys):
    with pytest.raises(SystemExit):
        bench_main(name)(["--help"])
    listed = capsys.readouterr().out.split("options:", 1)[1]
    entries = " ".join(listed.split()).split(" --")[1:]     # one per option; lines unwrapped
    assert len(entries) >= 3 and entries[0].startswith("help ")
    for entry in entries[1:]:
        assert "(default:" in entry, f"{name}: --{entry}"
