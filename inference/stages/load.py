"""Load stage: read a source file from disk and turn it into token ids, for real.

After the article's section 2:
  * `direct`   (GLM-5.3): read_from_disk -> preprocess -> tokenize, every time.
  * `cached`   (Flash): a precomputed on-disk cache; each request loads the entry, validates it
    against the current source (the article's `cache_valid`), applies it on a hit and falls
    back to the full preprocess on a miss or a stale entry. Validation reads and hashes the
    source, which is the overhead that makes a low hit rate a net loss.
  * `adaptive` (Flash-optimized): the cache's contents follow the runtime request distribution
    (exponentially decayed request counts): it holds the `capacity` most requested sources.

The tokenizer is byte-level (UTF-8 bytes -> ids 0..255) so it fits the tiny model's vocab.
The cache entries on disk are `inference.stages.disk_cache.DiskCache`'s.

Each loader also has its analytic face for the cost model: `load_work(task, model, hit)` (what
loading a task asks of a device given the cache state; `work` assumes a miss) and the class
attribute `cache_kind` (None, "precomputed" or "adaptive") telling the simulator which cache
to keep. The cached loaders need a `cache_dir` only to `run` for real.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from inference.checks import is_integer, is_number
from inference.messages import shown
from inference.model_config import ModelConfig
from inference.stages.disk_cache import DiskCache, StrPath
from inference.task import Task
from inference.work import (
    PREPROCESS,
    RANDOM,
    SEQUENTIAL,
    STRIDED,
    TOKEN_ID_BYTES,
    StageWork,
    WorkPart,
    new_record,
)

if TYPE_CHECKING:
    import torch

_WHITESPACE = re.compile(r"\s+")

#: Part of every cache entry's validation key: bump it whenever `preprocess` or `tokenize`
#: changes the tokens of some source, so that entries an older version wrote go stale instead
#: of serving the old tokens (2: a leading byte-order mark is dropped).
PREPROCESS_VERSION = 2

# ---- cost model: calibrated figures for 9B-class serving (do not edit casually) ----------------
RAW_BYTES_PER_TOKEN = 40.0        # source documents (markup, PDF text layers) per prompt token
PREPROCESS_OPS_PER_BYTE = 200.0   # extract, normalise, tokenise
VALIDATE_OPS_PER_BYTE = 40.0      # fingerprint the source, check the entry's schema
APPLY_OPS_PER_BYTE = 80.0         # deserialise and lay out a cached entry
INTERMEDIATE_BYTES_PER_BYTE = 6.0  # the miss path keeps decoded/normalised copies in RAM
TRACK_OPS_PER_REQUEST = 5.0e4     # adaptive cache: update the runtime distribution

#: The adaptive loader keeps the scores of at most this many sources per cache slot, forgetting
#: the lowest ranked. Admission only asks whether a source ranks among the top `capacity`; one
#: ranked below 8x that has at least 7x `capacity` uncached sources to overtake first, and with
#: decay < 1 a score that low is mostly decayed. Forgetting it (it restarts at 0 if it comes
#: back) delays its own admission by the requests it had, more if it is forgotten again
#: between its requests; the source being requested is never the one forgotten, so a run of
#: requests for it adds up. The bound keeps the memory, the per-request decay loop and the
#: ranking O(capacity) for a long-running loader.
TRACKED_PER_SLOT = 8


@dataclass(frozen=True)
class LoadResult:
    """Attributes: tokens (byte-level ids), cache_hit (None when no cache is involved), source."""

    tokens: tuple[int, ...]
    cache_hit: bool | None
    source: Path

    def as_tensor(self) -> torch.Tensor:
        """Tokens as a [1, n] LongTensor, the shape the prefill stage takes."""
        import torch

        return torch.tensor([self.tokens], dtype=torch.long)


def read_from_disk(path: StrPath) -> bytes:
    source = Path(path)
    if not source.is_file():
        raise FileNotFoundError(f"path {shown(source)} is not a readable file")
    return source.read_bytes()


def preprocess(raw: bytes, source: Path | None = None) -> str:
    """Decode UTF-8, NFC-normalise, collapse whitespace runs to one space, strip the ends."""
    try:
        # utf-8-sig: a leading byte-order mark (Windows editors write one) is no text; decoded
        # as utf-8 it survived the whitespace strip and became 3 tokens before the first word
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"path {shown(source)} is not valid UTF-8: {err}") from None
    return _WHITESPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def tokenize(text: str) -> tuple[int, ...]:
    """Byte-level tokenizer: the UTF-8 bytes of the text, each an id in 0..255."""
    return tuple(text.encode("utf-8"))


def full_preprocess(path: StrPath) -> tuple[tuple[int, ...], bytes]:
    """read_from_disk + preprocess + tokenize; also returns the raw bytes (for cache keys)."""
    raw = read_from_disk(path)
    return tokenize(preprocess(raw, Path(path))), raw


def _lookup(cache: DiskCache, source: Path, raw: bytes) -> tuple[tuple[int, ...], bool]:
    """(tokens, hit): the entry validated against `raw`, the source's bytes, on a hit
    (the article's `apply_cache`), else a full preprocess of `raw`."""
    tokens = cache.lookup(source, raw)
    if tokens is not None:
        return tokens, True
    return tokenize(preprocess(raw, source)), False


# The records are built with `new_record` from every field in order (see inference/work.py):
# WorkPart (tag, op, pattern, flops, nbytes, fixed_bytes, launches),
# StageWork (parts, io_bytes, output_bytes, footprint, needs_weights).
_TRACK = new_record(WorkPart, ("track", PREPROCESS, RANDOM, TRACK_OPS_PER_REQUEST, 0.0, 0.0, 0.0))


def _direct_work(task: Task) -> StageWork:
    sequences = task.batch * task.prompt_tokens
    raw = sequences * RAW_BYTES_PER_TOKEN
    tokens = sequences * TOKEN_ID_BYTES
    part = new_record(WorkPart, ("preprocess", PREPROCESS, SEQUENTIAL,
                                 raw * PREPROCESS_OPS_PER_BYTE, 2 * raw, 0.0, 1))
    return new_record(StageWork, ((part,), raw, tokens, 2 * raw, False))


def _cached_work(task: Task, hit: bool | None, track: bool) -> StageWork:
    """Validate, then apply the entry on a hit or run the full preprocess on a miss."""
    sequences = task.batch * task.prompt_tokens
    raw = sequences * RAW_BYTES_PER_TOKEN
    tokens = sequences * TOKEN_ID_BYTES
    validate = new_record(WorkPart, ("validate", PREPROCESS, SEQUENTIAL,
                                     raw * VALIDATE_OPS_PER_BYTE, raw, 0.0, 1))
    # (The parts are spelled out per case: a starred tuple display builds a list first.)
    if hit:
        apply = new_record(WorkPart, ("apply", PREPROCESS, SEQUENTIAL,
                                      raw * APPLY_OPS_PER_BYTE, 2 * tokens, 0.0, 1))
        parts: tuple[WorkPart, ...] = (validate, _TRACK, apply) if track else (validate, apply)
        return new_record(StageWork, (parts, raw + tokens, tokens, raw + tokens, False))
    full = new_record(WorkPart, ("preprocess", PREPROCESS, SEQUENTIAL,
                                 raw * PREPROCESS_OPS_PER_BYTE, 2 * raw, 0.0, 1))
    inter = raw * INTERMEDIATE_BYTES_PER_BYTE
    keep = new_record(WorkPart, ("intermediates", PREPROCESS, STRIDED, 0.0, inter, 0.0, 0.0))
    parts = (validate, _TRACK, full, keep) if track else (validate, full, keep)
    return new_record(StageWork, (parts, raw, tokens, 2 * raw + inter, False))


class DirectLoad:
    """Read from disk + preprocess + tokenize on every request (GLM-5.3)."""

    stage = "load"
    name = "direct"
    cache_kind: str | None = None

    def run(self, path: StrPath) -> LoadResult:
        tokens, _ = full_preprocess(path)
        return LoadResult(tokens, None, Path(path))

    def load_work(self, task: Task, model: ModelConfig, hit: bool | None = None) -> StageWork:
        """Analytic work; there is no cache, so `hit` is ignored."""
        return _direct_work(task)

    def work(self, task: Task, model: ModelConfig) -> StageWork:
        return _direct_work(task)


class _CacheLoader:
    """What the two cached loaders share: the optional disk cache, its counters, the cost face."""

    stage = "load"
    name: str
    cache_kind: str | None
    _tracks = False   # the cost of keeping runtime request statistics (adaptive only)

    def __init__(self, cache_dir: StrPath | None) -> None:
        self._cache = None if cache_dir is None else DiskCache(cache_dir, PREPROCESS_VERSION)

    @property
    def cache(self) -> DiskCache:
        """The disk cache; a ValueError when the loader was built for the cost model only."""
        if self._cache is None:
            raise ValueError(
                f"{type(self).__name__} needs a cache_dir to run or build a cache; "
                "this instance (cache_dir=None) is for the cost model only"
            )
        return self._cache

    @property
    def hits(self) -> int:
        return self._cache.hits if self._cache else 0

    @property
    def misses(self) -> int:
        return self._cache.misses if self._cache else 0

    @property
    def stale(self) -> int:
        return self._cache.stale if self._cache else 0

    def load_work(self, task: Task, model: ModelConfig, hit: bool | None = None) -> StageWork:
        """Analytic work of loading `task` when the cache hits (True) or misses (False/None)."""
        return _cached_work(task, hit, track=self._tracks)

    def work(self, task: Task, model: ModelConfig) -> StageWork:
        """Analytic work of a miss (the cache state lives in the simulator: see `load_work`)."""
        return _cached_work(task, False, track=self._tracks)


class CachedLoad(_CacheLoader):
    """Two-stage loader over a precomputed cache (Flash).

    Args:
        cache_dir: directory of the cache entries (created if missing); None builds a
            cost-model-only instance whose `run` and `build` raise a ValueError.

    `build(paths)` precomputes one entry per source. `run` never writes: a miss or a stale entry
    costs a full preprocess every time, as in the article. Counters: hits, misses, stale.
    """

    name = "cached"
    cache_kind = "precomputed"

    def __init__(self, cache_dir: StrPath | None = None) -> None:
        super().__init__(cache_dir)

    def build(self, paths: Iterable[StrPath]) -> None:
        cache = self.cache
        for path in paths:
            tokens, raw = full_preprocess(path)
            cache.write(Path(path), tokens, raw)

    def run(self, path: StrPath) -> LoadResult:
        source = Path(path)
        tokens, hit = _lookup(self.cache, source, read_from_disk(source))
        return LoadResult(tokens, hit, source)


class AdaptiveLoad(_CacheLoader):
    """A cache holding the `capacity` most requested sources (Flash-optimized).

    Each request multiplies every source's score by `decay` and adds 1 to the requested one
    (runtime distribution tracking: recent requests weigh more). After a full preprocess the
    source is admitted if it ranks in the top `capacity` scores; sources that drop out of the
    top are evicted (entry deleted). Validation is the same as `CachedLoad`'s. Only the
    `TRACKED_PER_SLOT * capacity` highest scores are kept, the requested source's always among
    them (see there): a stream of distinct sources grew the scores, and the per-request decay
    over them, without bound.

    Opened on a folder a previous loader filled, it adopts the entries there
    (`DiskCache.adopt`: stale, half-written and foreign files as documented there): they count
    against `capacity`, the newest `capacity` of them are kept (the others deleted) and they
    hit as the entries written here do. The request counts are not saved, so the adopted
    sources start at score 0, below any source requested since, and are the first evicted.

    Args:
        cache_dir: directory of the cache entries (created if missing); None builds a
            cost-model-only instance whose `run` raises a ValueError.
        capacity: most entries held at once (>= 1).
        decay: per-request decay of the scores, in (0, 1]; 1 counts plain frequencies.

    The simulated cache's size and decay are `SimConfig.cache_capacity` / `cache_decay`.
    """

    name = "adaptive"
    cache_kind = "adaptive"
    _tracks = True

    def __init__(self, cache_dir: StrPath | None = None, capacity: int = 8,
                 decay: float = 0.95) -> None:
        if not is_integer(capacity) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        if not is_number(decay) or not 0 < decay <= 1:
            raise ValueError(f"decay must be a number in (0, 1], got {decay!r}")
        super().__init__(cache_dir)
        self.capacity, self.decay = int(capacity), float(decay)
        self.scores: dict[Path, float] = {}
        self.cached: set[Path] = set()
        if self._cache is not None:
            # Without this a new process started empty: the folder grew past `capacity` over
            # runs, and what earlier runs cached was neither reused nor ever evicted.
            adopted = self._cache.adopt()
            for _, entry_file in adopted[capacity:]:
                entry_file.unlink(missing_ok=True)
            for rank, (source, _) in enumerate(adopted[:capacity]):
                # below every score a request earns, the newest highest: the oldest goes first
                self.scores[source] = -1e-9 * rank
                self.cached.add(source)

    def _ranked(self) -> list[Path]:
        # Ties keep what is already cached (no churn), then go by path for determinism.
        return sorted(self.scores, key=lambda p: (-self.scores[p], p not in self.cached, str(p)))

    def run(self, path: StrPath) -> LoadResult:
        cache = self.cache
        source = Path(path).resolve()
        raw = read_from_disk(source)
        # Load before counting the request: one that fails (an unknown path, a source that is
        # not UTF-8 text) must not enter the statistics, where it would rank among the most
        # requested and hold a slot it can never fill, keeping out a source that loads.
        if source in self.cached:
            tokens, hit = _lookup(cache, source, raw)
        else:
            cache.misses += 1
            tokens, hit = tokenize(preprocess(raw, source)), False
        for known in self.scores:
            self.scores[known] *= self.decay
        self.scores[source] = self.scores.get(source, 0.0) + 1.0
        if hit:
            return LoadResult(tokens, True, Path(path))
        ranked = self._ranked()
        top = set(ranked[: self.capacity])
        # Only a miss adds a source, so trimming here bounds the scores; what stays cached
        # ranks in the top `capacity` and is never forgotten. Nor is the requested source:
        # forgotten, it would restart at 1 at each request and never outrank the tracked ones.
        bound = TRACKED_PER_SLOT * self.capacity
        forgotten = ranked[bound:]
        if source in forgotten:
            forgotten[forgotten.index(source)] = ranked[bound - 1]
        for known in forgotten:
            del self.scores[known]
        for evicted in self.cached - top:
            cache.entry_path(evicted).unlink(missing_ok=True)
        self.cached &= top
        if source in top:
            cache.write(source, tokens, raw)
            self.cached.add(source)
        return LoadResult(tokens, False, Path(path))

    def cached_sources(self) -> set[Path]:
        """Resolved paths of the sources with an entry in the cache now."""
        return set(self.cached)
