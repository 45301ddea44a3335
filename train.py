"""`python train.py`: the main job, as the `infer-alloc-train` command of an installed wheel
runs it. Its options, help and code are in agents/train_cli.py; `python train.py --help`."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from agents import train_cli

    return train_cli.main(argv, prog=train_cli.SCRIPT)


if __name__ == "__main__":
    sys.exit(main())
