"""The discrete-event simulator: latency, its breakdown and the state carried between tasks."""

from __future__ import annotations

import dataclasses
import itertools
import re

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from inference.hardware import Hardware, Link, load_hardware
from inference.model_config import get_model
from inference.simulator import MIN_CACHE_DECAY, SimConfig, Simulator, TaskResult
from inference.task import MAX_ARRIVAL, Task
from inference.variants import VARIANTS, build_stages

SERVER = load_hardware("server")
EDGE = load_hardware("edge")
GLM = get_model("glm-9b")
ARTICLE = Task(batch=16, prompt_tokens=5000, output_tokens=256)
CPU, GPU, NPU = (SERVER.device_id(n) for n in ("cpu", "gpu", "npu"))
SINGLE = list(itertools.product(range(3), repeat=3))
FEW = settings(max_examples=30, deadline=None)


def simulator(variant: str = "glm-5.3", hardware=SERVER, config: SimConfig | None = None):
    return Simulator(hardware, GLM, build_stages(variant), config)


def parts_sum(result: TaskResult) -> float:
    return sum(result.breakdown().values())


# a fraction placement: 3 stages x 3 devices, each stage with at least one positive share
fractions = st.lists(
    st.lists(st.integers(0, 4), min_size=3, max_size=3).map(
        lambda row: row if any(row) else [1, 0, 0]
    ),
    min_size=3, max_size=3,
).map(lambda m: np.asarray(m, dtype=float))
placements = st.one_of(st.sampled_from(SINGLE), fractions)


@FEW
@given(
    variant=st.sampled_from(list(VARIANTS)),
    hardware=st.sampled_from([SERVER, EDGE]),
    placement=st.sampled_from(SINGLE),
    batch=st.integers(1, 64), n=st.integers(1, 20000), m=st.integers(1, 1000),
    grow=st.sampled_from(["batch", "prompt_tokens", "output_tokens"]),
    extra=st.integers(1, 4000),
)
def test_latency_is_positive_and_non_decreasing_in_task_size(
    variant, hardware, placement, batch, n, m, grow, extra
):
    task = Task(batch, n, m)
    bigger = dataclasses.replace(task, **{grow: getattr(task, grow) + extra})
    small = simulator(variant, hardware).execute(task, placement).latency
    large = simulator(variant, hardware).execute(bigger, placement).latency
    assert 0 < small <= large


def test_a_busy_device_delays_the_start():
    shared = simulator()
    first = shared.execute(ARTICLE, ("gpu", "gpu", "gpu"))
    assert first.queue == 0
    second = shared.execute(ARTICLE, ("gpu", "gpu", "gpu"))   # also arrives at t = 0
    assert second.queue > 0.5 * first.latency
    assert second.latency > first.latency
    disjoint = simulator()
    disjoint.execute(ARTICLE, ("gpu", "gpu", "gpu"))
    other = disjoint.execute(ARTICLE, ("cpu", "npu", "npu"))
    assert other.queue < second.queue


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_transfer_is_charged_exactly_when_consecutive_stages_change_device(variant):
    assert simulator(variant).execute(ARTICLE, ("gpu", "gpu", "gpu")).transfer == 0
    assert simulator(variant).execute(ARTICLE, ("cpu", "gpu", "npu")).transfer > 0
    # one hop: the tokens the loader hands over cross the cpu-gpu link, nothing else
    sim = simulator(variant)
    tokens = sim.stages[0].work(ARTICLE, GLM).output_bytes
    one_hop = sim.execute(ARTICLE, ("cpu", "gpu", "gpu")).transfer
    assert one_hop == pytest.approx(SERVER.link(CPU, GPU).time(tokens), rel=1e-12)


@FEW
@given(
    variant=st.sampled_from(list(VARIANTS)),
    hardware=st.sampled_from([SERVER, EDGE]),
    steps=st.lists(
        st.tuples(placements, st.integers(1, 32), st.integers(1, 12000), st.integers(1, 600),
                  st.floats(0, 5)),
        min_size=1, max_size=4,
    ),
    overhead=st.sampled_from([0.0, 0.02]),
    prefetch=st.integers(0, 2),
    seed=st.integers(0, 10),
)
def test_breakdown_parts_add_up_to_the_latency(variant, hardware, steps, overhead, prefetch,
                                               seed):
    config = SimConfig(prefetch_depth=prefetch, replacement_overhead_s=overhead,
                       resident=("cpu",))
    sim = simulator(variant, hardware, config)
    rng = np.random.default_rng(seed)
    arrival = 0.0
    used = np.zeros(sim.n_devices)
    for placement, batch, n, m, gap in steps:
        arrival += gap
        result = sim.execute(Task(batch, n, m, arrival=arrival), placement, rng, noise_sigma=0.1)
        assert result.latency > 0
        assert parts_sum(result) == pytest.approx(result.latency, rel=1e-9)
        assert min(result.breakdown().values()) >= 0
        used += result.busy
    # the cluster's device time is its tasks' (noise, set-up and synchronous reads included)
    assert sim.state.busy_time == pytest.approx(used.tolist(), rel=1e-9)


def test_true_and_nominal_figures_differ_where_the_profile_says():
    ratios = {d.name: d.speed_ratio for d in SERVER.devices}
    assert ratios["npu"] == pytest.approx(1.15, abs=0.01)
    assert ratios["cpu"] == ratios["gpu"] == 1.0
    nominal = SERVER.nominal_view()
    assert all(d.speed_ratio == 1.0 for d in nominal.devices)
    on_npu = ("npu", "npu", "npu")
    true_npu = simulator().execute(ARTICLE, on_npu).latency
    believed_npu = Simulator(nominal, GLM, build_stages("glm-5.3")).execute(ARTICLE, on_npu).latency
    assert true_npu < believed_npu
    on_gpu = ("gpu", "gpu", "gpu")
    believed_gpu = Simulator(nominal, GLM, build_stages("glm-5.3")).execute(ARTICLE, on_gpu)
    assert simulator().execute(ARTICLE, on_gpu).latency == believed_gpu.latency


def test_noise_is_reproducible_from_the_seed():
    def noisy(seed: int) -> TaskResult:
        rng = np.random.default_rng(seed)
        return simulator("glm-5.3-flash").execute(ARTICLE, ("cpu", "gpu", "gpu"), rng=rng,
                                                  noise_sigma=0.1)

    a, b, c = noisy(7), noisy(7), noisy(8)
    assert a.latency == b.latency and a.breakdown() == b.breakdown()
    assert a.latency != c.latency
    quiet = simulator("glm-5.3-flash").execute(ARTICLE, ("cpu", "gpu", "gpu"))
    assert a.latency != quiet.latency
    # without noise the caller's Generator is left alone: what it draws next is the same
    rng, untouched = np.random.default_rng(7), np.random.default_rng(7)
    silent = simulator("glm-5.3-flash").execute(ARTICLE, ("cpu", "gpu", "gpu"), rng=rng,
                                                noise_sigma=0.0)
    assert silent.latency == quiet.latency
    assert rng.random() == untouched.random()


def test_splitting_prefill_between_gpu_and_npu_beats_the_slower_device():
    split = np.zeros((3, 3))
    split[0, CPU], split[1, GPU], split[1, NPU], split[2, GPU] = 1.0, 0.5, 0.5, 1.0
    both = simulator().execute(ARTICLE, split)
    gpu = simulator().execute(ARTICLE, ("cpu", "gpu", "gpu"))
    npu = simulator().execute(ARTICLE, ("cpu", "npu", "gpu"))
    assert both.stage_time[1] < max(gpu.stage_time[1], npu.stage_time[1])
    assert both.latency < max(gpu.latency, npu.latency)
    assert both.busy[GPU] > 0 and both.busy[NPU] > 0


def test_a_dry_run_leaves_the_state_unchanged():
    sim = simulator("glm-5.3-flash-opt", config=SimConfig(resident=("cpu",)))
    sim.execute(ARTICLE, ("cpu", "gpu", "gpu"))
    before = sim.state.copy()
    later = Task(16, 5000, 256, domain=5, arrival=1.0)
    shares = sim.shares(("npu", "npu", "npu"))   # would migrate weights, track a domain
    dry = sim.run(later, shares, commit=False)
    assert sim.state == before
    booked = sim.run(later, shares)
    assert booked.latency == dry.latency
    assert sim.state != before


def test_the_adaptive_cache_follows_a_skewed_stream_the_precomputed_one_does_not():
    rng = np.random.default_rng(0)
    weights = 1.0 / np.arange(1, 41) ** 1.3
    stream = rng.choice(40, size=400, p=weights / weights.sum())
    # the precomputed cache was built offline on a different distribution's domains
    config = SimConfig(precomputed_domains=tuple(range(30, 38)), cache_capacity=8)

    def hit_rate(variant: str) -> float:
        sim = simulator(variant, config=config)
        shares = sim.shares(("cpu", "gpu", "gpu"))
        hits = [sim.run(Task(16, 5000, 256, domain=int(d)), shares).cache_hit for d in stream]
        assert sim.state.lookups == len(stream) and sim.state.hits == sum(hits)
        return sum(hits) / len(hits)

    precomputed, adaptive = hit_rate("glm-5.3-flash"), hit_rate("glm-5.3-flash-opt")
    assert precomputed < 0.15
    assert adaptive > precomputed + 0.3


def test_weights_migrate_once_to_a_non_resident_device():
    sim = simulator(config=SimConfig(resident=("cpu",)))
    assert sim.state.resident == [True, False, False]
    placement = ("cpu", "gpu", "gpu")
    first = sim.execute(ARTICLE, placement)
    second = sim.execute(dataclasses.replace(ARTICLE, arrival=first.finish + 1.0), placement)
    third = sim.execute(dataclasses.replace(ARTICLE, arrival=second.finish + 1.0), placement)
    link = SERVER.link(CPU, GPU)
    migration = min(link.time(GLM.weight_bytes), GLM.weight_bytes / SERVER.disk_bandwidth)
    assert first.transfer - second.transfer == pytest.approx(migration, rel=1e-9)
    assert third.transfer == pytest.approx(second.transfer, rel=1e-12)
    assert first.latency - second.latency == pytest.approx(migration, rel=1e-6)
    assert sim.state.resident == [True, True, False]


