"""Train allocator agents (SB3) on InferenceAlloc, without and with warm-up, and compare them.

    python train.py                               # the main job: PPO vs PPO + warm-up, 6-10 min
    python train.py --agents ppo dqn --seeds 0 1 2 --timesteps 100000
    python train.py --env InferenceAllocSplit-v0 --agents ppo sac   # split stages (SAC: here only)
    python train.py --config my.yaml --hp learning_rate=3e-4 n_steps=64
    python train.py --resume                      # continue the newest run to --timesteps
    python train.py --select-best                 # also keep the best model seen on a validation
                                                  # episode: best_model.zip in each run folder
    tensorboard --logdir runs

Each agent x warm-up spec x seed is one run in runs/{env}__{agent}[-warm]__{seed}__{time}/
(a partial warm-up reads -warm-clone+guard; see agents/training.py for what a run folder
holds and what a failed run leaves).
Options resolve as: flags > --config YAML > defaults.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from agents.interrupts import run_stoppable

    # SIGTERM (a scheduler's stop) ends it as Ctrl-C does
    return run_stoppable("train.py", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    from agents.config import ConfigError, TrainConfig, parse_config
    from agents.files import WriteFailed
    from agents.training import RunFailed, RunsFailed, comparison_table, print_cause, train

    try:
        config, given = parse_config(TrainConfig, argv, description=__doc__)
        try:
            results, failed = train(config, given), None
        except RunsFailed as exc:   # each failure was reported as it happened
            results, failed = exc.results, exc
        table = comparison_table(config, results) if results else None
        if table is not None:
            print()
            print(table)
        if failed is not None:
            print(f"train.py: error: {failed}", file=sys.stderr)
            return 1
    except ConfigError as exc:
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:   # --resume's one run
        print_cause(exc)
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 1
    except WriteFailed as exc:  # a file outside a run's training (--resume's config.yaml)
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
