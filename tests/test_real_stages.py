"""Correctness of the real (torch / file) stage implementations on the tiny model."""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from inference.model_config import get_model
from inference.stages import disk_cache, kv_cache, load
from inference.stages.decode import (
    SUMMARY_KEYS_PER_BLOCK,
    HierarchicalDecode,
    PrefetchedDecode,
    SequentialDecode,
    block_read_overhead,
)
from inference.stages.load import AdaptiveLoad, CachedLoad, DirectLoad
from inference.stages.prefill import (
    DynamicAttention,
    GatedAttention,
    PrefillResult,
    WindowAttention,
)
from inference.task import Task
from inference.tiny_model import TinyTransformer, full_causal_attention

TINY = get_model("tiny")
FEW = settings(max_examples=8, deadline=None)


@pytest.fixture(scope="module")
def model() -> TinyTransformer:
    return TinyTransformer(TINY, seed=0)


def prompt(batch: int, n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, TINY.vocab, (batch, n), generator=torch.Generator().manual_seed(seed))


def qkv(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, 4, n, 16, generator=gen) for _ in range(3))  # type: ignore[return-value]


def reference(model: TinyTransformer, tokens: torch.Tensor) -> PrefillResult:
    logits, cache, hidden = model.forward(tokens, full_causal_attention)
    return PrefillResult(logits[:, -1], tuple(cache), hidden)


def assert_same(a: PrefillResult, b: PrefillResult) -> None:
    assert torch.allclose(a.logits, b.logits, atol=1e-5)
    assert torch.allclose(a.hidden, b.hidden, atol=1e-5)
    for (ka, va), (kb, vb) in zip(a.kv_cache, b.kv_cache, strict=True):
        assert torch.allclose(ka, kb, atol=1e-5) and torch.allclose(va, vb, atol=1e-5)


# --- prefill -------------------------------------------------------------------------------


def test_the_default_model_rotates_q_and_k_by_the_standard_rope_frequencies(model):
    """RoPE as RoFormer defines it, written with complex numbers: pair i of a head, (x_i,
    x_{i + d/2}), is turned by position x 10000^(-2i/d). The default model applies it to q and k
    (not v), which is the rotated k the prefill hands decode in its cache."""
    plain = TinyTransformer(TINY, seed=0, rope=False)  # same draws, so the same weights
    n, start, half = 6, 3, TINY.head_dim // 2
    h = model.embed(prompt(1, n))
    theta = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / TINY.head_dim)
    angles = torch.arange(start, start + n, dtype=torch.float64)[:, None] * theta
    turn = torch.polar(torch.ones_like(angles), angles)
    rotated, unrotated = model.qkv(0, h, start), plain.qkv(0, h, start)
    for x, x0 in zip(rotated[:2], unrotated[:2], strict=True):
        z = torch.complex(x0[..., :half].double(), x0[..., half:].double()) * turn
        assert torch.allclose(x.double(), torch.cat([z.real, z.imag], dim=-1), atol=1e-5)
        assert not torch.allclose(x, x0, atol=1e-3)  # the rotation is no identity here
    assert torch.equal(rotated[2], unrotated[2])


@FEW
@given(n=st.integers(1, 24), extra=st.integers(0, 8), seed=st.integers(0, 99))
def test_window_kernel_equals_full_causal_when_window_covers_n(n: int, extra: int, seed: int):
    q, k, v = qkv(n, seed)
    out = WindowAttention(n + extra).attention(q, k, v)
    assert torch.allclose(out, full_causal_attention(q, k, v), atol=1e-5)


def test_window_run_equals_full_when_window_ge_n_and_differs_below(model):
    tokens = prompt(2, 12)
    assert_same(WindowAttention(12).run(model, tokens), reference(model, tokens))
    assert_same(WindowAttention(100).run(model, tokens), reference(model, tokens))
    narrow = WindowAttention(3).run(model, tokens)
    assert not torch.allclose(narrow.logits, reference(model, tokens).logits, atol=1e-3)


def test_window_of_one_attends_only_to_itself():
    q, k, v = qkv(6, 3)
    assert torch.allclose(WindowAttention(1).attention(q, k, v), v, atol=1e-6)


@pytest.mark.parametrize(("n_q", "n_k", "window"), [(3, 8, 2), (1, 5, 3), (4, 4, 2), (2, 9, 4)])
def test_a_window_masks_the_keys_behind_each_querys_own_position(n_q, n_k, window):
    """Queries are the last n_q of n_k positions (as in the causal mask): query i, at position
    n_k - n_q + i, sees exactly the `window` keys ending at its own position (fewer near the start)."""
    from inference.stages.attention import window_mask
    mask = window_mask(n_q, n_k, window)
    for i in range(n_q):
        position = n_k - n_q + i
        seen = [j for j in range(n_k) if mask[i, j]]
        assert seen == list(range(max(0, position - window + 1), position + 1))


def test_dynamic_keeping_every_key_equals_full_and_selective_differs(model):
    tokens = prompt(2, 16, seed=1)
    assert_same(DynamicAttention(0.0).run(model, tokens), reference(model, tokens))
    selective = DynamicAttention(0.5).run(model, tokens)
    assert not torch.allclose(selective.logits, reference(model, tokens).logits, atol=1e-3)
    strictest = DynamicAttention(1.0).run(model, tokens)  # keeps only each row's argmax key
    assert torch.isfinite(strictest.logits).all()


