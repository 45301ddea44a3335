"""Evaluate trained models and the baselines on held-out workloads; write results/.

    python evaluate.py                        # every run under runs/ + every baseline
    python evaluate.py --models runs/X/model.zip --scenarios article bursty --seeds 10
    python evaluate.py --online               # only the online stabilisation study
    python evaluate.py --online --online-reward latency   # its learners on another reward
    python evaluate.py --reproduce-article    # the article's figures (agents.article)
    python evaluate.py --online --jobs 2      # two seeds at once, a process each

Writes under --out (see agents/reporting.py): summary.csv, summary.md, latency_cdf.png,
learning_curves.png (when run folders hold TensorBoard events; else an earlier one is
removed), stabilization.png and stabilization.md; --online writes only the last two,
--reproduce-article only article.md. Files of a study skipped are kept, and named as such.
Held-out workload seeds start at 10000; training uses 0, 1, ... Options resolve as:
flags > --config YAML > defaults.
"""

from __future__ import annotations

import sys

COMMAND = "infer-alloc-evaluate"  # the console script (pyproject.toml's [project.scripts])
SCRIPT = "evaluate.py"            # the repo's script, a shim over main


def main(argv: list[str] | None = None, prog: str = COMMAND) -> int:
    """The evaluation `prog` runs; `prog` heads its error lines and its usage (evaluate.py's
    shim passes its own name, ``python -m agents.evaluate_cli`` its command)."""
    from agents.commands import run_job

    return run_job("evaluate", prog, lambda: _main(argv, prog), " (files already written are complete)")


def _main(argv: list[str] | None, prog: str) -> int:
    from agents.config import ConfigError, EvalConfig
    from agents.config_parsing import described, parse_config
    from agents.docstrings import module_docstring
    from agents.files import WriteFailed
    from agents.workers import WorkerFailed

    try:
        doc = module_docstring(__doc__, __file__)
        config, _ = parse_config(EvalConfig, argv, description=described(doc, SCRIPT, prog),
                                 prog=prog)
        # torch and SB3 load only now: --help and a refused option answer at once
        from agents.reporting import reproduce_article, run

        # each says the files it writes as it writes them
        (reproduce_article if config.reproduce_article else run)(config)
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except (WriteFailed, WorkerFailed) as exc:     # a full disk; a seed's worker (--jobs) failed:
        print(f"{prog}: error: {exc}", file=sys.stderr)     # the files written are complete
        return 1
    return 0


if __name__ == "__main__":     # python -m agents.evaluate_cli: the same job, named so in its messages
    from agents.commands import MODULES

    sys.exit(main(prog=MODULES["evaluate"]))
