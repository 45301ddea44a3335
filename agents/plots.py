"""The figures of ``evaluate.py`` (matplotlib, Agg backend), each saved atomically as PNG.

* ``latency_cdf``: empirical CDF of per-task latency, one line per agent, a panel per scenario;
* ``learning_curves``: TensorBoard scalars against the step, a panel per curve (the training
  stream's ``latency/vs_static``, the held-out ``eval/vs_best_static`` and, for runs on
  several scenarios, ``eval/mix_vs_best_static``), one line per run, read from the runs'
  event files as tensorboard's EventAccumulator shows them (``agents.event_scalars``);
* ``stabilization``: online per-sample latency from sample 0 (rolling mean), mean and a
  95% band over seeds per agent, and a vertical line at sample 200 where the runs reach it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

from agents.event_scalars import read_scalar_tags  # noqa: E402
from agents.files import save_figure  # noqa: E402
from agents.stats import evenly_spaced, t95  # noqa: E402

STABILIZATION_LINE = 200



def _finish(fig: Any, axes: Any, target: str | Path) -> Path:
    """Grid and legend on every axis, then save atomically and free the figure."""
    for ax in axes:
        ax.grid(alpha=0.3)
        handles = _labelled_lines(ax)
        _tell_apart(handles)
        labels = [h.get_label() for h in handles]
        # matplotlib 3.7 (our floor) drops a label given as "_..." even in handles= and
        # labels= (its mark of an unlabelled artist; 3.11 keeps it): such a label is built
        # as " _...", and its text then set back
        legend = ax.legend(handles=handles, labels=[f" {label}" if label.startswith("_")
                                                    else label for label in labels],
                           fontsize=8, **_legend_place(labels))
        for text, label in zip(legend.get_texts(), labels, strict=True):
            text.set_text(label)
        # names as written: matplotlib read "$...$" in a label or title (a model file
        # ppo_$5_$10.zip, a scenario file's name) as mathtext, and one unbalanced stopped
        # the save with a ParseSyntaxException
        for text in (*legend.get_texts(), ax.title):
            text.set_parse_math(False)
    try:
        return save_figure(fig, target)
    finally:
        plt.close(fig)


def _labelled_lines(ax: Any) -> list[Any]:
    """The lines of `ax` drawn with a label: matplotlib's own legend leaves out every label
    that starts with "_" (a model file _ppo.zip), taking it for its name of an unlabelled
    artist ("_child3"), which is all this skips."""
    return [line for line in ax.get_lines()
            if not re.fullmatch(r"_child\d+|_nolegend_", line.get_label())]


# Matplotlib's colour cycle: more lines than this repeat its colours.
CYCLE_COLOURS = 10
DASHES = ("-", "--", "-.", ":")
LEGEND_WIDTH = 60     # characters of labels a row of a legend below a panel holds


def _tell_apart(lines: list[Any]) -> None:
    """A line of another's colour and dash takes the next dash of `DASHES` that is free: past
    the colour cycle (every --baselines and a few models), line 11 was line 1's to the eye."""
    seen: set[tuple[tuple[float, ...], str]] = set()
    for line in lines:
        colour = to_rgba(line.get_color())
        dash = next((d for d in (line.get_linestyle(), *DASHES) if (colour, d) not in seen),
                    line.get_linestyle())
        line.set_linestyle(dash)
        seen.add((colour, dash))


