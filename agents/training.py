"""Training runs of ``train.py``: one run per agent x warm-up spec x seed, each in its own folder.

A run folder ``{log_dir}/{env}__{agent}[-warm]__{seed}__{unix time}/`` (CleanRL naming;
partial warm-ups read ``-warm-clone+guard``) holds:

* ``events.out.tfevents.*``: SB3's scalars and ours (``agents.callbacks``), the config as
  text and the hyper-parameters in the HPARAMS view; a resumed run appends a new events
  file beside the old ones, with the step count continuing from the step resumed from, and
  marks it so that TensorBoard drops the old files' events past it (a run stopped after its
  last checkpoint had logged them; the resumed run logs those steps again, each shown once:
  ``agents.callbacks.drop_events_past``);
* ``tensorboard.json``: the size of each events file when the newest checkpoint or
  ``model.zip`` was saved, from where a resume reads what a run stopped after it logged
  (``agents.event_files``);
* ``config.yaml``: the resolved config of this run (``train.py --config`` reads it back),
  its ``hp`` every hyper-parameter the run used (the YAML's and the overrides), and its
  ``settings`` a digest of each part of each training scenario's setting as the run started
  (workload, hardware, variant, trace contents...), which ``--resume`` compares to the
  setting's now, refusing one edited since (``agents.run_setting``);
* ``checkpoints/model_<steps>_steps.zip`` every ``checkpoint_interval`` steps (plus the
  VecNormalize statistics, for DQN and SAC the latest replay buffer, and with warm-up the
  guard's state, which it and its ``warmup/guard_trips`` curve continue from on ``--resume``);
  every one, or with ``keep_checkpoints`` that many, the newest;
* ``model.zip`` once training ends, for DQN and SAC with ``replay_buffer.pkl`` (a resume from
  ``model.zip`` continues with it), ``vecnormalize.pkl`` with ``normalize``, and
  ``warmup.json`` with warm-up (the guard's trip count and the windows of latency ratios
  it compares, at that step);
* with ``--select-best``, ``best_model.zip``: the model of the lowest mean latency on the
  validation episode (``--eval-tasks`` tasks of ``--validation-seed``, never the held-out
  episode) at the eval/ points so far, and ``best_model.json``, its record (step, that mean,
  it over best-static's there; ``agents.run_folder.BestModel``). The comparison table scores
  it on the held-out episode in a row of its own. A resume keeps the best so far (a later
  model replaces it only by beating it), which may be of steps past the checkpoint resumed
  from; ``evaluate.py --models RUN/best_model.zip`` evaluates it as ``<agent>@best``;
* ``.train.lock`` while the run trains or resumes (``agents.locks``): a ``--resume`` of it from
  another process is refused at once; removed as it ends (the one a killed process leaves is
  taken over by the next resume).

A callback of yours (``--callbacks``, ``agents.user_callbacks``) that stops training ends the
run at that step as if it were its last: model.zip is saved, scored on the held-out episode and
in the table, and the run's line says which callback stopped it at which step of
``--timesteps``; ``--resume`` continues it, as callbacks are no part of the model (a resume may
add, change or drop them: ``RESUMABLE``; config.yaml records those of the run's last session).

What a failed run leaves: the folder is created only once the env and the agent are built
(warm-up cloning included), so bad options never leave one. If training then fails (or is
interrupted) before the first checkpoint, the folder is removed; after it, the folder is
kept without ``model.zip`` and ``--resume`` continues it. Every file is written to a temp
file and renamed, so none is ever half-written. An existing folder is never reused for a
new run: a clash in the same second gets a ``-1``, ``-2``... suffix. A failed run (or one
whose write was refused after its training, its model.zip complete) is reported when it
fails and the plan's other runs go on; ``train`` then raises ``RunsFailed`` with the
results of those that finished (train.py prints their table and exits 1). A write refused
before a run's training (its folder, its lock) would meet every run to come, and ends the
plan: ``PlanStopped``, a ``RunsFailed`` with the runs before it (their table printed too).
An interrupt (Ctrl-C, or train.py's SIGTERM: ``agents.interrupts``) stops the whole plan.

A resume is reproducible (the same resume twice gives the same model) but not the model a
straight run to the same total gives: SB3 saves neither the envs' state nor the random
generators', so the resumed run starts new episodes, its envs and generators seeded
``resume_seed(seed, steps)`` (``seed`` would replay the task stream it has already seen; ``seed + steps`` was
the held-out seeds themselves for a resume at 10000 steps). Compare runs trained straight.

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
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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
    validation_record,
)
from agents.commands import command
from agents.config import ConfigError, GivenOptions, TrainConfig, flag_of, to_yaml
from agents.divergence import Diverged, DivergenceGuard, diverged, finite_weights
from agents.event_files import logged_at, mark_events
from agents.files import REFUSED_WRITES, WriteFailed, write_text
from agents.locks import FolderBusy, holding
from agents.overrides import layer_hyperparams
from agents.registry import make_fixed_policy
from agents.rollout_steps import rounding_notes
from agents.run_folder import (
    BEST_MODEL,
    BEST_RECORD,
    CHECKPOINT_PREFIX,
    AtomicCheckpoint,
    BestModel,
    checkpoints,
    companion,
    find_run,
    new_run_dir,
    read_best_record,
    restore_warmup_state,
    run_files,
    save_best_record,
    save_model_files,
    saved_steps,
    unreadable_models,
)
from agents.run_plan import (
    absolute_files,
    check_conservative,
    env_for,
    plan,
    read_run_config,
    run_name,
    run_spec,
    warmup_config,
)
from agents.run_records import (
    FinishedUnrecorded,
    PlanStopped,
    RunFailed,
    RunResult,
    RunsFailed,
    RunSpec,
)
from agents.run_scores import (
    episodes_of,
    finished_line,
    held_out_eval,
    learned_model,
    saved_model,
    score_final_model,
    selected_model,
    write_scalars,
)
from agents.run_setting import (
    Settings,
    check_setting,
    recorded_settings,
    run_config_text,
    settings_of,
)
from agents.sb3_factory import (
    OtherDeviceCount,
    SB3Agent,
    algorithm_class,
    load_to_train,
    make_sb3,
    starts_warm,
    wrap_for,
)
from agents.sb3_hyperparams import hyperparams_with
from agents.user_callbacks import UserCallbacks, check_callbacks
from agents.vec_envs import close_venv, first_env, training_venv
from agents.warmup import WarmupConfig, attach_warmup
from envs.scenario import load_scenario

RESUMABLE = {"timesteps", "checkpoint_interval", "keep_checkpoints", "progress_bar",
             "eval_interval", "metrics_window", "vec_env", "per_sample_interval",
             "log_interval", "callbacks", "scenario_weights"}
# The episodes a run is scored on, which a resume keeps: the held-out one of its eval/ curves
# and final/ row (or its later points would come from another episode on the same curves as
# the earlier ones), and --select-best's validation one. Option -> (episode, why it is kept).
KEPT_EPISODES = {
    "eval_seed": ("held-out", "its later eval/ and final/ points would come from another "
                              "episode on the same curves as the earlier ones"),
    "eval_tasks": ("held-out", "its later eval/ and final/ points would come from another "
                               "episode on the same curves as the earlier ones"),
    "validation_seed": ("validation", "its later models would be chosen against a best "
                                      "model scored on another episode"),
}


# ----------------------------------------------------------------------------- building
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


# A resumed run's env seeds lie at or above this, away from training seeds (0, 1, ...), the
# held-out ones (HELDOUT_SEED = 10000 on) and cloning's (CLONE_SEED_OFFSET, 7919000 on).
RESUME_SEED_OFFSET = 1_000_000_000


def resume_seed(seed: int, steps: int) -> int:
    """The first env seed of `seed`'s run resumed at `steps` (env i gets it + i).

    ``seed + steps`` was a resume at the default checkpoint's 10000 steps training seeds
    0-4 on held-out seeds 10000-10004: the very episodes (the scenario's length, two per
    seed) that evaluate.py then scores the run on. Below 2 * 10**9, so that seed + n_envs
    stays within MAX_SEED."""
    return RESUME_SEED_OFFSET + (seed + steps) % RESUME_SEED_OFFSET


def _hparams(config: TrainConfig, spec: RunSpec) -> dict[str, Any]:
    """The HPARAMS view of a new run; `config` is the run's own, whose ``hp`` holds every
    hyper-parameter the run uses (``train_run``)."""
    return {"agent": spec.label, "algo": spec.agent, "warmup": spec.warmup, "seed": spec.seed,
            "env_id": config.env_id, "scenario": ", ".join(config.training_scenarios()),
            "reward": config.reward,
            "hardware": config.hardware or "(scenario's)", "variant": config.variant or
            "(scenario's)", "timesteps": config.timesteps, "n_envs": config.n_envs,
            "normalize": config.normalize, "episode_tasks": _episode_tasks(config),
            "conservative": config.conservative if spec.warmup != "none" else "-",
            # only where given: the view of every other run reads as it did
            **({"scenario_weights": ", ".join(f"{w:g}" for w in config.scenario_weights)}
               if config.scenario_weights else {}),
            **{f"hp/{k}": v for k, v in config.hp.items()}}


def _episode_tasks(config: TrainConfig) -> int:
    """The tasks of a training episode: --episode-tasks, else the scenarios' own (the view
    showed 0 for them); 0 where the scenarios of a mix differ, each then its own."""
    if config.episode_tasks is not None:
        return config.episode_tasks
    counts = {load_scenario(name).episode_tasks for name in config.training_scenarios()}
    return counts.pop() if len(counts) == 1 else 0


# ----------------------------------------------------------------------------- running
def train_run(config: TrainConfig, spec: RunSpec) -> RunResult:
    """Train one run in a new folder (see the module docstring for what it holds)."""
    warm = warmup_config(config, spec.warmup)
    venv, first = build_vec_env(config, spec.agent, spec.seed, warm_start=starts_warm(warm))
    try:
        agent = make_sb3(spec.agent, first, seed=spec.seed, overrides=config.hp, warmup=warm,
                         vec_env=venv, metrics_window=config.metrics_window)
        run_dir = new_run_dir(config.log_dir, run_name(config, spec),
                              run_files(config.timesteps))
        # hp: every hyper-parameter the agent was built with (the YAML's, a warm start's, the
        # overrides), so the run's config.yaml reproduces it after agents/hyperparams/ changes
        run_config = dataclasses.replace(config, agents=[spec.agent], warmup=[spec.warmup],
                                         seeds=[spec.seed], resume=None,
                                         hp=dict(agent.hyperparams))
        try:
            with _training(run_dir, option="--log-dir"):
                return _run(agent, run_dir, run_config, spec, first, fresh=True)
        except WriteFailed as exc:
            if not isinstance(exc, FinishedUnrecorded):    # its lock, before training: the
                with contextlib.suppress(OSError):        # folder just made is empty
                    run_dir.rmdir()
            raise
    finally:
        close_venv(venv)


class AlreadyTrained(ConfigError):
    """A resume to a total of steps the run has reached already."""


def resume_run(config: TrainConfig, given: set[str]) -> RunResult:
    """Continue a run from its last checkpoint, in its folder, to ``config.timesteps`` steps."""
    run_dir = find_run(config.log_dir, config.resume or "latest")
    with _training(run_dir):
        return _resume_in(config, given, run_dir)


@contextlib.contextmanager
def _training(run_dir: Path, option: str = "") -> Iterator[None]:
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


def _resume_in(config: TrainConfig, given: set[str], run_dir: Path) -> RunResult:
    """`resume_run` in `run_dir`, whose lock it holds."""
    saved = read_run_config(run_dir / "config.yaml")
    # an option given with its saved value (e.g. --config of the run's own config.yaml) is fine
    # (file paths compared absolute, as runs record them)
    given_abs, saved_abs = absolute_files(config), absolute_files(saved)
    # config.yaml's hp holds every hyper-parameter the run used, --hp the overrides alone: the
    # run's own --hp n_steps=64 (its command line run again with --resume) was refused as a
    # change; overrides that change none of the run's values are its own
    given_abs.hp = layer_hyperparams(saved.hp, config.hp)
    extra = sorted(k for k in given - RESUMABLE - {"resume", "log_dir"}
                   if getattr(given_abs, k) != getattr(saved_abs, k))
    kept = [k for k in KEPT_EPISODES if k in extra]
    if kept:                                         # the one a user most likely means
        key = kept[0]
        flag = flag_of(key)
        episode, why = KEPT_EPISODES[key]
        raise ConfigError(
            f"--resume continues {run_dir.name} on its own {episode} episode: {flag} "
            f"{getattr(config, key)} is not the run's {flag} {getattr(saved, key)} "
            f"(its config.yaml), and {why}; resume without {flag}, or start a new "
            f"run ({command('train')} without --resume) for {flag} {getattr(config, key)}")
    if extra:
        raise ConfigError(f"--resume continues {run_dir.name} with its saved config; only "
                          f"{', '.join(flag_of(k) for k in sorted(RESUMABLE))}"
                          f" may change (got {', '.join(flag_of(k) for k in extra)}); resume "
                          f"without them, or start a new run ({command('train')} without "
                          f"--resume)")
    cfg = dataclasses.replace(saved, resume=None, log_dir=str(run_dir.parent),
                              **{k: getattr(config, k) for k in given & RESUMABLE})
    if "scenario_weights" in given:     # new weights, of the run's scenarios
        cfg.validate()
    spec = run_spec(cfg)
    found = checkpoints(run_dir)
    if not found:
        unreadable = unreadable_models(run_dir)     # each naming its file, and why
        if unreadable:
            raise ConfigError(f"run {run_dir} has no readable checkpoint or model to resume "
                              f"from: {'; '.join(unreadable)}; restore the run's files, or "
                              f"train a new run ({command('train')} without --resume)")
        # a run killed (SIGKILL, out of memory, a power loss) before its first checkpoint keeps
        # its folder, which --resume (latest) then found every time, with no word on what to do
        every = (f"every {cfg.checkpoint_interval:,} steps" if cfg.checkpoint_interval
                 else "none with --checkpoint-interval 0")
        raise ConfigError(f"run {run_dir} has no checkpoint or model to resume from (it "
                          f"stopped before its first checkpoint: {every}); remove it and train "
                          f"a new run ({command('train')} without --resume)")
    steps, path = found[-1]
    newer = unreadable_models(run_dir, newer_than=steps)
    if newer:   # the run went back to an older save without a word (DQN's buffer emptied)
        raise ConfigError(f"cannot resume {run_dir.name} from its newest save: "
                          f"{'; '.join(newer)}; restore it, or move it out of the run folder "
                          f"to resume from {path} at {steps} steps")
    if steps >= cfg.timesteps:
        raise AlreadyTrained(f"run {run_dir.name} already has {steps} steps; give --timesteps "
                             f"above that (the new total) to continue it")
    try:    # the run's own (config.yaml names them as given, imported from here) or new ones
        check_callbacks(cfg.callbacks)
    except ValueError as exc:
        raise ConfigError(f"--resume {run_dir.name}: {exc}") from None
    # cfg.hp: every hyper-parameter the run was built with, a warm start's included. The model
    # trains on with the values saved in its zip, so no model is built from them here (as
    # plan's check_hyperparams does); the record is checked as --config checks it (an edited
    # config.yaml's NaN learning rate resumed silently, and --config refused the file)
    try:
        hyperparams_with(spec.agent, cfg.env_id, cfg.hp)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"--resume {run_dir.name}: {run_dir / 'config.yaml'}'s hp for "
                          f"{spec.agent}: {exc}") from None
    seed = resume_seed(spec.seed, steps)
    warm = warmup_config(cfg, spec.warmup, done_steps=steps // cfg.n_envs)
    # the envs as the saved config builds them now, against the setting the run started on
    # (config.yaml's record): an edited scenario, hardware or trace file was trained on
    env = env_for(cfg)
    settings = check_setting(run_dir.name, cfg, recorded_settings(run_dir / "config.yaml"), env)
    if warm is not None:
        # as plan() checks a new run's, before the envs are built: config.yaml names a policy
        # of yours as given, imported from the working directory (another folder's resume
        # failed with a traceback), and --vec-env may have changed
        try:
            conservative = make_fixed_policy(cfg.conservative, env, "--conservative policy")
        except ValueError as exc:
            raise ConfigError(f"--resume {run_dir.name}: {exc}") from None
        check_conservative(cfg, conservative, env, [warm])
    env.close()
    venv, first = build_vec_env(cfg, spec.agent, seed, companion(path, "vecnormalize", steps))
    try:
        return _resume(cfg, spec, run_dir, path, steps, seed, venv, first, warm, settings)
    finally:
        close_venv(venv)


def _resume(cfg: TrainConfig, spec: RunSpec, run_dir: Path, path: Path, steps: int, seed: int,
            venv: Any, first: Any, warm: WarmupConfig | None, settings: Settings) -> RunResult:
    """`resume_run`'s model, loaded from the checkpoint at `path` onto `venv`, trained on;
    `settings` its setting's digests, as `check_setting` computed them."""
    algo = algorithm_class(spec.agent, warm=warm is not None)
    try:    # evaluate.py's checks and one-line refusals of the same zip
        model = load_to_train(path, spec.agent, algo, first, venv)
    except OtherDeviceCount as exc:     # its hardware file edited since, say
        hardware = (f"hardware {cfg.hardware}" if cfg.hardware else
                    f"scenario {cfg.held_out_scenario()}'s hardware")
        raise ConfigError(f"cannot resume {run_dir.name}: {exc.fact}: its {hardware} is not "
                          f"the hardware the run was trained on; restore it as it was, or "
                          f"train a new run on it ({command('train')} without --resume)"
                          ) from None
    except ValueError as exc:
        raise ConfigError(f"cannot resume {run_dir.name} ({spec.agent} in {cfg.env_id}, as its "
                          f"config.yaml says): {str(exc).rstrip('.')}; restore the run's own "
                          f"file, or train a "
                          f"new run ({command('train')} without --resume)") from None
    # SB3's load seeds everything (the envs' next resets too) with the model's saved seed, the
    # run's own: the resumed envs replayed the task streams the run began on. Seeded again
    # here; the model keeps the run's seed, from which a later resume derives its own.
    model.set_random_seed(seed)
    buffer = companion(path, "replay_buffer", steps)
    if hasattr(model, "load_replay_buffer"):
        if buffer.is_file():
            model.load_replay_buffer(buffer)
        else:   # an older checkpoint's (only the newest's is kept): it was an unnamed restart
            print(f"note: no replay buffer was saved with {path} (a run keeps the newest "
                  f"checkpoint's alone): {spec.agent} goes on from an empty one", file=sys.stderr)
    agent = SB3Agent(spec.agent, model, first)
    if warm is not None:
        controller = attach_warmup(agent, first, warm, seed=spec.seed,
                                   metrics_window=cfg.metrics_window)
        try:
            restore_warmup_state(controller, companion(path, "warmup", steps, "json"), steps)
        except ValueError as exc:      # a damaged warmup.json: the CLI's one-line error
            raise ConfigError(str(exc)) from None
    best = best_so_far(run_dir, cfg) if cfg.select_best else None
    # the record as checked (a run folder older than it gets it now, for its next resume)
    write_text(run_dir / "config.yaml", run_config_text(cfg, settings))
    return _run(agent, run_dir, cfg, spec, first, fresh=False, best=best)


