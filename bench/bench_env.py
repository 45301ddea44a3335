"""Raw step throughput of our envs against CartPole-v1, measured in one process.

    python bench/bench_env.py [--env all|discrete|split] [--duration 5] [--repeats 3]
                              [--episode-tasks 100000] [--profile N]

``--env`` picks the envs timed: ``discrete`` (InferenceAlloc-v0), ``split``
(InferenceAllocSplit-v0) or ``all`` (both, the default). Every env is built with
``gymnasium.make`` (so all carry the same default wrappers) and timed with
``gymnasium.utils.performance.benchmark_step`` (random actions, resets on episode end),
alternately with CartPole-v1, ``--repeats`` times each; the best rate of each counts (the least
disturbed by other load on the machine). Each env's figure is its steps/s over CartPole-v1's,
and each has its own target:

- InferenceAlloc-v0: a ratio of at least 0.25;
- InferenceAllocSplit-v0: a ratio of at least 0.08 (about 12 CartPole steps a step). Its
  step does more than the discrete env's: the action space's own ``Box.sample`` (gymnasium's,
  inside the timed loop) costs about 2.5 CartPole steps by itself, each stage's weights are
  checked and rounded to whole sequences, and the simulator books up to 3 D shares, with a
  transfer between each pair of consecutive stages' shares, where the discrete env books 3.
  Measured here at 0.078-0.094 (0.067-0.080 before the Split hot path was made cheaper).

``--profile N`` then runs N steps of each chosen env under cProfile and prints where the time
goes.
Exit status (as every bench/ script's): 0 when the target is met, 1 when it is missed, 2 for a
bad option (before anything is timed).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import pstats
import sys
from pathlib import Path

import gymnasium as gym
from gymnasium.utils.performance import benchmark_step

if __package__ in (None, ""):   # run as a script: time the code beside it, not an installed copy
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import envs  # noqa: E402  (registers the ids; gym.make("envs:...") would import it anyway)
from agents.docstrings import module_docstring  # noqa: E402
from agents.interrupts import run_stoppable  # noqa: E402
from envs.scenario import MAX_EPISODE_TASKS  # noqa: E402
from inference.messages import ShortErrorParser  # noqa: E402

# --env choice (the envs' short names) -> (env id, target ratio of its steps/s over CartPole-v1's)
TARGETS = {"discrete": 0.25, "split": 0.08}
ENVS = {name: (envs.ENV_ALIASES[name], target) for name, target in TARGETS.items()}
ENV_CHOICES = ("all", *ENVS)


def throughput(env_id: str, duration: float, seed: int, **kwargs) -> float:
    env = gym.make(env_id, **kwargs)
    env.action_space.seed(seed)
    try:
        return benchmark_step(env, target_duration=duration, seed=seed)
    finally:
        env.close()


def profile(env_id: str, steps: int, episode_tasks: int, top: int = 25) -> str:
    env = gym.make(f"envs:{env_id}", episode_tasks=episode_tasks)
    env.action_space.seed(0)
    env.reset(seed=0)
    actions = [env.action_space.sample() for _ in range(steps)]
    profiler = cProfile.Profile()
    profiler.enable()
    for action in actions:
        *_, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = ShortErrorParser(description=module_docstring(__doc__, __file__).split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--env", choices=ENV_CHOICES, default="all",
                        help="the env timed: discrete (InferenceAlloc-v0), split "
                             "(InferenceAllocSplit-v0) or all (both)")
    parser.add_argument("--duration", type=float, default=5.0,
                        help="seconds to time each env")
    parser.add_argument("--repeats", type=int, default=3,
                        help="alternating measurements per env; the best counts")
    parser.add_argument("--episode-tasks", type=int, default=100_000,
                        help="our envs' episode length; long, so resets are rare")
    parser.add_argument("--seed", type=int, default=0, help="workload seed of the episodes")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also profile N steps of each env timed with cProfile")
    args = parser.parse_args(argv)
    # a NaN or infinite duration passed `<= 0` and then timed forever (benchmark_step stops once
    # the elapsed time exceeds it); a negative seed was a traceback from gymnasium after the
    # first timing, a negative --profile printed an empty profile, and an --episode-tasks the
    # env refuses was its traceback
    if not math.isfinite(args.duration) or args.duration <= 0 or args.repeats < 1 \
            or not 1 <= args.episode_tasks <= MAX_EPISODE_TASKS or args.seed < 0 \
            or args.profile < 0:
        parser.error(f"--duration must be a finite number > 0, --repeats >= 1, --episode-tasks "
                     f"in 1..{MAX_EPISODE_TASKS}, --seed and --profile >= 0")

    chosen = [ENVS[args.env]] if args.env in ENVS else list(ENVS.values())
    rates = dict.fromkeys([env_id for env_id, _ in chosen] + ["CartPole-v1"], 0.0)
    for _ in range(args.repeats):
        for env_id, _target in chosen:
            rates[env_id] = max(rates[env_id], throughput(f"envs:{env_id}", args.duration,
                                                          args.seed,
                                                          episode_tasks=args.episode_tasks))
            rates["CartPole-v1"] = max(rates["CartPole-v1"],
                                       throughput("CartPole-v1", args.duration, args.seed))
    for env_id, rate in rates.items():
        print(f"{env_id + ' ':.<30}: {rate:12,.0f} steps/s  ({1e6 / rate:7.1f} us/step)")
    met = True
    for env_id, target in chosen:
        ratio = rates[env_id] / rates["CartPole-v1"]
        met &= ratio >= target
        print(f"{'ratio ' + env_id + ' ':.<30}: {ratio:12.3f}  "
              f"({'meets' if ratio >= target else 'below'} the {target} target)")
    if args.profile:
        for env_id, _target in chosen:
            print(f"{env_id}, {args.profile} steps:")
            print(profile(env_id, args.profile, args.episode_tasks))
    return 0 if met else 1


if __name__ == "__main__":
    # Ctrl-C and SIGTERM end it in one line, a temporary folder removed on the way out
    sys.exit(run_stoppable(Path(__file__).name, main))