def test_gated_off_is_window_and_on_is_dynamic(model):
    tokens = prompt(2, 20, seed=2)
    off = GatedAttention(window=5, threshold=0.3, mode="off")
    on = GatedAttention(window=5, threshold=0.3, mode="on")
    assert_same(off.run(model, tokens), WindowAttention(5).run(model, tokens))
    assert_same(on.run(model, tokens), DynamicAttention(0.3).run(model, tokens))
    assert off.gate_log == [False] * TINY.n_layers and on.gate_log == [True] * TINY.n_layers
    # window differs from dynamic here, so the two checks above are not vacuous
    assert not torch.allclose(
        off.run(model, tokens).logits, on.run(model, tokens).logits, atol=1e-3
    )


def test_gated_auto_rule(model):
    short = GatedAttention(window=32, spread=0.0)
    assert_same(short.run(model, prompt(1, 10)), WindowAttention(32).run(model, prompt(1, 10)))
    assert short.gate_log == [False, False]  # fits in the window: window is exact
    long_tokens = prompt(1, 40)
    eager = GatedAttention(window=4, threshold=0.2, spread=0.0)
    assert_same(eager.run(model, long_tokens), DynamicAttention(0.2).run(model, long_tokens))
    assert eager.gate_log == [True, True]
    never = GatedAttention(window=4, spread=1.0)
    never.run(model, long_tokens)
    assert never.gate_log == [False, False]


def test_a_prompt_exactly_as_long_as_the_window_keeps_the_gate_shut(model):
    """n == window is "fits in the window": window attention is exact there, so even a gate that
    opens on any spread (0) stays shut rather than paying for the O(n^2) dynamic branch."""
    tokens = prompt(1, 10)
    eager = GatedAttention(window=10, threshold=0.3, spread=0.0)
    assert_same(eager.run(model, tokens), WindowAttention(10).run(model, tokens))
    assert eager.gate_log == [False] * TINY.n_layers
    # one token longer the same gate opens, so the check above is not vacuous
    eager.run(model, prompt(1, 11))
    assert eager.gate_log == [True] * TINY.n_layers


# --- decode --------------------------------------------------------------------------------


@FEW
@given(
    seed=st.integers(0, 1000),
    batch=st.integers(1, 3),
    n=st.integers(1, 13),
    new=st.integers(1, 12),
    block=st.integers(1, 5),
    lookahead=st.integers(1, 4),
)
def test_block_decoders_emit_sequential_tokens(seed, batch, n, new, block, lookahead):
    model = TinyTransformer(TINY, seed=seed)
    pre = WindowAttention(8).run(model, prompt(batch, n, seed))
    expected = SequentialDecode().run(model, pre, new)
    assert expected.shape == (batch, new) and expected.dtype == torch.long
    assert torch.equal(HierarchicalDecode(block, seed=seed).run(model, pre, new), expected)
    assert torch.equal(PrefetchedDecode(block, lookahead, seed=seed).run(model, pre, new), expected)


def test_sequential_matches_recomputing_the_full_prompt(model):
    tokens = prompt(2, 7, seed=5)
    out = SequentialDecode().run(model, reference(model, tokens), 6)
    seq = tokens
    for step in range(6):
        nxt = model.forward(seq)[0][:, -1].argmax(-1)
        assert torch.equal(out[:, step], nxt)
        seq = torch.cat([seq, nxt[:, None]], dim=1)


def test_hierarchical_reads_are_scattered(model):
    pre = WindowAttention(64).run(model, prompt(1, 30))
    hier = HierarchicalDecode(block_size=4, seed=3)
    hier.run(model, pre, 10)
    blocks_per_step = [math.ceil((30 + i) / 4) for i in range(1, 10)]
    assert hier.block_reads == TINY.n_layers * sum(blocks_per_step)
    assert hier.scattered_reads > hier.block_reads // 2


def test_prefetched_decoding_reads_the_hierarchical_layout_by_default(model):
    """Prefetched decoding is hierarchical decoding plus a staging buffer ("Args: as
    HierarchicalDecode"): with the default arguments both lay the blocks out alike, so their
    reads are as many and as scattered."""
    pre = WindowAttention(64).run(model, prompt(1, 30))
    hier, pref = HierarchicalDecode(), PrefetchedDecode()
    hier.run(model, pre, 10)
    pref.run(model, pre, 10)
    assert (pref.block_reads, pref.scattered_reads) == (hier.block_reads, hier.scattered_reads)
    assert hier.scattered_reads > 0


def test_a_single_block_is_never_a_scattered_read(model):
    """A read is scattered when its block does not follow the one read before it in the same
    gather: a cache that fits one block reads it alone, every step."""
    pre = WindowAttention(64).run(model, prompt(1, 5))
    hier = HierarchicalDecode(block_size=16)
    hier.run(model, pre, 4)
    assert (hier.block_reads, hier.scattered_reads) == (TINY.n_layers * 3, 0)


def test_each_block_summary_is_the_sum_of_the_keys_written_into_it(model):
    """The first-level lookup ranks blocks by their mean key: the running sum each block keeps
    covers the prompt's keys and every key appended after it."""
    pre = WindowAttention(64).run(model, prompt(2, 6))
    cache = kv_cache.BlockCache(pre, 4, 12, seed=1)
    gen = torch.Generator().manual_seed(0)
    k0 = pre.kv_cache[0][0]
    for _ in range(5):
        cache.grow()
        for layer in range(TINY.n_layers):
            k, v = (torch.randn(*k0.shape[:2], 1, k0.shape[3], generator=gen) for _ in range(2))
            cache.append(layer, k, v)
    for layer in range(TINY.n_layers):
        keys, _ = cache.read(layer, torch.zeros(2, TINY.n_heads, 1, TINY.head_dim))
        assert keys.shape[2] == 11
        for logical, physical in enumerate(cache.table):
            block = keys[:, :, logical * 4:(logical + 1) * 4].sum(dim=2)
            assert torch.allclose(cache.key_sum[layer][physical], block, atol=1e-5)


