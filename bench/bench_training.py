"""Where a short train.py run spends its time, and what its final held-out row costs.

    python bench/bench_training.py [--timesteps 2000] [--eval-tasks 1000] [--warmup none]
                                   [--repeats 3] [--select-best]

Trains one PPO run with train.py's own ``train`` (into a temporary folder, ``--eval-interval``
= ``--timesteps``: eval/ points at step 0 and at the end) and splits its learn() time into
this project's parts and the rest, Stable-Baselines3 and torch: the env's steps, the
TensorBoard callbacks (``LatencyMetrics``, the warm-up's), and the eval/ points less their
env steps (SB3 predicts, one per held-out task); with ``--select-best``, the validation points
too (``BestModelSelection``: predicts, and best_model.zip saved where the mean improves). Each
part's time excludes the parts it calls.

Then it times the run's final held-out row (``agents.run_scores.score_final_model``) both ways in
this process, ``--repeats`` times each, alternately: the reference loads model.zip and runs the
held-out episode again, as the trainer did before; ours takes the eval/ curve's last point,
the same model's run of the same episode. Target: ours at most 0.05 of the reference's median
time, with the same latencies to the bit. Exit status (as every bench/ script's): 0 when the
target is met, 1 when it is missed, 2 for a bad option (before anything is timed).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):   # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from stable_baselines3.common.logger import Logger  # noqa: E402

import agents.training as training  # noqa: E402
from agents import run_plan, run_records, run_scores  # noqa: E402
from agents.callbacks import BestModelSelection, HeldOutEval, LatencyMetrics  # noqa: E402
from agents.config import TrainConfig  # noqa: E402
from agents.docstrings import module_docstring  # noqa: E402
from agents.interrupts import run_stoppable  # noqa: E402
from agents.sb3_factory import SB3Agent  # noqa: E402
from agents.warmup import WarmupCallback  # noqa: E402
from envs.inference_alloc import InferenceAllocEnv  # noqa: E402
from inference.messages import ShortErrorParser  # noqa: E402

TARGET_RATIO = 0.05
LEARN = "SB3 and torch (the rest of learn)"
PARTS = (  # label, class, methods: every call is timed, less the timed calls it makes
    ("env steps", InferenceAllocEnv, ("step",)),
    ("LatencyMetrics", LatencyMetrics, ("_on_step", "_on_rollout_end")),
    ("warm-up callback", WarmupCallback, ("_on_step",)),
    ("eval/ points, less their env steps", HeldOutEval, ("_point",)),
    ("validation points, less their env steps", BestModelSelection, ("_point",)),
    (LEARN, SB3Agent, ("learn",)),
)


@contextmanager
def timed_parts() -> Iterator[dict[str, float]]:
    """Seconds of each of PARTS while it runs inside SB3Agent.learn (so the warm-up's cloning
    and the final row are left out), each less the time of the timed calls it makes."""
    seconds = {label: 0.0 for label, _, _ in PARTS}
    stack: list[list[float]] = []       # per open call: [start, time of its timed callees]
    originals = [(cls, name, cls.__dict__[name]) for _, cls, names in PARTS for name in names]

    def timed(label: str, method: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if label != LEARN and not stack:        # outside learn(): not counted
                return method(*args, **kwargs)
            stack.append([time.perf_counter(), 0.0])
            try:
                return method(*args, **kwargs)
            finally:
                start, inner = stack.pop()
                elapsed = time.perf_counter() - start
                seconds[label] += elapsed - inner
                if stack:
                    stack[-1][1] += elapsed
        return wrapper

    for label, cls, names in PARTS:
        for name in names:
            setattr(cls, name, timed(label, cls.__dict__[name]))
    try:
        yield seconds
    finally:
        for cls, name, method in originals:
            setattr(cls, name, method)


def final_row_seconds(result: run_records.RunResult, cfg: TrainConfig,
                      evaluated: tuple[int, dict[str, np.ndarray]] | None
                      ) -> tuple[float, np.ndarray]:
    """Seconds of the run's final row, and its latencies (None: the reference's re-run)."""
    row = dataclasses.replace(result, latency=None, evaluated=evaluated)
    start = time.perf_counter()
    run_scores.score_final_model(row, cfg, Logger(None, []))
    seconds = time.perf_counter() - start
    assert row.latency is not None
    return seconds, row.latency


def main(argv: list[str] | None = None) -> int:
    parser = ShortErrorParser(description=module_docstring(__doc__, __file__).split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=2000, help="steps of the PPO run")
    parser.add_argument("--eval-tasks", type=int, default=1000,
                        help="tasks of the held-out episode (train.py's default)")
    parser.add_argument("--warmup", choices=("none", "all"), default="none",
                        help="warm-up spec of the run")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed final rows of each kind; the median is reported")
    parser.add_argument("--select-best", action="store_true",
                        help="train as train.py does with this option: validation points "
                             "at the eval/ points' steps")
    args = parser.parse_args(argv)
    if args.timesteps < 1 or args.eval_tasks < 1 or args.repeats < 1:
        parser.error("--timesteps, --eval-tasks and --repeats must be >= 1")

    with tempfile.TemporaryDirectory() as folder:
        cfg = TrainConfig(agents=["ppo"], warmup=[args.warmup], timesteps=args.timesteps,
                          eval_tasks=args.eval_tasks, eval_interval=args.timesteps,
                          checkpoint_interval=0, progress_bar=False, log_dir=folder,
                          select_best=args.select_best)
        with timed_parts() as seconds:
            (result,) = training.train(cfg, report=lambda line: None)
        learn = sum(seconds.values())
        print(f"ppo (warm-up {args.warmup}), {result.steps} steps, held-out episode of "
              f"{args.eval_tasks} tasks: learn() {learn:.1f} s")
        for label, _, _ in PARTS:
            print(f"  {label:<40}{seconds[label]:>8.2f} s {100 * seconds[label] / learn:>6.1f}%")

        evaluated = result.evaluated
        run_cfg = run_plan.read_run_config(result.run_dir / "config.yaml")
        reference, ours = [], []
        for _ in range(args.repeats):
            ref_s, ref_latency = final_row_seconds(result, run_cfg, None)
            our_s, our_latency = final_row_seconds(result, run_cfg, evaluated)
            reference.append(ref_s)
            ours.append(our_s)
    ratio = statistics.median(ours) / statistics.median(reference)
    same = bool(np.array_equal(ref_latency, our_latency))
    met = ratio <= TARGET_RATIO and same
    print(f"final row, median of {args.repeats}: reference (model.zip's episode run again) "
          f"{statistics.median(reference):.3f} s, ours (the eval/ curve's last point) "
          f"{statistics.median(ours):.4f} s")
    print(f"ratio {ratio:.4f} (target <= {TARGET_RATIO}); the same latencies to the bit: "
          f"{'yes' if same else 'NO'}; {'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    # Ctrl-C and SIGTERM end it in one line, a temporary folder removed on the way out
    sys.exit(run_stoppable(Path(__file__).name, main))
