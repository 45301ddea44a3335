"""The analytic face of a stage: what work it asks of a device.

A stage implementation's ``work(task, model)`` returns a ``StageWork``: a few
``WorkPart``s (each one op class, one memory-access pattern) plus what the
stage reads from disk, hands to the next stage and needs in device memory.
The simulator turns a part into time on a device as
``max(flops / (peak * op_eff), bytes / (bandwidth * pattern_eff)) + launches * overhead``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from inference.hardware import OP_CLASSES, PATTERNS

if TYPE_CHECKING:
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

    def memory_need(self, weight_bytes: float, fraction: float = 1.0) -> float:
        """Device memory a `fraction` of this stage holds while it runs: that share of the
        footprint (KV cache, activations, buffers scale with the batch) plus the whole
        weights, which every device running any share of it needs."""
        return fraction * self.footprint + (weight_bytes if self.needs_weights else 0.0)

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


# --- the model's factors in the formulas ---------------------------------------------------

class WorkCoefficients(NamedTuple):
    """The model-dependent factors of the cost formulas, per token, pair or step of one sequence.

    Every quantity a stage prices is one of these times the task's sizes (and a stage's own
    calibrated constants), so the formulas below read the model's shape through them only.
    They are derived once per model (`ModelConfig.work_coefficients`): pricing a task is then a
    handful of multiplications instead of a walk over the model's shape for every record.
    """

    n_layers: float
    dtype_bytes: float
    dense_flops: float      # projections + MLP of one token: 2 FLOPs per weight of every layer
    head_flops: float       # the LM head of one token: 2 * vocab * hidden
    layer_hidden: float     # one token's hidden elements over the layers: hidden * n_layers
    token_bytes: float      # one token's hidden state, in one layer: hidden * dtype_bytes
    layer_token_bytes: float  # ... summed over the layers
    pair_flops: float       # QK^T and AV of one (query, key) pair: 4 * head_dim per head
    head_pairs: float       # (query, key) pairs per pair of tokens: heads x layers
    pair_flops_all: float   # pair_flops x head_pairs: one pair of tokens, every head and layer
    kv_bytes: float         # KV cache of one token (K and V, every layer)
    weight_bytes: float     # the whole model's weights
    step_weight_bytes: float  # ... less the input embedding table, which a step reads b rows of

    @classmethod
    def of(cls, model: ModelConfig) -> WorkCoefficients:
        layers = float(model.n_layers)
        token_bytes = float(model.hidden * model.dtype_bytes)
        pair_flops = 4.0 * model.head_dim
        head_pairs = float(model.n_heads * model.n_layers)
        return cls(
            n_layers=layers,
            dtype_bytes=float(model.dtype_bytes),
            dense_flops=2.0 * model.n_layers * model.params_per_layer,
            head_flops=2.0 * model.vocab * model.hidden,
            layer_hidden=float(model.hidden * model.n_layers),
            token_bytes=token_bytes,
            layer_token_bytes=token_bytes * layers,
            pair_flops=pair_flops,
            head_pairs=head_pairs,
            pair_flops_all=pair_flops * head_pairs,
            kv_bytes=float(model.kv_bytes_per_token),
            weight_bytes=float(model.weight_bytes),
            step_weight_bytes=float(model.weight_bytes - model.vocab * token_bytes),
        )