def test_the_block_pool_is_the_fewest_blocks_that_hold_the_capacity(model):
    pre = WindowAttention(64).run(model, prompt(1, 5))
    for capacity, block_size in ((5, 4), (8, 4), (9, 4), (13, 1), (20, 7)):
        cache = kv_cache.BlockCache(pre, block_size, capacity, seed=0)
        pool = {cache.k[0].shape[0], cache.v[-1].shape[0], len(cache.table) + len(cache.free)}
        assert len(pool) == 1
        blocks = pool.pop()
        assert (blocks - 1) * block_size < capacity <= blocks * block_size


def test_blocks_are_visited_by_the_affinity_of_their_mean_key(model):
    """A partly filled last block's mean is over the keys it holds: two keys of 1.2 outrank a
    full block of keys of 1 for a query along them."""
    keys = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.2, 1.2]).reshape(1, 1, 6, 1)
    pre = PrefillResult(torch.zeros(1, 1), ((keys, torch.zeros_like(keys)),), torch.zeros(1, 6, 1))
    cache = kv_cache.BlockCache(pre, 4, 8, seed=0)
    assert cache.visit_order(0, torch.ones(1, 1, 1, 1)) == [1, 0]
    assert cache.visit_order(0, -torch.ones(1, 1, 1, 1)) == [0, 1]


def test_a_refresh_restages_from_the_first_block_whose_prediction_changed(model, monkeypatch):
    """A block staged under a prediction that changed is copied again, not served stale: the
    first prediction swaps the first two blocks, the later ones are right, and every block
    the buffer claims holds what the pool holds. (Attention would not notice two whole blocks
    swapped, keys and values alike, so the tokens cannot tell.)"""
    real = kv_cache.PrefetchCache.predict
    calls = []

    def predict(self):
        predicted = real(self)
        calls.append(len(predicted))
        return [predicted[1], predicted[0], *predicted[2:]] if len(calls) == 1 else predicted

    monkeypatch.setattr(kv_cache.PrefetchCache, "predict", predict)
    pre = WindowAttention(64).run(model, prompt(2, 10))
    cache = kv_cache.PrefetchCache(pre, 3, 20, seed=0, lookahead=2)
    k0 = pre.kv_cache[0][0]
    gen = torch.Generator().manual_seed(0)
    for _ in range(6):
        cache.grow()
        for layer in range(TINY.n_layers):
            k, v = (torch.randn(*k0.shape[:2], 1, k0.shape[3], generator=gen) for _ in range(2))
            cache.append(layer, k, v)
        staged = [logical for logical in range(len(cache.table)) if cache.is_staged(logical)]
        for layer in range(TINY.n_layers):
            for logical in staged:
                physical = cache.table[logical]
                assert torch.equal(cache.stage_k[layer][logical], cache.k[layer][physical])
                assert torch.equal(cache.stage_v[layer][logical], cache.v[layer][physical])
    assert len(calls) == 3 and 0 in staged


def test_block_summaries_are_the_mean_key_the_cost_model_prices(model):
    """The cost model charges SUMMARY_KEYS_PER_BLOCK keys per block of K and V: the real
    cache keeps exactly that, one key-sized sum per block, layer and sequence."""
    pre = WindowAttention(64).run(model, prompt(2, 9))
    cache = kv_cache.BlockCache(pre, 4, 20, seed=0)
    for layer in range(TINY.n_layers):
        kv = cache.k[layer].numel() + cache.v[layer].numel()
        assert cache.key_sum[layer].numel() / kv == pytest.approx(
            block_read_overhead(TINY, 4)[0], rel=1e-12)
        assert cache.key_sum[layer].numel() == SUMMARY_KEYS_PER_BLOCK * cache.k[layer].numel() / 4


def test_prefetch_hit_ratio_and_accounting(model):
    pre = WindowAttention(64).run(model, prompt(2, 24))
    dec = PrefetchedDecode(block_size=4, lookahead=3)
    dec.run(model, pre, 16)
    assert dec.prefetch_hits + dec.prefetch_misses == dec.block_reads > 0
    assert dec.hit_ratio > 0.9
    assert dec.prefetches == math.ceil((16 - 1) / 3)  # at the first step, then every `lookahead`


def record_staging(monkeypatch) -> list[int]:
    """The number of blocks staged after each `PrefetchCache.prefetch`, as they happen."""
    staged: list[int] = []
    real = kv_cache.PrefetchCache.prefetch

    def prefetch(self):
        real(self)
        staged.append(len(self.staged))

    monkeypatch.setattr(kv_cache.PrefetchCache, "prefetch", prefetch)
    return staged


def test_a_decode_without_steps_stages_nothing(model, monkeypatch):
    """The first token comes from the prefill's logits, so max_new_tokens=1 runs no step and
    reads no block; the cache still staged the whole prompt's KV (every block, every layer) up
    front and counted a prefetch."""
    copied = record_staging(monkeypatch)
    pre = WindowAttention(64).run(model, prompt(2, 9))
    dec = PrefetchedDecode(block_size=4, lookahead=2)
    assert torch.equal(dec.run(model, pre, 1), SequentialDecode().run(model, pre, 1))
    assert (dec.block_reads, dec.prefetches, copied) == (0, 0, [])
    dec.run(model, pre, 2)   # one step: staged once, before its reads (3 blocks, all hits)
    assert (dec.prefetches, copied, dec.prefetch_misses) == (1, [3], 0)


