"""TensorBoard callbacks of ``train.py``: the allocator's own metrics beside SB3's scalars.

``LatencyMetrics`` writes, from each step's ``info`` (see ``envs.inference_alloc``):

| tag                          | value                                                         |
|------------------------------|---------------------------------------------------------------|
| ``latency/mean``             | mean task latency (s) over the last `window` tasks            |
| ``latency/p95``              | 95th percentile of the same                                   |
| ``latency/vs_static``        | their total latency over the best static placement's on the same tasks (``info["static_latency"]``, which train.py's envs price under every reward) |
| ``latency/per_sample``       | every task's latency against its sample index (from 0): the online curve where the ~200-sample stabilisation shows; with `per_sample_interval` K, that of every K-th (indices 0, K, 2K, ...) |
| ``cache/hit_rate``           | loader cache hits over the last `window` lookups               |
| ``devices/<d>_utilisation``  | device d's busy share of the time booked so far (``info``), mean over `window` |
| ``devices/<d>_share``        | share of the stages placed on device d (``info["share"]``), mean over `window` |
| ``charts/SPS``               | environment steps per second of this ``learn`` call           |

The windows start empty in each ``learn`` call: after ``train.py --resume``, the first points
cover the tasks since the resume (fewer than `window` until that many have run).

``HeldOutEval`` writes, every ``--eval-interval`` steps (and at step 0 of a fresh run, and
at the end: the saved model), the current policy's deterministic run of the held-out
episode (``--eval-tasks`` tasks of ``--eval-seed``; the learned policy alone, without
warm-up, as the final comparison runs it):

| tag                          | value                                                         |
|------------------------------|---------------------------------------------------------------|
| ``eval/latency_mean``        | its mean task latency (s)                                     |
| ``eval/latency_p95``         | the 95th percentile of the same                               |
| ``eval/vs_best_static``      | its mean over best-static's on the same episode               |

On several scenarios (a mix) those tags are the first scenario's, whose curves a run on it
alone would draw; each scenario's held-out episode (the same seed and length) is also run,
and written as:

| tag                          | value                                                         |
|------------------------------|---------------------------------------------------------------|
| ``eval/<scenario>/latency_mean`` | its mean task latency (s) on that scenario's episode       |
| ``eval/<scenario>/vs_best_static`` | that over best-static's on the same episode              |
| ``eval/mix_vs_best_static``  | the mean over the scenarios of each one's ``vs_best_static``: every workload counts alike, whatever ``--scenario-weights`` draws |

With ``--select-best``, ``BestModelSelection`` runs the current policy at the same points on
a validation episode instead (``--eval-tasks`` tasks of ``--validation-seed``), keeps the best
model seen on it as ``best_model.zip`` and writes:

| tag                          | value                                                         |
|------------------------------|---------------------------------------------------------------|
| ``eval/validation_vs_best_static`` | its mean latency over best-static's on that episode; on a mix, the mean over the scenarios of that ratio on each one's validation episode, by which the best is chosen |

and, once training ends, ``final/best_latency_mean``, ``final/best_vs_best_static`` (that
model on the held-out episode, as ``final/`` scores the saved one) and ``final/best_step``.

``RunInfo`` writes the resolved config as text (``config``) and the hyper-parameters to
TensorBoard's HPARAMS view (SB3's ``HParam``), whose metric columns are the final
metrics the trainer writes at the end of a run (``FINAL_METRICS``) and the last values
of ``latency/mean`` and ``latency/vs_static``. For a learner that starts from a behaviour
clone it also writes, at the run's first step, how well the clone imitates the conservative
policy (``agents.cloning``): ``warmup/clone_train_agreement`` and
``warmup/clone_heldout_agreement``, the share of observations (those it was fitted on, and
20% held out) where it places every stage as the conservative policy does.

A run with warm-up also writes, from ``agents.warmup.WarmupCallback``:

| tag                          | value                                                         |
|------------------------------|---------------------------------------------------------------|
| ``warmup/conservative_acting`` | share of the last `window` tasks that the conservative policy placed (1 in the conservative phase, rising while the guard holds control) |
| ``warmup/guard_trips``       | times the guard has handed control to the conservative policy since the run began |
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import HParam, Logger, make_output_format

from agents.event_files import tensorboard_writer
from agents.run_folder import BestModel, save_best_model

FINAL_METRICS = ("final/latency_mean", "final/latency_p95", "final/vs_best_static")
# --select-best: best_model.zip on the same held-out episode, and the step it was saved at
BEST_METRICS = ("final/best_latency_mean", "final/best_vs_best_static", "final/best_step")
HPARAM_METRICS = (*FINAL_METRICS, "latency/mean", "latency/vs_static")
TB_ONLY = ("stdout", "log", "json", "csv")
PER_SAMPLE = "latency/per_sample"


class OncePerStepLogger(Logger):
    """SB3's Logger writing a tag at most once per step: a dump at the step of the one before
    it leaves out the tags that one wrote, keeping their first value. SB3's on-policy
    algorithms record train/ after the rollout's dump, written at the next one; their last
    update's values, which SB3 never writes, were still pending when the trainer dumped
    final/ at the run's last step, where the last rollout's dump had written train/ already:
    TensorBoard drew each train/ curve with two values there, on every run and resume."""

    def __init__(self, folder: str | None, output_formats: list[Any]) -> None:
        super().__init__(folder, output_formats)
        self._written: tuple[int, set[str]] = (-1, set())   # the last dump's step and tags

    def dump(self, step: int = 0) -> None:
        last, written = self._written
        if step != last:
            written = set()
        for key in written & self.name_to_value.keys():
            del self.name_to_value[key]
            self.name_to_count.pop(key, None)
            self.name_to_excluded.pop(key, None)
        self._written = (step, written | set(self.name_to_value))
        super().dump(step)


def tensorboard_logger(folder: str) -> Logger:
    """A run's logger: TensorBoard alone, each tag once per step (``OncePerStepLogger``)."""
    return OncePerStepLogger(folder, [make_output_format("tensorboard", folder)])


