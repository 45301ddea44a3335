"""The bench/ scripts' command lines (their figures are timings, which no test checks)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from envs.scenario import MAX_EPISODE_TASKS

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
                                  ["--seed", "-1"], ["--profile", "-3"], ["--repeats", "0"]])
def test_a_bad_env_bench_option_is_a_usage_error_before_any_timing(args, capsys, monkeypatch):
    """--duration nan or inf timed forever, --seed -1 failed inside gymnasium after a
    timing, --profile -3 printed an empty profile (--repeats 0 would divide 0 steps/s by 0)."""
    spec = importlib.util.spec_from_file_location("be", ROOT / "bench" / "bench_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def timed(*_args, **_kwargs):
        raise AssertionError("timed an env")

    monkeypatch.setattr(module, "throughput", timed)
    with pytest.raises(SystemExit) as exit_:
        module.main(["--repeats", "1", *args])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and "--duration must be a finite number" in err and out == ""


def not_timed(*_args, **_kwargs):
    raise AssertionError("timed something")


@pytest.mark.parametrize(("name", "untimed", "args"), [
    ("bench_simulator", ("reference_rate", "simulator_rate"), ["--runs", "0"]),
    ("bench_simulator", ("reference_rate", "simulator_rate"), ["--repeats", "0"]),
    ("bench_traces", ("write_trace", "median_seconds"), ["--rows", "0"]),
    ("bench_traces", ("write_trace", "median_seconds"), ["--repeats", "0"]),
])
def test_a_bad_count_is_a_usage_error_before_any_timing(name, untimed, args, monkeypatch,
                                                        capsys):
    """Every count must be >= 1, refused before anything is written or timed."""
    module = bench_module(name)
    for what in untimed:
        monkeypatch.setattr(module, what, not_timed)
    counts = ["--runs", "1"] if name == "bench_simulator" else ["--rows", "1"]
    with pytest.raises(SystemExit) as exit_:
        module.main([*counts, "--repeats", "1", *args])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and "must be >= 1" in err and out == ""


@pytest.mark.parametrize(("scale", "code"), [(2.0, 0), (1.0, 0), (0.5, 1)])
def test_the_simulator_bench_judges_glm_5_3_alone_against_its_target(scale, code, monkeypatch,
                                                                     capsys):
    """glm-5.3's rate is `scale` times the target ('>= 50,000 tasks/s for glm-5.3'); the
    other variants' lie on the other side of it, and have no verdict."""
    module = bench_module("bench_simulator")
    target = module.TARGET_TASKS_PER_S
    others = target * (0.5 if scale >= 1 else 2.0)
    monkeypatch.setattr(module, "reference_rate", lambda *_args: 1e6)
    monkeypatch.setattr(module, "simulator_rate", lambda variant, *_args:
                        target * scale if variant == "glm-5.3" else others)
    assert module.main(["--runs", "1", "--repeats", "1"]) == code
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[-1] for line in out.splitlines()
            if line.split()[:1] and line.split()[0] in module.VARIANTS}
    assert rows.pop("glm-5.3") == ("met" if code == 0 else "MISSED")
    assert rows and not any(verdict in ("met", "MISSED") for verdict in rows.values())
    task = module.ARTICLE_TASK    # the header names the task booked
    assert (f"article task (batch {task.batch}, {task.prompt_tokens} prompt, "
            f"{task.output_tokens} output tokens)") in out


def test_the_simulator_bench_takes_device_ids_as_python_m_inference_does(capsys):
    bench_main("bench_simulator")(["--placement", "0,1,1", "--runs", "2", "--repeats", "1"])
    assert "placement 0,1,1" in capsys.readouterr().out


BENCH_NAMES = ["bench_env", "bench_events", "bench_heft_split", "bench_planning",
               "bench_plots", "bench_simulator", "bench_traces", "bench_training"]


def help_entries(name: str, capsys) -> tuple[str, list[str]]:
    """`name --help`: the text above its options, and one entry per option (lines unwrapped)."""
    with pytest.raises(SystemExit):
        bench_main(name)(["--help"])
    above, listed = capsys.readouterr().out.split("options:", 1)
    return " ".join(above.split()), " ".join(listed.split()).split(" --")[1:]


