"""A learner whose weights went NaN or infinite: said in one line, never saved, never scored.

Too high a learning rate (``--hp learning_rate=1e12``) sends an update's weights to NaN. What
followed depended on the algorithm: PPO and A2C died in torch's sampling ("probability tensor
contains either inf, nan or element < 0") with a traceback, SAC's NaN actions were refused by
the env as if it had a bug, and DQN, whose argmax of NaN is device 0, trained on, saved a
model of NaNs, exited 0 and was scored as all-CPU. ``DivergenceGuard`` checks the weights
every ``CHECK_EVERY_STEPS`` steps, ``agents.run_folder.save_model_files`` before each save,
and ``check_finite`` refuses such a model where one is loaded. (PPO, A2C and SAC fail on NaN
weights at once, in SB3 or the env: ``train.py`` says so as a divergence too.)
"""

from __future__ import annotations

from typing import Any

import torch
from stable_baselines3.common.callbacks import BaseCallback

# how often the guard looks: each look costs ~40 us, and DQN and SAC update every step, where
# a look a step slowed DQN's training by 8-20%
CHECK_EVERY_STEPS = 1024


class Diverged(ValueError):
    """A learner's weights are NaN or infinite: the message says when and what to lower."""


def finite_weights(policy: torch.nn.Module) -> bool:
    """Whether every parameter of `policy` is finite: a NaN or an infinity anywhere makes the
    sum of the tensors' sums non-finite (a finite sum overflowing float32 would need weights
    near 1e38)."""
    with torch.no_grad():
        sums = [p.sum() for p in policy.parameters()]
        return not sums or bool(torch.isfinite(torch.stack(sums).sum()))


def check_finite(policy: torch.nn.Module, what: str) -> None:
    """A Diverged naming `what` (the model file) where `policy`'s weights are not finite."""
    if not finite_weights(policy):
        raise Diverged(f"{what} holds NaN or infinite weights (its training diverged), so "
                       f"it cannot act: train it again with a lower learning_rate")


def diverged(model: Any) -> Diverged:
    """The Diverged of `model`, whose weights are no longer finite."""
    rate = getattr(model, "learning_rate", None)
    now = f" (now {rate:g})" if isinstance(rate, (int, float)) else ""
    return Diverged(f"the policy diverged by step {model.num_timesteps}: an update left its "
                    f"weights NaN or infinite; lower learning_rate{now}")


def stop_if_diverged(model: Any) -> None:
    """`diverged(model)` raised where the weights of `model`'s policy are not finite (a
    stand-in without a policy, as the tests' are, passes)."""
    policy = getattr(model, "policy", None)
    if policy is not None and not finite_weights(policy):
        raise diverged(model)


class DivergenceGuard(BaseCallback):
    """Stops training with a Diverged once an update has left the weights NaN or infinite:
    looked at when a rollout starts (after the updates before it), once `every` steps. The
    end of training needs no look: ``save_model_files`` refuses to save such a model."""

    def __init__(self, every: int = CHECK_EVERY_STEPS) -> None:
        super().__init__()
        self.every = every
        self._next = 0

    def _on_rollout_start(self) -> None:
        if self.model.num_timesteps >= self._next:
            self._next = self.model.num_timesteps + self.every
            stop_if_diverged(self.model)

    def _on_step(self) -> bool:
        return True
