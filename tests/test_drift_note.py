"""agents.run_scores.drift_note: a warm run whose saved model scores clearly worse than its
clone did at step 0 is told so where it ends, not in TensorBoard's eval/ curves alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agents.run_records import RunResult, RunSpec, SelectedModel
from agents.run_scores import DRIFT_MARGIN, drift_note

CLONE = {"samples": 3000.0, "train_agreement": 0.9, "heldout_agreement": 0.9}


def result(final: float, start: float | None = 0.70, clone: dict | None = CLONE,
           best: SelectedModel | None = None) -> RunResult:
    return RunResult(Path("runs/x"), RunSpec("ppo", "all", 0), 4096, 10.0,
                     vs_best_static=final, clone=clone, best=best, start_vs_best_static=start)


def test_a_warm_run_that_ended_clearly_worse_than_its_clone_is_told_so() -> None:
    note = drift_note(result(final=1.19, start=0.72))
    assert note is not None and note.startswith(
        "note: ppo-warm seed 0 ended at 1.190x best-static on the held-out episode, worse than "
        "its clone's 0.720x at step 0")
    assert "--select-best" in note


@pytest.mark.parametrize("final", [0.60, 0.70, 0.70 * (1 + DRIFT_MARGIN), float("nan")])
def test_a_run_level_with_its_clone_or_better_is_not(final: float) -> None:
    assert drift_note(result(final=final, start=0.70)) is None


def test_no_note_without_a_clone_a_start_point_or_where_select_best_kept_a_model() -> None:
    assert drift_note(result(final=1.5, clone=None)) is None       # cold, or a resumed run
    assert drift_note(result(final=1.5, start=None)) is None       # no eval/ point at step 0
    kept = SelectedModel(record=None, latency=np.ones(3), vs_best_static=0.7)  # type: ignore[arg-type]
    assert drift_note(result(final=1.5, best=kept)) is None


def test_train_records_the_step_0_point_and_notes_a_drifted_warm_run(tmp_path: Path,
                                                                    capsys) -> None:
    """The start point is the eval/ curve's at step 0, the clone's, as TensorBoard holds it;
    a warm run fine-tuned at a rate that throws its clone away is told on stderr."""
    from agents.config import TrainConfig
    from agents.event_scalars import read_scalar_tags
    from agents.training import train

    config = TrainConfig(agents=["ppo"], warmup=["all"], timesteps=512, episode_tasks=40,
                         eval_tasks=60, eval_interval=256, checkpoint_interval=0,
                         clone_samples=400, log_dir=str(tmp_path), progress_bar=False,
                         hp={"n_steps": 128, "batch_size": 64, "n_epochs": 4,
                             "learning_rate": 0.05})
    (run,) = train(config, report=lambda line: None)
    steps, values = read_scalar_tags(run.run_dir, ["eval/vs_best_static"])["eval/vs_best_static"]
    assert steps[0] == 0 and run.start_vs_best_static == pytest.approx(values[0], rel=1e-6)
    assert run.vs_best_static == pytest.approx(values[-1], rel=1e-6)
    err = capsys.readouterr().err
    assert (drift_note(run) is not None) == ("worse than its clone's" in err)
    assert run.vs_best_static > run.start_vs_best_static * (1 + DRIFT_MARGIN), (
        "the rate no longer throws the clone away: pick another, so the note is exercised")
    assert drift_note(run) in err.splitlines()
