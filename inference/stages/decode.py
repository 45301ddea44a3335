"""Decode stage: greedy generation token by token over a KV cache.

The three variants differ only in how the KV cache is laid out and read, which is what the
article blames for Flash's slowdown ("memory access fragmentation"):
  * `sequential`   (GLM-5.3): one contiguous tensor per layer, appended to.
  * `hierarchical` (Flash): fixed-size blocks in a shared pool, handed out in a shuffled
    physical order and found through a block table; a per-block summary (mean key) gives a
    coarse first-level lookup that decides the order blocks are fetched in. Every step gathers
    blocks scattered over the pool -- poor locality, but exact attention.
  * `prefetched`   (Flash-optimized): hierarchical plus access-pattern prediction: it predicts
    the blocks the next `lookahead` steps read and stages them, in table order, into a
    contiguous buffer ahead of time; reads are then served from that buffer.
All three assemble exactly the same keys in the same order, so they emit the same tokens.

Each class has two faces: `run(model, prefill, max_new_tokens)` decodes for real over the
layouts of `inference.stages.kv_cache` (torch, imported on first use), and `work(task, model)`
prices the same variant analytically for the cost model. The constructor defaults suit the
tiny model; `variants.COST_PARAMS` holds the 9B-class values (e.g. `block_size` 16).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inference.checks import is_integer
from inference.model_config import ModelConfig, check_seed
from inference.stages.prefill import PrefillResult
from inference.task import Task
from inference.work import (
    DENSE,
    RANDOM,
    SEQUENTIAL,
    TOKEN_ID_BYTES,
    StageWork,
    WorkPart,
    new_record,
)

if TYPE_CHECKING:
    from torch import Tensor

    from inference.stages.kv_cache import BlockCache, KVCache
    from inference.tiny_model import TinyTransformer

# ---- cost model: calibrated figures for 9B-class serving (do not edit casually) ----------------
# The block decoders' extra reads per KV byte come from the layout's own sizes (see
# `block_read_overhead`): the summaries are one mean key per block (as `BlockCache` keeps), and
# the block table holds one int32 physical block id per block, read per sequence, layer and step.
INDEX_ENTRY_BYTES = 4             # one block-table entry: an int32 physical block id
SUMMARY_KEYS_PER_BLOCK = 1        # the block summary: its mean key (K only, no V)
MISPREDICT_FRACTION = 0.04        # prefetched blocks that were not needed


def block_read_overhead(model: ModelConfig, block_size: int) -> tuple[float, float]:
    """Extra bytes per KV byte a block-table decode step reads: (summaries, block table).

    Per block, sequence and layer the step reads the block's K and V, 2 x block_size x kv_dim
    elements; its summary, SUMMARY_KEYS_PER_BLOCK keys of kv_dim elements; and its table entry,
    INDEX_ENTRY_BYTES. For the 9B config at block size 16 (16 KiB of KV per block and layer):
    1/32 and 4 / 16384 = 0.024%."""
    block_kv_bytes = 2.0 * block_size * model.kv_dim * model.dtype_bytes
    summaries = SUMMARY_KEYS_PER_BLOCK * model.kv_dim * model.dtype_bytes / block_kv_bytes
    return summaries, INDEX_ENTRY_BYTES / block_kv_bytes


def _check_positive(name: str, value: object) -> int:
    if not is_integer(value) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _decode_work(task: Task, model: ModelConfig, pattern: int, overhead: float,
                 kv_launch: float, cache_copies: int = 1) -> StageWork:
    """Weights streamed once per step, plus the KV reads: `overhead` extra bytes per KV byte
    read in `pattern`, `kv_launch` kernel launches per layer and step; the decoder holds
    `cache_copies` copies of the KV cache.

    The formulas are written out here rather than in helpers: the environment builds this record
    for every task, and each Python call layer is a sizeable share of its cost."""
    b, n, m = task.batch, task.prompt_tokens, task.output_tokens
    c = model.work_coefficients   # the model's factors: see inference/work.py
    # The first of the m tokens comes from the prefill's logits, so decode runs m - 1 steps;
    # each streams all weights once (decode is memory bound), but of the input embedding table
    # only the rows of its b tokens (the whole table was 6.6% of a 9B model's step).
    steps = m - 1
    weights = new_record(WorkPart, ("weights", DENSE, SEQUENTIAL,
                                    b * steps * (c.dense_flops + c.head_flops),
                                    b * steps * c.token_bytes, steps * c.step_weight_bytes,
                                    10.0 * c.n_layers * steps))
    # KV traffic over the steps: step j (1..m-1) feeds back generated token j, whose K and V
    # join the cache, and attends over the n + j keys cached then; summed over steps and
    # sequences.
    contexts = b * (steps * n + steps * m / 2.0)
    # A decode step's attention is a batched matrix-vector product: memory bound, so it is
    # priced as streaming (dense) work, not as the prefill's attention kernels.
    kv = new_record(WorkPart, ("kv", DENSE, pattern, contexts * c.pair_flops_all,
                               contexts * c.kv_bytes * (1 + overhead), 0.0,
                               kv_launch * c.n_layers * steps))
    footprint = cache_copies * b * (n + steps) * c.kv_bytes   # the cache after the last step
    # (parts, io_bytes, output_bytes, footprint, needs_weights): see work.py on `new_record`
    output = b * m * TOKEN_ID_BYTES
    return new_record(StageWork, ((weights, kv), 0.0, output, footprint, True))


def _greedy(model: TinyTransformer, prefill: PrefillResult, steps: int, cache: KVCache) -> Tensor:
    """The shared decode loop; the first token comes from the prefill's last logits."""
    import torch

    from inference.tiny_model import full_causal_attention

    token = prefill.logits.argmax(-1)
    out = [token]
    pos = prefill.n_tokens
    with torch.no_grad():
        for _ in range(steps - 1):
            cache.grow()
            h = model.embed(token[:, None])
            for layer in range(model.config.n_layers):
                q, k, v = model.qkv(layer, h, pos)
                cache.append(layer, k, v)
                keys, values = cache.read(layer, q)
                attn = full_causal_attention(q, model.expand_kv(keys), model.expand_kv(values))
                h = model.finish_layer(layer, h, attn)
            token = model.logits(h)[:, -1].argmax(-1)
            out.append(token)
            pos += 1
    return torch.stack(out, dim=1)


