"""The loading cache on disk: one validated JSON entry of token ids per source file.

Used by the `cached` and `adaptive` loaders (`inference.stages.load`). An entry records the
source's sha256 and size and the version of the preprocessing that made its tokens (its
validation key) next to the tokens; a lookup hits only when the key still matches the source's
current bytes and the loader's preprocessing. Entries are written atomically (temp file +
os.replace), so a crash never leaves a half-written entry that could validate.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TypeAlias

StrPath: TypeAlias = "str | os.PathLike[str]"


def validation_key(raw: bytes, version: int) -> dict[str, object]:
    """What a cache entry must match: the source's sha256 and size, and the version of the
    preprocessing (bytes -> tokens) that made the entry's tokens."""
    return {"sha256": hashlib.sha256(raw).hexdigest(), "size": len(raw), "version": version}


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
        # os.fsencode, not str.encode: a file name that is not UTF-8 (on POSIX, its bytes come
        # back as surrogate escapes) is a readable source all the same
        digest = hashlib.sha256(os.fsencode(source.resolve())).hexdigest()[:32]
        return self.dir / f"{digest}.json"

    def write(self, source: Path, tokens: tuple[int, ...], raw: bytes) -> None:
        key = validation_key(raw, self.version)
        entry = {"source": str(source.resolve()), "key": key, "tokens": tokens}
        fd, tmp = tempfile.mkstemp(dir=self.dir, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
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
        try:
            entry = json.loads(self.entry_path(source).read_text())
            key, tokens = entry["key"], tuple(entry["tokens"])
        except (OSError, ValueError, KeyError, TypeError):
            self.misses += 1
            return None
        if key == validation_key(raw, self.version):  # cache_valid
            self.hits += 1
            return tokens
        self.stale += 1
        return None