def test_a_placement_change_charges_the_new_devices_set_up_once():
    config = SimConfig(replacement_overhead_s=0.2)
    setup = {d.name: d.setup_s + config.replacement_overhead_s for d in SERVER.devices}
    assert setup["npu"] > setup["gpu"] > 0      # the server's figures: 4.2 s and 0.7 s
    sim = simulator(config=config)
    arrival = 0.0

    def step(placement):
        nonlocal arrival
        result = sim.execute(dataclasses.replace(ARTICLE, arrival=arrival), placement)
        arrival = result.finish + 100.0          # the next task finds the cluster idle
        assert parts_sum(result) == pytest.approx(result.latency, rel=1e-12)
        return result

    first = step(("cpu", "gpu", "gpu"))
    assert first.overhead == 0                   # nothing ran before the first task
    assert step(("cpu", "gpu", "gpu")).overhead == 0     # a static placement never pays
    moved = step(("cpu", "npu", "gpu"))          # prefill moves gpu -> npu
    assert moved.overhead == pytest.approx(setup["npu"], rel=1e-12)
    # the set-up keeps the npu busy and delays the task by exactly that much: the stage's
    # own time is what the same placement takes on a cluster that pays no set-up
    fresh = simulator(config=config).execute(ARTICLE, ("cpu", "npu", "gpu"))
    assert fresh.overhead == 0
    assert moved.latency - fresh.latency == pytest.approx(setup["npu"], rel=1e-9)
    assert moved.busy[NPU] - fresh.busy[NPU] == pytest.approx(setup["npu"], rel=1e-9)
    assert moved.busy[GPU] == pytest.approx(fresh.busy[GPU], rel=1e-12)
    assert moved.stage_time == pytest.approx(fresh.stage_time, rel=1e-12)
    assert step(("cpu", "npu", "gpu")).overhead == 0     # paid once, not again
    # back to the gpu: it ran prefill two tasks ago, not for the previous task, so it pays
    assert step(("cpu", "gpu", "gpu")).overhead == pytest.approx(setup["gpu"], rel=1e-12)
    # every stage moves: one set-up per stage, each on its new device
    all_moved = step(("npu", "cpu", "npu"))
    expected = setup["npu"] + setup["cpu"] + setup["npu"]
    assert all_moved.overhead == pytest.approx(expected, rel=1e-12)
    # a split prefill after cpu-only prefill: only the gpu, new to the stage, is set up
    split = np.zeros((3, 3))
    split[0, NPU], split[1, CPU], split[1, GPU], split[2, NPU] = 1.0, 0.5, 0.5, 1.0
    shared = step(split)
    alone = simulator(config=config).execute(ARTICLE, split)
    assert shared.busy[GPU] - alone.busy[GPU] == pytest.approx(setup["gpu"], rel=1e-9)
    assert shared.busy[CPU] == pytest.approx(alone.busy[CPU], rel=1e-12)
    assert shared.busy[NPU] == pytest.approx(alone.busy[NPU], rel=1e-12)


def test_without_set_up_costs_a_placement_change_is_free():
    free = SERVER
    for name in free.device_names:
        free = free.with_device(name, setup_s=0.0)
    sim = simulator(hardware=free)
    sim.execute(ARTICLE, ("cpu", "gpu", "gpu"))
    later = dataclasses.replace(ARTICLE, arrival=1e4)
    moved = sim.execute(later, ("npu", "npu", "cpu"))
    fresh = simulator(hardware=free).execute(ARTICLE, ("npu", "npu", "cpu"))
    assert moved.overhead == 0
    assert moved.latency == pytest.approx(fresh.latency, rel=1e-12)
    assert parts_sum(moved) == pytest.approx(moved.latency, rel=1e-12)
    # the same change on the server's own figures is set up
    sim = simulator()
    sim.execute(ARTICLE, ("cpu", "gpu", "gpu"))
    assert sim.execute(later, ("npu", "npu", "cpu")).overhead > 0


def _own_stage_seconds(work, device, slow: float = 1.0) -> float:
    """A stage's time on `device` from work.py's documented formula, each part's memory time
    stretched by `slow`: sum of max(flops / (peak * op_eff), slow * bytes / (bw * pattern_eff))
    plus launches * launch overhead."""
    from inference.hardware import OP_CLASSES, PATTERNS

    total = 0.0
    for part in work.parts:
        comp = part.flops / (device.peak_flops * device.op_efficiency[OP_CLASSES[part.op]])
        mem = ((part.nbytes + part.fixed_bytes)
               / (device.mem_bandwidth * device.pattern_efficiency[PATTERNS[part.pattern]]))
        total += max(comp, slow * mem) + part.launches * device.launch_overhead
    return total


@pytest.mark.parametrize("contention", [1.0, 0.5])
def test_memory_domain_peers_contend_for_bandwidth_while_they_overlap(contention):
    """Edge SoC: one memory domain. A long decode on the gpu is still running when a short task
    decodes on the npu, so the npu's memory-bound decode loses bandwidth to its peer throughout:
    each part's memory time grows by (1 + contention)."""
    from inference.hardware import PRESET_DIR, hardware_from_dict
    from inference.yamlio import load_yaml_file

    raw = load_yaml_file(PRESET_DIR / "edge.yaml", "hardware preset")
    assert len({d["memory_domain"] for d in raw["devices"]}) == 1     # one shared domain
    shared = hardware_from_dict(raw, "edge")
    apart_raw = dict(raw, devices=[dict(d, memory_domain=d["name"]) for d in raw["devices"]])
    apart = hardware_from_dict(apart_raw, "edge-apart")
    long_task, short_task = Task(16, 4096, 1024), Task(1, 256, 16)

    def npu_decode(hardware, c: float):
        sim = simulator("glm-5.3", hardware, SimConfig(contention=c))
        busy = sim.execute(long_task, ("gpu", "gpu", "gpu"))
        small = sim.execute(short_task, ("npu", "npu", "npu"))     # also arrives at t = 0
        assert busy.finish > small.finish     # the gpu is busy throughout the npu's decode
        return small.stage_time[2]

    npu = shared.devices[shared.device_id("npu")]
    work = build_stages("glm-5.3")[2].work(short_task, GLM)
    weights = work.part("weights")
    # the decode streams the weights: memory bound on the npu
    assert (weights.fixed_bytes / (npu.mem_bandwidth * npu.pattern_efficiency["sequential"])
            > 10 * weights.flops / (npu.peak_flops * npu.op_efficiency["dense"]))
    alone = _own_stage_seconds(work, npu)
    contended = _own_stage_seconds(work, npu, slow=1.0 + contention)
    assert npu_decode(shared, 0.0) == pytest.approx(alone, rel=1e-9)
    assert npu_decode(apart, contention) == pytest.approx(alone, rel=1e-9)   # no peer
    assert npu_decode(shared, contention) == pytest.approx(contended, rel=1e-9)
    assert contended > alone * (1.0 + 0.9 * contention)


@pytest.mark.parametrize("depth", [1, 2])
def test_prefetch_depth_limits_how_far_the_disk_reads_ahead(depth):
    """A burst of simultaneous tasks: the disk reads back to back, except that the read of task i
    may not start before task i - depth has finished loading (at most `depth` reads ahead)."""
    n = 8
    burst = [Task(16, 5000, 64, arrival=0.0) for _ in range(n)]

    def reads_and_loads(k: int):
        sim = simulator("glm-5.3", config=SimConfig(prefetch_depth=k))
        io_time = sim.stages[0].work(burst[0], GLM).io_bytes / SERVER.disk_bandwidth
        assert io_time > 0
        starts, ends, loaded = [], [], []
        for task in burst:
            sim.execute(task, ("cpu", "gpu", "gpu"))
            ends.append(sim.state.disk_free)          # this task's read ends
            starts.append(sim.state.disk_free - io_time)
            loaded.append(sim.state.load_done[-1])    # this task's load ends
        return starts, ends, loaded

    # unlimited in practice: more depth than tasks, so the reads go back to back
    starts, ends, loaded = reads_and_loads(n + 4)
    assert starts[0] == pytest.approx(0.0, abs=1e-12)
    for i in range(1, n):
        assert starts[i] == pytest.approx(ends[i - 1], rel=1e-12)
    assert loaded[depth] > ends[-1]      # the cpu's loading is slower than the disk

    starts, ends, loaded = reads_and_loads(depth)
    for i in range(1, n):
        if i >= depth:
            assert starts[i] >= loaded[i - depth] - 1e-9, (
                f"task {i}'s read started at {starts[i]:.4f}, before task {i - depth} finished "
                f"loading at {loaded[i - depth]:.4f}: more than {depth} read(s) ahead")
        # ... and otherwise as early as the disk allows
        expected = max(ends[i - 1], loaded[i - depth]) if i >= depth else ends[i - 1]
        assert starts[i] == pytest.approx(expected, rel=1e-9), f"task {i}"


