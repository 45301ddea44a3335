"""The keywords the registered envs take, checked by name before their ``__init__`` runs.

``gymnasium.make("InferenceAlloc-v0", scenarioo="article")`` raised Python's own TypeError,
"InferenceAllocEnv.__init__() got an unexpected keyword argument 'scenarioo'": for the Split
env and a mix's scenarios too it named InferenceAllocEnv, and it said neither the keyword
meant nor those the env takes. ``checked_keywords`` makes it one TypeError (so that code
catching TypeError still catches it) that says all three.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from inference.messages import did_you_mean, shown

Init = TypeVar("Init", bound=Callable[..., None])
_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def keywords_of(init: Callable[..., Any]) -> tuple[str, ...]:
    """The keywords an ``__init__`` takes by name, in its order (self, and what ``**kwargs``
    hands on, aside)."""
    return tuple(p.name for p in inspect.signature(init).parameters.values()
                 if p.kind in _NAMED and p.name != "self")


def checked_keywords(*handed_on: str) -> Callable[[Init], Init]:
    """An env's ``__init__`` that refuses a keyword it does not take before it runs: one
    TypeError naming the env, the keyword, the nearest it takes and every one it takes.
    `handed_on`: the keywords its ``**kwargs`` hand on (a mix's, to its scenarios' envs)."""
    def decorate(init: Init) -> Init:
        valid = (*keywords_of(init), *handed_on)

        @functools.wraps(init)
        def checked(self: Any, *args: Any, **kwargs: Any) -> None:
            unknown = [name for name in kwargs if name not in valid]
            if unknown:
                raise TypeError(f"{type(self).__name__} takes no keyword"
                                f"{'s' if len(unknown) > 1 else ''} "
                                f"{', '.join(shown(name) for name in unknown)}"
                                f"{did_you_mean(unknown, valid)}; its keywords: "
                                f"{', '.join(valid)}")
            init(self, *args, **kwargs)

        return checked  # type: ignore[return-value]

    return decorate

