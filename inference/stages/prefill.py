"""Prefill stage: run the prompt through the model once and build the KV cache.

Three attention variants, after the article:
  * `window`  (GLM-5.3): each query sees its last `window` keys, O(n * w).
  * `dynamic` (Flash): "pairwise token weights" -- an n x n relevance matrix per head selects
    which keys each query attends to, O(n^2) however few keys survive.
  * `gated`   (Flash-optimized): a cheap per-layer gate turns dynamic attention on only where
    the window is likely too narrow, otherwise it runs window attention.

Each class has two faces: `run(model, tokens)` runs the real torch kernels
(`inference.stages.attention`, imported on first use) on a `TinyTransformer`, and
`work(task, model)` prices the same variant analytically for the cost model. The constructor
defaults suit the tiny model; `variants.COST_PARAMS` holds the 9B-class values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inference.checks import is_integer, is_number
from inference.model_config import ModelConfig
from inference.task import Task
from inference.work import (
    ATTENTION,
    DENSE,
    DYNAMIC,
    SEQUENTIAL,
    STRIDED,
    StageWork,
    WorkPart,
    causal_pairs,
    new_record,
)

if TYPE_CHECKING:
    from torch import Tensor

    from inference.tiny_model import TinyTransformer
    from inference.work import WorkCoefficients

# ---- cost model: calibrated figures for 9B-class serving (do not edit casually) ----------------
QUERY_TILE = 128                  # fused attention streams K/V once per tile of queries
PAIR_WEIGHT_FLOPS = 16.0          # dynamic: relevance MLP + selection per (pair, head)
PAIR_WEIGHT_PASSES = 3.0          # dynamic: write weights, read to select, read to normalise


@dataclass(frozen=True)
class PrefillResult:
    """What prefill hands to decode.

    Attributes:
        logits: logits of the last prompt position, [batch, vocab].
        kv_cache: per layer, (k, v) each [batch, kv_heads, n, head_dim] (RoPE already applied to k).
        hidden: final-layer hidden states (before the final norm), [batch, n, hidden].
    """

    logits: Tensor
    kv_cache: tuple[tuple[Tensor, Tensor], ...]
    hidden: Tensor

    @property
    def n_tokens(self) -> int:
        """Prompt length n, i.e. the position the first decoded token's successor will take."""
        return self.kv_cache[0][0].shape[2]


def _check_window(window: object) -> int:
    if not is_integer(window) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    return int(window)


def _check_fraction(name: str, value: object) -> float:
    if not is_number(value):
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


# ---- analytic work ------------------------------------------------------------------------


# `c` is the model's `WorkCoefficients` (`model.work_coefficients`): a record is a few
# multiplications of those by the task's sizes. `layer_fraction` is the share of the layers
# that run the part (the gated variant splits them between window and dynamic attention).

