"""The steps a run trains: SB3 learns in whole rollouts, so a run takes more than --timesteps
where they do not divide it. An on-policy agent (PPO, A2C, TRPO, ...) collects ``n_steps`` x
``n_envs`` steps before each update, an off-policy one (DQN, SAC) ``train_freq`` x ``n_envs``
between its gradient steps, and either stops only at the end of one once --timesteps is
reached: ``train.py --n-envs 64 --timesteps 32`` trained 1,024 steps (PPO's 16 x 64) without
a word. train.py says so in a note before it trains (`rounding_notes`); what it trains is
SB3's, unchanged. Imports SB3 (through the hyper-parameters): call it once training is due.
"""

from __future__ import annotations

import math
from typing import Any

from agents.config import TrainConfig


def rollout_steps(name: str, params: dict[str, Any], n_envs: int) -> tuple[int, str] | None:
    """The steps agent `name` with the resolved hyper-parameters `params` collects at a time on
    `n_envs` envs, and how (``n_steps 16 x --n-envs 64``); None where an episode, not a step
    count, ends a collection (``train_freq`` in episodes), which no count foretells."""
    from agents.sb3_hyperparams import constructor_defaults

    merged = {**constructor_defaults(name), **params}
    if "train_freq" in merged:        # off-policy (DQN also has an n_steps: its n-step return)
        freq = merged["train_freq"]
        count, unit = (freq, "step") if isinstance(freq, int) else tuple(freq)
        if not str(unit).startswith("step"):
            return None
        key, count = "train_freq", int(count)
    elif "n_steps" in merged:
        key, count = "n_steps", int(merged["n_steps"])
    else:
        return None
    return count * n_envs, f"{key} {count} x --n-envs {n_envs}"


def steps_trained(timesteps: int, rollout: int) -> int:
    """The steps SB3 takes for `timesteps`, in whole collections of `rollout` steps."""
    return math.ceil(timesteps / rollout) * rollout


def rounding_notes(config: TrainConfig) -> list[str]:
    """One note for each agent (and warm start, where its rollout differs) whose runs train
    more than --timesteps; none for a --resume (the run's own agent and steps are read later)
    or where the agents or --hp are refused (the plan refuses them after, in its own words)."""
    from agents.sb3_hyperparams import hyperparams_with
    from agents.warmup_config import spec_starts_warm

    if config.resume is not None:
        return []
    try:
        warm_starts = sorted({spec_starts_warm(w) for w in config.warmup})
    except (TypeError, ValueError):
        return []
    notes = []
    for agent in dict.fromkeys(a.strip().lower() for a in config.agents):
        try:    # one agent's refusal (the plan says it) takes no other agent's note
            rollouts = {warm: rollout_steps(agent, hyperparams_with(agent, config.env_id,
                                                                    config.hp, warm_start=warm),
                                            config.n_envs)
                        for warm in warm_starts}
        except (TypeError, ValueError):
            continue
        alike = len(set(rollouts.values())) == 1
        for warm, rollout in rollouts.items():
            if rollout is None or (alike and warm != warm_starts[0]):
                continue
            steps, how = rollout
            trained = steps_trained(config.timesteps, steps)
            if trained > config.timesteps:
                runs = "" if alike else (" warm-started" if warm else " from scratch")
                notes.append(f"note: {agent}{runs} trains {trained:,} steps, not --timesteps "
                             f"{config.timesteps:,}: SB3 collects {how} = {steps:,} steps at "
                             f"a time")
    return notes