def test_a_prefetch_refresh_stages_only_the_blocks_not_staged_yet(model, monkeypatch):
    """Each refresh copied the whole predicted table into the staging buffer again (about
    1/lookahead extra block copies per block read), which the cost model does not price: a
    refresh now copies only the new blocks, so every block is staged once."""
    staged = record_staging(monkeypatch)
    pre = WindowAttention(64).run(model, prompt(2, 24))
    dec = PrefetchedDecode(block_size=4, lookahead=3)
    assert torch.equal(dec.run(model, pre, 16), SequentialDecode().run(model, pre, 16))
    assert staged == [7, 8, 9, 9, 10] and dec.prefetch_misses == 0
    assert dec.staged_blocks == TINY.n_layers * staged[-1]   # not n_layers * sum(staged)
    dec.run(model, pre, 1)   # counters are per run
    assert dec.staged_blocks == 0


def test_the_prefetched_decode_holds_the_two_copies_of_the_cache_its_cost_model_prices(model):
    """The staging buffer has room for every block of the pool, beside the pool: the cost
    model's footprint counted one copy, so the NPU took decodes it cannot hold."""
    pre = WindowAttention(64).run(model, prompt(2, 9))
    cache = kv_cache.PrefetchCache(pre, 4, 20, seed=0, lookahead=2)

    def nbytes(tensors: list[torch.Tensor]) -> int:
        return sum(t.numel() * t.element_size() for t in tensors)

    assert nbytes(cache.stage_k + cache.stage_v) == nbytes(cache.k + cache.v) > 0
    task = Task(2, 9, 11)
    assert PrefetchedDecode().work(task, TINY).footprint == \
        2 * HierarchicalDecode().work(task, TINY).footprint


def test_the_hit_ratio_is_the_share_of_block_reads_served_from_the_staging_buffer(
        model, monkeypatch):
    """Staging only the first logical block leaves a mix of hits and misses; before any run
    there were no reads, so no hits."""
    assert PrefetchedDecode().hit_ratio == 0.0
    pre = WindowAttention(64).run(model, prompt(2, 10))
    monkeypatch.setattr(kv_cache.PrefetchCache, "predict", lambda self: self.table[:1])
    dec = PrefetchedDecode(block_size=3, lookahead=2)
    assert torch.equal(dec.run(model, pre, 8), SequentialDecode().run(model, pre, 8))
    assert 0 < dec.prefetch_hits < dec.prefetch_misses
    assert dec.hit_ratio == pytest.approx(dec.prefetch_hits / dec.block_reads, rel=1e-12)


def test_prefetch_misses_fall_back_to_exact_gathers(model, monkeypatch):
    pre = WindowAttention(64).run(model, prompt(2, 10))
    monkeypatch.setattr(kv_cache.PrefetchCache, "predict", lambda self: [])
    dec = PrefetchedDecode(block_size=3, lookahead=2)
    assert torch.equal(dec.run(model, pre, 8), SequentialDecode().run(model, pre, 8))
    assert dec.prefetch_hits == 0 and dec.prefetch_misses == dec.block_reads
    assert dec.hit_ratio == 0.0


# --- load ----------------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def test_direct_load_preprocesses_and_tokenizes(tmp_path):
    src = write(tmp_path / "a.txt", "  Cafe\u0301 \n\t au  lait ")
    result = DirectLoad().run(src)
    assert result.tokens == tuple("Caf\u00e9 au lait".encode())
    assert result.cache_hit is None and result.source == src
    assert result.as_tensor().shape == (1, len(result.tokens))


def test_a_byte_order_mark_is_no_part_of_the_text(tmp_path):
    """Only a leading BOM goes: one inside the text (a zero-width no-break space) is kept."""
    src = tmp_path / "bom.txt"
    src.write_bytes(b"\xef\xbb\xbf  hello \xef\xbb\xbf")
    assert DirectLoad().run(src).tokens == tuple(b"hello \xef\xbb\xbf")


def test_cached_hit_equals_direct_and_stale_is_never_returned(tmp_path):
    src = write(tmp_path / "doc.txt", "hello   world")
    other = write(tmp_path / "other.txt", "not built")
    loader = CachedLoad(tmp_path / "cache")
    loader.build([src])
    hit = loader.run(src)
    assert hit.cache_hit is True and hit.tokens == DirectLoad().run(src).tokens
    write(src, "hello   there")  # same size, new content: only the hash can tell
    stale = loader.run(src)
    assert stale.cache_hit is False and loader.stale == 1
    assert stale.tokens == DirectLoad().run(src).tokens != hit.tokens
    assert loader.run(other).cache_hit is False and loader.misses == 1
    assert (loader.hits, loader.misses, loader.stale) == (1, 1, 1)
    assert not list((tmp_path / "cache").glob("*.tmp"))


def test_an_entry_another_preprocessing_wrote_is_stale(tmp_path, monkeypatch):
    """The key held the source's hash and size alone, so an entry written before a change to
    the preprocessing still validated and served the old tokens: after the byte-order-mark fix
    (06906bd) a cache built before it kept the BOM's 3 tokens that the direct loader drops."""
    src = tmp_path / "bom.txt"
    src.write_bytes(b"\xef\xbb\xbfhello")
    loader = CachedLoad(tmp_path / "cache")
    old_tokens = tuple(src.read_bytes())    # what the preprocessing gave before 06906bd
    old_key = {"sha256": hashlib.sha256(src.read_bytes()).hexdigest(), "size": 8}
    entry = {"source": str(src.resolve()), "key": old_key, "tokens": list(old_tokens)}
    loader.cache.entry_path(src).write_text(json.dumps(entry))
    result = loader.run(src)
    assert result.tokens == tuple(b"hello") and (result.cache_hit, loader.stale) == (False, 1)
    loader.build([src])
    assert loader.run(src).cache_hit is True
    monkeypatch.setattr(load, "PREPROCESS_VERSION", load.PREPROCESS_VERSION + 1, raising=False)
    bumped = CachedLoad(tmp_path / "cache")
    assert bumped.run(src).cache_hit is False and bumped.stale == 1


