"""What tests/test_parallel_evaluation.py's workers compute: a module of its own, so that a
spawned worker imports this and not the test module's imports (torch, SB3: seconds each)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def square_where(item: int | str, job: int) -> tuple[int, int]:
    """`item` squared and the process that squared it (-1: the job's own, `job`); an item
    "raise", "KILL" or "TERM" raises, or kills or stops its own process; item 0 takes longest; an item "slow:PATH" writes PATH after 2 s."""
    if item == "raise":
        raise ValueError("no square of 'raise'")
    if isinstance(item, str) and item.startswith("slow:"):    # done 2 s on, unless stopped
        time.sleep(2)
        Path(item[len("slow:"):]).write_text("done")
        return 0, os.getpid()
    if item in ("KILL", "TERM"):
        os.kill(os.getpid(), getattr(signal, "SIG" + str(item)))
        time.sleep(30)
    assert isinstance(item, int)
    if item == 0:   # the first item comes in last: the values still come in the items' order
        time.sleep(0.5)
    return item * item, os.getpid() if os.getpid() != job else -1


def ticking(item: int, job: int, tick) -> int:
    """`item` ticks, then `item`, from a process other than the job's (-1 if not)."""
    for _ in range(item):
        tick()
    return item if os.getpid() != job else -1
