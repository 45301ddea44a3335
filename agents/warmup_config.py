"""What a warm-up is made of (``WarmupConfig``) and the names of its parts: what train.py's
options check and parse without importing torch or SB3, which ``agents.warmup`` (the
warm-up itself) needs. ``agents.warmup`` re-exports each name here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inference.checks import is_bool, is_integer, is_number
from inference.messages import did_you_mean, shown

# Fewer held none out to score the clone on (SB3 failed on a reshape of 0 elements).
MIN_CLONE_SAMPLES = 10
# A warm-up's parts, in the order run labels list them (train.py --warmup takes a comma list
# of them, all or none).
WARMUP_PARTS = ("conservative", "clone", "guard")


@dataclass(frozen=True)
class WarmupConfig:
    """Which warm-up parts to use, and how.

    Attributes:
        conservative: name of the conservative policy, any fixed one (e.g.
            ``heft-calibrated``, ``best-static``; ``heft-split`` in InferenceAllocSplit-v0).
        steps: first decisions taken by the conservative policy (0 = part 1 off).
        clone: behaviour-clone the conservative policy before RL (part 2).
        clone_samples: observations collected for cloning.
        clone_epochs: passes over them.
        guard: fall back to the conservative policy while the learner is worse (part 3).
        guard_window: recent decisions the guard compares.
        guard_margin: tolerated excess of the learner's latency ratio over the conservative's.
        guard_cooldown: decisions the conservative keeps control once the guard trips.

    With a VecEnv of n envs, ``steps`` and ``guard_cooldown`` count its steps (n tasks
    each: the conservative acts for all n envs at once), while ``guard_window`` counts tasks.
    """

    conservative: str = "heft-calibrated"
    steps: int = 200
    clone: bool = True
    clone_samples: int = 3000
    clone_epochs: int = 30
    guard: bool = True
    guard_window: int = 50
    guard_margin: float = 0.05
    guard_cooldown: int = 50

    def __post_init__(self) -> None:
        from agents.registry import check_fixed_policy_name

        if not isinstance(self.conservative, str):
            raise ValueError(f"WarmupConfig.conservative must be a policy name, got "
                             f"{shown(self.conservative)}")
        check_fixed_policy_name(self.conservative, "WarmupConfig.conservative")
        for name in ("clone", "guard"):
            if not is_bool(getattr(self, name)):    # "no" would count as True; numpy's taken
                raise ValueError(f"WarmupConfig.{name} must be True or False, got "
                                 f"{getattr(self, name)!r}")
            object.__setattr__(self, name, bool(getattr(self, name)))   # stored plain
        if not is_number(self.guard_margin):
            raise ValueError(f"WarmupConfig.guard_margin must be a number, got {self.guard_margin!r}")
        for name in ("steps", "clone_samples", "clone_epochs", "guard_window", "guard_cooldown"):
            value = getattr(self, name)
            if not is_integer(value) or value < 0:
                raise ValueError(f"WarmupConfig.{name} must be an integer >= 0, got {value!r}")
            object.__setattr__(self, name, int(value))   # numpy's: stored plain (frozen class)
        if not 0 <= self.guard_margin < 10:
            raise ValueError(f"WarmupConfig.guard_margin must be in [0, 10), got {self.guard_margin!r}")
        object.__setattr__(self, "guard_margin", float(self.guard_margin))
        if self.clone and self.clone_samples < MIN_CLONE_SAMPLES:
            # as train.py's --clone-samples: under 5, cloning held none out to score the clone
            # on and failed inside SB3 (a reshape of 0 elements); 0 failed on an empty batch
            raise ValueError(f"WarmupConfig.clone_samples must be >= {MIN_CLONE_SAMPLES} to clone, got "
                             f"{self.clone_samples!r}")

    @classmethod
    def from_parts(cls, parts: str, **kwargs: Any) -> WarmupConfig | None:
        """``"all"``, ``"none"`` or a comma list of ``conservative,clone,guard``."""
        chosen = {p.strip() for p in parts.split(",") if p.strip()}
        if chosen in ({"none"}, set()):
            return None
        if chosen == {"all"}:
            chosen = set(WARMUP_PARTS)
        unknown = chosen - set(WARMUP_PARTS)
        if unknown:
            raise ValueError(f"unknown warm-up parts {shown(sorted(unknown))}"
                             f"{did_you_mean(sorted(unknown), ('all', 'none', *WARMUP_PARTS))}; "
                             f"use all, none or a comma list of {', '.join(WARMUP_PARTS)}")
        if "guard" in chosen and "conservative" not in chosen:
            # The guard trips when the learner's latency ratio exceeds the one the conservative
            # policy showed while it acted first; without that phase it never could, and the
            # spec was taken and did nothing.
            raise ValueError("the guard compares the learner with the conservative policy's "
                             "latency ratio, measured while it acts first: use "
                             "conservative,guard (or all)")
        if "conservative" not in chosen:
            kwargs["steps"] = 0
        return cls(clone="clone" in chosen, guard="guard" in chosen, **kwargs)


def starts_warm(warmup: WarmupConfig | None) -> bool:
    """Whether a learner with this warm-up fine-tunes a behaviour clone, and so takes its
    env's ``warm_start`` hyper-parameters."""
    return warmup is not None and warmup.clone


def spec_starts_warm(parts: str) -> bool:
    """`starts_warm` for a run's warm-up spec (``"all"``, ``"none"``, ``"conservative,clone"``
    ...): whether its learner fine-tunes a behaviour clone."""
    return starts_warm(WarmupConfig.from_parts(parts))
