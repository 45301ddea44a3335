"""Warm-up: the article's fix for the allocator's ~200-sample stabilisation problem.

Three parts, each optional, composable with any SB3 agent:

1. conservative initial allocation -- for the first ``steps`` decisions a
   conservative policy (any fixed one, e.g. heft-calibrated, best-static, or heft-split
   in InferenceAllocSplit-v0) acts while the learner stores and learns from those
   transitions. For PPO/A2C/TRPO the policy's forward pass returns the conservative
   action with the learner's own value and log-probability of it, so the rollout
   is consistent and the update pulls the learner toward actions that paid; for
   the off-policy DQN and SAC it takes the exploration steps, in place of SB3's
   random ``learning_starts`` actions, and its transitions go to the replay buffer;
2. behaviour cloning -- before RL the network is trained to imitate the
   conservative policy on observations of the scenario (and the critic to
   predict the returns it earned), so learning starts where it is;
3. guard -- while the learner's rolling latency ratio to the static reference
   (a window of recent tasks) is worse than the conservative policy's by more
   than ``guard_margin``, the conservative policy acts (for ``guard_cooldown``
   decisions, after which the learner gets another window). The ratio needs the
   env to price static in the same state (``price_static=True``, ``reference=True`` or
   a ``relative`` or ``normalised`` reward: ``info["static_latency"]``), as train.py's
   and the online study's envs do; without it the guard compares raw latencies, which
   vary ~10x with the task sizes, and a warning says so.

RecurrentPPO (``recurrent-ppo``) takes all three through its LSTM: its clone is fitted on the
conservative policy's whole episodes, the LSTM state carried along each
(``agents.sequence_cloning``), and in the conservative phase its policy's forward() returns the
conservative action with the learner's value and log-probability of it under the LSTM state
it has reached, and that state moved on as its own action would have moved it
(``WarmRecurrentPolicy``).
"""

from __future__ import annotations

import warnings
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from gymnasium import Wrapper, spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3 import DQN, SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import ActorCriticPolicy

from agents.base import flat_index
from agents.warmup_config import MIN_CLONE_SAMPLES as MIN_CLONE_SAMPLES
from agents.warmup_config import WARMUP_PARTS as WARMUP_PARTS
from agents.warmup_config import WarmupConfig as WarmupConfig
from inference.checks import is_integer, is_number
from inference.messages import shown

if TYPE_CHECKING:
    from stable_baselines3.common.distributions import Distribution

    from agents.sb3_factory import SB3Agent


# Box actions (the Split env's weights): a conservative entry at the box's lower edge (a split
# weight of exactly 0: no share on that device) is this far below the edge in the learner's own
# representation, where the clone fits it and whence it acts. The Gaussian's mean fitted onto
# the edge itself lands a little inside it (about -0.95), and every such entry is a sliver share
# (median 2% of the stage) that pays the device's fixed set-up, weights and transfer costs:
# heft-split's clone ran at 0.42-0.55x best-static's latency against heft-split's 0.33x. Below
# the edge, SB3 clips the deterministic action (and most samples) onto it: 0.35-0.37x.
BOX_EDGE_MARGIN = 0.5


def as_env_actions(actions: np.ndarray, space: Any) -> np.ndarray:
    """Device-per-stage actions as the env takes them: as is, or one-hot in [-1, 1] for Box."""
    actions = np.asarray(actions)
    if not isinstance(space, spaces.Box):
        return actions.astype(np.int64)
    if actions.shape[-1] == space.shape[0] and actions.dtype.kind == "f":
        return actions.reshape(-1, space.shape[0]).astype(np.float32)   # already Box actions
    n_devices = space.shape[0] // 3
    ids = actions.reshape(-1, 3).astype(int)
    if ids.size and (ids.min() < 0 or ids.max() >= n_devices):
        # one-hot, an id past the devices was an IndexError, and -1 the last device, silently
        raise ValueError(f"action entries must be device ids in 0..{n_devices - 1}, "
                         f"got {shown(actions.tolist())}")
    onehot = -np.ones((len(ids), 3, n_devices), dtype=np.float32)
    np.put_along_axis(onehot, ids[:, :, None], 1.0, axis=2)
    return onehot.reshape(len(ids), -1)


def box_targets(targets: np.ndarray, space: spaces.Box) -> np.ndarray:
    """Box actions as the learner represents them: entries at the lower edge moved
    ``BOX_EDGE_MARGIN`` below it (see there), the others as they are. The env receives the
    same action once SB3 clips it into the box."""
    low = np.broadcast_to(space.low, targets.shape)
    return np.where(targets <= low, targets - BOX_EDGE_MARGIN, targets).astype(np.float32)


