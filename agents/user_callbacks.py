"""Stable-Baselines3 callbacks of your own, named ``<module>:<attribute>`` in ``train.py
--callbacks``: early stopping, scalars of your own, a log of ``info["breakdown"]``, without
editing the training loop (SB3's way to extend it).

``--callbacks mine:LogQueues`` imports ``mine`` as a policy of yours is imported
(``agents.imported.import_target``: from the working directory, then ``sys.path``, once per
process) and takes its ``LogQueues``, one of:

* a class or function that builds a ``BaseCallback``, called with no argument: once per run,
  so each run has a fresh one;
* a ready ``BaseCallback`` object, copied (``copy.deepcopy``) for each run: the runs of a plan,
  and ``train()`` called again in one process (a notebook, a sweep), each start from the object
  as the module made it, which is left untouched. To read a callback's state once training is
  over, build it in a function of yours that keeps a reference.

``check_callbacks`` imports and builds each twice before any run starts (a build with side
effects, a file opened, has them twice more; the built callbacks are dropped), and refuses as
one ValueError naming it: a missing module or attribute, a build that raises (naming the file
and line it raised at), one that takes arguments, an object that cannot be copied, a function
that returns an object it returned before (a module-level instance: the runs would share its
state), and anything not a ``BaseCallback``. A module that raises something else as it is imported (a NameError, a
missing dependency) is its own bug: its traceback shows, as a policy's does.

In a run they come last (``UserCallbacks``, after the warm-up's and ours), so our scalars and
checkpoints are written as without them, and they share the run's model and logger:
``self.logger.record`` lands in the run's TensorBoard events at SB3's next write. One whose
``_on_step`` returns a false value (False, or None from an ``_on_step`` without ``return
True``, as SB3 reads it) ends training at that step, after every callback of the step has run;
``UserCallbacks.stopped_by`` says which.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback, CallbackList

from agents.imported import PATTERN, import_target, is_module_attribute, raised_at
from inference.messages import shown

FLAG = "--callbacks"
WANTED = ("a Stable-Baselines3 BaseCallback (stable_baselines3.common.callbacks), or a class "
          "or function that builds one with no argument")
# The callbacks a class or function of yours has built in this process and that are still
# alive, by id: one built again would be shared by two runs (or by a run and the check).
_BUILT: weakref.WeakValueDictionary[int, BaseCallback] = weakref.WeakValueDictionary()


def callback_maker(name: str) -> Callable[[], BaseCallback]:
    """What builds a fresh callback `name` for one run; the import happens now, so that a
    missing module or attribute is refused before anything is built."""
    if not is_module_attribute(name):
        raise ValueError(f"{FLAG} {shown(name)}: a callback is named {PATTERN} (mine:LogQueues: "
                         f"LogQueues of mine.py in the working directory)")
    target = import_target(name.strip(), FLAG)
    if isinstance(target, BaseCallback):
        try:
            copy.deepcopy(target)
        except Exception as exc:    # whatever the object's attributes raise as they are copied
            raise ValueError(f"{FLAG} {shown(name)} is an object that cannot be copied for each "
                             f"run ({type(exc).__name__}: {exc}); name a class or function "
                             f"that builds it") from None
        return lambda: copy.deepcopy(target)
    if inspect.isclass(target) and not issubclass(target, BaseCallback):
        raise ValueError(f"{FLAG} {shown(name)} is a class that is not a Stable-Baselines3 "
                         f"BaseCallback: subclass stable_baselines3.common.callbacks.BaseCallback")
    if inspect.isclass(target) and inspect.isabstract(target):  # it would fail as it is built
        missing = ", ".join(sorted(getattr(target, "__abstractmethods__", ())))
        raise ValueError(f"{FLAG} {shown(name)}: {target.__name__} does not define {missing}, "
                         f"which a BaseCallback's subclass defines: it returns True to go on, "
                         f"False to stop training")
    if not callable(target):
        raise ValueError(f"{FLAG} {shown(name)} is of type {type(target).__name__}: it must be "
                         f"{WANTED}")
    _check_takes_no_argument(name, target)

    def build() -> BaseCallback:
        try:
            built = target()
        except Exception as exc:    # your code's, whatever it raises: named with where
            raise ValueError(f"{FLAG} {shown(name)}: building it raised {type(exc).__name__}: "
                             f"{exc}{raised_at(exc)}") from exc
        if not isinstance(built, BaseCallback):
            raise ValueError(f"{FLAG} {shown(name)} built an object of type "
                             f"{type(built).__name__}, not a Stable-Baselines3 BaseCallback")
        _check_new(name, built)
        return built

    return build


def _check_new(name: str, built: BaseCallback) -> None:
    """Refuse a callback built before and still alive: a function that returns one object at
    every call (a module-level instance) gave it to each run, whose seeds and agents then
    shared its state (its counts, its best so far) and stepped one another's."""
    if _BUILT.get(id(built)) is built:
        kind = type(built).__name__
        raise ValueError(f"{FLAG} {shown(name)} returned the same {kind} object as a call "
                         f"before it, and the runs (seeds, agents) would share its state: "
                         f"return a new one from each call, or name the object itself, which "
                         f"is copied for each run")
    with contextlib.suppress(TypeError):    # no weak reference to it (__slots__): not kept
        _BUILT[id(built)] = built


