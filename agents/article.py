"""Reproduce the article's figures from the simulator and the agents (nothing typed in).

The article's "single task" is a job (``agents.article_job``): a stream of
requests run by one pipeline variant under one allocator, its time the
makespan. docs/CALIBRATION.md says which rows each job form lands. Three
configurations, as in the article:

* GLM-5.3: baseline stages, best-static allocation;
* Flash: Flash stages, PPO learning online from a cold start, blind to the
  measured device speeds (it believes the spec sheet);
* Flash-optimized: gated attention, prefetched decoding, adaptive cache, PPO
  on ``InferenceAllocSplit-v0`` (it may split a stage across devices) with
  the three warm-up parts, the conservative policy being ``heft-split``
  (which prices the measured speeds), and the measured speed ratios in view.

One row, the performance loss that static allocation removes, is what the
article measured "in controlled tests" rather than in the deployment: it
comes from the open-loop job (a fixed offered load), for the three
configurations' GLM-5.3 and Flash runs; the table notes its value in the main
job as well.

Each row of the table is computed from these runs or from the cost model on
the same tasks; ``ROWS`` says when a row is "in".
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from agents.article_job import (
    JOB_CLIENTS,
    JOB_TASKS,
    JOB_TIME_SCALE,
    OPEN_LOOP_TASKS,
    JobRun,
    NominalBeliefs,
    job_scenario,
    run_job,
)
from agents.online import OnlineResult, deploy, rollout, unsettled
from agents.registry import make_policy
from agents.sb3_factory import make_sb3
from agents.stats import mean_ci95
from agents.workers import computed_in_order

ARTICLE_FILE = "article.md"    # what `reproduce` writes under its out_dir
ONLINE_SAMPLES = 600
BOOTSTRAP_RESAMPLES = 1000


# ------------------------------------------------------------------ the rows
@dataclass(frozen=True)
class Row:
    figure: str
    article_value: str
    low: float
    high: float
    unit: str = "x"          # x (ratio), % (fraction shown as percent), n (count)


ROWS: tuple[Row, ...] = (
    Row("Flash single-task time / GLM-5.3", "14.4 / 6.8 min (2.12x)", 2.12 * 0.9, 2.12 * 1.1),
    Row("Flash-optimized / GLM-5.3", "5.2 / 6.8 min (0.76x)", 0.76 * 0.9, 0.76 * 1.1),
    Row("attention share at 5K-token inputs, GLM-5.3", "22%", 0.18, 0.26, "%"),
    Row("attention share at 5K-token inputs, Flash", "47%", 0.43, 0.51, "%"),
    Row("decode memory wait (KV reads, same tasks and device), Flash / GLM-5.3", "2.3x", 2.0, 2.6),
    Row("CPU cache hit rate loss from hierarchical decoding", "> 30%", 0.30, 1.0, "%"),
    Row("precomputed-cache hit rate under train/test shift", "< 15%", 0.0, 0.15, "%"),
    Row("adaptive-cache hit rate (the fix)", "well above 15%", 0.45, 1.0, "%"),
    Row("theoretical init-time saving of the two-stage loader", "40%", 0.35, 0.45, "%"),
    Row("samples for the cold RL allocator to stabilise", "~200", 100, 350, "n"),
    Row("performance drop while stabilising (1 - static/cold, samples 1-200)", "40%", 0.25, 0.55, "%"),
    Row("NPU speed the allocator underestimates (measured / nominal)", "15%", 1.10, 1.20),
    Row("batches < 16", "30% of tasks", 0.25, 0.35, "%"),
    Row("dynamic / gated scheduling latency on batches < 16", "> 1 (dynamic loses)", 1.0, 10.0),
    Row("performance loss reduced by static allocation (controlled test: the open-loop job; "
        "performance = 1 / time)", "28%",
        0.18, 0.38, "%"),
)


def _five_k(info: dict[str, Any]) -> bool:
    return 4000 <= info["task"]["prompt_tokens"] <= 6000


def _attention_share(run: JobRun) -> float:
    """The share of the 5K-token tasks' processing time (load, compute and memory stall; no
    queueing or transfers) spent in attention.

    Both share rows take it from a best-static job, one allocator for both variants, so they
    compare the two pipelines rather than two allocators' placements. (On the cold learner's
    Flash job it falls below the Flash row's band, docs/CALIBRATION.md gives the figure: the
    share follows the devices the stages run on.)
    """
    processing = sum(run.total(k, _five_k) for k in ("load", "compute", "memory_stall"))
    return run.total("attention_s", _five_k) / processing


def cost_model_rows(tasks: list[Any]) -> dict[str, float]:
    """Rows read off the cost model for the job's tasks on the CPU (no allocator involved)."""
    from inference import Simulator, get_model, load_hardware
    from inference.variants import build_stages

    hw = load_hardware("server")
    model = get_model("glm-9b")
    cpu = hw.device_id("cpu")
    direct, _, sequential = build_stages("glm-5.3")
    cached, _, hierarchical = build_stages("glm-5.3-flash")
    sim = Simulator(hw, model, build_stages("glm-5.3"))
    full = sum(sim.stage_seconds(direct.load_work(t, model, None), cpu) for t in tasks)
    hit = sum(sim.stage_seconds(cached.load_work(t, model, True), cpu) for t in tasks)
    rates = hw.devices[cpu].cache_hit_rate

    def kv_hit_rate(stage: Any) -> float:
        parts = [stage.work(t, model).part("kv") for t in tasks]
        from inference.hardware import PATTERNS

        total = sum(p.nbytes for p in parts)
        return sum(p.nbytes * rates[PATTERNS[p.pattern]] for p in parts) / total

    decode_dev = hw.device_id("gpu")   # where GLM-5.3's static placement decodes
    kv_wait = {stage.name: sum(sim.stage_profile(stage.work(t, model), decode_dev)[3] for t in tasks)
               for stage in (sequential, hierarchical)}
    return {"init_saving": 1.0 - hit / full,
            "cpu_cache_loss": 1.0 - kv_hit_rate(hierarchical) / kv_hit_rate(sequential),
            "decode_wait": kv_wait["hierarchical"] / kv_wait["sequential"]}


