"""Gymnasium environments for allocating LLM inference work across CPU, GPU and NPU.

Importing this package registers:

* ``InferenceAlloc-v0``: one device per stage (``MultiDiscrete``);
* ``InferenceAllocSplit-v0``: each stage's work split over the devices (``Box``).

``gymnasium.make("envs:InferenceAlloc-v0")`` imports this package by itself.
The episode length is the ``episode_tasks`` registration kwarg (default: the scenario's).
"""

from gymnasium.envs.registration import register, registry

from envs.inference_alloc import InferenceAllocEnv
from envs.inference_alloc_split import InferenceAllocSplitEnv
from envs.scenario import Scenario, load_scenario, scenario_names

ENV_IDS = ("InferenceAlloc-v0", "InferenceAllocSplit-v0")

for _id, _entry in zip(ENV_IDS, ("envs.inference_alloc:InferenceAllocEnv",
                                 "envs.inference_alloc_split:InferenceAllocSplitEnv"), strict=True):
    if _id not in registry:
        register(id=_id, entry_point=_entry, kwargs={"scenario": "article", "episode_tasks": None})

__all__ = ["ENV_IDS", "InferenceAllocEnv", "InferenceAllocSplitEnv", "Scenario", "load_scenario",
           "scenario_names"]
