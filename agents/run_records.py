"""The records of ``train.py``'s runs: what a run is (``RunSpec``: agent, warm-up spec, seed),
what it gave (``RunResult``, and ``SelectedModel`` for ``--select-best``'s best_model.zip), and
how runs fail (``RunFailed``, ``FinishedUnrecorded``, and a plan's ``RunsFailed`` or
``PlanStopped``; ``agents.training`` says what a failed run leaves)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agents.files import WriteFailed
from agents.run_folder import BestModel


class RunFailed(RuntimeError):
    """Training failed after its run folder was made; the message says what was kept."""


class FinishedUnrecorded(WriteFailed):
    """A write the file system refused after a run finished training: its model.zip is
    complete, and the message says how to evaluate it."""


class RunsFailed(RuntimeError):
    """Some of a plan's runs failed (`failures`, each a RunFailed, or a FinishedUnrecorded
    where one finished training and then a write was refused, already reported as it
    happened); the others went on and finished (`results`)."""

    def __init__(self, failures: list[RunFailed | FinishedUnrecorded],
                 results: list[RunResult]) -> None:
        super().__init__(f"{len(failures)} of {len(failures) + len(results)} runs failed: "
                         + "; ".join(str(f) for f in failures))
        self.failures = failures
        self.results = results


class PlanStopped(RunsFailed):
    """A write the file system refused before a run's training (its folder, its lock:
    `stopped_by`) ended the plan, as it would have every run to come; `results` and `failures`
    are the runs before it. train.py prints the finished ones' table, as at any end, then the
    refusal's line: a WriteFailed out of ``train`` lost the table of runs whose models were
    saved."""

    def __init__(self, stopped_by: WriteFailed, planned: int,
                 failures: list[RunFailed | FinishedUnrecorded], results: list[RunResult]) -> None:
        super().__init__(failures, results)
        self.stopped_by = stopped_by
        self.planned = planned

    def __str__(self) -> str:
        before = len(self.failures) + len(self.results)
        if not before:      # the plan's first run: nothing else to say
            return str(self.stopped_by)
        failed = f", {len(self.failures)} failed" if self.failures else ""
        return (f"{self.stopped_by}; the plan stopped at run {before + 1} of {self.planned}: "
                f"{len(self.results)} finished before it{failed}")


def ends_plan(outcome: Outcome) -> bool:
    """Whether a run's outcome ends its plan: a write refused before its training (its folder,
    its lock), which every run to come would meet. One refused after its training
    (``FinishedUnrecorded``) is a failed run, and the plan goes on."""
    return isinstance(outcome, WriteFailed) and not isinstance(outcome, FinishedUnrecorded)


@dataclass(frozen=True)
class RunSpec:
    agent: str
    warmup: str         # canonical: none | all | comma list in WARMUP_PARTS order
    seed: int

    @property
    def label(self) -> str:
        if self.warmup == "none":
            return self.agent
        if self.warmup == "all":
            return f"{self.agent}-warm"
        return f"{self.agent}-warm-{self.warmup.replace(',', '+')}"


@dataclass
class RunResult:
    run_dir: Path
    spec: RunSpec
    steps: int
    seconds: float
    latency: np.ndarray | None = None       # on the held-out episode
    vs_best_static: float = float("nan")
    new_steps: int | None = None            # taken in `seconds` (a resumed run's steps - its start)
    # the eval/ curves' last point (``HeldOutEval.last``: step, per-task latencies on each
    # scenario's held-out episode), if any
    evaluated: tuple[int, dict[str, np.ndarray]] | None = None
    best: SelectedModel | None = None       # --select-best's best_model.zip
    # where a callback of yours (--callbacks) ended training short of --timesteps: which, at
    # which step, and how to continue (``UserCallbacks.stopped``)
    stopped: str | None = None
    # a mix's scenarios after the first: the final model's latencies on each one's held-out
    # episode (``score_final_model``), the comparison table's other sections
    other_scenarios: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    # a warm run that cloned its conservative this session: behaviour_clone's figures
    # (train / held-out agreement, samples), said in the finished line: a poor clone warms
    # nothing up, and TensorBoard's warmup/ tags were the only place that told
    clone: dict[str, float] | None = None
    # the eval/ curves' point at step 0 (``HeldOutEval.at_start``): a fresh run's policy
    # before any update, a warm run's clone, on the held-out episode
    start_vs_best_static: float | None = None


@dataclass
class SelectedModel:
    """A run's best_model.zip: its record (chosen on the validation episode) and its latency
    on the held-out episode, which the comparison table shows beside the run's final model."""

    record: BestModel
    latency: np.ndarray
    vs_best_static: float
    # a mix's scenarios after the first: its latencies on each one's held-out episode
    other_scenarios: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


# what a run of a plan ends in: its result, its failure, or a write refused before it trained
Outcome = RunResult | RunFailed | FinishedUnrecorded | WriteFailed
