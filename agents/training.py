"""Training runs of ``train.py``: one run per agent x warm-up spec x seed, each in its own folder.

``train`` checks and makes a plan's runs (``agents.run_plan``), trains each in turn
(``agents.run_training``) or ``--jobs`` of them at once (``agents.parallel_runs``), or resumes
one (``agents.resume``); ``agents.run_scores`` scores them on the held-out episode and makes
the comparison table, and ``agents.run_records`` holds their records and failures. Before
the first run it notes what the plan does that a user may not expect: more steps than asked
(``agents.rollout_steps``), a warm run's drift on a trace (``agents.run_plan``), events that
would fill a disk (``agents.events_size``).

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
  its ``hp`` every hyper-parameter the run used (the YAML's and the overrides), its
  ``hp_of`` what those depend on (agent, env id, warm start: ``--config`` of the file
  refuses to train other runs with them, ``agents.run_plan``), and its ``settings`` a digest of each part of each training scenario's setting as the run started
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
add, change or drop them: ``agents.resume.RESUMABLE``; config.yaml records those of the run's
last session).

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
An interrupt (Ctrl-C, or train.py's SIGTERM: ``agents.interrupts``) stops the whole plan
(with ``--jobs``, every run training: ``agents.parallel_runs``).
"""

from __future__ import annotations

import dataclasses
import sys
import traceback
from collections.abc import Callable, Iterator

from agents.config import TrainConfig
from agents.config_parsing import GivenOptions
from agents.divergence import Diverged
from agents.events_size import events_notes
from agents.files import REFUSED_WRITES, WriteFailed
from agents.resume import AlreadyTrained, resume_run
from agents.rollout_steps import rounding_notes
from agents.run_plan import absolute_files, drift_notes, plan
from agents.run_records import (
    FinishedUnrecorded,
    Outcome,
    PlanStopped,
    RunFailed,
    RunResult,
    RunsFailed,
    RunSpec,
    ends_plan,
)
from agents.run_scores import drift_note, finished_line
from agents.run_training import train_run
from agents.workers import processes_for


def train(config: TrainConfig, given: set[str] | None = None,
          report: Callable[[str], None] = print) -> list[RunResult]:
    """Every run of `config` (or the one resumed), one `report` line per finished run.

    `given`: the options set (train.py's flags and --config file), which a resume takes over
    the run's config.yaml (``agents.resume.RESUMABLE``) or refuses where they differ from it.
    None (a config built in Python): those that differ from TrainConfig's defaults; name one
    set to its default in `given` for a resume to take it."""
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
    specs = (plan(config, given.hp_source, given.hp_of) if isinstance(given, GivenOptions)
             else plan(config))
    # after the plan's refusals (a note above one was noise), before the first run
    # SB3 trains whole rollouts, more than asked; a trace's warm runs may drift off the clone;
    # a long plan's events fill a disk
    warmups = list(dict.fromkeys(spec.warmup for spec in specs))
    for note in [*rounding_notes(config), *drift_notes(config, warmups),
                 *events_notes(config, specs)]:
        print(note, file=sys.stderr)
    stopped_by: WriteFailed | None = None
    done: dict[int, RunResult] = {}
    failed: dict[int, RunFailed | FinishedUnrecorded] = {}
    for index, outcome in _outcomes(config, specs):
        if isinstance(outcome, (RunFailed, FinishedUnrecorded)):
            # One run's crash (a NaN in its weights, say) is no reason to drop the seeds and
            # agents still to come: report it now, go on, and fail at the end. A write refused
            # after its training (its model.zip complete) went on to the end as well: the
            # finished runs' table and the runs to come were lost, where a write refused
            # during training went on. A WriteFailed before training (the run folder, or its
            # lock file, refused) ends the plan: every run would meet the same folder.
            print_cause(outcome)
            print(f"error: {outcome}; going on with the other runs", file=sys.stderr)
            failed[index] = outcome
        elif isinstance(outcome, WriteFailed):      # the finished runs' table is still shown
            stopped_by = stopped_by or outcome
        else:
            done[index] = outcome
            report(finished_line(outcome))
            drifted = drift_note(outcome)
            if drifted is not None:
                print(drifted, file=sys.stderr)
    # in plan order, however they ended (--jobs): the table one at a time would print
    results = [done[i] for i in sorted(done)]
    failures = [failed[i] for i in sorted(failed)]
    if stopped_by is not None:
        raise PlanStopped(stopped_by, len(specs), failures, results) from stopped_by
    if failures:
        raise RunsFailed(failures, results)
    return results


def _outcomes(config: TrainConfig, specs: list[RunSpec]
              ) -> Iterator[tuple[int, Outcome]]:
    """(plan index, outcome) of each run: one at a time in this process, or ``--jobs`` at once
    (``agents.parallel_runs``). No run starts after a write refused before a run's training."""
    jobs = processes_for(config.jobs, len(specs))
    if jobs > 1:
        from agents.commands import current_form
        from agents.parallel_runs import trained_at_once

        # one progress bar per process on one terminal garble each other
        each = dataclasses.replace(config, jobs=1, progress_bar=False)
        yield from trained_at_once(each, specs, jobs, current_form())
        return
    for index, spec in enumerate(specs):
        try:
            outcome: Outcome = train_run(config, spec)
        except (RunFailed, FinishedUnrecorded, WriteFailed) as exc:
            outcome = exc
        yield index, outcome
        if ends_plan(outcome):
            return


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
    if cause is None or isinstance(cause, Diverged):     # the user's learning rate, no bug: its line says so
        return
    if not isinstance(cause, WriteFailed) and not (isinstance(cause, OSError)
                                                   and cause.errno in REFUSED_WRITES):
        traceback.print_exception(cause, file=sys.stderr)
