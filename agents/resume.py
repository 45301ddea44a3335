"""``train.py --resume``: a run continued in its folder, from its newest checkpoint (or its
model.zip) to a new ``--timesteps`` total (``resume_run``).

A resume trains on with the run's own config.yaml: of the options given, only those of
``RESUMABLE`` may differ from it, and the run's held-out and validation episodes are kept
(``KEPT_EPISODES``). It is refused where the run's setting was edited since it started
(``agents.run_setting``), where another process trains the run (its lock), and where the run
has no readable checkpoint or model, or has the steps asked for already (``AlreadyTrained``).
A ``--select-best`` run keeps its best model so far (``best_so_far``).

A resume is reproducible (the same resume twice gives the same model) but not the model a
straight run to the same total gives: SB3 saves neither the envs' state nor the random
generators', so the resumed run starts new episodes, its envs and generators seeded
``resume_seed(seed, steps)`` (``seed`` would replay the task stream it has already seen; ``seed + steps`` was
the held-out seeds themselves for a resume at 10000 steps). Compare runs trained straight.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from agents.callbacks import validation_record
from agents.commands import command
from agents.config import ConfigError, TrainConfig, flag_of
from agents.files import write_text
from agents.overrides import layer_hyperparams
from agents.registry import make_fixed_policy
from agents.run_folder import (
    BEST_MODEL,
    BEST_RECORD,
    BestModel,
    checkpoints,
    companion,
    find_run,
    read_best_record,
    restore_warmup_state,
    save_best_record,
    saved_steps,
    unreadable_models,
)
from agents.run_plan import (
    absolute_files,
    check_conservative,
    env_for,
    read_run_config,
    run_spec,
    warmup_config,
)
from agents.run_records import RunResult, RunSpec
from agents.run_scores import episodes_of, saved_model
from agents.run_setting import Settings, check_setting, recorded_settings, run_config_text
from agents.run_training import build_vec_env, train_and_score, training_lock
from agents.sb3_factory import OtherDeviceCount, SB3Agent, algorithm_class, load_to_train
from agents.sb3_hyperparams import hyperparams_with
from agents.user_callbacks import check_callbacks
from agents.vec_envs import close_venv
from agents.warmup import WarmupConfig, attach_warmup

RESUMABLE = {"timesteps", "checkpoint_interval", "keep_checkpoints", "progress_bar", "jobs",
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


class AlreadyTrained(ConfigError):
    """A resume to a total of steps the run has reached already."""


def resume_run(config: TrainConfig, given: set[str]) -> RunResult:
    """Continue a run from its last checkpoint, in its folder, to ``config.timesteps`` steps."""
    run_dir = find_run(config.log_dir, config.resume or "latest")
    with training_lock(run_dir):
        return _resume_in(config, given, run_dir)


def _resume_in(config: TrainConfig, given: set[str], run_dir: Path) -> RunResult:
    """`resume_run` in `run_dir`, whose lock it holds."""
    records: dict[str, Any] = {}        # config.yaml's records of the run, read with it
    saved = read_run_config(run_dir / "config.yaml", records)
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
    settings = check_setting(run_dir.name, cfg,
                             recorded_settings(records, run_dir / "config.yaml"), env)
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
    return train_and_score(agent, run_dir, cfg, spec, first, fresh=False, best=best)


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
