"""What a plan's TensorBoard events will weigh, said before it trains where that is a lot.

With the defaults a PPO run writes ~148 bytes of events a step (docs/USAGE.md, "Long runs"): a
``latency/per_sample`` point every task and ~25 other scalars every 16-step rollout. That is
1.5 GB a run at ten million steps, almost none of which TensorBoard shows (1,000 points a
curve) and all of which ``evaluate.py`` reads back to draw ``learning_curves.png``. Two options
thin it (``--per-sample-interval``, ``--log-interval``), and a user who has not read that
section learns of them from a full disk. ``events_notes`` estimates the plan's events from the
sizes measured there and names the options when the plan would write more than
``NOTE_BYTES``. Imports SB3 (through the hyper-parameters): call it once training is due.
"""

from __future__ import annotations

import inspect
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from agents.config import TrainConfig
from agents.rollout_steps import rollout_steps, steps_trained
from agents.run_records import RunSpec

# Measured (docs/USAGE.md, "Long runs"; 2026-12, PPO with warm-up over 200,000 steps): a
# latency/per_sample point is ~58 bytes; one write of the other scalars (~25 tags: train/,
# rollout/, latency/, devices/, cache/, warmup/) ~1.4 KB (89 KB a thousand 16-step rollouts).
PER_SAMPLE_BYTES = 58
DUMP_BYTES = 1_400
NOTE_BYTES = 1_000_000_000      # a plan's events above this get the note
# the thinning the note suggests: 10,000 per_sample points in a million steps
SUGGESTED = {"per_sample_interval": 100, "log_interval": 10}


@dataclass(frozen=True)
class _RunShape:
    """What a run's events size depends on but the thinning options: the steps it trains, the
    steps between two writes at a log interval of 1, and SB3's log interval for the agent."""

    steps: int
    span: int
    default_log_interval: int

    def events_bytes(self, per_sample_interval: int, log_interval: int | None) -> float:
        writes = self.steps / (self.span * max(self.default_log_interval if log_interval is None
                                               else log_interval, 1))
        return (math.ceil(self.steps / per_sample_interval) * PER_SAMPLE_BYTES
                + writes * DUMP_BYTES)


def _run_shape(agent: str, params: dict, config: TrainConfig) -> _RunShape:
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

    from agents.sb3_hyperparams import ALGORITHMS
    from envs.scenario import load_scenario

    algorithm = ALGORITHMS[agent]
    rollout = rollout_steps(agent, params, config.n_envs)
    steps = config.timesteps if rollout is None else steps_trained(config.timesteps, rollout[0])
    if rollout is not None and issubclass(algorithm, OnPolicyAlgorithm):
        span = rollout[0]
    else:
        # the first scenario's where a mix's differ: the writes of an off-policy agent, counted
        # in episodes, are a small part whatever it is
        span = config.training_episode_tasks() or load_scenario(
            config.held_out_scenario()).episode_tasks
    return _RunShape(steps, span,
                     inspect.signature(algorithm.learn).parameters["log_interval"].default)


def run_events_bytes(agent: str, params: dict, config: TrainConfig,
                     per_sample_interval: int, log_interval: int | None) -> float:
    """Estimated events bytes of one run of `agent` with resolved hyper-parameters `params`:
    its per-sample points and its writes of the other scalars. A write comes every
    `log_interval` rollouts for an on-policy agent, every `log_interval` episodes of
    --episode-tasks steps over the envs for an off-policy one (SB3's default where None)."""
    return _run_shape(agent, params, config).events_bytes(per_sample_interval, log_interval)


def _plan_shapes(config: TrainConfig, specs: Sequence[RunSpec]) -> list[tuple[_RunShape, int]]:
    """The plan's runs (`specs`) by agent and warm start: each one's shape (its hyper-parameters
    resolved, its scenarios read, once for all its runs) and how many runs (seeds and warm-up
    specs alike)."""
    from agents.sb3_hyperparams import hyperparams_with
    from agents.warmup_config import spec_starts_warm

    runs = Counter((spec.agent, spec_starts_warm(spec.warmup)) for spec in specs)
    return [(_run_shape(agent, hyperparams_with(agent, config.env_id, config.hp,
                                                warm_start=warm), config), count)
            for (agent, warm), count in runs.items()]


def _plan_events_bytes(shapes: Sequence[tuple[_RunShape, int]], per_sample_interval: int,
                       log_interval: int | None) -> float:
    return sum(count * shape.events_bytes(per_sample_interval, log_interval)
               for shape, count in shapes)


def events_notes(config: TrainConfig, specs: Sequence[RunSpec]) -> list[str]:
    """A note when the plan's runs (`specs`, as ``plan`` made them) would write more than
    ``NOTE_BYTES`` of events, with what ``SUGGESTED`` would make it: --log-interval only where
    it lowers the total (A2C writes every 100 rollouts by default, and 10 would write more);
    none for a resume (the run's own options are read later) or a plan already below it."""
    if config.resume is not None or not specs:
        return []
    shapes = _plan_shapes(config, specs)
    size = _plan_events_bytes(shapes, config.per_sample_interval, config.log_interval)
    if size <= NOTE_BYTES:
        return []
    per_sample = max(config.per_sample_interval, SUGGESTED["per_sample_interval"])
    options = {"--per-sample-interval": per_sample}
    thinned = _plan_events_bytes(shapes, per_sample, config.log_interval)
    logged = _plan_events_bytes(shapes, per_sample, SUGGESTED["log_interval"])
    if logged < thinned:
        options["--log-interval"] = SUGGESTED["log_interval"]
        thinned = logged
    runs = f"{len(specs)} runs" if len(specs) > 1 else "run"
    given = " ".join(f"{flag} {value}" for flag, value in options.items())
    return [f"note: the {runs} will write about {size / 1e9:.1f} GB of TensorBoard events "
            f"(~{PER_SAMPLE_BYTES} bytes a latency/per_sample point, one a task, and "
            f"~{DUMP_BYTES / 1e3:.1f} KB a write of the other scalars), most of it points "
            f"TensorBoard does not draw and evaluate.py reads back for learning_curves.png; "
            f"{given} make{'s' if len(options) == 1 else ''} it about {thinned / 1e9:.2f} GB "
            f"(docs/USAGE.md: Long runs)"]