def _small(info: dict[str, Any]) -> bool:
    return info["task"]["batch"] < 16


def _small_mean(infos: list[dict[str, Any]], key: str) -> float:
    """The mean of `key` over the steps whose batch is below 16."""
    return float(np.mean([i[key] for i in infos if _small(i)]))


def _stream_latencies(policy_name: str, seed: int, n: int) -> list[dict[str, Any]]:
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=n)
    return rollout(make_policy(policy_name, env), env, n, seed)


def loss_reduction(glm: float, static: float, cold: float) -> float:
    """How much of Flash's performance loss against GLM-5.3 static allocation removes.

    Performance is 1 / time, as in the drop row (1 - static / cold): Flash's loss under an
    allocator with job time t is 1 - glm / t.
    """
    return 1.0 - (1.0 - glm / static) / (1.0 - glm / cold)


def measure_seed(seed: int, n_tasks: int = JOB_TASKS, online_samples: int = ONLINE_SAMPLES,
                 time_scale: float = JOB_TIME_SCALE, clients: int = JOB_CLIENTS,
                 controlled_tasks: int = OPEN_LOOP_TASKS) -> tuple[dict[str, Any], Any]:
    """Every per-seed figure, plus the cold learner's online run (for the seed-mean curve).

    The loss row comes from the article's "controlled tests": the open-loop job of
    `controlled_tasks` requests at `time_scale` x the live rate (the main job itself when it
    is open-loop). Its value in the main job is returned too, under ``_loss_in_job``.
    """
    def job(variant: str, allocator: str, tasks: int = n_tasks, k: int = clients) -> JobRun:
        return run_job(variant, allocator, seed, tasks, time_scale, k)

    glm, flash_static = job("glm", "best-static"), job("flash", "best-static")
    flash, opt = job("flash", "ppo-cold"), job("opt", "ppo-warm-split")
    g, fs, fr = glm.makespan, flash_static.makespan, flash.makespan
    controlled: tuple[float, ...] = (g, fs, fr)
    if clients:
        controlled = tuple(job(variant, allocator, controlled_tasks, 0).makespan
                           for variant, allocator in (("glm", "best-static"),
                                                      ("flash", "best-static"),
                                                      ("flash", "ppo-cold")))
    env = gym.make("envs:InferenceAlloc-v0", episode_tasks=online_samples, reward="relative")
    learner = make_sb3("ppo", NominalBeliefs(env), seed=seed)
    online = deploy(learner, env, online_samples, seed=seed)
    dynamic = _stream_latencies("heft-calibrated", seed, online_samples)
    gated = _stream_latencies("gated-heft-calibrated", seed, online_samples)
    values = {
        ROWS[0].figure: fr / g,
        ROWS[1].figure: opt.makespan / g,
        ROWS[2].figure: _attention_share(glm),
        ROWS[3].figure: _attention_share(flash_static),
        ROWS[6].figure: flash.hit_rate(),
        ROWS[7].figure: opt.hit_rate(),
        ROWS[11].figure: opt.npu_ratio,
        ROWS[12].figure: float(np.mean([_small(i) for i in glm.infos])),
        ROWS[13].figure: _small_mean(dynamic, "latency") / _small_mean(gated, "latency"),
        ROWS[14].figure: loss_reduction(*controlled),
        "_loss_in_job": loss_reduction(g, fs, fr),
        # what small batches cost in device time, set-ups included: the scheduling overhead
        "_small_device_time": _small_mean(dynamic, "device_s") / _small_mean(gated, "device_s"),
        "_makespans": {"glm": g, "flash_static": fs, "flash": fr, "opt": opt.makespan},
        "_controlled": dict(zip(("glm", "flash_static", "flash"), controlled, strict=True)),
    }
    return values, online


