"""The analytic face of the stage implementations: how their work scales, and what it costs."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from inference.hardware import load_hardware
from inference.model_config import get_model
from inference.simulator import SimConfig, Simulator
from inference.stages.decode import (
    MISPREDICT_FRACTION,
    HierarchicalDecode,
    PrefetchedDecode,
    SequentialDecode,
    block_read_overhead,
)
from inference.stages.load import AdaptiveLoad, CachedLoad, DirectLoad
from inference.stages.prefill import (
    PAIR_WEIGHT_FLOPS,
    PAIR_WEIGHT_PASSES,
    QUERY_TILE,
    DynamicAttention,
    GatedAttention,
    WindowAttention,
)
from inference.task import Task
from inference.variants import COST_PARAMS, IMPLEMENTATIONS, VARIANTS, build_stages
from inference.work import TOKEN_ID_BYTES, StageWork, causal_pairs

GLM = get_model("glm-9b")
SERVER = load_hardware("server")
FEW = settings(max_examples=25, deadline=None)


def cost_instance(name: str):
    """The implementation as build_stages makes it: cost-model parameters for the 9B model."""
    for impls in IMPLEMENTATIONS.values():
        if name in impls:
            return impls[name](**COST_PARAMS.get(name, {}))
    raise KeyError(name)


def attention_flops(work: StageWork) -> float:
    return sum(p.flops for p in work.parts if p.tag == "attention")


def prompt(n: int, batch: int = 4, output: int = 64) -> Task:
    return Task(batch=batch, prompt_tokens=n, output_tokens=output)


# --- the merged classes --------------------------------------------------------------------


def test_build_stages_gives_the_real_classes_with_cost_parameters():
    load, prefill, decode = build_stages("glm-5.3-flash-opt")
    assert (type(load), type(prefill), type(decode)) == (AdaptiveLoad, GatedAttention,
                                                         PrefetchedDecode)
    assert prefill.window == 2048 and decode.block_size == 16
    assert WindowAttention().window == 64 and HierarchicalDecode().block_size == 4  # tiny defaults
    assert [build_stages(v)[0].cache_kind for v in VARIANTS] == [None, "precomputed", "adaptive"]


def test_cost_only_loaders_refuse_to_run(tmp_path):
    src = tmp_path / "doc.txt"
    src.write_text("hello")
    for loader in (CachedLoad(), AdaptiveLoad()):
        with pytest.raises(ValueError, match="cache_dir"):
            loader.run(src)
        assert loader.hits == loader.misses == loader.stale == 0
    with pytest.raises(ValueError, match="cache_dir"):
        CachedLoad().build([src])


def test_block_size_is_one_parameter_for_both_faces():
    task = prompt(4096)
    small, large = HierarchicalDecode(block_size=4), HierarchicalDecode(block_size=16)
    assert small.work(task, GLM).part("kv").nbytes > large.work(task, GLM).part("kv").nbytes


# --- prefill -------------------------------------------------------------------------------


def test_dynamic_attention_is_quadratic_window_attention_linear():
    short, long = prompt(8192), prompt(16384)
    dynamic, window = cost_instance("dynamic"), cost_instance("window")
    dyn_ratio = attention_flops(dynamic.work(long, GLM)) / attention_flops(dynamic.work(short, GLM))
    win_ratio = attention_flops(window.work(long, GLM)) / attention_flops(window.work(short, GLM))
    assert dyn_ratio >= 3.5
    assert win_ratio <= 2.2


def test_window_attention_equals_full_attention_cost_when_the_window_covers_the_prompt():
    task = prompt(1000)
    full = WindowAttention(window=1000).work(task, GLM).part("attention")
    assert WindowAttention(window=4000).work(task, GLM).part("attention") == full
    assert WindowAttention(window=100).work(task, GLM).part("attention").flops < full.flops


@FEW
@given(n=st.integers(1, 8192), batch=st.integers(1, 32))
@example(n=8192, batch=1)   # at the gate: still window attention only
def test_gated_equals_window_below_the_gate(n, batch):
    task = prompt(n, batch)
    gated, window = cost_instance("gated").work(task, GLM), cost_instance("window").work(task, GLM)
    assert n <= cost_instance("gated").gate_tokens
    assert [p for p in gated.parts if p.tag != "gate"] == list(window.parts)
    gate = gated.part("gate")
    assert gate.flops < 0.05 * window.flops   # the gate is a cheap probe
    # it scores every layer's hidden states, so it reads them all (it read one layer's)
    assert gate.nbytes == batch * n * GLM.hidden * GLM.dtype_bytes * GLM.n_layers


@pytest.mark.parametrize("n", [8193, 16384, 32768])
def test_gated_costs_more_than_window_above_the_gate_but_less_than_dynamic(n):
    task = prompt(n)
    gated = attention_flops(cost_instance("gated").work(task, GLM))
    assert attention_flops(cost_instance("window").work(task, GLM)) < gated
    assert gated < attention_flops(cost_instance("dynamic").work(task, GLM))


# --- decode --------------------------------------------------------------------------------


@FEW
@given(n=st.integers(1, 20000), m=st.integers(1, 2000), extra=st.integers(1, 2000),
       name=st.sampled_from(["sequential", "hierarchical", "prefetched"]))
def test_decode_bytes_grow_with_output_length(n, m, extra, name):
    decoder = cost_instance(name)
    shorter = decoder.work(Task(4, n, m), GLM)
    longer = decoder.work(Task(4, n, m + extra), GLM)
    assert longer.nbytes > shorter.nbytes
    assert longer.part("kv").nbytes > shorter.part("kv").nbytes


def test_block_decoders_read_more_kv_bytes_than_sequential():
    task = prompt(5000, 16, 256)
    seq = SequentialDecode().work(task, GLM).part("kv").nbytes
    hier = cost_instance("hierarchical").work(task, GLM).part("kv").nbytes
    pre = cost_instance("prefetched").work(task, GLM).part("kv").nbytes
    assert seq < hier < pre   # prefetching pays for mispredicted blocks in bytes, not locality


def test_block_decoders_extra_bytes_are_the_layouts_summaries_and_tables():
    """Per block, sequence and layer a step reads K and V (2 x 16 tokens x 2 KV heads x 128 x
    2 bytes = 16 KiB for the 9B config), its summary (one mean key: 1/32 of that) and its
    block-table entry (one int32: 4 bytes), not a calibrated 2% for the table."""
    block_kv = 2 * 16 * GLM.n_kv_heads * GLM.head_dim * GLM.dtype_bytes
    assert block_kv == 16384
    task = prompt(5000, 16, 256)
    seq = SequentialDecode().work(task, GLM).part("kv").nbytes
    hier = cost_instance("hierarchical").work(task, GLM).part("kv").nbytes
    pre = cost_instance("prefetched").work(task, GLM).part("kv").nbytes
    assert hier / seq == pytest.approx(1 + 1 / 32 + 4 / block_kv, rel=1e-12)
    assert pre / seq == pytest.approx(1 + 1 / 32 + 4 / block_kv + MISPREDICT_FRACTION, rel=1e-12)
    assert block_read_overhead(GLM, 16) == pytest.approx((1 / 32, 4 / block_kv), rel=1e-12)
    # a decoder prices the model and block size it is handed, not the last ones it priced
    tiny = get_model("tiny")
    tiny_block_kv = 2 * 16 * tiny.kv_dim * tiny.dtype_bytes
    decoder = HierarchicalDecode(block_size=16)
    assert decoder.work(task, GLM).part("kv").nbytes == hier
    ratio = (decoder.work(task, tiny).part("kv").nbytes
             / SequentialDecode().work(task, tiny).part("kv").nbytes)
    assert ratio == pytest.approx(1 + 1 / 32 + 4 / tiny_block_kv, rel=1e-12)
    decoder.block_size = 8
    assert (decoder.work(task, GLM).part("kv").nbytes / seq
            == pytest.approx(1 + 1 / 16 + 8 / block_kv, rel=1e-12))


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_hierarchical_decoding_stalls_on_memory_more_than_sequential(device):
    task = Task(16, 5000, 256)

    def run(decode: str):
        recipe = {"load": "direct", "prefill": "window", "decode": decode}
        return Simulator(SERVER, GLM, build_stages(recipe)).execute(task, (device,) * 3)

    seq, hier, pre = run("sequential"), run("hierarchical"), run("prefetched")
    assert hier.memory_stall > seq.memory_stall
    assert hier.kv_wait > seq.kv_wait
    assert seq.latency < hier.latency
    assert pre.kv_wait < hier.kv_wait   # prediction restores sequential access


# --- load ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cached", "adaptive"])
def test_a_cache_hit_saves_about_40_percent_and_a_miss_costs_more(name):
    task = Task(16, 5000, 256)
    loader = cost_instance(name)
    direct = DirectLoad().load_work(task, GLM).flops
    hit, miss = loader.load_work(task, GLM, True), loader.load_work(task, GLM, False)
    assert 0.5 <= hit.flops / direct <= 0.7
    assert miss.flops > direct
    assert miss.nbytes > DirectLoad().load_work(task, GLM).nbytes
    assert loader.work(task, GLM) == miss   # `work` knows no cache state: it assumes a miss


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_a_simulated_cache_hit_loads_faster_than_direct_and_a_miss_slower(device):
    task, placement = Task(16, 5000, 256, domain=3), (device, "gpu", "gpu")

    def load_time(variant: str, cached_domains: tuple[int, ...] = ()) -> float:
        config = SimConfig(precomputed_domains=cached_domains)
        sim = Simulator(SERVER, GLM, build_stages(variant), config)
        return sim.execute(task, placement).load

    direct = load_time("glm-5.3")
    assert load_time("glm-5.3-flash", cached_domains=(3,)) < direct
    assert load_time("glm-5.3-flash", cached_domains=(4,)) > direct


def test_gated_prefill_launches_the_window_kernels_only_in_the_layers_it_keeps() -> None:
    """Past gate_tokens, the open layers ran dynamic attention, but the window part still
    launched its kernels in every layer (80 + 60 launches instead of 60 + 60)."""
    model = get_model("glm-9b")
    gated = GatedAttention(gate_tokens=8192, open_fraction=0.25)
    launches = [p.launches for p in gated.work(Task(4, 12000, 64), model).parts
                if p.tag == "attention"]                      # window part, dynamic part
    window = WindowAttention()
    full = [p.launches for p in window.work(Task(4, 12000, 64), model).parts
            if p.tag == "attention"][0]
    assert sum(launches) == pytest.approx(full * 0.75 + 6.0 * model.n_layers * 0.25)
    assert min(launches) == pytest.approx(full * 0.75)     # the window's, in 3 of 4 layers


# --- the formulas against their definitions ------------------------------------------------


@FEW
@given(n=st.integers(1, 300), window=st.one_of(st.none(), st.integers(1, 400)))
def test_causal_pairs_counts_the_keys_each_query_sees(n, window):
    """Query i (1-based) sees its i causal keys, at most `window` of them."""
    seen = [i if window is None else min(i, window) for i in range(1, n + 1)]
    assert causal_pairs(n, window) == sum(seen)


@pytest.mark.parametrize("model", [GLM, get_model("tiny")], ids=lambda m: m.name)
def test_flops_are_two_per_multiply_add(model):
    """Dense work: 2 FLOPs per weight a token meets (every weight but the embedding table, the
    LM head only for the prompt's last token); attention: QK^T and AV, 2 x head_dim each, per
    (query, key) pair, head and layer."""
    b, n, m = 3, 200, 5
    matmul_weights = model.n_params - model.vocab * model.hidden   # the embedding is a lookup
    head = model.vocab * model.hidden
    full = WindowAttention(window=n).work(Task(b, n, m), model)
    assert full.part("dense").flops == pytest.approx(
        2 * b * (n * (matmul_weights - head) + head), rel=1e-12)
    pair = 4 * model.head_dim * model.n_heads * model.n_layers
    assert full.part("attention").flops == pytest.approx(b * n * (n + 1) / 2 * pair, rel=1e-12)
    decode = SequentialDecode().work(Task(b, n, m), model)
    # the first token comes from the prefill's logits: m - 1 steps, step j over n + j keys
    assert decode.part("weights").flops == pytest.approx(2 * b * (m - 1) * matmul_weights,
                                                         rel=1e-12)
    contexts = b * sum(n + j for j in range(1, m))
    assert decode.part("kv").flops == pytest.approx(contexts * pair, rel=1e-12)


@pytest.mark.parametrize("name", ["sequential", "hierarchical", "prefetched"])
def test_each_decode_step_reads_the_whole_context_so_far(name):
    """The first token comes from the prefill's logits; step j (1 .. m - 1) appends token j
    and reads the KV cache of the prompt and the j tokens so far: one token more reads n + m
    more tokens' KV, and one token alone runs no step."""
    decoder, b, n = cost_instance(name), 3, 700
    per_token = decoder.work(Task(b, n, 2), GLM).part("kv").nbytes / (b * (n + 1))
    assert per_token >= GLM.kv_bytes_per_token    # block variants read tables on top
    for m in (1, 2, 17):
        grown = (decoder.work(Task(b, n, m + 1), GLM).part("kv").nbytes
                 - decoder.work(Task(b, n, m), GLM).part("kv").nbytes)
        assert grown == pytest.approx(b * (n + m) * per_token, rel=1e-12)
    one = decoder.work(Task(b, n, 1), GLM)
    assert one.part("kv").nbytes == one.part("weights").fixed_bytes == 0.0
    assert SequentialDecode().work(Task(b, n, 2), GLM).part("kv").nbytes == \
        b * (n + 1) * GLM.kv_bytes_per_token


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_each_stage_hands_on_and_holds_what_its_successor_reads(variant):
    """Load hands on the prompts' token ids, prefill their KV cache (which it holds while it
    runs), decode the generated ids; decode holds the KV cache of the sequences it extends to
    (the last token is never fed back); prefill streams the weights once, decode once per
    token after the first (which the prefill's logits give)."""
    b, n, m = 3, 900, 40
    task = Task(b, n, m)
    load, prefill, decode = build_stages(variant)
    for hit in (False, True):
        assert load.load_work(task, GLM, hit).output_bytes == b * n * TOKEN_ID_BYTES
    pre = prefill.work(task, GLM)
    assert pre.output_bytes == b * n * GLM.kv_bytes_per_token
    assert pre.footprint > pre.output_bytes
    assert pre.part("dense").fixed_bytes == GLM.weight_bytes
    dec = decode.work(task, GLM)
    assert dec.output_bytes == b * m * TOKEN_ID_BYTES
    copies = 2 if decode.name == "prefetched" else 1      # the pool and the staging buffer
    assert dec.footprint == copies * b * (n + m - 1) * GLM.kv_bytes_per_token
    # every weight once a step, but of the input embedding table only the b tokens' rows
    embedding = GLM.vocab * GLM.hidden * GLM.dtype_bytes
    assert dec.part("weights").fixed_bytes == (m - 1) * (GLM.weight_bytes - embedding)
    assert dec.part("weights").nbytes == (m - 1) * b * GLM.hidden * GLM.dtype_bytes


@pytest.mark.parametrize("name", ["cached", "adaptive"])
def test_a_cached_loader_does_the_direct_work_on_a_miss_and_reads_the_entry_on_a_hit(name):
    """A miss validates, then preprocesses as the direct loader does, holding its intermediates
    beside the direct loader's buffers; a hit reads the entry (the token ids) beside the source.
    Only the adaptive loader tracks requests, on hits and misses alike."""
    task, loader = Task(5, 3000, 8), cost_instance(name)
    direct = DirectLoad().load_work(task, GLM)
    miss, hit = loader.load_work(task, GLM, False), loader.load_work(task, GLM, True)
    assert miss.part("preprocess") == direct.part("preprocess")
    assert miss.footprint == direct.footprint + miss.part("intermediates").nbytes
    assert miss.io_bytes == direct.io_bytes
    assert hit.io_bytes == direct.io_bytes + hit.output_bytes
    tracks = name == "adaptive"
    for work in (hit, miss):
        assert ("track" in [p.tag for p in work.parts]) == tracks


@pytest.mark.parametrize("n", [1, QUERY_TILE, QUERY_TILE + 1, 5 * QUERY_TILE])
def test_fused_attention_streams_the_keys_once_per_tile_of_queries(n):
    """Window attention reads Q and writes O of every token in every layer, and streams the
    window's K/V once per started tile of QUERY_TILE queries (a short prompt: once)."""
    b, window = 2, 4 * QUERY_TILE
    tiles = math.ceil(n / QUERY_TILE)
    qo = 2 * n * GLM.hidden * GLM.dtype_bytes * GLM.n_layers
    kv = tiles * min(n, window) * GLM.kv_bytes_per_token
    part = WindowAttention(window=window).work(Task(b, n, 1), GLM).part("attention")
    assert part.nbytes == pytest.approx(b * (qo + kv), rel=1e-12)


@pytest.mark.parametrize("model", [GLM, get_model("tiny")], ids=lambda m: m.name)
def test_dynamic_attention_weighs_every_causal_pair_however_few_keys_survive(model):
    """Per causal (query, key) pair, head and layer, dynamic attention does full attention's
    QK^T and AV (2 x head_dim FLOPs each) plus the relevance MLP and selection; it writes the
    pair's weight once and reads it twice (select, normalise), in the model's dtype."""
    b, n = 3, 200
    pairs = b * causal_pairs(n) * model.n_heads * model.n_layers
    for threshold in (0.0, 0.5):   # the selection's cut-off saves nothing: the weights are built
        part = DynamicAttention(threshold).work(Task(b, n, 4), model).part("attention")
        assert part.flops == pytest.approx(pairs * (4 * model.head_dim + PAIR_WEIGHT_FLOPS),
                                           rel=1e-12)
        assert part.nbytes == pytest.approx(pairs * model.dtype_bytes * PAIR_WEIGHT_PASSES,
                                            rel=1e-12)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("n", [1000, 12000])   # below and above the gate's 8192 tokens
def test_prefill_streams_the_weights_once_whatever_its_attention(variant, n):
    """The weights are read in the dense part; attention, gate and pair weights read only
    activations and the KV cache, so the stage's fixed bytes are the weights, once."""
    work = build_stages(variant)[1].work(prompt(n), GLM)
    assert sum(p.fixed_bytes for p in work.parts) == GLM.weight_bytes


@pytest.mark.parametrize("fraction", [0.25, 0.5, 1.0])
def test_gated_prefill_above_the_gate_is_window_and_dynamic_attention_layer_by_layer(fraction):
    """Past gate_tokens, `open_fraction` of the layers run dynamic attention and the rest
    window attention: each part is that share of the variant's whole-model attention."""
    task = prompt(12000)
    gated = GatedAttention(window=2048, open_fraction=fraction).work(task, GLM)
    window = WindowAttention(window=2048).work(task, GLM).part("attention")
    dynamic = DynamicAttention().work(task, GLM).part("attention")
    kept, opened = [p for p in gated.parts if p.tag == "attention"]
    assert (kept.op, opened.op) == (window.op, dynamic.op)
    for part, whole, share in ((kept, window, 1 - fraction), (opened, dynamic, fraction)):
        for field in ("flops", "nbytes", "launches"):
            assert getattr(part, field) == pytest.approx(share * getattr(whole, field), rel=1e-12)


def test_decode_launches_its_kernels_per_layer_and_step():
    """A step launches the same weight kernels in every layer whatever the decoder, and its KV
    kernels once per layer (sequential) or twice (block decoders: score the block summaries,
    then gather); no step (one token) launches nothing."""
    b, n = 2, 300
    small, big = get_model("tiny"), GLM
    for model in (small, big):
        for name, kv_launches in (("sequential", 1), ("hierarchical", 2), ("prefetched", 2)):
            decoder = cost_instance(name)
            one = decoder.work(Task(b, n, 1), model)
            assert one.launches == 0.0
            per_step = [decoder.work(Task(b, n, m), model).launches
                        - decoder.work(Task(b, n, m - 1), model).launches for m in (3, 40)]
            weights = SequentialDecode().work(Task(b, n, 2), model).part("weights").launches
            assert per_step == pytest.approx([weights + kv_launches * model.n_layers] * 2,
                                             rel=1e-12)
    per_layer = [SequentialDecode().work(Task(b, n, 2), model).part("weights").launches
                 / model.n_layers for model in (small, big)]
    assert per_layer[0] == pytest.approx(per_layer[1], rel=1e-12)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_only_loading_reads_the_disk_and_only_the_model_stages_stream_weights(variant):
    """Loading reads the source (and on a hit the entry) from disk and never touches the
    weights; prefill and decode read nothing from disk, and decode streams the weights once
    per step (of the input embedding table only its tokens' rows), in its weights part (the KV
    reads carry no fixed bytes)."""
    task = Task(3, 900, 40)
    load, prefill, decode = build_stages(variant)
    for hit in (False, True):
        work = load.load_work(task, GLM, hit)
        assert not work.needs_weights
        assert all(p.fixed_bytes == 0.0 for p in work.parts)
    for work in (prefill.work(task, GLM), decode.work(task, GLM)):
        assert work.io_bytes == 0.0 and work.needs_weights
    dec = decode.work(task, GLM)
    embedding = GLM.vocab * GLM.hidden * GLM.dtype_bytes
    steps = task.output_tokens - 1
    assert sum(p.fixed_bytes for p in dec.parts) == steps * (GLM.weight_bytes - embedding)
    # the weights are paid in full by each device (fixed bytes); only the input embedding's
    # rows are per sequence, so a device given part of the batch reads its sequences' rows
    assert dec.part("weights").nbytes == steps * task.batch * GLM.hidden * GLM.dtype_bytes


@pytest.mark.parametrize("name", ["cached", "adaptive"])
def test_a_cache_hit_reads_and_lays_out_the_entry_beside_the_source(name):
    """A hit holds what it read (the source, to validate it, and the entry) and moves the
    entry's token ids twice (read, then laid out); validating and applying launch a kernel
    each, as the miss path's validation and preprocess do. Holding the miss path's
    intermediates is memory, not arithmetic."""
    task, loader = Task(5, 3000, 8), cost_instance(name)
    hit, miss = loader.load_work(task, GLM, True), loader.load_work(task, GLM, False)
    assert hit.footprint == hit.io_bytes == DirectLoad().load_work(task, GLM).io_bytes + \
        hit.output_bytes
    assert hit.part("apply").nbytes == 2 * hit.output_bytes
    for work, steps in ((hit, ("validate", "apply")), (miss, ("validate", "preprocess"))):
        assert work.launches == len(steps)
        assert all(work.part(tag).launches == 1 for tag in steps)
    assert miss.part("intermediates").flops == 0.0


def test_a_block_decoder_prices_its_new_block_size_on_the_model_it_priced_before():
    """The block overhead is computed once per (model, block size): a block size changed
    after a run on the same model is priced afresh, not with the old size's overhead."""
    task = prompt(5000, 16, 256)
    decoder = HierarchicalDecode(block_size=16)
    decoder.work(task, GLM)
    decoder.block_size = 8
    assert decoder.work(task, GLM) == HierarchicalDecode(block_size=8).work(task, GLM)

