"""Gymnasium environments for allocating LLM inference work across CPU, GPU and NPU.

Importing this package registers:

* ``InferenceAlloc-v0``: one device per stage (``MultiDiscrete``);
* ``InferenceAllocSplit-v0``: each stage's work split over the devices (``Box``);
* ``InferenceAllocMix-v0``: several scenarios, one drawn per episode, in either of the two
  (``envs.scenario_mix``; ``gymnasium.make(MIX_ENV_ID, scenarios=["article", "bursty"])``).

``gymnasium.make("envs:InferenceAlloc-v0")`` imports this package by itself.
The episode length is the ``episode_tasks`` registration kwarg (default: the scenario's).
A keyword an env does not take is one TypeError naming it, the nearest it takes and all it
takes (``envs.keywords``).
"""

from gymnasium.envs.registration import register, registry

from envs.inference_alloc import InferenceAllocEnv
from envs.inference_alloc_split import InferenceAllocSplitEnv
from envs.scenario import Scenario, load_scenario, scenario_names

ENV_IDS = ("InferenceAlloc-v0", "InferenceAllocSplit-v0")
# Not among ENV_IDS, which are what a policy acts in (and hyper-parameters are keyed by): a
# mix plays its scenarios in one of those (its env_id), which is what a learner trains for.
MIX_ENV_ID = "InferenceAllocMix-v0"

# Short names for the ids (train.py's --env, bench_env.py's --env).
ENV_ALIASES = {"discrete": ENV_IDS[0], "split": ENV_IDS[1]}


def canonical_env_id(name: str) -> str:
    """The registered id `name` stands for: an id, a short name of `ENV_ALIASES`, or
    ``envs:<id>`` as ``gymnasium.make`` takes it. Any other name is returned as it is, for
    the caller to refuse (`describe_env_ids` lists the valid ones)."""
    name = name.removeprefix("envs:")
    return ENV_ALIASES.get(name, name)


def describe_env_ids() -> str:
    """The valid env names, for an error: each id with its short name."""
    short = {env_id: alias for alias, env_id in ENV_ALIASES.items()}
    return ", ".join(f"{env_id} ({short[env_id]})" for env_id in ENV_IDS)


for _id, _entry in zip(ENV_IDS, ("envs.inference_alloc:InferenceAllocEnv",
                                 "envs.inference_alloc_split:InferenceAllocSplitEnv"), strict=True):
    if _id not in registry:
        register(id=_id, entry_point=_entry, kwargs={"scenario": "article", "episode_tasks": None})
if MIX_ENV_ID not in registry:
    register(id=MIX_ENV_ID, entry_point="envs.scenario_mix:ScenarioMixEnv")

__all__ = ["ENV_ALIASES", "ENV_IDS", "MIX_ENV_ID", "InferenceAllocEnv", "InferenceAllocSplitEnv", "Scenario",
           "canonical_env_id", "describe_env_ids", "load_scenario", "scenario_names"]
