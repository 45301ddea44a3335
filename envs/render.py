"""The env's ``rgb_array`` frame: where the last task ran, the devices' queues, its latency.

Drawn with numpy rectangles alone (no fonts, no plotting library), so that a frame costs
microseconds and video recorders (SB3's ``VecVideoRecorder``, gymnasium's
``RecordVideo``) work on any machine. Layout, top to bottom, on a dark background:

* **placement**: a row per stage (load, prefill, decode), split left to right into the
  shares of the last task's stage by device, in the device's colour;
* **backlog**: a row per device, as long as its queued work when the next task arrives,
  full width at ``HORIZON_S`` (a brighter cap marks a longer queue); grey if the device is
  offline;
* **latency**: the last task's latency as one bar, its parts (overhead, queue, load,
  transfer, compute, memory stall) in the order of ``PART_COLOURS``, on the same scale.

Device colours follow the hardware's device order: ``DEVICE_COLOURS[d % 8]``, so on hardware
of more than eight devices a colour names two of them (the backlog rows keep them apart).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

WIDTH = 320
ROW = 14             # pixels per bar
GAP = 4              # pixels between bars
PANEL_GAP = 10       # pixels between panels
HORIZON_S = 120.0    # seconds that fill the width of the backlog and latency panels

BACKGROUND = (24, 24, 28)
TRACK = (48, 48, 56)             # the empty part of a bar
OFFLINE = (110, 110, 110)
DEVICE_COLOURS = ((66, 133, 244), (52, 168, 83), (251, 140, 0), (171, 71, 188),
                  (0, 172, 193), (229, 57, 53), (253, 216, 53), (141, 110, 99))
PART_COLOURS = {"overhead": (229, 57, 53), "queue": (158, 158, 158), "load": (66, 133, 244),
                "transfer": (0, 172, 193), "compute": (52, 168, 83),
                "memory_stall": (251, 140, 0)}

Shares = Sequence[Sequence[tuple[int, float]]]


def frame_height(n_devices: int) -> int:
    rows = 3 + n_devices + 1
    return 2 * PANEL_GAP + rows * (ROW + GAP) + 2 * PANEL_GAP


def _bar(img: np.ndarray, top: int, segments: Sequence[tuple[float, tuple[int, int, int]]]) -> None:
    """Fill the track at `top`, then the (fraction of the width, colour) segments left to right."""
    img[top:top + ROW, :] = TRACK
    left = 0.0
    for fraction, colour in segments:
        right = min(left + max(fraction, 0.0), 1.0)
        a, b = round(left * WIDTH), round(right * WIDTH)
        if b > a:
            img[top:top + ROW, a:b] = colour
        left = right


def draw_frame(n_devices: int, shares: Shares | None, backlogs: Sequence[float],
               online: Sequence[bool], breakdown: dict[str, float] | None) -> np.ndarray:
    """The frame as an (H, WIDTH, 3) uint8 array; `shares`/`breakdown` None before any task."""
    if len(backlogs) != n_devices or len(online) != n_devices:
        raise ValueError(f"need a backlog and an online flag per device ({n_devices}), got "
                         f"{len(backlogs)} and {len(online)}")
    img = np.empty((frame_height(n_devices), WIDTH, 3), dtype=np.uint8)
    img[:] = BACKGROUND
    top = PANEL_GAP
    for s in range(3):
        stage = shares[s] if shares is not None else ()
        _bar(img, top, [(f, DEVICE_COLOURS[d % len(DEVICE_COLOURS)]) for d, f in stage])
        top += ROW + GAP
    top += PANEL_GAP
    for d in range(n_devices):
        colour = DEVICE_COLOURS[d % len(DEVICE_COLOURS)] if online[d] else OFFLINE
        fraction = max(backlogs[d], 0.0) / HORIZON_S
        _bar(img, top, [(fraction, colour)])
        if fraction > 1.0:     # the queue runs past the horizon: a bright cap at the end
            img[top:top + ROW, WIDTH - 4:] = (255, 255, 255)
        top += ROW + GAP
    top += PANEL_GAP
    parts = breakdown or {}
    _bar(img, top, [(parts.get(name, 0.0) / HORIZON_S, colour)
                    for name, colour in PART_COLOURS.items()])
    return img