def test_corrupt_cache_entry_is_a_miss(tmp_path):
    src = write(tmp_path / "doc.txt", "abc")
    loader = CachedLoad(tmp_path / "cache")
    loader.build([src])
    loader.cache.entry_path(src).write_text("{not json")
    assert loader.run(src).tokens == tuple(b"abc") and loader.misses == 1


def test_an_entry_with_fields_of_the_wrong_type_is_no_entry(tmp_path):
    """JSON that parses but whose source is no path string, or whose key is no mapping, is
    not an entry: a lookup misses (it is not stale), and adoption leaves the file alone."""
    src = write(tmp_path / "doc.txt", "abc")
    folder = tmp_path / "cache"
    version = load.PREPROCESS_VERSION
    good_key = disk_cache.validation_key(src.read_bytes(), version)
    for source, key in ((str(src.resolve()), [good_key]), (7, good_key)):
        text = json.dumps({"source": source, "key": key, "tokens": [1]})
        loader = CachedLoad(folder)
        loader.cache.entry_path(src).write_text(text)
        assert loader.cache.lookup(src, src.read_bytes()) is None
        assert (loader.cache.misses, loader.cache.stale) == (1, 0)
        assert AdaptiveLoad(folder, capacity=2).cached_sources() == set()
        assert loader.cache.entry_path(src).read_text() == text


def test_a_cache_folder_is_created_with_its_missing_parents(tmp_path):
    src = write(tmp_path / "doc.txt", "abc")
    cache = disk_cache.DiskCache(tmp_path / "runs" / "7" / "cache", load.PREPROCESS_VERSION)
    cache.write(src, (1, 2), src.read_bytes())
    assert cache.lookup(src, src.read_bytes()) == (1, 2)


def test_a_failed_entry_write_raises_and_leaves_no_temp_file(tmp_path):
    """A write whose rename fails (here a folder sits where the entry goes) is reported, not
    swallowed, and its temp file does not stay behind."""
    src = write(tmp_path / "doc.txt", "abc")
    cache = disk_cache.DiskCache(tmp_path / "cache", load.PREPROCESS_VERSION)
    cache.entry_path(src).mkdir()
    with pytest.raises(OSError):
        cache.write(src, (1, 2, 3), src.read_bytes())
    assert [p.name for p in cache.dir.iterdir()] == [cache.entry_path(src).name]


def test_adaptive_cache_holds_the_most_requested_sources(tmp_path):
    srcs = {name: write(tmp_path / f"{name}.txt", f"text {name}") for name in "abcd"}
    loader = AdaptiveLoad(tmp_path / "cache", capacity=2, decay=1.0)
    for name in "abcabdabaacb":  # a:5, b:4, c:2, d:1
        assert loader.run(srcs[name]).tokens == DirectLoad().run(srcs[name]).tokens
    assert loader.cached_sources() == {srcs["a"].resolve(), srcs["b"].resolve()}
    assert len(list((tmp_path / "cache").glob("*.json"))) == 2
    hit = loader.run(srcs["a"])
    assert hit.cache_hit is True and hit.source == srcs["a"]
    write(srcs["b"], "text B changed")
    assert loader.run(srcs["b"]).tokens == tuple(b"text B changed") and loader.stale == 1


def test_adaptive_cache_follows_a_distribution_shift(tmp_path):
    srcs = [write(tmp_path / f"{i}.txt", f"doc {i}") for i in range(3)]
    loader = AdaptiveLoad(tmp_path / "cache", capacity=1, decay=0.5)
    for _ in range(5):
        loader.run(srcs[0])
    for _ in range(3):
        loader.run(srcs[2])
    assert loader.cached_sources() == {srcs[2].resolve()}
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1


def entry_files(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if disk_cache.ENTRY_NAME.fullmatch(p.name)}


def test_an_adaptive_cache_adopts_the_entries_a_previous_one_left(tmp_path):
    """A new loader on the same folder started with an empty index: it missed on what the
    previous process had cached, and never evicted it, so the folder outgrew its capacity."""
    srcs = [write(tmp_path / f"{i}.txt", f"doc {i}") for i in range(4)]
    folder = tmp_path / "cache"
    first = AdaptiveLoad(folder, capacity=2, decay=1.0)
    for i in (0, 0, 1):
        first.run(srcs[i])
    assert first.cached_sources() == {srcs[0].resolve(), srcs[1].resolve()}
    second = AdaptiveLoad(folder, capacity=2, decay=1.0)
    assert second.cached_sources() == first.cached_sources()
    assert second.run(srcs[1]).cache_hit is True and second.hits == 1
    for i in (2, 3, 3):
        assert second.run(srcs[i]).tokens == DirectLoad().run(srcs[i]).tokens
        assert len(entry_files(folder)) <= 2
    assert second.cached_sources() == {srcs[1].resolve(), srcs[3].resolve()}
    assert entry_files(folder) == {second.cache.entry_path(s).name for s in (srcs[1], srcs[3])}
    # the entries' ages as written (1.txt's first), set: a coarse file-system clock (a jiffy,
    # 1-10 ms, on ext4 before Linux 6.13) stamps two writes milliseconds apart alike, and a tie
    # goes to the source named first, 1.txt
    for age, src in enumerate((srcs[1], srcs[3])):
        stamp = time.time() - 1000 + age
        os.utime(second.cache.entry_path(src), (stamp, stamp))
    smaller = AdaptiveLoad(folder, capacity=1)   # a smaller cache keeps the newest entry
    assert smaller.cached_sources() == {srcs[3].resolve()} and len(entry_files(folder)) == 1


