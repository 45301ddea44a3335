"""heft-split's decision time as the device count grows: every subset against the search.

    python bench/bench_heft_split.py [--devices 3,8,16,24] [--tasks 20] [--repeats 3]
                                     [--exhaustive-up-to 16]

For each device count D of `--devices` it writes hardware of D devices (the server preset's
cpu, gpu and npu repeated in turn under new names, each in a memory of its own) to a
temporary folder, runs one article episode of InferenceAllocSplit-v0 on it with random
actions, and times heft-split deciding on the episode's first `--tasks` observations,
`--repeats` times (the median is reported):

- "heft-split": as shipped: every subset of a stage's allowed devices up to
  ``EXHAUSTIVE_DEVICES``, the polynomial search above it (``agents.heft_split``'s docstring);
- "every subset": the exhaustive search at any D, as heft-split was before; timed for D up to
  `--exhaustive-up-to` only (it doubles with each device: 1-2 s a decision at 16), and
  "same plans" counts the observations on which both give the same action.

The same process times a loop of trivial Python calls (``bench_simulator.reference_rate``),
so each decision is also given in trivial calls, which compares across machines. Target: a
heft-split decision costs under 100x the 3-device decision at every D up to 24 (every subset
costs ~9,000x at 16). Exit status (as every bench/ script's): 0 when the target is met, 1 when
it is missed, 2 for a bad option (before anything is timed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):   # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import yaml  # noqa: E402

from agents.docstrings import module_docstring  # noqa: E402
from agents.heft_split import HeftSplitPolicy  # noqa: E402
from agents.interrupts import run_stoppable  # noqa: E402
from bench.bench_simulator import reference_rate  # noqa: E402
from bench.bench_traces import median_seconds  # noqa: E402
from envs.inference_alloc_split import InferenceAllocSplitEnv  # noqa: E402
from envs.scenario import MAX_EPISODE_TASKS  # noqa: E402
from inference.hardware import PRESET_DIR  # noqa: E402
from inference.messages import ShortErrorParser  # noqa: E402

TARGET_RATIO = 100.0      # a decision at D <= TARGET_UP_TO devices over one at 3
TARGET_UP_TO = 24


def repeated_server(devices: int) -> dict[str, Any]:
    """The server preset's hardware with its three devices repeated in turn to `devices`, each
    copy named after its index and given its own memory domain; every pair linked as the
    preset links its own cpu and gpu."""
    raw = yaml.safe_load((PRESET_DIR / "server.yaml").read_text(encoding="utf-8"))
    link = next(link for link in raw["links"] if set(link["between"]) == {"cpu", "gpu"})
    copies = []
    for i in range(devices):
        device = dict(raw["devices"][i % len(raw["devices"])])
        device.update(name=f"{device['name']}{i}", memory_domain=f"{device['memory_domain']}-{i}")
        copies.append(device)
    raw.update(name=f"server-x{devices}", devices=copies,
               links=[{"between": [a["name"], b["name"]], "bandwidth": link["bandwidth"],
                       "latency": link["latency"]}
                      for k, a in enumerate(copies) for b in copies[k + 1:]])
    return raw


def episode_observations(devices: int, tasks: int, folder: Path) -> tuple[Any, list[np.ndarray]]:
    """A Split env on `repeated_server(devices)` and its first `tasks` observations under
    random actions (seed 0)."""
    path = folder / f"server-x{devices}.yaml"
    path.write_text(yaml.safe_dump(repeated_server(devices)), encoding="utf-8")
    env = InferenceAllocSplitEnv("article", hardware=str(path), episode_tasks=tasks)
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    observations = []
    for _ in range(tasks):
        observations.append(obs)
        obs, *_ = env.step(env.action_space.sample())
    return env, observations


def decision_seconds(policy: HeftSplitPolicy, observations: list[np.ndarray],
                     repeats: int) -> tuple[float, list[np.ndarray]]:
    """Median seconds per predict() over `observations`, and the actions of the last repeat."""
    actions: list[np.ndarray] = []

    def decide() -> None:
        actions[:] = [policy.predict(o)[0] for o in observations]

    return median_seconds(decide, repeats) / len(observations), actions


def device_counts(text: str) -> list[int]:
    """`--devices`: comma-separated counts, each >= 3 (the first must be 3: the reference)."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated device counts, got {text!r}") from None
    if counts[0] != 3 or min(counts) < 3 or counts != sorted(set(counts)):
        raise argparse.ArgumentTypeError(
            f"increasing device counts starting at 3 (the reference), got {text!r}")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = ShortErrorParser(description=module_docstring(__doc__, __file__).split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--devices", type=device_counts, default="3,8,16,24",
                        help="device counts, from 3 (the reference) up")
    parser.add_argument("--tasks", type=int, default=20, help="decisions per repeat")
    parser.add_argument("--repeats", type=int, default=3,
                        help="repeats; the median is reported")
    parser.add_argument("--exhaustive-up-to", type=int, default=16,
                        help="time every subset too at this many devices or fewer")
    args = parser.parse_args(argv)
    # the decisions are one episode's: more than the env takes was its traceback after a timing
    if not 1 <= args.tasks <= MAX_EPISODE_TASKS or args.repeats < 1 or args.exhaustive_up_to < 0:
        parser.error(f"--tasks must lie in 1..{MAX_EPISODE_TASKS}, --repeats must be >= 1 and "
                     f"--exhaustive-up-to >= 0")
    ref = reference_rate(20_000, args.repeats)      # trivial calls per second
    print(f"median of {args.repeats} repeats of {args.tasks} decisions; Python "
          f"{sys.version.split()[0]}; reference: {ref:,.0f} trivial function calls/s\n")
    print(f"{'devices':>7}  {'search':<13}{'seconds':>10}{'decisions/s':>13}"
          f"{'trivial calls':>15}{'x 3 devices':>13}  same plans")
    ok, base = True, 0.0
    with tempfile.TemporaryDirectory() as folder:
        for devices in args.devices:
            env, observations = episode_observations(devices, args.tasks, Path(folder))
            searched = HeftSplitPolicy(env)
            seconds, actions = decision_seconds(searched, observations, args.repeats)
            base = base or seconds
            rows = [("heft-split", seconds, "")]
            if devices <= args.exhaustive_up_to:
                every = HeftSplitPolicy(env)
                every.exhaustive_devices = devices
                old, old_actions = decision_seconds(every, observations, args.repeats)
                same = sum(np.array_equal(a, b) for a, b in zip(actions, old_actions, strict=True))
                rows.append(("every subset", old, f"{same}/{len(actions)}"))
            for what, secs, same_plans in rows:
                print(f"{devices:>7}  {what:<13}{secs:>10.2e}{1 / secs:>13,.1f}{secs * ref:>15,.0f}"
                      f"{secs / base:>13,.1f}  {same_plans}")
            if devices <= TARGET_UP_TO:
                ok &= seconds < TARGET_RATIO * base
    # --devices may stop short of the target's bound: the verdict says how far it was measured
    judged = max(d for d in args.devices if d <= TARGET_UP_TO)
    short = f" (measured up to {judged} only)" if judged < TARGET_UP_TO else ""
    print(f"\ntarget: heft-split under {TARGET_RATIO:g}x the 3-device decision up to "
          f"{TARGET_UP_TO} devices{short}: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    # Ctrl-C and SIGTERM end it in one line, a temporary folder removed on the way out
    sys.exit(run_stoppable(Path(__file__).name, main))
