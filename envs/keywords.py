"""The keywords the registered envs take, checked by name before their ``__init__`` runs.

``gymnasium.make("InferenceAlloc-v0", scenarioo="article")`` raised Python's own TypeError,
"InferenceAllocEnv.__init__() got an unexpected keyword argument 'scenarioo'": for the Split
env and a mix's scenarios too it named InferenceAllocEnv, and it said neither the keyword
meant nor those the env takes. ``checked_keywords`` makes it one TypeError (so that code
catching TypeError still catches it) that says all three. A keyword the env needs, left out
(``gymnasium.make("InferenceAllocMix-v0")``), was Python's "missing 1 required positional
argument: 'scenarios'": it is one TypeError too, saying what the keyword takes.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from inference.messages import did_you_mean, shown

Init = TypeVar("Init", bound=Callable[..., None])
_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def keywords_of(init: Callable[..., Any]) -> tuple[str, ...]:
    """The keywords an ``__init__`` takes by name, in its order (self, and what ``**kwargs``
    hands on, aside)."""
    return tuple(p.name for p in inspect.signature(init).parameters.values()
                 if p.kind in _NAMED and p.name != "self")


def required_keywords(init: Callable[..., Any]) -> tuple[str, ...]:
    """The keywords of an ``__init__`` (as ``keywords_of``) that have no default."""
    parameters = inspect.signature(init).parameters
    return tuple(name for name in keywords_of(init)
                 if parameters[name].default is inspect.Parameter.empty)


def checked_keywords(*handed_on: str,
                     needs: Mapping[str, str] | None = None) -> Callable[[Init], Init]:
    """An env's ``__init__`` that refuses a keyword it does not take before it runs: one
    TypeError naming the env, the keyword, the nearest it takes and every one it takes; and
    one naming a keyword without a default that was not given, with what it takes (`needs`:
    keyword -> what it takes, with an example).
    `handed_on`: the keywords its ``**kwargs`` hand on (a mix's, to its scenarios' envs)."""
    def decorate(init: Init) -> Init:
        positional = keywords_of(init)
        valid = (*positional, *handed_on)
        required = required_keywords(init)

        @functools.wraps(init)
        def checked(self: Any, *args: Any, **kwargs: Any) -> None:
            unknown = [name for name in kwargs if name not in valid]
            if unknown:
                raise TypeError(f"{type(self).__name__} takes no keyword"
                                f"{'s' if len(unknown) > 1 else ''} "
                                f"{', '.join(shown(name) for name in unknown)}"
                                f"{did_you_mean(unknown, valid)}; its keywords: "
                                f"{', '.join(valid)}")
            missing = [name for name in required if name not in kwargs
                       and positional.index(name) >= len(args)]
            if missing:
                name = missing[0]
                what = (needs or {}).get(name)
                raise TypeError(f"{type(self).__name__} needs the keyword {shown(name)}"
                                + (f": {what}" if what else ""))
            init(self, *args, **kwargs)

        return checked  # type: ignore[return-value]

    return decorate