def drop_events_past(logger: Logger, step: int) -> None:
    """Has TensorBoard drop the events of every step past `step` that the folder's earlier
    events files hold (a restart marker, as SummaryWriter's ``purge_step=step + 1`` writes): a
    run resumed from a checkpoint logs those steps again. Without it the curves of a run
    stopped past its last checkpoint went back to the checkpoint's step and drew both.

    Past `step`, not from it: a marker drops the points of every tag alike, and no one step
    is right for all of them. The points at `step` of the tags whose step is num_timesteps
    (SB3's, ours through its logger, eval/) were written in the checkpoint's own step, after
    its save (its rollout's dump, an eval/ point), describe the steps before it and are not
    written again: a marker at `step` lost them. The point of ``latency/per_sample`` (whose
    step is a task's index) at `step` is the first task after the checkpoint, which the
    resumed run runs again: it is kept where the stopped run wrote it, and the resumed run
    then leaves its own out (``LatencyMetrics``' `written_through`, from
    ``agents.event_files.logged_at``), or TensorBoard showed that step twice.
    TensorBoard's data server (its default reader) ignores the marker and drops, per tag,
    the points at and past the step of a later point: it shows no step twice either, though
    a tag's point of the stopped run may stay between `step` and the resumed run's first."""
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog

    writer = tensorboard_writer(logger)
    if writer is not None:
        writer.file_writer.add_event(
            Event(step=step + 1, session_log=SessionLog(status=SessionLog.START)))