def learner_actions(model: Any, actions: np.ndarray, space: Any) -> np.ndarray:
    """The env `actions` (``as_env_actions``) of `space` as `model` learns from its own: DQN's
    index of the flattened ``Discrete``; SAC's in its policy's [-1, 1] scale (its critic is
    fitted on squashed actions, so a zero weight stays on the box's edge); the Gaussian
    policies' below that edge (``box_targets``); device ids as they are."""
    if isinstance(model, DQN):
        return np.array([flat_index(a, space.nvec) for a in np.atleast_2d(actions)])
    if isinstance(model, SAC):
        return model.policy.scale_action(actions).astype(np.float32)
    if isinstance(space, spaces.Box):
        return box_targets(actions, space)
    return actions


class WarmupController:
    """Decides, decision by decision, whether the conservative policy acts.

    The conservative policy is driven as SB3's ``evaluate_policy`` drives a recurrent model
    (``agents.base.StreamActor``, per env of a VecEnv): the state its ``predict`` returned is
    handed to its next, and ``episode_start`` is True for an env whose episode began since the
    conservative last acted there (its first observation, when it acts from the start), so a
    policy that keeps its memory in `state` neither acts on every task as on an episode's
    first nor carries one episode's memory into the next. ``WarmupCallback`` reports the ends
    (``episodes_ended``). Ours return the state they are given (None), and act as before.
    """

    def __init__(self, conservative: Any, config: WarmupConfig, action_space: Any = None) -> None:
        self.conservative = conservative
        self.config = config
        self.action_space = action_space
        self.decisions = 0
        self.cooldown = 0
        self.learner_ratios: deque[float] = deque(maxlen=max(config.guard_window, 1))
        self.conservative_ratios: deque[float] = deque(maxlen=max(config.guard_window, 1))
        self.last_conservative = False
        self.guard_trips = 0
        self.conservative_state: Any = None
        self.starting: np.ndarray | None = None   # per env; None: every env starts anew

    def state(self) -> dict[str, Any]:
        """What a resumed run carries on from (``restore``): the guard's trip count, whose
        ``warmup/guard_trips`` curve restarted at 0 on ``train.py --resume``, and what the
        guard compares (both windows of ratios, a pause in progress). Without the
        conservative's window a run resumed past its conservative phase had nothing to
        compare the learner with, and its guard never tripped again."""
        return {"guard_trips": self.guard_trips, "cooldown": self.cooldown,
                "conservative_ratios": list(self.conservative_ratios),
                "learner_ratios": list(self.learner_ratios)}

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from ``state()``; a state saved before it held the windows (the trip
        count alone) restores the count."""
        trips = state.get("guard_trips")
        if not is_integer(trips) or trips < 0:
            raise ValueError(f"warm-up state: guard_trips must be an integer >= 0, got {trips!r}")
        cooldown = state.get("cooldown", 0)
        if not is_integer(cooldown) or cooldown < 0:
            raise ValueError(f"warm-up state: cooldown must be an integer >= 0, got {cooldown!r}")
        windows = {}
        for key in ("conservative_ratios", "learner_ratios"):
            values = state.get(key, [])
            if not isinstance(values, list) or not all(
                    is_number(v) and np.isfinite(v)
                    for v in values):
                raise ValueError(f"warm-up state: {key} must be a list of finite numbers, "
                                 f"got {values!r}")
            windows[key] = [float(v) for v in values]
        self.guard_trips = trips
        self.cooldown = cooldown
        self.conservative_ratios.clear()
        self.conservative_ratios.extend(windows["conservative_ratios"])
        self.learner_ratios.clear()
        self.learner_ratios.extend(windows["learner_ratios"])

    def use_conservative(self) -> bool:
        """Called once per decision, before acting."""
        self.decisions += 1
        if self.decisions <= self.config.steps:
            self.last_conservative = True
        elif self.cooldown > 0:
            self.cooldown -= 1
            self.last_conservative = True
        else:
            self.last_conservative = False
        return self.last_conservative

    def actions(self, obs: np.ndarray) -> np.ndarray:
        """The conservative policy's env actions for the batch `obs`, one row per env."""
        n_envs = len(np.atleast_2d(obs))
        if self.starting is None or len(self.starting) != n_envs:
            self.starting = np.ones(n_envs, dtype=bool)
        action, self.conservative_state = self.conservative.predict(
            obs, state=self.conservative_state, episode_start=self.starting.copy(),
            deterministic=True)
        self.starting[:] = False
        action = np.asarray(action)
        if isinstance(self.action_space, spaces.Box):
            return as_env_actions(action, self.action_space).reshape(n_envs, -1)
        return action

    def episodes_ended(self, dones: Any = None) -> None:
        """The envs whose episode ended at the last step (`dones`, one per env; None: every
        env's, as a learn() that resets the env): the conservative's next observation there is
        a new episode's."""
        ended = None if dones is None else np.asarray(dones, dtype=bool).reshape(-1)
        if ended is None or self.starting is None or len(ended) != len(self.starting):
            self.starting = None
        else:
            self.starting |= ended

    def record(self, ratio: float) -> None:
        """The outcome of the last decision: its latency over the static reference's."""
        if not np.isfinite(ratio):
            return
        (self.conservative_ratios if self.last_conservative else self.learner_ratios).append(ratio)
        if not self.config.guard or self.last_conservative:
            return
        window = self.config.guard_window
        if len(self.learner_ratios) >= max(window // 2, 1) and self.conservative_ratios:
            learner = float(np.mean(self.learner_ratios))
            safe = float(np.mean(self.conservative_ratios))
            if learner > safe * (1.0 + self.config.guard_margin):
                self.cooldown = self.config.guard_cooldown
                self.learner_ratios.clear()
                self.guard_trips += 1


class WarmupCallback(BaseCallback):
    """Feeds each decision's latency ratio to the controller, and logs who acted:

    * ``warmup/conservative_acting``: the share of the last `window` tasks (train.py's
      ``--metrics-window``, as the ``latency/`` tags) that the conservative policy placed;
    * ``warmup/guard_trips``: how often the guard has handed control to the conservative
      policy since the run began.
    """
    # A share over a window, not the last decision's 0/1 flag: SB3 writes the value recorded
    # last before each dump, so the flag's curve jumped between 0 and 1 once the guard paused.

    def __init__(self, controller: WarmupController, window: int = 100) -> None:
        super().__init__()
        if window < 1:
            raise ValueError(f"WarmupCallback window must be >= 1, got {window}")
        self.controller = controller
        self.acting: deque[bool] = deque(maxlen=window)
        self._acting_count = 0      # of True in `acting`, kept as it slides: no sum per step
        self._warned = False

    def _on_training_start(self) -> None:
        # learn() resets the env unless asked to go on (a resume's own process starts anew)
        if self.locals.get("reset_num_timesteps", True):
            self.controller.episodes_ended(None)

    def _on_step(self) -> bool:
        if self.locals.get("dones") is not None:
            self.controller.episodes_ended(self.locals["dones"])
        for info in self.locals.get("infos", []):
            latency = info.get("latency")
            static = info.get("static_latency")
            if latency is None:
                continue
            if not static and not self._warned and self.controller.config.guard:
                warnings.warn("the warm-up guard compares raw latencies: the env gives no "
                              "static_latency (make it with price_static=True, or a "
                              "relative or normalised reward, to compare ratios to static)",
                              stacklevel=2)
                self._warned = True
            conservative = self.controller.last_conservative
            if len(self.acting) == self.acting.maxlen:
                self._acting_count -= self.acting[0]
            self.acting.append(conservative)
            self._acting_count += conservative
            self.controller.record(latency / static if static else latency)
        if self.acting:
            self.logger.record("warmup/conservative_acting",
                               self._acting_count / len(self.acting))
        self.logger.record("warmup/guard_trips", self.controller.guard_trips)
        return True


class _WarmForward:
    """Mixin for actor-critic policies: the conservative policy may act in forward()."""

    warmup: WarmupController | None = None

    def forward(self, obs: torch.Tensor, deterministic: bool = False, **kwargs: Any) -> Any:
        ctl = self.warmup
        if ctl is None or not ctl.use_conservative():
            return super().forward(obs, deterministic, **kwargs)  # type: ignore[misc]
        chosen = ctl.actions(obs.cpu().numpy())
        # A masked conservative action is not sent: the learner acts instead. The masks are
        # read directly, since MaskablePPO gives a masked action a finite log-prob (-1e8).
        if _picks_masked(chosen, kwargs.get("action_masks"), self.action_space):  # type: ignore[attr-defined]
            ctl.last_conservative = False
            return super().forward(obs, deterministic, **kwargs)  # type: ignore[misc]
        actions = _sent(chosen, self.action_space, obs.device)  # type: ignore[attr-defined]
        values, log_prob, _ = self.evaluate_actions(obs, actions, **kwargs)  # type: ignore[attr-defined]
        return actions, values, log_prob


def _sent(chosen: np.ndarray, action_space: spaces.Space, device: torch.device) -> torch.Tensor:
    """The conservative's actions as a warm policy's forward() returns them, on `device`. A Box
    action in the clone's representation (``box_targets``: below the edge where the
    conservative gives no share): PPO stores this unclipped action and updates towards it, and
    an action on the edge pulled the mean back inside, to sliver shares. The env gets it
    clipped."""
    if isinstance(action_space, spaces.Box):
        chosen = box_targets(chosen, action_space)
    return torch.as_tensor(chosen, device=device)


def _picks_masked(actions: np.ndarray, masks: Any, action_space: spaces.Space) -> bool:
    """Whether any row of `actions` picks an option its row of `masks` rules out.

    `masks` as MaskablePPO passes them: per row, the options of every action dimension
    concatenated (for ``MultiDiscrete([3, 3, 3])``, 9 booleans); None without masks.
    """
    if masks is None:
        return False
    nvec: np.ndarray   # unshaped: numpy 2.2's stubs (Python 3.10's) would shape it 1-D
    if isinstance(action_space, spaces.MultiDiscrete):
        nvec = np.asarray(action_space.nvec).reshape(-1)
    elif isinstance(action_space, spaces.Discrete):
        nvec = np.array([action_space.n])
    else:
        return False
    rows = np.asarray(actions).reshape(-1, len(nvec)).astype(np.int64)
    allowed = np.asarray(masks, dtype=bool).reshape(len(rows), -1)
    offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
    return not bool(allowed[np.arange(len(rows))[:, None], offsets + rows].all())


class WarmActorCriticPolicy(_WarmForward, ActorCriticPolicy):
    pass


class WarmMaskablePolicy(_WarmForward, MaskableActorCriticPolicy):  # type: ignore[misc]
    pass


class WarmRecurrentPolicy(RecurrentActorCriticPolicy):
    """RecurrentPPO's LSTM policy whose forward() the conservative policy may act through.

    Its forward() takes and returns the LSTM states (RecurrentPPO's rollout hands each step
    the states the last returned), so ``_WarmForward``'s does not fit it. The LSTMs read the
    observation alone, never the action, so the states move on as the learner's own action
    would have moved them; the value and the conservative action's log-probability are the
    learner's under the states it has reached, which RecurrentPPO's update recomputes from
    the states its buffer saved: the ratio starts at 1, as warm PPO's.
    """

    warmup: WarmupController | None = None
    # Where the conservative phase's forward() catches the distribution its own pass builds
    _caught: list[Distribution] | None = None

    # sb3-contrib's own signature, which differs from ActorCriticPolicy's as this one does
    def forward(  # type: ignore[override]
            self, obs: torch.Tensor, lstm_states: RNNStates, episode_starts: torch.Tensor,
            deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, RNNStates]:
        ctl = self.warmup
        if ctl is None or not ctl.use_conservative():
            return super().forward(obs, lstm_states, episode_starts, deterministic)
        actions = _sent(ctl.actions(obs.cpu().numpy()), self.action_space, obs.device)
        # One pass through the LSTMs gives the states, the value and the distribution that
        # scores the conservative action (evaluate_actions would run them a second time).
        # Deterministic: no sample drawn (none is sent), so torch's generator moves as little.
        self._caught = []
        try:
            _, values, _, states = super().forward(obs, lstm_states, episode_starts, True)
            (distribution,) = self._caught
        finally:
            self._caught = None
        return actions, values, distribution.log_prob(actions), states

    def _get_action_dist_from_latent(self, latent_pi: torch.Tensor) -> Distribution:
        distribution = super()._get_action_dist_from_latent(latent_pi)
        if self._caught is not None:
            self._caught.append(distribution)
        return distribution


class _WarmSampleAction:
    """Mixin for off-policy algorithms: the conservative policy may take the exploration step
    (``_sample_action``), and its transitions reach the replay buffer as the learner's do."""

    warmup: WarmupController | None = None

    def _excluded_save_params(self) -> list[str]:
        # The controller (and its conservative policy) belong to this process, not the model.
        return [*super()._excluded_save_params(), "warmup"]  # type: ignore[misc]

    def _conservative_step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(env actions, replay-buffer actions) of the conservative policy's `actions`."""
        raise NotImplementedError

    def _sample_action(self, learning_starts: int, action_noise: Any = None, n_envs: int = 1
                       ) -> tuple[np.ndarray, np.ndarray]:
        ctl = self.warmup
        if ctl is not None and ctl.use_conservative():
            return self._conservative_step(ctl.actions(self._last_obs))  # type: ignore[attr-defined]
        if ctl is not None and self.num_timesteps < learning_starts:  # type: ignore[attr-defined]
            # Past the conservative phase the learner acts (DQN greedily-with-epsilon, SAC by
            # sampling its actor), not SB3's uniform random actions.
            learning_starts = 0
        return super()._sample_action(learning_starts, action_noise, n_envs)  # type: ignore[misc]


class WarmDQN(_WarmSampleAction, DQN):
    """DQN whose exploration steps may be taken by the conservative policy."""

    def _conservative_step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        flat = learner_actions(self, actions, self.warmup.action_space)  # type: ignore[union-attr]
        return flat, flat


class WarmSAC(_WarmSampleAction, SAC):
    """SAC whose exploration steps may be taken by the conservative policy."""

    def _conservative_step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # The buffer holds the action the env receives, as SAC's own (learner_actions)
        env_actions = np.asarray(actions, dtype=np.float32)     # (n_envs, 9): ctl.actions'
        return env_actions, learner_actions(self, env_actions,
                                            self.warmup.action_space)  # type: ignore[union-attr]


# The off-policy agents whose algorithm class takes the warm-up (the others' policy class does).
WARM_ALGORITHMS: dict[str, type[WarmDQN] | type[WarmSAC]] = {"dqn": WarmDQN, "sac": WarmSAC}


# The on-policy agents whose warm policy class is not WarmActorCriticPolicy.
WARM_POLICIES: dict[str, type] = {"maskable-ppo": WarmMaskablePolicy,
                                  "recurrent-ppo": WarmRecurrentPolicy}


def warm_policy_class(agent: str) -> type:
    return WARM_POLICIES.get(agent, WarmActorCriticPolicy)


def own_actions_env(env: Any) -> Any:
    """The outermost layer of `env` that takes the env's own actions: `env` itself, or, where
    a learner's action wrapper sits on it (DQN's ``FlatDiscreteActions``: one of D ** 3), the
    env under that wrapper. The conservative policy is built on it, as train.py's check built
    it: it answers in the env's own actions, which the warm-up maps onto the learner's. Built
    on DQN's wrapper, a policy of yours that loads a model of the env (``PPO.load(zip,
    env=env)``) was refused by SB3 ("Action spaces do not match") with a traceback, inside the
    first run."""
    own = env.unwrapped.action_space
    layer = env
    while isinstance(layer, Wrapper) and layer.action_space != own:
        layer = layer.env
    return layer


def _check_own_observations(env: Any) -> None:
    """The warm-up's conservative policy acts on the learner's observations and the clone is
    fitted on the env's own: a wrapper on `env` that changes the observation space stopped the
    clone with torch's "mat1 and mat2 shapes cannot be multiplied" (a shorter observation), or
    the conservative phase after the whole clone (a rescaled one)."""
    own = env.unwrapped.observation_space
    if env.observation_space != own:
        raise ValueError(
            f"the warm-up reads the env's own observations ({own}), and a wrapper on the env "
            f"changes them to {env.observation_space}: warm up a learner built on the env's "
            f"own observations, or train this one without warm-up")


def attach_warmup(agent: SB3Agent, env: Any, config: WarmupConfig, seed: int | None = None,
                  metrics_window: int = 100) -> WarmupController:
    """Wire the warm-up parts into an agent built by make_sb3 (clone now, act/guard later).
    `metrics_window`: the tasks behind ``warmup/conservative_acting`` (``WarmupCallback``)."""
    from agents.registry import make_policy  # registry imports the factory: import late

    _check_own_observations(env)
    conservative = make_policy(config.conservative, own_actions_env(env))
    controller = WarmupController(conservative, config, env.unwrapped.action_space)
    model = agent.model
    if agent.name in WARM_ALGORITHMS:
        assert isinstance(model, WARM_ALGORITHMS[agent.name]), \
            "make_sb3 builds the WARM_ALGORITHMS class when warm-up is asked"
        model.warmup = controller
    else:
        setattr(model.policy, "warmup", controller)  # noqa: B010  (a Warm* policy class)
    agent.warmup = controller
    agent.callbacks = [WarmupCallback(controller, metrics_window)]
    if config.clone:
        from agents.cloning import behaviour_clone

        behaviour_clone(agent, env, conservative, config, seed=seed)
    return controller
