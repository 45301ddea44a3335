"""Policies that place LLM inference stages on devices, all answering SB3's ``predict``.

One interface (``predict(obs, state=None, episode_start=None, deterministic=True)``,
single observation or batch) lets one evaluation loop run every agent:

* static baselines (``agents.static``): all-CPU/GPU/NPU, any fixed placement, the best
  static placement (searched once with nominal figures), seeded random;
* HEFT earliest-finish-time (``agents.heft``), nominal or calibrated with the measured
  device speeds (the article's heterogeneous hardware awareness), and for the Split env
  ``heft-split`` (``agents.heft_split``), which divides each stage over devices;
* the per-step oracle (``agents.oracle``): exhaustive search with the true costs, a
  myopic lower bound that needs the live env;
* gated dynamic scheduling (``agents.gated``): small batches keep the previous placement;
* names -> policies and saved files -> policies (``agents.registry``).

The Stable-Baselines3 agents, warm-up and the online harness live in
``agents.sb3_factory``, ``agents.warmup`` and ``agents.online``; they import torch and
are not imported here. The names below are imported from their modules when first read, so
``import agents`` (and ``import agents.interrupts``, what the CLIs need first) loads nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # what type checkers see; at run time each name is imported when read
    from agents.base import Policy, read_policy_file
    from agents.gated import GatedScheduling
    from agents.heft import HeftPolicy
    from agents.heft_split import HeftSplitPolicy
    from agents.oracle import OraclePolicy
    from agents.registry import (
        NAME_PATTERNS,
        POLICY_NAMES,
        SB3_NAMES,
        SPLIT_POLICY_NAMES,
        load_policy,
        make_policy,
        policy_from_config,
        valid_names,
    )
    from agents.static import (
        RandomPolicy,
        StaticPolicy,
        best_static,
        placement_action,
        search_best_static,
        unwrap_env,
    )
    from envs.observation import ObservedState, decode_observation

_EXPORTS = {   # name -> the module it lives in, imported when the name is first read
    "GatedScheduling": "agents.gated",
    "HeftPolicy": "agents.heft",
    "HeftSplitPolicy": "agents.heft_split",
    "NAME_PATTERNS": "agents.registry",
    "ObservedState": "envs.observation",
    "OraclePolicy": "agents.oracle",
    "POLICY_NAMES": "agents.registry",
    "Policy": "agents.base",
    "RandomPolicy": "agents.static",
    "SB3_NAMES": "agents.registry",
    "SPLIT_POLICY_NAMES": "agents.registry",
    "StaticPolicy": "agents.static",
    "best_static": "agents.static",
    "decode_observation": "envs.observation",
    "load_policy": "agents.registry",
    "make_policy": "agents.registry",
    "placement_action": "agents.static",
    "policy_from_config": "agents.registry",
    "read_policy_file": "agents.base",
    "search_best_static": "agents.static",
    "unwrap_env": "agents.static",
    "valid_names": "agents.registry",
}


def __getattr__(name: str) -> Any:
    # PEP 562: a name is imported from its module when first read. `import agents.interrupts`
    # (what train.py and evaluate.py need first, to end a Ctrl-C in one line) loaded every
    # policy, gymnasium and numpy before it, a quarter second in which Ctrl-C was a traceback.
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agents' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "NAME_PATTERNS",
    "POLICY_NAMES",
    "SB3_NAMES",
    "SPLIT_POLICY_NAMES",
    "GatedScheduling",
    "HeftPolicy",
    "HeftSplitPolicy",
    "ObservedState",
    "OraclePolicy",
    "Policy",
    "RandomPolicy",
    "StaticPolicy",
    "best_static",
    "decode_observation",
    "load_policy",
    "make_policy",
    "placement_action",
    "policy_from_config",
    "read_policy_file",
    "search_best_static",
    "unwrap_env",
    "valid_names",
]
