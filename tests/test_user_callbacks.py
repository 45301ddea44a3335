"""Stable-Baselines3 callbacks of your own, named <module>:<attribute> in train.py --callbacks
(agents.user_callbacks): their scalars, an early stop, a resume, the refusals before any run."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_cli_scripts import load_main
from test_imported import module_in_cwd

from agents.config import ConfigError, TrainConfig
from agents.config_parsing import parse_config, to_yaml
from agents.plots import read_scalars
from agents.run_folder import saved_steps

EXTENDING = Path(__file__).resolve().parents[1] / "docs" / "EXTENDING.md"

USER_MODULE = '''
import copy
import threading

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback


class SawOurs(BaseCallback):
    """mine/saw_ours: 1 where our latency/mean was recorded before this callback's turn (it
    runs after ours), and it shares the run's model and logger."""

    def _on_step(self) -> bool:
        assert self.logger is self.model.logger
        return True

    def _on_rollout_end(self) -> None:
        self.logger.record("mine/saw_ours", float("latency/mean" in self.logger.name_to_value))


class StopAt(BaseCallback):
    """Ends training at step 56: within a rollout of 16 steps, not at an episode's end."""

    def _on_step(self) -> bool:
        return self.num_timesteps < 56


class StopAtTheEnd(BaseCallback):
    """Ends training at step 64, the last of a 64-step run, as numpy's False."""

    def _on_step(self):
        return np.bool_(self.num_timesteps < 64)


class ForgotTheReturn(BaseCallback):
    def _on_step(self):
        pass


class Counts(BaseCallback):
    """mine/calls: the steps this very object has seen."""

    def _on_step(self) -> bool:
        self.logger.record("mine/calls", self.n_calls)
        return True


counts = Counts()


def make_counts():
    return Counts()


def the_counts():
    """Returns the module's own Counts at each call: two runs would share its count."""
    return counts


class NotACallback:
    def _on_step(self):
        return True


def builds_a_dict():
    return {}


class Buggy(Counts):
    def __init__(self):
        super().__init__()
        self.window = len(None)


class NoOnStep(BaseCallback):
    def _on_stepp(self):
        return True


class NeedsArguments(Counts):
    def __init__(self, window):
        super().__init__()


class HoldsALock(Counts):
    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()


class AlsoStopAt(StopAt):
    pass


class NeedsAKey(Counts):
    def __init__(self):
        super().__init__()
        self.window = {}["window"]


