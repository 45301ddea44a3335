"""A run folder's files: the folder itself, its checkpoints and what is saved beside each
model (VecNormalize statistics, the replay buffer, the warm-up's state), so that ``train.py
--resume`` and ``evaluate.py`` find them, and which folder a ``--resume`` means (``find_run``).
Every file is written whole (``agents.files``).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
import re
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import CheckpointCallback

from agents.commands import command, program
from agents.config import ConfigError
from agents.divergence import stop_if_diverged
from agents.event_files import mark_events
from agents.files import (
    WriteFailed,
    atomic_paths,
    check_room,
    temp_file,
    unreadable_folder,
    write_text,
)
from inference.messages import shown
from inference.yamlio import cannot_read

if TYPE_CHECKING:
    from agents.warmup import WarmupController

CHECKPOINT_PREFIX = "model"
BEST_MODEL = "best_model.zip"       # train.py --select-best's choice, and its record
BEST_RECORD = "best_model.json"
# the suffixes a run's name takes before new_run_dir gives up: runs of one name start within
# the same second, so a thousand taken means something other than runs made them
SUFFIXES = 1000


@dataclass(frozen=True)
class BestModel:
    """The record of a run's best_model.zip: the step it was saved at and how it did on the
    validation episode (``--validation-seed``, ``--eval-tasks`` tasks) that chose it."""

    num_timesteps: int
    latency_mean: float          # its mean task latency there (s); a mix's: the first scenario's
    vs_best_static: float        # that over best-static's on the same episode; a mix's: the
    validation_seed: int         # mean of that ratio over its scenarios' episodes
    validation_tasks: int
    # the scenarios of a mix, each of whose validation episode it was chosen on; None: one
    # scenario's (and records written before mixes were scored whole)
    scenarios: list[str] | None = None

    def beats(self, other: BestModel) -> bool:
        """Whether this model is better than `other`'s record on the same validation episodes:
        a lower mean latency on one scenario; a lower mean ratio to best-static over a mix's
        (their latencies are of different workloads)."""
        if self.scenarios is None:
            return self.latency_mean < other.latency_mean
        return self.vs_best_static < other.vs_best_static


def new_run_dir(log_dir: str | Path, name: str, files: Iterable[str | Path] = ()) -> Path:
    """Create the run folder; never reuse an existing one (suffix -1, -2, ... instead). A
    folder the file system refuses (a full disk, no permission, a path over its length limit:
    the name holds the env id, agent, seed and time) is a WriteFailed naming it, as a refused
    lock or file of the run is: train.py ends the plan in one line, where the OSError was a
    traceback. `files`: paths the run writes in it (``run_files``), refused the same way,
    before the folder is made, where one would be over the limit."""
    root = Path(log_dir)
    files = list(files)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _folder_refused(root, exc) from exc
    for k in range(SUFFIXES):
        path = root / (name if k == 0 else f"{name}-{k}")
        check_room(path, files, "--log-dir")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise _folder_refused(path, exc) from exc
    raise RuntimeError(f"could not create a new run folder for {name} under {root}")


def run_files(timesteps: int) -> tuple[str, ...]:
    """The longest paths a new run of `timesteps` steps writes in its folder, for
    ``new_run_dir``'s check: TensorBoard's events file, named after the time, the host, the
    pid and a count of the process's writers (given three digits: two a run, in a plan of
    many), and a checkpoint's replay buffer as it is written (``atomic_path``'s temp file),
    named after the steps (given a digit more: SB3 counts on to the end of a rollout)."""
    events = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
              f"{os.getpid()}.000")
    steps = 10 * max(timesteps, 1)
    checkpoint = Path("checkpoints") / f"{CHECKPOINT_PREFIX}_{steps}_steps.zip"
    return events, str(temp_file(companion(checkpoint, "replay_buffer", steps)))


def _folder_refused(folder: Path, exc: OSError) -> WriteFailed:
    """The error for `folder`, which the file system refused to make (`exc`)."""
    hint = ("; give a shorter --log-dir" if exc.errno == errno.ENAMETOOLONG else "")
    return WriteFailed(f"cannot make the run folder {folder}: {exc.strerror or exc}{hint}")


class AtomicCheckpoint(CheckpointCallback):
    """SB3's CheckpointCallback, each file written via temp + rename; one replay buffer kept.
    `warmup`: the controller whose state (saved by ``save_model_files``) a resume continues from.
    `keep`: the checkpoints kept, the newest (``prune_checkpoints``); 0 keeps every one.
    `run_dir`: the run folder, whose events are marked before each save
    (``agents.event_files.mark_events``: a resume reads them from there).

    A checkpoint due at the run's last step (the defaults' 60,000 of 10,000) is saved again at
    the training's end, over the first: the algorithms update once more after their last
    step's callback (PPO on its last rollout, DQN a gradient step), so the one saved there was
    one update short of model.zip under the same step count, and a run killed before model.zip
    was written could not be resumed to the model it had trained (``AlreadyTrained``). The
    first save stays: a run stopped during that update keeps it (saved at the end alone, a run
    of one checkpoint interval stopped there was removed, having none)."""

    def __init__(self, *args: Any, warmup: WarmupController | None = None, keep: int = 0,
                 run_dir: Path | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if keep < 0:    # else a slice: [:-keep] removed the oldest -keep at each save
            raise ValueError(f"keep must be >= 0 (0: every checkpoint), got {keep}")
        self.warmup = warmup
        self.keep = keep
        self.run_dir = run_dir
        self._due_at_end = False

    def _on_step(self) -> bool:
        if self.n_calls % self.save_freq == 0:
            self._save()
            # SB3 sets _total_timesteps to the run's whole total, a resume's included
            self._due_at_end = self.num_timesteps >= self.model._total_timesteps
        return True

    def _on_training_end(self) -> None:
        if self._due_at_end:
            self._due_at_end = False
            self._save()

    def _save(self) -> None:
        if self.run_dir is not None:
            mark_events(self.logger, self.run_dir, self.num_timesteps)
        save_model_files(self.model, Path(self._checkpoint_path(extension="zip")),
                         self.num_timesteps, self.warmup, replay_buffer=self.save_replay_buffer,
                         vecnormalize=self.save_vecnormalize)
        if self.keep:
            prune_checkpoints(Path(self.save_path), self.keep)


# what is saved beside a checkpoint's model zip (``companion``), removed with it
COMPANIONS = (("warmup", "json"), ("replay_buffer", "pkl"), ("vecnormalize", "pkl"))


def prune_checkpoints(folder: Path, keep: int) -> None:
    """Remove all but the newest `keep` checkpoints in `folder` (by the steps their names
    give), each model zip before the files beside it, so that no checkpoint a resume may
    take is ever left without them. A long run kept every checkpoint (PPO's is ~0.18 MB:
    180 MB in 10 million steps at the default interval)."""
    found = []
    for path in folder.glob(f"{CHECKPOINT_PREFIX}_*_steps.zip"):
        match = re.fullmatch(rf"{CHECKPOINT_PREFIX}_(\d+)_steps\.zip", path.name)
        if match:
            found.append((int(match.group(1)), path))
    for steps, path in sorted(found)[:-keep]:
        path.unlink(missing_ok=True)
        for kind, extension in COMPANIONS:
            companion(path, kind, steps, extension).unlink(missing_ok=True)


def save_model_files(model: BaseAlgorithm, model_path: Path, steps: int,
                     warmup: WarmupController | None = None, *, replay_buffer: bool = True,
                     vecnormalize: bool = True) -> None:
    """`model` at `steps` steps saved to `model_path` (a checkpoint's or the run's model.zip)
    with what a resume needs beside it, each named by `companion`: the warm-up's state, the
    replay buffer and the VecNormalize statistics. All are written, then all replace the
    files before them at once (``agents.files.atomic_paths``), the model zip last: a zip a
    resume finds always has its own (one interrupted after its zip, before its buffer, was
    resumed from an empty buffer; one interrupted before its zip left the old zip beside the
    new buffer). Of the checkpoints' buffers only the newest is kept, the older ones removed
    once its model is saved."""
    stop_if_diverged(model)     # a diverged model is never saved, to be resumed or scored
    writers: dict[Path, Callable[[Path], Any]] = {}
    if warmup is not None:
        state = json.dumps({"num_timesteps": steps, **warmup.state()}) + "\n"
        writers[companion(model_path, "warmup", steps, "json")] = partial(
            Path.write_text, data=state, encoding="utf-8", newline="")
    buffer = None
    if replay_buffer and getattr(model, "replay_buffer", None) is not None:
        buffer = companion(model_path, "replay_buffer", steps)
        writers[buffer] = model.save_replay_buffer  # type: ignore[attr-defined]
    vecnorm = model.get_vec_normalize_env() if vecnormalize else None
    if vecnorm is not None:
        writers[companion(model_path, "vecnormalize", steps)] = lambda tmp: vecnorm.save(str(tmp))
    writers[model_path] = model.save
    with atomic_paths(list(writers)) as temps:
        for write, tmp in zip(writers.values(), temps, strict=True):
            write(tmp)
    if buffer is not None and model_path.name != "model.zip":
        for old in buffer.parent.glob(f"{CHECKPOINT_PREFIX}_replay_buffer_*_steps.pkl"):
            if old != buffer:
                old.unlink(missing_ok=True)


def checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """(steps, path) of the readable model checkpoints and final model of a run, by steps;
    model.zip after a checkpoint of its steps. Runs saved before ``AtomicCheckpoint`` saved its
    last-step checkpoint at the training's end have that checkpoint one update short of
    model.zip (a run whose --timesteps is a multiple of --checkpoint-interval, as the
    defaults' 60,000 of 10,000): a --resume of a finished run took the checkpoint."""
    found = []
    for path in _model_files(run_dir):
        if path.is_file() and (steps := saved_steps(path)) is not None:
            found.append((steps, path))
    return sorted(found, key=lambda sp: (sp[0], sp[1].name == "model.zip"))


def _model_files(run_dir: Path) -> list[Path]:
    """Where a run's checkpoints and final model are (a path of them may hold none)."""
    return [*sorted((run_dir / "checkpoints").glob(f"{CHECKPOINT_PREFIX}_*_steps.zip")),
            run_dir / "model.zip"]


def unreadable_models(run_dir: Path, newer_than: int | None = None) -> list[str]:
    """Why each model file of a run that ``checkpoints`` passes over cannot be read, each
    naming its file (and its checkpoints folder, where that cannot be read): a resume of a
    run with none readable said only that it had "no checkpoint or model" beside a model.zip.
    `newer_than`: only the files that may be newer than a save of that many steps (model.zip,
    saved last, and the checkpoints whose names say more steps)."""
    from agents.sb3_factory import saved_data

    folder = run_dir / "checkpoints"
    problem = unreadable_folder(folder) if folder.is_dir() else None
    reasons = [] if problem is None else [f"its checkpoints folder {folder} {problem}"]
    for path in _model_files(run_dir):
        named = re.fullmatch(rf"{CHECKPOINT_PREFIX}_(\d+)_steps\.zip", path.name)
        if newer_than is not None and named and int(named.group(1)) <= newer_than:
            continue    # by its name, before its zip is opened again
        if not path.is_file() or saved_steps(path) is not None:
            continue
        try:
            steps = saved_data(path).get("num_timesteps")
        except ValueError as exc:       # no zip, no SB3 'data' entry: says which
            reasons.append(str(exc))
            continue
        reasons.append(f"model file {path} records no step count (num_timesteps: "
                       f"{shown(steps)})")
    return reasons


def companion(model_path: Path, kind: str, steps: int, extension: str = "pkl") -> Path:
    """The VecNormalize / replay-buffer / warm-up file saved with a checkpoint or the final
    model."""
    if model_path.name == "model.zip":
        return model_path.with_name(f"{kind}.{extension}")
    return model_path.with_name(f"{CHECKPOINT_PREFIX}_{kind}_{steps}_steps.{extension}")


def restore_warmup_state(controller: WarmupController, path: Path, steps: int) -> None:
    """Continue `controller` from the state saved with the model of `steps` steps. None saved
    (a run from before it was), or one of another step (a model.zip whose save failed after
    its warmup.json was written): the count starts again from 0, as it did before."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(state, dict) and state.get("num_timesteps") == steps:
        try:
            controller.restore(state)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None


def save_best_model(model: BaseAlgorithm, run_dir: Path, record: BestModel) -> None:
    """`model` as the run's best_model.zip, then `record` as best_model.json: the model first,
    so a record never names a model that was not saved (a resume scores a model newer than
    its record again, ``agents.resume.best_so_far``). No companions: evaluation reads the
    zip alone (VecNormalize scales rewards only) and a resume continues from checkpoints."""
    save_model_files(model, run_dir / BEST_MODEL, record.num_timesteps,
                     replay_buffer=False, vecnormalize=False)
    save_best_record(run_dir / BEST_RECORD, record)


def save_best_record(path: Path, record: BestModel) -> None:
    """best_model.json; one scenario's record as before mixes were scored whole (no
    ``scenarios``), which earlier versions read too."""
    data = dataclasses.asdict(record)
    if record.scenarios is None:
        del data["scenarios"]
    write_text(path, json.dumps(data, indent=2) + "\n")


def read_best_record(path: Path) -> BestModel | None:
    """best_model.json's record; None where there is none. A ValueError naming the file where
    it cannot be read or is not such a record: a resume that took it as "no best yet" would
    replace a better best_model.zip with the next model it scores."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        names = [f.name for f in dataclasses.fields(BestModel)]
        # a record written before mixes were scored whole has no scenarios
        if not isinstance(data, dict) or set(data) not in (set(names), set(names[:-1])):
            raise ValueError(f"its entries must be {', '.join(names)}")
        record = BestModel(**data)
        if record.scenarios is not None and not (
                isinstance(record.scenarios, list) and len(record.scenarios) > 1
                and all(isinstance(n, str) for n in record.scenarios)):
            raise ValueError("scenarios must be null or a list of two or more scenario names")
        numbers = (record.latency_mean, record.vs_best_static)
        counts = (record.num_timesteps, record.validation_seed, record.validation_tasks)
        if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in numbers) or \
                not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
            raise ValueError("a step, seed or task count that is no count, or a latency that "
                             "is no finite number")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path} is not a readable best-model record ({exc}); restore it, or "
                         f"remove it and {BEST_MODEL} to choose again from the resumed steps"
                         ) from None
    return record


