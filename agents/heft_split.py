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

A subset is dropped, unless it has a single device, when a share is below ``MIN_SHARE`` or
rounds to fewer sequences than that (that is a smaller subset, priced on its own). The
earliest finish wins (of subsets finishing together, the first by size, then device order),
and the next stage starts from it. A subset of one device is HEFT's own choice: heft-split
only divides a stage where that finishes it earlier.

Which subsets are priced: up to ``EXHAUSTIVE_DEVICES`` (8) allowed devices every one,
2 ** D - 1 a stage, a cost that doubles with each device; above, polynomially many.

Without the rounding and ``MIN_SHARE`` the best subset would be water-filling's. With
``t_d = c_d + a_d``, by a finish F device d can do ``max(0, (F - t_d) / b_d)`` of the stage;
the sum over devices grows with F, and the earliest F at which it reaches 1 is the optimum,
with the shares above on the devices with ``t_d < F``: a prefix of the devices sorted by t_d,
D candidates (checked against every subset on 2,000 random stages: the same to float
rounding). The rounding breaks this twice. A device of a divided stage takes at least q, the
fewest whole sequences not under ``MIN_SHARE``, over the batch, so a device early in t_d order
but slow, which would get less, is left out: the devices that can join a division finishing
by F are a prefix of ``t_d + q b_d`` order instead, but each that joins lowers F and can push
another under q. And the largest remainders move a subset's finish by up to a sequence of a
share, so a subset a device or two off any prefix can round to an earlier finish.

So above the threshold these are priced: each single device, the prefixes in t_d order, the
prefixes in ``t_d + q b_d`` order each with one device out or one more in, and then, from the
earliest of them, a device in, out, or swapped for one outside, while that finishes earlier
(at most D moves); a subset of more devices than the batch has shares of q is skipped (it
would be dropped). Ties go as above, so the plan is the exhaustive one whenever its subset is
priced. Against every subset, D = 10 to 12: on 2,880 stages that heft-split planned on random
hardware (article, long-context, short-text, bursty; 6 seeds each) 2,878 plans were the same
and the worst finished 3.1% later; on 1,500 random stages with batches of 1 to 64, all were
the same (the prefixes in t_d order and the single devices alone: 676 later, by up to 113%).
``bench/bench_heft_split.py``, on a loaded two-core machine: a decision takes 0.2 ms at 3
devices, 6 ms at 8 (every subset), 8 ms at 16 and 12 ms at 24 (30x, 43x and 60x the 3-device
one), where every subset took 1.7 s at 16 (8,700x). So up to 8 devices every subset costs less
than the search at 24, and the presets' plans (3 devices) are what they always were; at 9 it
costs about as much (10-15 ms, as the machine's load varied), and doubles with each device on.

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
EXHAUSTIVE_DEVICES = 8   # up to this many allowed devices a stage tries every subset


class HeftSplitPolicy(HeftPolicy):
    """Earliest-finish fractions per stage for ``InferenceAllocSplit-v0``, with measured speeds.

    Args:
        env: an ``InferenceAllocSplit`` env, a wrapper around one or a VecEnv of them.
    """

    # A stage with at most this many allowed devices tries every subset; with more, the
    # polynomial search (the module docstring). Not a setting: tests and bench/ move it.
    exhaustive_devices = EXHAUSTIVE_DEVICES

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
            if len(allowed[s]) <= self.exhaustive_devices:
                best_finish, best = self._every_subset(allowed[s], start_cost, slope, costs.batch)
            else:
                best_finish, best = self._searched(allowed[s], start_cost, slope, costs.batch)
            for i, f in best.items():
                out[s, i] = f
                avail[i] = start_cost[i] + f * slope[i]   # each share's own end
                if costs.needs_weights[s]:
                    resident[i] = True
            prev_shares, prev_finish, prev_out = tuple(best.items()), best_finish, costs.output_bytes[s]
        return out

    @classmethod
    def _every_subset(cls, devices: list[int], start_cost: dict[int, float],
                      slope: dict[int, float], batch: int) -> tuple[float, dict[int, float]]:
        """The earliest finish over every non-empty subset of `devices`, and its shares; of
        subsets finishing together, the first in (size, device order) wins."""
        best_finish, best = math.inf, {}
        for k in range(1, len(devices) + 1):
            for subset in itertools.combinations(devices, k):
                shares = cls._whole_shares(subset, start_cost, slope, batch)
                if shares is None:
                    continue
                finish = max(start_cost[i] + f * slope[i] for i, f in shares.items())
                if finish < best_finish:
                    best_finish, best = finish, shares
        return best_finish, best

    @classmethod
    def _searched(cls, devices: list[int], start_cost: dict[int, float],
                  slope: dict[int, float], batch: int) -> tuple[float, dict[int, float]]:
        """`_every_subset`'s answer from polynomially many subsets (the module docstring's
        search): each is rounded and priced as there, and the same rule breaks ties, so the
        plan is `_every_subset`'s whenever its subset is among those priced."""
        least = math.ceil(MIN_SHARE * batch)     # sequences of the smallest share allowed
        most = batch // least                    # a larger subset leaves a device fewer
        priced: dict[tuple[int, ...], tuple[float, dict[int, float]]] = {}

        def price(subset: tuple[int, ...]) -> None:
            if subset in priced or len(subset) > most:
                return
            shares = cls._whole_shares(subset, start_cost, slope, batch)
            priced[subset] = ((math.inf, {}) if shares is None else
                              (max(start_cost[i] + f * slope[i] for i, f in shares.items()),
                               shares))

        def earliest() -> tuple[int, ...]:
            return min(priced, key=lambda subset: (priced[subset][0], len(subset), subset))

        for i in devices:
            price((i,))
        # water-filling's order (its prefixes), then the order of the smallest share allowed
        # (its prefixes, each with one device out or one more in)
        for level in (0.0, least / batch):
            order = sorted(devices, key=lambda i: start_cost[i] + level * slope[i])
            for k in range(1, len(order) + 1):
                prefix = tuple(sorted(order[:k]))
                price(prefix)
                if level:
                    for i in order[k:]:
                        price(tuple(sorted((*prefix, i))))
                    if k > 1:
                        for i in prefix:
                            price(tuple(j for j in prefix if j != i))
        # then from the earliest, one device in, out or swapped, while that finishes earlier
        current = earliest()
        for _ in devices:                    # at most D moves: still polynomial
            outside = [o for o in devices if o not in current]
            for o in outside:
                price(tuple(sorted((*current, o))))
            for i in current:
                rest = [j for j in current if j != i]
                if rest:
                    price(tuple(rest))
                for o in outside:
                    price(tuple(sorted((*rest, o))))
            moved = earliest()
            if moved == current:
                break
            current = moved
        return priced[current]

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
