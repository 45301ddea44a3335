"""Behaviour cloning: start the learner where the conservative policy is.

Observations come from rolling the conservative policy out on the scenario
(episodes seeded apart from any evaluation stream). The actor is trained to
maximise the likelihood of the conservative action; the critic (or, for DQN,
the Q-value of that action) to predict the discounted return it earned, so the
first RL updates do not start from a random baseline.

SAC's actor is a squashed Gaussian, whose action is the tanh of the Gaussian's:
an action on the box's edge has no finite likelihood (tanh reaches -1 only in
float32's rounding), so its clone is a regression of the deterministic (mean)
action onto the conservative one (``_sac_actor_loss``), and its two Q-networks
are fitted to the returns at that action, as DQN's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from torch.nn import functional as F

from agents.base import StreamActor
from agents.sb3_factory import unchecked_distributions
from agents.warmup import WarmupConfig, as_env_actions, learner_actions

if TYPE_CHECKING:
    from agents.sb3_factory import SB3Agent

CLONE_SEED_OFFSET = 7_919_000   # keeps cloning episodes away from evaluation seeds
HELDOUT_FRACTION = 0.2
CLONE_LR = 3e-3                  # Adam step size for cloning (a supervised fit: larger than RL)
# SAC: a conservative entry on the box's lower edge (a split weight of exactly 0) is cloned as
# a pre-tanh mean at or below -SAC_EDGE. At -3 the weight is 0.0025 of a whole device's, under
# a tenth of a sequence of a batch of 32 (the scenarios' largest), which the Split env's
# rounding never gives a share. Not further: at -10 (tanh -1 exactly in float32, the value
# from before that rounding) tanh's slope is ~1e-8, and the entry too far off for fine-tuning
# to give the device a share again: heft-calibrated's warm SAC kept its load and decode stages
# whole on that policy's devices, at 0.75x best-static over 3000 steps, the cold one 0.40x
# (docs/CALIBRATION.md, "Learner").
SAC_EDGE = 3.0


def collect(env: Any, policy: Any, n_samples: int, gamma: float, seed: int) -> dict[str, np.ndarray]:
    """Roll `policy` out for n_samples decisions: observations, actions, masks, returns, and
    ``starts``, True on each episode's first decision (the recurrent clone's sequences)."""
    base = env.unwrapped
    obs_list: list[Any] = []
    act_list: list[Any] = []
    mask_list: list[Any] = []
    ret_list: list[float] = []
    start_list: list[bool] = []
    episode = 0
    actor = StreamActor(policy)
    while len(obs_list) < n_samples:
        obs, _ = base.reset(seed=seed + episode)
        actor.new_episode()
        episode += 1
        rewards: list[float] = []
        done = False
        while not done and len(obs_list) < n_samples:
            action = actor.act(obs)
            start_list.append(not rewards)
            obs_list.append(obs)
            act_list.append(np.asarray(action))
            mask_list.append(base.action_masks())
            obs, reward, terminated, truncated, _ = base.step(action)
            rewards.append(reward)
            done = terminated or truncated
        running, returns = 0.0, []
        for r in reversed(rewards):
            running = r + gamma * running
            returns.append(running)
        ret_list.extend(reversed(returns))
    return {"obs": np.asarray(obs_list, dtype=np.float32), "actions": np.asarray(act_list),
            "masks": np.asarray(mask_list), "returns": np.asarray(ret_list, dtype=np.float32),
            "starts": np.asarray(start_list, dtype=bool)}


def _sac_actor_loss(mean: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """SAC's clone: the squared error of the squashed mean on the conservative action (in the
    policy's [-1, 1] scale), and for an entry on the lower edge a one-sided one that pulls the
    mean below -SAC_EDGE, in units of SAC_EDGE.

    Heft-split's clone on the article stream (seed 0, 3000 samples, held-out seed 10000): 0.342
    of best-static's latency (heft-split 0.341; 0.337 with the edge at -10). The mean regressed
    onto atanh of the action, an edge entry at -10, was 0.49-0.50 (the edge's squared errors
    drowned the others: held-out agreement 0.26). Before the Split env rounded shares to whole
    sequences, an edge at -3 gave every left-out device a sliver share (0.67)."""
    edge = actions <= -1.0
    inside = (torch.tanh(mean) - actions) ** 2
    below = (torch.relu(mean + SAC_EDGE) / SAC_EDGE) ** 2
    return torch.where(edge, below, inside).mean()


def _value_loss(predicted: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """Squared error of Q-values on the returns, in units of the returns' scale. Regressed raw
    onto returns in seconds (reward="latency": about -300), DQN's squared error drowned the
    cross-entropy on the same Q-values and left the cloned action with the lowest Q
    (agreement 0.05); in those units the two terms weigh alike."""
    scale = returns.abs().mean().clamp(min=1.0).detach()
    return F.mse_loss(predicted / scale, returns / scale)


def _loss(agent: SB3Agent, obs: torch.Tensor, actions: torch.Tensor, masks: torch.Tensor,
          returns: torch.Tensor) -> torch.Tensor:
    model = agent.model
    if agent.name == "dqn":
        q = model.q_net(obs)  # type: ignore[attr-defined]
        taken = q.gather(1, actions.long().view(-1, 1)).squeeze(1)
        return F.cross_entropy(q, actions.long()) + _value_loss(taken, returns)
    if agent.name == "sac":
        # `actions` as the replay buffer holds them (the policy's scale): the critics' input
        mean, _, _ = model.actor.get_action_dist_params(obs)  # type: ignore[attr-defined]
        q_values = model.critic(obs, actions)  # type: ignore[attr-defined]
        return _sac_actor_loss(mean, actions) + sum(
            (_value_loss(q.flatten(), returns) for q in q_values), torch.zeros(()))
    kwargs = {"action_masks": masks} if agent.name == "maskable-ppo" else {}
    values, log_prob, _ = model.policy.evaluate_actions(obs, actions, **kwargs)  # type: ignore[operator]
    return -log_prob.mean() + 0.5 * F.mse_loss(values.flatten(), returns)


def _agreement(agent: SB3Agent, obs: np.ndarray, actions: np.ndarray) -> float:
    """Share of observations where the learner places every stage as the target does
    (for split actions: on the device with the largest weight)."""
    predicted = np.asarray(agent.predict(obs, deterministic=True)[0])
    return float(np.mean(same_placements(predicted, actions)))


def same_placements(predicted: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per row, whether `predicted` places every stage as `target` does (for split actions:
    on the device with the largest weight)."""
    n = len(target)
    predicted, target = np.asarray(predicted).reshape(n, -1), np.asarray(target).reshape(n, -1)
    if target.dtype.kind == "f":
        predicted = predicted.reshape(n, 3, -1).argmax(axis=2)
        target = target.reshape(n, 3, -1).argmax(axis=2)
    return np.all(predicted == target, axis=1)


