"""What ``evaluate.py`` does: find the models, evaluate them and the baselines, write results/.

Outputs (each written via temp file + rename, so a failure leaves no half-written file):

* ``summary.csv`` / ``summary.md``: per agent and scenario, mean / p50 / p95 / p99 latency,
  ratio to best static and gap to the oracle, each with a 95% t-interval over held-out
  seeds (see ``agents.evaluation`` for the definitions); summary.csv's last columns,
  ``hardware`` and ``variant``, name each row's setting apart from its section's label;
* ``latency_cdf.png``: per-task latency CDF per agent (a panel per scenario);
* ``learning_curves.png``: ``latency/vs_static`` (training stream) and ``eval/vs_best_static``
  (held-out episode) against the step of every run (TensorBoard);
* ``stabilization.png`` / ``stabilization.md``: the online study (``agents.online.deploy``).

Run again into the same folder, an evaluation replaces the outputs it writes. One it has
nothing for (``learning_curves.png`` without run folders of TensorBoard events) is removed,
as it would stand beside the new summary as if of the same runs; those of a study it skips
(``stabilization.*`` with ``--no-online``, the summary's four with ``--online``) are kept,
being that study's, and a line names them as from an earlier evaluation.

What it evaluates lies in two modules of its own: ``agents.model_discovery`` finds the models
(`discover_models`), and ``agents.eval_settings`` names the settings they are evaluated in
(`contexts_of`, the summary's sections) and checks every input before anything runs
(`check_inputs`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from agents.config import MIN_ONLINE_SEEDS, ConfigError, EvalConfig
from agents.eval_settings import (
    Context,
    check_inputs,
    contexts_of,
    env_in,
    in_context,
    model_env,
    runnable_baselines,
    scenarios_of,
    section_of,
    setting_names,
)
from agents.evaluation import (
    REFERENCES,
    AgentResult,
    check_online_agents,
    episode_latencies,
    episode_metrics,
    make_env,
    online_markdown,
    online_study,
    overload_note,
    summary_csv,
    summary_markdown,
)
from agents.files import check_room, temp_file, write_text
from agents.locks import FolderBusy, holding
from agents.model_discovery import DEFAULT_ENV, SPLIT_ENV, ModelEntry, discover_models
from agents.registry import load_policy, make_policy, policy_env_id

DEFAULT_ONLINE = ("ppo", "ppo-warm", "best-static", "oracle")
FULL_ONLINE = ("ppo", "ppo-warm", "dqn", "dqn-warm", "best-static", "heft-calibrated", "oracle")
SUMMARY_OUTPUTS = ("summary.csv", "summary.md", "latency_cdf.png", "learning_curves.png")
ONLINE_OUTPUTS = ("stabilization.png", "stabilization.md")


def heldout_seeds(cfg: EvalConfig, n: int | None = None) -> list[int]:
    return [cfg.seed_base + i for i in range(n if n is not None else cfg.seed_count())]


def evaluate_agents(cfg: EvalConfig, entries: list[ModelEntry], scenarios: list[str],
                    tick: Callable[[], None] = lambda: None) -> list[AgentResult]:
    """Every model and baseline on every scenario and held-out seed (models first); a model
    trained on other hardware or another variant gets a section of its own, with the
    baselines run on that hardware and variant beside it."""
    seeds = heldout_seeds(cfg)
    results: dict[tuple[str, str], AgentResult] = {}
    contexts = contexts_of(cfg, entries, scenarios)
    for ctx in contexts:
        section = section_of(ctx, contexts)
        hardware, variant = setting_names(ctx, contexts)
        env = env_in(ctx, DEFAULT_ENV, cfg)
        static, oracle = make_policy("best-static", env), make_policy("oracle", env)
        refs = {s: (episode_latencies(static, env, s, cfg.episodes),
                    episode_latencies(oracle, env, s, cfg.episodes)) for s in seeds}
        # judged on one whole episode (consecutive episodes restart the queues): the first
        # seed's, which is its whole reference run where that is one episode
        first = refs[seeds[0]][0] if cfg.episodes == 1 else episode_latencies(static, env,
                                                                                seeds[0])
        note = overload_note(first)
        for entry in (e for e in entries if in_context(cfg, e, ctx)):
            env = model_env(cfg, entry, ctx.scenario)
            policy = load_policy(entry.path, env)
            # a model named as a baseline (a saved policy zip all-cpu.zip or oracle.zip) shared
            # the baseline's row: its samples and the baseline's pooled, n doubled, CI narrowed
            label = f"{entry.label} (model)" if entry.label in cfg.baselines else entry.label
            result = results.setdefault((label, section),
                                        AgentResult(label, section, "model", runs=0))
            result.runs += 1
            for seed in seeds:
                latency = episode_latencies(policy, env, seed, cfg.episodes)
                result.samples.append(episode_metrics(latency, *refs[seed]))
                result.sample_runs.append(result.runs - 1)
                result.latencies.append(latency)
                tick()
        for name in runnable_baselines(cfg, ctx):
            env = env_in(ctx, policy_env_id(name), cfg)
            result = results.setdefault((name, section), AgentResult(name, section, "baseline"))
            policy = None if name in REFERENCES else make_policy(name, env)
            for seed in seeds:
                if policy is None:
                    latency = refs[seed][REFERENCES.index(name)]
                else:
                    latency = episode_latencies(policy, env, seed, cfg.episodes)
                result.samples.append(episode_metrics(latency, *refs[seed]))
                result.latencies.append(latency)
                tick()
        for result in results.values():
            if result.scenario == section:
                result.note = note
                result.hardware, result.variant = hardware, variant
    return list(results.values())


def work_units(cfg: EvalConfig, entries: list[ModelEntry], scenarios: list[str]) -> int:
    """Progress-bar items of the evaluation: one per agent x context x held-out seed."""
    return cfg.seed_count() * sum(len([e for e in entries if in_context(cfg, e, ctx)])
                           + len(runnable_baselines(cfg, ctx))
                           for ctx in contexts_of(cfg, entries, scenarios))


def run(cfg: EvalConfig, report: Callable[[str], None] = print) -> list[Path]:
    """The whole evaluation; returns the files written under ``cfg.out``."""
    from tqdm.auto import tqdm

    out = Path(cfg.out)
    online_n = cfg.online_seed_count()
    cfg, entries, scenarios, online_agents, notes = _checked_plan(cfg, online_n)
    for note in notes:
        report(note)
    written: list[Path] = []
    total = (0 if cfg.online else work_units(cfg, entries, scenarios)) \
        + len(online_agents) * online_n
    skipped, why = _skipped_outputs(cfg, bool(online_agents))
    ours = tuple(name for name in (*SUMMARY_OUTPUTS, *ONLINE_OUTPUTS) if name not in skipped)
    with _writing(out, ours), _earlier_named(out, ours, written, report), \
            tqdm(total=total, desc="evaluate", unit="item", disable=not cfg.progress_bar) as bar:

        def wrote(path: Path) -> None:
            # said as it is written: an evaluation stopped part way has named what it replaced
            written.append(path)
            bar.clear()
            report(f"wrote {path}")

        def said(text: str) -> None:
            bar.clear()
            report(text)

        def tick() -> None:
            bar.update(1)

        if not cfg.online:
            _write_summary(cfg, entries, scenarios, out, wrote, said, tick)
        if online_agents:
            _write_online_study(cfg, online_agents, scenarios[0], online_n, out, wrote, tick)
    kept = [name for name in skipped if (out / name).is_file()]
    if kept:
        report(f"kept {', '.join(kept)} in {out} from an earlier evaluation ({why})")
    return written


def _checked_plan(cfg: EvalConfig, online_n: int
                  ) -> tuple[EvalConfig, list[ModelEntry], list[str], tuple[str, ...], list[str]]:
    """What `run` evaluates, every input checked before anything runs: its config (with
    heft-split among the baselines of a Split model), the models, the scenarios, the online
    study's agents and the notes to say first. A bad input is a ConfigError."""
    from agents.event_scalars import check_events

    entries: list[ModelEntry] = []
    notes: list[str] = []
    if cfg.online:
        scenarios = scenarios_of(cfg, [])
        online_agents = tuple(cfg.online_agents or FULL_ONLINE)
    else:
        entries, notes = discover_models(cfg)
        scenarios = scenarios_of(cfg, entries)
        online_agents = () if cfg.no_online else tuple(cfg.online_agents or DEFAULT_ONLINE)
    if any(e.env_id == SPLIT_ENV for e in entries) and cfg.baselines == EvalConfig().baselines:
        # the baseline a Split model has to beat (README); asked-for baselines are kept as given
        cfg = dataclasses.replace(cfg, baselines=[*cfg.baselines, "heft-split"])
    notes += check_inputs(cfg, entries, scenarios)  # a bad input's error comes alone, before notes
    for _, run_dir in curve_runs(entries):      # read once the summary is written
        try:
            check_events(run_dir)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if cfg.online and not cfg.online_seeds and cfg.seeds is not None and cfg.seeds < online_n:
        # said on screen, where it ran 5 seeds for --seeds 1 without a word
        notes.append(f"the online study runs at least {MIN_ONLINE_SEEDS} seeds: {online_n} in "
                     f"place of --seeds {cfg.seeds} (--online-seeds N runs N)")
    if online_agents:       # yours, before the evaluation that comes first
        try:
            check_online_agents(online_agents, make_env(
                scenario=scenarios[0], hardware=cfg.hardware, episode_tasks=cfg.online_samples,
                reward=cfg.online_reward, price_static=True))   # the study's, which then skips it
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return cfg, entries, scenarios, online_agents, notes


