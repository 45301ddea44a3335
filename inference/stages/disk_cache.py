"""The loading cache on disk: one validated JSON entry of token ids per source file.

Used by the `cached` and `adaptive` loaders (`inference.stages.load`). An entry records the
source's sha256 and size and the version of the preprocessing that made its tokens (its
validation key) next to the tokens; a lookup hits only when the key still matches the source's
current bytes and the loader's preprocessing. Entries are written atomically (temp file +
os.replace), so a crash never leaves a half-written entry that could validate.

`DiskCache.adopt` takes over the entries a previous process left in the folder (the adaptive
loader counts them against its capacity); see there for what it keeps, removes and leaves alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import TypeAlias

StrPath: TypeAlias = "str | os.PathLike[str]"

#: An entry's file name: the first 32 hex digits of the sha256 of its resolved source path.
ENTRY_NAME = re.compile(r"[0-9a-f]{32}\.json")
#: An entry being written is a temp file named so until os.replace gives it its entry name.
TEMP_PREFIX, TEMP_SUFFIX = "partial-", ".tmp"


def validation_key(raw: bytes, version: int) -> dict[str, object]:
    """What a cache entry must match: the source's sha256 and size, and the version of the
    preprocessing (bytes -> tokens) that made the entry's tokens."""
    return {"sha256": hashlib.sha256(raw).hexdigest(), "size": len(raw), "version": version}


# A temp file this old is an interrupted write's leftover, not a write in progress.
STALE_TEMP_S = 3600.0


class DiskCache:
    """One JSON entry per source file under `cache_dir`, named by a hash of the source path.

    Counters: `hits`, `misses` (no readable entry), `stale` (an entry whose key no longer
    matches the source, or that another version of the preprocessing wrote).

    Args:
        cache_dir: directory of the entries (created if missing).
        version: the preprocessing's version (`load.PREPROCESS_VERSION`), part of every key.
    """

    def __init__(self, cache_dir: StrPath, version: int) -> None:
        self.dir = Path(cache_dir)
        self.version = version
        self.dir.mkdir(parents=True, exist_ok=True)
        self.hits = self.misses = self.stale = 0

    def entry_path(self, source: Path) -> Path:
        return self._entry_file(source.resolve())

    def _entry_file(self, resolved: StrPath) -> Path:
        # os.fsencode, not str.encode: a file name that is not UTF-8 (on POSIX, its bytes come
        # back as surrogate escapes) is a readable source all the same
        digest = hashlib.sha256(os.fsencode(resolved)).hexdigest()[:32]
        return self.dir / f"{digest}.json"

    def write(self, source: Path, tokens: tuple[int, ...], raw: bytes) -> None:
        key = validation_key(raw, self.version)
        entry = {"source": str(source.resolve()), "key": key, "tokens": tokens}
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(entry, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.entry_path(source))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def lookup(self, source: Path, raw: bytes) -> tuple[int, ...] | None:
        """The entry's tokens when it validates against `raw` (the source's bytes), else None.

        An unreadable entry counts as a miss; one whose key differs from the source as stale.
        """
        entry = _read_entry(self.entry_path(source))
        if entry is None:
            self.misses += 1
            return None
        _, key, tokens = entry
        if key == validation_key(raw, self.version):  # the article's cache_valid
            self.hits += 1
            return tokens
        self.stale += 1
        return None

    def adopt(self) -> list[tuple[Path, Path]]:
        """(source, entry file) of the entries already in the folder that this cache can use,
        newest entry first, so that a cache opened on a previous process's folder reuses them
        and counts them against its capacity.

        One folder serves one adaptive loader at a time. Of what lies there:
          * an entry (a file named as `entry_path` names one, holding the entry of the source
            its name hashes) of this preprocessing version is adopted;
          * an entry another preprocessing version wrote (or one from before versions were
            keyed) is removed: it is stale, no lookup could ever hit on it;
          * a temp file an interrupted `write` left (partial-*.tmp) is removed once it is
            older than STALE_TEMP_S: a younger one may be another live loader's write in
            progress, whose rename would fail if it went;
          * anything else (other files, folders, a file named like an entry that does not hold
            its source's entry) is not this cache's: it is left alone and not counted.
        """
        found: list[tuple[int, str, Path]] = []
        for item in self.dir.iterdir():
            name = item.name
            if name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX) and item.is_file():
                with contextlib.suppress(OSError):    # gone meanwhile: its write finished
                    if time.time() - item.stat().st_mtime > STALE_TEMP_S:
                        item.unlink()
                continue
            entry = _read_entry(item) if ENTRY_NAME.fullmatch(name) else None
            if entry is None or self._entry_file(entry[0]) != item:
                continue
            if entry[1].get("version") != self.version:
                item.unlink(missing_ok=True)
                continue
            try:
                found.append((item.stat().st_mtime_ns, entry[0], item))
            except OSError:   # removed meanwhile
                continue
        return [(Path(source), item) for _, source, item in sorted(found, key=lambda f: (-f[0], f[1]))]


def _read_entry(path: Path) -> tuple[str, dict[str, object], tuple[int, ...]] | None:
    """(source, key, tokens) of the entry in `path`, or None when it holds no readable entry."""
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        source, key, tokens = entry["source"], entry["key"], tuple(entry["tokens"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(source, str) or not isinstance(key, dict):
        return None
    return source, key, tokens
