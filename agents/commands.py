"""The names of our two jobs as the user runs them, for messages that say what to run next.

From a checkout the jobs are ``python train.py`` and ``python evaluate.py``; from an installed
wheel, which has neither file, they are the console scripts ``infer-alloc-train`` and
``infer-alloc-evaluate``; either way ``python -m agents.train_cli`` and ``python -m
agents.evaluate_cli`` run them too (a console script's folder off PATH, a virtual environment
not activated). A hint naming another form sent a wheel user to a file they do not have, so the
CLIs say which form ran them (``invoked_as``) and the messages ask ``command`` or ``program``.
Library code run from Python outside the CLIs names the checkout's form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

Job = Literal["train", "evaluate"]
Form = Literal["script", "console", "module"]     # python train.py, infer-alloc-train, python -m
CONSOLE_SCRIPTS: dict[Job, str] = {"train": "infer-alloc-train", "evaluate": "infer-alloc-evaluate"}
MODULES: dict[Job, str] = {"train": "python -m agents.train_cli",
                           "evaluate": "python -m agents.evaluate_cli"}
_form: Form = "script"    # the form of the CLI running


def current_form() -> Form:
    """The form of the CLI running (a worker of its runs names the jobs so too)."""
    return _form


def program(job: Job) -> str:
    """The job's name as a message says "train.py's --env": its script or its command."""
    return f"{job}.py" if _form == "script" else command(job)


def command(job: Job) -> str:
    """What runs the job: ``python train.py``, ``infer-alloc-train`` or ``python -m
    agents.train_cli``."""
    if _form == "console":
        return CONSOLE_SCRIPTS[job]
    if _form == "module":
        return MODULES[job]
    return f"python {job}.py"


def form_of(job: Job, prog: str) -> Form:
    """The form that runs `job` under the name `prog`: its script's (train.py's shim passes
    "train.py"), its module's (``MODULES``), else its console script's."""
    if prog == f"{job}.py":
        return "script"
    return "module" if prog == MODULES[job] else "console"


@contextmanager
def invoked_as(form: Form) -> Iterator[None]:
    """Within it, `command` and `program` name the jobs in `form`; the form in use before is
    restored after, so one in-process call does not rename the next's."""
    global _form
    before, _form = _form, form
    try:
        yield
    finally:
        _form = before


def named(text: str) -> str:
    """`text`, written with the checkout's names (help strings, fixed at import), naming the
    jobs as `command` and `program` do now."""
    if _form == "script":
        return text
    for job in CONSOLE_SCRIPTS:
        text = text.replace(f"python {job}.py", command(job)).replace(f"{job}.py", program(job))
    return text


def run_job(job: Job, prog: str, body: Callable[[], int], kept: str = "") -> int:
    """`body`, the job `prog` runs, as a CLI runs it: SIGTERM (a scheduler's stop) ends it as
    Ctrl-C does, either in one line (``agents.interrupts.run_stoppable``; `kept`: what it says
    is kept) from the start, while the modules load too (a quarter second of Ctrl-C was a
    traceback, and of SIGTERM a silent exit); its hints name the form the user ran; a path it
    prints in a character the console cannot show is escaped, not the end of the job."""
    from agents.interrupts import run_stoppable

    def in_context() -> int:
        from agents.files import quiet_refused_writes_in_threads
        from inference.messages import printable_stdout

        with invoked_as(form_of(job, prog)), printable_stdout(), quiet_refused_writes_in_threads():
            return body()

    return run_stoppable(prog, in_context, kept)