def _write_summary(cfg: EvalConfig, entries: list[ModelEntry], scenarios: list[str], out: Path,
                   wrote: Callable[[Path], None], said: Callable[[str], None],
                   tick: Callable[[], None]) -> None:
    """Every model and baseline evaluated: the table said, summary.csv and .md, the latency
    CDFs and the runs' learning curves written (each said by `wrote`)."""
    from agents import plots

    results = evaluate_agents(cfg, entries, scenarios, tick=tick)
    rows = [r.row() for r in results]
    said(fmt_summary(rows))
    overloaded = {r.scenario: r.note for r in results if r.note}
    for section, note in overloaded.items():
        said(f"{section}: {note}")
    wrote(write_text(out / "summary.csv", summary_csv(rows)))
    wrote(write_text(out / "summary.md", summary_markdown(
        rows, heldout_seeds(cfg), cfg.episodes, overloaded)))
    sections = dict.fromkeys(r.scenario for r in results)   # a panel per section
    cdf = {s: {r.agent: np.concatenate(r.latencies) for r in results if r.scenario == s}
           for s in sections}
    wrote(plots.latency_cdf(cdf, out / "latency_cdf.png"))
    runs = curve_runs(entries)
    if runs:
        wrote(plots.learning_curves(runs, out / "learning_curves.png"))
        return
    stale = out / "learning_curves.png"
    removed = stale.is_file()
    stale.unlink(missing_ok=True)   # another evaluation's runs, beside this summary
    said("no run folders with TensorBoard events: no learning_curves.png"
         + (f" (removed the one of an earlier evaluation from {out})" if removed else ""))