def _check_run(model: object, prefill: object, max_new_tokens: object) -> int:
    from inference.tiny_model import TinyTransformer

    if not isinstance(model, TinyTransformer):
        raise ValueError(f"model must be a TinyTransformer, got {type(model).__name__}")
    if not isinstance(prefill, PrefillResult) or len(prefill.kv_cache) != model.config.n_layers:
        raise ValueError("prefill must be a PrefillResult with one kv_cache entry per layer")
    return _check_positive("max_new_tokens", max_new_tokens)


class SequentialDecode:
    """Greedy decoding over a contiguous, appended-to KV cache (GLM-5.3)."""

    stage = "decode"
    name = "sequential"

    def run(self, model: TinyTransformer, prefill: PrefillResult, max_new_tokens: int) -> Tensor:
        """Greedy tokens [batch, max_new_tokens]."""
        from inference.stages.kv_cache import ContiguousCache

        steps = _check_run(model, prefill, max_new_tokens)
        return _greedy(model, prefill, steps, ContiguousCache(prefill))

    def work(self, task: Task, model: ModelConfig) -> StageWork:
        """Weights streamed per step; KV read sequentially, one launch per layer and step."""
        return _decode_work(task, model, SEQUENTIAL, 0.0, 1.0)


class HierarchicalDecode:
    """Greedy decoding over a block-table KV cache in shuffled physical order (Flash).

    Args:
        block_size: tokens per KV block; in `work`, the block summaries (a mean key per block)
            add 1/(2 block_size) to the KV bytes read, and the block table 4 bytes per block
            and layer (see `block_read_overhead`; the 9B cost model uses 16, see
            `variants.COST_PARAMS`).
        seed: seeds the shuffled physical block order.

    After `run`: `block_reads` (blocks gathered) and `scattered_reads` (of those, how many did
    not follow the previously read physical block).
    """

    stage = "decode"
    name = "hierarchical"

    def __init__(self, block_size: int = 4, seed: int = 0) -> None:
        self.block_size = _check_positive("block_size", block_size)
        self.seed = check_seed(seed)
        self.block_reads = self.scattered_reads = 0
        # `work` runs for every task the env prices: the overhead of the last model and block
        # size priced, kept (by identity: holding the model keeps its id from being reused)
        self._priced: tuple[ModelConfig | None, int, float] = (None, 0, 0.0)

    def _cache(self, prefill: PrefillResult, max_new_tokens: int) -> BlockCache:
        from inference.stages.kv_cache import BlockCache

        return BlockCache(prefill, self.block_size, prefill.n_tokens + max_new_tokens, self.seed)

    def run(self, model: TinyTransformer, prefill: PrefillResult, max_new_tokens: int) -> Tensor:
        """Greedy tokens [batch, max_new_tokens], equal to `SequentialDecode`'s."""
        steps = _check_run(model, prefill, max_new_tokens)
        cache = self._cache(prefill, steps)
        tokens = _greedy(model, prefill, steps, cache)
        self._collect(cache)
        return tokens

    def _collect(self, cache: BlockCache) -> None:
        self.block_reads, self.scattered_reads = cache.block_reads, cache.scattered_reads

    def work(self, task: Task, model: ModelConfig) -> StageWork:
        """KV read in random order, plus block summaries and tables; two launches per step."""
        return _decode_work(task, model, RANDOM, self._kv_overhead(model), 2.0)

    def _kv_overhead(self, model: ModelConfig) -> float:
        """`_overhead(model)`, computed once for a run of tasks on the same model."""
        priced, block_size, overhead = self._priced
        if priced is not model or block_size != self.block_size:
            overhead = self._overhead(model)
            self._priced = (model, self.block_size, overhead)
        return overhead

    def _overhead(self, model: ModelConfig) -> float:
        """Extra bytes per KV byte read: block summaries + tables."""
        return sum(block_read_overhead(model, self.block_size))