locked = HoldsALock()
not_a_thing = 3
builtin = dir
'''

SMALL = ["--warmup", "none", "--hp", "n_steps=16", "batch_size=16", "n_epochs=1",
         "--episode-tasks", "20", "--no-progress-bar"]


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch) -> Iterator[str]:
    """A module of callbacks in the working directory (not on sys.path), imported by name."""
    with module_in_cwd(USER_MODULE, "cbs", tmp_path, monkeypatch) as name:
        yield name


def test_a_callbacks_scalar_lands_in_the_runs_events_after_ours(user_module: str,
                                                                 tmp_path: Path) -> None:
    main = load_main("train.py")
    for log_dir, extra in (("plain", []), ("mine", ["--callbacks", f"{user_module}:SawOurs"])):
        assert main([*SMALL, "--timesteps", "64", "--checkpoint-interval", "32", "--eval-tasks",
                     "20", "--log-dir", log_dir, *extra]) == 0
    (plain,), (mine,) = Path("plain").iterdir(), Path("mine").iterdir()
    steps, values = read_scalars(mine, "mine/saw_ours")
    # a point at each rollout's dump, as latency/mean's, and ours recorded before its turn
    assert list(steps) == list(read_scalars(mine, "latency/mean")[0]) == [16, 32, 48, 64]
    assert list(values) == [1.0] * 4
    # ours unaffected: the same per-task latencies, checkpoints and trained weights
    for tag in ("latency/per_sample", "latency/mean", "eval/vs_best_static"):
        np.testing.assert_array_equal(read_scalars(mine, tag)[1], read_scalars(plain, tag)[1])
    for name in ("checkpoints/model_32_steps.zip", "checkpoints/model_64_steps.zip", "model.zip"):
        assert saved_steps(mine / name) == saved_steps(plain / name)
    assert _weights(mine / "model.zip") == _weights(plain / "model.zip")
    assert yaml.safe_load((mine / "config.yaml").read_text())["callbacks"] == [
        f"{user_module}:SawOurs"]


def _weights(path: Path) -> list[list[float]]:
    from stable_baselines3 import PPO

    return [p.detach().numpy().ravel().tolist() for p in PPO.load(path).policy.parameters()]


def test_an_early_stop_leaves_a_resumable_run_with_its_model_and_a_table(
        user_module: str, tmp_path: Path, capsys) -> None:
    main = load_main("train.py")
    args = ["--log-dir", "runs"]
    name = f"{user_module}:StopAt"
    assert main([*SMALL, "--timesteps", "128", "--checkpoint-interval", "1000", "--eval-tasks",
                 "20", "--callbacks", name, *args]) == 0
    (run,) = Path("runs").iterdir()
    out = capsys.readouterr().out
    assert saved_steps(run / "model.zip") == 56
    assert re.search(rf"finished ppo seed 0: 56 steps, stopped by callback '{name}' at step 56 "
                     rf"of 128 \(continue it with: python train\.py --resume {run.name} "
                     rf"--log-dir runs; add --callbacks alone to continue without its "
                     rf"callbacks\) in", out), out
    assert "| ppo | " in out and "| best-static | " in out        # the table, as ever
    # final/ and eval/ score the model it saved, at the step it stopped at, and the curves
    # reach it: the stop came before its rollout's end, where latency/ is recorded
    assert list(read_scalars(run, "final/vs_best_static")[0]) == [56]
    assert list(read_scalars(run, "eval/vs_best_static")[0]) == [0, 56]
    assert list(read_scalars(run, "latency/mean")[0]) == [16, 32, 48, 56]
    # resumed with its callback, it would stop again at once: --callbacks alone drops it
    assert main(["--resume", "--callbacks", "--no-progress-bar", *args]) == 0
    out = capsys.readouterr().out
    # to its --timesteps, in whole rollouts of 16 from the stop
    steps = saved_steps(run / "model.zip")
    assert 128 <= steps < 128 + 16 and (steps - 56) % 16 == 0
    assert f"finished ppo seed 0: {steps} steps ({steps - 56} new) in" in out
    assert "stopped" not in out
    assert yaml.safe_load((run / "config.yaml").read_text())["callbacks"] == []


def test_a_stop_at_the_last_step_is_said_and_its_steps_recorded(user_module: str,
                                                                capsys) -> None:
    """A stop at the run's last step still skips the update on the last rollout (model.zip is
    the model before it): the run's line says so, with no hint to return True for numpy's
    False, and latency/ reaches the stop, as for a stop before the last step."""
    main = load_main("train.py")
    common = [*SMALL, "--timesteps", "64", "--checkpoint-interval", "0", "--eval-tasks", "0"]
    assert main([*common, "--log-dir", "plain"]) == 0
    assert main([*common, "--log-dir", "runs", "--callbacks", f"{user_module}:StopAtTheEnd"]) == 0
    out = capsys.readouterr().out
    (plain,), (run,) = Path("plain").iterdir(), Path("runs").iterdir()
    assert saved_steps(run / "model.zip") == 64
    assert _weights(run / "model.zip") != _weights(plain / "model.zip")    # one update short
    assert re.search(rf"64 steps, stopped by callback '{user_module}:StopAtTheEnd' at step 64 "
                     rf"of 64, before the update on its last steps \(continue it with: python "
                     rf"train\.py --resume {run.name} --log-dir runs --timesteps N, N above "
                     rf"64; add --callbacks alone to continue without its callbacks\) in",
                     out), out
    assert list(read_scalars(run, "latency/mean")[0]) == [16, 32, 48, 64]


def test_a_callback_that_returns_none_is_said_to_have_stopped_the_run(user_module: str,
                                                                     capsys) -> None:
    """SB3 reads any false value as stop: an _on_step without `return True` ends the run at
    its first step, which the run's line says."""
    main = load_main("train.py")
    assert main([*SMALL, "--timesteps", "64", "--checkpoint-interval", "0", "--eval-tasks", "0",
                 "--log-dir", "runs", "--callbacks", f"{user_module}:ForgotTheReturn"]) == 0
    out = capsys.readouterr().out
    assert (f"1 steps, stopped by callback '{user_module}:ForgotTheReturn' at step 1 of 64 "
            f"(its _on_step returned None: return True to go on; continue it with: python "
            f"train.py --resume ") in out


def test_a_resume_may_add_a_callback(user_module: str, tmp_path: Path, monkeypatch,
                                     capsys) -> None:
    """Callbacks are not part of the model: a resume adds, changes or drops them, as it may the
    log intervals; config.yaml records the latest, which a plain --resume then takes."""
    main = load_main("train.py")
    args = ["--log-dir", "runs", "--no-progress-bar"]
    assert main([*SMALL, "--timesteps", "32", "--checkpoint-interval", "32", "--eval-tasks",
                 "0", *args]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    assert main(["--resume", "--timesteps", "64", "--callbacks", f"{user_module}:Counts",
                 *args]) == 0
    steps, calls = read_scalars(run, "mine/calls")
    assert list(steps) == [48, 64] and list(calls) == [16, 32]
    assert yaml.safe_load((run / "config.yaml").read_text())["callbacks"] == [
        f"{user_module}:Counts"]
    # resumed where its module is not found, the saved callback is named in one line, and
    # nothing of the run is touched
    saved = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    sys.modules.pop(user_module, None)
    capsys.readouterr()
    assert main(["--resume", "--timesteps", "96", "--log-dir", str(tmp_path / "runs"),
                 "--no-progress-bar"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--resume {run.name}: --callbacks '{user_module}:Counts': " \
        f"no module named '{user_module}'" in err
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == saved


@pytest.mark.parametrize("attribute", ["counts", "make_counts"])
def test_each_run_gets_a_fresh_callback(user_module: str, attribute: str) -> None:
    """A class or function is built once per run; a ready instance is copied for each, and
    the module's own left as it was: the second seed's count starts again from 0."""
    from agents.training import train

    config = TrainConfig(agents=["ppo"], warmup=["none"], seeds=[0, 1], timesteps=32,
                         checkpoint_interval=0, episode_tasks=20, eval_tasks=0, log_dir="runs",
                         progress_bar=False, hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1},
                         callbacks=[f"{user_module}:{attribute}"])
    results = train(config, report=lambda line: None)
    for result in results:
        assert list(read_scalars(result.run_dir, "mine/calls")[1]) == [16, 32]
    assert sys.modules[user_module].counts.n_calls == 0


@pytest.mark.parametrize(("attribute", "expected"), [
    ("nowhere_xyz:Stop", r"--callbacks 'nowhere_xyz:Stop': no module named 'nowhere_xyz' in the "
                         r"working directory \(.*\) or on sys\.path"),
    ("{mod}:StopAtt", r"--callbacks '{mod}:StopAtt': {mod} \(.*{mod}\.py\) has no attribute 'StopAtt'"
                    r" \(did you mean 'StopAt'\?\)"),
    ("{mod}.py:StopAt", r"no module named '{mod}\.py' .*; name the module, {mod}, not its file"),
    ("{mod}StopAt", r"--callbacks '{mod}StopAt': a callback is named <module>:<attribute>"),
    ("{mod}:Buggy", r"--callbacks '{mod}:Buggy': building it raised TypeError: object of type "
                    r"'NoneType' has no len\(\) \(.*{mod}\.py, line \d+\)"),
    ("{mod}:NeedsArguments", r"--callbacks '{mod}:NeedsArguments': NeedsArguments\(window\) "
                             r"takes arguments; a callback is built with none"),
    ("{mod}:NotACallback", r"--callbacks '{mod}:NotACallback' is a class that is not a "
                           r"Stable-Baselines3 BaseCallback"),
    ("{mod}:NoOnStep", r"--callbacks '{mod}:NoOnStep': NoOnStep does not define _on_step, "
                       r"which a BaseCallback's subclass defines: it returns True to go on"),
    ("{mod}:builds_a_dict", r"--callbacks '{mod}:builds_a_dict' built an object of type dict, "
                            r"not a "
                            r"Stable-Baselines3 BaseCallback"),
    ("{mod}:not_a_thing", r"--callbacks '{mod}:not_a_thing' is of type int: it must be a "
                          r"Stable-Baselines3 BaseCallback"),
    ("{mod}:locked", r"--callbacks '{mod}:locked' is an object that cannot be copied for each "
                     r"run \(TypeError: .*lock.*\); name a class or function that builds it"),
    # whatever a build raises, not only a ValueError or TypeError
    ("{mod}:NeedsAKey", r"--callbacks '{mod}:NeedsAKey': building it raised KeyError: 'window' "
                        r"\(.*{mod}\.py, line \d+\)"),
    # a function returning one object at each call: the runs (two seeds) shared its state
    ("{mod}:the_counts", r"--callbacks '{mod}:the_counts' returned the same Counts object as "
                         r"a call before it, and the runs \(seeds, agents\) would share its "
                         r"state: return a new one from each call, or name the object itself"),
    # a builtin has no signature to check: what it builds is
    ("{mod}:builtin", r"--callbacks '{mod}:builtin' built an object of type list, not a "
                      r"Stable-Baselines3 BaseCallback"),
])
def test_a_callback_that_cannot_run_is_one_line_before_any_folder(
        user_module: str, attribute: str, expected: str, capsys) -> None:
    main = load_main("train.py")
    name = attribute.format(mod=user_module)
    assert main([*SMALL, "--timesteps", "32", "--log-dir", "runs", "--callbacks",
                 f"{user_module}:Counts", name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert re.search(expected.format(mod=user_module), err), err
    assert not Path("runs").exists()


def test_a_module_that_raises_as_it_is_imported_is_named_as_a_callback(tmp_path: Path,
                                                                     monkeypatch, capsys) -> None:
    """A ValueError raised by the module's own code as it is imported is one line naming the
    --callbacks name and where it raised, not "policy ..." as a policy of yours is named."""
    with module_in_cwd("raise ValueError('no such queue')\n", "raises", tmp_path,
                       monkeypatch) as module:
        assert load_main("train.py")([*SMALL, "--timesteps", "32", "--log-dir", "runs",
                                      "--callbacks", f"{module}:Stop"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert re.search(rf"--callbacks '{module}:Stop': importing {module} raised ValueError: no "
                     rf"such queue \(.*{module}\.py, line 1\)", err), err
    assert not Path("runs").exists()


def test_of_two_callbacks_stopping_at_one_step_the_first_is_named_and_all_ran(
        user_module: str) -> None:
    """At the stop every callback of the step still runs (Counts, after StopAt, counts step
    56 too), and the run's line names the first that stopped it; a name is read without the
    spaces around it (a YAML list's item)."""
    from agents.training import train

    names = [f" {user_module}:StopAt ", f"{user_module}:Counts", f"{user_module}:AlsoStopAt"]
    config = TrainConfig(agents=["ppo"], warmup=["none"], timesteps=128, checkpoint_interval=0,
                         episode_tasks=20, eval_tasks=0, log_dir="runs", progress_bar=False,
                         hp={"n_steps": 16, "batch_size": 16, "n_epochs": 1}, callbacks=names)
    (result,) = train(config, report=lambda line: None)
    assert result.stopped is not None and result.stopped.startswith(
        f"stopped by callback '{user_module}:StopAt' at step 56 of 128 (continue it with: ")
    steps, calls = read_scalars(result.run_dir, "mine/calls")
    assert (steps[-1], calls[-1]) == (56, 56)


def test_the_runs_line_tells_a_stop_before_its_last_step_from_one_at_or_past_it() -> None:
    """No stop, no words (the line of a run whose callbacks went on is as any run's); a stop
    one step short of --timesteps is continued as any early stop, one at or past it (several
    envs step together) needs a larger --timesteps."""
    from agents.user_callbacks import UserCallbacks

    callbacks = UserCallbacks([])
    assert callbacks.stopped(64, 64, "resume") is None
    callbacks.stop = ("mine:Stop", False)
    assert callbacks.stopped(63, 64, "resume") == (
        "stopped by callback 'mine:Stop' at step 63 of 64 (continue it with: resume; add "
        "--callbacks alone to continue without its callbacks)")
    for step in (64, 66):
        assert callbacks.stopped(step, 64, "resume") == (
            f"stopped by callback 'mine:Stop' at step {step} of 64, before the update on its "
            f"last steps (continue it with: resume --timesteps N, N above {step}; add "
            f"--callbacks alone to continue without its callbacks)")


def test_the_callbacks_round_trip_through_config_yaml(user_module: str, tmp_path: Path) -> None:
    names = [f"{user_module}:Counts", f"{user_module}:StopAt"]
    config, given = parse_config(TrainConfig, ["--callbacks", names[0], "--callbacks", names[1]])
    assert config.callbacks == names and "callbacks" in given
    path = tmp_path / "config.yaml"
    path.write_text(to_yaml(config))
    assert parse_config(TrainConfig, ["--config", str(path)])[0] == config
    # --callbacks alone clears the file's; a run's config.yaml from before them reads as none
    assert parse_config(TrainConfig, ["--config", str(path), "--callbacks"])[0].callbacks == []
    path.write_text(f"callbacks: {names[0]}\n")
    assert parse_config(TrainConfig, ["--config", str(path)])[0].callbacks == names[:1]
    old = to_yaml(TrainConfig())
    path.write_text("".join(line + "\n" for line in old.splitlines()
                            if not line.startswith("callbacks")))
    assert parse_config(TrainConfig, ["--config", str(path)])[0] == TrainConfig()
    assert TrainConfig().callbacks == []
    with pytest.raises(ConfigError, match="option callbacks must be text"):
        path.write_text("callbacks: [{a: 1}]\n")
        parse_config(TrainConfig, ["--config", str(path)])


def test_the_readmes_callbacks_log_and_stop(tmp_path: Path, monkeypatch, capsys) -> None:
    """docs/EXTENDING.md's example, as mine.py: LogQueues' scalar lands, StopNearStatic stops."""
    text = EXTENDING.read_text(encoding="utf-8")
    block = re.search(r"```python\n((?:(?!```).)*class LogQueues.*?)```", text, re.S)
    assert block is not None, "docs/EXTENDING.md has no LogQueues example"
    assert "python train.py --callbacks mine:LogQueues mine:StopNearStatic" in text
    # a threshold any run crosses, over a window of 20 tasks: it stops at the 20th, after the
    # first rollout's write
    source = block.group(1) + "\nstop = StopNearStatic(10.0, 20)\n"
    with module_in_cwd(source, "readme_cbs", tmp_path, monkeypatch) as module:
        assert load_main("train.py")([*SMALL, "--timesteps", "64", "--checkpoint-interval", "0",
                                      "--eval-tasks", "0", "--log-dir", "runs", "--callbacks",
                                      f"{module}:LogQueues", f"{module}:stop"]) == 0
    (run,) = Path("runs").iterdir()
    out = capsys.readouterr().out
    # its np.False_ (a comparison of numpy numbers) is an answer, not a forgotten return
    assert f"stopped by callback '{module}:stop' at step 20 of 64 (continue it with:" in out
    steps, queue = read_scalars(run, "mine/queue_s")
    # written at the first rollout's end and, with no final/ row to write them (--eval-tasks
    # 0), at the stop: what it recorded since is not lost
    assert list(steps) == [16, 20] and np.all(queue >= 0)
    assert list(read_scalars(run, "latency/mean")[0]) == [16, 20]


def test_the_readmes_eval_callback_for_dqn_evaluates_and_stops(tmp_path: Path, monkeypatch,
                                                               capsys) -> None:
    """docs/EXTENDING.md's SB3 EvalCallback for DQN, as mine.py: its env behind FlatDiscreteActions
    takes DQN's actions, and its StopTrainingOnRewardThreshold ends the run, named as ours
    are. (Without the wrapper the env refused DQN's first action and the run failed.)"""
    text = EXTENDING.read_text(encoding="utf-8")
    block = re.search(r"```python\n((?:(?!```).)*def eval_dqn.*?)```", text, re.S)
    assert block is not None, "docs/EXTENDING.md has no eval_dqn example"
    assert "python train.py --agents dqn --callbacks mine:eval_dqn" in text
    # its evaluation every 10 steps, and a threshold any episode is above
    source = block.group(1) + (
        "\n\ndef quick():\n    callback = eval_dqn()\n    callback.eval_freq = 10\n"
        "    callback.callback_on_new_best.reward_threshold = -1e12\n    return callback\n")
    with module_in_cwd(source, "readme_eval", tmp_path, monkeypatch) as module:
        assert load_main("train.py")(["--agents", "dqn", "--warmup", "none", "--timesteps",
                                      "64", "--checkpoint-interval", "0", "--eval-tasks", "0",
                                      "--no-progress-bar", "--log-dir", "runs", "--callbacks",
                                      f"{module}:quick"]) == 0
    (run,) = Path("runs").iterdir()
    assert f"stopped by callback '{module}:quick' at step 10 of 64" in capsys.readouterr().out
    assert list(read_scalars(run, "eval/mean_reward")[0]) == [10]
