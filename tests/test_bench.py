"""The bench/ scripts' command lines (their figures are timings, which no test checks)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def bench_module(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_bench", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_main(name: str):
    return bench_module(name).main


@pytest.mark.parametrize(("placement", "message"), [
    ("cpu,npx,gpu", "unknown device 'npx'"),
    ("cpu,gpu", "one device per stage"),
])
def test_a_bad_simulator_placement_is_a_usage_error_before_any_timing(placement, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench_main("bench_simulator")(["--placement", placement, "--runs", "1", "--repeats", "1"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and message in err and out == ""


@pytest.mark.parametrize("args", [["--duration", "nan"], ["--duration", "inf"],
                                  ["--seed", "-1"], ["--profile", "-3"]])
def test_a_bad_env_bench_option_is_a_usage_error_before_any_timing(args, capsys, monkeypatch):
    """--duration nan or inf timed forever, --seed -1 failed inside gymnasium after a
    timing, --profile -3 printed an empty profile."""
    spec = importlib.util.spec_from_file_location("be", ROOT / "bench" / "bench_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def timed(*_args, **_kwargs):
        raise AssertionError("timed an env")

    monkeypatch.setattr(module, "throughput", timed)
    with pytest.raises(SystemExit) as exit_:
        module.main([*args, "--repeats", "1"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and "--duration must be a finite number" in err and out == ""


def test_the_simulator_bench_takes_device_ids_as_python_m_inference_does(capsys):
    bench_main("bench_simulator")(["--placement", "0,1,1", "--runs", "2", "--repeats", "1"])
    assert "placement 0,1,1" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["bench_env", "bench_planning", "bench_simulator", "bench_traces",
                                  "bench_training"])
def test_every_bench_option_shows_its_default(name, capsys):
    with pytest.raises(SystemExit):
        bench_main(name)(["--help"])
    listed = capsys.readouterr().out.split("options:", 1)[1]
    entries = " ".join(listed.split()).split(" --")[1:]     # one per option; lines unwrapped
    assert len(entries) >= 3 and entries[0].startswith("help ")
    for entry in entries[1:]:
        assert "(default:" in entry, f"{name}: --{entry}"


def test_the_trace_bench_reads_what_it_wrote(capsys):
    bench_main("bench_traces")(["--rows", "500", "--repeats", "1"])
    out = capsys.readouterr().out
    assert out.startswith("500 rows") and "read_trace:" in out and "B/row" in out


def test_the_trace_bench_writes_the_2024_format_that_read_trace_takes(tmp_path):
    spec = importlib.util.spec_from_file_location("bt", ROOT / "bench" / "bench_traces.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = tmp_path / "t.csv"
    module.write_trace(path, 50)
    lines = path.read_text().splitlines()[1:]
    assert all(line.split(",")[0].endswith("+00:00") for line in lines)
    assert any("." not in line.split(",")[0] for line in lines)   # whole seconds, no fraction
    from envs.traces import read_trace
    assert len(read_trace(path)) == 50


@pytest.mark.parametrize(("name", "args"), [("bench_env", ["--episode-tasks", "1000001"]),
                                            ("bench_planning", ["--tasks", "1000001"])])
def test_an_episode_the_env_refuses_is_a_usage_error_before_any_timing(name, args, capsys,
                                                                       monkeypatch):
    """It was the env's ValueError traceback (bench_planning's after a timing)."""
    module = bench_module(name)

    def timed(*_args, **_kwargs):
        raise AssertionError("timed something")

    for what in ("throughput", "reference_rate"):
        if hasattr(module, what):
            monkeypatch.setattr(module, what, timed)
    with pytest.raises(SystemExit) as exit_:
        module.main([*args, "--repeats", "1"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and "1..1000000" in err and out == ""


@pytest.mark.parametrize(("ours", "code"), [(30.0, 0), (20.0, 1)])
def test_the_env_bench_exits_1_below_its_target(ours, code, monkeypatch, capsys):
    """Below the 0.25 ratio it printed 'below' and exited 0, as bench_simulator and
    bench_planning do not on a missed target."""
    module = bench_module("bench_env")
    rates = {"envs:InferenceAlloc-v0": ours, "CartPole-v1": 100.0}
    monkeypatch.setattr(module, "throughput", lambda env_id, *_a, **_k: rates[env_id])
    assert module.main(["--repeats", "1"]) == code
    assert ("meets" if code == 0 else "below") in capsys.readouterr().out


@pytest.mark.parametrize("target", ["TARGET_TIME_RATIO", "TARGET_MEMORY_RATIO"])
def test_the_trace_bench_exits_1_when_a_target_is_missed(target, monkeypatch, capsys):
    """It printed MISSED and exited 0."""
    module = bench_module("bench_traces")
    monkeypatch.setattr(module, target, 0.0)
    assert module.main(["--rows", "200", "--repeats", "1"]) == 1
    assert capsys.readouterr().out.count("MISSED") == 1


def test_the_training_bench_splits_a_run_and_checks_the_final_row_bit_for_bit(capsys):
    code = bench_main("bench_training")(["--timesteps", "64", "--eval-tasks", "20",
                                         "--repeats", "1"])
    out = capsys.readouterr().out
    shares = [float(line.rsplit(None, 1)[-1].rstrip("%")) for line in out.splitlines()
              if line.startswith("  ")]
    assert len(shares) == 5 and sum(shares) == pytest.approx(100, abs=0.5)
    assert "the same latencies to the bit: yes" in out
    assert code == (0 if out.rstrip().endswith("met") else 1)


@pytest.mark.parametrize("args", [["--timesteps", "0"], ["--eval-tasks", "0"],
                                  ["--repeats", "0"]])
def test_a_bad_training_bench_option_is_a_usage_error_before_any_training(args, capsys,
                                                                          monkeypatch):
    module = bench_module("bench_training")

    def trained(*_args, **_kwargs):
        raise AssertionError("trained a run")

    monkeypatch.setattr(module.training, "train", trained)
    with pytest.raises(SystemExit) as exit_:
        module.main(args)
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and "must be >= 1" in err and out == ""
