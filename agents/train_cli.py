"""Train allocator agents (SB3) on InferenceAlloc, without and with warm-up, and compare them.

    python train.py                               # the main job: PPO vs PPO + warm-up, 5-15 min
    python train.py --agents ppo dqn --seeds 0 1 2 --timesteps 100000
    python train.py --env InferenceAllocSplit-v0 --agents ppo sac   # split stages (SAC: here only)
    python train.py --config my.yaml --hp learning_rate=3e-4 n_steps=64
    python train.py --resume                      # continue the newest run to --timesteps
    python train.py --jobs 0                      # the runs at once, a process per core
    python train.py --select-best                 # also keep the best model seen on a validation
                                                  # episode: best_model.zip in each run folder
    python train.py --callbacks mine:LogQueues    # SB3 callbacks of yours (mine.py's LogQueues)
    tensorboard --logdir runs

Each agent x warm-up spec x seed is one run in runs/{env}__{agent}[-warm]__{seed}__{time}/
(a partial warm-up reads -warm-clone+guard; see agents/training.py for what a run folder
holds and what a failed run leaves).
Options resolve as: flags > --config YAML > defaults.
"""

from __future__ import annotations

import sys

COMMAND = "infer-alloc-train"     # the console script (pyproject.toml's [project.scripts])
SCRIPT = "train.py"               # the repo's script, a shim over main


def main(argv: list[str] | None = None, prog: str = COMMAND) -> int:
    """The job `prog` runs; `prog` heads its error lines and its usage (train.py's shim
    passes its own name, ``python -m agents.train_cli`` its command)."""
    from agents.commands import run_job

    return run_job("train", prog, lambda: _main(argv, prog))


def _main(argv: list[str] | None, prog: str) -> int:
    from agents.config import ConfigError, TrainConfig
    from agents.config_parsing import described, parse_config
    from agents.docstrings import module_docstring
    from agents.files import WriteFailed

    try:
        doc = module_docstring(__doc__, __file__)
        config, given = parse_config(TrainConfig, argv, prog=prog,
                                     description=described(doc, SCRIPT, prog))
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    # torch and SB3 load only now: --help and a refused option answer at once
    from agents.run_records import RunFailed, RunsFailed
    from agents.run_scores import comparison_table
    from agents.training import print_cause, train

    try:
        try:
            results, failed = train(config, given), None
        except RunsFailed as exc:   # each failure was reported as it happened (PlanStopped:
            # a write refused before a run's training, said in the error line below)
            results, failed = exc.results, exc
        table = comparison_table(config, results) if results else None
        if table is not None:
            print()
            print(table)
        if failed is not None:
            print(f"{prog}: error: {failed}", file=sys.stderr)
            return 1
    except ConfigError as exc:      # what only the plan can check (the agents, --hp)
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:   # --resume's one run
        print_cause(exc)
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except WriteFailed as exc:  # a file outside a run's training (--resume's config.yaml)
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":     # python -m agents.train_cli: the same job, named so in its messages
    from agents.commands import MODULES

    sys.exit(main(prog=MODULES["train"]))
