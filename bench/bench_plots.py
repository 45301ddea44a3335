"""Drawing latency_cdf.png: its thinned curves against a step drawn for every task.

    python bench/bench_plots.py [--tasks 500000] [--agents 8] [--repeats 1]

evaluate.py's latency_cdf.png draws each agent's CDF of per-task latencies pooled over the
held-out seeds and episodes. The script draws `--agents` curves of `--tasks` latencies each
(log-normal, as queueing gives) with ``agents.plots.latency_cdf``, which draws at most
``CDF_POINTS`` steps a curve, and with the drawing it replaced (a step per task), in the same
process, and checks that the thinned curves are exact: each step the fraction of tasks at or
below its latency, from the least latency to the greatest. Target: at most a fifth of the
reference's time from 100,000 tasks a curve on (8 agents of 2 million tasks took a minute
to draw every step, 1.5 s thinned).

Exit status (as every bench/ script's): 0 when the target is met, 1 when it is missed, 2 for a
bad option (before anything is drawn or timed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):   # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from agents.docstrings import module_docstring  # noqa: E402
from agents.interrupts import run_stoppable  # noqa: E402
from bench.bench_traces import median_seconds  # noqa: E402
from inference.messages import ShortErrorParser  # noqa: E402

TARGET_RATIO = 0.2
TARGET_FROM_TASKS = 100_000     # below, both draw in about the figure's own time
MAX_TASKS = 20_000_000          # ~160 MB a curve
MAX_AGENTS = 32


def every_step_cdf(latencies: dict[str, dict[str, np.ndarray]], target: Path) -> None:
    """latency_cdf as it drew before: a step per task."""
    from agents import plots

    thinned = plots.cdf_points

    def every(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = np.sort(np.asarray(values, dtype=float))
        return x, np.arange(1, len(x) + 1) / len(x)

    plots.cdf_points = every
    try:
        plots.latency_cdf(latencies, target)
    finally:
        plots.cdf_points = thinned


def exact(values: np.ndarray) -> bool:
    """Whether the thinned curve's steps are the full CDF's, its ends included."""
    from agents.plots import cdf_points

    x, fraction = cdf_points(values)
    full = np.sort(values)
    ranks = np.rint(fraction * len(full)).astype(np.int64) - 1
    return bool(np.array_equal(x, full[ranks]) and ranks[0] == 0 and ranks[-1] == len(full) - 1)


def main(argv: list[str] | None = None) -> int:
    parser = ShortErrorParser(description=module_docstring(__doc__, __file__).split("\n\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--tasks", type=int, default=500_000, help="latencies a curve")
    parser.add_argument("--agents", type=int, default=8, help="curves drawn")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs of each; the median")
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.agents < 1 or args.repeats < 1:
        parser.error("--tasks, --agents and --repeats must be >= 1")
    if args.tasks > MAX_TASKS:
        parser.error(f"--tasks must be at most {MAX_TASKS:,}, got {args.tasks:,}")
    if args.agents > MAX_AGENTS:
        parser.error(f"--agents must be at most {MAX_AGENTS}, got {args.agents}")

    from agents.plots import CDF_POINTS, latency_cdf

    rng = np.random.default_rng(0)
    latencies = {"article": {f"agent{i}": rng.lognormal(3.0, 1.0, args.tasks)
                             for i in range(args.agents)}}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        reference = median_seconds(lambda: every_step_cdf(latencies, folder / "every.png"),
                                   args.repeats)
        ours = median_seconds(lambda: latency_cdf(latencies, folder / "thinned.png"),
                              args.repeats)
    same = all(exact(values) for values in latencies["article"].values())
    ratio = ours / reference
    judged = args.tasks >= TARGET_FROM_TASKS
    ok = same and (ratio <= TARGET_RATIO or not judged)
    print(f"{args.agents} curves of {args.tasks:,} tasks, median of {args.repeats}")
    print(f"  a step per task: {reference:.2f} s")
    print(f"  latency_cdf ({min(args.tasks, CDF_POINTS):,} steps a curve): {ours:.2f} s, "
          f"{ratio:.3f}x the reference's time (target <= {TARGET_RATIO:g}x from "
          f"{TARGET_FROM_TASKS:,} tasks): {'ok' if ok else 'MISSED'}")
    print(f"  steps: {'exact' if same else 'NOT the CDF'}")
    return 0 if ok else 1


if __name__ == "__main__":
    # Ctrl-C and SIGTERM end it in one line, a temporary folder removed on the way out
    sys.exit(run_stoppable(Path(__file__).name, main))
