"""Writing files so that nothing is ever half-written: a temp file beside the target, then rename.

Every output of ``train.py`` and ``evaluate.py`` (configs, tables, plots, models) goes
through ``atomic_path``: the content is written to ``.<name>.<pid>.tmp`` in the target's
folder, flushed to the disk, and renamed over the target only once complete; on any error
the temp file is removed and the target is left as it was.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from agents.interrupts import stops_held
from inference.yamlio import cannot_read, int_digit_limit, not_a_file

TMP_SUFFIX = ".tmp"
# what a file system says when it refuses a write: a full disk, a quota, a read-only mount
REFUSED_WRITES = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


class WriteFailed(OSError):
    """An output the file system refused (a full disk, a quota, a folder gone read-only): the
    message names the file, which is left as it was. The CLIs say it in one line: it is no bug
    of theirs, and the traceback through SB3, zipfile and torch named no file."""


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path to write; on success it replaces `target`, on failure it is removed
    (an OSError as WriteFailed, naming `target`)."""
    with atomic_paths([Path(target)]) as (tmp,):
        yield tmp


@contextlib.contextmanager
def atomic_paths(targets: Sequence[Path]) -> Iterator[list[Path]]:
    """`atomic_path` for files that belong together: a temp path each, to write; once every
    one is written they replace their targets in order, Ctrl-C and SIGTERM held until all
    have (``agents.interrupts.stops_held``); on a failure before, each is removed and no
    target changes. A resume stopped between a model's files saved the new replay buffer
    beside the old model, and a later resume trained on the pair."""
    temps = [temp_file(Path(target)) for target in targets]
    try:
        for target in targets:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        yield temps
        for tmp in temps:
            _flush_to_disk(tmp)
        with stops_held():
            for tmp, target in zip(temps, targets, strict=True):
                os.replace(tmp, target)
        for folder in dict.fromkeys(Path(target).parent for target in targets):
            # the files are in place: a folder that will not sync leaves them less durable, not
            # unwritten (WriteFailed says a target is as it was)
            with contextlib.suppress(OSError):
                _flush_to_disk(folder)
    except WriteFailed:
        raise
    except OSError as exc:
        # the target whose temp file was refused, where the error names it (torch's does not)
        target = dict(zip(map(str, temps), targets, strict=True)).get(str(exc.filename), targets[-1])
        raise WriteFailed(f"cannot write {target}: {exc.strerror or exc}") from exc
    finally:
        # suppressed: a read-only folder refuses even to remove a temp file it never let be
        # made, and that error (on the temp file's name) replaced the one naming the target
        for tmp in temps:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)


