"""The analytic face of a stage: what work it asks of a device.

A stage implementation's ``work(task, model)`` returns a ``StageWork``: a few
``WorkPart``s (each one op class, one memory-access pattern) plus what the
stage reads from disk, hands to the next stage and needs in device memory.
The simulator turns a part into time on a device as
``max(flops / (peak * op_eff), bytes / (bandwidth * pattern_eff)) + launches * overhead``.
"""

from __future__ import annotations

from typing import NamedTuple

from inference.hardware import OP_CLASSES, PATTERNS
from inference.model_config import ModelConfig

DENSE, ATTENTION, DYNAMIC, PREPROCESS = (OP_CLASSES.index(o) for o in OP_CLASSES)
SEQUENTIAL, STRIDED, RANDOM = (PATTERNS.index(p) for p in PATTERNS)
TOKEN_ID_BYTES = 4.0   # one token id, as loading hands it to prefill and decode returns it


# `new_record(WorkPart, (tag, op, ...))` is `WorkPart(tag, op, ...)` with every field given, in
# order: the same record, without the generated __new__'s argument binding (a Python call). The
# cost model builds about ten records per simulated task, so its hot paths build them this way.
new_record = tuple.__new__


class WorkPart(NamedTuple):
    """One homogeneous piece of a stage's work.

    ``flops`` and ``nbytes`` scale with the share of the batch a device takes;
    ``fixed_bytes`` (streaming the weights) is paid in full by every device
    that takes any share. ``tag`` names what the part is (``attention``,
    ``kv``, ``weights``, ...) so that reports can break time down by it.
    """

    tag: str
    op: int
    pattern: int
    flops: float
    nbytes: float
    fixed_bytes: float = 0.0
    launches: float = 0.0


class StageWork(NamedTuple):
    """Everything the simulator needs to know about one stage of one task."""

    parts: tuple[WorkPart, ...]
    io_bytes: float = 0.0       # read from the data disk before compute
    output_bytes: float = 0.0   # handed to the next stage (tokens, KV cache)
    footprint: float = 0.0      # device memory while it runs, beside the weights
    needs_weights: bool = False

    @property
    def flops(self) -> float:
        return sum(p.flops for p in self.parts)

    @property
    def nbytes(self) -> float:
        return sum(p.nbytes + p.fixed_bytes for p in self.parts)

    @property
    def launches(self) -> float:
        return sum(p.launches for p in self.parts)

    def part(self, tag: str) -> WorkPart:
        for p in self.parts:
            if p.tag == tag:
                return p
        raise KeyError(f"no work part tagged {tag!r}; parts: {[p.tag for p in self.parts]}")


def causal_pairs(n: int, window: int | None = None) -> float:
    """Query-key pairs of causal attention over n tokens, each query seeing at most `window` keys."""
    if window is None or window >= n:
        return n * (n + 1) / 2
    return window * (window + 1) / 2 + (n - window) * window


# --- parts shared by several stage implementations ------------------------------------------

def prefill_dense_part(batch: int, n: int, model: ModelConfig) -> WorkPart:
    """Projections and MLP of every prompt token, plus the LM head of the last one."""
    dense_params = model.n_layers * model.params_per_layer
    flops = 2.0 * batch * n * dense_params + 2.0 * batch * model.vocab * model.hidden
    # Activations written and read back a few times per layer (norms, residuals, MLP inner).
    act_bytes = 6.0 * batch * n * model.hidden * model.dtype_bytes * model.n_layers
    return new_record(WorkPart, ("dense", DENSE, SEQUENTIAL, flops, act_bytes,
                                 float(model.weight_bytes), 8.0 * model.n_layers))


def prefill_output(batch: int, n: int, model: ModelConfig) -> tuple[float, float]:
    """(KV-cache bytes handed to decode, activation footprint beside the weights)."""
    kv = float(batch * n * model.kv_bytes_per_token)
    activations = 4.0 * batch * n * model.hidden * model.dtype_bytes
    return kv, kv + activations


def decode_weights_part(batch: int, n: int, m: int, model: ModelConfig) -> WorkPart:
    """Every generated token streams all weights once (decode is memory bound)."""
    dense_params = model.n_layers * model.params_per_layer + model.vocab * model.hidden
    flops = 2.0 * batch * m * dense_params
    return new_record(WorkPart, ("weights", DENSE, SEQUENTIAL, flops, 0.0,
                                 float(m * model.weight_bytes), 10.0 * model.n_layers * m))


def decode_kv_traffic(batch: int, n: int, m: int, model: ModelConfig) -> tuple[float, float]:
    """(attention FLOPs, KV-cache bytes read) over m decode steps with n prompt tokens."""
    contexts = m * n + m * (m - 1) / 2.0          # sum of context lengths over the steps
    flops = 4.0 * batch * model.head_dim * model.n_heads * model.n_layers * contexts
    return flops, batch * model.kv_bytes_per_token * contexts
