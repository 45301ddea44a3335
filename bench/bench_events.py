"""Reading a run's learning curves: ``read_scalar_tags`` against tensorboard's EventAccumulator.

    python bench/bench_events.py [--steps 200000] [--repeats 1]

evaluate.py's learning_curves.png reads three curves of each run folder's TensorBoard events.
A run's file holds far more than those: ``latency/per_sample`` alone is one event per step.
The script writes a run's events in a temporary folder with SummaryWriter, as train.py writes
them (one ``latency/per_sample`` a step; every 64 steps a rollout's 20 grouped scalars, the
curve ``latency/vs_static`` among them; every 10,000 steps an ``eval/vs_best_static``), and
times reading the three curves with ``agents.event_scalars.read_scalar_tags`` against the
reader it replaced (EventAccumulator with ``size_guidance={"scalars": 10_000}``, every event
parsed), in the same process, and checks they read the same points. Target: at most a fifth
of EventAccumulator's time (it took 12x less on a 250,000-step PPO run's 37 MB file), the
same points (up to 10,000 a curve).

Exit status (as every bench/ script's): 0 when the target is met, 1 when it is missed, 2 for a
bad option (before anything is written or timed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

if __package__ in (None, ""):   # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.docstrings import module_docstring  # noqa: E402
from agents.event_scalars import MAX_POINTS, read_scalar_tags  # noqa: E402
from agents.interrupts import run_stoppable  # noqa: E402
from agents.plots import CURVE_PANELS  # noqa: E402
from inference.messages import ShortErrorParser  # noqa: E402

TARGET_RATIO = 0.2
T = TypeVar("T")
ROLLOUT = 64                    # steps between a rollout's grouped scalars
EVAL_EVERY = 10_000
GROUPED = ["latency/vs_static", "latency/mean", "latency/p95", *(f"train/t{i}" for i in range(17))]
MAX_STEPS = 10_000_000          # ~1.5 GB of events, written at ~50,000 events/s
TAGS = [tag for tag, _, _ in CURVE_PANELS]


def write_events(folder: Path, steps: int) -> None:
    """A run's events of `steps` steps, as train.py writes them (module docstring)."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step in range(steps):
        writer.add_scalar("latency/per_sample", 1.0 + (step % 97) / 100, step)
        if step % ROLLOUT == 0:
            for i, tag in enumerate(GROUPED):
                writer.add_scalar(tag, 1.0 + i / 10 + (step % 89) / 1000, step)
        if step % EVAL_EVERY == 0:
            writer.add_scalar("eval/vs_best_static", 1.0 + (step % 83) / 100, step)
    writer.close()


def accumulator_curves(folder: Path) -> dict[str, tuple[list[int], list[float]]]:
    """The three curves as read_scalar_tags read them before (EventAccumulator, then the newer
    of each step by wall time)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 10_000, "tensors": 1,
                                                       "histograms": 1, "images": 1})
    acc.Reload()
    present = set(acc.Tags()["scalars"])
    found = {}
    for tag in TAGS:
        kept: list = []
        for event in sorted(acc.Scalars(tag) if tag in present else [],
                            key=lambda e: e.wall_time):
            while kept and kept[-1].step >= event.step:
                kept.pop()
            kept.append(event)
        found[tag] = ([e.step for e in kept], [e.value for e in kept])
    return found


def timed(work: Callable[[], T], repeats: int) -> tuple[float, T]:
    """`work`'s median time over `repeats` runs, and what its last run returned (the check
    reads it: a run more of EventAccumulator was ~45 s a million steps)."""
    returned: list[T] = []
    seconds = statistics.median(timeit.repeat(lambda: returned.append(work()), number=1,
                                              repeat=repeats))
    return seconds, returned[-1]


def main(argv: list[str] | None = None) -> int:
    parser = ShortErrorParser(description=module_docstring(__doc__, __file__).split("\n\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--steps", type=int, default=200_000,
                        help="training steps of the run written (one latency/per_sample each)")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs of each; the median")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be >= 1")
    if args.steps > MAX_STEPS:
        parser.error(f"--steps must be at most {MAX_STEPS:,}, got {args.steps:,}")

    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        write_events(folder, args.steps)
        size = sum(p.stat().st_size for p in folder.iterdir())
        reference, before = timed(lambda: accumulator_curves(folder), args.repeats)
        ours, curves = timed(lambda: read_scalar_tags(folder, TAGS), args.repeats)
    points = {tag: len(steps) for tag, (steps, _) in curves.items()}
    # up to 10,000 points a curve, the same points; past that EventAccumulator's are a sample
    comparable = max(points.values()) <= MAX_POINTS
    same = all(list(curves[tag][0]) == before[tag][0] and list(curves[tag][1]) == before[tag][1]
               for tag in TAGS)
    ratio = ours / reference
    ok = ratio <= TARGET_RATIO and (same or not comparable)
    print(f"{args.steps:,} steps, {size / 1e6:.1f} MB of events, median of {args.repeats}")
    print(f"  EventAccumulator: {reference:.2f} s ({reference / args.steps * 1e6:.0f} s a "
          f"million steps)")
    print(f"  read_scalar_tags: {ours:.2f} s ({ours / args.steps * 1e6:.1f} s a million steps), "
          f"{ratio:.3f}x EventAccumulator's time ({1 / ratio:.1f}x faster; target <= "
          f"{TARGET_RATIO:g}x): {'ok' if ok else 'MISSED'}")
    print("  points: " + ", ".join(f"{tag} {n:,}" for tag, n in points.items()) + ": "
          + ("the same as EventAccumulator's" if same else "DIFFERENT from EventAccumulator's"
             if comparable else f"past {MAX_POINTS:,}, not EventAccumulator's random sample"))
    return 0 if ok else 1


if __name__ == "__main__":
    # Ctrl-C and SIGTERM end it in one line, a temporary folder removed on the way out
    sys.exit(run_stoppable(Path(__file__).name, main))
