"""The inference pipeline of infer-alloc-gym: real torch stages, their cost model, hardware
profiles and a discrete-event simulator.

A *task* (``Task``: batch, prompt and output tokens, data domain, arrival) flows through three
stages, load -> prefill -> decode. A *variant* picks one implementation per stage
(``VARIANTS``: ``glm-5.3``, ``glm-5.3-flash``, ``glm-5.3-flash-opt``, or any mix via
``resolve_variant``); each implementation runs for real on a tiny model and prices itself
analytically (``work(task, model)``) for a 9B-class one. The ``Simulator`` books tasks under a
placement (a device per stage, or fractions) on ``Hardware`` loaded from a preset or YAML and
returns a ``TaskResult`` with the latency and its breakdown::

    from inference import Simulator, Task, build_stages, get_model, load_hardware

    sim = Simulator(load_hardware("server"), get_model("glm-9b"), build_stages("glm-5.3"))
    task = Task(batch=16, prompt_tokens=5000, output_tokens=256)
    result = sim.execute(task, ("cpu", "gpu", "gpu"))   # a device per stage
    print(result.latency, result.breakdown())

``python -m inference`` prints the three variants side by side for one task.
This package imports neither gymnasium nor torch (torch loads when a stage runs for real).
"""

from inference.hardware import Hardware, load_hardware
from inference.model_config import ModelConfig, get_model
from inference.simulator import SimConfig, Simulator, TaskResult
from inference.task import Task
from inference.variants import VARIANTS, build_stages, resolve_variant

__all__ = [
    "VARIANTS",
    "Hardware",
    "ModelConfig",
    "SimConfig",
    "Simulator",
    "Task",
    "TaskResult",
    "build_stages",
    "get_model",
    "load_hardware",
    "resolve_variant",
]
