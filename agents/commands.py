"""The names of our two jobs as the user runs them, for messages that say what to run next.

From a checkout the jobs are ``python train.py`` and ``python evaluate.py``; from an installed
wheel, which has neither file, they are the console scripts ``infer-alloc-train`` and
``infer-alloc-evaluate``. A hint naming the other form sent a wheel user to a file they do not
have, so the CLIs say which form ran them (``invoked_as``) and the messages ask ``command`` or
``program``. Library code run from Python outside the CLIs names the checkout's form.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

Job = Literal["train", "evaluate"]
CONSOLE_SCRIPTS: dict[Job, str] = {"train": "infer-alloc-train", "evaluate": "infer-alloc-evaluate"}
_console = False    # set while a console script runs


def program(job: Job) -> str:
    """The job's name as a message says "train.py's --env": its script or its command."""
    return CONSOLE_SCRIPTS[job] if _console else f"{job}.py"


def command(job: Job) -> str:
    """What runs the job: ``python train.py`` or ``infer-alloc-train``."""
    return CONSOLE_SCRIPTS[job] if _console else f"python {job}.py"


@contextmanager
def invoked_as(console: bool) -> Iterator[None]:
    """Within it, `command` and `program` name the console scripts if `console`; the form in
    use before is restored after, so one in-process call does not rename the next's."""
    global _console
    before, _console = _console, console
    try:
        yield
    finally:
        _console = before


def named(text: str) -> str:
    """`text`, written with the checkout's names (help strings, fixed at import), naming the
    jobs as `command` and `program` do now."""
    if not _console:
        return text
    for job, script in CONSOLE_SCRIPTS.items():
        text = text.replace(f"python {job}.py", script).replace(f"{job}.py", script)
    return text