class PrefetchedDecode(HierarchicalDecode):
    """Hierarchical decoding with access-pattern prediction and a staging buffer (Flash-opt).

    Args: as `HierarchicalDecode`, plus lookahead: steps each prefetch covers (the staging
    buffer is refreshed this often).

    After `run`: `prefetch_hits` / `prefetch_misses` (block reads served from the staging
    buffer / gathered on demand from the pool), `prefetches` (staging refreshes),
    `staged_blocks` (blocks copied into the staging buffer, per layer; a refresh copies only
    the blocks not staged yet, so each block once), `hit_ratio`.
    """

    name = "prefetched"

    def __init__(self, block_size: int = 4, lookahead: int = 2, seed: int = 0) -> None:
        super().__init__(block_size, seed)
        self.lookahead = _check_positive("lookahead", lookahead)
        self.prefetch_hits = self.prefetch_misses = self.prefetches = self.staged_blocks = 0

    def _cache(self, prefill: PrefillResult, max_new_tokens: int) -> BlockCache:
        from inference.stages.kv_cache import PrefetchCache

        capacity = prefill.n_tokens + max_new_tokens
        return PrefetchCache(prefill, self.block_size, capacity, self.seed, self.lookahead)

    def _collect(self, cache: BlockCache) -> None:
        from inference.stages.kv_cache import PrefetchCache

        super()._collect(cache)
        assert isinstance(cache, PrefetchCache)
        self.prefetch_hits, self.prefetch_misses = cache.hits, cache.misses
        self.prefetches, self.staged_blocks = cache.prefetches, cache.staged_blocks

    @property
    def hit_ratio(self) -> float:
        """Share of block reads served from the prefetch buffer in the last run (0 if none)."""
        total = self.prefetch_hits + self.prefetch_misses
        return self.prefetch_hits / total if total else 0.0

    def work(self, task: Task, model: ModelConfig) -> StageWork:
        """Blocks staged in order (sequential reads) at the price of mispredicted prefetches;
        the staging buffer holds a second copy of the cache beside the pool, as the real
        `PrefetchCache` does (it was left out, and 13% of Opt's decodes that fit the NPU did
        not)."""
        return _decode_work(task, model, SEQUENTIAL, self._kv_overhead(model), 2.0,
                            cache_copies=2)

    def _overhead(self, model: ModelConfig) -> float:
        """Block summaries + tables, plus the mispredicted blocks staged."""
        return super()._overhead(model) + MISPREDICT_FRACTION