def best_so_far(run_dir: Path, cfg: TrainConfig) -> BestModel | None:
    """The best model a resumed ``--select-best`` run keeps, whose validation mean a later
    model must beat to replace it: best_model.json's record (a damaged one is a ConfigError
    naming it). Where the record does not name best_model.zip's step (the run stopped between
    saving the model and its record, which follows it) the saved model is scored on the
    validation episode again, and the record written. None where no model was saved."""
    try:
        record = read_best_record(run_dir / BEST_RECORD)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    path = run_dir / BEST_MODEL
    steps = saved_steps(path) if path.is_file() else None
    if steps is None:
        return None
    mix = cfg.training_scenarios() if len(cfg.training_scenarios()) > 1 else None
    # a mix's record written before mixes were scored whole was chosen on the first scenario
    if record is not None and record.num_timesteps == steps and record.scenarios == mix:
        return record
    try:
        record = validation_record(episodes_of(saved_model(path), cfg, cfg.validation_seed), steps,
                                   (cfg.validation_seed, cfg.eval_tasks))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    save_best_record(run_dir / BEST_RECORD, record)
    return record


def _run(agent: SB3Agent, run_dir: Path, cfg: TrainConfig, spec: RunSpec, first: Any,
         fresh: bool, best: BestModel | None = None) -> RunResult:
    """The run in `run_dir` trained to --timesteps and saved (`_learn`), then scored."""
    model = agent.model
    start = model.num_timesteps
    logger, held, selection, user, seconds = _learn(agent, run_dir, cfg, spec, first, fresh, best)
    result = RunResult(run_dir, spec, model.num_timesteps, seconds,
                       new_steps=model.num_timesteps - start,
                       evaluated=held.last if held is not None else None,
                       stopped=user.stopped(model.num_timesteps, cfg.timesteps,
                                            _resume_command(run_dir)) if user else None,
                       clone=agent.clone_stats if fresh else None)
    _score(result, cfg, logger, selection, best)
    return result


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
        agent.learn(cfg.timesteps - start, callback=callbacks + ([user] if user else []),
                    reset_num_timesteps=fresh,
                    tb_log_name=run_dir.name, progress_bar=cfg.progress_bar, **interval)
        seconds = time.perf_counter() - t0
        # where the events end as it is saved: a resume from it reads on from there
        mark_events(logger, run_dir, model.num_timesteps)
        # a resume continues from model.zip when it is the newest: DQN and SAC need their
        # buffer beside it, or it starts again from an empty one
        save_model_files(model, run_dir / "model.zip", model.num_timesteps, agent.warmup)
    except BaseException as exc:
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
        raise
    return logger, held, selection, user, seconds


