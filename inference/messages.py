"""How error messages echo what a user gave: a value of normal length as it is, a huge one
(a 5000-character ``--scenario``, a path thousands of characters deep) cut to its head and tail
with a count of what was left out, so the message stays readable and its end visible.

Every CLI (train.py, evaluate.py, ``python -m inference``) and loader shows user values through
`shown`; `argparse_type` does the same for the values argparse itself refuses, and
`ShortErrorParser` for the rest of argparse's own messages. An unknown name's error puts the
nearest valid one first (`did_you_mean`), before the list of them all. What they print goes
through `printable_stdout`, so no character ends a run on a console that cannot show it.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")

#: An error message shows a value of up to this many characters (quotes included) whole.
SHOWN_MAX = 160


def shown(value: object, *, quote: bool = True, limit: int = SHOWN_MAX) -> str:
    """`value` as an error message echoes it: its repr (a path's string quoted), or with
    ``quote=False`` its str, whole up to `limit` characters. A longer one keeps its first half
    and last quarter and says how many characters were elided in between: a 5000-character
    ``--scenario`` or path filled the terminal with the value and buried the message."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    text = repr(value) if quote else str(value)
    head, tail = limit // 2, limit // 4
    elided = len(text) - head - tail
    short = f"{text[:head]}...[{elided} characters elided]...{text[len(text) - tail:]}"
    return short if len(text) > limit and len(short) < len(text) else text


#: argparse's refusal of arguments it has no flag for (`unrecognized` words it as argparse does)
UNRECOGNIZED = "unrecognized arguments: "

#: How alike (difflib's ratio) a valid name must be to a mistyped one to be suggested: 0.75
#: takes a dropped, added or swapped character in names of 4+ characters (episode_task,
#: all-gpus, heft_calibrated), not an unrelated name that shares a few letters.
SUGGEST_CUTOFF = 0.75


def did_you_mean(given: Iterable[object], choices: Iterable[str], ignore_case: bool = False,
                 prefixes: bool = False) -> str:
    """' (did you mean 'x'?)': for each unknown name in `given` the valid name of `choices`
    nearest to it, when one is near (`SUGGEST_CUTOFF`); '' when none is. Several unknown
    names read " (did you mean 'a' for 'b', 'c' for 'd'?)". Errors list every valid name after
    it: among twenty options the one meant was hard to find. `ignore_case`: names read in any
    case are compared lower-cased, and the guess is spelt as `choices` spell it. `prefixes`: a
    name that begins exactly one choice is given it, however short (``--time``, an abbreviation
    of ``--timesteps`` too unlike it for difflib)."""
    names = list(given)

    def fold(text: str) -> str:
        return text.lower() if ignore_case else text

    spelt = {fold(c): c for c in choices if isinstance(c, str)}

    def nearest(name: str) -> list[str]:
        begun = [c for c in spelt if c.startswith(fold(name))] if prefixes else []
        return begun if len(begun) == 1 else difflib.get_close_matches(
            fold(name), list(spelt), n=1, cutoff=SUGGEST_CUTOFF)

    pairs = [(name, spelt[near[0]]) for name in names if isinstance(name, str)
             for near in [nearest(name)] if near]
    if not pairs:
        return ""
    if len(names) == 1:
        return f" (did you mean {pairs[0][1]!r}?)"
    return " (did you mean " + ", ".join(f"{near!r} for {name!r}" for name, near in pairs) + "?)"


def unrecognized(extras: Sequence[str]) -> str:
    """argparse's "unrecognized arguments" refusal, the arguments shortened together by `shown`
    (argparse echoed them whole; shortened one by one, fifty long strays still filled the
    screen)."""
    return f"{UNRECOGNIZED}{shown(' '.join(extras), quote=False)}"


def whole_number(text: str) -> int:
    """An integer option's value as typed: an integer, or one in float notation (``1e5``,
    ``60000.0``), as step and token counts are often written; 1e5 was an "invalid int value",
    though a scenario file takes ``episode_tasks: 200.0``. A fraction, inf or NaN is a
    ValueError (through `argparse_type`: "invalid int value: '1.5'")."""
    try:
        return int(text)
    except ValueError:
        value = float(text)
        if not value.is_integer():
            raise ValueError(f"not a whole number: {text}") from None
        return int(value)


whole_number.__name__ = "int"      # argparse_type's refusal names it: "invalid int value"


def argparse_type(convert: Callable[[str], T]) -> Callable[[str], T]:
    """`convert` (int, float) as an argparse ``type``: argparse's own refusal, "invalid int
    value: 'x'", echoed the value whole; this one says the same through `shown`."""
    name = getattr(convert, "__name__", "value")

    def parse(text: str) -> T:
        try:
            return convert(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"invalid {name} value: {shown(text)}") from None

    parse.__name__ = name
    return parse


class ShortErrorParser(argparse.ArgumentParser):
    """An ArgumentParser whose refusals shorten each long word through `shown`: argparse builds
    some messages from the raw argument ("ambiguous option: --cache-=<10000 characters> could
    match --cache-hit, --cache-miss"), past `argparse_type` and `unrecognized`.

    It takes no abbreviated flags: argparse's prefix matching ran ``--agent ppo`` as
    ``--agents ppo``, so a command line or script that worked meant another flag, or failed as
    ambiguous, once a flag with that prefix was added. A mistyped or shortened flag is refused
    with the flag it is nearest to.

    Each refusal is one line, without the usage argparse prints above it: "--timesteps nan", a
    stray word or a list option given no value printed 13 to 21 lines of every option before
    the one that says what is wrong. --help still prints the whole usage; the exit status stays
    argparse's 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        # unrecognized flags whose refusal already says what they are (another script's
        # option): "did you mean '--episode-tasks'?" after "--episodes is evaluate.py's
        # option" pointed at a flag that means something else
        self.explained: set[str] = set()

    def error(self, message: str) -> NoReturn:
        if message.startswith(UNRECOGNIZED):
            given = message.removeprefix(UNRECOGNIZED).split(" ")
            flags = [word.split("=")[0] for word in given
                     if word.startswith("--") and word.split("=")[0] not in self.explained]
            message += did_you_mean(flags, [flag for action in self._actions
                                            for flag in action.option_strings], prefixes=True)
        said = " ".join(shown(word, quote=False) for word in message.split(" "))
        self.exit(2, f"{self.prog}: error: {said}\n")


@contextlib.contextmanager
def printable_stdout() -> Iterator[None]:
    """Within it, a character that stdout's encoding cannot write is printed as an escape
    (``\\u2192`` for an arrow) instead of raising UnicodeEncodeError. A CLI prints user-given
    text (an ``--out`` or ``--log-dir`` path, a YAML file's path or names): on a stdout in
    cp1252 (Windows, the output redirected) or latin-1, an arrow in such a path ended train.py
    after its runs with a traceback and no table, and evaluate.py after summary.csv, its other
    results unwritten. A UTF-8 stdout writes every character as before; stderr escapes them
    already. The earlier error handler is restored after; a stream that cannot be
    reconfigured (a notebook's) is left as it is."""
    stream = sys.stdout
    errors = getattr(stream, "errors", None)
    reconfigure = getattr(stream, "reconfigure", None)
    if errors != "strict" or reconfigure is None:
        yield
        return
    reconfigure(errors="backslashreplace")
    try:
        yield
    finally:
        # reconfigure flushes first: a reader gone (train.py | head) or a closed stream has
        # nothing more to hear, and the CLI's own status stands
        with contextlib.suppress(OSError, ValueError):
            reconfigure(errors=errors)
