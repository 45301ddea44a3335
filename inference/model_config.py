"""Transformer shapes: a `tiny` one the real torch stages run, a 9B-class one for the cost model."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from inference.checks import is_integer
from inference.messages import did_you_mean, shown

if TYPE_CHECKING:
    from inference.work import WorkCoefficients


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a decoder-only transformer with grouped-query attention.

    Attributes:
        name: registry name.
        n_layers: transformer blocks.
        hidden: model width.
        ffn: feed-forward inner width (gated MLP: three matrices of hidden x ffn).
        n_heads: query heads.
        n_kv_heads: key/value heads (grouped-query attention).
        vocab: vocabulary size.
        dtype_bytes: bytes per weight / activation element (2 for bf16).
    """

    name: str
    n_layers: int
    hidden: int
    ffn: int
    n_heads: int
    n_kv_heads: int
    vocab: int
    dtype_bytes: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:   # what errors and labels show
            raise ValueError(f"ModelConfig.name must be a non-empty string, got {self.name!r}")
        for field in ("n_layers", "hidden", "ffn", "n_heads", "n_kv_heads", "vocab", "dtype_bytes"):
            value = getattr(self, field)
            if not is_integer(value) or value < 1:
                raise ValueError(f"ModelConfig.{field} must be a positive integer, got {value!r}")
            object.__setattr__(self, field, int(value))   # as the frozen __init__ sets a field
        if self.hidden % self.n_heads:
            raise ValueError(f"ModelConfig.hidden ({self.hidden}) must be divisible by n_heads ({self.n_heads})")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"ModelConfig.n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads})")

    # The derived sizes below are cached on first use: the cost model reads them several times
    # per stage of every simulated task, and the config is frozen, so they never go stale.
    # (`cached_property` stores into the instance __dict__, which a frozen dataclass allows.)
    @cached_property
    def head_dim(self) -> int:
        return self.hidden // self.n_heads

    @cached_property
    def kv_dim(self) -> int:
        """Width of the K (or V) projection: n_kv_heads * head_dim."""
        return self.n_kv_heads * self.head_dim

    @cached_property
    def params_per_layer(self) -> int:
        attn = self.hidden * (self.hidden + 2 * self.kv_dim) + self.hidden * self.hidden
        mlp = 3 * self.hidden * self.ffn
        return attn + mlp

    @cached_property
    def n_params(self) -> int:
        return self.n_layers * self.params_per_layer + 2 * self.vocab * self.hidden

    @cached_property
    def weight_bytes(self) -> int:
        return self.n_params * self.dtype_bytes

    @cached_property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token adds across all layers (K and V)."""
        return 2 * self.n_layers * self.kv_dim * self.dtype_bytes

    @cached_property
    def work_coefficients(self) -> WorkCoefficients:
        """The factors of the cost formulas this shape gives (see `inference.work`)."""
        from inference.work import WorkCoefficients

        return WorkCoefficients.of(self)


MODELS: dict[str, ModelConfig] = {
    # Runs the real torch stages on a CPU in milliseconds.
    "tiny": ModelConfig("tiny", n_layers=2, hidden=64, ffn=128, n_heads=4, n_kv_heads=2, vocab=256),
    # The public GLM-4-9B shape, a fair stand-in for a 9B-class GLM-5.3 (cost model only).
    "glm-9b": ModelConfig(
        "glm-9b", n_layers=40, hidden=4096, ffn=13696, n_heads=32, n_kv_heads=2, vocab=151552
    ),
}


def get_model(name: str) -> ModelConfig:
    """Look a model config up by name; an unknown name lists the known ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {shown(name)}{did_you_mean([name], MODELS)}; known "
                         f"models: {', '.join(sorted(MODELS))}") from None


def check_seed(seed: object) -> int:
    """`seed` as the int the real stages hand to torch's ``manual_seed``, checked at
    construction (torch refused a bad one only inside ``run()``): an integer, numpy's
    included, in [-2**63, 2**64); bools are refused."""
    if not is_integer(seed) or not -2**63 <= int(seed) < 2**64:
        raise ValueError(f"seed must be an integer in [-2**63, 2**64), got {seed!r}")
    return int(seed)
