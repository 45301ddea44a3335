"""A stage implementation's cost face, checked once when `build_stages` builds it.

The simulator reads a stage's `work(task, model)` (and a loader's `load_work(task, model,
hit)`) on every task and trusts it: checking each record there would slow its hot path, and
unchecked a user's NaN FLOPs came out as a negative mean latency, negative FLOPs as a faster
stage, and a `work()` that returned None as an AttributeError deep in the booking. So the
registry prices a few probe tasks, from one sequence of one token to a long batch, before
handing the implementation on, and refuses it with one line that names it, the call and the
field: a record that is not a `StageWork` of `WorkPart`s, a number that is not finite and
>= 0, an op class or access pattern that is not an index of the hardware's. A probe cannot
see every task, but a face that is wrong everywhere, or at the small or large end, is caught.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

from inference.checks import is_bool, is_integer, is_number
from inference.hardware import OP_CLASSES, PATTERNS
from inference.messages import shown
from inference.model_config import ModelConfig
from inference.task import Task
from inference.work import StageWork, WorkPart

#: The tasks a cost face is priced on: the smallest, the article's, a long-context batch.
PROBE_TASKS = (
    Task(batch=1, prompt_tokens=1, output_tokens=1, domain=0),
    Task(batch=16, prompt_tokens=5000, output_tokens=256, domain=3),
    Task(batch=8, prompt_tokens=65536, output_tokens=2048, domain=7),
)
_WORK_NUMBERS = ("io_bytes", "output_bytes", "footprint")
_PART_NUMBERS = ("flops", "nbytes", "fixed_bytes", "launches")


def check_cost_face(impl: Any, stage: str, label: str, model: ModelConfig) -> None:
    """Price `PROBE_TASKS` with `impl`, the `stage` implementation `label` names, on `model`:
    a ValueError naming it, the call and the field when a record is not as the simulator reads
    it."""
    for call, price in _calls(impl, stage, label):
        for task in PROBE_TASKS:
            try:
                work = price(task, model)
            except Exception as exc:    # a user's code: whatever it raises, named with it
                raise ValueError(f"{label}: {call} of {_task_text(task)} raised "
                                 f"{type(exc).__name__}: {exc}") from exc
            problem = work_problem(work)
            if problem is not None:
                raise ValueError(
                    f"{label}: {call} of {_task_text(task)} gave {problem}; a stage's cost face "
                    f"must return a StageWork whose numbers are finite and >= 0 "
                    f"(inference.work)")


def work_problem(work: object) -> str | None:
    """What is wrong with `work` as a `StageWork` the simulator prices ('parts[0].flops =
    nan'); None when nothing is."""
    if not isinstance(work, StageWork):
        return f"{shown(work)}, not a StageWork"
    if not isinstance(work.parts, (tuple, list)):
        return f"parts = {shown(work.parts)}, not a tuple of WorkParts"
    for i, part in enumerate(work.parts):
        if not isinstance(part, WorkPart):
            return f"parts[{i}] = {shown(part)}, not a WorkPart"
        if not isinstance(part.tag, str):
            return f"parts[{i}].tag = {shown(part.tag)}, not a str"
        for field, names in (("op", OP_CLASSES), ("pattern", PATTERNS)):
            value = getattr(part, field)
            if not is_integer(value) or not 0 <= value < len(names):
                return (f"parts[{i}].{field} = {shown(value)} ({part.tag!r}), not an index "
                        f"0..{len(names) - 1} of {', '.join(names)}")
        for field in _PART_NUMBERS:
            problem = _number_problem(getattr(part, field))
            if problem is not None:
                return f"parts[{i}].{field} = {problem} ({part.tag!r})"
    for field in _WORK_NUMBERS:
        problem = _number_problem(getattr(work, field))
        if problem is not None:
            return f"{field} = {problem}"
    if not is_bool(work.needs_weights):
        return f"needs_weights = {shown(work.needs_weights)}, not a bool"
    return None


def _number_problem(value: object) -> str | None:
    if not is_number(value) or not math.isfinite(value) or value < 0:
        return shown(value)
    return None


def _calls(impl: Any, stage: str, label: str
           ) -> Iterator[tuple[str, Callable[[Task, ModelConfig], object]]]:
    """(how an error names it, the call) of each face the simulator and the planners read."""
    yield "work()", _method(impl, "work", label)
    if stage != "load":
        return
    if not hasattr(impl, "cache_kind"):
        raise ValueError(f"{label} has no cache_kind attribute (None for a loader without a "
                         f"cache), which the simulator reads")
    load_work = _method(impl, "load_work", label)
    for hit in (None,) if impl.cache_kind is None else (False, True):
        yield f"load_work(hit={hit})", functools.partial(_load_work, load_work, hit=hit)


def _load_work(load_work: Callable[..., object], task: Task, model: ModelConfig,
               hit: bool | None) -> object:
    return load_work(task, model, hit)


def _method(impl: Any, name: str, label: str) -> Callable[..., object]:
    method = getattr(impl, name, None)
    if not callable(method):
        raise ValueError(f"{label} has no {name}() method, which the simulator calls")
    return method


def _task_text(task: Task) -> str:
    return (f"a task of batch {task.batch}, {task.prompt_tokens} prompt and "
            f"{task.output_tokens} output tokens")