def test_adoption_drops_stale_and_half_written_entries_and_keeps_foreign_files(tmp_path):
    src, other = write(tmp_path / "a.txt", "a"), write(tmp_path / "b.txt", "b")
    folder = tmp_path / "cache"
    first = AdaptiveLoad(folder, capacity=2)
    first.run(src)
    first.run(other)
    half = folder / f"{disk_cache.TEMP_PREFIX}x{disk_cache.TEMP_SUFFIX}"
    half.write_text('{"source": ')
    old = time.time() - 2 * disk_cache.STALE_TEMP_S      # an interrupted write's leftover
    os.utime(half, (old, old))
    # a young temp file may be another live loader's write in progress: its rename must not
    # fail because a second loader opened the folder meanwhile
    writing = folder / f"{disk_cache.TEMP_PREFIX}y{disk_cache.TEMP_SUFFIX}"
    writing.write_text('{"source": ')
    # files that are no entry of this cache: left alone and not counted
    foreign = {"notes.txt": "mine", "0" * 32 + ".json": '{"not": "an entry"}',
               "1" * 32 + ".json": json.dumps({"source": str(src.resolve()),
                                               "key": {"version": load.PREPROCESS_VERSION},
                                               "tokens": [1]})}
    for name, text in foreign.items():
        (folder / name).write_text(text)
    entry = json.loads(first.cache.entry_path(src).read_text())
    entry["key"]["version"] = load.PREPROCESS_VERSION - 1   # the older preprocessing wrote it
    first.cache.entry_path(src).write_text(json.dumps(entry))
    second = AdaptiveLoad(folder, capacity=2)
    assert second.cached_sources() == {other.resolve()}
    assert not half.exists() and writing.exists() and not first.cache.entry_path(src).exists()
    assert all((folder / name).read_text() == text for name, text in foreign.items())
    assert second.run(other).cache_hit is True and second.run(src).cache_hit is False
    assert second.run(src).cache_hit is True and second.stale == 0



def test_adopted_entries_are_evicted_oldest_first(tmp_path):
    # Adopted entries all scored 0 and broke ties by path: the newest could go first.
    sources = [write(tmp_path / f"{name}.txt", name) for name in "xyz"]
    folder = tmp_path / "cache"
    first = AdaptiveLoad(folder, capacity=3)
    for age, src in enumerate(sources):     # x the oldest entry, z the newest
        first.run(src)
        stamp = time.time() - 1000 + age
        os.utime(first.cache.entry_path(src), (stamp, stamp))
    second = AdaptiveLoad(folder, capacity=3)
    second.run(write(tmp_path / "w.txt", "w"))
    assert second.cached_sources() == {tmp_path.resolve() / f"{n}.txt" for n in "wyz"}
    assert not second.cache.entry_path(sources[0]).exists()


def test_entries_written_in_the_same_instant_are_adopted_in_one_order(tmp_path, monkeypatch):
    """Newest first, and entries equally new in the order of their sources, whatever order
    the folder lists its files in: which adopted entry is evicted first is reproducible."""
    sources = [write(tmp_path / f"{name}.txt", name) for name in "qwertyu"]
    cache = disk_cache.DiskCache(tmp_path / "cache", load.PREPROCESS_VERSION)
    stamp = time.time() - 1000
    for src in sources:
        cache.write(src, (1,), src.read_bytes())
        os.utime(cache.entry_path(src), (stamp, stamp))
    listed = Path.iterdir
    orders = [[source for source, _ in cache.adopt()]]
    monkeypatch.setattr(Path, "iterdir", lambda self: reversed(list(listed(self))))
    orders.append([source for source, _ in cache.adopt()])
    assert orders[0] == orders[1] and sorted(orders[0]) == sorted(s.resolve() for s in sources)


def test_a_cached_request_reads_its_source_once(tmp_path, monkeypatch):
    """The cost model prices one read of the source per request (validation hashes it); the
    adaptive loader read a cached source twice, once to count the request and again to
    validate the entry."""
    src = write(tmp_path / "doc.txt", "some text")
    reads: list[Path] = []

    def read(path):
        reads.append(Path(path))
        return Path(path).read_bytes()

    monkeypatch.setattr(load, "read_from_disk", read)
    adaptive, cached = AdaptiveLoad(tmp_path / "adaptive"), CachedLoad(tmp_path / "cached")
    cached.build([src])
    reads.clear()
    assert [adaptive.run(src).cache_hit for _ in range(3)] == [False, True, True]
    assert cached.run(src).cache_hit is True
    assert len(reads) == 4


def test_a_failed_adaptive_request_leaves_the_statistics_alone(tmp_path):
    # A source that is not UTF-8 text is read, then refused by the preprocess; its requests
    # used to count, so it took the only slot (it can never be cached) and kept out a source
    # that loads.
    good = write(tmp_path / "good.txt", "good")
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\xff\xfe")
    loader = AdaptiveLoad(tmp_path / "cache", capacity=1, decay=1.0)
    for _ in range(3):
        with pytest.raises(ValueError, match="not valid UTF-8"):
            loader.run(bad)
    loader.run(good)
    assert loader.cached_sources() == {good.resolve()}
    assert loader.run(good).cache_hit is True
    assert bad.resolve() not in loader.scores


def test_adaptive_scores_stay_bounded_over_a_stream_of_distinct_sources(tmp_path):
    """The loader kept a score for every source it had ever seen: a long-running loader over
    a stream of distinct files grew without bound (and so did its per-request decay loop)."""
    hot = write(tmp_path / "hot.txt", "hot")
    loader = AdaptiveLoad(tmp_path / "cache", capacity=2, decay=1.0)
    bound = load.TRACKED_PER_SLOT * loader.capacity
    for i in range(5 * bound):
        if i % 4 == 0:
            loader.run(hot)
        loader.run(write(tmp_path / f"cold{i}.txt", f"cold {i}"))
        assert len(loader.scores) <= bound
    assert hot.resolve() in loader.cached_sources() and hot.resolve() in loader.scores
    assert loader.run(hot).cache_hit is True
    assert len(list((tmp_path / "cache").glob("*.json"))) <= loader.capacity