def _flush_to_disk(path: Path) -> None:
    """fsync `path`: a file's content before it is renamed over its target, a folder's entries
    after. Without it a power loss or OS crash soon after a save could bring the renamed file
    back empty (a file system may commit the rename before the content's blocks), and a resume
    then found an unreadable ``model.zip``, the old one gone. About 1 ms a file. A file is
    opened for writing (Windows' fsync, FlushFileBuffers, refuses a read-only handle); a
    folder is skipped where it cannot be opened (Windows)."""
    folder = path.is_dir()
    if folder and not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY if folder
                 else os.O_RDWR | getattr(os, "O_BINARY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_file(target: Path) -> Path:
    """Where `atomic_path` writes `target` before it renames it: ``.<name>.<pid>.tmp`` beside it."""
    return target.with_name(f".{target.name}.{os.getpid()}{TMP_SUFFIX}")


def check_room(folder: Path, names: Iterable[str | os.PathLike[str]], option: str) -> None:
    """A WriteFailed, "give a shorter `option`", where a path of `names` (those a job writes
    under `folder`, relative to it) is over the system's limit (PATH_MAX, which counts the
    path handed to the OS: a relative folder's, as given). A folder with room for its lock
    and no more ran the job up to its first longer file: train.py's TensorBoard events file
    died in a thread with a traceback, a checkpoint after the training before it, and
    evaluate.py's summary.csv after the whole evaluation, none saying which flag to shorten."""
    limit = _path_max(folder)
    longest = max((len(os.fsencode(folder / name)) for name in names), default=0)
    if limit is not None and longest >= limit:      # the limit counts the terminating NUL
        raise WriteFailed(f"cannot write in {folder}: the paths of the files written there "
                          f"reach {longest} characters, past the system's limit of "
                          f"{limit - 1}; give a shorter {option}")


def _path_max(folder: Path) -> int | None:
    """PATH_MAX where `folder` is (asked of its nearest folder that exists: is_dir raises on a
    path over the limit itself), None where the system does not say (Windows has no pathconf)."""
    if not hasattr(os, "pathconf"):
        return None
    for there in (folder, *folder.parents):
        try:
            if there.is_dir():
                limit = os.pathconf(there, "PC_PATH_MAX")
                return limit if limit > 0 else None
        except (OSError, ValueError):
            continue
    return None


@contextlib.contextmanager
def quiet_refused_writes_in_threads() -> Iterator[None]:
    """Within it, a thread that dies of a write the file system refused prints no traceback:
    TensorBoard's events writer (a thread of its own) did, on a full disk, above the CLI's own
    line, though the main thread meets the same error at its next write and says it there.
    Any other error of a thread prints as before."""
    previous = threading.excepthook

    def hook(args: Any) -> None:
        if not (isinstance(args.exc_value, OSError) and args.exc_value.errno in REFUSED_WRITES):
            previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


def unreadable_folder(folder: Path) -> str | None:
    """Why the entries of `folder` cannot be listed or looked at, to follow its name: "cannot be
    read: Permission denied" for a folder without read permission (``chmod 311``: pathlib's
    iterdir raised) or without search permission (``chmod 644``: every is_file under it
    raised, naming a file in it rather than the folder). None where both work."""
    try:
        with os.scandir(folder):
            pass
        os.stat(os.path.join(folder, "."))   # a look-up in it: its search permission
    except OSError as exc:
        return cannot_read(exc)
    return None


def model_file(path: str | os.PathLike[str]) -> Path:
    """The model zip to read for `path`: `path`, or `path` + ".zip" where `path` is absent (as
    SB3's load finds "x" saved as "x.zip"). A FileNotFoundError naming `path` where neither
    exists; a ValueError where it is a folder or not a regular file (/dev/null)."""
    p = Path(path)
    try:
        if not p.exists() and p.suffix != ".zip" and p.with_name(p.name + ".zip").is_file():
            p = p.with_name(p.name + ".zip")
        if p.exists() and not p.is_file():
            raise ValueError(f"model file {p} {not_a_file(p, 'a model zip')}")
        found = p.is_file()
    except OSError as exc:  # its folder without search permission: a PermissionError traceback
        raise ValueError(f"model file {p} {cannot_read(exc)}") from None
    if not found:
        raise FileNotFoundError(f"model file {p} does not exist")
    return p


class BadModelZip(ValueError):
    """Why a model zip's JSON entry could not be read, the reason alone: its reader names the
    file and what it should have been."""


def read_zip_json(path: Path, entry: str, label: str) -> Any:
    """Entry `entry` of the model zip at `path`, parsed as JSON. A KeyError where the zip has
    no such entry; a BadModelZip where the file is no zip, or the entry no JSON or JSON nested
    deeper than json's decoder recurses ("its `label` is nested too deeply": ``[[[...``
    100,000 deep was a RecursionError traceback out of evaluate.py) or with an integer too long
    for int(); a ValueError naming the file where it cannot be read (no permission: a
    PermissionError traceback)."""
    try:
        with zipfile.ZipFile(path) as zf:
            return json.loads(zf.read(entry))
    except (zipfile.BadZipFile, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadModelZip(str(exc)) from None
    except ValueError:      # json's one other refusal: an integer past int()'s digit limit
        raise BadModelZip(f"its {label} holds a number of more than {int_digit_limit()} "
                          f"digits") from None
    except RecursionError:
        raise BadModelZip(f"its {label} is nested too deeply") from None
    except OSError as exc:
        raise ValueError(f"model file {path} {cannot_read(exc)}") from None


def zip_target(path: str | os.PathLike[str]) -> Path:
    """Where a model saved as `path` goes: `path` if it ends in .zip, else `path` + ".zip", as
    SB3 names it ("ppo.v1" -> "ppo.v1.zip"; replacing the suffix made "ppo.v1" and "ppo.v2"
    the same file). A folder there, or a file where a parent folder should be, is a ValueError."""
    target = Path(path)
    if target.suffix != ".zip":
        target = target.with_name(target.name + ".zip")
    if target.is_dir():
        raise ValueError(f"cannot save a model as {target}: it is a folder")
    for parent in target.parents:
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"cannot save a model as {target}: {parent} is a file, not a folder")
    return target


def write_text(target: str | os.PathLike[str], text: str) -> Path:
    """Write `text` to `target` atomically, in UTF-8, its line ends as given: text mode on
    Windows made each "\\n" a "\\r\\n", so the same results differed from Linux's in every
    line, and a CSV cell holding a line break read back with a "\\r" added."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8", newline="")
    return Path(target)


def save_figure(fig: Any, target: str | os.PathLike[str], dpi: int = 120) -> Path:
    """Save a matplotlib figure as PNG atomically (the format is given, not read from the name)."""
    with atomic_path(target) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight")
    return Path(target)


def leftover_temp_files(folder: str | os.PathLike[str]) -> list[Path]:
    """Temp files under `folder` (what a crash in the middle of a write would leave)."""
    root = Path(folder)
    return sorted(p for p in root.rglob(f"*{TMP_SUFFIX}*") if p.is_file()) if root.exists() else []