def test_the_adaptive_cache_evicts_domains_that_stop_being_requested():
    """The popular domains change mid-stream: with decayed counts the new ones displace the old
    ones, and the hit rate on the new domains recovers."""
    capacity = 4
    old, new = list(range(capacity)), list(range(20, 20 + capacity))
    config = SimConfig(cache_capacity=capacity, cache_decay=0.95)
    sim = simulator("glm-5.3-flash-opt", config=config)
    shares = sim.shares(("cpu", "gpu", "gpu"))

    def serve(domains, rounds: int) -> list[bool]:
        return [sim.run(Task(16, 5000, 64, domain=d), shares).cache_hit
                for _ in range(rounds) for d in domains]

    first = serve(old, 25)
    assert sim.state.cache_entries == set(old)
    assert all(first[capacity:])            # after the first round every request hits
    shifted = serve(new, 25)
    assert not any(shifted[:capacity])      # the new domains start uncached
    late = shifted[len(shifted) // 2:]
    assert sum(late) / len(late) == 1.0, f"hit rate on the new domains stays {sum(late) / len(late)}"
    assert sim.state.cache_entries == set(new)
    assert not sim.state.cache_entries & set(old)


def test_at_the_smallest_decay_the_adaptive_cache_keeps_the_latest_domains():
    """The smallest decay the config takes forgets all but the newest request: each newcomer
    displaces the coldest entry, so the cache holds the last `capacity` domains asked for
    (the counts stay finite through the renormalisations)."""
    capacity = 2
    sim = simulator("glm-5.3-flash-opt",
                    config=SimConfig(cache_capacity=capacity, cache_decay=MIN_CACHE_DECAY))
    shares = sim.shares(("cpu", "gpu", "gpu"))
    for domain in range(40):
        sim.run(Task(1, 16, 1, domain=domain), shares)
        assert sim.state.cache_entries == set(range(max(0, domain - capacity + 1), domain + 1))
    assert all(np.isfinite(list(sim.state.cache_counts.values())))


def test_without_prefetch_a_split_load_reads_the_input_once() -> None:
    """Each share of a split load read the whole input, at once: three reads of it in the
    time of one. Each share now reads its part, so the shares' device time over the same
    placement with prefetch (the read hidden off the devices) is the read, once."""
    slow_disk = dataclasses.replace(SERVER, disk_bandwidth=2e7)
    task = Task(32, 8000, 16)
    split = (((0, 1 / 3), (1, 1 / 3), (2, 1 / 3)), ((1, 1.0),), ((1, 1.0),))

    def busy(depth: int) -> float:
        sim = simulator(hardware=slow_disk, config=SimConfig(prefetch_depth=depth))
        return sum(sim.run(task, split).busy)

    io_time = simulator(hardware=slow_disk).stages[0].work(task, GLM).io_bytes / 2e7
    assert io_time > 0.1
    assert busy(0) - busy(1) == pytest.approx(io_time, rel=1e-9)


def test_without_prefetch_the_shares_of_a_split_load_read_the_one_disk_in_turn() -> None:
    """Synchronous reads of a split load share one disk: the shares' parts are read one after
    the other, so the whole input takes the disk's full read time, as with prefetch; it used
    to be read in parallel, at twice the disk's bandwidth with two shares."""
    slow_disk = dataclasses.replace(SERVER, disk_bandwidth=1e6)
    task = Task(32, 8000, 16)
    split = (((GPU, 0.5), (NPU, 0.5)), ((GPU, 1.0),), ((GPU, 1.0),))
    sim = simulator(hardware=slow_disk, config=SimConfig(prefetch_depth=0))
    io_time = sim.stages[0].work(task, GLM).io_bytes / slow_disk.disk_bandwidth
    result = sim.run(task, split)
    assert sim.state.disk_free == pytest.approx(io_time, rel=1e-12)   # the reads end to end
    assert result.queue + result.load >= io_time                        # the load waits for them
    assert parts_sum(result) == pytest.approx(result.latency, rel=1e-12)
    # ... and a single share's read is unchanged: the whole input, then the preprocessing
    alone = simulator(hardware=slow_disk, config=SimConfig(prefetch_depth=0))
    whole = alone.run(task, (((GPU, 1.0),),) * 3)
    assert alone.state.disk_free == pytest.approx(io_time, rel=1e-12)
    assert whole.queue == 0.0


@FEW
@given(variant=st.sampled_from(list(VARIANTS)), hardware=st.sampled_from([SERVER, EDGE]),
       placement=placements, batch=st.integers(1, 64), n=st.integers(1, 20000),
       m=st.integers(1, 1000), shift=st.sampled_from([1.0, 1e3, 1e6]), prefetch=st.integers(0, 2))
def test_an_idle_cluster_prices_a_task_the_same_whenever_it_arrives(variant, hardware, placement,
                                                                    batch, n, m, shift, prefetch):
    config = SimConfig(prefetch_depth=prefetch)
    early = simulator(variant, hardware, config).execute(Task(batch, n, m), placement)
    late = simulator(variant, hardware, config).execute(Task(batch, n, m, arrival=shift), placement)
    assert late.latency == pytest.approx(early.latency, rel=1e-6)
    for part, seconds in early.breakdown().items():
        assert late.breakdown()[part] == pytest.approx(seconds, rel=1e-6, abs=1e-9), part


def test_the_latest_arrival_a_task_takes_is_still_priced_as_at_time_zero():
    # float64 times far from zero resolve a latency coarsely (at 1e308 every task took "0 s"),
    # so Task refuses arrivals past MAX_ARRIVAL, and at it a task prices as it does at 0.
    task = Task(1, 16, 4)
    early = simulator().execute(task, (GPU, GPU, GPU))
    late = simulator().execute(dataclasses.replace(task, arrival=MAX_ARRIVAL), (GPU, GPU, GPU))
    assert 0 < early.latency < 1
    assert late.latency == pytest.approx(early.latency, rel=1e-4)
    for bad in (np.nextafter(MAX_ARRIVAL, np.inf), 1e308, float("inf"), float("nan"), -1.0):
        with pytest.raises(ValueError, match=r"^Task.arrival must be a time in seconds from 0 to 1e\+09, got "):
            Task(1, 16, 4, arrival=bad)


@FEW
@given(variant=st.sampled_from(list(VARIANTS)),
       steps=st.lists(st.tuples(placements, st.integers(1, 32), st.integers(1, 12000),
                                st.integers(1, 600), st.floats(0, 5)), min_size=1, max_size=4),
       device=st.integers(0, 2), figure=st.sampled_from(["peak_flops", "mem_bandwidth", "link",
                                                          "disk"]),
       prefetch=st.integers(0, 2))
def test_faster_hardware_never_ends_a_task_later(variant, steps, device, figure, prefetch):
    """On the server (no shared memory domain, so no contention) doubling a device's FLOP/s or
    bandwidth, every link's bandwidth or the disk's never makes a task of a stream end later."""
    if figure == "link":
        links = {k: Link(2 * v.bandwidth, v.latency) for k, v in SERVER.links.items()}
        fast = Hardware(SERVER.name, SERVER.devices, links, SERVER.disk_bandwidth)
    elif figure == "disk":
        fast = dataclasses.replace(SERVER, disk_bandwidth=2 * SERVER.disk_bandwidth)
    else:
        dev = SERVER.devices[device]
        fast = SERVER.with_device(dev.name, **{figure: 2 * getattr(dev, figure)})
    config = SimConfig(prefetch_depth=prefetch, resident=("cpu",))
    slow_sim, fast_sim = simulator(variant, SERVER, config), simulator(variant, fast, config)
    arrival = 0.0
    for placement, batch, n, m, gap in steps:
        arrival += gap
        task = Task(batch, n, m, arrival=arrival)
        before = slow_sim.execute(task, placement).finish
        assert fast_sim.execute(task, placement).finish <= before * (1 + 1e-12)


@FEW
@given(capacity=st.integers(1, 8), decay=st.sampled_from([0.5, 0.9, 0.98, 1.0]),
       domains=st.lists(st.integers(0, 20), min_size=1, max_size=200))
# equal counts (decay 1): a tie broken by the set's hash order kept 0 in the 4-entry cache and
# evicted it from the 5-entry one, which then missed the last request where the smaller hit
@example(capacity=4, decay=1.0, domains=[1, 3, 4, 8, 2, 0, 0, 1])
def test_a_bigger_adaptive_cache_never_hits_less_often(capacity, decay, domains):
    """The adaptive cache holds the `capacity` domains with the largest decayed counts, and
    those of a smaller cache are among them: on the same stream it hits at least as often."""
    def hits(size: int) -> int:
        sim = simulator("glm-5.3-flash-opt", config=SimConfig(cache_capacity=size, cache_decay=decay))
        shares = sim.shares(("cpu", "gpu", "gpu"))
        for i, d in enumerate(domains):
            sim.run(Task(1, 16, 1, domain=d, arrival=float(i)), shares)
        assert sim.state.lookups == len(domains)
        return sim.state.hits

    assert hits(capacity) <= hits(capacity + 1) <= hits(capacity + 4)


def test_an_adaptive_cache_breaks_a_tie_of_counts_as_the_real_loader_does():
    """Among domains requested equally often (decay 1) the cache keeps what it holds (a
    newcomer must outscore the coldest entry), and of the coldest entries it evicts the
    highest-numbered, whatever order they came in: AdaptiveLoad keeps cached sources on a tie,
    then goes by path. The evicted entry once followed the set's hash order."""
    for stream in ([2, 7, 5], [7, 2, 5], [2, 7, 5, 5], [7, 2, 5, 5]):
        sim = simulator("glm-5.3-flash-opt", config=SimConfig(cache_capacity=2, cache_decay=1.0))
        shares = sim.shares(("cpu", "gpu", "gpu"))
        for i, d in enumerate(stream):
            sim.run(Task(1, 16, 1, domain=d, arrival=float(i)), shares)
        assert sim.state.cache_entries == ({2, 7} if len(stream) == 3 else {2, 5})


def test_contention_shares_bandwidth_as_a_fluid_while_peers_stay_busy():
    """With n peers busy a stage's memory traffic runs at 1 / (1 + c n) of its rate, full rate
    after: 1 s of traffic alone, c = 1, peers done 0.5 s and 1 s in: 1/6 s of it in the first
    half second, 1/4 s in the next, the last 7/12 s alone, so 19/12 s in all."""
    sim = simulator("glm-5.3", EDGE, SimConfig(contention=1.0))
    slowdown = sim._contended_slowdown
    assert slowdown(1.0, 10.0, [[(0, 10.5)], [(9, 11.0)], [(0, 9.0)]]) == pytest.approx(19 / 12)
    assert slowdown(1.0, 10.0, [[(5, 20.0)]]) == pytest.approx(2.0)      # busy throughout
    assert slowdown(1.0, 10.0, [[(9, 10.0)], [(0, 3.0)]]) == 1.0         # none still busy


def _memory_seconds(work, device) -> float:
    """The stage's memory traffic alone, in seconds: bytes over the pattern's bandwidth."""
    from inference.hardware import PATTERNS

    return sum((p.nbytes + p.fixed_bytes)
               / (device.mem_bandwidth * device.pattern_efficiency[PATTERNS[p.pattern]])
               for p in work.parts)


def test_a_short_stage_is_slowed_by_a_peer_for_as_long_as_they_overlap():
    """Edge SoC, c = 1: a decode step whose memory traffic takes M < 1 s alone starts as a
    peer begins work of M seconds: half its traffic is done at half rate over those M
    seconds, the other half alone, 1.5 M in all; each part's memory time stretches 1.5x."""
    sim = simulator("glm-5.3", EDGE, SimConfig(contention=1.0))
    npu, gpu = EDGE.device_id("npu"), EDGE.device_id("gpu")
    device = EDGE.devices[npu]
    work = build_stages("glm-5.3")[2].work(Task(1, 256, 2), GLM)
    memory = _memory_seconds(work, device)
    assert 0.0 < memory < 1.0
    state, start = sim.initial_state(), 5.0
    state.booked[gpu].append((start, start + memory))
    seconds = sim._stage_time(work, npu, 1.0, start, state)[0]
    assert seconds == pytest.approx(_own_stage_seconds(work, device, slow=1.5), rel=1e-9)
    assert seconds > _own_stage_seconds(work, device) + 0.4 * memory


def test_loading_on_a_shared_memory_domain_contends_like_the_other_stages():
    """A cache miss keeps its intermediates in memory (traffic, no arithmetic): beside a peer
    busy throughout, that traffic runs at half rate (c = 1), as prefill's and decode's do."""
    task = Task(16, 4096, 2)
    cpu, gpu = EDGE.device_id("cpu"), EDGE.device_id("gpu")
    work = build_stages("glm-5.3-flash")[0].load_work(task, GLM, False)
    device = EDGE.devices[cpu]

    def load_base(contention: float) -> float:
        sim = simulator("glm-5.3-flash", EDGE, SimConfig(contention=contention))
        sim.state.booked[gpu].append((0.0, 1e6))
        sim.state.busy_until[gpu] = 1e6
        result = sim.execute(task, ("cpu", "cpu", "cpu"))
        assert result.cache_hit is False
        return result.stage_base[0]

    alone = _own_stage_seconds(work, device)
    assert load_base(0.0) == pytest.approx(alone, rel=1e-12)
    assert load_base(1.0) == pytest.approx(_own_stage_seconds(work, device, slow=2.0), rel=1e-12)
    assert load_base(1.0) > alone * (1 + 1e-6)


def test_every_stage_on_a_shared_memory_domain_is_booked_for_its_peers():
    """A device in a shared memory domain books each stage it runs, loading too, as a span its
    peers contend with: a task run wholly on the cpu leaves three spans back to back, the
    load's as long as its work, the last ending with the task."""
    sim = simulator("glm-5.3", EDGE, SimConfig(contention=1.0))
    cpu = EDGE.device_id("cpu")
    result = sim.execute(Task(4, 1024, 8), ("cpu", "cpu", "cpu"))
    spans = sim.state.booked[cpu]
    assert len(spans) == 3
    assert spans[0][1] - spans[0][0] == pytest.approx(result.stage_base[0], rel=1e-12)
    assert spans[0][1] == spans[1][0] and spans[1][1] == spans[2][0]
    assert spans[2][1] == result.finish
    assert [sim.state.booked[d] for d in range(3) if d != cpu] == [[], []]


def test_a_peer_idle_before_its_booked_work_takes_no_bandwidth():
    """A peer contends only inside its booked spans: before, it counted as busy from the
    stage's start until its last booked work ended, even while it sat idle waiting for input.
    1 s of traffic alone from t = 10, c = 1: a peer busy only over [10.5, 11] takes half the
    bandwidth there, 1/4 s of traffic done in it; 0.5 + 0.5 + 0.25 = 1.25 s in all. A peer
    whose work starts after the stage would have ended alone leaves it exactly alone."""
    sim = simulator("glm-5.3", EDGE, SimConfig(contention=1.0))
    slowdown = sim._contended_slowdown
    assert slowdown(1.0, 10.0, [[(10.5, 11.0)]]) == pytest.approx(1.25)
    assert slowdown(1.0, 10.0, [[(11.0, 30.0)], [(12.0, 13.0)]]) == 1.0
    # one peer's two spans with a gap, busy over [10, 10.5] and [11, 12]: 1/4 s of traffic in
    # the first half second, 1/2 s in the gap, the last 1/4 s takes half a second: 1.5 s
    assert slowdown(1.0, 10.0, [[(8.0, 10.5), (11.0, 12.0)]]) == pytest.approx(1.5)


def test_a_stage_beside_a_peer_waiting_for_its_input_runs_alone():
    """On the edge SoC (one memory domain): the npu booked over [500, 600] s (busy until 600)
    idles until 500, so a short task on the cpu now runs as on an idle SoC; over [0, 600] it
    takes bandwidth from the task."""
    def cpu_task_latency(npu_booked: tuple[float, float] | None) -> float:
        sim = simulator("glm-5.3", EDGE, SimConfig(contention=1.0))
        if npu_booked is not None:
            npu = EDGE.device_id("npu")
            sim.state.booked[npu].append(npu_booked)
            sim.state.busy_until[npu] = npu_booked[1]
        return sim.execute(Task(4, 512, 16), ("cpu", "cpu", "cpu")).latency

    alone = cpu_task_latency(None)
    assert alone < 500.0
    assert cpu_task_latency((500.0, 600.0)) == alone
    assert cpu_task_latency((0.0, 600.0)) > alone * 1.05


def test_under_contention_a_faster_device_or_an_earlier_start_never_ends_later():
    """Edge SoC, one memory domain, default contention 1: two peers busy. Charging each peer's
    overlap with the start grew a stage by 2 s per second it started earlier, so doubling the
    cpu's FLOP/s (its load ends sooner) ended the task 21 s later (audit repro)."""
    edge = EDGE
    cpu = edge.devices[edge.device_id("cpu")]
    first, second = Task(17, 2332, 247), Task(2, 1072, 639)

    def third_ends(hardware, arrival: float = 0.0) -> float:
        sim = simulator("glm-5.3-flash-opt", hardware, SimConfig(contention=1.0))
        sim.execute(first, ("npu", "npu", "npu"))
        sim.execute(second, ("gpu", "gpu", "gpu"))
        return sim.execute(Task(7, 1513, 760, arrival=arrival), ("cpu", "cpu", "cpu")).finish

    assert third_ends(edge.with_device("cpu", peak_flops=cpu.peak_flops * 2)) <= third_ends(edge)
    ends = [third_ends(edge, a) for a in np.linspace(0.0, 200.0, 41)]
    assert all(b >= a - 1e-9 for a, b in zip(ends, ends[1:], strict=False))


def test_contention_with_no_peer_busy_leaves_the_memory_time_exact():
    """No peer still busy: the slowdown is exactly 1 (the uncontended time to the bit), not
    (start + est - start) / est, which rounds off 1 for most starts and sizes, so a contended
    device with idle peers priced a stage a few ulp off `stage_seconds` (sometimes faster)."""
    sim = simulator("glm-5.3", EDGE, SimConfig(contention=1.0))
    for est, start in [(0.3, 12345.678), (1e-3, 1e6), (7.1, 0.1), (2.5, 99.9)]:
        assert sim._contended_slowdown(est, start, []) == 1.0
        assert sim._contended_slowdown(est, start, [[(0.0, start - 1.0)], [(0.0, 0.0)]]) == 1.0
        assert sim._contended_slowdown(est, start, [[(0.0, start)]]) == 1.0   # done as it starts
        during = start + est / 3   # a peer's booking of no time while the stage runs: never busy
        assert sim._contended_slowdown(est, start, [[(during, during)]]) == 1.0
    work = sim.stages[2].work(Task(8, 2048, 128), sim.model)
    st = sim.initial_state()
    st.booked[:] = [[(1.0, 3.0)]] * len(st.booked)   # every peer done before the start
    npu = EDGE.device_id("npu")
    assert sim._stage_time(work, npu, 1.0, 1234.567, st)[0] == sim.stage_seconds(work, npu)


def test_a_stage_is_priced_beside_only_the_peer_spans_still_running_at_its_start():
    """Under a backlog that never drains, every span booked after the task's arrival stays,
    and scanning them all for each stage made a step's cost grow with the episode. A peer's
    spans that end by the stage's start cannot slow it; the slowdown is handed none of them,
    and the stage's time is the same."""
    sim = simulator("glm-5.3", EDGE, SimConfig(contention=1.0))
    cpu, gpu = EDGE.device_id("cpu"), EDGE.device_id("gpu")
    spans = [(100.0 + i, 100.5 + i) for i in range(500)]    # done by 600: before the cpu's turn
    spans.append((700.0, 800.0))                            # still running when the cpu starts
    sim.state.booked[gpu] = list(spans)
    sim.state.busy_until[gpu] = 800.0
    sim.state.busy_until[cpu] = 650.0
    seen = []
    real = sim._contended_slowdown

    def recording(est, start, peers_booked):
        seen.extend((start, span) for peer in peers_booked for span in peer)
        return real(est, start, peers_booked)

    sim._contended_slowdown = recording
    result = sim.execute(Task(4, 512, 16, arrival=50.0), ("cpu", "cpu", "cpu"))
    assert seen and all(end > start for start, (_, end) in seen)
    assert (700.0, 800.0) in [span for _, span in seen]
    full = simulator("glm-5.3", EDGE, SimConfig(contention=1.0))
    full.state.booked[gpu] = [(700.0, 800.0)]
    full.state.busy_until[gpu] = 800.0
    full.state.busy_until[cpu] = 650.0
    assert full.execute(Task(4, 512, 16, arrival=50.0), ("cpu", "cpu", "cpu")).latency \
        == result.latency


def test_a_dry_run_copies_only_the_booked_spans_that_can_slow_its_stages(monkeypatch):
    """A dry run (`commit=False`: the references, the oracle's every placement) works on a
    copy of the state. It copied every booked span, which under a backlog that never drains
    grow with the episode; a span that ends before every contended device is free can slow
    none of the task's stages, and the copy leaves it out. The result is the same, and the
    state itself keeps every span."""
    from inference.simulator import ClusterState

    sim = simulator("glm-5.3", EDGE, SimConfig(contention=1.0))
    gpu = EDGE.device_id("gpu")
    spans = [(100.0 + i, 100.5 + i) for i in range(500)] + [(700.0, 800.0)]
    sim.state.booked[gpu] = list(spans)
    sim.state.busy_until[:] = [650.0, 800.0, 650.0]
    copies = []
    real_copy = ClusterState.copy

    def recording_copy(self, *args, **kwargs):
        copy = real_copy(self, *args, **kwargs)
        copies.append([len(b) for b in copy.booked])   # as copied, before the run books
        return copy

    monkeypatch.setattr(ClusterState, "copy", recording_copy)
    task, placement = Task(4, 512, 16, arrival=50.0), ((((0, 1.0),),) * 3)
    dry = sim.run(task, placement, commit=False)
    assert copies == [[0, 1, 0]]
    assert sim.state.booked[gpu] == spans
    assert sim.run(task, placement).latency == dry.latency


def test_a_device_fits_the_weights_and_a_footprint_up_to_its_memory_exactly():
    """`fits` is weights + footprint <= memory; by default the weights start on every device
    they fit on, a device exactly their size included."""
    weights = GLM.weight_bytes
    tight = SERVER.with_device("gpu", memory=float(weights + 1000)).with_device(
        "npu", memory=float(weights - 1))
    sim = simulator(hardware=tight)
    assert sim.fits(GPU, 1000.0) and not sim.fits(GPU, 1001.0)
    assert sim.fits(GPU, 0.0) and not sim.fits(NPU, 0.0)
    assert sim.state.resident == [True, True, False]
    exact = simulator(hardware=SERVER.with_device("npu", memory=float(weights)))
    assert exact.state.resident[NPU] and not exact.fits(NPU, 1.0)


@pytest.mark.parametrize("depth", [2, 3])
def test_with_a_slow_disk_the_prefetched_reads_go_back_to_back(depth):
    """The disk, not loading, is the bottleneck: with depth >= 2 every read starts when the
    previous one ends, never earlier, though the loads `depth` tasks back are long done (depth
    1 also waits for the previous task's loading, which follows its read)."""
    slow_disk = dataclasses.replace(SERVER, disk_bandwidth=1e5)
    sim = simulator(hardware=slow_disk, config=SimConfig(prefetch_depth=depth))
    task = Task(4, 2000, 4)
    work = sim.stages[0].work(task, GLM)
    io_time = work.io_bytes / slow_disk.disk_bandwidth
    assert sim.stage_seconds(work, CPU) < 0.5 * io_time     # the loading itself is quick
    for i in range(6):
        sim.execute(task, ("cpu", "gpu", "gpu"))
        assert sim.state.disk_free == pytest.approx((i + 1) * io_time, rel=1e-12)


def test_stage_noise_is_log_normal_with_median_one():
    """`execute` scales each stage by exp(N(0, sigma)): the log of a stage's time over its
    noiseless time has mean 0 and standard deviation sigma (no throttle or set-up here)."""
    sim, rng, sigma = simulator(), np.random.default_rng(0), 0.5
    logs = []
    for _ in range(300):
        sim.reset()
        result = sim.execute(ARTICLE, ("cpu", "gpu", "npu"), rng, noise_sigma=sigma)
        logs += [np.log(result.stage_time[s] / result.stage_base[s]) for s in (1, 2)]
    assert abs(np.mean(logs)) < 0.05
    assert np.std(logs) == pytest.approx(sigma, rel=0.1)


def test_each_share_of_a_split_stage_sends_its_part_of_the_output():
    """Prefill split evenly over gpu and npu, load and decode on the cpu, one link figure
    everywhere: each prefill share receives half the token ids and sends half the KV cache,
    so the task's transfer is two latencies plus half of each over the bandwidth."""
    link = Link(5e8, 1e-3)
    uniform = Hardware(SERVER.name, SERVER.devices, dict.fromkeys(SERVER.links, link),
                       SERVER.disk_bandwidth)
    split = np.zeros((3, 3))
    split[0, CPU], split[1, GPU], split[1, NPU], split[2, CPU] = 1.0, 0.5, 0.5, 1.0
    sim = simulator(hardware=uniform)
    tokens = sim.stages[0].work(ARTICLE, GLM).output_bytes
    kv = sim.stages[1].work(ARTICLE, GLM).output_bytes
    result = sim.execute(ARTICLE, split)
    expected = 2 * link.latency + 0.5 * (tokens + kv) / link.bandwidth
    assert result.transfer == pytest.approx(expected, rel=1e-9)


def test_a_read_the_device_waits_for_counts_as_loading_the_rest_as_queueing():
    """Prefetch (depth 2): a task whose device is free waits for the disk to finish the read
    before its own (queueing), then for its own read (loading); a task whose device is still
    busy when its read is done loads in its stage's own time and queues the rest."""
    slow_disk = dataclasses.replace(SERVER, disk_bandwidth=1e8)
    sim = simulator(hardware=slow_disk, config=SimConfig(prefetch_depth=2))
    io_time = sim.stages[0].work(ARTICLE, GLM).io_bytes / slow_disk.disk_bandwidth
    load_on = {d: sim.stage_seconds(sim.stages[0].work(ARTICLE, GLM), d) for d in (CPU, NPU)}
    sim.execute(ARTICLE, ("gpu", "gpu", "gpu"))
    second = sim.execute(ARTICLE, ("npu", "npu", "npu"))     # the disk reads the first's input
    assert second.queue == pytest.approx(io_time, rel=1e-9)
    assert second.load == pytest.approx(io_time + load_on[NPU], rel=1e-9)
    busy = simulator(config=SimConfig(prefetch_depth=2))
    first = busy.execute(ARTICLE, ("cpu", "cpu", "cpu"))
    small = busy.execute(Task(1, 100, 1), ("cpu", "gpu", "gpu"))   # its read ends long before
    small_load = busy.stage_seconds(busy.stages[0].work(Task(1, 100, 1), GLM), CPU)
    assert small.load == pytest.approx(small_load, rel=1e-9)
    assert small.queue == pytest.approx(first.finish, rel=1e-9)


def test_the_weights_come_from_a_memory_domain_peer_a_link_or_the_disk():
    """Edge SoC, one memory domain: a device whose peer holds the weights reads them in place
    (no copy). With no holder at all they are read off the disk, once."""
    on_gpu = ("gpu", "gpu", "gpu")
    peer_holds = simulator(hardware=EDGE, config=SimConfig(resident=("cpu",)))
    every = simulator(hardware=EDGE)
    assert peer_holds.execute(ARTICLE, on_gpu).latency == every.execute(ARTICLE, on_gpu).latency
    assert peer_holds.state.resident[GPU]
    nowhere = simulator(config=SimConfig(resident=()))
    first = nowhere.execute(ARTICLE, on_gpu)
    assert first.transfer == pytest.approx(GLM.weight_bytes / SERVER.disk_bandwidth, rel=1e-12)
    assert nowhere.state.resident == [False, True, False]
    assert nowhere.execute(dataclasses.replace(ARTICLE, arrival=1e4), on_gpu).transfer == 0


def test_on_a_tie_the_adaptive_cache_keeps_the_domain_it_holds():
    """Plain frequencies (decay 1), one entry: a new domain requested as often as the cached
    one does not displace it (no churn), so the cached domain's next request hits."""
    sim = simulator("glm-5.3-flash-opt", config=SimConfig(cache_capacity=1, cache_decay=1.0))
    shares = sim.shares(("cpu", "gpu", "gpu"))
    hits = [sim.run(Task(1, 16, 1, domain=d), shares).cache_hit for d in (0, 1, 0, 1, 1)]
    assert hits == [False, False, True, False, False]
    assert sim.state.cache_entries == {1}     # 1 now requested more often than 0


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_attention_time_is_the_attention_parts_own_time(variant):
    """`attention` is the time of the parts tagged attention, compute- or memory-bound."""
    from inference.work import StageWork

    sim = simulator(variant)
    gpu = SERVER.devices[GPU]
    result = sim.execute(ARTICLE, ("gpu", "gpu", "gpu"))
    parts = [p for w in result.works for p in w.parts if p.tag == "attention"]
    assert parts
    assert result.attention == pytest.approx(_own_stage_seconds(StageWork(tuple(parts)), gpu),
                                             rel=1e-12)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_kv_wait_is_what_the_kv_reads_take_beyond_their_compute(variant):
    """`kv_wait` is the memory stall of the parts tagged kv: for each, by how much its memory
    time outlasts its compute, max(0, mem - comp), with comp = flops / (peak_flops x
    op_efficiency) and mem = bytes / (mem_bandwidth x pattern_efficiency) -- a part of the
    memory stall, not the KV reads' whole memory time (which would report a compute-heavy
    read as all wait)."""
    from inference.hardware import OP_CLASSES, PATTERNS

    sim = simulator(variant)
    decode = sim.task_works(ARTICLE, None)[2]
    kv_parts = [p for p in decode.parts if p.tag == "kv"]
    assert kv_parts
    for dev, device in enumerate(SERVER.devices):
        expected = 0.0
        for part in kv_parts:
            comp = part.flops / (device.peak_flops * device.op_efficiency[OP_CLASSES[part.op]])
            mem = ((part.nbytes + part.fixed_bytes)
                   / (device.mem_bandwidth * device.pattern_efficiency[PATTERNS[part.pattern]]))
            assert comp > 0     # the reads also compute: a wait of `mem` would be too long
            expected += max(0.0, mem - comp)
        _seconds, stall, _attention, kv_wait = sim.stage_profile(decode, dev)
        assert expected > 0, device.name     # the decode's KV reads are memory bound
        assert kv_wait <= stall
        assert kv_wait == pytest.approx(expected, rel=1e-12), device.name


@pytest.mark.parametrize("prefetch", [0, 1])
@pytest.mark.parametrize("placement", [("cpu", "gpu", "gpu"), [[1, 0, 1], [0, 1, 0], [0, 1, 0]]],
                         ids=["single", "split"])
def test_a_throttled_device_loads_one_over_factor_slower(placement, prefetch):
    """A throttle slows all the work on its device, the load stage's too: at factor 0.5 the
    load's device time doubles. (Its busy seconds, less the synchronous disk read without
    prefetch, which the throttle does not slow: the disk is not the device.) Prefill and
    decode run on the GPU, left healthy, so the load's devices are busy with the load only."""
    factor = 0.5
    config = SimConfig(prefetch_depth=prefetch)
    load_time = []
    for speed in (1.0, factor):
        sim = simulator(config=config)
        sim.state.throttle[CPU] = sim.state.throttle[NPU] = speed
        result = sim.run(ARTICLE, sim.shares(placement))
        read = 0.0 if prefetch else result.works[0].io_bytes / SERVER.disk_bandwidth
        load_time.append(result.busy[CPU] + result.busy[NPU] - read)
    healthy, throttled = load_time
    assert healthy > 0
    assert throttled == pytest.approx(healthy / factor, rel=1e-9)


@pytest.mark.parametrize("placement", [("cpu", "gpu", "gpu"), [[1, 0, 0], [0, 1, 1], [0, 1, 1]]],
                         ids=["single", "split"])
def test_a_throttle_lengthens_each_part_of_the_compute_by_one_over_factor(placement):
    """Throttled by factor f, every device computes 1/f as long, and so does each part of that
    time the result reports -- the attention time, the KV-read wait and the memory stall as
    well as the compute -- each with the stage's noise applied as to the stage's time."""
    factor = 0.5
    noise = (1.0, 1.1, 0.9)
    results = []
    for speed in (1.0, factor):
        sim = simulator()
        sim.state.throttle = [speed] * sim.n_devices
        results.append(sim.run(ARTICLE, sim.shares(placement), noise))
    healthy, throttled = results
    for part in ("attention", "kv_wait", "memory_stall", "compute"):
        assert getattr(healthy, part) > 0, part
        assert getattr(throttled, part) == pytest.approx(getattr(healthy, part) / factor,
                                                         rel=1e-9), part


def test_an_extra_overhead_delays_the_task_and_counts_as_overhead():
    """The environment charges a failed dispatch as `extra_overhead` seconds before the task
    starts: on an idle cluster the latency grows by exactly that, all of it overhead."""
    plain = simulator().execute(ARTICLE, ("cpu", "gpu", "npu"))
    sim = simulator()
    delayed = sim.run(ARTICLE, sim.shares(("cpu", "gpu", "npu")), extra_overhead=2.5)
    assert delayed.overhead == 2.5
    assert delayed.latency == pytest.approx(plain.latency + 2.5, rel=1e-12)
    assert parts_sum(delayed) == pytest.approx(delayed.latency, rel=1e-12)


def test_the_adaptive_cache_still_tracks_with_a_vanishing_decay():
    """decay 1e-150: each request outweighs all before it, so a one-entry cache holds the last
    domain requested; the counts are renormalised before they overflow to inf (and then NaN)."""
    sim = simulator("glm-5.3-flash-opt", config=SimConfig(cache_capacity=1, cache_decay=1e-150))
    shares = sim.shares(("cpu", "gpu", "gpu"))
    stream = [0, 1, 1, 0, 0, 2, 2, 1]
    hits = [sim.run(Task(1, 16, 1, domain=d), shares).cache_hit for d in stream]
    assert hits == [False, False, True, False, True, False, True, False]
    assert sim.state.cache_entries == {1}
    assert all(np.isfinite(list(sim.state.cache_counts.values())))


@pytest.mark.parametrize("changes, field", [
    ({"prefetch_depth": True}, "prefetch_depth"),
    ({"cache_capacity": True}, "cache_capacity"),
    ({"replacement_overhead_s": True}, "replacement_overhead_s"),
    ({"replacement_overhead_s": "0.2"}, "replacement_overhead_s"),
    ({"replacement_overhead_s": None}, "replacement_overhead_s"),
    ({"contention": False}, "contention"),
    ({"contention": [1.0]}, "contention"),
    ({"cache_decay": True}, "cache_decay"),
    ({"cache_decay": "0.98"}, "cache_decay"),
    ({"cache_decay": None}, "cache_decay"),
    ({"precomputed_domains": (True, 2)}, "precomputed_domains"),
    ({"precomputed_domains": 5}, "precomputed_domains"),
    ({"precomputed_domains": None}, "precomputed_domains"),
    ({"resident": "gpu"}, "resident"),
    ({"resident": 5}, "resident"),
    ({"resident": ("gpu", 1)}, "resident"),
])
def test_sim_config_refuses_wrong_types_naming_the_field(changes, field):
    # A bool passed as a number (prefetch_depth=True ran as 1), a string, None or a non-tuple
    # raised a TypeError from inside a comparison, or was accepted and failed later (a
    # resident 'gpu' read as the devices 'g', 'p', 'u'): one ValueError naming the field.
    with pytest.raises(ValueError, match=f"SimConfig.{field}"):
        SimConfig(**changes)


def test_sim_config_accepts_its_documented_values():
    config = SimConfig(prefetch_depth=0, replacement_overhead_s=0, contention=2, cache_capacity=1,
                       cache_decay=1, precomputed_domains=(0, 3), resident=("cpu", "gpu"))
    assert Simulator(SERVER, GLM, build_stages("glm-5.3-flash"), config).state.resident == [
        True, True, False]


@pytest.mark.parametrize("sigma, rng", [
    (-0.1, np.random.default_rng(0)), (float("nan"), np.random.default_rng(0)),
    (float("inf"), np.random.default_rng(0)), (True, np.random.default_rng(0)),
    ("0.1", np.random.default_rng(0)), (0.1, None),
])
def test_execute_refuses_a_noise_it_would_not_draw(sigma, rng):
    # These ran without noise and without a word: a negative or NaN sigma failed `> 0`, and a
    # sigma without a Generator was ignored.
    with pytest.raises(ValueError, match="noise_sigma"):
        simulator().execute(ARTICLE, ("cpu", "gpu", "gpu"), rng, noise_sigma=sigma)


def test_execute_without_noise_needs_no_generator():
    plain = simulator().execute(ARTICLE, ("cpu", "gpu", "gpu")).latency
    assert simulator().execute(ARTICLE, ("cpu", "gpu", "gpu"), None, noise_sigma=0).latency == plain


@pytest.mark.parametrize("placement", [
    (0, 1, 7), np.array([0, 1, 7]), [0, 1, np.int64(7)], (0, 1, np.uint8(7)),
])
def test_a_device_id_out_of_range_is_named_as_the_caller_wrote_it(placement):
    # Shown through repr, a numpy id read "placement[decode] = np.int64(7)": the env and
    # numpy callers pass such ids, and the message named a type instead of the device id.
    with pytest.raises(ValueError, match=r"^placement\[decode\] = 7 is not a device id in 0\.\.2$"):
        simulator().shares(placement)


def test_a_simulator_takes_one_stage_implementation_per_stage_in_order():
    # Unchecked, reversed stages would be booked as given (a decode priced as the loading)
    # and a short or long tuple would fail inside the hot path or be ignored past three.
    stages = build_stages("glm-5.3")
    for wrong in (stages[::-1], stages[:2], (*stages, stages[2])):
        with pytest.raises(ValueError, match="one implementation per stage"):
            Simulator(SERVER, GLM, wrong)


def test_a_stage_out_of_place_is_named():
    # "stages must be one implementation per stage in order" named neither the class nor
    # the place it stood in.
    load, prefill, decode = build_stages("glm-5.3")
    with pytest.raises(ValueError, match=r"; the prefill one is a SequentialDecode, whose "
                       r"stage is 'decode'$"):
        Simulator(SERVER, GLM, (load, decode, prefill))


def test_a_fraction_placement_is_read_as_each_stages_proportions():
    """A stage's row of fractions need not sum to 1: it is divided by its sum, so a row
    scaled by any positive factor is the same placement (the same shares and latency)."""
    proportions = np.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.25, 0.75]])
    scaled = proportions * np.array([[3.0], [2.0], [8.0]])
    shares = simulator().shares(scaled)
    assert shares == simulator().shares(proportions)
    assert [sum(f for _, f in stage) for stage in shares] == [1.0, 1.0, 1.0]
    assert simulator().execute(ARTICLE, scaled).latency == simulator().execute(
        ARTICLE, proportions).latency


