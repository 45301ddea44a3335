"""One run trained in its folder, then scored: ``train_run`` makes a plan's new run and its
folder; ``train_and_score`` trains a new or a resumed run (``agents.resume``) in its folder,
whose lock (``training_lock``) it holds.

``build_vec_env`` builds a run's envs and ``_callbacks`` its callbacks (yours after ours);
``_learn`` trains it and saves its model.zip (a failure or a stop removes a folder without a
checkpoint and keeps one with, and says which), and ``_score`` writes its held-out scores
(``agents.run_scores``) as final/ and best/ scalars. What a run folder holds, and what a
failed run leaves: ``agents.training``.

Warm-up with several envs: the warm-up (and ``predict``) uses the first sub-env (with
``--vec-env subproc``, an env of the trainer's own built alike: ``agents.vec_envs``); its
conservative phase counts decisions per vector step (``steps`` x ``n_envs`` tasks).
Rewards are the env's ``relative`` ones (``1 - latency / static latency``), or its
``normalised`` or ``latency`` ones (``TrainConfig.reward``); ``normalize``
adds VecNormalize on rewards only (observations are already in [0, 1]), so evaluation
needs no statistics.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecNormalize

from agents.callbacks import (
    BEST_METRICS,
    PER_SAMPLE,
    BestModelSelection,
    HeldOutEval,
    LatencyMetrics,
    RunInfo,
    drop_events_past,
    tensorboard_logger,
)
from agents.commands import command
from agents.config import ConfigError, TrainConfig
from agents.config_parsing import to_yaml
from agents.divergence import Diverged, DivergenceGuard, diverged, finite_weights
from agents.event_files import logged_at, mark_events
from agents.files import REFUSED_WRITES, WriteFailed, write_text
from agents.interrupts import stop_if_asked, stops_at_safe_points, stops_held
from agents.locks import FolderBusy, holding, lock_file
from agents.run_folder import (
    CHECKPOINT_PREFIX,
    AtomicCheckpoint,
    BestModel,
    checkpoints,
    new_run_dir,
    run_files,
    save_model_files,
)
from agents.run_plan import env_for, run_name, warmup_config
from agents.run_records import FinishedUnrecorded, RunFailed, RunResult, RunSpec
from agents.run_scores import (
    episodes_of,
    held_out_eval,
    learned_model,
    score_final_model,
    selected_model,
    write_scalars,
)
from agents.run_setting import run_config_text, settings_of
from agents.sb3_factory import SB3Agent, make_sb3, wrap_for
from agents.sb3_hyperparams import hyperparams_with
from agents.user_callbacks import UserCallbacks
from agents.vec_envs import close_venv, first_env, training_venv
from agents.warmup_config import starts_warm


def build_vec_env(config: TrainConfig, agent: str, seed: int, vecnormalize: Path | None = None,
                  *, warm_start: bool = False) -> tuple[Any, Any]:
    """The training VecEnv (n_envs stepped as --vec-env says, optionally VecNormalize) and the
    env the trainer reads in its own process: the first sub-env of a DummyVecEnv, an env
    built alike for a SubprocVecEnv, whose sub-envs live in other processes (``first_env``).
    `warm_start`: the agent takes its env's ``warm_start`` hyper-parameters (``starts_warm``),
    whose gamma, if they set one, the reward normaliser discounts with."""
    def make() -> Any:
        return wrap_for(agent, env_for(config))

    venv = training_venv(make, config.n_envs, seed, config.vec_env)
    first = first_env(venv, make)
    if config.normalize:
        if vecnormalize is not None and vecnormalize.is_file():
            venv = VecNormalize.load(str(vecnormalize), venv)
        else:
            params = hyperparams_with(agent, config.env_id, config.hp, warm_start=warm_start)
            gamma = params.get("gamma", 0.99)   # SB3's default for every algorithm here
            venv = VecNormalize(venv, norm_obs=False, norm_reward=True, gamma=float(gamma))
    return venv, first


def _hparams(config: TrainConfig, spec: RunSpec) -> dict[str, Any]:
    """The HPARAMS view of a new run; `config` is the run's own, whose ``hp`` holds every
    hyper-parameter the run uses (``train_run``)."""
    return {"agent": spec.label, "algo": spec.agent, "warmup": spec.warmup, "seed": spec.seed,
            "env_id": config.env_id, "scenario": ", ".join(config.training_scenarios()),
            "reward": config.reward,
            "hardware": config.hardware or "(scenario's)", "variant": config.variant or
            "(scenario's)", "timesteps": config.timesteps, "n_envs": config.n_envs,
            "normalize": config.normalize,
            # the scenarios' own where not given (the view showed 0 for them)
            "episode_tasks": config.training_episode_tasks(),
            "conservative": config.conservative if spec.warmup != "none" else "-",
            # only where given: the view of every other run reads as it did
            **({"scenario_weights": ", ".join(f"{w:g}" for w in config.scenario_weights)}
               if config.scenario_weights else {}),
            **{f"hp/{k}": v for k, v in config.hp.items()}}


def train_run(config: TrainConfig, spec: RunSpec) -> RunResult:
    """Train one run in a new folder (see ``agents.training``'s docstring for what it holds)."""
    warm = warmup_config(config, spec.warmup)
    venv, first = build_vec_env(config, spec.agent, spec.seed, warm_start=starts_warm(warm))
    try:
        agent = make_sb3(spec.agent, first, seed=spec.seed, overrides=config.hp, warmup=warm,
                         vec_env=venv, metrics_window=config.metrics_window)
        run_dir: Path | None = None
        try:
            with stops_held():      # the folder made and named here at once, a stop raised after
                run_dir = new_run_dir(config.log_dir, run_name(config, spec),
                                      run_files(config.timesteps))
            # hp: every hyper-parameter the agent was built with (the YAML's, a warm start's,
            # the overrides), so the run's config.yaml reproduces it after agents/hyperparams/
            # changes
            run_config = dataclasses.replace(config, agents=[spec.agent], warmup=[spec.warmup],
                                             seeds=[spec.seed], resume=None,
                                             hp=dict(agent.hyperparams))
            with training_lock(run_dir, option="--log-dir"):
                return train_and_score(agent, run_dir, run_config, spec, first, fresh=True)
        except (WriteFailed, KeyboardInterrupt) as exc:
            # its lock refused, or a stop, before its training began (`_learn` keeps or removes
            # the folder from there on): a SIGTERM between the folder's making and its training
            # left it behind, empty
            if run_dir is not None and not isinstance(exc, FinishedUnrecorded):
                _remove_if_unused(run_dir)
            raise
    finally:
        close_venv(venv)


def _remove_if_unused(run_dir: Path) -> None:
    """Remove the new run's folder where it holds nothing, or its lock file alone (a stop as the
    lock was taken); one that holds a run's files, or is gone already, is left as it is."""
    with contextlib.suppress(OSError):
        if {path.name for path in run_dir.iterdir()} <= {lock_file(run_dir, "train").name}:
            shutil.rmtree(run_dir)


@contextlib.contextmanager
def training_lock(run_dir: Path, option: str = "") -> Iterator[None]:
    """`run_dir`'s lock while a run trains in it: a resume of a run that another process
    still trains (or resumes) is refused at once, before it writes in the folder. `option`:
    the flag to shorten where the lock's path is too long (a new run's --log-dir; a resumed
    run's folder held that lock when it trained)."""
    try:
        with holding(run_dir, "train", f"run {run_dir.name} is being trained by another "
                     f"process", option=option):
            yield
    except FolderBusy as exc:
        raise ConfigError(f"{exc}: wait for it to end (or stop it) before resuming it") from None


def train_and_score(agent: SB3Agent, run_dir: Path, cfg: TrainConfig, spec: RunSpec,
                    first: Any, fresh: bool, best: BestModel | None = None) -> RunResult:
    """The run in `run_dir` trained to --timesteps and saved (`_learn`), then scored; a stop
    while it is scored is said to come after its training."""
    model = agent.model
    start = model.num_timesteps
    # while its events writer is open, a Ctrl-C or SIGTERM stops the run between steps (and
    # between the writes of its scores), never inside the writer: `stops_at_safe_points`
    with stops_at_safe_points():
        logger, held, selection, user, seconds = _learn(agent, run_dir, cfg, spec, first, fresh,
                                                        best)
        result = RunResult(run_dir, spec, model.num_timesteps, seconds,
                           new_steps=model.num_timesteps - start,
                           evaluated=held.last if held is not None else None,
                           stopped=user.stopped(model.num_timesteps, cfg.timesteps,
                                                _resume_command(run_dir)) if user else None,
                           clone=agent.clone_stats if fresh else None,
                           start_vs_best_static=held.at_start if held is not None else None)
        try:
            _score(result, cfg, logger, selection, best)
            stop_if_asked()     # one that came as the logger closed
        except KeyboardInterrupt:
            # "interrupted" alone read as a run lost: its model.zip is saved, its training done
            print(f"run {run_dir.name} interrupted after its training finished; kept "
                  f"{run_dir} (its model.zip is complete: evaluate it with: "
                  f"{command('evaluate')} --models {run_dir})", file=sys.stderr)
            raise
    return result


class _StopWhenAsked(BaseCallback):
    """The end of each step a safe point: a Ctrl-C or SIGTERM that came during it stops the
    training here (``agents.interrupts.stops_at_safe_points``)."""

    def _on_step(self) -> bool:
        stop_if_asked()
        return True


def _learn(agent: SB3Agent, run_dir: Path, cfg: TrainConfig, spec: RunSpec, first: Any,
           fresh: bool, best: BestModel | None
           ) -> tuple[Any, HeldOutEval | None, BestModelSelection | None, UserCallbacks | None, float]:
    """`agent` trained in `run_dir` and its model.zip saved: (its logger, still open; the
    eval/ curves' and --select-best's callbacks; yours; the seconds it took). A failure or a
    stop removes a run folder without a checkpoint, keeps one with, and says which."""
    model = agent.model
    logger = None
    try:
        # the per-task latencies the folder shows already: a run stopped past its checkpoint
        # may have written that of the resumed run's first task, which drop_events_past keeps
        start = model.num_timesteps
        written = start if not fresh and logged_at(run_dir, PER_SAMPLE, start) else start - 1
        # inside: a stop while the events file opens or the held-out episode is set up (its
        # best-static run, seconds long) left a new run's folder behind, an events file alone
        logger = tensorboard_logger(str(run_dir))
        if not fresh:
            # past the step resumed from, not from it (drop_events_past says why)
            drop_events_past(logger, start)
        model.set_logger(logger)
        callbacks, held, selection = _callbacks(agent, run_dir, cfg, spec, first, fresh, best,
                                                written)
        # yours last: ours write and checkpoint as they would without them
        user = UserCallbacks(cfg.callbacks) if cfg.callbacks else None
        t0 = time.perf_counter()
        if fresh:
            write_text(run_dir / "config.yaml", run_config_text(cfg, settings_of(first, cfg)))
        # SB3's own log_interval unless one is given: each algorithm's default differs
        interval = {} if cfg.log_interval is None else {"log_interval": cfg.log_interval}
        stop_if_asked()     # one that came while the held-out episode was set up
        agent.learn(cfg.timesteps - start,
                    callback=[*callbacks, *([user] if user else []), _StopWhenAsked()],
                    reset_num_timesteps=fresh,
                    tb_log_name=run_dir.name, progress_bar=cfg.progress_bar, **interval)
        seconds = time.perf_counter() - t0
        # where the events end as it is saved: a resume from it reads on from there
        mark_events(logger, run_dir, model.num_timesteps)
        # a resume continues from model.zip when it is the newest: DQN and SAC need their
        # buffer beside it, or it starts again from an empty one
        save_model_files(model, run_dir / "model.zip", model.num_timesteps, agent.warmup)
    except BaseException as exc:
        if isinstance(exc, Exception):
            # a failure while a stop waits for its safe point is the stop's doing: SLURM's
            # SIGTERM (and a terminal's Ctrl-C) ends a SubprocVecEnv's workers too, whose
            # pipes then fail the step. It is told as the stop, as before it waited
            try:
                stop_if_asked()
            except KeyboardInterrupt as stop:
                exc = stop
        if logger is not None:
            # a full disk fails the events writer's close as it failed the write: that second
            # error replaced the run's own, as a traceback naming no run
            with contextlib.suppress(OSError):
                logger.close()
        if isinstance(exc, Exception) and not isinstance(exc, (Diverged, OSError)) \
                and not finite_weights(model.policy):
            # NaN weights met inside an update (SAC's sampling refuses a NaN mean) before the
            # guard's next check: SB3's error said nothing of a learning rate
            exc = diverged(model)
        kept = bool(checkpoints(run_dir))
        if not kept:
            shutil.rmtree(run_dir, ignore_errors=True)
        what = (f"kept {run_dir} (continue it with: {_resume_command(run_dir)})" if kept
                else f"removed {run_dir} (no checkpoint)")
        if isinstance(exc, Exception):
            raise RunFailed(f"run {run_dir.name} failed ({_failure(exc, run_dir)}); "
                            f"{what}") from exc
        print(f"run {run_dir.name} interrupted; {what}", file=sys.stderr)
        raise exc
    return logger, held, selection, user, seconds


def _score(result: RunResult, cfg: TrainConfig, logger: Any,
           selection: BestModelSelection | None, best: BestModel | None) -> None:
    """The finished run's held-out scores (its model's, and --select-best's model's) set in
    `result` and written as final/ (and best/) scalars; the logger closed. A write the file
    system refuses is a FinishedUnrecorded: its model.zip is complete (as `train_and_score`
    says of a stop from here on)."""
    run_dir = result.run_dir
    try:
        try:
            # what was recorded since the last write, at the run's last step (a stop's
            # rollout, yours; the stretch after a --log-interval's, A2C's or DQN's last write,
            # which only final/'s write took along: --eval-tasks 0 writes none, and the
            # curves ended short of the model saved); final/ follows at the same step
            stop_if_asked()     # one that came in the last update: model.zip is saved
            logger.dump(result.steps)
            if cfg.eval_tasks:
                score_final_model(result, cfg, logger)
            stop_if_asked()
            if selection is not None and selection.best is not None:
                # saved by this run at its last point: the model of model.zip, already scored
                final = (selection.best is not best
                         and selection.best.num_timesteps == result.steps)
                result.best = selected_model(result, cfg, selection.best, final)
                chosen = result.best
                write_scalars(logger, BEST_METRICS, (float(chosen.latency.mean()),
                                                     chosen.vs_best_static,
                                                     chosen.record.num_timesteps),
                              result.steps)
        except BaseException:
            # quietly: a full disk fails the close as it failed the write, which it replaced
            with contextlib.suppress(OSError):
                logger.close()
            raise
        logger.close()      # its own refused write is the run's error (below)
    except OSError as exc:
        if exc.errno in REFUSED_WRITES:
            raise _finished_unrecorded(exc, run_dir) from exc
        raise


def _finished_unrecorded(exc: OSError, run_dir: Path) -> FinishedUnrecorded:
    """The error for `exc`, a write the file system refused (a full disk, writing final/ to
    the events file) after the run in `run_dir` finished training: its model.zip is complete,
    and the line says how to evaluate it."""
    return FinishedUnrecorded(f"run {run_dir.name} finished training, then "
                              f"{_failure(exc, run_dir)}; its TensorBoard events may lack the "
                              f"last points, but its model.zip is complete: evaluate it with: "
                              f"{command('evaluate')} --models {run_dir}")


def _failure(exc: Exception, run_dir: Path) -> str:
    """What failed a run, said in its line: a write the file system refused without naming
    a file (TensorBoard's events writer on a full disk: "[Errno 28] No space left on device")
    is said to be in the run's folder."""
    if isinstance(exc, OSError) and exc.errno in REFUSED_WRITES and not exc.filename:
        return f"the file system refused a write in {run_dir}: {exc.strerror}"
    return f"{type(exc).__name__}: {exc}"


def _resume_command(run_dir: Path) -> str:
    """The command that continues the run in `run_dir`."""
    return f"{command('train')} --resume {run_dir.name} --log-dir {run_dir.parent}"


def _callbacks(agent: SB3Agent, run_dir: Path, cfg: TrainConfig, spec: RunSpec, first: Any,
               fresh: bool, best: BestModel | None, written_through: int = -1
               ) -> tuple[list[Any], HeldOutEval | None, BestModelSelection | None]:
    """A run's callbacks, and of them its eval/ curves' and --select-best's, which it reads;
    `written_through`: the last task index whose per-task latency the folder shows."""
    model = agent.model
    # the guard first: it stops an update's NaN weights before any other callback sees them
    callbacks: list[Any] = [DivergenceGuard(),
                            LatencyMetrics(first.unwrapped.device_names, cfg.metrics_window,
                                           cfg.per_sample_interval, written_through)]
    if fresh:
        callbacks.append(RunInfo(to_yaml(cfg), _hparams(cfg, spec), agent.clone_stats))
    if cfg.checkpoint_interval:
        callbacks.append(AtomicCheckpoint(
            max(cfg.checkpoint_interval // cfg.n_envs, 1), str(run_dir / "checkpoints"),
            name_prefix=CHECKPOINT_PREFIX, save_replay_buffer=hasattr(model, "replay_buffer"),
            save_vecnormalize=cfg.normalize, warmup=agent.warmup, keep=cfg.keep_checkpoints,
            run_dir=run_dir))
    held = held_out_eval(agent, cfg) if cfg.eval_interval and cfg.eval_tasks else None
    if held is not None:
        callbacks.append(held)
    selection = None
    if cfg.select_best:     # TrainConfig.validate: with eval/ points and an episode to run
        selection = BestModelSelection(episodes_of(learned_model(agent), cfg, cfg.validation_seed),
                                       cfg.eval_interval, run_dir,
                                       (cfg.validation_seed, cfg.eval_tasks), best)
        callbacks.append(selection)
    return callbacks, held, selection