@pytest.mark.parametrize("name", BENCH_NAMES)
def test_every_bench_option_shows_its_default(name, capsys):
    above, entries = help_entries(name, capsys)
    assert len(entries) >= 3 and entries[0].startswith("help ")
    for entry in entries[1:]:
        assert "(default:" in entry, f"{name}: --{entry}"
    # and the help says what the script measures: its docstring's first line
    assert bench_module(name).__doc__.splitlines()[0] in above


@pytest.mark.parametrize("name", BENCH_NAMES)
def test_every_bench_usage_line_shows_the_defaults_the_script_takes(name, capsys):
    """Each docstring opens with the command line, `[--option value]` giving the value the
    option takes when left out: it must be the parser's default (a number as a number)."""
    _, entries = help_entries(name, capsys)
    defaults = {entry.split()[0]: re.search(r"\(default: ([^)]*)\)", entry).group(1)
                for entry in entries[1:]}
    usage = bench_module(name).__doc__.split("\n\n")[1]
    shown = re.findall(r"\[--([\w-]+) ([^\]\s]+)\]", usage)
    shown = [(option, value) for option, value in shown   # not `all|...` choices, not metavars
             if "|" not in value and not value.isupper()]
    assert shown, usage
    for option, value in shown:
        try:
            assert float(defaults[option]) == float(value), f"{name} --{option}"
        except ValueError:
            assert defaults[option] == value, f"{name} --{option}"


@pytest.mark.parametrize("args", [["--steps", "0"], ["--repeats", "0"], ["--steps", "10000001"]])
def test_a_bad_events_bench_option_is_a_usage_error_before_anything_is_written(
        args, monkeypatch, capsys):
    module = bench_module("bench_events")
    monkeypatch.setattr(module, "write_events", not_timed)
    with pytest.raises(SystemExit) as exit_:
        module.main(args)
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and "--steps" in err and out == ""


def test_the_events_bench_reads_the_curves_it_wrote(capsys):
    """Both readers read the curves of the run it wrote alike: a rollout's point every 64
    steps, an eval/ point every 10,000."""
    assert bench_main("bench_events")(["--steps", "20001", "--repeats", "1"]) in (0, 1)
    out = capsys.readouterr().out
    assert out.startswith("20,001 steps") and "EventAccumulator's time" in out
    assert ("latency/vs_static 313, eval/vs_best_static 3, eval/mix_vs_best_static 0: the same "
            "as EventAccumulator's") in out


@pytest.mark.parametrize("args", [["--tasks", "0"], ["--agents", "0"], ["--repeats", "0"],
                                  ["--tasks", "20000001"], ["--agents", "33"]])
def test_a_bad_plots_bench_option_is_a_usage_error_before_anything_is_drawn(args, monkeypatch,
                                                                             capsys):
    module = bench_module("bench_plots")
    monkeypatch.setattr(module, "every_step_cdf", not_timed)
    with pytest.raises(SystemExit) as exit_:
        module.main(args)
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and args[0] in err and out == ""


