"""``python -m inference``: one task under each variant, side by side.

    python -m inference                                  # the article task on `server`
    python -m inference --prompt-tokens 16000 --placement gpu,npu,gpu --cache-hit
    python -m inference --variants glm-5.3,adaptive+window+prefetched --hardware edge

Each variant runs on a fresh simulator, so every one sees the same idle cluster; the table
gives the latency, its breakdown (the six parts add up to the latency), the prefill
attention time and its share of processing (attention / (load + compute + memory stall)),
the decode KV-read wait, the loading cache's outcome and the latency relative to the first
variant. A stage whose share does not fit its device's memory is priced all the same, and a note
under the table names it and what the envs would do instead. Bad input exits with
status 2 and a one-line message.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from inference.hardware import load_hardware, preset_names
from inference.messages import (
    ShortErrorParser,
    argparse_type,
    printable_stdout,
    shown,
    unrecognized,
    whole_number,
)
from inference.model_config import MODELS, get_model
from inference.simulator import Simulator, TaskResult
from inference.task import MAX_SIZE, STAGES, Task
from inference.variants import VARIANTS, build_stages, resolve_variant, variant_label

PROG = "python -m inference"
DEFAULT_PLACEMENT = "cpu,gpu,gpu"   # preprocessing on the host, the model on the accelerator


@dataclass(frozen=True)
class Outcome:
    """One variant's run: its label, recipe, stage classes and result."""

    label: str
    recipe: dict[str, str]
    classes: tuple[str, ...]
    result: TaskResult
    too_big: tuple[str, ...] = ()    # the stages that do not fit their device's memory
    envs_would: str = ""             # what the envs would do with such a placement instead


def memory_overflows(sim: Simulator, task: Task, placement: Sequence[str | int]) -> list[str]:
    """The stages (as 'decode on gpu needs 412 GB of its 141 GB') whose share of the task does
    not fit its device: the simulator prices them as if it did, where the envs fail them."""
    out = []
    weights = sim.model.weight_bytes
    for name, stage, shares in zip(STAGES, sim.stages, sim.shares(placement), strict=True):
        work = stage.work(task, sim.model)
        for dev, fraction in shares:
            need = work.memory_need(weights, fraction)
            device = sim.hardware.devices[dev]
            if need > device.memory:
                out.append(f"{name} on {device.name} needs {need / 1e9:,.0f} GB of its "
                           f"{device.memory / 1e9:,.0f} GB")
    return out


def model_name(text: str) -> str:
    """--model's argparse type: the name of a known model. (`choices` echoed a refused value
    whole: a 10000-character --model filled the terminal.)"""
    try:
        get_model(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def size(text: str) -> int:
    """--batch's and the token counts' argparse type: a whole number of at most MAX_SIZE, the
    scenarios' and traces' cap on a size (--batch 1e300 printed "latency inf s", "queue nan
    ns"). One below 1 is left to Task, whose refusal names the field."""
    value = argparse_type(whole_number)(text)
    if value > MAX_SIZE:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SIZE:,.0f} (the scenarios' and "
                                         f"traces' cap on a size), got {shown(text)}")
    return value


size.__name__ = "int"


def build_parser() -> argparse.ArgumentParser:
    parser = ShortErrorParser(
        prog=PROG, description="Simulate one task under each variant and compare the latencies.",
    )
    task = parser.add_argument_group("the task")
    task.add_argument("--batch", type=size, default=16, metavar="N",
                      help="sequences in the batch (default: %(default)s)")
    task.add_argument("--prompt-tokens", type=size, default=5000, metavar="N",
                      help="prompt tokens per sequence (default: %(default)s)")
    task.add_argument("--output-tokens", type=size, default=256, metavar="N",
                      help="generated tokens per sequence (default: %(default)s)")
    task.add_argument("--domain", type=argparse_type(whole_number), default=0, metavar="D",
                      help="data domain, what the loading cache keys on (default: %(default)s)")
    where = parser.add_argument_group("where and how it runs")
    where.add_argument("--hardware", default="server", metavar="PRESET|PATH",
                       help=f"hardware preset ({', '.join(preset_names())}) or YAML profile "
                            "(default: %(default)s)")
    where.add_argument("--placement", default=DEFAULT_PLACEMENT, metavar="DEV,DEV,DEV",
                       help="device name or id for load, prefill, decode (default: %(default)s)")
    where.add_argument("--variants", default=",".join(VARIANTS), metavar="V[,V...]",
                       help="comma-separated recipe names or load+prefill+decode mixes, e.g. "
                            "adaptive+window+prefetched (default: all three recipes)")
    where.add_argument("--model", default="glm-9b", type=model_name, metavar="NAME",
                       help=f"model shape the cost model prices: {', '.join(MODELS)} "
                            "(default: %(default)s)")
    cache = where.add_mutually_exclusive_group()
    cache.add_argument("--cache-hit", dest="cache", action="store_const", const=True,
                       help="force the loading cache to hold the task's domain")
    cache.add_argument("--cache-miss", dest="cache", action="store_const", const=False,
                       help="force a loading-cache miss (default: the cache as a fresh "
                            "simulator has it)")
    return parser


