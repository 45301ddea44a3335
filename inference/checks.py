"""What counts as an integer, a number and a bool in the project's public inputs.

One definition for every constructor and loader: before it, some accepted numpy's integers and
others refused them (``Task(np.int64(4), ...)`` was "must be a positive integer, got
np.int64(4)" while ``episode_tasks=np.int64(4)`` was fine), and each wrote its own bool test.
Bools are refused everywhere a count or a quantity is meant: ``True`` would run as 1 and a
YAML ``yes`` as a prefetch depth. Callers store ``int(value)`` / ``float(value)``, so numpy
scalars do not travel on into JSON files or the simulator.
"""

from __future__ import annotations

import numbers
from typing import Any, TypeGuard

import numpy as np

_BOOLS = (bool, np.bool_)
_PLAIN_NUMBERS = (int, float)


def is_bool(value: Any) -> TypeGuard[bool]:
    """A bool, Python's or numpy's: a flag's value. Not 1 or 1.0, which ``value in (True,
    False)`` took (they equal True), nor a text, which ``bool()`` reads as True."""
    return isinstance(value, _BOOLS)


def is_integer(value: Any) -> TypeGuard[int]:
    """An integer, Python's or numpy's, and not a bool. (Typed as a guard for `int`, which
    numpy's integers stand in for wherever these checks are used.)"""
    # the plain-int test first: it is the common case and an ABC check costs ten times more
    return type(value) is int or (isinstance(value, numbers.Integral)
                                   and not isinstance(value, _BOOLS))


def is_number(value: Any) -> TypeGuard[float]:
    """A real number (an integer or a float, Python's or numpy's), and not a bool. NaN and inf
    are numbers: a caller that needs a finite one checks ``math.isfinite`` as well."""
    return type(value) in _PLAIN_NUMBERS or (isinstance(value, numbers.Real)
                                             and not isinstance(value, _BOOLS))