def test_a_source_requested_again_and_again_outranks_the_tracked_ones(tmp_path):
    """With every tracked score above 1 the bound forgot the requested source itself at each
    miss: it restarted at 1 every time and, with decay 1, was never cached however often it
    came (before the bound, its third request outranked sources requested twice)."""
    loader = AdaptiveLoad(tmp_path / "cache", capacity=1, decay=1.0)
    tracked = [write(tmp_path / f"old{i}.txt", f"old {i}")
               for i in range(load.TRACKED_PER_SLOT * loader.capacity)]
    for src in tracked * 2:          # each at 2, the bound full
        loader.run(src)
    new = write(tmp_path / "new.txt", "new")
    hits = [loader.run(new).cache_hit for _ in range(6)]
    assert hits == [False, False, False, True, True, True]     # admitted at 3 > 2
    assert len(loader.scores) <= load.TRACKED_PER_SLOT * loader.capacity


def test_a_source_whose_file_name_is_not_utf8_is_cached(tmp_path):
    """The entry's name hashed str(path).encode(): a POSIX file name that is not UTF-8 (its
    bytes decoded as surrogate escapes) raised UnicodeEncodeError in both cached loaders, with
    no path in the message, though the direct loader reads the file."""
    try:
        src = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"caf\xe9.txt")))
        src.write_text("hello")
    except (OSError, UnicodeError):
        pytest.skip("this file system refuses a file name that is not UTF-8")
    loader = CachedLoad(tmp_path / "cache")
    loader.build([src])
    assert loader.run(src).cache_hit is True
    adaptive = AdaptiveLoad(tmp_path / "adaptive")
    assert [adaptive.run(src).cache_hit for _ in range(2)] == [False, True]
    assert adaptive.run(src).tokens == DirectLoad().run(src).tokens == tuple(b"hello")

# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda d: WindowAttention(0), "window"),
        (lambda d: WindowAttention(2.5), "window"),
        (lambda d: DynamicAttention(-0.1), "threshold"),
        (lambda d: DynamicAttention(1.5), "threshold"),
        (lambda d: DynamicAttention(float("nan")), "threshold"),
        (lambda d: GatedAttention(window=0), "window"),
        (lambda d: GatedAttention(spread=2.0), "spread"),
        (lambda d: GatedAttention(mode="sometimes"), "mode"),
        (lambda d: GatedAttention(gate_tokens=-1), "gate_tokens"),
        (lambda d: GatedAttention(gate_tokens=2.5), "gate_tokens"),
        (lambda d: GatedAttention(gate_tokens="8192"), "gate_tokens"),
        (lambda d: GatedAttention(open_fraction=1.5), "open_fraction"),
        (lambda d: HierarchicalDecode(0), "block_size"),
        (lambda d: PrefetchedDecode(block_size=-1), "block_size"),
        (lambda d: PrefetchedDecode(lookahead=0), "lookahead"),
        (lambda d: AdaptiveLoad(d, capacity=0), "capacity"),
        (lambda d: HierarchicalDecode(seed=None), "seed"),
        (lambda d: PrefetchedDecode(seed=1.5), "seed"),
        (lambda d: HierarchicalDecode(seed=2**64 + 1), "seed"),
        (lambda d: TinyTransformer(TINY, seed=None), "seed"),
        (lambda d: TinyTransformer(TINY, seed=True), "seed"),
        (lambda d: HierarchicalDecode(seed=np.bool_(True)), "seed"),
    ],
)
def test_bad_parameters_name_the_field(make, field, tmp_path):
    with pytest.raises(ValueError, match=field):
        make(tmp_path)


def test_a_numpy_integer_seed_is_a_seed():
    """torch's manual_seed takes a numpy integer (e.g. drawn by rng.integers), so the checks at
    construction do too, and it seeds as the same Python int would."""
    a, b = TinyTransformer(TINY, seed=np.int64(3)), TinyTransformer(TINY, seed=3)
    assert torch.equal(a.embedding, b.embedding)
    assert HierarchicalDecode(seed=np.uint32(7)).seed == 7
    assert type(PrefetchedDecode(seed=np.int64(7)).seed) is int


@pytest.mark.parametrize(
    "tokens",
    [
        torch.zeros(1, 0, dtype=torch.long),
        torch.zeros(4, dtype=torch.long),
        torch.zeros(1, 2, 3, dtype=torch.long),
        torch.zeros(1, 4),
        torch.tensor([[1, 256]]),
        torch.tensor([[-1, 3]]),
        [[1, 2]],
    ],
)
def test_bad_tokens_name_the_field(model, tokens):
    for stage in (WindowAttention(4), DynamicAttention(), GatedAttention()):
        with pytest.raises(ValueError, match="tokens"):
            stage.run(model, tokens)


def test_a_prefill_refuses_what_is_no_tiny_model_naming_it():
    """A config or a name is not the model the kernels run: refused by argument, not an
    AttributeError from inside the forward pass."""
    for stage in (WindowAttention(4), DynamicAttention(), GatedAttention()):
        for not_a_model in (TINY, "tiny"):
            with pytest.raises(ValueError, match="model must be a TinyTransformer"):
                stage.run(not_a_model, prompt(1, 3))


def test_bad_max_new_tokens_and_missing_files(model, tmp_path):
    pre = WindowAttention(4).run(model, prompt(1, 3))
    for dec in (SequentialDecode(), HierarchicalDecode(), PrefetchedDecode()):
        with pytest.raises(ValueError, match="max_new_tokens"):
            dec.run(model, pre, 0)
    missing = tmp_path / "nope.txt"
    for loader in (DirectLoad(), CachedLoad(tmp_path / "c1"), AdaptiveLoad(tmp_path / "c2", 2)):
        with pytest.raises(FileNotFoundError, match="nope.txt"):
            loader.run(missing)