def saved_steps(path: Path) -> int | None:
    """The step count an SB3 model zip was saved at, or None when it holds no readable one."""
    from agents.sb3_factory import saved_data  # the factory imports the whole of SB3

    try:
        return int(saved_data(path)["num_timesteps"])
    except (OSError, KeyError, ValueError, TypeError):
        return None


def check_run_folder(run_dir: Path) -> None:
    """A ConfigError naming `run_dir` where its files cannot be looked at (no read or search
    permission, ``chmod 644``: pathlib's is_file raised PermissionError on a file in it, a
    traceback out of --resume and evaluate.py)."""
    problem = unreadable_folder(run_dir)
    if problem is not None:
        raise ConfigError(f"run folder {run_dir} {problem}")


def find_run(log_dir: str | Path, name: str) -> Path:
    """The run folder to resume: the newest under log_dir for "latest", else the named one.
    A folder it cannot read (no read or search permission; for "latest", one not older than
    the newest run) is a ConfigError naming it, as is a run folder without its config.yaml
    (it was "no run ... (runs there: none)")."""
    root = Path(log_dir)
    if name != "latest":    # looked up, not listed: a folder of runs it may not list is fine
        candidates = []
        for path in (Path(name), root / name):
            try:
                if path.is_dir():
                    candidates.append(path)
            except OSError as exc:  # its folder without search permission (chmod 644 runs)
                raise ConfigError(f"--resume {name}: {path.parent} {cannot_read(exc)}") from None
        for path in candidates:
            check_run_folder(path)
            if (path / "config.yaml").is_file():
                return path
        if candidates:
            raise ConfigError(_without_config(candidates[0]))
    folders = folders_in(root, "--log-dir")
    if name == "latest":
        # Newest first (by the time in its name, then its own time), and only up to the newest
        # run: a folder that cannot be read might be that run, so it is refused, but an older
        # one (another user's, chmod 700) refused every --resume latest.
        newest_first = sorted(folders, key=lambda d: (_run_time(d), d.stat().st_mtime), reverse=True)
        for folder in newest_first:
            check_run_folder(folder)
            if (folder / "config.yaml").is_file():
                return folder
        # a run's folder whose config.yaml is gone was "no run to resume"
        lost = [d for d in newest_first if checkpoints(d)]
        if lost:
            raise ConfigError(_without_config(lost[0]))
        raise ConfigError(f"no run to resume under {root}/ (train one with: {command('train')})")
    for folder in folders:
        check_run_folder(folder)
    runs = [d for d in folders if (d / "config.yaml").is_file()]
    known = ", ".join(sorted(d.name for d in runs)[-10:]) or "none"
    raise ConfigError(f"no run {shown(name)} under {shown(root, quote=False)}/ (runs there: {known})")


def folders_in(root: Path, option: str) -> list[Path]:
    """The folders in `root` (none where it is no folder); a ConfigError naming `option` where
    it cannot be read (``chmod 311 runs``: a PermissionError traceback)."""
    if not root.is_dir():
        return []
    problem = unreadable_folder(root)
    if problem is not None:
        raise ConfigError(f"{option} {root} {problem}")
    return [d for d in root.iterdir() if d.is_dir()]


def _without_config(run_dir: Path) -> str:
    """The refusal of `run_dir`, a folder without config.yaml, named as a run to resume."""
    kept = checkpoints(run_dir)
    if not kept:
        return (f"{run_dir} is not a run folder: it has no config.yaml, which "
                f"{program('train')} writes in each run's folder and --resume reads")
    return (f"run folder {run_dir} has no config.yaml: its model at {kept[-1][0]} steps is "
            f"there, but --resume reads the run's options from its config.yaml; restore it "
            f"as the run wrote it, or train a new run ({command('train')} without --resume)")


def _run_time(run_dir: Path) -> int:
    match = re.search(r"__(\d+)(?:-\d+)?$", run_dir.name)
    return int(match.group(1)) if match else 0
