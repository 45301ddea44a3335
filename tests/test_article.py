"""The article's figures, at reduced size: every row must point the article's way."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.article import (
    ROWS,
    bootstrap_interval,
    cost_model_rows,
    loss_reduction,
    mean_curve_metrics,
    measure_seed,
    table_markdown,
)
from agents.article_job import job_scenario, run_job
from agents.online import OnlineResult
from envs.scenario import load_scenario
from inference.task import Task

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def seed_values():
    values, online = measure_seed(0, n_tasks=120, online_samples=200, controlled_tasks=100)
    return values, online


def test_flash_is_slower_and_optimized_faster_than_glm(seed_values):
    values, _ = seed_values
    assert values[ROWS[0].figure] > 1.2          # Flash job slower than GLM-5.3
    assert values[ROWS[1].figure] < 1.0          # Flash-optimized job faster than GLM-5.3


def test_attention_share_and_memory_wait_go_up(seed_values):
    values, _ = seed_values
    assert values[ROWS[3].figure] > values[ROWS[2].figure] + 0.1


def test_caches_point_the_article_way(seed_values):
    values, _ = seed_values
    assert values[ROWS[6].figure] < 0.15          # precomputed cache under distribution shift
    assert values[ROWS[7].figure] > 0.3           # the adaptive cache follows the live stream


def test_static_allocation_beats_the_cold_learner_early(seed_values):
    _, online = seed_values
    metrics = online.metrics(early=200)
    assert metrics["early_degradation"] > 1.0


def test_static_allocation_reduces_the_loss_in_the_controlled_test(seed_values):
    values, _ = seed_values
    g, fs, fr = (values["_controlled"][k] for k in ("glm", "flash_static", "flash"))
    assert g < fs < fr                            # static loses less to GLM-5.3 than the learner
    assert values[ROWS[14].figure] == loss_reduction(g, fs, fr) > 0.0
    # the controlled test is its own, open-loop job: not the closed-loop job's makespans
    assert values["_controlled"]["glm"] != values["_makespans"]["glm"]
    assert values["_loss_in_job"] == loss_reduction(*(values["_makespans"][k] for k in
                                                      ("glm", "flash_static", "flash")))


def test_dynamic_scheduling_pays_its_overhead_in_device_time_on_small_batches(seed_values):
    values, _ = seed_values
    assert values["_small_device_time"] > 1.0     # set-ups and less efficient devices


def test_cost_model_rows():
    jobs = run_job("glm", "best-static", seed=0, n_tasks=30)
    tasks = [Task(**i["task"]) for i in jobs.infos]
    rows = cost_model_rows(tasks)
    assert 0.2 < rows["init_saving"] < 0.6        # the hit path skips preprocessing, not I/O
    assert rows["cpu_cache_loss"] > 0.3           # hierarchical KV reads miss the CPU caches
    assert rows["decode_wait"] > 1.5              # ... and wait longer for memory


def test_loss_reduction_is_measured_in_performance():
    assert loss_reduction(1.0, 1.0, 2.0) == 1.0       # static removes the whole loss
    assert loss_reduction(1.0, 2.0, 2.0) == 0.0       # ... or none of it
    # the learner halves performance (loss 0.5), static leaves 1 / 1.6 of it (loss 0.375)
    assert loss_reduction(1.0, 1.6, 2.0) == pytest.approx(1.0 - 0.375 / 0.5)


def test_a_closed_loop_job_measures_the_split_allocators_throughput():
    glm = run_job("glm", "best-static", seed=0, n_tasks=150, clients=3)
    opt = run_job("opt", "heft-split", seed=0, n_tasks=150, clients=3)
    assert opt.makespan < 0.85 * glm.makespan          # all three devices at work
    arrivals = [i["task"]["arrival"] for i in glm.infos]
    assert arrivals[:3] == [0.0] * 3 and arrivals[3] > 0.0


def test_the_two_job_forms():
    live = load_scenario("article").workload
    closed, open_loop = job_scenario(clients=3).workload, job_scenario(3.25, clients=0).workload
    assert (closed.clients, closed.arrival_rate) == (3, live.arrival_rate)
    assert (open_loop.clients, open_loop.arrival_rate) == (0, live.arrival_rate * 3.25)
    arrivals = [i["task"]["arrival"] for i in run_job("glm", "best-static", 0, 30, 3.25, 0).infos]
    assert arrivals[1] > 0.0 and arrivals == sorted(arrivals)    # Poisson, not three at 0


def _stepped(step: int, level: float = 2.0, n: int = 600) -> OnlineResult:
    """A learner `level` x static until `step`, then as good as static."""
    static = np.full(n, 10.0)
    latency = np.where(np.arange(n) < step, level * static, static)
    return OnlineResult(latency, static, static, static_here=static)


def test_the_curve_rows_interval_is_a_bootstrap_over_seeds():
    same = [_stepped(200)] * 5
    point = mean_curve_metrics(same)["samples_to_stabilise"]
    assert 200 < point <= 250                     # the first 50-sample window past the step
    assert bootstrap_interval(same, "samples_to_stabilise") == (point, point)
    mixed = [_stepped(s) for s in (100, 150, 200, 250, 400)]
    low, high = bootstrap_interval(mixed, "samples_to_stabilise")
    assert low < mean_curve_metrics(mixed)["samples_to_stabilise"] <= high <= 450   # no later than the latest step
    assert np.isnan(bootstrap_interval(mixed[:1], "early_drop")).all()   # one seed: no interval


def test_the_table_prints_a_curve_rows_interval_only_when_there_is_one():
    def table(interval):
        return [{"figure": "stabilise", "seed": "~200", "ours": 310.0, "ci": float("nan"),
                 "unit": "n", "low": 100.0, "high": 350.0, "in": True, "interval": interval}]
    assert "| 310 [274 .. 594] |" in table_markdown(table((274.0, 594.0)), [1, 2])
    assert "| 310 |" in table_markdown(table((float("nan"), float("nan"))), [1])