def _score(result: RunResult, cfg: TrainConfig, logger: Any,
           selection: BestModelSelection | None, best: BestModel | None) -> None:
    """The finished run's held-out scores (its model's, and --select-best's model's) set in
    `result` and written as final/ (and best/) scalars; the logger closed. A write the file
    system refuses is a FinishedUnrecorded, a stop said as one after the training: its
    model.zip is complete either way."""
    run_dir = result.run_dir
    try:
        try:
            # what was recorded since the last write, at the run's last step (a stop's
            # rollout, yours; the stretch after a --log-interval's, A2C's or DQN's last write,
            # which only final/'s write took along: --eval-tasks 0 writes none, and the
            # curves ended short of the model saved); final/ follows at the same step
            logger.dump(result.steps)
            if cfg.eval_tasks:
                score_final_model(result, cfg, logger)
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
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                # "interrupted" alone read as a run lost: its model.zip is saved, its training
                # done
                print(f"run {run_dir.name} interrupted after its training finished; kept "
                      f"{run_dir} (its model.zip is complete: evaluate it with: "
                      f"{command('evaluate')} --models {run_dir})", file=sys.stderr)
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


def train(config: TrainConfig, given: set[str] | None = None,
          report: Callable[[str], None] = print) -> list[RunResult]:
    """Every run of `config` (or the one resumed), one `report` line per finished run.

    `given`: the options set (train.py's flags and --config file), which a resume takes over
    the run's config.yaml (``RESUMABLE``) or refuses where they differ from it. None (a config
    built in Python): those that differ from TrainConfig's defaults; name one set to its
    default in `given` for a resume to take it."""
    # train.py's parse_config validated it already; a config built in Python had not, and
    # an option only a run trips on (--select-best without eval/ points) left a folder behind
    config.validate()
    if config.resume is not None:
        # without `given`, every option was read as not set: TrainConfig(resume=..., timesteps=
        # 4000) resumed to the run's own total, and a scenario or reward of another run was
        # dropped without a word, the run's own trained on
        options = _options_set(config) if given is None else given
        try:
            result = resume_run(config, options)
        except AlreadyTrained as exc:
            if given is not None or "timesteps" in options:
                raise
            # TrainConfig(resume=..., timesteps=60000), the default typed out, read as unset
            raise AlreadyTrained(f"{exc} (timesteps={config.timesteps:,}, TrainConfig's "
                                 f"default, reads as not given: pass given={{'timesteps'}} "
                                 f"to train() to resume to it)") from None
        report(finished_line(result))
        return [result]
    config = absolute_files(config)
    results: list[RunResult] = []
    failures: list[RunFailed | FinishedUnrecorded] = []
    specs = plan(config, given.hp_source if isinstance(given, GivenOptions) else "")
    # after the plan's refusals (a note above one was noise), before the first run
    for note in rounding_notes(config):     # SB3 trains whole rollouts: more than asked
        print(note, file=sys.stderr)
    for spec in specs:
        try:
            results.append(train_run(config, spec))
        except (RunFailed, FinishedUnrecorded) as exc:
            # One run's crash (a NaN in its weights, say) is no reason to drop the seeds and
            # agents still to come: report it now, go on, and fail at the end. A write refused
            # after its training (its model.zip complete) went on to the end as well: the
            # finished runs' table and the runs to come were lost, where a write refused
            # during training went on. A WriteFailed before training (the run folder, or its
            # lock file, refused) ends the plan: every run would meet the same folder.
            print_cause(exc)
            print(f"error: {exc}; going on with the other runs", file=sys.stderr)
            failures.append(exc)
            continue
        except WriteFailed as exc:      # the finished runs' table is still shown
            raise PlanStopped(exc, len(specs), failures, results) from exc
        report(finished_line(results[-1]))
    if failures:
        raise RunsFailed(failures, results)
    return results


def _options_set(config: TrainConfig) -> set[str]:
    """The options of a config built in Python that differ from TrainConfig's defaults."""
    default = TrainConfig()
    return {f.name for f in dataclasses.fields(TrainConfig)
            if getattr(config, f.name) != getattr(default, f.name)}


def print_cause(failed: RunFailed | WriteFailed) -> None:
    """The traceback of what failed a run, for a bug; none where the file system refused a
    write (a full disk): the run's message says why (ours name the file, ``WriteFailed``).
    A run's own ``WriteFailed`` names its file whatever refused it (a permission too)."""
    if isinstance(failed, WriteFailed):
        return
    cause = failed.__cause__
    if isinstance(cause, Diverged):     # the user's learning rate, no bug: its line says so
        return
    if not isinstance(cause, WriteFailed) and not (isinstance(cause, OSError)
                                                   and cause.errno in REFUSED_WRITES):
        traceback.print_exception(cause, file=sys.stderr)