def test_a_decoder_refuses_a_model_or_prefill_it_cannot_extend(model):
    """Decoding needs the real tiny model and one (k, v) per layer of it: anything else is
    refused up front, naming the argument, not met by an error from inside the loop."""
    pre = WindowAttention(4).run(model, prompt(1, 3))
    one_layer_short = PrefillResult(pre.logits, pre.kv_cache[:-1], pre.hidden)
    for dec in (SequentialDecode(), HierarchicalDecode(), PrefetchedDecode()):
        with pytest.raises(ValueError, match="model"):
            dec.run(TINY, pre, 2)  # type: ignore[arg-type]
        for bad in (one_layer_short, pre.kv_cache):
            with pytest.raises(ValueError, match="prefill"):
                dec.run(model, bad, 2)  # type: ignore[arg-type]


def test_gate_decides_once_per_batch():
    """Window and dynamic attention treat each sequence alone; the gate pools the batch, so a
    sequence batched with another can take the other branch (as documented)."""
    model = TinyTransformer(TINY, seed=3)
    tokens = prompt(2, 12, seed=0)
    gated = GatedAttention(window=4, spread=0.8, threshold=0.3)
    for stage in (WindowAttention(4), DynamicAttention(0.3)):
        alone = torch.cat([stage.run(model, tokens[i:i + 1]).logits for i in range(2)])
        assert torch.allclose(stage.run(model, tokens).logits, alone, atol=1e-5)
    batched = gated.run(model, tokens).logits
    batch_log = list(gated.gate_log)
    alone_logs = []
    for i in range(2):
        gated.run(model, tokens[i:i + 1])
        alone_logs.append(list(gated.gate_log))
    assert len(batch_log) == TINY.n_layers and alone_logs[0] != alone_logs[1]
    assert batch_log != alone_logs[1]
    alone = torch.cat([GatedAttention(window=4, spread=0.8, threshold=0.3).run(
        model, tokens[i:i + 1]).logits for i in range(2)])
    assert not torch.allclose(batched, alone, atol=1e-3)


def test_the_cost_models_shape_counts_what_the_real_model_holds(model):
    """`n_params` is the real tiny model's matrices (embedding, Q/K/V/O, gated MLP, LM head;
    the norm vectors aside) and `kv_bytes_per_token` the K and V its prefill caches per token."""
    matrices = [model.embedding, model.lm_head]
    for layer in model.layers:
        matrices += [layer.wq, layer.wk, layer.wv, layer.wo, layer.w_gate, layer.w_up, layer.w_down]
    assert TINY.n_params == sum(w.numel() for w in matrices)
    batch, n = 2, 5
    cache = WindowAttention().run(model, prompt(batch, n)).kv_cache
    kv_elements = sum(k.numel() + v.numel() for k, v in cache)
    assert TINY.kv_bytes_per_token == kv_elements / (batch * n) * TINY.dtype_bytes


@pytest.mark.parametrize("m", [1, 2, 6])
def test_the_cost_model_prices_the_steps_the_real_decode_runs(model, m, monkeypatch):
    """The real decode takes its first token from the prefill's logits and runs m - 1 steps,
    each reading the cache so far; the cost model charged m steps (one weights stream and one
    context too many per task). Its KV bytes and weight streams are the real loop's reads."""
    batch, n = 2, 5
    reads: list[int] = []     # keys each step reads in layer 0
    real_read = kv_cache.ContiguousCache.read

    def read(self, layer, q):
        keys, values = real_read(self, layer, q)
        if layer == 0:
            reads.append(keys.shape[2])
        return keys, values

    monkeypatch.setattr(kv_cache.ContiguousCache, "read", read)
    tokens = SequentialDecode().run(model, WindowAttention().run(model, prompt(batch, n)), m)
    assert tokens.shape == (batch, m)
    assert reads == [n + j for j in range(1, m)]
    work = SequentialDecode().work(Task(batch, n, m), TINY)
    embedding = TINY.vocab * TINY.hidden * TINY.dtype_bytes   # a step reads b rows of it
    assert work.part("weights").fixed_bytes == len(reads) * (TINY.weight_bytes - embedding)
    assert work.part("weights").nbytes == len(reads) * batch * TINY.hidden * TINY.dtype_bytes
    assert work.part("kv").nbytes == batch * sum(reads) * TINY.kv_bytes_per_token
    assert work.footprint == batch * (n + len(reads)) * TINY.kv_bytes_per_token


def test_cache_entries_are_written_and_read_in_utf8_whatever_the_locale(tmp_path):
    """An entry was written and read in the locale's encoding (cp1252 on Windows, ASCII under
    LANG=C without UTF-8 mode), which `python -X warn_default_encoding` flags; its JSON is
    ASCII-escaped, so it read back, but UTF-8 is what every other file of ours is."""
    import subprocess
    import sys

    code = ("import sys, warnings\n"
            "from pathlib import Path\n"
            "from inference.stages import disk_cache, load\n"
            "src = Path(sys.argv[1])\n"
            "src.write_bytes(b'abc')\n"
            "cache = disk_cache.DiskCache(src.parent / 'cache', load.PREPROCESS_VERSION)\n"
            "warnings.simplefilter('error', EncodingWarning)\n"
            "cache.write(src, (1, 2), b'abc')\n"
            "assert cache.lookup(src, b'abc') == (1, 2)\n"
            "assert [s for s, _ in cache.adopt()] == [src.resolve()]\n")
    done = subprocess.run([sys.executable, "-X", "warn_default_encoding", "-c", code,
                           str(tmp_path / "doc.txt")], cwd=Path(__file__).parent.parent,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
