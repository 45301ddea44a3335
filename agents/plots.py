"""The figures of ``evaluate.py`` (matplotlib, Agg backend), each saved atomically as PNG.

* ``latency_cdf``: empirical CDF of per-task latency, one line per agent, a panel per scenario;
* ``learning_curves``: a TensorBoard scalar (``latency/vs_static``) against the step, one
  line per run, read from the runs' event files with tensorboard's EventAccumulator;
* ``stabilization``: online per-sample latency from sample 0 (rolling mean), mean and a
  95% band over seeds per agent, and a vertical line at sample 200.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from agents.files import save_figure  # noqa: E402
from agents.stats import t95  # noqa: E402

STABILIZATION_LINE = 200



def _finish(fig: Any, axes: Any, target: str | Path) -> Path:
    """Grid and legend on every axis, then save atomically and free the figure."""
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    try:
        return save_figure(fig, target)
    finally:
        plt.close(fig)

def read_scalars(run_dir: str | os.PathLike[str], tag: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one scalar tag in a run folder's TensorBoard events (empty if none)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 10_000, "tensors": 1,
                                                         "histograms": 1, "images": 1})
    acc.Reload()
    if tag not in acc.Tags().get("scalars", []):
        return np.array([]), np.array([])
    kept: list[Any] = []
    for event in sorted(acc.Scalars(tag), key=lambda e: e.wall_time):
        # A run resumed from an earlier checkpoint logs those steps again: the newer win.
        while kept and kept[-1].step >= event.step:
            kept.pop()
        kept.append(event)
    return np.array([e.step for e in kept]), np.array([e.value for e in kept])


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    if len(values) < window or window <= 1:
        return values
    kernel = np.ones(window) / window
    head = np.cumsum(values[:window - 1]) / np.arange(1, window)
    return np.concatenate([head, np.convolve(values, kernel, mode="valid")])


def latency_cdf(latencies: Mapping[str, Mapping[str, np.ndarray]], target: str | Path) -> Path:
    """`latencies[scenario][agent]`: pooled per-task latencies."""
    scenarios = list(latencies)
    fig, axes = plt.subplots(1, max(len(scenarios), 1), figsize=(6.5 * max(len(scenarios), 1), 4.5),
                             squeeze=False)
    for ax, scenario in zip(axes[0], scenarios, strict=False):
        for agent, lat in latencies[scenario].items():
            x = np.sort(np.asarray(lat))
            if len(x):
                ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=agent)
        ax.set_xscale("log")
        ax.set(title=f"latency CDF: {scenario}", xlabel="task latency (s)", ylabel="fraction of tasks")
    return _finish(fig, axes[0][:len(scenarios)], target)


def learning_curves(runs: Sequence[tuple[str, Path]], target: str | Path,
                    tag: str = "latency/vs_static", smooth: int = 10) -> Path:
    """One line per run (label, run folder): `tag` against the training step."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, run_dir in runs:
        steps, values = read_scalars(run_dir, tag)
        if len(steps):
            ax.plot(steps, _smooth(values, smooth), label=label, lw=1.2)
    if tag == "latency/vs_static":
        ax.axhline(1.0, color="k", ls=":", lw=1, label="best static")
    ax.set(title=f"learning curves ({tag}, moving average of {smooth} logs)",
           xlabel="environment step", ylabel=tag)
    return _finish(fig, [ax], target)


def stabilization(curves: Mapping[str, Sequence[np.ndarray]], target: str | Path,
                  window: int = 20, title: str = "") -> Path:
    """Per-sample latency from sample 0: mean over seeds (rolling `window`) and a 95% band."""
    fig, ax = plt.subplots(figsize=(9, 5))
    for agent, runs in curves.items():
        data = np.stack([_smooth(np.asarray(r, dtype=float), window) for r in runs])
        x = np.arange(data.shape[1])
        mean = data.mean(axis=0)
        line, = ax.plot(x, mean, label=agent, lw=1.4)
        if len(data) > 1:
            half = t95(len(data) - 1) * data.std(axis=0, ddof=1) / np.sqrt(len(data))
            ax.fill_between(x, np.maximum(mean - half, 0.0), mean + half, color=line.get_color(),
                            alpha=0.15)
    ax.axvline(STABILIZATION_LINE, color="k", ls="--", lw=1)
    ax.text(STABILIZATION_LINE, ax.get_ylim()[1], f" sample {STABILIZATION_LINE}", va="top",
            fontsize=8)
    ax.set(title=title or "online deployment from sample 0",
           xlabel="sample (task) index", ylabel=f"latency (s), rolling mean of {window}")
    return _finish(fig, [ax], target)
