"""InferenceAllocSplit-v0: split each stage's work over the devices."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

from envs.inference_alloc import InferenceAllocEnv, Masks, holds_bool
from envs.reference import dispatch
from inference.simulator import Shares

# How far past [-1, 1] an action entry may lie and be read as the bound: float32 rounding
# (an ulp at 1 is 1.2e-7), not a policy asking for more than a whole weight.
BOX_SLACK = 1e-6


def sequences_of(row: list[float], batch: int) -> list[int]:
    """How many of a batch's `batch` sequences each device takes in one stage: `row` holds the
    stage's non-negative weights (plain floats), one per device, with a positive sum. The
    largest-remainder method: floor(B f) each, then one more each for the devices with the
    largest remainders, a tie going to the device listed first. Integers that sum to `batch`;
    a zero weight gets 0. The Split env rounds its fractions with it, and heft-split plans
    with it. In Python, not numpy: on three devices numpy's per-call overhead made the
    rounding cost half a Split-env step."""
    total = sum(row)
    quota = [batch * w / total for w in row]
    counts = [int(q) for q in quota]        # floor: every quota is >= 0
    left = batch - sum(counts)
    if left:
        # largest remainder first, ties in device order; a zero weight last, whatever float
        # rounding leaves in the others' remainders
        ranked = sorted(range(len(row)), key=lambda d: (row[d] <= 0.0, counts[d] - quota[d], d))
        for d in ranked[:left]:
            counts[d] += 1
    return counts


class InferenceAllocSplitEnv(InferenceAllocEnv):
    """
    ## Description

    As `InferenceAlloc-v0` (see its docstring for the observation table,
    rewards, episode end and arguments), but each stage's batch may be split
    over several devices, which then run their shares in parallel; the stage
    ends when its slowest share does. Every device that takes a share of
    prefill or decode needs the weights, and the next stage gathers its input
    from every device of the previous one.

    ## Action Space

    `Box(-1, 1, (3 * D,), float32)`, read as a 3 x D matrix (stage-major: the
    load stage's D entries first; an array of shape (3, D) is refused, as the
    box's `contains` refuses it). Entry `a` gives weight `w = (a + 1) / 2` in
    [0, 1]; each stage's non-negative weights are normalised to fractions.
    A stage whose weights are all zero (every entry at -1) is split evenly over
    all devices: it lies inside the box, and SB3 clips Gaussian samples onto
    that corner often enough early in training (about 0.4% of stages per step
    with three devices) that refusing it would crash plain PPO or A2C.

    A stage's batch of B sequences is split data-parallel, so a device takes
    whole sequences: every stage's fractions (load included: it reads each
    sequence's data) are rounded to whole sequences of the task's batch by the
    largest-remainder method (`sequences_of`). Each device gets
    floor(B f) sequences, and the ones left over go one each to the devices
    with the largest remainders B f - floor(B f), a tie to the device listed
    first. The shares sum to B; a batch of one runs each stage wholly on the
    device of largest weight; a weight worth under 1/D of a sequence (D
    devices) never gets a share, and one under half a sequence rarely does.
    So a tiny weight costs nothing, where it used to give its device a sliver
    that paid the share's fixed costs in full (weights, launches, set-up).
    The memory checks, `info` and the previous-placement observation block
    see the rounded fractions (multiples of 1 / B). A
    non-numeric (string, bool) or non-finite entry, or an entry outside
    [-1, 1], is an error (ValueError); an entry past the box by no more than
    float32 rounding (1e-6, as gymnasium's `RescaleAction` leaves at its own
    bounds) is read as the bound. The box is symmetric so that
    Stable-Baselines3's Gaussian policies fit it without rescaling.

    ## Memory and masks

    A share is checked against the memory of its own device: a fraction f of a
    stage needs f times the stage's footprint (KV cache, activations, loader
    buffers: all proportional to the batch) plus the whole weights (for prefill
    and decode). Devices in one memory domain (the edge SoC's CPU, GPU and NPU)
    share one memory, so there the fractions of the stage's shares on the
    domain's devices are summed, and the weights counted once. A share that
    does not fit, or whose device is offline, fails to dispatch and moves to
    the allowed device with the smallest backlog (as in `InferenceAlloc-v0`),
    charged `failed_dispatch_s` once per failed share; only a device that may
    hold the whole stage receives it.
    `action_masks()` and `stage_masks()` keep the whole-batch meaning of
    `InferenceAlloc-v0`: may the whole stage run on the device? So a device
    masked for a stage can still take a share of it that fits.
    """

    _labels_count_sequences = True     # cpu:11/32+gpu:21/32 (see _placement_label)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        domains = [profile.memory_domain for profile in self.hardware.devices]
        # Per device: the devices whose memory it shares (itself included).
        self._memory_peers = tuple(tuple(j for j, other in enumerate(domains) if other == mine)
                                   for mine in domains)

    def _make_action_space(self) -> spaces.Space:
        return spaces.Box(-1.0, 1.0, (3 * self.n_devices,), np.float32)

    def _requested_shares(self, action: Any, batch: int) -> Shares:
        arr = np.asarray(action)
        if arr.dtype.kind not in "iuf" or holds_bool(action):
            # A cheap dtype check: strings would fail inside numpy's float conversion with its
            # own message (or, written "0.5", pass), and bools would pass as the entries 0 and 1.
            what = "booleans" if arr.dtype.kind == "b" or holds_bool(action) else f"dtype {arr.dtype}"
            raise ValueError(f"action entries must be numbers in [-1, 1], not {what}, got {action!r}")
        expected = (3 * self.n_devices,)
        # Only the Box's own flat shape, as its contains() and SB3's actions have it: the
        # (3, D) matrix the entries are read as is refused, not a second accepted form.
        if arr.shape != expected:
            raise ValueError(f"action must have shape {expected} (stage-major), got {arr.shape}")
        entries = arr.astype(np.float64).tolist()
        # The common case in plain Python (numpy's per-call overhead on 3 D entries cost a
        # third of a step): every entry finite (else the sum is not) and inside the box. Any
        # other action takes the full checks, which refuse it or clip it onto the box.
        if not (min(entries) >= -1.0 and max(entries) <= 1.0 and math.isfinite(sum(entries))):
            entries = self._clipped_entries(arr, action)
        d = self.n_devices
        shares = []
        for start in range(0, 3 * d, d):
            weights = [(a + 1.0) / 2.0 for a in entries[start:start + d]]   # each >= 0
            if not any(weights):
                weights = [1.0] * d     # an all -1 stage: an even split
            # whole sequences per device (the class docstring): fractions k / B, a whole stage 1.0
            counts = sequences_of(weights, batch)
            shares.append(tuple([(dev, n / batch) for dev, n in enumerate(counts) if n > 0]))
        return tuple(shares)

    @staticmethod
    def _clipped_entries(arr: np.ndarray, action: Any) -> list[float]:
        """The entries of `arr` (the action as an array) as floats, float32 rounding past the
        box clipped onto its bound; a ValueError for a non-finite entry or one past the box."""
        arr = arr.astype(np.float64)
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"action entries must be finite, got {action!r}")
        low, high = arr.min(), arr.max()
        if low < -1.0 - BOX_SLACK or high > 1.0 + BOX_SLACK:
            raise ValueError(f"action entries must lie in [-1, 1], got {action!r}")
        # Float32 rounding past the box (RescaleAction maps its own low bound to -1.0000001)
        # is the bound: refusing it crashed plain PPO trained through it.
        return np.clip(arr, -1.0, 1.0).tolist()

    def _dispatch(self, shares: Shares, masks: Masks | np.ndarray) -> tuple[Shares, int]:
        """As `InferenceAlloc-v0`'s, with the masks' whole-batch check relaxed per share: a
        share on an online device that the masks refuse runs there if it fits (see the class
        docstring). A failed share moves only to a device the masks allow."""
        return dispatch(shares, self._share_masks(shares, masks), self.sim.state.busy_until,
                        masks)

    def _share_masks(self, shares: Shares, masks: Masks | np.ndarray) -> Masks | np.ndarray:
        """`masks` with, in each stage, a device the masks refuse allowed when it is online and
        its share fits its memory (its memory domain's shares summed); `masks` itself when no
        share lies on a refused device."""
        rows: list[Any] | None = None
        works = None
        online = self.sim.state.online
        memory = self._device_memory
        peers = self._memory_peers
        for s, stage_shares in enumerate(shares):
            row = masks[s]
            if all(row[dev] for dev, _ in stage_shares):
                continue
            if works is None:
                works = self._task_works(self._current_task())
                rows = list(masks)
            assert rows is not None
            work = works[s]
            frac_on = dict(stage_shares)
            relaxed = [bool(allowed) for allowed in row]
            for dev, _ in stage_shares:
                if relaxed[dev] or not online[dev]:
                    continue
                held = sum(frac_on.get(peer, 0.0) for peer in peers[dev])
                relaxed[dev] = work.memory_need(self._weight_bytes, held) <= memory[dev]
            rows[s] = relaxed
        return masks if rows is None else tuple(tuple(row) for row in rows)
