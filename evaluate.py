"""`python evaluate.py`: the evaluation, as the `infer-alloc-evaluate` command of an installed
wheel runs it. Its options, help and code are in agents/evaluate_cli.py; `python evaluate.py
--help`."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from agents import evaluate_cli

    return evaluate_cli.main(argv, prog=evaluate_cli.SCRIPT)


if __name__ == "__main__":
    sys.exit(main())
