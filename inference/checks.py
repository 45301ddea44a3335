"""What counts as an integer, a number, a bool and a name in the project's public inputs.

One definition for every constructor and loader: before it, some accepted numpy's integers and
others refused them (``Task(np.int64(4), ...)`` was "must be a positive integer, got
np.int64(4)" while ``episode_tasks=np.int64(4)`` was fine), and each wrote its own bool test.
Bools are refused everywhere a count or a quantity is meant: ``True`` would run as 1 and a
YAML ``yes`` as a prefetch depth. Callers store ``int(value)`` / ``float(value)``, so numpy
scalars do not travel on into JSON files or the simulator.

`check_as_loaded` holds a config object built or edited in Python (a Scenario, a Hardware) to
what its loader builds from the mapping it writes, so that one set of rules, the loader's,
checks files, mappings and objects alike.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields, is_dataclass
from typing import Any, TypeGuard

import numpy as np

from inference.messages import shown

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


def is_whole(value: Any) -> bool:
    """An integer, or a float of one (1e5, 200.0; numpy's too), and not a bool: what a count
    given in YAML or on a command line may be written as (YAML reads 1e5 as a float). Not
    inf or NaN. A caller that takes it stores ``int(value)``."""
    return is_integer(value) or (is_number(value) and float(value).is_integer())


def is_number(value: Any) -> TypeGuard[float]:
    """A real number (an integer or a float, Python's or numpy's), and not a bool. NaN and inf
    are numbers: a caller that needs a finite one checks ``math.isfinite`` as well."""
    return type(value) in _PLAIN_NUMBERS or (isinstance(value, numbers.Real)
                                             and not isinstance(value, _BOOLS))


def check_utf8(value: str, where: str) -> None:
    """Refuse a name that has no UTF-8 form: one holding a lone surrogate such as "\\ud800"
    (which a YAML escape gives). A device or scenario so named loaded, and the run failed as
    it wrote the name to a file or a log, with a UnicodeEncodeError naming neither."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{where} must be UTF-8 text, got {shown(value)}: "
                         f"{value[exc.start]!r} is a lone surrogate, which has no UTF-8 "
                         f"form") from None


def compared_fields(obj: Any) -> Iterable[str]:
    """The fields of dataclass `obj` that its equality compares (a derived index aside)."""
    return [f.name for f in fields(obj) if f.compare]


def check_as_loaded(given: Any, loaded: Any, prefix: str = "",
                    read: Callable[[Any], Iterable[str]] = compared_fields) -> None:
    """Refuse `given`, a config object built or edited in Python, unless it holds what its
    loader built from the mapping `given` writes, `loaded`, in the types the loader gives:
    one ValueError "<prefix><field path> must be <what>, got <value>" at the first part
    that differs.

    The loader checks every value of the mapping, so a wrong value (out of range, NaN, an
    unknown name) is its error already; but it reads a number where a dataclass belongs as a
    default one (a Scenario's ``batch: 1`` as a constant Distribution) and an integral float
    as an int, so an object whose mapping it takes may still hold what the code reading it
    cannot run (the ``dist`` of an int, ``np.full(200.0)``). Here a dataclass must be an
    instance of the loaded one's class, a tuple a tuple and a dict a mapping, of the same
    items; an int an integer and a float any real number (numpy's too, as the loader takes
    them), and the rest equal. `read(obj)`: the fields of a dataclass its mapping writes (a
    field it does not write, such as a Distribution's parameters of another dist, is never
    read back, and not compared). A tuple's item is named by its ``name`` where it has one
    (``devices[gpu]``), else by its index."""
    found = _first_difference(given, loaded, read)
    if found is not None:
        path, value, what = found
        where = "".join(reversed(path)).removeprefix(".")
        raise ValueError(f"{prefix}{where} must be {what}, got {shown(value)}")


def equal(a: Any, b: Any) -> bool:
    """``a is b or a == b``, False where comparing fails (an array's elementwise answer, as in
    a field no mapping writes, which the comparison of every field still reaches)."""
    try:
        return a is b or bool(a == b)
    except (TypeError, ValueError):
        return False


def _first_difference(given: Any, loaded: Any, read: Callable[[Any], Iterable[str]]
                      ) -> tuple[list[str], Any, str] | None:
    """(the field path's parts, last first; the value given there; what it must be) at
    `check_as_loaded`'s first difference, or None. The path is built for a difference only."""
    kind = type(loaded)
    if kind is int:
        return None if is_integer(given) else ([], given, "an integer")
    if kind is float:
        return None if is_number(given) else ([], given, "a number")
    if kind is str:
        if given is loaded or (type(given) is str and given == loaded):
            return None
        return [], given, "a string" if not isinstance(given, str) else shown(loaded)
    parts: Iterable[tuple[Any, Any, str]]   # (given, loaded, its path part) of each part
    if kind is tuple:
        if type(given) is not tuple or len(given) != len(loaded):
            return [], given, "a tuple"
        parts = ((given[i], item, f"[{_label(item, i)}]") for i, item in enumerate(loaded))
    elif kind is dict:
        if not isinstance(given, Mapping) or given.keys() != loaded.keys():
            return [], given, f"a mapping with the keys {', '.join(map(str, loaded)) or '(none)'}"
        parts = ((given[key], item, f".{key}" if isinstance(key, str) else f"[{key!r}]")
                 for key, item in loaded.items())
    elif is_dataclass(loaded):
        if not isinstance(given, kind):
            return [], given, f"a {kind.__name__}"
        parts = ((getattr(given, name), getattr(loaded, name), f".{name}") for name in read(loaded))
    else:
        return None if equal(given, loaded) else ([], given, shown(loaded))
    for part_given, part_loaded, part in parts:
        found = _first_difference(part_given, part_loaded, read)
        if found is not None:
            found[0].append(part)
            return found
    return None


def _label(item: Any, i: int) -> str:
    name = getattr(item, "name", None)
    return name if isinstance(name, str) else str(i)