def _legend_place(labels: list[str]) -> dict[str, Any]:
    """Where a legend goes: where matplotlib finds room in the panel, or, for more entries
    than the colour cycle's, below the panel (beside it would cover the next panel), in as
    many columns as the labels leave room for: inside, 17 entries covered the curves."""
    if len(labels) <= CYCLE_COLOURS:
        return {}
    columns = max(1, min(3, LEGEND_WIDTH // max(len(label) for label in labels)))
    return {"loc": "upper center", "bbox_to_anchor": (0.5, -0.16), "ncol": columns}


def read_scalars(run_dir: str | os.PathLike[str], tag: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one scalar tag in a run folder's TensorBoard events (empty if none)."""
    return read_scalar_tags(run_dir, (tag,))[tag]


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    if len(values) < window or window <= 1:
        return values
    kernel = np.ones(window) / window
    head = np.cumsum(values[:window - 1]) / np.arange(1, window)
    return np.concatenate([head, np.convolve(values, kernel, mode="valid")])


# The steps a CDF curve draws at most: more than its panel has pixels across or down, so no
# step is seen missing. Drawing every task's cost ~30 µs a point: a minute for 8 agents of
# 2 million tasks (100 seeds x 100 episodes x 200 tasks), for the same picture.
CDF_POINTS = 4000


def cdf_points(latencies: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF's steps as drawn: (latency, fraction of tasks at or below it) at
    every task, or, past CDF_POINTS tasks, at CDF_POINTS evenly spaced ranks (the least and
    the greatest among them), each value exact."""
    x = np.sort(np.asarray(latencies, dtype=float))
    n = len(x)
    ranks = evenly_spaced(n, CDF_POINTS)
    return x[ranks], (ranks + 1) / n


def latency_cdf(latencies: Mapping[str, Mapping[str, np.ndarray]], target: str | Path) -> Path:
    """`latencies[scenario][agent]`: pooled per-task latencies."""
    scenarios = list(latencies)
    fig, axes = plt.subplots(1, max(len(scenarios), 1), figsize=(6.5 * max(len(scenarios), 1), 4.5),
                             squeeze=False)
    for ax, scenario in zip(axes[0], scenarios, strict=False):
        for agent, lat in latencies[scenario].items():
            x, fraction = cdf_points(lat)
            if len(x):
                ax.step(x, fraction, where="post", label=agent)
        ax.set_xscale("log")
        ax.set(title=f"latency CDF: {scenario}", xlabel="task latency (s)", ylabel="fraction of tasks")
    return _finish(fig, axes[0][:len(scenarios)], target)


# The learning-curve panels: (tag, title, moving-average window in logs; None: `smooth`).
CURVE_PANELS = (
    ("latency/vs_static", "training stream: latency / best-static's", None),
    ("eval/vs_best_static", "held-out episode (eval/): mean latency / best-static's", 1),
    # a run on several scenarios: the panel above is its first scenario's (its title says so)
    ("eval/mix_vs_best_static", "held-out episodes of a mix's scenarios (eval/): mean of their "
                                "ratios", 1),
)

MIX_TAG = CURVE_PANELS[2][0]


def learning_curves(runs: Sequence[tuple[str, Path]], target: str | Path,
                    smooth: int = 10) -> Path:
    """A panel per curve of ``CURVE_PANELS`` the runs hold (the training stream's always),
    one line per run (label, run folder), against the training step; 1 is best-static."""
    tags = [tag for tag, _, _ in CURVE_PANELS]
    read = [(label, read_scalar_tags(run_dir, tags)) for label, run_dir in runs]
    curves = {tag: [(label, *scalars[tag]) for label, scalars in read] for tag in tags}
    panels = [panel for i, panel in enumerate(CURVE_PANELS)
              if i == 0 or any(len(steps) for _, steps, _ in curves[panel[0]])]
    fig, axes = plt.subplots(1, len(panels), figsize=(8 * len(panels), 4.5), squeeze=False,
                             sharey=True)
    mixed = {label for label, steps, _ in curves[MIX_TAG] if len(steps)}
    for ax, (tag, title, window) in zip(axes[0], panels, strict=True):
        if tag == "eval/vs_best_static" and mixed:   # which of a mix's episodes it draws
            title += f" ({', '.join(sorted(mixed))}: the first scenario trained on)"
        for label, steps, values in curves[tag]:
            if len(steps):
                ax.plot(steps, _smooth(values, window or smooth), label=label, lw=1.2,
                        marker="o" if window == 1 else None, ms=3)
        ax.axhline(1.0, color="k", ls=":", lw=1, label="best static")
        average = "" if window == 1 else f", moving average of {window or smooth} logs"
        ax.set(title=f"{title}{average}", xlabel="environment step", ylabel=tag)
    return _finish(fig, list(axes[0]), target)


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
    # only where the runs reach it: past their end it stretched the x axis to 200, leaving
    # the curves of a short study (--online-samples 60) a strip at the left
    if any(len(run) > STABILIZATION_LINE for runs in curves.values() for run in runs):
        ax.axvline(STABILIZATION_LINE, color="k", ls="--", lw=1)
        ax.text(STABILIZATION_LINE, ax.get_ylim()[1], f" sample {STABILIZATION_LINE}",
                va="top", fontsize=8)
    ax.set(title=title or "online deployment from sample 0",
           xlabel="sample (task) index", ylabel=f"latency (s), rolling mean of {window}")
    return _finish(fig, [ax], target)
