"""HEFT for the Split env: divide each stage so that its shares finish together.

``heft`` puts a whole stage on one device. Under load that leaves devices idle
while another queues, and in the Split env (``InferenceAllocSplit-v0``) a stage
can be divided instead. ``heft-split`` extends the earliest-finish rule to
fractions, stage by stage in pipeline order.

A share of fraction f of a stage on device d takes about ``a_d + f * b_d``
seconds. ``a_d`` is what any share pays, whatever its size: the weights every
share streams, the kernel launches, and the set-up if d did not run the stage
for the previous task. ``b_d`` is the rest of the whole stage's time. Both come
from the nominal cost model, divided by the measured speed ratio, as in
``heft-calibrated``. (The model's time is convex in f, so the straight line is
an upper bound.)

With ``c_d`` the earliest moment d could start (its backlog, the stage's input
ready, the weights copied), the shares that make a set S of devices finish at
the same time F are

    F = (1 + sum_S (c_d + a_d) / b_d) / sum_S 1 / b_d,      f_d = (F - c_d - a_d) / b_d.

``c_d`` prices the input's transfer to d as if d's share took the whole stage:
the simulator sends d only its fraction of it, but that fraction is what is being
solved for (another upper bound; it matters where a large output moves, which is
decode's input, and decode is rarely split, see below). Measured (5 held-out seeds):
prefill's input is about 0.1 MB, so its overprice is under 0.1 ms; decode is split on 1.2%
of the article's tasks and 5.9% of long-context's, where the KV cache's 40-60 ms copy is
overpriced. Pricing each share's transfer exactly (piecewise linear in F) was tried and made
the plans slightly worse (+0.01% article, +0.5% long-context, 20 paired seeds): it splits
decode more often, and a split decode on the NPU finishes later than planned, as the
NPU's decode is priced with the speed ratio measured on prefill (see ``agents.heft``).

The env gives each device whole sequences of the batch (it rounds the fractions
by the largest-remainder method, ``envs.inference_alloc_split.sequences_of``),
so the plan does too: each subset's shares are rounded as the env will round them,
and the subset's finish is then its latest share's, ``max_S c_d + a_d + f_d b_d``.
The batch is the one the observation shows, which caps it at 64; a larger batch's
fractions (multiples of 1/64) are rounded again by the env.

Every non-empty subset of the allowed devices is tried: 2 ** D - 1 per stage, so a decision's
cost doubles with each device (about 0.2 ms at 3 devices, 3 ms at 8, 0.85 s at 16). A subset
is dropped, unless it has a single device, when a share is below ``MIN_SHARE`` or rounds to
no sequence at all (that is a smaller subset, tried on its own). The earliest finish
wins, and the next stage starts from it. A subset of one device is HEFT's own
choice: heft-split only divides a stage where that finishes it earlier.

Decode streams every weight once per step (per generated token after the first)
on each device it runs on, so its ``a_d`` is large: decode is rarely split.
Prefill is compute bound and splits well.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from agents.heft import HeftPolicy
from agents.static import is_split
from envs.inference_alloc_split import sequences_of

MIN_SHARE = 0.05     # a smaller share costs its fixed part for almost no work


class HeftSplitPolicy(HeftPolicy):
    """Earliest-finish fractions per stage for ``InferenceAllocSplit-v0``, with measured speeds.

    Args:
        env: an ``InferenceAllocSplit`` env, a wrapper around one or a VecEnv of them.
    """

    def __init__(self, env: Any) -> None:
        if not is_split(env):
            raise ValueError("heft-split divides stages over devices and needs "
                             "InferenceAllocSplit-v0; on InferenceAlloc-v0 use heft or "
                             "heft-calibrated")
        super().__init__(env, calibrated=True)
        self.name = "heft-split"

    def fractions(self, obs: Any, masks: Any = None) -> np.ndarray:
        """(3, D) share of each stage per device for one observation: whole sequences of the
        observed batch, so each row is a multiple of 1 / batch and sums to 1."""
        costs, avail, resident, speed, allowed, prev_block = self._context(obs, masks)
        d = self.n_devices
        has_prev = any(x > 0 for x in prev_block)
        out = np.zeros((3, d))
        prev_shares: tuple[tuple[int, float], ...] = ()
        prev_finish, prev_out = 0.0, 0.0
        for s in range(3):
            times, fixed = costs.times[s], costs.fixed[s]
            start_cost: dict[int, float] = {}    # c_d + a_d
            slope: dict[int, float] = {}         # b_d
            for i in allowed[s]:
                ready = self._ready(s, i, prev_shares, prev_finish, prev_out, costs, resident)
                fixed_s = self._plus_fixed(fixed[i] / speed[i], s, i, prev_block, has_prev, costs)
                start_cost[i] = (ready if ready > avail[i] else avail[i]) + fixed_s
                slope[i] = max((times[i] - fixed[i]) / speed[i], 1e-12)
            best_finish, best = math.inf, {}
            for k in range(1, len(allowed[s]) + 1):
                for subset in itertools.combinations(allowed[s], k):
                    shares = self._whole_shares(subset, start_cost, slope, costs.batch)
                    if shares is None:
                        continue
                    finish = max(start_cost[i] + f * slope[i] for i, f in shares.items())
                    if finish < best_finish:
                        best_finish, best = finish, shares
            for i, f in best.items():
                out[s, i] = f
                avail[i] = start_cost[i] + f * slope[i]   # each share's own end
                if costs.needs_weights[s]:
                    resident[i] = True
            prev_shares, prev_finish, prev_out = tuple(best.items()), best_finish, costs.output_bytes[s]
        return out

    @staticmethod
    def _whole_shares(subset: tuple[int, ...], start_cost: dict[int, float],
                      slope: dict[int, float], batch: int) -> dict[int, float] | None:
        """The fractions that make `subset`'s shares finish together (the module docstring's
        f_d), rounded to whole sequences of `batch` as the env rounds them; None when a
        subset of several devices leaves one a share under ``MIN_SHARE`` or none."""
        if len(subset) == 1:
            return {subset[0]: 1.0}
        inv = sum(1.0 / slope[i] for i in subset)
        together = (1.0 + sum(start_cost[i] / slope[i] for i in subset)) / inv
        exact = [(together - start_cost[i]) / slope[i] for i in subset]
        if min(exact) < MIN_SHARE:
            return None
        counts = sequences_of(exact, batch)
        if min(counts) < MIN_SHARE * batch:   # a device left with no sequence included
            return None
        return {i: int(n) / batch for i, n in zip(subset, counts, strict=True)}

    def _action(self, obs: Any, masks: Any) -> np.ndarray:
        return (2.0 * self.fractions(obs, masks) - 1.0).reshape(-1).astype(np.float32)

    def config(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any], env: Any) -> HeftSplitPolicy:
        return cls(env)

    def __repr__(self) -> str:
        return "HeftSplitPolicy()"