def clone_rng(seed: int | None) -> np.random.Generator:
    """The clone's generator (its held-out split, its minibatches' order): `seed`'s, or without
    one a seed drawn from numpy's global generator, which SB3's ``set_random_seed`` seeds (as
    the online study does before it builds an unseeded learner of yours, ``make_sb3``'s warm
    one included). ``default_rng(None)`` drew from the OS: that clone, and its row of the
    study, differed from run to run."""
    return np.random.default_rng(seed if seed is not None else np.random.randint(2**31 - 1))


def conservative_samples(agent: SB3Agent, env: Any, conservative: Any, config: WarmupConfig,
                         seed: int | None) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """What a clone is fitted on (``behaviour_clone`` and ``agents.sequence_cloning``'s): the
    conservative's rollout (``collect``, seeded apart from the evaluation streams), its actions
    as the env takes them, and as `agent`'s model stores them."""
    model = agent.model
    data = collect(env, conservative, config.clone_samples, float(getattr(model, "gamma", 0.9)),
                   CLONE_SEED_OFFSET + (seed or 0) * 1000)
    space = env.unwrapped.action_space
    targets = as_env_actions(data["actions"], space)           # what the env would receive
    return data, targets, learner_actions(model, targets, space)


def clone_result(agent: SB3Agent, train_agreement: float, heldout_agreement: float,
                 samples: int) -> dict[str, float]:
    """A clone's figures, kept as `agent`'s ``clone_stats`` (TensorBoard's ``warmup/``)."""
    agent.clone_stats = {"train_agreement": train_agreement,
                         "heldout_agreement": heldout_agreement, "samples": float(samples)}
    return agent.clone_stats


def behaviour_clone(agent: SB3Agent, env: Any, conservative: Any, config: WarmupConfig,
                    seed: int | None = None) -> dict[str, float]:
    """Train `agent`'s network to act like `conservative`; returns train / held-out agreement.
    An LSTM policy (recurrent-ppo's) is fitted on sequences instead
    (``agents.sequence_cloning``)."""
    if isinstance(agent.model.policy, RecurrentActorCriticPolicy):
        from agents.sequence_cloning import clone_sequences  # it imports this module: late

        return clone_sequences(agent, env, conservative, config, seed=seed)
    model = agent.model
    data, targets, stored = conservative_samples(agent, env, conservative, config, seed)
    n = len(targets)
    rng = clone_rng(seed)
    order = rng.permutation(n)
    held = order[: int(n * HELDOUT_FRACTION)]
    train = order[int(n * HELDOUT_FRACTION):]
    policy_net = model.q_net if agent.name == "dqn" else model.policy  # type: ignore[attr-defined]
    optimizer = torch.optim.Adam(policy_net.parameters(), lr=CLONE_LR)
    obs_t = torch.as_tensor(data["obs"])
    act_t = torch.as_tensor(stored, dtype=torch.float32 if stored.dtype.kind == "f" else torch.long)
    mask_t = torch.as_tensor(data["masks"])
    ret_t = torch.as_tensor(data["returns"])
    policy_net.train()
    batch = 128
    with unchecked_distributions():   # as the agent learns: the same fit, faster
        for _ in range(config.clone_epochs):
            perm = train[rng.permutation(len(train))]
            for start in range(0, len(perm), batch):
                idx = torch.as_tensor(perm[start:start + batch])
                loss = _loss(agent, obs_t[idx], act_t[idx], mask_t[idx], ret_t[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    policy_net.eval()
    # the TD targets start from the fitted values, not from the initial networks'
    if agent.name == "dqn":
        model.q_net_target.load_state_dict(model.q_net.state_dict())  # type: ignore[attr-defined]
    elif agent.name == "sac":
        model.critic_target.load_state_dict(model.critic.state_dict())  # type: ignore[attr-defined]
    return clone_result(agent, _agreement(agent, data["obs"][train], targets[train]),
                        _agreement(agent, data["obs"][held], targets[held]), n)
