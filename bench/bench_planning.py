"""Planning and loading speed: a heft-calibrated decision, and reading the Azure conversation trace.

    python bench/bench_planning.py [--tasks 200] [--repeats 5]

heft-calibrated decides once per task, so it must stay cheap beside an env step; the
conversation trace (~20k rows) is read whenever a scenario replays it. The same process
times a loop of trivial Python calls (``bench_simulator.reference_rate``), so each figure
is also given in trivial calls, which compares across machines. Targets: a decision under
2 ms, the trace read in under 0.5 s. Exit status (as every bench/ script's): 0 when both
targets are met, 1 when one is missed, 2 for a bad option (before anything is timed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):   # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gymnasium as gym  # noqa: E402

from agents.docstrings import module_docstring  # noqa: E402
from agents.heft import HeftPolicy  # noqa: E402
from agents.interrupts import run_stoppable  # noqa: E402
from bench.bench_simulator import reference_rate  # noqa: E402
from bench.bench_traces import median_seconds  # noqa: E402
from envs.scenario import MAX_EPISODE_TASKS  # noqa: E402
from envs.traces import read_trace  # noqa: E402
from inference.messages import ShortErrorParser  # noqa: E402

TARGET_DECISION_S = 2e-3
TARGET_TRACE_S = 0.5


def decision_seconds(tasks: int, repeats: int) -> float:
    """Median seconds per heft-calibrated predict() over the observations of one episode."""
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=tasks)
    obs, _ = env.reset(seed=0)
    observations = []
    for _ in range(tasks):
        observations.append(obs)
        obs, *_ = env.step(env.action_space.sample())
    heft = HeftPolicy(env, calibrated=True)
    heft.predict(observations[0])            # first call builds the policy's tables
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for o in observations:
            heft.predict(o)
        times.append((time.perf_counter() - start) / tasks)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = ShortErrorParser(description=module_docstring(__doc__, __file__).split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--tasks", type=int, default=200, help="decisions per repeat")
    parser.add_argument("--repeats", type=int, default=5, help="repeats; the median is reported")
    args = parser.parse_args(argv)
    # the decisions are one episode's: more than the env takes was its traceback after a timing
    if not 1 <= args.tasks <= MAX_EPISODE_TASKS or args.repeats < 1:
        parser.error(f"--tasks must lie in 1..{MAX_EPISODE_TASKS} and --repeats must be >= 1")
    ref = reference_rate(20_000, args.repeats)      # trivial calls per second
    decision = decision_seconds(args.tasks, args.repeats)
    trace = median_seconds(lambda: read_trace("azure-conv"), args.repeats)
    rows = (("heft-calibrated decision", decision, TARGET_DECISION_S),
            ("read azure-conv trace", trace, TARGET_TRACE_S))
    print(f"median of {args.repeats} repeats; Python {sys.version.split()[0]}; "
          f"reference: {ref:,.0f} trivial function calls/s\n")
    print(f"{'what':<28}{'seconds':>12}{'trivial calls':>16}  target")
    ok = True
    for what, seconds, target in rows:
        met = seconds < target
        ok &= met
        print(f"{what:<28}{seconds:>12.2e}{seconds * ref:>16,.0f}  < {target:g} s: "
              f"{'met' if met else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    # Ctrl-C and SIGTERM end it in one line, a temporary folder removed on the way out
    sys.exit(run_stoppable(Path(__file__).name, main))