def parse_placement(text: str) -> tuple[str | int, ...]:
    """'cpu,gpu,gpu' or '0,1,1' -> one device name or id per stage."""
    devices = tuple(_device(d.strip()) for d in text.split(","))
    if len(devices) != len(STAGES):
        raise ValueError(f"--placement needs one device per stage ({','.join(STAGES)}), "
                         f"got {len(devices)}: {shown(text)}")
    return devices


def _device(text: str) -> str | int:
    # isdecimal, not isdigit: '²' is a digit that int() refuses (a bare "invalid literal");
    # past int()'s 4300-digit limit the id stays text, an unknown device name to the simulator
    try:
        return int(text) if text.isdecimal() else text
    except ValueError:
        return text


def parse_variants(text: str) -> list[dict[str, str]]:
    """'glm-5.3,cached+window+sequential' -> checked recipes, each once."""
    recipes = []
    for spec in (s.strip() for s in text.split(",")):
        recipe = resolve_variant(spec)      # a name or a load+prefill+decode mix
        if recipe not in recipes:   # a repeat (or a recipe spelt out) was an identical column
            recipes.append(recipe)
    return recipes


def envs_would(sim: Simulator, task: Task) -> str:
    """What the envs do with a stage that does not fit its device: they refuse hardware on
    which no device holds the model's weights; otherwise they move the stage to a device that
    holds it, at the failed-dispatch cost, and run a stage that no device holds on the one
    with the most memory, priced as if it fit (`InferenceAllocEnv._fitting_masks`)."""
    model = sim.model
    largest = sim.hardware.most_memory
    if model.weight_bytes > largest.memory:
        return (f"the envs refuse hardware {sim.hardware.name} for model {model.name}: no device "
                f"holds its weights")
    nowhere = [name for name, stage in zip(STAGES, sim.stages, strict=True)
               if stage.work(task, model).memory_need(model.weight_bytes) > largest.memory]
    if nowhere:
        return (f"no device holds {', '.join(nowhere)}: the envs would run such a stage on "
                f"{largest.name}, the device with the most memory, at the failed-dispatch cost "
                f"if placed elsewhere")
    return "the envs would move it to a device that holds it, at the failed-dispatch cost"


def compare(args: argparse.Namespace) -> list[Outcome]:
    """Run the task once per variant, each on a fresh simulator."""
    task = Task(args.batch, args.prompt_tokens, args.output_tokens, args.domain)
    hardware, model = load_hardware(args.hardware), get_model(args.model)
    placement = parse_placement(args.placement)
    absent = [d for d in placement if isinstance(d, str) and d not in hardware.index]
    if args.placement == DEFAULT_PLACEMENT and absent:
        # "unknown device 'gpu'" alone left a user who gave no --placement to guess its source
        raise ValueError(f"the default --placement {DEFAULT_PLACEMENT} names device "
                         f"{shown(absent[0])}, which hardware {shown(hardware.name)} lacks "
                         f"(devices: {', '.join(hardware.device_names)}); give --placement "
                         f"with its devices")
    built = [(recipe, build_stages(recipe, model)) for recipe in parse_variants(args.variants)]
    if args.cache is not None and all(stages[0].cache_kind is None for _, stages in built):
        # forced on no variant, the flag changed nothing and the title still said it was set
        flag = "--cache-hit" if args.cache else "--cache-miss"
        raise ValueError(f"{flag}: no variant of --variants {shown(args.variants, quote=False)} has a loading cache "
                         f"(a cached or adaptive load has one, as glm-5.3-flash's does); "
                         f"add such a variant to --variants or drop {flag}")
    outcomes = []
    for recipe, stages in built:
        sim = Simulator(hardware, model, stages)
        if args.cache is not None and stages[0].cache_kind is not None:
            if args.cache:
                sim.state.cache_entries.add(task.domain)
            else:
                sim.state.cache_entries.discard(task.domain)
        too_big = tuple(memory_overflows(sim, task, placement))
        result = sim.execute(task, placement)
        classes = tuple(type(s).__name__ for s in stages)
        outcomes.append(Outcome(variant_label(recipe), recipe, classes, result, too_big,
                                envs_would(sim, task) if too_big else ""))
    return outcomes


