"""The hyper-parameter overrides of train.py's ``--hp`` and a config file's ``hp:``, parsed and
layered over the YAML's, without importing torch or SB3 (``agents.sb3_hyperparams``, which
checks them against the agent, does): train.py reads its options before it loads them."""

from __future__ import annotations

from typing import Any

import yaml

from inference.messages import shown
from inference.yamlio import describe_yaml_error, safe_load


def layer_hyperparams(params: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`top` over `params` (a warm start's values, or overrides): a policy_kwargs in `top`
    merges into the one below. Replacing it, {net_arch: [8]} used to drop activation_fn (and
    log_std_init), so the net trained with ReLU unannounced."""
    out = {**params, **top}
    if isinstance(top.get("policy_kwargs"), dict) and isinstance(
            params.get("policy_kwargs") or {}, dict):
        out["policy_kwargs"] = {**(params.get("policy_kwargs") or {}), **top["policy_kwargs"]}
    return out


def kept_below(params: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """The entries of `params` that ``layer_hyperparams(params, top)`` keeps: those `top` does
    not set, and of a policy_kwargs in both (which merges), the keys `top`'s does not set.
    Another mapping (replay_buffer_kwargs) in `top` replaces the one below whole."""
    out = {}
    for key, value in params.items():
        if key not in top:
            out[key] = value
        elif key == "policy_kwargs" and isinstance(value, dict) and isinstance(top[key], dict):
            kept = {k: v for k, v in value.items() if k not in top[key]}
            if kept:
                out[key] = kept
    return out


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["learning_rate=3e-4", "policy_kwargs={net_arch: [32, 32]}"]`` -> dict (YAML scalars)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"hyper-parameter override {shown(item)} must look like key=value")
        try:
            parsed = safe_load(value)
        except yaml.YAMLError as exc:
            raise ValueError(f"hyper-parameter override {shown(item)}: value is not valid YAML "
                             f"({describe_yaml_error(exc)})") from None
        # layered as a warm start's values are: "--hp policy_kwargs={net_arch: [8]} --hp
        # policy_kwargs={activation_fn: relu}" kept only the second, net_arch dropped
        out = layer_hyperparams(out, {key.strip(): parsed})
    return out
