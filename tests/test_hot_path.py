"""What the precomputations of the step's hot path rely on (see bench/bench_env.py)."""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import envs  # noqa: F401  (registers the ids)
from envs.inference_alloc_split import sequences_of
from inference.hardware import load_hardware
from inference.model_config import ModelConfig, get_model
from inference.simulator import SimConfig, Simulator
from inference.stages.load import AdaptiveLoad, CachedLoad, DirectLoad
from inference.task import Task
from inference.variants import VARIANTS, build_stages
from inference.work import StageWork, WorkPart

GLM = get_model("glm-9b")
FEW = settings(max_examples=40, deadline=None)
tasks = st.builds(Task, st.integers(1, 64), st.integers(1, 32768), st.integers(1, 2048),
                  st.integers(0, 63), st.floats(0, 1e4))


@FEW
@given(tasks)
def test_a_loaders_work_is_its_load_work_on_a_miss(task: Task) -> None:
    # The env sizes the masks and prices a miss with `work`, and calls `load_work` on hits only.
    for loader in (DirectLoad(), CachedLoad(), AdaptiveLoad()):
        miss = False if loader.cache_kind is not None else None
        assert loader.work(task, GLM) == loader.load_work(task, GLM, miss)


@FEW
@given(tasks, st.sampled_from(list(VARIANTS)), st.booleans())
def test_run_with_precomputed_works_is_run_without(task: Task, variant: str, hit: bool) -> None:
    results = []
    for precomputed in (False, True):
        sim = Simulator(load_hardware("edge"), GLM, build_stages(variant))
        sim.state.cache_entries = {task.domain} if hit else set()
        works = sim.task_works(task, sim.cache_would_hit(task)) if precomputed else None
        res = sim.run(task, (((0, 1.0),), ((1, 1.0),), ((1, 1.0),)), (1.1, 0.9, 1.0), works=works)
        results.append(([getattr(res, k) for k in res.__slots__], sim.state))
    assert results[0] == results[1]


def test_records_built_from_a_tuple_are_the_keyword_built_ones() -> None:
    part = WorkPart("kv", 1, 2, 3.0, 4.0, launches=5.0)
    assert tuple.__new__(WorkPart, ("kv", 1, 2, 3.0, 4.0, 0.0, 5.0)) == part
    stage = StageWork((part,), output_bytes=2.0, needs_weights=True)
    assert tuple.__new__(StageWork, ((part,), 0.0, 2.0, 0.0, True)) == stage