def test_a_fraction_row_past_the_float_range_together_is_its_proportions_still():
    """Finite fractions whose sum overflows (1e308 twice) were each divided by inf: the load
    stage had no share at all, and was priced at 0 without a word."""
    huge = [[1e308, 1e308, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    even = [[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    assert simulator().shares(huge) == simulator().shares(even) == (
        ((0, 0.5), (1, 0.5)), ((1, 1.0),), ((2, 1.0),))
    result = simulator().execute(ARTICLE, huge)
    assert result.load > 0 and result.latency == simulator().execute(ARTICLE, even).latency
    given = np.array(huge)
    simulator().shares(given)
    assert given.tolist() == huge       # the caller's array is not scaled in place


# ---------------------------------------------------------------- metamorphic relations
# Relations between two runs that the model implies whatever its calibrated figures: each
# test runs a task stream twice, changing one thing, and compares. Derandomized, so a CI run
# tries the same examples every time.
RELATION = settings(max_examples=50, deadline=None, derandomize=True)


def streams(placement: st.SearchStrategy) -> st.SearchStrategy:
    """Up to 4 tasks: (placement, batch, prompt, output, gap to the previous arrival)."""
    return st.lists(st.tuples(placement, st.integers(1, 32), st.integers(1, 12000),
                              st.integers(1, 600), st.floats(0, 5)), min_size=1, max_size=4)


def run_stream(hardware, variant: str, config: SimConfig, steps, time_unit: float = 1.0,
               placed=lambda placement: placement) -> list[TaskResult]:
    """The stream's results, with the noise of seed 0 (sigma 0.1), arrivals in `time_unit`
    seconds, each placement passed through `placed`; domains 0-4 (the cached loader holds 0
    and 2), so the loaders both hit and miss."""
    sim = simulator(variant, hardware, config)
    rng = np.random.default_rng(0)
    arrival, results = 0.0, []
    for placement, batch, n, m, gap in steps:
        arrival += gap
        task = Task(batch, n, m, domain=(batch + n) % 5, arrival=arrival / time_unit)
        results.append(sim.execute(task, placed(placement), rng, noise_sigma=0.1))
    return results


def relabelled(hardware, order):
    """`hardware` with its devices listed in `order` (old ids), the links following them."""
    new_id = {old: new for new, old in enumerate(order)}
    links = {(new_id[a], new_id[b]): link for (a, b), link in hardware.links.items()}
    return Hardware(hardware.name, tuple(hardware.devices[d] for d in order), links,
                    hardware.disk_bandwidth)


def uneven_links(hardware):
    """`hardware` with a link bandwidth of its own per pair (the presets' are all alike), so
    that a transfer or weight copy over the wrong link shows."""
    links = {(a, b): Link(link.bandwidth / (1 + a + b), link.latency)
             for (a, b), link in hardware.links.items()}
    return Hardware(hardware.name, hardware.devices, links, hardware.disk_bandwidth)


def relabelled_placement(placement, order):
    if isinstance(placement, tuple):
        return tuple(order.index(d) for d in placement)
    return placement[:, list(order)]


def assert_same_results(a: list[TaskResult], b: list[TaskResult], rel: float = 1e-12,
                        devices=None) -> None:
    """Latencies, breakdowns and per-device busy times equal to `rel` (`devices`: b's device
    id of each of a's devices)."""
    for x, y in zip(a, b, strict=True):
        assert y.latency == pytest.approx(x.latency, rel=rel)
        # parts and busy times are differences of the stream's clock readings: a tiny one is
        # exact to a few ulps of the clock, not relative to itself (as in the k-times test)
        clock_ulps = 8 * np.finfo(float).eps * x.finish
        for part, seconds in x.breakdown().items():
            assert y.breakdown()[part] == pytest.approx(seconds, rel=rel, abs=clock_ulps), part
        order = devices or range(len(x.busy))
        assert [y.busy[d] for d in order] == pytest.approx(x.busy, rel=rel, abs=clock_ulps)


@pytest.mark.parametrize("order", [o for o in itertools.permutations(range(3)) if o != (0, 1, 2)])
@settings(RELATION, max_examples=15)
@given(case=st.one_of(
           st.tuples(st.just(uneven_links(SERVER)), st.just(1.0), streams(placements)),
           st.tuples(st.just(EDGE), st.just(0.0), streams(placements)),
           # contention with split stages: see the test below
           st.tuples(st.just(EDGE), st.just(1.0), streams(st.sampled_from(SINGLE)))),
       variant=st.sampled_from(list(VARIANTS)), prefetch=st.integers(1, 2),
       overhead=st.sampled_from([0.0, 0.1]), resident=st.sampled_from([None, ("cpu",), ("npu",)]))
def test_listing_the_devices_in_another_order_changes_no_latency(order, case, variant, prefetch,
                                                                  overhead, resident):
    """A device's id is its place in the hardware file: relabelling the devices, and the
    placements with them, prices every task the same. (Without prefetch a split load's shares
    read the one disk in turn, in the devices' order, so there the order is the disk's queue.)"""
    hardware, contention, steps = case
    config = SimConfig(prefetch_depth=prefetch, replacement_overhead_s=overhead,
                       contention=contention, precomputed_domains=(0, 2), resident=resident)
    listed = run_stream(hardware, variant, config, steps)
    reordered = run_stream(relabelled(hardware, order), variant, config, steps,
                           placed=lambda placement: relabelled_placement(placement, order))
    assert_same_results(listed, reordered, devices=[order.index(d) for d in range(3)])


@pytest.mark.parametrize("order", [o for o in itertools.permutations(range(3)) if o != (0, 1, 2)])
@settings(RELATION, max_examples=15)
@given(steps=streams(placements), variant=st.sampled_from(list(VARIANTS)),
       prefetch=st.integers(1, 2), overhead=st.sampled_from([0.0, 0.1]))
def test_split_stages_on_one_memory_domain_are_priced_alike_in_any_device_order(
        order, steps, variant, prefetch, overhead):
    """The shares of a split stage on the edge SoC's one memory domain slow each other alike
    (none is booked first at full bandwidth), so the devices' order changes no latency."""
    config = SimConfig(prefetch_depth=prefetch, replacement_overhead_s=overhead, contention=1.0,
                       precomputed_domains=(0, 2))
    assert_relabelling_prices_alike(EDGE, order, config, variant, steps)


def assert_relabelling_prices_alike(hardware, order, config: SimConfig, variant: str, steps):
    listed = run_stream(hardware, variant, config, steps)
    reordered = run_stream(relabelled(hardware, order), variant, config, steps,
                           placed=lambda placement: relabelled_placement(placement, order))
    assert_same_results(listed, reordered, devices=[order.index(d) for d in range(3)])


def test_a_split_stage_on_a_shared_memory_domain_is_priced_whatever_the_device_order():
    split = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])   # cpu, gpu+npu, cpu
    order = (0, 2, 1)                                                        # npu before gpu
    config = SimConfig(contention=1.0)
    listed = simulator("glm-5.3", EDGE, config).execute(Task(1, 1, 1), split)
    reordered = simulator("glm-5.3", relabelled(EDGE, order), config).execute(
        Task(1, 1, 1), relabelled_placement(split, order))
    assert reordered.latency == listed.latency


def test_a_split_stage_whose_shares_fetch_the_weights_is_priced_whatever_the_device_order():
    split = np.array([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])   # cpu, cpu+gpu, cpu
    order = (1, 0, 2)                                                        # gpu before cpu
    hardware, config = uneven_links(SERVER), SimConfig(resident=("npu",))
    listed = simulator("glm-5.3", hardware, config).execute(Task(1, 64, 16), split)
    reordered = simulator("glm-5.3", relabelled(hardware, order), config).execute(
        Task(1, 64, 16), relabelled_placement(split, order))
    assert reordered.latency == pytest.approx(listed.latency, rel=1e-12)


class LoadNeedingWeights:
    """A loader whose work needs the model weights (none of the variants' does): the load
    stage's weight copies are priced like prefill's and decode's."""

    stage = "load"

    def __init__(self, loader) -> None:
        self._loader = loader
        self.cache_kind = loader.cache_kind

    def load_work(self, task, model, hit=None):
        return self._loader.load_work(task, model, hit)._replace(needs_weights=True)


def share_starts(hardware, stages, resident, placement, devices) -> list[float]:
    """When each of `devices`, which run one share each of one task on an idle cluster, starts it."""
    sim = Simulator(hardware, GLM, stages, SimConfig(resident=resident))
    result = sim.execute(Task(1, 64, 16), placement)
    return [sim.state.busy_until[d] - result.busy[d] for d in devices]


@pytest.mark.parametrize("stage", [0, 1])
def test_each_share_of_a_split_stage_copies_the_weights_from_a_device_that_held_them_before(stage):
    """Split over cpu and gpu, the other stages on the npu, the weights on the npu only: each
    share waits for its own copy from the npu (or the disk, if faster), not for one from its
    sibling, which is itself still receiving them (uneven links: the cpu-gpu link is the
    fastest)."""
    hardware = uneven_links(SERVER)
    stages = (LoadNeedingWeights(build_stages("glm-5.3")[0]), *build_stages("glm-5.3")[1:])
    placement = np.zeros((3, 3))
    placement[:, NPU] = 1.0
    placement[stage] = [1.0, 1.0, 0.0]
    copying, holding = (share_starts(hardware, stages, resident, placement, (CPU, GPU))
                        for resident in (("npu",), ("cpu", "gpu", "npu")))
    for dev, late, early in zip((CPU, GPU), copying, holding, strict=True):
        copy = min(hardware.link(NPU, dev).time(GLM.weight_bytes),
                   GLM.weight_bytes / hardware.disk_bandwidth)
        assert late - early == pytest.approx(copy, rel=1e-9), SERVER.devices[dev].name


def test_shares_on_one_memory_domain_wait_for_the_weights_unless_a_peer_held_them_before():
    """On the edge SoC's one memory domain a share reads the weights in place from a peer that
    held them before the stage, and waits for the disk read when none did (its sibling, still
    receiving them, cannot lend them)."""
    split = np.array([[0.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])   # npu, cpu+gpu, npu
    stages = build_stages("glm-5.3")
    cpu, gpu = EDGE.device_id("cpu"), EDGE.device_id("gpu")
    holding = share_starts(EDGE, stages, ("cpu", "gpu", "npu"), split, (cpu, gpu))
    on_peer = share_starts(EDGE, stages, ("npu",), split, (cpu, gpu))
    on_none = share_starts(EDGE, stages, (), split, (cpu, gpu))
    assert on_peer == pytest.approx(holding, rel=1e-12)
    read = GLM.weight_bytes / EDGE.disk_bandwidth
    assert [n - h for n, h in zip(on_none, holding, strict=True)] == pytest.approx([read, read],
                                                                                rel=1e-9)


def test_both_shares_of_a_split_stage_on_one_memory_domain_are_slowed_by_each_other():
    """Prefill split over gpu and npu, which share the edge SoC's memory and start together:
    each share is slowed beside the other, not only the one listed second."""
    split = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])   # cpu, gpu+npu, cpu
    gpu, npu = EDGE.device_id("gpu"), EDGE.device_id("npu")
    alone, beside = (simulator("glm-5.3", EDGE, SimConfig(contention=c)).execute(Task(1, 1, 1), split)
                     for c in (0.0, 1.0))
    for dev in (gpu, npu):
        assert beside.busy[dev] > alone.busy[dev], EDGE.devices[dev].name


def in_time_unit(hardware, k: float):
    """`hardware` with every rate k times higher and every duration k times shorter."""
    devices = tuple(dataclasses.replace(
        d, peak_flops=d.peak_flops * k, mem_bandwidth=d.mem_bandwidth * k,
        launch_overhead=d.launch_overhead / k, setup_s=d.setup_s / k) for d in hardware.devices)
    links = {pair: Link(link.bandwidth * k, link.latency / k)
             for pair, link in hardware.links.items()}
    return Hardware(hardware.name, devices, links, hardware.disk_bandwidth * k)


@RELATION
@given(variant=st.sampled_from(list(VARIANTS)), hardware=st.sampled_from([SERVER, EDGE]),
       steps=streams(placements), prefetch=st.integers(0, 2), k=st.sampled_from([0.25, 3.0, 1e3]))
# the second task's 2 us load ends ~114 s into the stream: one ulp of the clock is ~0.7% of it
@example(variant="glm-5.3", hardware=EDGE, prefetch=0, k=3.0,
         steps=[(np.asarray([[1, 0, 0]] * 3, dtype=float), 1, 140, 600, 0.0),
                ((0, 0, 0), 1, 1, 140, 0.0)])
def test_a_cluster_k_times_faster_in_everything_serves_k_times_faster(variant, hardware, steps,
                                                                      prefetch, k):
    """Every rate (FLOP/s, bandwidths, disk) k times higher, every duration (launch overhead,
    link latency, set-up, re-placement overhead, the time between arrivals) k times shorter:
    the model has no time scale of its own, so every latency and every part of it, queueing
    and contention included, is k times shorter."""
    def config(unit: float) -> SimConfig:
        return SimConfig(prefetch_depth=prefetch, replacement_overhead_s=0.1 / unit,
                         resident=("cpu",), precomputed_domains=(0, 2))

    seconds = run_stream(hardware, variant, config(1.0), steps)
    faster = run_stream(in_time_unit(hardware, k), variant, config(k), steps, time_unit=k)
    for x, y in zip(seconds, faster, strict=True):
        assert y.latency * k == pytest.approx(x.latency, rel=1e-9)
        # a part is a difference of two readings of the stream's clock, so a tiny part is
        # exact only to a few ulps of the clock, not relative to itself
        clock_ulps = 8 * np.finfo(float).eps * x.finish
        for part, value in x.breakdown().items():
            assert y.breakdown()[part] * k == pytest.approx(value, rel=1e-9, abs=clock_ulps), part


def avoiding(placement, unused: int):
    """`placement` with device `unused` replaced by the next device (a split's share of it dropped)."""
    other = (unused + 1) % 3
    if isinstance(placement, tuple):
        return tuple(other if d == unused else d for d in placement)
    kept = placement.copy()
    kept[:, unused] = 0.0
    kept[kept.sum(axis=1) == 0, other] = 1.0
    return kept


@RELATION
@given(variant=st.sampled_from(list(VARIANTS)), hardware=st.sampled_from([SERVER, EDGE]),
       steps=streams(placements), prefetch=st.integers(0, 2), unused=st.integers(0, 2),
       figure=st.sampled_from(["peak_flops", "mem_bandwidth", "launch_overhead", "setup_s",
                               "op_efficiency"]),
       factor=st.sampled_from([0.1, 7.0]))
def test_a_device_no_stage_runs_on_leaves_every_latency_as_it_was(variant, hardware, steps,
                                                                   prefetch, unused, figure, factor):
    """A stream that never places work on a device is priced the same, to the bit, whatever
    that device's speed: it books nothing there, so it neither queues nor contends there (its
    memory and links still count: it may hold the weights and send them)."""
    device = hardware.devices[unused]
    if figure == "op_efficiency":
        changed = {op: e / 10 for op, e in device.op_efficiency.items()}   # stays a fraction
    elif figure == "setup_s":
        changed = device.setup_s + factor
    else:
        changed = getattr(device, figure) * factor
    other = hardware.with_device(device.name, **{figure: changed})
    config = SimConfig(prefetch_depth=prefetch, replacement_overhead_s=0.1,
                       precomputed_domains=(0, 2))
    steps = [(avoiding(placement, unused), *sizes) for placement, *sizes in steps]
    before, after = run_stream(hardware, variant, config, steps), run_stream(other, variant, config, steps)
    assert [r.latency for r in after] == [r.latency for r in before]
    assert [r.breakdown() for r in after] == [r.breakdown() for r in before]


@RELATION
@given(variant=st.sampled_from(list(VARIANTS)), hardware=st.sampled_from([SERVER, EDGE]),
       steps=streams(placements), prefetch=st.integers(0, 2), overhead=st.sampled_from([0.0, 0.5]))
def test_no_device_is_busy_longer_than_the_wall_clock(variant, hardware, steps, prefetch,
                                                      overhead):
    """A device runs one thing at a time (FIFO), so a task keeps each device busy no longer
    than its latency, and the cluster's busy time on a device never exceeds the time its last
    booking ends (set-up and synchronous reads count as busy)."""
    sim = simulator(variant, hardware, SimConfig(prefetch_depth=prefetch,
                                                 replacement_overhead_s=overhead))
    rng = np.random.default_rng(0)
    arrival = 0.0
    for placement, batch, n, m, gap in steps:
        arrival += gap
        result = sim.execute(Task(batch, n, m, arrival=arrival), placement, rng, noise_sigma=0.1)
        assert max(result.busy) <= result.latency * (1 + 1e-12)
    for busy, until in zip(sim.state.busy_time, sim.state.busy_until, strict=True):
        assert busy <= until * (1 + 1e-12)


def faster_device(hardware, device: int, figure: str, factor: float):
    return hardware.with_device(hardware.devices[device].name,
                                **{figure: getattr(hardware.devices[device], figure) * factor})


@RELATION
@given(variant=st.sampled_from(list(VARIANTS)),
       hardware=st.sampled_from([(SERVER, 1.0), (EDGE, 0.0)]),
       steps=streams(st.sampled_from(SINGLE)), prefetch=st.integers(0, 2),
       device=st.integers(0, 2), factor=st.sampled_from([1.5, 10.0]))
def test_a_faster_device_never_lengthens_the_part_its_figure_prices(variant, hardware, steps,
                                                                    prefetch, device, factor):
    """Without contention, more FLOP/s never lengthens a task's compute part and more bandwidth
    never lengthens its memory stall, nor touches its compute part (a part's compute is its
    FLOPs' time, its stall the memory time beyond that). More FLOP/s can lengthen the stall --
    the memory time it no longer hides -- so that is not asserted. One device per stage: a
    split stage's parts are its slowest share's, which a faster device can make another one."""
    hardware, contention = hardware
    config = SimConfig(prefetch_depth=prefetch, replacement_overhead_s=0.1, resident=("cpu",),
                       contention=contention, precomputed_domains=(0, 2))
    base = run_stream(hardware, variant, config, steps)
    more_flops = run_stream(faster_device(hardware, device, "peak_flops", factor), variant,
                            config, steps)
    more_bandwidth = run_stream(faster_device(hardware, device, "mem_bandwidth", factor), variant,
                                config, steps)
    for was, flops, bandwidth in zip(base, more_flops, more_bandwidth, strict=True):
        assert flops.compute <= was.compute * (1 + 1e-12)
        assert bandwidth.memory_stall <= was.memory_stall * (1 + 1e-12)
        assert bandwidth.compute == pytest.approx(was.compute, rel=1e-12)


@RELATION
@given(variant=st.sampled_from(list(VARIANTS)), hardware=st.sampled_from([SERVER, EDGE]),
       steps=streams(st.sampled_from(SINGLE)), prefetch=st.integers(0, 2),
       factor=st.sampled_from([1.5, 10.0]))
def test_faster_links_never_lengthen_a_transfer(variant, hardware, steps, prefetch, factor):
    """A stage's transfer is its input's link time plus any weight copy, which takes the
    fastest of the links and the disk: more link bandwidth never lengthens it, whatever the
    queues. (One device per stage; a split stage's is its slowest share's.)"""
    links = {pair: Link(link.bandwidth * factor, link.latency)
             for pair, link in hardware.links.items()}
    faster = Hardware(hardware.name, hardware.devices, links, hardware.disk_bandwidth)
    config = SimConfig(prefetch_depth=prefetch, resident=("cpu",), precomputed_domains=(0, 2))
    for was, now in zip(run_stream(hardware, variant, config, steps),
                        run_stream(faster, variant, config, steps), strict=True):
        assert now.transfer <= was.transfer * (1 + 1e-12)


@RELATION
@given(variant=st.sampled_from(list(VARIANTS)), hardware=st.sampled_from([SERVER, EDGE]),
       placement=fractions, batch=st.integers(1, 64), n=st.integers(1, 20000),
       m=st.integers(1, 1000), grow=st.sampled_from(["batch", "prompt_tokens", "output_tokens"]),
       extra=st.integers(1, 4000), prefetch=st.integers(0, 2))
def test_a_bigger_split_task_is_never_cheaper_on_an_idle_cluster(variant, hardware, placement,
                                                                 batch, n, m, grow, extra,
                                                                 prefetch):
    """Every share of a split stage does more work for more sequences, prompt or output
    tokens, so on a fresh simulator neither the latency nor any device's busy time shrinks."""
    task = Task(batch, n, m)
    bigger = dataclasses.replace(task, **{grow: getattr(task, grow) + extra})
    config = SimConfig(prefetch_depth=prefetch)
    small = simulator(variant, hardware, config).execute(task, placement)
    large = simulator(variant, hardware, config).execute(bigger, placement)
    assert small.latency <= large.latency
    assert all(s <= b for s, b in zip(small.busy, large.busy, strict=True))


@pytest.mark.parametrize("module", ["inference", "inference.variants"])
def test_the_python_examples_of_the_package_docstrings_run(module: str) -> None:
    """The `::` examples help(inference) and help(inference.variants) show run as printed, in
    the module's namespace (the variants' use its build_stages); the package's prints a
    latency whose breakdown adds up to it, as its text says."""
    import contextlib
    import importlib
    import io
    import textwrap

    namespace = importlib.import_module(module)
    # the literal block: the indented lines after `::`, blank ones included, up to the text
    after = (namespace.__doc__ or "").split("::\n", 1)[1].lstrip("\n")
    indented = re.match(r"((?:[ \t]+\S.*\n|[ \t]*\n)+)", after)
    assert indented is not None
    block = indented.group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(textwrap.dedent(block), f"{module} docstring", "exec"), dict(vars(namespace)))
    if module == "inference":
        latency, breakdown = out.getvalue().split(" ", 1)
        parts = eval(breakdown, {})
        assert float(latency) > 0 and sum(parts.values()) == pytest.approx(float(latency))
