"""The registry of stage implementations: what `build_stages` gives an implementation of your
own (docs/EXTENDING.md, "Your own stage implementation"), and what it refuses."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from inference.model_config import get_model
from inference.stages.decode import HierarchicalDecode, PrefetchedDecode, SequentialDecode
from inference.stages.load import DirectLoad
from inference.stages.prefill import GatedAttention, WindowAttention
from inference.task import Task
from inference.variants import COST_PARAMS, IMPLEMENTATIONS, build_stages, cost_params
from inference.work import StageWork, WorkPart

GLM = get_model("glm-9b")


@pytest.fixture
def register(monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """register(stage, name, cls[, params]): as the README registers one, undone after."""
    def register(stage: str, name: str, cls: type, params: dict | None = None) -> None:
        monkeypatch.setitem(IMPLEMENTATIONS[stage], name, cls)
        if params is not None:
            monkeypatch.setitem(COST_PARAMS, name, params)
    yield register


def prefill(name: str) -> dict[str, str]:
    return {"load": "direct", "prefill": name, "decode": "sequential"}


def decode(name: str) -> dict[str, str]:
    return {"load": "direct", "prefill": "window", "decode": name}


# --- the constructor arguments (COST_PARAMS) ------------------------------------------------


def test_every_shipped_implementation_has_an_entry_of_its_own():
    # An implementation without one is priced by a class it derives from, or refused: the
    # shipped ones are what a user's derive from.
    for stage, impls in IMPLEMENTATIONS.items():
        for name in impls:
            assert name in COST_PARAMS, f"{stage} implementation {name!r}"


def test_a_subclass_registered_without_an_entry_takes_its_parents(register):
    # It ran with the constructor's default for the tiny model, a 64-token window where
    # "window" has 2048: best-static on long-context read 24.53 s against 44.38 s for the
    # identical class.
    class MyWindow(WindowAttention):
        pass

    class MyPrefetched(PrefetchedDecode):
        pass

    register("prefill", "mywindow", MyWindow)
    register("decode", "myprefetched", MyPrefetched)
    assert build_stages(prefill("mywindow"))[1].window == build_stages("glm-5.3")[1].window
    built = build_stages(decode("myprefetched"))[2]
    assert built.block_size == COST_PARAMS["prefetched"]["block_size"] != MyPrefetched().block_size
    long = Task(batch=4, prompt_tokens=32768, output_tokens=64)
    assert build_stages(prefill("mywindow"))[1].work(long, GLM) \
        == build_stages(prefill("window"))[1].work(long, GLM)


def test_the_nearest_registered_ancestor_gives_the_entry(register):
    class Mid(HierarchicalDecode):
        def __init__(self, block_size: int = 4, seed: int = 0) -> None:
            super().__init__(block_size, seed)

    class Leaf(Mid):
        pass

    register("decode", "mid", Mid, {"block_size": 32})
    register("decode", "leaf", Leaf)
    assert cost_params("decode", "leaf") == {"block_size": 32}
    # ... a class of its own: the entry of the class it is, under another name
    register("decode", "alias", HierarchicalDecode)
    assert cost_params("decode", "alias") == COST_PARAMS["hierarchical"]


def test_an_entry_of_its_own_wins_over_its_parents(register):
    class Narrow(WindowAttention):
        pass

    register("prefill", "narrow", Narrow, {"window": 512})
    assert build_stages(prefill("narrow"))[1].window == 512


def test_a_subclass_that_changes_a_default_of_its_parents_entry_is_refused(register):
    # 2048 from "window"'s entry, or its own 8192? Taken silently either way it was a guess.
    class Wide(WindowAttention):
        def __init__(self, window: int = 8192) -> None:
            super().__init__(window)

    class Fixed(WindowAttention):
        def __init__(self) -> None:
            super().__init__(4096)

    register("prefill", "wide", Wide)
    register("prefill", "fixed", Fixed)
    with pytest.raises(ValueError, match=r"^prefill implementation 'wide' \(.*Wide\) has no "
                       r"COST_PARAMS entry, .*defaults window to 8192, not 64; set "
                       r"COST_PARAMS\['wide'\]"):
        build_stages(prefill("wide"))
    with pytest.raises(ValueError, match=r"'fixed' .* takes no 'window' argument"):
        build_stages(prefill("fixed"))
    register("prefill", "wide", Wide, {"window": 8192})
    assert build_stages(prefill("wide"))[1].window == 8192


def test_a_subclass_that_hands_its_arguments_on_keeps_its_parents_entry(register):
    class PassOn(GatedAttention):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)

    register("prefill", "passon", PassOn)
    assert build_stages(prefill("passon"))[1].window == COST_PARAMS["gated"]["window"]


def test_a_class_with_no_registered_ancestor_and_no_entry_is_refused(register):
    class Duck:
        stage = "prefill"

        def work(self, task: Task, model) -> StageWork:
            return StageWork((WorkPart("attention", 0, 0, 1e12, 1e9),), needs_weights=True)

    register("prefill", "duck", Duck)
    with pytest.raises(ValueError, match=r"^prefill implementation 'duck' \(.*Duck\) has no "
                       r"COST_PARAMS entry, .*sized for the tiny model; set "
                       r"inference\.variants\.COST_PARAMS\['duck'\] .*\(\{\} if its defaults"):
        build_stages(prefill("duck"))
    register("prefill", "duck", Duck, {})
    assert type(build_stages(prefill("duck"))[1]) is Duck


def test_two_names_of_one_ancestor_with_different_entries_are_refused(register):
    class Mine(WindowAttention):
        pass

    register("prefill", "window4k", WindowAttention, {"window": 4096})
    register("prefill", "mine", Mine)
    with pytest.raises(ValueError, match=r"'mine' .* registered as 'window' and 'window4k' "
                       r"with different ones"):
        build_stages(prefill("mine"))


def test_arguments_the_class_does_not_take_are_named(register):
    class Plain(SequentialDecode):
        pass

    register("decode", "plain", Plain, {"block_size": 16})
    with pytest.raises(ValueError, match=r"^decode implementation 'plain' \(.*Plain\) does not "
                       r"take its COST_PARAMS arguments \{'block_size': 16\}"):
        build_stages(decode("plain"))


# --- the stage a class is registered under --------------------------------------------------


@pytest.mark.parametrize("cls", [SequentialDecode, DirectLoad])
def test_a_class_registered_under_another_stage_is_named(register, cls):
    # It read "stages must be one implementation per stage in order (...)", or a TypeError
    # from the constructor, naming neither the implementation nor the stage.
    class Elsewhere(cls):       # type: ignore[valid-type, misc]
        pass

    register("prefill", "elsewhere", Elsewhere, {})
    with pytest.raises(ValueError, match=rf"^prefill implementation 'elsewhere' \(.*Elsewhere\) "
                       rf"has stage = '{cls.stage}', not 'prefill'.*register it under "
                       rf"IMPLEMENTATIONS\['{cls.stage}'\]"):
        build_stages(prefill("elsewhere"))


# --- the cost face, probed once when built --------------------------------------------------


def faulty(change) -> type:
    class Faulty(WindowAttention):
        def work(self, task: Task, model) -> StageWork:
            return change(super().work(task, model))
    return Faulty


def each_part(**fields):
    return lambda w: w._replace(parts=tuple(p._replace(**fields) for p in w.parts))


@pytest.mark.parametrize(("change", "field"), [
    # NaN FLOPs gave a mean latency of -552 s, negative FLOPs a faster stage, None an
    # AttributeError traceback from the simulator's booking, all with no word of the stage.
    (each_part(flops=math.nan), r"parts\[0\]\.flops = nan"),
    (lambda w: w._replace(parts=tuple(p._replace(flops=-p.flops) for p in w.parts)),
     r"parts\[0\]\.flops = -"),
    (each_part(launches=math.inf), r"parts\[0\]\.launches = inf"),
    (each_part(op=9), r"parts\[0\]\.op = 9"),
    (lambda w: w._replace(footprint=-1.0), r"footprint = -1\.0"),
    (lambda w: w._replace(io_bytes="1e9"), r"io_bytes = '1e9'"),
    (lambda w: w._replace(parts=[*w.parts, (1, 2)]), r"parts\[\d\] = \(1, 2\), not a WorkPart"),
    (lambda w: None, r"None, not a StageWork"),
])
def test_a_cost_face_that_gives_no_valid_work_is_refused_when_built(register, change, field):
    register("prefill", "faulty", faulty(change), {"window": 2048})
    with pytest.raises(ValueError, match=rf"^prefill implementation 'faulty' \(.*Faulty\): "
                       rf"work\(\) of a task of .* gave {field}"):
        build_stages(prefill("faulty"))


def test_a_fault_at_one_end_of_the_task_sizes_is_found(register):
    # A face right for the article's task but wrong for a one-token one.
    def tiny_only(w: StageWork) -> StageWork:
        return each_part(nbytes=math.nan)(w) if w.parts[0].flops < 1e12 else w

    register("prefill", "tinyonly", faulty(tiny_only), {"window": 2048})
    with pytest.raises(ValueError, match=r"'tinyonly' .*batch 1, 1 prompt .*nbytes = nan"):
        build_stages(prefill("tinyonly"))


def test_a_loaders_load_work_is_probed_for_a_hit_and_a_miss(register):
    from inference.stages.load import CachedLoad

    class HitNaN(CachedLoad):
        def load_work(self, task, model, hit=None):
            work = super().load_work(task, model, hit)
            return work._replace(io_bytes=math.nan) if hit else work

    class NoCacheKind:
        stage = "load"

        def work(self, task, model):
            return DirectLoad().work(task, model)

    register("load", "hitnan", HitNaN)
    register("load", "nokind", NoCacheKind, {})
    with pytest.raises(ValueError, match=r"^load implementation 'hitnan' \(.*HitNaN\): "
                       r"load_work\(hit=True\) of .* gave io_bytes = nan"):
        build_stages({"load": "hitnan", "prefill": "window", "decode": "sequential"})
    with pytest.raises(ValueError, match=r"'nokind' .* has no cache_kind attribute"):
        build_stages({"load": "nokind", "prefill": "window", "decode": "sequential"})


def test_a_valid_face_of_your_own_builds(register):
    class Halved(WindowAttention):
        def work(self, task, model):
            w = super().work(task, model)
            return w._replace(parts=tuple(p._replace(flops=p.flops / 2) for p in w.parts))

    register("prefill", "halved", Halved)
    assert type(build_stages(prefill("halved"))[1]) is Halved


def test_the_cost_face_is_probed_once_per_class_arguments_and_model(register):
    # Every env built calls build_stages; the probe is for the first of them.
    calls = []

    class Counted(WindowAttention):
        def work(self, task, model):
            calls.append(task)
            return super().work(task, model)

    register("prefill", "counted", Counted, {"window": 2048})
    build_stages(prefill("counted"))
    probed = len(calls)
    assert probed > 0
    build_stages(prefill("counted"))
    assert len(calls) == probed
    register("prefill", "counted", Counted, {"window": 1024})   # other arguments: again
    build_stages(prefill("counted"))
    assert len(calls) == 2 * probed


def test_the_probe_prices_an_instance_of_its_own_and_names_what_the_face_raises(register):
    """The probe priced the instance the run then used: a face that keeps state (a count of
    the tasks it priced) started the run with the probes in it. And a face that raised (a
    KeyError at the 64K-token probe) came out bare, naming neither the stage nor the call."""
    class Stateful(WindowAttention):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.priced = 0

        def work(self, task, model):
            self.priced += 1
            return super().work(task, model)

    register("prefill", "stateful", Stateful, {"window": 2048})
    assert build_stages(prefill("stateful"))[1].priced == 0

    class Raising(WindowAttention):
        def work(self, task, model):
            if task.prompt_tokens > 10_000:
                raise KeyError("no table entry")
            return super().work(task, model)

    register("prefill", "raising", Raising, {"window": 2048})
    with pytest.raises(ValueError, match=r"^prefill implementation 'raising' \(.*Raising\): "
                       r"work\(\) of a task of .* raised KeyError: 'no table entry'$"):
        build_stages(prefill("raising"))
