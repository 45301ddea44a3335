"""InferenceAllocMix-v0: one policy, several workloads: a scenario drawn for each episode."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from envs import ENV_IDS, MIX_ENV_ID, canonical_env_id, describe_env_ids
from envs.inference_alloc import InferenceAllocEnv, check_no_options, python_seed
from envs.inference_alloc_split import InferenceAllocSplitEnv
from envs.keywords import checked_keywords, keywords_of
from envs.scenario import Scenario
from inference.checks import is_number
from inference.messages import did_you_mean, shown
from inference.simulator import proportions

# The env each scenario plays in, by the id `env_id` names.
MIX_CLASSES: dict[str, type[InferenceAllocEnv]] = dict(
    zip(ENV_IDS, (InferenceAllocEnv, InferenceAllocSplitEnv), strict=True))


# What a mix's `scenarios` takes, as the refusal of a mix without it says
SCENARIOS_TAKE = (f"a list of two or more scenarios, one drawn for each episode, each a preset "
                  f"name, a YAML path, a Scenario or its mapping (e.g. gymnasium.make("
                  f"'{MIX_ENV_ID}', scenarios=['article', 'bursty']))")


class MixRefused(ValueError):
    """A mix of scenarios refused, its message in the env's words, whose advice names its
    keywords (`hardware=`, `weights=`). `kind` says which refusal it is and `problem` what is
    wrong without that advice, so that a CLI over the env advises its own options instead
    (``agents.run_plan.env_for``): ``"setting"``, two scenarios' hardware, variant or model
    differ; ``"twice"``, one scenario is given twice, however spelt."""

    def __init__(self, message: str, kind: Literal["setting", "twice"], problem: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.problem = problem


class ScenarioMixEnv(gym.Env):
    """
    ## Description

    A policy trained on one scenario learns that scenario's workload; one meant to generalise
    has to see several. This env holds one `InferenceAlloc-v0` (or `InferenceAllocSplit-v0`)
    env per scenario and, at each `reset()`, draws which of them plays the episode, from its
    own `np_random`, with the `weights` given (default: equal). Every step of the episode is
    then that env's step, and `info["scenario"]` names it.

    The scenarios must share what the policy's inputs and outputs and the planners' costs
    mean: the hardware (its devices and their figures; the file's name aside), the pipeline
    variant and the model. A mix of others is refused in one ValueError naming the two
    scenarios and what differs. They may differ in anything else: workload, cache,
    episode length, faults, noise and simulator settings.

    ## Action Space

    The scenarios' shared action space: `MultiDiscrete([D, D, D])`, or `Box(-1, 1, (3 * D,))`
    with `env_id="InferenceAllocSplit-v0"` (see those envs' docstrings).

    ## Observation Space

    The scenarios' shared `Box(0, 1, (5 + 7 * D,), float32)`, the table of
    `InferenceAlloc-v0`'s docstring; it does not say which scenario plays (`info` does).

    | index | observation                                             |
    |-------|---------------------------------------------------------|
    | all   | the drawn scenario's env's observation, as it gives it  |

    ## Rewards

    The drawn scenario's env's reward (`reward=`, the same kind for every scenario).

    ## Episode End

    As the drawn scenario's env: truncated after its `episode_tasks` tasks (each
    scenario's own unless `episode_tasks=` sets one for all), never terminated.

    ## Arguments

    - `scenarios`: two or more scenarios, each as `InferenceAlloc-v0`'s `scenario=` takes
      one (a preset name, a YAML path, a `Scenario` or its mapping); no name twice (give
      `weights` instead; a copy of a scenario's YAML keeps its `name:`, so rename it).
    - `weights`: how often each is drawn, one non-negative number per scenario (a list or a
      1-D array), not all 0; default equal.
    - `env_id`: `InferenceAlloc-v0` (default) or `InferenceAllocSplit-v0` (or their short
      names `discrete`, `split`), the env each scenario plays in.
    - any other keyword (`hardware`, `variant`, `reward`, `episode_tasks`, `price_static`,
      `render_mode`, ...) goes to every scenario's env, as that env takes it.

    Reproducibility: `reset(seed=s)` seeds the draw, and the drawn env is reset with a seed
    drawn from the same generator, so one seed gives one trajectory (which scenarios play,
    and each episode's tasks); a later `reset()` goes on from it. The episode of `reset(seed=s)`
    is not the drawn scenario's own `reset(seed=s)` episode: evaluate a scenario on its own env.

    What reads the env's configuration (`env.unwrapped.device_names`, `hardware`, `scenario`,
    `planner`, ...) reads the scenario env of the current episode (the first scenario's before
    the first reset); `current` is that env, which `agents.static.unwrap_env` returns. So a
    planner built once (`heft`, `heft-calibrated`, `best-static`) plans with the first
    scenario's simulator settings (re-placement overhead, prefetch depth, cache) and, for
    best-static, its calibration workload: still a valid policy in every scenario, as they
    share devices, costs of each stage and variant, but priced with the first's settings.
    The oracle reads the current episode's env as it acts.
    """

    metadata = InferenceAllocEnv.metadata
    # The scenario envs' spec property: `env.spec.to_json()` holds a Scenario, a path or numpy
    # weights in the plain form from which `EnvSpec.from_json` makes the same mix.
    _spec = InferenceAllocEnv._spec
    spec = InferenceAllocEnv.spec

    # its **kwargs go to each scenario's env, which takes the scenario from `scenarios`
    @checked_keywords(*(name for name in keywords_of(InferenceAllocEnv.__init__)
                        if name != "scenario"), needs={"scenarios": SCENARIOS_TAKE})
    def __init__(self, scenarios: Sequence[str | Scenario | Mapping[str, Any]],
                 weights: Sequence[float] | np.ndarray | None = None,
                 env_id: str = "InferenceAlloc-v0", **kwargs: Any) -> None:
        if isinstance(scenarios, (str, Mapping, Scenario)) or not isinstance(scenarios, Sequence):
            raise ValueError(f"scenarios must be a list of two or more scenarios, got "
                             f"{shown(scenarios)}")
        if len(scenarios) < 2:
            raise ValueError(f"scenarios must name two or more scenarios (one plays in "
                             f"InferenceAlloc-v0 itself), got {len(scenarios)}")
        # the short names train.py's --env takes ("split") and "envs:<id>" name the ids too
        env_id = canonical_env_id(env_id) if isinstance(env_id, str) else env_id
        cls = MIX_CLASSES.get(env_id)
        if cls is None:
            raise ValueError(f"env_id must be one of {describe_env_ids()}, got {shown(env_id)}"
                             f"{did_you_mean([str(env_id)], MIX_CLASSES)}")
        self.env_id = env_id
        self.envs = [cls(scenario=scenario, **kwargs) for scenario in scenarios]
        self.names = tuple(env.scenario.name for env in self.envs)
        for i, name in enumerate(self.names):
            if name in self.names[:i]:
                j = self.names.index(name)
                _refuse_same_name(self.envs[j], self.envs[i], j + 1, i + 1)
        first = self.envs[0]
        for env in self.envs[1:]:
            _check_same_setting(first, env)
        self.weights = _probabilities(weights, len(self.envs))
        self.observation_space = first.observation_space
        self.action_space = first.action_space
        self.render_mode = first.render_mode
        self._current = 0

    @property
    def current(self) -> InferenceAllocEnv:
        """The scenario env of the current episode (before the first reset, the first's)."""
        return self.envs[self._current]

    @property
    def scenario_name(self) -> str:
        """The name of the scenario playing the current episode."""
        return self.names[self._current]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """Draw the episode's scenario, then reset its env on a seed drawn alike (see the
        class docstring). `options` are refused as that env refuses them, before anything
        changes: the mix then goes on with its episode, as that env would."""
        check_no_options(options)
        super().reset(seed=python_seed(seed))
        drawn = int(self.np_random.choice(len(self.envs), p=self.weights))
        episode_seed = int(self.np_random.integers(2**31 - 1))
        obs, info = self.envs[drawn].reset(seed=episode_seed, options=options)
        self._current = drawn       # not before: a failed reset left another's episode current
        info["scenario"] = self.scenario_name
        return obs, info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.current.step(action)
        info["scenario"] = self.scenario_name
        return obs, reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """The current scenario env's `action_masks()` (MaskablePPO asks the env for them)."""
        return self.current.action_masks()

    def stage_masks(self) -> np.ndarray:
        return self.current.stage_masks()

    def render(self) -> Any:
        return self.current.render()

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def __getattr__(self, name: str) -> Any:
        """A public attribute this env lacks is the current scenario env's (`device_names`,
        `hardware`, `scenario`, `planner`, ...): what reads `env.unwrapped.<config>` reads the
        episode's own. Private ones are not looked up there: `unwrap_env` gives that env."""
        if name.startswith("_") or "envs" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(self.envs[self.__dict__["_current"]], name)


def _check_same_setting(first: InferenceAllocEnv, other: InferenceAllocEnv) -> None:
    """Refuse `other` unless it shares `first`'s hardware (its figures; not its name), variant
    and model: one ValueError naming both scenarios and what differs."""
    a, b = first.scenario.name, other.scenario.name
    differs = []
    if first.hardware.device_names != other.hardware.device_names:
        differs.append(f"devices ({a}: {', '.join(first.hardware.device_names)}; {b}: "
                       f"{', '.join(other.hardware.device_names)})")
    elif dataclasses.replace(first.hardware, name="") != dataclasses.replace(other.hardware, name=""):
        differs.append(f"hardware figures ({a}: {first.hardware.name}; {b}: {other.hardware.name})")
    if first.variant != other.variant:
        differs.append(f"variant ({a}: {first.variant}; {b}: {other.variant})")
    if first.model.name != other.model.name:
        differs.append(f"model ({a}: {first.model.name}; {b}: {other.model.name})")
    if differs:
        problem = (f"{a!r} and {b!r} cannot be mixed: their {' and '.join(differs)} differ, and "
                   f"one policy acts in every scenario of a mix")
        raise MixRefused(f"scenarios {problem}; give scenarios of one hardware, variant and "
                         f"model (hardware= and variant= set them for all)", "setting", problem)


def _refuse_same_name(first: InferenceAllocEnv, other: InferenceAllocEnv, i: int, j: int) -> None:
    """Refuse two scenarios of one name (the `i`th and `j`th, from 1): one given twice (its
    figures the same, however spelt), or two that differ but share a name (a copy of a
    scenario's YAML keeps its name), which `info["scenario"]` could not tell apart."""
    a, b = first.scenario, other.scenario
    if dataclasses.replace(a, source="") == dataclasses.replace(b, source=""):
        raise MixRefused(f"scenarios: {a.name!r} is given twice; give each once, and weights= "
                         f"to draw one more often", "twice",
                         f"{a.name!r} is given twice (as {a.source or a.name} and "
                         f"{b.source or b.name})")
    raise ValueError(f"scenarios {i} and {j} are both named {a.name!r} ({a.source or a.name}; "
                     f"{b.source or b.name}): a mix tells its scenarios apart by name; give "
                     f"each a name of its own (a YAML's name: field)")


def _probabilities(weights: Sequence[float] | np.ndarray | None, n: int) -> np.ndarray:
    """`weights` as draw probabilities (None: equal); a wrong count, a negative, NaN or
    infinite one, or all zero: ValueError."""
    if weights is None:
        return np.full(n, 1.0 / n)
    if isinstance(weights, np.ndarray) and weights.ndim == 1:   # np.ones(n), a probability vector
        weights = weights.tolist()
    if isinstance(weights, (str, Mapping)) or not isinstance(weights, Sequence) \
            or len(weights) != n:
        raise ValueError(f"weights must be {n} numbers, one per scenario, got {shown(weights)}")
    values = []
    for w in weights:
        if not is_number(w) or not math.isfinite(w) or w < 0:
            raise ValueError(f"weights must be finite numbers >= 0, got {shown(weights)}")
        values.append(float(w))
    if not any(values):
        raise ValueError(f"weights must not all be 0, got {shown(weights)}")
    # finite weights past the float range together (1e308 twice) too: divided by an infinite
    # sum, each was 0, and reset() failed ("probabilities do not sum to 1")
    return proportions(np.array(values))