def test_the_plots_bench_draws_both_and_finds_the_thinned_steps_exact(capsys, monkeypatch):
    """Its reference draws a step per task (not the thinned curve), and its check of the
    thinned steps catches steps that are not the CDF's."""
    import matplotlib.axes

    from agents import plots

    module = bench_module("bench_plots")
    drawn = []
    real_step = matplotlib.axes.Axes.step

    def step(self, x, y, *args, **kwargs):
        drawn.append(len(x))
        return real_step(self, x, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "step", step)
    assert module.main(["--tasks", "5000", "--agents", "2", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 curves of 5,000 tasks") and "steps: exact" in out
    assert drawn == [5000, 5000, plots.CDF_POINTS, plots.CDF_POINTS]
    assert plots.cdf_points.__name__ == "cdf_points"     # put back after the reference
    monkeypatch.setattr(plots, "cdf_points", lambda values: (np.sort(values)[1:],
                                                             np.ones(len(values) - 1)))
    assert not module.exact(np.arange(10.0))


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


def test_the_trace_bench_puts_one_row_in_ten_on_a_whole_second(tmp_path):
    """As write_trace says: the real files' rows without fractional seconds come all through
    them. Rounding every tenth row down and then lifting it back to the row before it (to
    keep the times in order) left about one row in 300 whole, and most of those bunched."""
    path = tmp_path / "t.csv"
    bench_module("bench_traces").write_trace(path, 1000)
    stamps = [line.split(",")[0] for line in path.read_text().splitlines()[1:]]
    whole = [i for i, stamp in enumerate(stamps) if "." not in stamp]
    assert len(whole) == pytest.approx(len(stamps) / 10, rel=0.2)
    assert whole[-1] > len(stamps) / 2          # all through the trace, not at its start
    from envs.traces import read_trace
    assert (np.diff(read_trace(path).time_s) >= 0).all()     # still in order


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


PLANNING_ROWS = ("heft-calibrated decision", "read azure-conv trace")


@pytest.mark.parametrize(("decision", "trace"), [(0.5, 0.5), (2.0, 0.5), (0.5, 2.0), (2.0, 2.0),
                                                 (1.0, 0.5), (0.5, 1.0)])
def test_the_planning_bench_exits_1_and_names_the_target_missed(decision, trace, monkeypatch,
                                                                capsys):
    """`decision` and `trace`: each figure as a multiple of its target, which it must stay
    under ('a decision under 2 ms, the trace read in under 0.5 s')."""
    module = bench_module("bench_planning")
    targets = (module.TARGET_DECISION_S, module.TARGET_TRACE_S)
    monkeypatch.setattr(module, "reference_rate", lambda *_args: 1e6)
    monkeypatch.setattr(module, "decision_seconds", lambda *_args: decision * targets[0])
    monkeypatch.setattr(module, "median_seconds", lambda *_args: trace * targets[1])
    code = module.main(["--tasks", "1", "--repeats", "1"])
    lines = capsys.readouterr().out.splitlines()
    missed = [decision >= 1, trace >= 1]
    for what, target, miss in zip(PLANNING_ROWS, targets, missed, strict=True):
        (line,) = [line for line in lines if line.startswith(what)]
        assert line.endswith(f"< {target:g} s: {'MISSED' if miss else 'met'}"), line
    assert code == (1 if any(missed) else 0)


def test_the_planning_bench_times_heft_calibrated_decisions(monkeypatch):
    module = bench_module("bench_planning")
    built = []

    class Recorded(module.HeftPolicy):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self.name)

    monkeypatch.setattr(module, "HeftPolicy", Recorded)
    assert isinstance(module.decision_seconds(3, 1), float)
    assert built == ["heft-calibrated"]


ENV_RATES = {"envs:InferenceAlloc-v0": 30.0, "envs:InferenceAllocSplit-v0": 12.0,
             "CartPole-v1": 100.0}


def stub_rates(monkeypatch, module, rates: dict[str, float]) -> list[str]:
    """`module.throughput` answering from `rates`; returns the list of env ids it timed."""
    timed: list[str] = []

    def throughput(env_id, *_args, **_kwargs):
        timed.append(env_id)
        return rates[env_id]

    monkeypatch.setattr(module, "throughput", throughput)
    return timed


@pytest.mark.parametrize(("env", "slow", "code"), [
    ("discrete", None, 0), ("discrete", "envs:InferenceAlloc-v0", 1),
    ("split", None, 0), ("split", "envs:InferenceAllocSplit-v0", 1),
    ("all", None, 0), ("all", "envs:InferenceAlloc-v0", 1),
    ("all", "envs:InferenceAllocSplit-v0", 1),
])
def test_the_env_bench_exits_1_when_an_env_timed_is_below_its_target(env, slow, code,
                                                                      monkeypatch, capsys):
    """Below its ratio target an env's line says 'below' and the exit status is 1 (it printed
    'below' and exited 0, as bench_simulator and bench_planning do not on a missed target)."""
    module = bench_module("bench_env")
    rates = dict(ENV_RATES)
    if slow is not None:
        rates[slow] = 5.0           # under either target's share of CartPole's 100
    stub_rates(monkeypatch, module, rates)
    assert module.main(["--env", env, "--repeats", "1"]) == code
    out = capsys.readouterr().out
    assert out.count("below") == (slow is not None)


@pytest.mark.parametrize(("env", "ids"), [
    ("discrete", ["InferenceAlloc-v0"]), ("split", ["InferenceAllocSplit-v0"]),
    ("all", ["InferenceAlloc-v0", "InferenceAllocSplit-v0"]),
])
def test_the_env_bench_times_the_chosen_envs_each_against_cartpole(env, ids, monkeypatch,
                                                                   capsys):
    module = bench_module("bench_env")
    timed = stub_rates(monkeypatch, module, ENV_RATES)
    module.main(["--env", env, "--repeats", "2"])
    # alternately: each env of ours, then CartPole-v1, per repeat
    assert timed == [name for _ in range(2) for env_id in ids
                     for name in (f"envs:{env_id}", "CartPole-v1")]
    lines = capsys.readouterr().out.splitlines()
    rates = [line for line in lines if "steps/s" in line]
    assert [line.split()[0] for line in rates] == [*ids, "CartPole-v1"]
    ratios = {line.split()[1]: line for line in lines if line.startswith("ratio ")}
    assert list(ratios) == ids
    for env_id in ids:
        target = dict(module.ENVS.values())[env_id]
        expected = ENV_RATES[f"envs:{env_id}"] / ENV_RATES["CartPole-v1"]
        assert f": {expected:12.3f}  (meets the {target} target)" in ratios[env_id]


@pytest.mark.parametrize("env", ["discrete", "split"])
def test_an_env_exactly_at_its_target_ratio_meets_it(env, monkeypatch, capsys):
    """A target is a ratio of 'at least' its value; any positive rates give the ratio."""
    module = bench_module("bench_env")
    env_id, target = module.ENVS[env]
    cartpole = 0.5          # a power of two: the env's rate over it is the target to the bit
    stub_rates(monkeypatch, module, {f"envs:{env_id}": target * cartpole,
                                     "CartPole-v1": cartpole})
    assert module.main(["--env", env, "--repeats", "1"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ratio ")]
    assert line.endswith(f": {target:12.3f}  (meets the {target} target)")


@pytest.mark.parametrize("tasks", [1, MAX_EPISODE_TASKS])
def test_the_env_bench_takes_either_bound_of_episode_tasks(tasks, monkeypatch, capsys):
    module = bench_module("bench_env")
    timed = stub_rates(monkeypatch, module, ENV_RATES)
    assert module.main(["--env", "discrete", "--repeats", "1",
                        "--episode-tasks", str(tasks)]) == 0
    assert timed == ["envs:InferenceAlloc-v0", "CartPole-v1"]


def test_the_split_env_has_its_own_target_below_the_discrete_envs():
    targets = dict(bench_module("bench_env").ENVS.values())
    assert 0 < targets["InferenceAllocSplit-v0"] < targets["InferenceAlloc-v0"]


def test_an_unknown_env_bench_env_is_a_usage_error_before_any_timing(monkeypatch, capsys):
    module = bench_module("bench_env")
    timed = stub_rates(monkeypatch, module, ENV_RATES)
    with pytest.raises(SystemExit) as exit_:
        module.main(["--env", "InferenceAllocSplit", "--repeats", "1"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and "--env: invalid choice" in err and out == "" and not timed


@pytest.mark.parametrize(("env", "profiled"), [("split", ["InferenceAllocSplit-v0"]),
                                               ("discrete", ["InferenceAlloc-v0"]),
                                               ("all", ["InferenceAlloc-v0",
                                                        "InferenceAllocSplit-v0"])])
def test_the_env_bench_profiles_the_chosen_envs(env, profiled, monkeypatch, capsys):
    module = bench_module("bench_env")
    stub_rates(monkeypatch, module, ENV_RATES)
    module.main(["--env", env, "--repeats", "1", "--profile", "30", "--episode-tasks", "10"])
    out = capsys.readouterr().out
    headers = [line for line in out.splitlines() if line.endswith(", 30 steps:")]
    assert headers == [f"{env_id}, 30 steps:" for env_id in profiled]
    assert out.count("function calls") == 2 * len(profiled)    # by tottime, by cumulative
    # the Split env's own module shows in its profile only
    assert ("inference_alloc_split.py" in out) == ("InferenceAllocSplit-v0" in profiled)


@pytest.mark.parametrize("target", ["TARGET_TIME_RATIO", "TARGET_MEMORY_RATIO"])
def test_the_trace_bench_exits_1_when_a_target_is_missed(target, monkeypatch, capsys):
    """It printed MISSED and exited 0. The other target is put out of any machine's reach:
    a 200-row timing is noisy, and on a loaded machine it missed the real 12x (CI, 20.5x)."""
    module = bench_module("bench_traces")
    for name in ("TARGET_TIME_RATIO", "TARGET_MEMORY_RATIO"):
        monkeypatch.setattr(module, name, 0.0 if name == target else 1e9)
    assert module.main(["--rows", "200", "--repeats", "1"]) == 1
    assert capsys.readouterr().out.count("MISSED") == 1


def test_the_trace_bench_exits_0_when_both_targets_are_met_and_names_each(monkeypatch, capsys):
    module = bench_module("bench_traces")
    # out of reach of any machine, and apart, so that each line must name its own
    monkeypatch.setattr(module, "TARGET_TIME_RATIO", 1e9)
    monkeypatch.setattr(module, "TARGET_MEMORY_RATIO", 1e8)
    assert module.main(["--rows", "200", "--repeats", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    (time_line,) = [line for line in lines if "read_trace:" in line]
    (memory_line,) = [line for line in lines if "peak memory:" in line]
    assert time_line.endswith("(target <= 1e+09x): ok")
    assert memory_line.endswith("(target <= 1e+08x): ok")


def test_the_trace_benchs_memory_is_the_peak_not_what_is_left():
    """read_trace's transient buffers are what its peak measures; they are freed when the
    call returns, as this block is."""
    block = 4_000_000
    assert bench_module("bench_traces").peak_bytes(lambda: len(bytearray(block))) >= block


@pytest.mark.parametrize("select_best", [False, True])
def test_the_training_bench_splits_a_run_and_checks_the_final_row_bit_for_bit(select_best,
                                                                              capsys):
    code = bench_main("bench_training")(["--timesteps", "64", "--eval-tasks", "20",
                                         "--repeats", "1"] + ["--select-best"] * select_best)
    out = capsys.readouterr().out
    assert out.startswith("ppo (warm-up none), ")    # no progress bar drawn inside learn()
    shares = {line[:42].strip(): float(line.rsplit(None, 1)[-1].rstrip("%"))
              for line in out.splitlines() if line.startswith("  ")}
    assert len(shares) == 6 and sum(shares.values()) == pytest.approx(100, abs=0.5)
    # the validation points are timed when, and only when, the run has them
    assert (shares["validation points, less their env steps"] > 0) == select_best
    assert "the same latencies to the bit: yes" in out
    assert code == (0 if out.rstrip().endswith("met") else 1)


@pytest.mark.parametrize(("ours", "same", "verdict"), [(0.5, True, "met"), (1.0, True, "met"),
                                                      (2.0, True, "MISSED"),
                                                      (0.5, False, "MISSED")])
def test_the_training_bench_meets_its_target_fast_enough_and_to_the_bit(ours, same, verdict,
                                                                          monkeypatch, capsys):
    """`ours`: our final row's time as a multiple of the target share of the reference's
    ('at most 0.05 of the reference's median time, with the same latencies to the bit')."""
    module = bench_module("bench_training")
    reference_s, latency = 4.0, np.array([0.5, 1.5])

    def final_row_seconds(_result, _cfg, evaluated):
        if evaluated is None:           # the reference: model.zip's episode run again
            return reference_s, latency
        return ours * module.TARGET_RATIO * reference_s, latency if same else latency + 1

    monkeypatch.setattr(module, "final_row_seconds", final_row_seconds)
    code = module.main(["--timesteps", "64", "--eval-tasks", "20", "--repeats", "1"])
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith(f"ratio {ours * module.TARGET_RATIO:.4f} "
                           f"(target <= {module.TARGET_RATIO})")
    assert last.endswith(f"the same latencies to the bit: {'yes' if same else 'NO'}; {verdict}")
    assert code == (0 if verdict == "met" else 1)


def test_the_training_bench_takes_a_count_of_1(monkeypatch):
    module = bench_module("bench_training")

    class Trained(Exception):
        pass

    def train(*_args, **_kwargs):
        raise Trained

    monkeypatch.setattr(module.training, "train", train)
    with pytest.raises(Trained):
        module.main(["--timesteps", "1", "--eval-tasks", "1", "--repeats", "1"])


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


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "bench").glob("bench_*.py")))
def test_every_bench_script_imports_the_repository_it_lies_in(script):
    """Run as `python bench/X.py`, a script's folder is bench/, so without putting the root
    first it timed whatever `envs`/`inference` was installed (an editable install of another
    checkout), not the code beside it."""
    probe = ("import runpy, sys\n"
             f"sys.argv = [{str(ROOT / 'bench' / script)!r}, '--help']\n"
             "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
             "except SystemExit as exit_:\n    print('exit', exit_.code)\n"
             "print(sys.path[0])\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=ROOT / "bench").stdout
    assert out.splitlines()[-1] == str(ROOT)
    # run as a script, it runs its main(): --help prints the usage and exits 0
    assert out.startswith(f"usage: {script}") and out.splitlines()[-2] == "exit 0"


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "bench").glob("bench_*.py")))
def test_every_bench_script_runs_with_its_docstrings_stripped(script):
    """Under `python -OO` (PYTHONOPTIMIZE=2, as some deployment images set) a module's
    docstring is None: each script took its description from it, and every run, --help too,
    ended in an AttributeError traceback before parsing anything."""
    done, kept = (subprocess.run([sys.executable, *flags, str(ROOT / "bench" / script), "--help"],
                                 capture_output=True, text=True, cwd=ROOT / "bench")
                  for flags in (["-OO"], []))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {script}") and "--repeats" in done.stdout
    assert done.stdout == kept.stdout       # its description read from the source


def test_the_readmes_bench_env_targets_are_the_scripts():
    """README's Benchmarks list quotes bench_env.py's targets (and its --env choices)."""
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    quoted = re.search(r"`python bench/bench_env\.py \[--env ([\w|]+)\]`.*?\(targets: ratios of "
                       r"([\d.]+) and ([\d.]+)\)", readme)
    assert quoted is not None, "README's bench_env.py line changed: update this test"
    module = bench_module("bench_env")
    choices, discrete, split = quoted.groups()
    assert choices.split("|") == list(module.ENV_CHOICES)
    assert (float(discrete), float(split)) == (module.TARGETS["discrete"], module.TARGETS["split"])


@pytest.mark.parametrize(("args", "message"), [
    (["--devices", "8,16"], "starting at 3"), (["--devices", "3,16,8"], "increasing"),
    (["--devices", "3,x"], "comma-separated device counts"), (["--tasks", "0"], "--tasks"),
    (["--tasks", "1000001"], "1..1000000"), (["--repeats", "0"], "--repeats"),
    (["--exhaustive-up-to", "-1"], "--exhaustive-up-to"),
])
def test_a_bad_heft_split_bench_option_is_a_usage_error_before_any_timing(args, message,
                                                                          monkeypatch, capsys):
    module = bench_module("bench_heft_split")
    for what in ("reference_rate", "episode_observations", "decision_seconds"):
        monkeypatch.setattr(module, what, not_timed)
    with pytest.raises(SystemExit) as exit_:
        module.main(args)
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and message in err and out == ""


@pytest.mark.parametrize(("devices", "short"), [("3,8", " (measured up to 8 only)"),
                                               ("3,8,24", ""), ("3,16,32", " (measured up to 16 only)")])
def test_the_heft_split_benchs_verdict_says_how_far_it_measured(devices, short, monkeypatch,
                                                                capsys):
    """`--devices 3,8` printed "up to 24 devices: met" having timed no decision past 8."""
    module = bench_module("bench_heft_split")
    monkeypatch.setattr(module, "reference_rate", lambda *_args: 1e6)
    monkeypatch.setattr(module, "decision_seconds",
                        lambda policy, observations, repeats: (1e-3, [np.zeros(3)] * len(
                            observations)))
    assert module.main(["--devices", devices, "--exhaustive-up-to", "0", "--tasks", "2",
                        "--repeats", "1"]) == 0
    verdict = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert verdict == (f"target: heft-split under {module.TARGET_RATIO:g}x the 3-device "
                       f"decision up to {module.TARGET_UP_TO} devices{short}: met")


@pytest.mark.parametrize(("ratio", "code"), [(50.0, 0), (100.0, 1), (150.0, 1)])
def test_the_heft_split_bench_times_every_subset_up_to_its_bound_and_judges_the_search(
        ratio, code, monkeypatch, capsys):
    """`ratio`: the 24-device decision over the 3-device one ('under 100x'); every subset is
    timed, with heft-split forced onto it, at --exhaustive-up-to devices or fewer only."""
    module = bench_module("bench_heft_split")
    timed = []

    def seconds(policy, observations, repeats):
        timed.append((policy.n_devices, policy.exhaustive_devices))
        return (ratio if policy.n_devices == 24 else 1.0) * 1e-3, [np.zeros(3)] * len(observations)

    monkeypatch.setattr(module, "reference_rate", lambda *_args: 1e6)
    monkeypatch.setattr(module, "decision_seconds", seconds)
    assert module.main(["--devices", "3,9,24", "--exhaustive-up-to", "9", "--tasks", "2",
                        "--repeats", "1"]) == code
    default = module.HeftSplitPolicy.exhaustive_devices
    assert timed == [(3, default), (3, 3), (9, default), (9, 9), (24, default)]
    out = capsys.readouterr().out
    assert out.rstrip().endswith("met" if code == 0 else "MISSED")
    assert out.count("every subset") == 2 and "2/2" in out


@pytest.mark.parametrize("name", ["bench_env", "bench_heft_split", "bench_planning",
                                  "bench_simulator", "bench_traces", "bench_training"])
def test_a_bench_takes_whole_flags_only_and_names_the_one_meant(name, capsys):
    """As train.py and evaluate.py: `--rep 1` ran as `--repeats 1` by argparse's prefix
    matching, and would mean another flag once one with that prefix came."""
    with pytest.raises(SystemExit) as exit_:
        bench_main(name)(["--rep", "1"])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert err.splitlines()[-1].endswith(
        "error: unrecognized arguments: --rep 1 (did you mean '--repeats'?)")


def test_the_trace_bench_refuses_more_rows_than_it_can_hold_before_writing(monkeypatch, capsys):
    """1e12 rows was numpy's memory error, a traceback, as the trace was being generated."""
    module = bench_module("bench_traces")
    monkeypatch.setattr(module, "write_trace", not_timed)
    with pytest.raises(SystemExit) as exit_:
        module.main(["--rows", str(module.MAX_ROWS + 1)])
    assert exit_.value.code == 2
    assert f"--rows must be at most {module.MAX_ROWS:,}" in capsys.readouterr().err
    with pytest.raises(AssertionError, match="timed something"):    # the top is taken
        module.main(["--rows", str(module.MAX_ROWS)])


def test_a_bench_stopped_by_sigterm_says_so_and_removes_its_temporary_folder(tmp_path):
    """A scheduler's SIGTERM killed the script where it stood: its temporary trace (80 MB at
    3 million rows) stayed in the temp folder, and Ctrl-C was a traceback."""
    import os
    import signal
    import time

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    bench = subprocess.Popen([sys.executable, str(ROOT / "bench" / "bench_traces.py"),
                              "--rows", str(3_000_000), "--repeats", "1"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("*/trace.csv")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(tmp_path.glob("*/trace.csv")), "the bench wrote no trace in time"
        bench.send_signal(signal.SIGTERM)
        out, err = bench.communicate(timeout=60)
    finally:
        bench.kill()
    assert bench.returncode == 143 and err == "bench_traces.py: terminated (SIGTERM)\n"
    assert out == "" and list(tmp_path.iterdir()) == []