def _write_online_study(cfg: EvalConfig, online_agents: tuple[str, ...], scenario: str,
                        online_n: int, out: Path, wrote: Callable[[Path], None],
                        tick: Callable[[], None]) -> None:
    """The online study of `online_agents` on `scenario`: stabilization.png and .md."""
    from agents import plots

    seeds = heldout_seeds(cfg, online_n)
    study = online_study(online_agents, seeds, cfg.online_samples, scenario, cfg.hardware,
                         tick=tick, reward=cfg.online_reward, checked=True, jobs=cfg.jobs)
    # named as the summary's sections are: with the hardware where --hardware gives one
    setting = section_of(Context(scenario, cfg.hardware, None))
    title = (f"online deployment from sample 0: {setting}, mean and 95% band "
             f"over {len(seeds)} seed(s)")
    wrote(plots.stabilization(study.curves, out / "stabilization.png", title=title))
    wrote(write_text(out / "stabilization.md", online_markdown(
        study, seeds, cfg.online_samples, setting, cfg.online_reward)))


# the lock of each set of files an evaluation writes in --out (agents.locks): the summary's
# and the online study's are taken apart, as `evaluate.py --online` writes the second alone
OUTPUT_LOCKS = {"summary": SUMMARY_OUTPUTS, "stabilization": ONLINE_OUTPUTS,
                "article": ("article.md",)}