def _check_takes_no_argument(name: str, factory: Callable[..., Any]) -> None:
    """Refuse a class or function that cannot be called with no argument: nothing gives it one."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):     # a builtin without one: its call will say
        return
    try:
        signature.bind()
    except TypeError:
        raise ValueError(f"{FLAG} {shown(name)}: {getattr(factory, '__name__', factory)}"
                         f"{signature} takes arguments; a callback is built with none: give "
                         f"them defaults, or name a function that builds it") from None


def check_callbacks(names: Sequence[str]) -> None:
    """Import and build each callback of `names` twice, as two runs will: a ValueError naming
    the first that cannot be, or that builds an object it built before, before any run
    starts."""
    for name in names:
        make = callback_maker(name)
        make()
        make()      # a second run's: refused where it is the first's (``_check_new``)


class UserCallbacks(CallbackList):
    """The callbacks `names` name, each freshly built, called in order as SB3's CallbackList
    calls them; `stop`: the first whose ``_on_step`` stopped training, and what it returned."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__([callback_maker(name)() for name in names])
        self.names = [name.strip() for name in names]
        self.stop: tuple[str, Any] | None = None

    def _on_step(self) -> bool:
        going = True
        for name, callback in zip(self.names, self.callbacks, strict=True):
            answer = callback.on_step()
            if not answer:      # every callback of the step still runs, as in CallbackList
                going = False
                if self.stop is None:
                    self.stop = (name, answer)
        return going

    def stopped(self, step: int, total: int, resume: str) -> str | None:
        """What the run's line says of a stop at `step` of `total` steps (None: no callback
        stopped it); `resume`, the command that continues the run.

        A stop at or past `total` (the last step, or past it within a rollout of several
        envs) still cut the run short: SB3 skips the update on the steps since the last one,
        so model.zip is the model before it, and a resume needs a larger --timesteps. A bool
        (numpy's too, as a comparison of arrays returns) is an answer; anything else, None
        above all, reads as an ``_on_step`` that forgot ``return True``."""
        if self.stop is None:
            return None
        name, answer = self.stop
        hint = ("" if isinstance(answer, (bool, np.bool_)) else
                f"its _on_step returned {shown(answer)}: return True to go on; ")
        # a resume keeps the run's callbacks, and one that stopped at a threshold stops again
        # at its next check: say how to go on without them
        without = "; add --callbacks alone to continue without its callbacks"
        if step < total:
            return (f"stopped by callback {shown(name)} at step {step} of {total} ({hint}"
                    f"continue it with: {resume}{without})")
        return (f"stopped by callback {shown(name)} at step {step} of {total}, before the "
                f"update on its last steps ({hint}continue it with: {resume} --timesteps N, N "
                f"above {step}{without})")
