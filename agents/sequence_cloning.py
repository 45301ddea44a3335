"""Behaviour cloning of RecurrentPPO's LSTM policy: on the conservative policy's episodes as
sequences, the LSTM state carried along each.

An LSTM policy acts on an episode's observations in turn, with the state the ones before left
(as SB3's ``evaluate_policy`` runs it, and ``agents.base.StreamActor``). Fitted one observation
at a time (``agents.cloning``), from a zero state, it learns to act as on every episode's first
task, and acts otherwise once its state fills. So the clone takes the samples the other
learners' clone takes (``agents.cloning.collect``, the same seeds), cuts them into their
episodes, and each episode into chunks of ``CHUNK`` decisions (episodes all shorter than that:
chunks of the longest one's length), which RecurrentPPO's own update replays in the same way
(sequences from a saved LSTM state):

* each epoch, the policy runs (without gradients) along every training episode from its start,
  and each chunk's starting state (actor's and critic's LSTM) is the one it reached there (an
  episode's first chunk: the zero state, where RecurrentPPO's update marks its start);
* minibatches of ``CHUNKS_PER_BATCH`` chunks (shorter ones: as many as hold as many decisions,
  ``BATCH_DECISIONS``), in a random order, are fitted from those states
  through the policy's ``evaluate_actions`` (back-propagation through the chunk): the
  conservative action's log-likelihood, and the critic's squared error on the discounted return
  it earned, as the per-observation clone's loss.

The stream's last fifth (``HELDOUT_FRACTION``) is held out, its episodes whole or the end of
one: the agreements are those of the cloned model run as ``evaluate_policy`` runs it,
deterministically and handed its state back, along every episode from its start (the held-out
part of an episode cut in two after the part it trained on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from torch.nn import functional as F

from agents.cloning import (
    CLONE_LR,
    HELDOUT_FRACTION,
    clone_result,
    clone_rng,
    conservative_samples,
    same_placements,
)
from agents.sb3_factory import unchecked_distributions
from agents.warmup import WarmupConfig

if TYPE_CHECKING:
    from agents.sb3_factory import SB3Agent

# Decisions a fitted sequence spans, and chunks per minibatch (64 decisions, half the
# per-observation clone's batch: twice its steps, which the LSTM needed in its 30 epochs).
# Article scenario, heft-calibrated, the default 3000 samples, seeds 0-2: the clone, run with
# its state along held-out episode 10000, places 0.78-0.82 of the tasks as heft-calibrated
# (PPO's clone 0.80-0.83). With each episode's start marked (before 2026-12-07, the same fit
# to float rounding): 0.795-0.81; 0.71-0.815 in chunks of 16, four to a batch; 0.655-0.665
# fitted one observation at a time from a zero state (64 to a batch; seeds 0, 1).
CHUNK = 32
CHUNKS_PER_BATCH = 2
# Episodes shorter than a chunk (train.py's --episode-tasks under 32) are chunks of their own
# length, as many to a batch as hold these decisions: padded to 32, two to a batch, an
# episode of 2 tasks fitted 4 decisions a step, a clone of 7 minutes (then 19 s at 200 tasks;
# 14 s at either since the chunks run unmarked).
BATCH_DECISIONS = CHUNK * CHUNKS_PER_BATCH


def episode_bounds(starts: np.ndarray) -> list[tuple[int, int]]:
    """(first, end) sample of each episode of a ``collect`` stream, from its ``starts``."""
    firsts = [int(i) for i in np.flatnonzero(starts)]
    return list(zip(firsts, [*firsts[1:], len(starts)], strict=True))


def _padded(values: np.ndarray, bounds: list[tuple[int, int]], length: int) -> np.ndarray:
    """The samples of each episode in `bounds`, one row each, zero-padded to `length`."""
    out = np.zeros((len(bounds), length, *values.shape[1:]), dtype=values.dtype)
    for row, (first, end) in enumerate(bounds):
        out[row, : end - first] = values[first:end]
    return out


def _zero_states(policy: Any, n_seq: int) -> RNNStates:
    layers, _, hidden = policy.lstm_hidden_state_shape
    zeros = torch.zeros(layers, n_seq, hidden)
    return RNNStates((zeros, zeros.clone()), (zeros.clone(), zeros.clone()))


def _unmarked(n: int) -> torch.Tensor:
    """The episode starts of `n` decisions handed to the LSTM: none marked.

    Each sequence is an episode from its start, run from a zero state, so a mark at its first
    decision would only zero a state that is zero already, and SB3 runs a chunk holding a mark
    a decision at a time, where it runs one without any in a single LSTM call (the same fit, to
    float rounding; the default clone of the article scenario, its 3,000 samples collected,
    took 34 s marked and takes 17 s).
    """
    return torch.zeros(n)


def _chunk_states(policy: Any, obs: torch.Tensor, chunk: int = CHUNK) -> list[RNNStates]:
    """The LSTM states the policy reaches at each chunk's start (chunks of `chunk` decisions),
    run from zero states along every sequence of `obs` (n_seq, length, features) at once, a
    chunk at a time, no decision marked as a start (``_unmarked``)."""
    n_seq, length = obs.shape[:2]
    states = _zero_states(policy, n_seq)
    out = []
    with torch.no_grad():
        for t in range(0, length, chunk):
            out.append(states)
            part = obs[:, t:t + chunk].reshape(-1, obs.shape[-1])
            # the LSTM policy's own forward, not the warm one's, where the conservative phase
            # would count (and act on) these as training decisions
            *_, states = RecurrentActorCriticPolicy.forward(
                policy, part, states, _unmarked(len(part)), True)
    return out


def _select(states: list[RNNStates], rows: np.ndarray, chunks: np.ndarray) -> RNNStates:
    """The starting states of the chunks (rows[i], chunks[i]): n_seq = len(rows)."""
    def pick(part: str, which: int) -> torch.Tensor:
        return torch.cat([getattr(states[c], part)[which][:, r:r + 1]
                          for r, c in zip(rows, chunks, strict=True)], dim=1)

    return RNNStates((pick("pi", 0), pick("pi", 1)), (pick("vf", 0), pick("vf", 1)))


def _chunk_loss(policy: Any, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor,
                valid: torch.Tensor, states: RNNStates) -> torch.Tensor:
    """The clone's loss on chunks of CHUNK decisions (first axis), from their `states`, no
    decision marked as a start (``_unmarked``); padding (`valid` False) counts for nothing."""
    flat = valid.reshape(-1)
    values, log_prob, _ = policy.evaluate_actions(
        obs.reshape(-1, obs.shape[-1]), actions.reshape(-1, *actions.shape[2:]), states,
        _unmarked(len(flat)))
    log_prob = log_prob.reshape(-1)[flat]
    values = values.flatten()[flat]
    return -log_prob.mean() + 0.5 * F.mse_loss(values, returns.reshape(-1)[flat])


def sequence_predictions(agent: SB3Agent, obs: np.ndarray, bounds: list[tuple[int, int]]
                         ) -> np.ndarray:
    """`agent`'s deterministic actions on the samples `obs`, run along each episode of `bounds`
    as SB3's ``evaluate_policy`` runs a recurrent model: from the episode's start, handed back
    the state its last ``predict`` returned. One row per sample, in the samples' order."""
    length = max(end - first for first, end in bounds)
    padded = _padded(obs, bounds, length)
    state: Any = None
    steps = []
    for t in range(length):
        action, state = agent.predict(padded[:, t], state, np.full(len(bounds), t == 0),
                                      deterministic=True)
        steps.append(np.asarray(action).reshape(len(bounds), -1))
    acted = np.stack(steps, axis=1)                 # (episodes, length, action entries)
    return np.concatenate([acted[row, : end - first]
                           for row, (first, end) in enumerate(bounds)])