class LatencyMetrics(BaseCallback):
    """Records the latency, cache and device metrics of the table above. `per_sample_interval`:
    K writes ``latency/per_sample`` for the tasks of index 0, K, 2K, ... alone (train.py's
    ``--per-sample-interval``): one point per env step is ~58 bytes, most of a long run's events
    file, and TensorBoard shows 1,000 points of a tag however many it holds.
    `written_through`: the run folder shows ``latency/per_sample`` up to that index already
    (a resumed run's, ``agents.run_training.train_and_score``), so it writes those of later
    indices alone."""

    def __init__(self, device_names: tuple[str, ...] | list[str], window: int = 100,
                 per_sample_interval: int = 1, written_through: int = -1) -> None:
        super().__init__()
        if per_sample_interval < 1:
            raise ValueError(f"per_sample_interval must be >= 1, got {per_sample_interval}")
        self.per_sample_interval = per_sample_interval
        self.written_through = written_through
        self.devices = tuple(device_names)
        self.latency: deque[float] = deque(maxlen=window)
        self.static: deque[float] = deque(maxlen=window)
        self.hits: deque[float] = deque(maxlen=window)
        self.util: dict[str, deque[float]] = {d: deque(maxlen=window) for d in self.devices}
        self.share: dict[str, deque[float]] = {d: deque(maxlen=window) for d in self.devices}
        self.writer: Any = None
        self._fresh = 0

    def _on_training_start(self) -> None:
        self.writer = tensorboard_writer(self.logger)
        self._t0, self._steps0 = time.perf_counter(), self.num_timesteps

    def _on_training_end(self) -> None:
        # A callback of yours stopped training (agents.user_callbacks) within a rollout, before
        # its end records it: its steps are recorded, or the curves ended at the rollout before,
        # short of the model saved; a stop at the run's last step too. A run that reaches its
        # end has recorded every step at its last rollout's end: nothing is pending, and its
        # events are as they always were.
        self._record()

    def _on_step(self) -> bool:
        infos = self.locals.get("infos", ())
        first = self.num_timesteps - len(infos)     # sample index of infos[0]
        for i, info in enumerate(infos):
            latency = info.get("latency")
            if latency is None:
                continue
            self._fresh += 1
            self.latency.append(latency)
            self.static.append(info.get("static_latency", np.nan))
            if info.get("cache_hit") is not None:
                self.hits.append(float(info["cache_hit"]))
            for d, value in info.get("utilisation", {}).items():
                if d in self.util:
                    self.util[d].append(value)
            for d, value in info.get("share", {}).items():
                if d in self.share:
                    self.share[d].append(value)
            index = first + i
            if (self.writer is not None and index % self.per_sample_interval == 0
                    and index > self.written_through):
                self.writer.add_scalar(PER_SAMPLE, latency, index)
        if self._fresh and any(self.locals.get("dones", ())):
            # An off-policy learner (DQN, SAC) dumps its logs at an episode's end, inside its
            # rollout and before this rollout's end: recorded only there, its dump at step S
            # wrote the window of the rollout before (train_freq steps stale, a whole episode
            # with train_freq (1, "episode")), and the run's last step got each tag twice.
            self._record()
        return True

    def _on_rollout_end(self) -> None:
        self._record()

    def _record(self) -> None:
        if not self._fresh:
            return
        self._fresh = 0
        lat = np.fromiter(self.latency, float)
        self.logger.record("latency/mean", float(lat.mean()))
        self.logger.record("latency/p95", float(np.percentile(lat, 95)))
        static = np.fromiter(self.static, float)
        if np.isfinite(static).all() and static.sum() > 0:
            self.logger.record("latency/vs_static", float(lat.sum() / static.sum()))
        if self.hits:
            self.logger.record("cache/hit_rate", float(np.mean(self.hits)))
        for d in self.devices:
            if self.util[d]:
                self.logger.record(f"devices/{d}_utilisation", float(np.mean(self.util[d])))
            if self.share[d]:
                self.logger.record(f"devices/{d}_share", float(np.mean(self.share[d])))
        elapsed = time.perf_counter() - self._t0
        if elapsed > 0:
            self.logger.record("charts/SPS", int((self.num_timesteps - self._steps0) / elapsed))


@dataclass(frozen=True)
class ScenarioEpisode:
    """One scenario's episode at the eval/ points: `evaluate` runs the current policy on it and
    returns its per-task latencies; `static_mean` is best-static's mean latency there."""

    name: str
    evaluate: Callable[[], np.ndarray]
    static_mean: float

    def run(self) -> tuple[np.ndarray, float]:
        """The current policy's per-task latencies and their mean over best-static's."""
        latency = self.evaluate()
        return latency, float(latency.mean()) / self.static_mean


