"""Stage implementations by name, and the three variant recipes of the article.

A variant is one implementation per stage; any mix is allowed::

    build_stages("glm-5.3-flash")
    build_stages("adaptive+window+prefetched")      # the mix as variant_label writes it
    build_stages({"load": "adaptive", "prefill": "window", "decode": "prefetched"})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inference.messages import did_you_mean, shown
from inference.stages.decode import HierarchicalDecode, PrefetchedDecode, SequentialDecode
from inference.stages.load import AdaptiveLoad, CachedLoad, DirectLoad
from inference.stages.prefill import DynamicAttention, GatedAttention, WindowAttention
from inference.task import STAGES

IMPLEMENTATIONS: dict[str, dict[str, type]] = {
    "load": {"direct": DirectLoad, "cached": CachedLoad, "adaptive": AdaptiveLoad},
    "prefill": {"window": WindowAttention, "dynamic": DynamicAttention, "gated": GatedAttention},
    "decode": {"sequential": SequentialDecode, "hierarchical": HierarchicalDecode,
               "prefetched": PrefetchedDecode},
}

VARIANTS: dict[str, dict[str, str]] = {
    "glm-5.3": {"load": "direct", "prefill": "window", "decode": "sequential"},
    "glm-5.3-flash": {"load": "cached", "prefill": "dynamic", "decode": "hierarchical"},
    "glm-5.3-flash-opt": {"load": "adaptive", "prefill": "gated", "decode": "prefetched"},
}

# Constructor arguments for the 9B-class model the cost model prices, where the real stages'
# own defaults (sized for the tiny model) differ. Calibrated figures: change with care.
COST_PARAMS: dict[str, dict[str, Any]] = {
    "window": {"window": 2048},
    "gated": {"window": 2048},          # gate_tokens=8192, open_fraction=0.25 are the defaults
    "hierarchical": {"block_size": 16},
    "prefetched": {"block_size": 16},
}


def resolve_variant(spec: str | Mapping[str, str]) -> dict[str, str]:
    """A recipe name, a 'load+prefill+decode' mix (as `variant_label` writes one) or a
    {stage: implementation} mapping, checked; returns the mapping."""
    if isinstance(spec, str):
        if "+" in spec:
            parts = [p.strip() for p in spec.split("+")]
            if len(parts) != len(STAGES):
                raise ValueError(f"variant mix {shown(spec)} needs one implementation per stage "
                                 f"({'+'.join(STAGES)})")
            return resolve_variant(dict(zip(STAGES, parts, strict=True)))
        if spec not in VARIANTS:
            raise ValueError(f"unknown variant {shown(spec)}{did_you_mean([spec], VARIANTS)}; "
                             f"known variants: {', '.join(VARIANTS)}, or a "
                             f"{'+'.join(STAGES)} mix of implementations")
        return dict(VARIANTS[spec])
    if not isinstance(spec, Mapping):
        raise ValueError(f"variant must be a recipe name or a mapping, got {type(spec).__name__}")
    if set(spec) != set(STAGES):
        raise ValueError(
            f"variant mapping needs exactly the stages {', '.join(STAGES)}; got {sorted(spec, key=str)}"
        )
    for stage in STAGES:
        if not isinstance(spec[stage], str) or spec[stage] not in IMPLEMENTATIONS[stage]:
            raise ValueError(
                f"unknown {stage} implementation {shown(spec[stage])}"
                f"{did_you_mean([spec[stage]], IMPLEMENTATIONS[stage])}; "
                f"known: {', '.join(IMPLEMENTATIONS[stage])}"
            )
    return {stage: spec[stage] for stage in STAGES}


def variant_label(spec: str | Mapping[str, str]) -> str:
    """The recipe name when the mapping is a recipe, else 'load+prefill+decode'."""
    recipe = resolve_variant(spec)
    for name, known in VARIANTS.items():
        if known == recipe:
            return name
    return "+".join(recipe[s] for s in STAGES)


def build_stages(spec: str | Mapping[str, str]) -> tuple[Any, Any, Any]:
    """Instances of the three stage implementations of a variant, with cost-model parameters."""
    recipe = resolve_variant(spec)
    load, prefill, decode = (
        IMPLEMENTATIONS[stage][recipe[stage]](**COST_PARAMS.get(recipe[stage], {}))
        for stage in STAGES
    )
    return load, prefill, decode
