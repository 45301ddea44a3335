"""Torch kernels of the prefill stage: window, dynamic (pairwise-weight) and gate probes.

`inference.stages.prefill` imports this module on first use, so that the cost model (and
`import inference`) never pays for importing torch.
The masks are built densely for clarity; what differs between variants for cost purposes is
what the real kernels would compute, which the prefill classes' `work` accounts for.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference.stages.prefill import PrefillResult
from inference.tiny_model import (
    AttentionFn,
    TinyTransformer,
    attention_scores,
    causal_mask,
    masked_attention,
)


def validate_tokens(tokens: object, vocab: int) -> Tensor:
    """Check a prompt batch: an integer tensor [batch, n], both >= 1, ids in [0, vocab)."""
    if not isinstance(tokens, Tensor):
        raise ValueError(f"tokens must be a torch.Tensor, got {type(tokens).__name__}")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must be an integer tensor, got dtype {tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"tokens must have shape [batch, n], got rank {tokens.dim()}")
    if tokens.numel() == 0:
        raise ValueError(f"tokens must be non-empty, got shape {tuple(tokens.shape)}")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab:
        raise ValueError(f"tokens must be ids in [0, {vocab}), got range [{low}, {high}]")
    return tokens.long()


def window_mask(n_q: int, n_k: int, window: int) -> Tensor:
    """Causal mask that also hides keys more than window - 1 positions behind the query."""
    offset = n_k - n_q
    distance = torch.arange(n_q).unsqueeze(1) + offset - torch.arange(n_k).unsqueeze(0)
    return causal_mask(n_q, n_k) & (distance < window)


def window_attention(q: Tensor, k: Tensor, v: Tensor, window: int) -> Tensor:
    return masked_attention(
        attention_scores(q, k), window_mask(q.shape[-2], k.shape[-2], window), v
    )


def dynamic_attention(q: Tensor, k: Tensor, v: Tensor, threshold: float) -> Tensor:
    """Attend only to keys whose pairwise weight reaches `threshold` x the row's largest weight.

    The pairwise weights are the causal softmax of q.k per head. The relative rule always keeps
    each query's strongest key (no empty rows); threshold 0 keeps every causal key.
    """
    scores = attention_scores(q, k)
    causal = causal_mask(q.shape[-2], k.shape[-2])
    weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    keep = causal & (weights >= threshold * weights.amax(dim=-1, keepdim=True))
    return masked_attention(scores, keep, v)


def window_is_spread(q: Tensor, k: Tensor, window: int, spread: float) -> bool:
    """Is the mean normalised entropy (entropy / log(visible keys), in [0, 1]) of window
    attention >= `spread`? False when no query sees more than one key (no spread to measure).
    """
    n_q, n_k = q.shape[-2], k.shape[-2]
    mask = window_mask(n_q, n_k, window)
    probs = torch.softmax(attention_scores(q, k).masked_fill(~mask, float("-inf")), dim=-1)
    entropy = -(probs * torch.log(probs.clamp_min(1e-30))).sum(-1)
    visible = mask.sum(-1)
    rows = visible > 1
    if not bool(rows.any()):
        return False
    normalised = entropy[..., rows] / torch.log(visible[rows].float())
    return bool(normalised.mean() >= spread)


def run_prefill(model: object, tokens: object, attention: AttentionFn) -> PrefillResult:
    """Run the prompt through `model` with `attention` in every layer."""
    if not isinstance(model, TinyTransformer):
        raise ValueError(f"model must be a TinyTransformer, got {type(model).__name__}")
    tokens = validate_tokens(tokens, model.config.vocab)
    with torch.no_grad():
        logits, cache, hidden = model.forward(tokens, attention)
    return PrefillResult(logits=logits[:, -1], kv_cache=tuple(cache), hidden=hidden)