def scenario_tags(names: Sequence[str]) -> list[str]:
    """A TensorBoard tag part per scenario: its name, or a YAML file's name without its folder
    and suffix (a run's config holds it as an absolute path, which differs between machines,
    and its slashes would nest groups), with anything but letters, digits, '.', '-' and '_' as
    '_'; numbered where two read alike."""
    stems = [Path(name).stem if "/" in name or "\\" in name or name.endswith((".yaml", ".yml"))
             else name for name in names]
    slugs = [re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "scenario" for name in stems]
    return [f"{slug}-{i}" if slugs.count(slug) > 1 else slug for i, slug in enumerate(slugs)]


def mix_ratio(runs: Sequence[tuple[np.ndarray, float]]) -> float:
    """The mean over a mix's scenarios of each one's ratio to best-static (``ScenarioEpisode.run``
    results): every workload counts alike."""
    return float(np.mean([ratio for _, ratio in runs]))


class EvalPoints(BaseCallback):
    """Runs ``_point`` (an evaluation of the current policy on `episodes`: one, or each
    scenario's of a mix, the first the run's held-out scenario) at step 0 (before any update),
    each ``interval`` crossed, and the end of training. The last is taken as training ends
    (``_on_training_end``, after the algorithm's last update and before the model is saved),
    not at its last step: the algorithms update once more after their last step's callback
    (PPO on the last rollout, DQN its gradient step), and a point taken there was not the
    saved model that the run's ``final/`` row measures (DQN: up to 0.008 of best-static
    apart). A point must leave the training's random state alone (deterministic actions, its
    own env), so a run is the same with or without it.
    """

    def __init__(self, episodes: Sequence[ScenarioEpisode], interval: int) -> None:
        super().__init__()
        if interval < 1:
            raise ValueError(f"{type(self).__name__} interval must be >= 1, got {interval}")
        if not episodes:
            raise ValueError(f"{type(self).__name__} needs at least one episode")
        self.episodes = list(episodes)
        self.tags = scenario_tags([e.name for e in self.episodes])
        self.interval = interval
        self.writer: Any = None
        self._next = 0
        self._end: int | None = None        # the step learn() stops at
        self._last_step: int | None = None  # of the last point taken

    def _on_training_start(self) -> None:
        self.writer = tensorboard_writer(self.logger)
        # learn()'s own total_timesteps, after _setup_learn made it absolute (a resumed run's
        # steps included)
        self._end = self.locals.get("total_timesteps")
        if self.num_timesteps == 0:          # the policy before any update: where curves start
            self._take_point()
        self._next = (self.num_timesteps // self.interval + 1) * self.interval

    def _on_step(self) -> bool:
        if self.num_timesteps >= self._next:
            if self._end is None or self.num_timesteps < self._end:
                self._take_point()
            self._next = (self.num_timesteps // self.interval + 1) * self.interval
        return True

    def _on_training_end(self) -> None:
        if self._last_step != self.num_timesteps:
            self._take_point()

    def _take_point(self) -> None:
        self._point(self.num_timesteps)
        self._last_step = self.num_timesteps

    def _point(self, step: int) -> None:
        raise NotImplementedError


class HeldOutEval(EvalPoints):
    """The ``eval/`` tags of the tables above, at the points of ``EvalPoints``, on the
    held-out episode of each scenario."""

    def __init__(self, episodes: Sequence[ScenarioEpisode], interval: int) -> None:
        super().__init__(episodes, interval)
        # (step, per-task latencies on each scenario's episode, by name) of the last point
        # written: at the end of training, the runs by the model then saved, which the
        # trainer's final/ row and a mix's other table sections take
        self.last: tuple[int, dict[str, np.ndarray]] | None = None
        # the first scenario's ratio to best-static at step 0, before any update: a warm run's
        # clone, which the trainer compares the saved model with (``run_scores.drift_note``)
        self.at_start: float | None = None

    def _point(self, step: int) -> None:
        if self.writer is None:
            return
        runs = [episode.run() for episode in self.episodes]
        latency, ratio = runs[0]
        if step == 0:
            self.at_start = ratio
        self.last = (step, {e.name: lat for e, (lat, _) in zip(self.episodes, runs, strict=True)})
        self.writer.add_scalar("eval/latency_mean", float(latency.mean()), step)
        self.writer.add_scalar("eval/latency_p95", float(np.percentile(latency, 95)), step)
        self.writer.add_scalar("eval/vs_best_static", ratio, step)
        if len(runs) > 1:
            for tag, (lat, r) in zip(self.tags, runs, strict=True):
                self.writer.add_scalar(f"eval/{tag}/latency_mean", float(lat.mean()), step)
                self.writer.add_scalar(f"eval/{tag}/vs_best_static", r, step)
            self.writer.add_scalar("eval/mix_vs_best_static", mix_ratio(runs), step)
        self.writer.flush()


class BestModelSelection(EvalPoints):
    """``train.py --select-best``: at the points of ``EvalPoints``, runs the current policy on
    the validation episode of each scenario (`episodes`; `episode`: their seed and task
    count), never the held-out one. Its mean over best-static's (on a mix, the mean of that
    ratio over the scenarios) is written as ``eval/validation_vs_best_static``; where the
    model beats every earlier point's (and `best`'s, the record a resumed run kept: ``beats``),
    it is saved as ``best_model.zip`` in `run_dir`, then its record
    (``agents.run_folder.BestModel``) as ``best_model.json``, each written whole."""

    def __init__(self, episodes: Sequence[ScenarioEpisode], interval: int, run_dir: Path,
                 episode: tuple[int, int], best: BestModel | None = None) -> None:
        super().__init__(episodes, interval)
        self.run_dir = run_dir
        self.episode = episode
        self.best = best

    def _point(self, step: int) -> None:
        candidate = validation_record(self.episodes, step, self.episode)
        if self.writer is not None:
            self.writer.add_scalar("eval/validation_vs_best_static", candidate.vs_best_static,
                                   step)
            self.writer.flush()
        if self.best is not None and not candidate.beats(self.best):
            return
        self.best = candidate
        save_best_model(self.model, self.run_dir, self.best)


def validation_record(episodes: Sequence[ScenarioEpisode], step: int,
                      episode: tuple[int, int]) -> BestModel:
    """The record of the current policy, at `step`, on the validation episodes (`episode`:
    their seed and task count) of each scenario, which `episodes` run."""
    runs = [e.run() for e in episodes]
    mean = float(runs[0][0].mean())
    if len(runs) == 1:
        return BestModel(step, mean, runs[0][1], *episode)
    return BestModel(step, mean, mix_ratio(runs), *episode,
                     scenarios=[e.name for e in episodes])


class RunInfo(BaseCallback):
    """At the start of a fresh run: the config as text and the hyper-parameters (HPARAMS)."""

    def __init__(self, config_text: str, hparams: dict[str, Any],
                 clone_stats: dict[str, float] | None = None) -> None:
        super().__init__()
        self.config_text = config_text
        self.hparams = {k: _hparam_value(v) for k, v in hparams.items()}
        self.clone_stats = clone_stats

    def _on_training_start(self) -> None:
        text = "```yaml\n" + self.config_text + "```"   # TensorBoard renders text as markdown
        self.logger.record("config", text, exclude=TB_ONLY)
        self.logger.record("hparams", HParam(self.hparams, dict.fromkeys(HPARAM_METRICS, 0.0)),
                           exclude=TB_ONLY)
        if self.clone_stats is not None:
            for part in ("train", "heldout"):
                self.logger.record(f"warmup/clone_{part}_agreement",
                                   self.clone_stats[f"{part}_agreement"], exclude=TB_ONLY)
        self.logger.dump(self.num_timesteps)

    def _on_step(self) -> bool:
        return True


def _hparam_value(value: Any) -> bool | int | float | str:
    """TensorBoard's HPARAMS take bool, int, float or str: anything else becomes its text."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    return str(value)