def _window_part(b: int, n: int, c: WorkCoefficients, window: int,
                 layer_fraction: float = 1.0) -> WorkPart:
    flops = b * causal_pairs(n, window) * c.pair_flops_all * layer_fraction
    # Q and O of every token once per layer; fused attention streams K/V once per query tile.
    tiles = -(-n // QUERY_TILE)
    nbytes = b * (2 * n * c.layer_token_bytes + tiles * min(n, window) * c.kv_bytes) * layer_fraction
    return new_record(WorkPart, ("attention", ATTENTION, SEQUENTIAL, flops, nbytes, 0.0,
                                 2.0 * c.n_layers * layer_fraction))


def _dynamic_part(b: int, n: int, c: WorkCoefficients, layer_fraction: float = 1.0) -> WorkPart:
    # causal_pairs(n) written out: this runs for every task the env prices (see `_prefill_work`)
    pairs = n * (n + 1) / 2 * b * c.head_pairs * layer_fraction
    flops = pairs * (c.pair_flops + PAIR_WEIGHT_FLOPS)
    nbytes = pairs * c.dtype_bytes * PAIR_WEIGHT_PASSES
    return new_record(WorkPart, ("attention", DYNAMIC, STRIDED, flops, nbytes, 0.0,
                                 6.0 * c.n_layers * layer_fraction))


def _prefill_work(b: int, n: int, c: WorkCoefficients, attention: tuple[WorkPart, ...]) -> StageWork:
    """The part every variant shares -- projections and MLP of every prompt token plus the LM
    head of the last one, and the KV cache handed to decode -- around the variant's attention.

    The formulas are written out here rather than in helpers: the environment builds this record
    for every task, and each Python call layer is a sizeable share of its cost."""
    tokens = b * n
    kv = tokens * c.kv_bytes                             # KV-cache bytes handed to decode
    footprint = kv + 4.0 * tokens * c.token_bytes        # ... plus activations, beside the weights
    flops = b * (n * c.dense_flops + c.head_flops)
    # Activations written and read back a few times per layer (norms, residuals, MLP inner).
    act_bytes = 6.0 * b * n * c.layer_token_bytes
    dense = new_record(WorkPart, ("dense", DENSE, SEQUENTIAL, flops, act_bytes,
                                  c.weight_bytes, 8.0 * c.n_layers))
    # (parts, io_bytes, output_bytes, footprint, needs_weights): see work.py on `new_record`
    return new_record(StageWork, ((dense,) + attention, 0.0, kv, footprint, True))


# ---- the three variants -------------------------------------------------------------------


class WindowAttention:
    """Fixed-window causal attention (the GLM-5.3 baseline); window >= n is full attention."""

    stage = "prefill"
    name = "window"

    def __init__(self, window: int = 64) -> None:
        self.window = _check_window(window)

    def attention(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        from inference.stages.attention import window_attention

        return window_attention(q, k, v, self.window)

    def run(self, model: TinyTransformer, tokens: Tensor) -> PrefillResult:
        from inference.stages.attention import run_prefill

        return run_prefill(model, tokens, self.attention)

    def work(self, task: Task, model: ModelConfig) -> StageWork:
        """Dense projections/MLP plus O(n * window) fused attention."""
        b, n, c = task.batch, task.prompt_tokens, model.work_coefficients
        return _prefill_work(b, n, c, (_window_part(b, n, c, self.window),))


class DynamicAttention:
    """Pairwise-weight key selection (Flash); threshold 0 keeps all keys = full attention.

    Args:
        threshold: relative cut-off in [0, 1]; key j survives for query i when its causal
            softmax weight is at least threshold x the largest weight of row i.
    """

    stage = "prefill"
    name = "dynamic"

    def __init__(self, threshold: float = 0.0) -> None:
        self.threshold = _check_fraction("threshold", threshold)

    def attention(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        from inference.stages.attention import dynamic_attention

        return dynamic_attention(q, k, v, self.threshold)

    def run(self, model: TinyTransformer, tokens: Tensor) -> PrefillResult:
        from inference.stages.attention import run_prefill

        return run_prefill(model, tokens, self.attention)

    def work(self, task: Task, model: ModelConfig) -> StageWork:
        """Dense projections/MLP plus O(n^2) pairwise weights (dynamic shapes, strided access)."""
        b, n, c = task.batch, task.prompt_tokens, model.work_coefficients
        return _prefill_work(b, n, c, (_dynamic_part(b, n, c),))


class GatedAttention:
    """Window attention, switched per layer to dynamic attention where that pays (Flash-opt).

    Gate (mode "auto"), evaluated per layer on that layer's q and k, once for the whole batch
    (the entropy is averaged over every sequence): unlike the window and dynamic variants, a
    sequence's output can then depend on the other sequences batched with it:
      * off when the sequence fits in the window (n <= window): window attention is then exact;
      * otherwise on when the window attention is *spread out* -- its mean normalised entropy
        (entropy / log(visible keys), in [0, 1]) is >= `spread`. Flat window weights suggest the
        relevant keys lie beyond the window; peaked ones say the window already has them.
    Here the gate's probe costs O(n * w), like window attention itself; the cost model
    (`work`) prices a gate of one score per hidden element, O(n * hidden) per layer.

    Args:
        window: window of the gate-off branch (and of the gate's own probe).
        threshold: the dynamic branch's relative threshold (see `DynamicAttention`).
        spread: entropy level in [0, 1] above which the gate turns on.
        mode: "auto" (the rule above), "on" (always dynamic) or "off" (always window).
        gate_tokens: cost model: prompts up to this length never open the gate.
        open_fraction: cost model: share of layers whose gate opens on longer prompts.

    After `run`, `gate_log` lists the decision per layer (True = dynamic).
    """

    stage = "prefill"
    name = "gated"
    MODES = ("auto", "on", "off")

    def __init__(
        self, window: int = 64, threshold: float = 0.0, spread: float = 0.5, mode: str = "auto",
        gate_tokens: int = 8192, open_fraction: float = 0.25,
    ) -> None:
        self.window = _check_window(window)
        self.threshold = _check_fraction("threshold", threshold)
        self.spread = _check_fraction("spread", spread)
        if mode not in self.MODES:
            raise ValueError(f"mode must be one of {self.MODES}, got {mode!r}")
        self.mode = mode
        if not is_integer(gate_tokens) or gate_tokens < 0:
            raise ValueError(f"gate_tokens must be an integer >= 0, got {gate_tokens!r}")
        self.gate_tokens = int(gate_tokens)
        self.open_fraction = _check_fraction("open_fraction", open_fraction)
        self.gate_log: list[bool] = []

    def gate(self, q: Tensor, k: Tensor) -> bool:
        """True where this layer should run dynamic attention."""
        from inference.stages.attention import window_is_spread

        if self.mode != "auto":
            return self.mode == "on"
        if k.shape[-2] <= self.window:
            return False
        return window_is_spread(q, k, self.window, self.spread)

    def attention(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        from inference.stages.attention import dynamic_attention, window_attention

        on = self.gate(q, k)
        self.gate_log.append(on)
        if on:
            return dynamic_attention(q, k, v, self.threshold)
        return window_attention(q, k, v, self.window)

    def run(self, model: TinyTransformer, tokens: Tensor) -> PrefillResult:
        from inference.stages.attention import run_prefill

        self.gate_log = []
        return run_prefill(model, tokens, self.attention)

    def work(self, task: Task, model: ModelConfig) -> StageWork:
        """Window attention plus the gate everywhere; dynamic attention only on prompts beyond
        `gate_tokens`, in the `open_fraction` of layers whose gate opens."""
        b, n, c = task.batch, task.prompt_tokens, model.work_coefficients
        # The gate: a score per hidden element of every layer, over each layer's hidden states.
        gate = new_record(WorkPart, ("gate", ATTENTION, SEQUENTIAL, 2.0 * b * n * c.layer_hidden,
                                     b * n * c.layer_token_bytes, 0.0, c.n_layers))
        if n <= self.gate_tokens:
            return _prefill_work(b, n, c, (_window_part(b, n, c, self.window), gate))
        frac = self.open_fraction
        window = _window_part(b, n, c, self.window, 1 - frac)
        return _prefill_work(b, n, c, (window, gate, _dynamic_part(b, n, c, frac)))
