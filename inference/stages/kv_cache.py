"""KV-cache layouts of the decode stage (torch): contiguous, block table, block table + prefetch.

`inference.stages.decode` imports this module on first use, so that the cost model (and
`import inference`) never pays for importing torch. All three layouts return exactly the same
keys and values for a read; they differ in how they are laid out and gathered, which is what
the decode classes' `work` prices (sequential vs random access, block tables, mispredictions).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from inference.stages.prefill import PrefillResult


class ContiguousCache:
    """Per layer one [batch, kv_heads, length, head_dim] tensor; append = concatenate."""

    def __init__(self, prefill: PrefillResult) -> None:
        self.k = [k.clone() for k, _ in prefill.kv_cache]
        self.v = [v.clone() for _, v in prefill.kv_cache]

    def grow(self) -> None:  # called once before each step, ahead of the per-layer appends
        pass

    def append(self, layer: int, k: Tensor, v: Tensor) -> None:
        self.k[layer] = torch.cat([self.k[layer], k], dim=2)
        self.v[layer] = torch.cat([self.v[layer], v], dim=2)

    def read(self, layer: int, q: Tensor) -> tuple[Tensor, Tensor]:
        return self.k[layer], self.v[layer]


class BlockCache:
    """KV blocks of `block_size` tokens in a pool per layer: [n_blocks, b, kv_heads, bs, d].

    Physical blocks are handed out from a seeded shuffled free list; `table[i]` is the physical
    block holding logical block i. The table is shared by all layers (equal lengths).
    """

    def __init__(self, prefill: PrefillResult, block_size: int, capacity: int, seed: int) -> None:
        k0 = prefill.kv_cache[0][0]
        b, heads, _, d = k0.shape
        self.bs = block_size
        n_blocks = math.ceil(capacity / block_size)
        gen = torch.Generator().manual_seed(seed)
        self.free: list[int] = torch.randperm(n_blocks, generator=gen).tolist()
        self.table: list[int] = []
        self.length = 0
        n_layers = len(prefill.kv_cache)
        self.k = [k0.new_zeros(n_blocks, b, heads, block_size, d) for _ in range(n_layers)]
        self.v = [k0.new_zeros(n_blocks, b, heads, block_size, d) for _ in range(n_layers)]
        self.key_sum = [k0.new_zeros(n_blocks, b, heads, d) for _ in range(n_layers)]
        self.block_reads = 0
        self.scattered_reads = 0  # reads whose physical block does not follow the previous one
        for _ in range(prefill.n_tokens):
            self._open_slot()
        for layer, (k, v) in enumerate(prefill.kv_cache):  # the prompt, block-wise
            k_blocks, v_blocks = self._split(k), self._split(v)
            self.k[layer][self.table], self.v[layer][self.table] = k_blocks, v_blocks
            self.key_sum[layer][self.table] = k_blocks.sum(dim=3)

    def _split(self, x: Tensor) -> Tensor:
        """[b, kv_heads, length, d] -> zero-padded blocks [n, b, kv_heads, bs, d]."""
        b, heads, length, d = x.shape
        padded = x.new_zeros(b, heads, len(self.table) * self.bs, d)
        padded[:, :, :length] = x
        return padded.view(b, heads, len(self.table), self.bs, d).permute(2, 0, 1, 3, 4)

    def grow(self) -> None:
        """Called once before each step, ahead of the per-layer appends."""
        self._open_slot()

    def _open_slot(self) -> None:
        """Reserve the slot of the next token, opening a new block when the last one is full."""
        if self.length % self.bs == 0:
            self.table.append(self.free.pop(0))
        self.length += 1

    def _write(self, layer: int, pos: int, k: Tensor, v: Tensor) -> None:
        block, slot = self.table[pos // self.bs], pos % self.bs
        self.k[layer][block, :, :, slot] = k
        self.v[layer][block, :, :, slot] = v
        self.key_sum[layer][block] += k

    def append(self, layer: int, k: Tensor, v: Tensor) -> None:
        self._write(layer, self.length - 1, k[:, :, -1], v[:, :, -1])

    def visit_order(self, layer: int, q: Tensor) -> list[int]:
        """First level: rank logical blocks by the query's affinity to their mean key."""
        n = len(self.table)
        counts = torch.full((n,), float(self.bs))
        counts[-1] = self.length - (n - 1) * self.bs
        summaries = self.key_sum[layer][self.table] / counts.view(n, 1, 1, 1)
        b, heads, _, d = q.shape
        kv_heads = summaries.shape[2]
        q_group = q[:, :, -1].reshape(b, kv_heads, heads // kv_heads, d).mean(2)
        affinity = torch.einsum("nbkd,bkd->n", summaries, q_group)
        return torch.argsort(affinity, descending=True).tolist()

    def _fetch(self, layer: int, logical: int) -> tuple[Tensor, Tensor]:
        """Second level: one block straight from the pool (the scattered access)."""
        physical = self.table[logical]
        return self.k[layer][physical], self.v[layer][physical]

    def read(self, layer: int, q: Tensor) -> tuple[Tensor, Tensor]:
        """Gather every block in visit order into its logical slot; exact, whatever the order."""
        n = len(self.table)
        k_blocks = self.k[layer].new_empty(n, *self.k[layer].shape[1:])
        v_blocks = torch.empty_like(k_blocks)
        previous = None
        for logical in self.visit_order(layer, q):
            physical = self.table[logical]
            self.block_reads += 1
            self.scattered_reads += previous is not None and physical != previous + 1
            previous = physical
            k_blocks[logical], v_blocks[logical] = self._fetch(layer, logical)
        return self._flatten(k_blocks), self._flatten(v_blocks)

    def _flatten(self, blocks: Tensor) -> Tensor:
        """[n, b, kv_heads, bs, d] -> contiguous [b, kv_heads, length, d]."""
        n, b, heads, bs, d = blocks.shape
        flat = blocks.permute(1, 2, 0, 3, 4).reshape(b, heads, n * bs, d)
        return flat[:, :, : self.length].contiguous()


class PrefetchCache(BlockCache):
    """Block cache with a contiguous staging buffer filled ahead of the reads.

    Prediction: the next steps read the table observed so far, plus the blocks the allocator
    will open for the next `lookahead` tokens (its free list is known). The staging buffer is
    refreshed every `lookahead` steps, the first time at the first step (a decode of one token
    runs no step and reads nothing); appends write through to staged blocks so they stay valid.
    A refresh copies only the blocks not staged already (from the first logical block whose
    prediction changed): each block is staged once, as the cost model assumes.

    Counters: `hits` / `misses` (block reads served from the staging buffer / gathered from the
    pool), `prefetches` (refreshes), `staged_blocks` (blocks copied into the staging buffer,
    counted per layer as `block_reads` is).
    """

    def __init__(
        self, prefill: PrefillResult, block_size: int, capacity: int, seed: int, lookahead: int
    ) -> None:
        super().__init__(prefill, block_size, capacity, seed)
        self.lookahead = lookahead
        self.hits = self.misses = self.prefetches = self.staged_blocks = 0
        self.staged = []
        # the staging buffer, in logical order: room for every block of the pool
        self.stage_k = [torch.empty_like(pool) for pool in self.k]
        self.stage_v = [torch.empty_like(pool) for pool in self.v]
        self.steps_since = lookahead   # the first `grow` stages

    staged: list[int]  # physical blocks in the staging buffer, in logical order
    stage_k: list[Tensor]
    stage_v: list[Tensor]

    def is_staged(self, logical: int) -> bool:
        return logical < len(self.staged) and self.staged[logical] == self.table[logical]

    def predict(self) -> list[int]:
        """Physical blocks, in logical order, that the next `lookahead` steps will read."""
        needed = math.ceil((self.length + self.lookahead) / self.bs) - len(self.table)
        return self.table + self.free[: max(needed, 0)]

    def prefetch(self) -> None:
        predicted = self.predict()
        kept = 0   # the leading blocks staged already, and still valid (appends write through)
        for staged, block in zip(self.staged, predicted, strict=False):
            if staged != block:
                break
            kept += 1
        new = predicted[kept:]
        if new:
            index = torch.tensor(new, dtype=torch.long)
            for stage, pool in zip(self.stage_k + self.stage_v, self.k + self.v, strict=True):
                stage[kept:len(predicted)] = pool.index_select(0, index)
            self.staged_blocks += len(new) * len(self.k)
        self.staged = predicted
        self.prefetches += 1
        self.steps_since = 0

    def grow(self) -> None:
        if self.steps_since >= self.lookahead:
            self.prefetch()
        self.steps_since += 1
        self._open_slot()

    def _write(self, layer: int, pos: int, k: Tensor, v: Tensor) -> None:
        super()._write(layer, pos, k, v)
        logical, slot = pos // self.bs, pos % self.bs
        if self.is_staged(logical):
            self.stage_k[layer][logical, :, :, slot] = k
            self.stage_v[layer][logical, :, :, slot] = v

    def _fetch(self, layer: int, logical: int) -> tuple[Tensor, Tensor]:
        if self.is_staged(logical):
            self.hits += 1
            return self.stage_k[layer][logical], self.stage_v[layer][logical]
        self.misses += 1
        return super()._fetch(layer, logical)


KVCache = ContiguousCache | BlockCache