def test_cached_model_sizes_follow_the_fields() -> None:
    small = dataclasses.replace(GLM, n_layers=2, n_kv_heads=4)
    assert isinstance(small, ModelConfig) and small.weight_bytes != GLM.weight_bytes
    assert small.kv_dim == 4 * (4096 // 32) and small.kv_bytes_per_token == 2 * 2 * 512 * 2
    assert small.weight_bytes == small.n_params * 2


@pytest.mark.parametrize("scenario", ["article", "edge"])
def test_fit_rows_are_the_memory_comparison(scenario: str) -> None:
    raw = gym.make("envs:InferenceAlloc-v0", scenario=scenario).unwrapped
    memory = raw._device_memory
    needs = [0.0, *memory, *(m * (1 + 1e-12) for m in memory), *(m / 2 for m in memory), 1e30]
    for need in needs:
        row = raw._fit_rows[bisect_left(raw._memory_sorted, need)]
        assert row == tuple(need <= m for m in memory), need


class _SharesOnly(Simulator):
    """Books every placement the general way, one-device-per-stage ones included."""

    def _book_single(self, *args):  # type: ignore[no-untyped-def]
        return self._book_shares(*args)


_placements = st.lists(st.one_of(st.tuples(*[st.integers(0, 2)] * 3),
                                 st.lists(st.floats(0.0, 1.0), min_size=9, max_size=9)),
                       min_size=1, max_size=12)


def _placement(drawn: tuple[int, ...] | list[float]) -> tuple[int, ...] | list[list[float]]:
    """A drawn placement for `Simulator.shares`: device ids, or 3 x 3 weights (stage-major);
    weights that give a stage nothing are replaced by one device per stage."""
    if len(drawn) == 3:
        return tuple(drawn)
    rows = [list(drawn[3 * s:3 * s + 3]) for s in range(3)]
    return rows if all(sum(row) for row in rows) else (2, 1, 0)


@FEW
@given(st.lists(tasks, min_size=12, max_size=12), _placements, st.sampled_from(list(VARIANTS)),
       st.sampled_from(["server", "edge"]), st.integers(0, 2), st.floats(0.0, 0.5),
       st.sampled_from([None, ("cpu",)]))
def test_the_single_device_booking_is_the_general_one(
        stream: list[Task], placements: list, variant: str, hardware: str, prefetch: int,
        overhead: float, resident: tuple[str, ...] | None) -> None:
    # One device per stage takes `_book_single`, a split `_book_shares`: the same result to the
    # bit, in any mix of the two (the set-up depends on the previous task's shares).
    config = SimConfig(prefetch_depth=prefetch, replacement_overhead_s=overhead,
                       resident=resident, precomputed_domains=(1, 2, 3))
    sims = [cls(load_hardware(hardware), GLM, build_stages(variant), config)
            for cls in (Simulator, _SharesOnly)]
    for sim in sims:
        sim.state.throttle[1] = 0.7
    for i, task in enumerate(stream):
        shares = sims[0].shares(_placement(placements[i % len(placements)]))
        noise = (1.0 + 0.01 * i, 0.95, 1.05)
        single, general = ([getattr(res, k) for k in res.__slots__]
                           for res in (sim.run(task, shares, noise) for sim in sims))
        assert single == general
        assert sims[0].state == sims[1].state


@FEW
@given(st.lists(tasks, min_size=6, max_size=6), _placements, st.sampled_from(list(VARIANTS)),
       st.sampled_from(["server", "edge"]))
def test_the_recorded_base_time_is_stage_seconds_where_the_figures_agree(
        stream: list[Task], placements: list, variant: str, hardware: str) -> None:
    # The env's speed measurement takes a run's `stage_base` for the nominal time of a device
    # whose spec-sheet figures are the true ones (`prices_as`): it must be `stage_seconds`.
    true = load_hardware(hardware)
    sim = Simulator(true, GLM, build_stages(variant))
    nominal = Simulator(true.nominal_view(), GLM, build_stages(variant))
    agree = [nominal.prices_as(sim, dev) for dev in range(3)]
    assert agree == ([True, True, False] if hardware == "server" else [False] * 3)
    for i, task in enumerate(stream):
        res = sim.run(task, sim.shares(_placement(placements[i % len(placements)])),
                      (1.1, 0.9, 1.05))
        for s in range(3):
            dev, frac = res.stage_device[s], res.stage_fraction[s]
            if agree[dev]:
                assert res.stage_base[s] == nominal.stage_seconds(res.works[s], dev, frac)
            elif not sim._contended[dev]:
                assert res.stage_base[s] == sim.stage_seconds(res.works[s], dev, frac)


@pytest.fixture(scope="module")
def split_env() -> Any:
    return gym.make("envs:InferenceAllocSplit-v0").unwrapped


def _reference_shares(action: object, n_devices: int, batch: int) -> object:
    """The Split env's reading of a valid action, the plain numpy way it was first written:
    clip float32 rounding onto the box, weights (a + 1) / 2, an all-zero stage even."""
    arr = np.clip(np.asarray(action).astype(np.float64), -1.0, 1.0)
    weights = (arr.reshape(3, n_devices) + 1.0) / 2.0
    weights[weights.sum(axis=1) <= 0] = 1.0
    counts = [sequences_of(row, batch) for row in weights.tolist()]
    return tuple(tuple((d, n / batch) for d, n in enumerate(row) if n > 0) for row in counts)


# entries where the reading has edges: the bounds, float32 rounding past them, tiny weights
_edges = st.sampled_from([-1.0, 1.0, -1.0000001, 1.0000001, -1.0 + 1e-7, 0.0, -0.9999, 1e-300])
_entries = st.one_of(st.floats(-1.0, 1.0), _edges)


@settings(max_examples=300, deadline=None)
@given(st.lists(_entries, min_size=9, max_size=9), st.integers(1, 64),
       st.sampled_from([np.float32, np.float64, list]))
def test_the_split_env_reads_an_action_as_the_plain_numpy_reference(
        split_env: Any, entries: list[float], batch: int, kind: object) -> None:
    action = entries if kind is list else np.array(entries, dtype=kind)
    assert split_env._requested_shares(action, batch) == _reference_shares(action, 3, batch)


@pytest.mark.parametrize(("bad", "message"), [
    (float("nan"), "must be finite"), (float("inf"), "must be finite"),
    (-float("inf"), "must be finite"), (1.001, r"must lie in \[-1, 1\]"),
    (-1e300, r"must lie in \[-1, 1\]"), (1e308, r"must lie in \[-1, 1\]"),
])
@pytest.mark.parametrize("where", [0, 4, 8])
def test_the_split_env_refuses_a_bad_entry_wherever_it_lies(split_env: Any, bad: float,
                                                            message: str, where: int) -> None:
    # a NaN past the first entry hides from a plain min()/max(), and a huge entry beside its
    # negative sums to 0: each must still be refused, with its own message
    entries = [0.5] * 9
    entries[where] = bad
    entries[(where + 1) % 9] = -bad if abs(bad) > 1e300 else 0.0
    with pytest.raises(ValueError, match=message):
        split_env._requested_shares(np.array(entries), 8)


@FEW
@given(st.lists(st.lists(_entries, min_size=9, max_size=9), min_size=1, max_size=20),
       st.lists(st.integers(1, 8), min_size=1, max_size=20))
def test_memoised_labels_are_the_labels_built_afresh(split_env: Any, actions: list[list[float]],
                                                     batches: list[int]) -> None:
    # _placement_facts keeps each stage's label; a split stage's label counts sequences of the
    # batch, so the same fractions in another batch are another label ("cpu:1/2" vs "cpu:2/4")
    split_env._facts_memo.clear()
    for i, entries in enumerate(actions):
        batch = batches[i % len(batches)]
        shares = split_env._requested_shares(np.array(entries), batch)
        if i % 3 == 2:
            split_env._label_memo.clear()            # now and then, built afresh
        labels = split_env._placement_facts(shares, batch)[0]
        assert labels == tuple(split_env._placement_label((stage,), batch) for stage in shares)
        split_env._facts_memo.clear()                # the next pass meets the stage memo only


def test_a_split_stage_label_counts_the_batch_it_was_asked_for(split_env: Any) -> None:
    halves = ((0, 0.5), (1, 0.5))
    for batch in (2, 4, 2):
        labels = split_env._placement_facts((halves, halves, ((2, 1.0),)), batch)[0]
        assert labels == (f"cpu:{batch // 2}/{batch}+gpu:{batch // 2}/{batch}",) * 2 + ("npu",)
