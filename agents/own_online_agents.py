"""Agents of your own in the online study: ``evaluate.py --online --online-agents ppo-warm
mine:make_learner best-static oracle``.

The study is where the stabilisation problem shows, so a method meant to shorten it (another
warm-up, a safer learner) is measured there, beside ours, on the same streams and metrics. A
``<module>:<attribute>`` among its agents is imported as a policy of yours is
(``agents.imported``) and built on each stream's fresh env, once per seed:

* a learner, where what it builds is a Stable-Baselines3 model (``BaseAlgorithm``,
  sb3-contrib's included) on the env it is given: ``def make_learner(env, seed): return
  PPO("MlpPolicy", env, seed=seed)``, or one of our agents (``agents.sb3_factory.make_sb3``'s
  ``SB3Agent``, its warm-up included). The study deploys it from sample 0 and it learns as it
  goes, as the study's own learners do (``agents.online.deploy``: its ``learn()``, with the
  study's recorder among the callbacks);
* otherwise a fixed policy (anything with ``predict``), which acts without learning.

A ``seed`` parameter is given the stream's seed, as the study seeds its own learners
(training seed = stream seed), so that the study is reproducible. For a learner without one,
the study seeds the global generators (``random``, numpy's, torch's) with the stream's seed
before building it, as SB3 does with a seed it is given, and then, where its model has no seed
of its own, the model's action space (what SB3 seeds only through a model's seed: DQN's random
exploration): its weights, minibatches and exploration, and so its row, are the same in every
study.
A ready model object is refused: it would carry what it learnt on one stream into the next.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.utils import set_random_seed

from agents.imported import import_target, imported_policy_maker, raised_at
from agents.registry import check_first_action
from envs import ENV_IDS
from inference.messages import shown


def build_own_agent(name: str, env: Any, seed: int) -> tuple[Any, bool]:
    """What the study deploys for the agent of yours `name` on `env` (the stream `seed`'s),
    and whether it learns there. A ValueError naming `name` for anything the study cannot
    deploy: a missing module or attribute, a ready model, a model of another env."""
    from agents.sb3_factory import SB3Agent

    target = import_target(name, "online agent")
    if isinstance(target, (BaseAlgorithm, SB3Agent)):
        kind = type(getattr(target, "model", target)).__name__
        raise ValueError(f"online agent {shown(name)} is a ready {kind} model: "
                         f"the study builds a learner afresh for each stream, so name the "
                         f"function that builds it on the env it is given")
    build = imported_policy_maker(name, env)
    seeded = _takes_seed(target)
    if not seeded:      # what it draws from the global generators, the same in every study
        set_random_seed(seed)
    try:
        policy = build(**({"seed": seed} if seeded else {}))
    except ValueError as exc:   # what building it raised, named (imported_policy_maker)
        cause = exc.__cause__
        if not isinstance(cause, AssertionError):
            raise
        # SB3 asserts what its constructor refuses (DQN's actions): say what to do
        raise ValueError(f"online agent {shown(name)}: building it raised AssertionError: "
                         f"{cause}{raised_at(cause)}{_spaces_hint(str(cause))}") from cause
    built = policy.policy           # OneAtATime's: what the attribute built
    # one of our agents (make_sb3's, its warm-up too): a learner, as the study's own are; as
    # a fixed policy its PPO acted untrained, and the study's table showed it as yours
    model = built.model if isinstance(built, SB3Agent) else built
    if not isinstance(model, BaseAlgorithm):
        return policy, False
    if not seeded and model.seed is None:
        # what SB3 seeds only from a seed it is given: the action space's draws (DQN's
        # exploration), else from the OS. Not model.set_random_seed: that reseeds the env too
        model.action_space.seed(seed)
    venv = model.get_env()
    if venv is None or venv.num_envs != 1 or venv.get_attr("unwrapped")[0] is not env.unwrapped:
        raise ValueError(f"online agent {shown(name)}: its {type(model).__name__} learns on "
                         f"another env than the one it was given; build it on that env, whose "
                         f"task stream the study sets (one env, not a VecEnv of several)")
    return (built if isinstance(built, SB3Agent) else SB3Agent(name, model, env)), True


def check_own_agent(name: str, env: Any) -> None:
    """Refuse, before the study runs, an agent of yours it could not deploy on `env`: the
    checks of ``build_own_agent``, and a fixed policy's first action the env refuses."""
    policy, learns = build_own_agent(name, env, seed=0)
    if not learns:
        check_first_action(policy, env, f"online agent {shown(name)}")


def _spaces_hint(refusal: str) -> str:
    """What to do about SB3's refusal of the study's MultiDiscrete actions, by the spaces its
    algorithm supports (its message: "The algorithm only supports (...) as action spaces"):
    DQN's one Discrete is what FlatDiscreteActions gives; SAC's Box (continuous weights) is
    the Split env's, which the study does not run, and no wrapper of ours makes it."""
    supported = re.search(r"only supports (.*) as action spaces", refusal)
    if supported is None:
        return ""
    if "spaces.discrete.Discrete'" in supported.group(1):
        return ("; a learner of one Discrete action (DQN) learns behind "
                "agents.sb3_factory.FlatDiscreteActions(env), as ours does")
    return (f"; the study's env ({ENV_IDS[0]}) places each stage on a device "
            f"(MultiDiscrete): a learner of continuous actions (SAC) acts in {ENV_IDS[1]} "
            f"alone, which the study does not run")


def _takes_seed(target: Any) -> bool:
    try:
        return "seed" in inspect.signature(target).parameters
    except (TypeError, ValueError):     # a builtin without a signature
        return False