def clone_sequences(agent: SB3Agent, env: Any, conservative: Any, config: WarmupConfig,
                    seed: int | None = None) -> dict[str, float]:
    """Train `agent`'s LSTM policy to act like `conservative` along its episodes (the module's
    docstring says how); returns train / held-out agreement, as ``behaviour_clone`` does."""
    policy = agent.model.policy
    data, targets, stored = conservative_samples(agent, env, conservative, config, seed)
    n = len(targets)
    cut = n - int(n * HELDOUT_FRACTION)
    bounds = episode_bounds(data["starts"])
    train = [(first, min(end, cut)) for first, end in bounds if first < cut]
    longest = max(end - first for first, end in train)
    chunk = min(CHUNK, longest)                     # CHUNK, or the episodes' own length
    per_batch = BATCH_DECISIONS // chunk
    length = -(-longest // chunk) * chunk
    obs_t = torch.as_tensor(_padded(data["obs"], train, length))
    act_t = torch.as_tensor(_padded(stored, train, length))
    ret_t = torch.as_tensor(_padded(data["returns"], train, length))
    valid = _padded(np.ones(n, dtype=bool), train, length)
    rows, chunks = np.nonzero(valid[:, ::chunk])     # the chunks holding a decision
    rng = clone_rng(seed)
    optimizer = torch.optim.Adam(policy.parameters(), lr=CLONE_LR)
    with unchecked_distributions():   # as the agent learns: the same fit, faster
        for _ in range(config.clone_epochs):
            policy.set_training_mode(False)
            states = _chunk_states(policy, obs_t, chunk)
            policy.set_training_mode(True)
            order = rng.permutation(len(rows))
            for first in range(0, len(order), per_batch):
                pick = order[first:first + per_batch]
                r, c = rows[pick], chunks[pick]
                steps = (c[:, None] * chunk + np.arange(chunk)).reshape(-1)
                at = (np.repeat(r, chunk), steps)
                shape = (len(pick), chunk)
                loss = _chunk_loss(policy, obs_t[at].reshape(*shape, -1),
                                   act_t[at].reshape(*shape, *act_t.shape[2:]),
                                   ret_t[at].reshape(shape), torch.as_tensor(valid[at]),
                                   _select(states, r, c))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    policy.set_training_mode(False)
    agreed = same_placements(sequence_predictions(agent, data["obs"], bounds), targets)
    return clone_result(agent, float(np.mean(agreed[:cut])), float(np.mean(agreed[cut:])), n)