@contextlib.contextmanager
def _writing(out: Path, names: tuple[str, ...]) -> Iterator[None]:
    """The locks of `out` for the files of `names`: another evaluation writing any of them
    there is refused at once (a ConfigError naming it), before this one computes anything,
    as is an `out` whose path leaves no room for theirs (their temp files' names are longer
    than the locks')."""
    check_room(out, [temp_file(Path(name)) for name in names], "--out")
    with contextlib.ExitStack() as stack:
        for lock, files in OUTPUT_LOCKS.items():
            mine = [name for name in files if name in names]
            if not mine:
                continue
            try:
                stack.enter_context(holding(out, lock, f"{out} is being written by another "
                                            f"evaluation ({', '.join(files)})", option="--out"))
            except FolderBusy as exc:
                raise ConfigError(f"{exc}: wait for it to end, or give another --out") from None
        yield


@contextlib.contextmanager
def _earlier_named(out: Path, names: tuple[str, ...], written: list[Path],
                   report: Callable[[str], None]) -> Iterator[None]:
    """An evaluation that stops (Ctrl-C, a full disk) names the files of `names` in `out` that it
    did not replace (`written` holds those it did): they stand beside its new ones."""
    try:
        yield
    except BaseException:
        earlier = [name for name in names if (out / name).is_file() and out / name not in written]
        if earlier:
            report(f"{', '.join(earlier)} in {out} are from an earlier evaluation: this one "
                   f"stopped before replacing them")
        raise


def _skipped_outputs(cfg: EvalConfig, online: bool) -> tuple[tuple[str, ...], str]:
    """The outputs of the study this evaluation skips, and why it skips it."""
    if cfg.online:
        return SUMMARY_OUTPUTS, "--online runs the online study alone"
    if not online:
        return ONLINE_OUTPUTS, "--no-online skips the online study"
    return (), ""


def curve_runs(entries: list[ModelEntry]) -> list[tuple[str, Path]]:
    """(label, run folder) of each run folder's learning curve: one per folder, as a run's
    checkpoints share its events, named after the run. The label of whichever entry of the
    folder came last named the whole run's curve: "ppo@128 s0" where the final model.zip and
    a checkpoint (or "ppo@best s0", its best_model.zip) were both evaluated, and "ppo sNone"
    for a folder without a run config."""
    runs: dict[Path, tuple[str, Path]] = {}
    for e in entries:
        if e.run_dir is not None and e.run_dir not in runs:
            label = re.sub(r"@(?:\d+|best)", "", e.label, count=1)   # model_discovery._entry's model
            runs[e.run_dir] = (label if e.seed is None else f"{label} s{e.seed}", e.run_dir)
    return list(runs.values())


def reproduce_article(cfg: EvalConfig, report: Callable[[str], None] = print) -> list[Path]:
    """``agents.article.reproduce`` on the held-out seeds, a progress bar ticking per seed
    (imported only when asked: the article job is the one user of its module); the file it
    wrote, said as `run` says its files."""
    from tqdm.auto import tqdm

    from agents.article import ARTICLE_FILE, reproduce

    seeds = heldout_seeds(cfg)
    clients = {} if cfg.article_clients is None else {"clients": cfg.article_clients}
    written = Path(cfg.out) / ARTICLE_FILE
    with _writing(Path(cfg.out), (ARTICLE_FILE,)), \
            tqdm(total=len(seeds), desc="article", unit="seed", disable=not cfg.progress_bar,
                 leave=False) as bar:
        reproduce(Path(cfg.out), seeds, tick=lambda: bar.update(1), jobs=cfg.jobs, **clients)
    report(f"wrote {written}")
    return [written]


def fmt_summary(rows: list[dict[str, Any]]) -> str:
    """A short console table: agent, scenario, mean latency and ratio to best static."""
    # columns as wide as their longest entry: section labels such as
    # "article (variant glm-5.3)" and run names outgrow any fixed width
    s = max([len("scenario")] + [len(str(r["scenario"])) for r in rows])
    a = max([len("agent")] + [len(str(r["agent"])) for r in rows])
    lines = [f"{'scenario':<{s}s} {'agent':<{a}s} {'mean (s)':>9s} {'vs static':>9s}"]
    for r in rows:
        lines.append(f"{r['scenario']:<{s}s} {r['agent']:<{a}s} {r['mean_latency_s']:>9.2f} "
                     f"{r['vs_best_static']:>9.3f}")
    return "\n".join(lines)
