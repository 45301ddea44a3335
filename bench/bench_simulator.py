"""Simulator throughput: simulated tasks per second, per variant, on the article task.

    python bench/bench_simulator.py [--runs 20000] [--repeats 5] [--placement cpu,gpu,gpu]

For each variant it books the article task (batch 16, 5K-token prompt, 256 output tokens) on
the `server` preset `--runs` times through `Simulator.run` with pre-validated shares (the
hot path an environment step takes), `--repeats` times, and reports the median rate. The same
process times a reference loop of as many trivial Python function calls, so that the figure
"trivial calls per simulated task" compares across machines. Target: >= 50,000 tasks/s for
glm-5.3. Exit status (as every bench/ script's): 0 when the target is met, 1 when it is
missed, 2 for a bad option (before anything is timed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):   # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.docstrings import module_docstring  # noqa: E402
from agents.interrupts import run_stoppable  # noqa: E402
from inference import (  # noqa: E402
    VARIANTS,
    Simulator,
    Task,
    build_stages,
    get_model,
    load_hardware,
)
from inference.__main__ import parse_placement  # noqa: E402
from inference.messages import ShortErrorParser  # noqa: E402

TARGET_TASKS_PER_S = 50_000.0
ARTICLE_TASK = Task(batch=16, prompt_tokens=5000, output_tokens=256)


def _trivial(x: object) -> object:
    return x


def reference_rate(runs: int, repeats: int) -> float:
    """Median calls/s of a loop calling a trivial Python function `runs` times."""
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(runs):
            _trivial(ARTICLE_TASK)
        rates.append(runs / (time.perf_counter() - start))
    return statistics.median(rates)


def simulator_rate(variant: str, placement: tuple[str | int, ...], runs: int,
                   repeats: int) -> float:
    """Median simulated tasks/s of `runs` bookings through Simulator.run (fresh state per repeat)."""
    sim = Simulator(load_hardware("server"), get_model("glm-9b"), build_stages(variant))
    shares = sim.shares(placement)
    run, task = sim.run, ARTICLE_TASK
    rates = []
    for _ in range(repeats):
        sim.reset()
        start = time.perf_counter()
        for _ in range(runs):
            run(task, shares)
        rates.append(runs / (time.perf_counter() - start))
    return statistics.median(rates)


def main(argv: list[str] | None = None) -> int:
    parser = ShortErrorParser(description=module_docstring(__doc__, __file__).split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--runs", type=int, default=20_000,
                        help="bookings per repeat")
    parser.add_argument("--repeats", type=int, default=5,
                        help="repeats; the median is reported")
    parser.add_argument("--placement", default="cpu,gpu,gpu", metavar="DEV,DEV,DEV",
                        help="device name or id for load, prefill, decode")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.repeats < 1:
        parser.error("--runs and --repeats must be >= 1")
    try:    # a typo'd device is a usage error, before anything is timed
        placement = parse_placement(args.placement)
        Simulator(load_hardware("server"), get_model("glm-9b"),
                  build_stages("glm-5.3")).shares(placement)
    except ValueError as exc:
        parser.error(str(exc))
    ref = reference_rate(args.runs, args.repeats)
    print(f"simulator throughput, article task (batch 16, 5000 prompt, 256 output tokens) on "
          f"server, placement {args.placement}")
    print(f"median of {args.repeats} repeats x {args.runs} runs; Python {sys.version.split()[0]}")
    print(f"reference: {ref:,.0f} trivial function calls/s\n")
    print(f"{'variant':<20}{'tasks/s':>12}{'trivial calls/task':>22}{'target':>10}")
    ok = True
    for variant in VARIANTS:
        rate = simulator_rate(variant, placement, args.runs, args.repeats)
        verdict = ""
        if variant == "glm-5.3":
            ok = rate >= TARGET_TASKS_PER_S
            verdict = "met" if ok else "MISSED"
        print(f"{variant:<20}{rate:>12,.0f}{ref / rate:>22.1f}{verdict:>10}")
    print(f"\ntarget: >= {TARGET_TASKS_PER_S:,.0f} tasks/s for glm-5.3")
    return 0 if ok else 1


if __name__ == "__main__":
    # Ctrl-C and SIGTERM end it in one line, a temporary folder removed on the way out
    sys.exit(run_stoppable(Path(__file__).name, main))
