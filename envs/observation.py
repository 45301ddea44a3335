"""The observation's layout and scaling, in one place for the env that writes it and the
policies that read it back (HEFT, the gate, the oracle).

A `Box(0, 1, (5 + 7 * D,))` vector; see the table in `InferenceAllocEnv`'s docstring:

* 0, 1, 2: batch / BATCH_SCALE, prompt tokens / PROMPT_SCALE, output tokens / OUTPUT_SCALE
  (each capped at 1); 3: the cache signal (1 hit, 0 miss, 0.5 no cache);
* per device d, four entries from 4 + 4d: backlog b as b / (b + BACKLOG_SCALE_S), free memory
  beside the weights (1 - weights / memory while d holds them, else 1), online flag, measured
  speed ratio / SPEED_SCALE;
* 4 + 4D: the recent cache hit rate; from 5 + 4D: the previous task's (3, D) shares.

A policy that decoded with constants of its own would silently misread every observation
after a change of scale here, so the decoders live beside the constants.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

BATCH_SCALE = 64.0
PROMPT_SCALE = 32768.0
OUTPUT_SCALE = 2048.0
BACKLOG_SCALE_S = 60.0      # backlog b is observed as b / (b + 60 s): 0 idle, 0.5 at 60 s
SPEED_SCALE = 2.0
# A saturated backlog entry (x -> 1) decodes to "effectively never": longer than any entry
# below 1 decodes to, whose 1 - x is at least 2**-53 (float64's gap under 1), so that the
# decoding stays monotone (1e9 s was below float32's largest entry under 1, 1.007e9 s).
_MAX_BACKLOG_S = BACKLOG_SCALE_S * 2.0 ** 53


def n_devices_of(obs_dim: int) -> int:
    """Devices D of an observation of length 5 + 7 D."""
    if obs_dim < 12 or (obs_dim - 5) % 7:
        raise ValueError(f"an InferenceAlloc observation has 5 + 7 * D entries, got {obs_dim}")
    return (obs_dim - 5) // 7


def check_in_box(values: list[float], reader: str) -> None:
    """Refuse an observation (as a flat list of floats) with an entry outside [0, 1], NaN
    included, on behalf of `reader`. The env never writes one; an observation wrapper that
    rescales (gymnasium's NormalizeObservation, SB3's VecNormalize) does, and a decoder would
    read it as the env's own without a sign: behind NormalizeObservation, HEFT placed 28 of 30
    article tasks otherwise, at about 3x the mean latency."""
    for i, x in enumerate(values):
        if not 0.0 <= x <= 1.0:
            raise ValueError(
                f"{reader} reads the env's own observation, whose entries lie in [0, 1]; entry {i} "
                f"is {x!r}. An observation wrapper (NormalizeObservation, VecNormalize) rescales "
                f"them: give {reader} the observations the env itself returns")


# The four entries of each device d, from 4 + 4d, in this order.
DEVICE_FIELDS = ("backlog", "free_memory", "online", "speed")


def device_entries(d: int, field: str) -> slice:
    """Where one of the `DEVICE_FIELDS` of each of the D devices is (entries 4 + 4d + k), as a
    slice of a list or array."""
    k = DEVICE_FIELDS.index(field)
    return slice(4 + k, 4 + 4 * d, 4)


def previous_entries(d: int) -> slice:
    """Where the previous task's (3, D) shares are (from entry 5 + 4D), flattened stage-major."""
    return slice(5 + 4 * d, None)


def decode_backlog(x: float) -> float:
    """Invert the env's x = b / (b + BACKLOG_SCALE_S)."""
    if x >= 1.0:
        return _MAX_BACKLOG_S
    return max(0.0, BACKLOG_SCALE_S * x / (1.0 - x))


def decode_batch(x: float) -> int:
    return max(1, int(round(x * BATCH_SCALE)))


def decode_cache_signal(x: float) -> bool | None:
    if x > 0.75:
        return True
    if x < 0.25:
        return False
    return None


def decode_task(v: Any) -> tuple[int, int, int, bool | None]:
    """(batch, prompt tokens, output tokens, cache signal) from an observation's first entries
    (a list of floats on the policies' per-step paths; anything indexable works)."""
    return (decode_batch(v[0]), max(1, int(round(v[1] * PROMPT_SCALE))),
            max(1, int(round(v[2] * OUTPUT_SCALE))), decode_cache_signal(v[3]))


class ObservedState(NamedTuple):
    """An observation decoded back into the quantities it scales (see the env's table)."""

    batch: int
    prompt_tokens: int
    output_tokens: int
    cache_hit: bool | None          # None: the loader has no cache
    backlog: tuple[float, ...]      # seconds of queued work per device
    free_memory: tuple[float, ...]  # 1 - weights / memory where resident, else 1
    online: tuple[bool, ...]
    speed_ratio: tuple[float, ...]  # measured nominal/observed stage time (1 = as the datasheet)
    hit_rate: float
    previous: np.ndarray            # (3, D) previous task's share of each stage per device


def decode_observation(obs: Any) -> ObservedState:
    """Decode one observation of the env (entries beyond the scaling caps decode to the caps);
    ValueError for an entry outside [0, 1], which the env never writes (`check_in_box`), and
    for a batch of more than one (shape (1, N) is the one observation it holds): flattened,
    8 rows of a vector env passed the length check as one observation of 29 devices."""
    o = np.asarray(obs, dtype=np.float64)
    if o.ndim > 1 and not (o.ndim == 2 and o.shape[0] == 1):
        raise ValueError(f"decode_observation takes one observation; got shape {o.shape}: "
                         f"decode each row")
    o = o.reshape(-1)
    d = n_devices_of(o.shape[0])
    v = o.tolist()
    check_in_box(v, "decode_observation")
    batch, prompt, output, cache_hit = decode_task(v)
    return ObservedState(
        batch=batch, prompt_tokens=prompt, output_tokens=output, cache_hit=cache_hit,
        backlog=tuple(decode_backlog(x) for x in v[device_entries(d, "backlog")]),
        free_memory=tuple(v[device_entries(d, "free_memory")]),
        online=tuple(x > 0.5 for x in v[device_entries(d, "online")]),
        speed_ratio=tuple(SPEED_SCALE * x for x in v[device_entries(d, "speed")]),
        hit_rate=v[4 + 4 * d],
        previous=o[previous_entries(d)].reshape(3, d).copy(),
    )