def _seed_mean(curves: list[Any]) -> Any:
    """The mean curve over seeds; None if any seed has none."""
    return None if any(c is None for c in curves) else np.mean(curves, axis=0)


def mean_curve_metrics(onlines: list[Any]) -> dict[str, float]:
    """The online harness's metrics of the seed-mean curve of `onlines` (OnlineResults)."""
    return OnlineResult(_seed_mean([o.latency for o in onlines]),
                        _seed_mean([o.static for o in onlines]),
                        _seed_mean([o.oracle for o in onlines]),
                        static_here=_seed_mean([o.static_here for o in onlines])).metrics()


def bootstrap_interval(onlines: list[Any], key: str, resamples: int = BOOTSTRAP_RESAMPLES,
                       seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of a seed-mean-curve metric, resampling the seeds.

    A metric of the mean curve is not a mean over seeds, so Student's t does not apply; the
    bootstrap redraws the seeds (with replacement) and recomputes the mean curve's metric.
    """
    if len(onlines) < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    draws = [mean_curve_metrics([onlines[i] for i in rng.integers(0, len(onlines), len(onlines))])[key]
             for _ in range(resamples)]
    low, high = np.percentile(draws, [2.5, 97.5])
    return float(low), float(high)


def reproduce_table(seeds: list[int], n_tasks: int = JOB_TASKS,
                    online_samples: int = ONLINE_SAMPLES, time_scale: float = JOB_TIME_SCALE,
                    clients: int = JOB_CLIENTS,
                    tick: Callable[[], None] | None = None, jobs: int = 1
                    ) -> list[dict[str, Any]]:
    """Run every seed and return one dict per row: figure, seed value, ours (mean, CI), in.

    `tick` is called once per seed measured (a progress bar's update); `jobs` seeds are
    measured at once (0: one per core; ``agents.workers.computed_in_order``: the same table)."""
    per_seed: dict[str, list[float]] = {}     # every per-seed number: rows and notes
    measure = functools.partial(measure_seed, n_tasks=n_tasks, online_samples=online_samples,
                                time_scale=time_scale, clients=clients)
    measured = computed_in_order(measure, seeds, jobs, name=lambda seed: f"seed {seed}",
                                 tick=tick)
    onlines = [online for _, online in measured]
    for values, _ in measured:
        for key, value in values.items():
            if not isinstance(value, dict):
                per_seed.setdefault(key, []).append(float(value))
    tasks = None
    if seeds:
        env = gym.make("envs:InferenceAlloc-v0", scenario=job_scenario(time_scale, clients),
                       episode_tasks=n_tasks)
        env.reset(seed=seeds[0])
        tasks = list(env.unwrapped._episode.tasks)  # type: ignore[attr-defined]
    model_rows = cost_model_rows(tasks or [])   # the first seed's tasks: one value a row
    cost_model = {ROWS[4].figure: "decode_wait", ROWS[5].figure: "cpu_cache_loss",
                  ROWS[8].figure: "init_saving"}
    for figure, key in cost_model.items():
        per_seed[figure] = [model_rows[key]]
    metrics = mean_curve_metrics(onlines)
    stream_metrics = [o.metrics() for o in onlines]
    curve_rows = {ROWS[9].figure: "samples_to_stabilise", ROWS[10].figure: "early_drop"}
    table = []
    for row in ROWS:
        entry: dict[str, Any] = {"figure": row.figure, "article": row.article_value, "unit": row.unit,
                                 "low": row.low, "high": row.high}
        if row.figure in curve_rows:   # a metric of the seed-mean curve, with a bootstrap interval
            key = curve_rows[row.figure]
            mean, half = metrics[key], float("nan")
            entry["interval"] = bootstrap_interval(onlines, key)
            entry["per_stream"] = mean_ci95([m[key] for m in stream_metrics])
            if key == "samples_to_stabilise":
                # (runs still outside the band at their end, which count at its sample)
                entry["unsettled"] = (unsettled([m[key] for m in stream_metrics],
                                                online_samples), online_samples)
        else:
            mean, half = mean_ci95(per_seed[row.figure])
        entry.update({"ours": mean, "ci": half, "in": bool(row.low <= mean <= row.high)})
        if row.figure in cost_model:
            entry["cost_model"] = True
        table.append(entry)
    table[13]["device_time"] = mean_ci95(per_seed["_small_device_time"])
    if clients:   # the loss row's value in the main job too: the controlled test is not the job
        table[14]["in_job"] = mean_ci95(per_seed["_loss_in_job"])
    return table


SHOWN = {"%": (100.0, 1, "%"), "n": (1.0, 0, ""), "x": (1.0, 2, "x")}   # scale, decimals, suffix
MAX_EXTRA_DECIMALS = 15    # past a double's precision: two floats that differ print apart by then


def format_value(value: float, half: float, unit: str, extra: int = 0) -> str:
    """`value` (± `half` when finite) in its unit's decimals, plus `extra` decimals."""
    scale, decimals, suffix = SHOWN[unit]
    places = decimals + extra
    return f"{scale * value:.{places}f}{suffix}" + (
        f" ± {scale * half:.{places}f}" if np.isfinite(half) else "")


def _shown(value: float, unit: str, extra: int) -> float:
    """`value` as format_value prints it, read back."""
    scale, decimals, _ = SHOWN[unit]
    return float(f"{scale * value:.{decimals + extra}f}")


def limit_decimals(row: dict[str, Any]) -> int:
    """The extra decimals a row's limits need to print as the band the verdict uses.

    The time ratios' bands are 10% either side of 2.12 and 0.76: 1.908..2.332 and
    0.684..0.836, which the unit's two decimals printed "1.91x .. 2.33x" and "0.68x .. 0.84x".
    """
    unit = row["unit"]
    scale = SHOWN[unit][0]
    for extra in range(MAX_EXTRA_DECIMALS + 1):
        if all(math.isclose(_shown(row[key], unit, extra), scale * row[key], rel_tol=1e-12,
                            abs_tol=1e-12) for key in ("low", "high")):
            return extra
    return MAX_EXTRA_DECIMALS


def verdict_decimals(row: dict[str, Any], tol: int | None = None) -> int:
    """The extra decimals a row's value needs for what it prints, beside its limits (printed
    with ``max(this, tol)`` extra decimals; `tol`: ``limit_decimals(row)``, computed when not
    given), to agree with its verdict.

    The verdict is decided on the unrounded value, the tolerance being the criterion; a value
    just outside a limit printed "0.68x" with the limits "0.68x .. 0.84x" and "NO". Deciding
    on the printed value instead would call a value outside its band in, so such a row gets
    the digits that show it outside; and a value just inside a limit printed with more
    decimals than the unit's (0.6845 beside 0.684x) gets the digits that show it inside.
    """
    unit = row["unit"]
    tol = limit_decimals(row) if tol is None else tol
    for extra in range(MAX_EXTRA_DECIMALS + 1):
        low, high = (_shown(row[key], unit, max(extra, tol)) for key in ("low", "high"))
        ours = _shown(row["ours"], unit, extra)
        if (low <= ours <= high) == row["in"]:
            return extra
    return MAX_EXTRA_DECIMALS


def table_markdown(table: list[dict[str, Any]], seeds: list[int]) -> str:
    cost_model = ("; decode memory wait, CPU cache hit-rate loss and init-time saving: one value "
                  f"each, read off the cost model on the tasks of seed {seeds[0]}"
                  if any(row.get("cost_model") for row in table) else "")
    lines = [f"Seeds: {', '.join(map(str, seeds))}. Ours: mean ± 95% CI half-width over seeds "
             "(Student's t; a ratio row is the mean of each seed's ratio); stabilisation and "
             "drop: of the seed-mean online curve, with the 95% percentile bootstrap interval "
             f"in brackets (the seeds redrawn {BOOTSTRAP_RESAMPLES} times){cost_model}. "
             "in: the value shown lies within the tolerance, limits included (the value, not "
             "its interval).", "",
             "| figure | article | ours | tolerance | in |", "|---|---|---|---|---|"]
    notes: list[str] = []
    for row in table:
        tol_places = limit_decimals(row)
        extra = verdict_decimals(row, tol_places)
        places = max(extra, tol_places)
        tol = (format_value(row["low"], float("nan"), row["unit"], places) + " .. "
               + format_value(row["high"], float("nan"), row["unit"], places))
        ours = format_value(row["ours"], row["ci"], row["unit"], extra)
        if "interval" in row and np.isfinite(row["interval"]).all():   # none from one seed
            low, high = (format_value(v, float("nan"), row["unit"], extra)
                         for v in row["interval"])
            ours += f" [{low} .. {high}]"
        lines.append(f"| {row['figure']} | {row['article']} | {ours} | {tol} | "
                     f"{'yes' if row['in'] else 'NO'} |")
        if "per_stream" in row:
            mean, half = row["per_stream"]
            late, length = row.get("unsettled", (0, 0))
            censored = (f" ({late}/{len(seeds)} seeds unsettled, counted at {length}: a lower "
                        "bound)" if late else "")
            notes.append(f"{row['figure']}, on each seed's own curve (its noise included): "
                         f"{format_value(mean, half, row['unit'])}{censored}.")
        if "device_time" in row:
            mean, half = row["device_time"]
            notes.append("Device time of batches < 16, set-ups included (what a batch costs "
                         f"in throughput), dynamic / gated: {format_value(mean, half, 'x')}.")
        if "in_job" in row:
            mean, half = row["in_job"]
            notes.append(f"The loss row measured in the main job instead of the controlled "
                         f"test: {format_value(mean, half, row['unit'])}.")
    # a blank line between notes: markdown joins consecutive lines into one paragraph
    return "\n".join(lines + [f"\n{note}" for note in notes]) + "\n"


def job_description(time_scale: float = JOB_TIME_SCALE, clients: int = JOB_CLIENTS) -> str:
    if clients:
        return f"sent by {clients} closed-loop clients"
    return f"submitted {time_scale:g}x faster than its live rate"


def reproduce(out_dir: Any, seeds: Any, n_tasks: int | None = None,
              online_samples: int = ONLINE_SAMPLES,
              clients: int = JOB_CLIENTS,
              tick: Callable[[], None] | None = None, jobs: int = 1) -> list[dict[str, Any]]:
    """Run the reproduction, print the table and write it to ``out_dir/article.md``.

    `clients`: the job's closed-loop clients (0: the open-loop job); `n_tasks` defaults to
    JOB_TASKS closed-loop, OPEN_LOOP_TASKS open-loop; `tick`: called once per seed; `jobs`:
    seeds measured at once (0: one per core).
    """
    from pathlib import Path

    from agents.files import write_text

    if n_tasks is None:
        n_tasks = JOB_TASKS if clients else OPEN_LOOP_TASKS
    seed_list = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    table = reproduce_table(seed_list, n_tasks, online_samples, clients=clients, tick=tick,
                            jobs=jobs)
    text = ("# The article's figures, reproduced\n\n"
            f"Job: {n_tasks} requests of the `article` scenario, "
            f"{job_description(clients=clients)}; "
            "time = makespan. Drop = 1 - static / cold learner latency over samples "
            "1-200 of the online stream; loss reduced = 1 - (1 - GLM/static) / (1 - GLM/cold) "
            "(performance = 1 / time in both), measured in the article's \"controlled tests\": "
            f"the open-loop job ({OPEN_LOOP_TASKS} requests, "
            f"{job_description(clients=0)}). Stabilisation: the online harness's definition, "
            "on the ratio to best-static in the learner's own state.\n\n"
            + table_markdown(table, seed_list))
    print(text)
    write_text(Path(out_dir) / ARTICLE_FILE, text)
    return table
