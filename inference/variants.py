"""Stage implementations by name, and the three variant recipes of the article.

A variant is one implementation per stage; any mix is allowed::

    build_stages("glm-5.3-flash")
    build_stages("adaptive+window+prefetched")      # the mix as variant_label writes it
    build_stages({"load": "adaptive", "prefill": "window", "decode": "prefetched"})
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from inference.checks import equal
from inference.messages import did_you_mean, shown
from inference.model_config import ModelConfig, get_model
from inference.stage_checks import check_cost_face
from inference.stages.decode import HierarchicalDecode, PrefetchedDecode, SequentialDecode
from inference.stages.load import AdaptiveLoad, CachedLoad, DirectLoad
from inference.stages.prefill import DynamicAttention, GatedAttention, WindowAttention
from inference.task import STAGES

IMPLEMENTATIONS: dict[str, dict[str, type]] = {
    "load": {"direct": DirectLoad, "cached": CachedLoad, "adaptive": AdaptiveLoad},
    "prefill": {"window": WindowAttention, "dynamic": DynamicAttention, "gated": GatedAttention},
    "decode": {"sequential": SequentialDecode, "hierarchical": HierarchicalDecode,
               "prefetched": PrefetchedDecode},
}

#: The model COST_PARAMS are sized for, and `build_stages` probes a cost face on by default.
COST_MODEL = "glm-9b"

VARIANTS: dict[str, dict[str, str]] = {
    "glm-5.3": {"load": "direct", "prefill": "window", "decode": "sequential"},
    "glm-5.3-flash": {"load": "cached", "prefill": "dynamic", "decode": "hierarchical"},
    "glm-5.3-flash-opt": {"load": "adaptive", "prefill": "gated", "decode": "prefetched"},
}

# Constructor arguments for the 9B-class model the cost model prices, by registered name. The
# real stages' own defaults are sized for the tiny model, so every implementation has an entry,
# {} where its defaults are the 9B-class values; one registered without an entry takes the
# entry of the nearest class in its MRO registered under the same stage (`cost_params`).
# Calibrated figures: change with care.
COST_PARAMS: dict[str, dict[str, Any]] = {
    "direct": {},
    "cached": {},                       # cache_dir is for running it for real
    "adaptive": {},                     # the simulated cache's size: SimConfig.cache_capacity
    "window": {"window": 2048},
    "dynamic": {},                      # its cost face reads no argument
    "gated": {"window": 2048},          # gate_tokens=8192, open_fraction=0.25 are the defaults
    "sequential": {},                   # takes no argument
    "hierarchical": {"block_size": 16},
    "prefetched": {"block_size": 16},
}


def resolve_variant(spec: str | Mapping[str, str]) -> dict[str, str]:
    """A recipe name, a 'load+prefill+decode' mix (as `variant_label` writes one) or a
    {stage: implementation} mapping, checked; returns the mapping."""
    if isinstance(spec, str):
        if "+" in spec:
            parts = [p.strip() for p in spec.split("+")]
            if len(parts) != len(STAGES):
                raise ValueError(f"variant mix {shown(spec)} needs one implementation per stage "
                                 f"({'+'.join(STAGES)})")
            return resolve_variant(dict(zip(STAGES, parts, strict=True)))
        if spec not in VARIANTS:
            raise ValueError(f"unknown variant {shown(spec)}{did_you_mean([spec], VARIANTS)}; "
                             f"known variants: {', '.join(VARIANTS)}, or a "
                             f"{'+'.join(STAGES)} mix of implementations")
        return dict(VARIANTS[spec])
    if not isinstance(spec, Mapping):
        raise ValueError(f"variant must be a recipe name or a mapping, got {type(spec).__name__}")
    if set(spec) != set(STAGES):
        raise ValueError(
            f"variant mapping needs exactly the stages {', '.join(STAGES)}; got {sorted(spec, key=str)}"
        )
    for stage in STAGES:
        if not isinstance(spec[stage], str) or spec[stage] not in IMPLEMENTATIONS[stage]:
            raise ValueError(
                f"unknown {stage} implementation {shown(spec[stage])}"
                f"{did_you_mean([spec[stage]], IMPLEMENTATIONS[stage])}; "
                f"known: {', '.join(IMPLEMENTATIONS[stage])}"
            )
    return {stage: spec[stage] for stage in STAGES}


def variant_label(spec: str | Mapping[str, str]) -> str:
    """The recipe name when the mapping is a recipe, else 'load+prefill+decode'."""
    recipe = resolve_variant(spec)
    for name, known in VARIANTS.items():
        if known == recipe:
            return name
    return "+".join(recipe[s] for s in STAGES)


def build_stages(spec: str | Mapping[str, str],
                 model: ModelConfig | None = None) -> tuple[Any, Any, Any]:
    """Instances of the three stage implementations of a variant, with cost-model parameters
    (`cost_params`). Each is checked as it is built: that its class is a stage of the kind it
    is registered under, takes those parameters, and prices a few probe tasks on `model` (the
    9B-class glm-9b by default) as the simulator reads them (`stage_checks`), once per class,
    arguments and model in a process; a ValueError naming it otherwise. The simulator's hot
    path checks nothing."""
    recipe = resolve_variant(spec)
    model = get_model(COST_MODEL) if model is None else model
    load, prefill, decode = (_build(stage, recipe[stage], model) for stage in STAGES)
    return load, prefill, decode


#: (class, arguments, model) of each implementation whose checks `_build` has passed: they run
#: once per process, not again for every env built (a class defined anew is another key).
_CHECKED: set[tuple[type, tuple[tuple[str, Any], ...], ModelConfig]] = set()


def _build(stage: str, name: str, model: ModelConfig) -> Any:
    cls = IMPLEMENTATIONS[stage][name]
    kind = getattr(cls, "stage", None)
    if kind != stage:
        fix = (f"register it under IMPLEMENTATIONS[{kind!r}]" if kind in STAGES
               else f"give it stage = {stage!r}")
        raise ValueError(f"{implementation_label(stage, name)} has stage = {shown(kind)}, not "
                         f"{stage!r}, as the simulator reads it: {fix}, or subclass a {stage} "
                         f"stage")
    params = cost_params(stage, name)
    try:
        key: Any = (cls, tuple(sorted(params.items())), model)
        checked = key in _CHECKED
    except TypeError:       # an argument that cannot be hashed: checked every time
        key, checked = None, False
    if checked:
        return cls(**params)
    label = implementation_label(stage, name)
    try:
        inspect.signature(cls).bind(**params)
    except TypeError as exc:
        raise ValueError(f"{label} does not take its COST_PARAMS arguments {shown(params)}: "
                         f"{exc}") from None
    except ValueError:      # no signature to read: the call itself will tell
        pass
    # probed on an instance of its own: one whose cost face keeps state (a counter, a cache)
    # starts the run as the class builds it, not with the probes recorded
    check_cost_face(cls(**params), stage, label, model)
    if key is not None:
        _CHECKED.add(key)
    return cls(**params)


def implementation_label(stage: str, name: str) -> str:
    """How an error names the implementation registered as `name` under `stage`: both names,
    the registry's and the class's (a subclass shares its parent's `name` attribute)."""
    cls = IMPLEMENTATIONS[stage][name]
    return f"{stage} implementation {shown(name)} ({getattr(cls, '__qualname__', shown(cls))})"


def cost_params(stage: str, name: str) -> dict[str, Any]:
    """The constructor arguments `build_stages` gives the implementation registered as `name`
    under `stage`: its own `COST_PARAMS` entry, else the entry of the nearest class in its MRO
    that is registered under `stage` with one (the shipped class it subclasses, or itself
    under another name). A ValueError, naming the implementation, where that would price it
    with a default the entry was not written for: no such class (its constructor's defaults
    are sized for the tiny model), classes registered under two names with different
    entries, or a constructor whose default for an argument of the entry differs from that
    class's (`class Wide(WindowAttention)` with `window=8192`: 8192 or 2048?)."""
    if name in COST_PARAMS:
        return dict(COST_PARAMS[name])
    cls = IMPLEMENTATIONS[stage][name]
    label = implementation_label(stage, name)
    for ancestor in getattr(cls, "__mro__", (cls,)):
        owners = [n for n, c in IMPLEMENTATIONS[stage].items()
                  if c is ancestor and n != name and n in COST_PARAMS]
        if not owners:
            continue
        params = COST_PARAMS[owners[0]]
        other = next((n for n in owners[1:] if COST_PARAMS[n] != params), None)
        if other is not None:
            raise ValueError(
                f"{label} has no COST_PARAMS entry, and {ancestor.__qualname__}, whose entry it "
                f"would take, is registered as {shown(owners[0])} and {shown(other)} with "
                f"different ones; set COST_PARAMS[{shown(name)}] to its 9B-class constructor "
                f"arguments")
        changed = _changed_default(cls, ancestor, params)
        if changed is not None:
            raise ValueError(
                f"{label} has no COST_PARAMS entry, and would take {ancestor.__qualname__}'s "
                f"(COST_PARAMS[{shown(owners[0])}] = {shown(params)}), but its constructor "
                f"{changed}; set COST_PARAMS[{shown(name)}] to its 9B-class constructor "
                f"arguments")
        return dict(params)
    raise ValueError(
        f"{label} has no COST_PARAMS entry, and no class it derives from is registered as a "
        f"{stage} implementation with one: its constructor's defaults would price it, and a "
        f"stage's defaults are sized for the tiny model; set inference.variants.COST_PARAMS"
        f"[{shown(name)}] to its constructor arguments for the 9B-class model ({{}} if its "
        f"defaults are those)")


def _changed_default(cls: type, ancestor: type, params: Mapping[str, Any]) -> str | None:
    """How `cls`'s constructor departs from `ancestor`'s for an argument of `params` ('defaults
    window to 8192, not 64'); None when it keeps their defaults, or a signature cannot be read."""
    try:
        mine, theirs = inspect.signature(cls).parameters, inspect.signature(ancestor).parameters
    except (TypeError, ValueError):
        return None
    passes_on = any(p.kind is p.VAR_KEYWORD for p in mine.values())
    for key in params:
        if key not in mine:
            if passes_on:       # **kwargs handed on to the ancestor: its default holds
                continue
            return f"takes no {key!r} argument"
        default = mine[key].default
        theirs_default = theirs[key].default if key in theirs else inspect.Parameter.empty
        if not equal(default, theirs_default):
            return (f"defaults {key} to {_default_text(default)}, not "
                    f"{_default_text(theirs_default)}")
    return None


def _default_text(default: Any) -> str:
    return "nothing" if default is inspect.Parameter.empty else shown(default)