def fmt_time(seconds: float) -> str:
    if seconds == 0:
        return "0"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3f} {unit}"
    return f"{seconds / 1e-9:.3f} ns"


def table_rows(outcomes: Sequence[Outcome]) -> list[tuple[str, list[str]]]:
    """(metric, one cell per variant) rows of the comparison."""
    first = outcomes[0].result.latency

    def share(r: TaskResult) -> str:
        processing = r.load + r.compute + r.memory_stall
        return f"{100 * r.attention / processing:.1f}%" if processing else "-"

    def hit(r: TaskResult) -> str:
        return "n/a" if r.cache_hit is None else ("hit" if r.cache_hit else "miss")

    metrics: list[tuple[str, Callable[[TaskResult], str]]] = [
        ("latency", lambda r: fmt_time(r.latency)),
        *((f"  {part.replace('_', ' ')}", lambda r, p=part: fmt_time(r.breakdown()[p]))
          for part in ("overhead", "queue", "load", "transfer", "compute", "memory_stall")),
        ("attention", lambda r: fmt_time(r.attention)),
        ("attention share", share),
        ("KV wait", lambda r: fmt_time(r.kv_wait)),
        ("cache", hit),
        (f"vs {outcomes[0].label}", lambda r: f"{r.latency / first:.2f}x"),
    ]
    return [(name, [cell(o.result) for o in outcomes]) for name, cell in metrics]


def plain_table(rows: Sequence[tuple[str, list[str]]], labels: Sequence[str]) -> str:
    """The rows as right-aligned plain-text columns under the variant labels."""
    lines = [("", list(labels)), *rows]
    widths = [max(len(line[0]) for line in lines)]
    widths += [max(len(line[1][i]) for line in lines) for i in range(len(labels))]
    return "\n".join(
        "  ".join([name.ljust(widths[0]), *(c.rjust(w) for c, w in zip(cells, widths[1:],
                                                                         strict=True))])
        for name, cells in lines
    )


def render(outcomes: Sequence[Outcome], title: str) -> None:
    """Print the title, the table (rich when available, else plain text), the recipe lines."""
    rows = table_rows(outcomes)
    print(title)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(plain_table(rows, [o.label for o in outcomes]))
    else:
        console = Console()
        if not console.is_terminal:   # piped: do not squeeze the table into 80 columns
            console = Console(width=max(console.width, 100))
        table = Table()
        table.add_column("")
        for o in outcomes:
            table.add_column(o.label, justify="right")
        for name, cells in rows:
            table.add_row(name, *cells, end_section=name in ("  memory stall", "KV wait"))
        console.print(table)
    for o in outcomes:
        uses = ", ".join(f"{stage}={o.recipe[stage]} ({cls})"
                         for stage, cls in zip(STAGES, o.classes, strict=True))
        print(f"{o.label}: {uses}")
    for o in outcomes:
        if o.too_big:
            print(f"note: {o.label}: {'; '.join(o.too_big)}: priced as if it fit ({o.envs_would})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:   # parse_args's own refusal echoed them whole
        parser.error(unrecognized(extras))
    try:
        outcomes = compare(args)
    except (ValueError, OSError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    cache = {None: "as a fresh simulator has it", True: "forced hit (variants that have one)",
             False: "forced miss (variants that have one)"}
    title = (f"task: batch {args.batch}, {args.prompt_tokens} prompt + {args.output_tokens} "
             f"output tokens, domain {args.domain} | model {args.model} | hardware "
             f"{args.hardware} | placement {args.placement} | cache {cache[args.cache]}")
    try:
        with printable_stdout():   # a path in the title the console cannot show is escaped
            render(outcomes, title)
    except BrokenPipeError:   # e.g. piped into `head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
