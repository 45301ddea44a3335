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
are not imported here, so ``import agents`` stays light.
"""

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
