"""A task: one batch of requests flowing through load -> prefill -> decode."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from inference.checks import is_integer, is_number
from inference.messages import shown

STAGES: tuple[str, str, str] = ("load", "prefill", "decode")
#: The largest size (sequences in a batch, tokens of a sequence) that a scenario, a trace and
#: `python -m inference` take, far beyond any real workload: a batch of 1e300 priced at
#: "latency inf s", "queue nan ns". (A Task built in Python is not held to it.)
MAX_SIZE = 1e9
#: The latest arrival a `Task` takes, in seconds (about 32 years). Times are float64 seconds,
#: and a latency is a difference of two of them: near 1e9 s they are resolved to about 1e-7 s,
#: near 1e308 not at all (any task priced as "latency 0 s"). Streams the envs generate are not
#: held to it; their rates and time scales are bounded instead (envs.scenario.MIN_RATE).
MAX_ARRIVAL = 1e9


@dataclass(frozen=True, slots=True)
class Task:
    """One batch of requests.

    Attributes:
        batch: number of sequences in the batch (>= 1).
        prompt_tokens: prompt length per sequence, in tokens (>= 1).
        output_tokens: generated tokens per sequence (>= 1).
        domain: data-domain key; what the loading cache is keyed on (>= 0).
        arrival: arrival time in seconds (>= 0, <= MAX_ARRIVAL).
    """

    batch: int
    prompt_tokens: int
    output_tokens: int
    domain: int = 0
    arrival: float = 0.0

    def __post_init__(self) -> None:
        for name in ("batch", "prompt_tokens", "output_tokens"):
            value = getattr(self, name)
            if not is_integer(value) or value < 1:
                raise ValueError(f"Task.{name} must be a positive integer, got {shown(value)}")
            object.__setattr__(self, name, int(value))    # as the frozen __init__ sets a field
        if not is_integer(self.domain) or self.domain < 0:
            raise ValueError(f"Task.domain must be a non-negative integer, got {shown(self.domain)}")
        object.__setattr__(self, "domain", int(self.domain))
        if not (is_number(self.arrival) and 0 <= self.arrival <= MAX_ARRIVAL):   # nan fails too
            raise ValueError(f"Task.arrival must be a time in seconds from 0 to {MAX_ARRIVAL:g}, "
                             f"got {shown(self.arrival)}")
        object.__setattr__(self, "arrival", float(self.arrival))

    @classmethod
    def many_trusted(cls, batch: Iterable[int], prompt_tokens: Iterable[int],
                     output_tokens: Iterable[int], domain: Iterable[int],
                     arrival: Iterable[float]) -> tuple[Task, ...]:
        """Tasks from columns of field values (plain Python ints and floats) that the caller has
        already checked as a whole, e.g. as arrays: no per-task `__post_init__` validation.

        An episode builds tens of thousands of tasks at every reset, and the per-task checks
        cost about twice the construction itself. Public construction (`Task(...)`) still
        validates; this is for internally generated streams only.
        """
        new, set_field = object.__new__, object.__setattr__   # what the frozen __init__ does
        tasks = []
        for b, p, o, d, a in zip(batch, prompt_tokens, output_tokens, domain, arrival, strict=True):
            task = new(cls)
            set_field(task, "batch", b)
            set_field(task, "prompt_tokens", p)
            set_field(task, "output_tokens", o)
            set_field(task, "domain", d)
            set_field(task, "arrival", a)
            tasks.append(task)
        return tuple(tasks)
