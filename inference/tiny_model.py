"""A tiny decoder-only transformer the real pipeline stages run on.

Why it exists: the prefill and decode stage variants must be checked for *correct outputs*
(window attention equals full causal attention when w >= n, hierarchical decoding emits the
same tokens as sequential decoding, ...). That needs a real model, but not a trained one:
seeded random weights give deterministic, non-trivial logits in milliseconds on a CPU.

The model is split into pieces (embed, qkv, finish_layer, logits) rather than one forward,
because the stages own the parts that differ between variants: the prefill stage plugs in
the attention function, the decode stage owns the KV-cache layout.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from inference.model_config import ModelConfig, check_seed

#: An attention kernel: q, k, v [batch, heads, seq, head_dim] -> output [batch, heads, seq_q, head_dim].
#: k and v already have one head per query head (grouped-query heads are expanded first).
AttentionFn = Callable[[Tensor, Tensor, Tensor], Tensor]


def causal_mask(n_q: int, n_k: int) -> Tensor:
    """Boolean [n_q, n_k] mask, True where key j is visible to query i.

    The queries are the *last* n_q positions of the n_k keys (query i sits at absolute
    position i + n_k - n_q), so the same mask serves prefill (n_q == n_k) and decode (n_q == 1).
    """
    offset = n_k - n_q
    q_pos = torch.arange(n_q).unsqueeze(1) + offset
    k_pos = torch.arange(n_k).unsqueeze(0)
    return k_pos <= q_pos


def attention_scores(q: Tensor, k: Tensor) -> Tensor:
    """Scaled dot-product scores [batch, heads, n_q, n_k]."""
    return q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])


def masked_attention(scores: Tensor, mask: Tensor, v: Tensor) -> Tensor:
    """Softmax over the keys `mask` keeps (every row must keep at least one), then weight v."""
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return probs @ v


def full_causal_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Reference attention: every query sees every key at or before its own position."""
    return masked_attention(attention_scores(q, k), causal_mask(q.shape[-2], k.shape[-2]), v)


def rms_norm(x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def apply_rope(x: Tensor, start_pos: int, base: float = 10000.0) -> Tensor:
    """Rotary position embedding (rotate-half form) for positions start_pos.. of x [.., seq, d]."""
    seq, dim = x.shape[-2], x.shape[-1]
    half = dim // 2
    freqs = base ** (-torch.arange(half, dtype=torch.float32) / half)
    angles = torch.arange(start_pos, start_pos + seq, dtype=torch.float32)[:, None] * freqs
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


@dataclass(frozen=True)
class LayerWeights:
    """One block: RMSNorm + GQA attention, RMSNorm + gated (SiLU) MLP. Weights are [in, out]."""

    attn_norm: Tensor
    wq: Tensor
    wk: Tensor
    wv: Tensor
    wo: Tensor
    mlp_norm: Tensor
    w_gate: Tensor
    w_up: Tensor
    w_down: Tensor


class TinyTransformer:
    """Decoder-only transformer with seeded random float32 weights; inference only.

    Args:
        config: the shape (see `ModelConfig`); `get_model("tiny")` is the intended one.
        seed: seeds the torch.Generator that draws every weight, so equal seeds give equal models.
        rope: apply rotary position embeddings to q and k (needs an even head_dim).
    """

    def __init__(self, config: ModelConfig, seed: int = 0, rope: bool = True) -> None:
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config must be a ModelConfig, got {type(config).__name__}")
        seed = check_seed(seed)
        if rope and config.head_dim % 2:
            raise ValueError(f"rope needs an even head_dim, got head_dim={config.head_dim}")
        self.config = config
        self.rope = rope
        gen = torch.Generator().manual_seed(seed)

        def draw(fan_in: int, fan_out: int) -> Tensor:
            return torch.randn(fan_in, fan_out, generator=gen) / math.sqrt(fan_in)

        c = config
        self.embedding = torch.randn(c.vocab, c.hidden, generator=gen)
        self.layers = [
            LayerWeights(
                attn_norm=torch.ones(c.hidden),
                wq=draw(c.hidden, c.hidden),
                wk=draw(c.hidden, c.kv_dim),
                wv=draw(c.hidden, c.kv_dim),
                wo=draw(c.hidden, c.hidden),
                mlp_norm=torch.ones(c.hidden),
                w_gate=draw(c.hidden, c.ffn),
                w_up=draw(c.hidden, c.ffn),
                w_down=draw(c.ffn, c.hidden),
            )
            for _ in range(c.n_layers)
        ]
        self.final_norm = torch.ones(c.hidden)
        self.lm_head = draw(c.hidden, c.vocab)

    @torch.no_grad()
    def embed(self, tokens: Tensor) -> Tensor:
        """Token ids [batch, n] -> hidden states [batch, n, hidden]."""
        return self.embedding[tokens]

    @torch.no_grad()
    def qkv(self, layer: int, h: Tensor, start_pos: int) -> tuple[Tensor, Tensor, Tensor]:
        """Normalise h [batch, n, hidden] and project: q [b, heads, n, d], k and v [b, kv_heads, n, d].

        RoPE is applied to q and k for absolute positions start_pos .. start_pos + n - 1.
        """
        c, w = self.config, self.layers[layer]
        b, n, _ = h.shape
        x = rms_norm(h, w.attn_norm)
        q = (x @ w.wq).view(b, n, c.n_heads, c.head_dim).transpose(1, 2)
        k = (x @ w.wk).view(b, n, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = (x @ w.wv).view(b, n, c.n_kv_heads, c.head_dim).transpose(1, 2)
        if self.rope:
            q, k = apply_rope(q, start_pos), apply_rope(k, start_pos)
        return q, k, v

    def expand_kv(self, x: Tensor) -> Tensor:
        """Grouped-query attention: repeat each kv head for the query heads that share it."""
        return x.repeat_interleave(self.config.n_heads // self.config.n_kv_heads, dim=1)

    @torch.no_grad()
    def finish_layer(self, layer: int, h: Tensor, attn: Tensor) -> Tensor:
        """Output projection + residual, then the gated MLP + residual. attn is [b, heads, n, d]."""
        w = self.layers[layer]
        b, _, n, _ = attn.shape
        h = h + attn.transpose(1, 2).reshape(b, n, self.config.hidden) @ w.wo
        x = rms_norm(h, w.mlp_norm)
        return h + (torch.nn.functional.silu(x @ w.w_gate) * (x @ w.w_up)) @ w.w_down

    @torch.no_grad()
    def logits(self, h: Tensor) -> Tensor:
        """Hidden states [batch, n, hidden] -> logits [batch, n, vocab]."""
        return rms_norm(h, self.final_norm) @ self.lm_head

    @torch.no_grad()
    def forward(
        self, tokens: Tensor, attention: AttentionFn = full_causal_attention
    ) -> tuple[Tensor, list[tuple[Tensor, Tensor]], Tensor]:
        """Run the whole prompt: (logits [b, n, vocab], per-layer (k, v) cache, final hidden states).

        `attention` is called once per layer, in layer order, with expanded k and v.
        """
        h = self.embed(tokens)
        cache: list[tuple[Tensor, Tensor]] = []
        for layer in range(self.config.n_layers):
            q, k, v = self.qkv(layer, h, 0)
            cache.append((k, v))
            h = self.finish_layer(layer, h, attention(q, self.expand_kv(k), self.expand_kv(v)))
        return self.logits(h), cache, h
