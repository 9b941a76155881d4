"""The benchmark's ``ctxfold`` commands: ``demo``, ``bench``, ``replay``, ``policies``
and ``sweep``.

They register on the library's command line through the ``ctxfold.commands``
entry point (:func:`register`), so ``ctxfold`` without this package installed
still runs its own commands.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

import solvers
from context_manager.cli import Command, console, fail
from context_manager.messages import MessageFormatError, ToolResultBlock, ToolUseBlock

from . import benchmark, loaders, registry, solver_replay
from .benchmark import _transcript

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add this package's commands to ``app`` (the ``ctxfold`` entry-point hook)."""
    for command in (demo, policies, replay, bench, sweep):
        app.command(cls=Command)(command)


def sweep(
    method: Annotated[
        list[str] | None,
        typer.Option(
            "--method",
            "-m",
            help="Solver (repeatable; see `ctxfold solvers`).",
            show_default="every solver but the small-problem oracles",
        ),
    ] = None,
) -> None:
    """Replay the standard budget sweep (64k, 100k, 180k, 300k, 100k) for each solver.

    Tables: tokens and utilisation after each wall; then cache hit rate, billed
    input (millions of base-price tokens), churn (millions of tokens re-read beyond
    the appended ones) and calls over the wall.
    """
    from rich.progress import Progress, TaskID

    unknown = [m for m in method or [] if m not in solvers.names()]
    if unknown:
        fail(
            f"unknown solver{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"registered solvers: {', '.join(solvers.names())}"
        )
    methods = method or [m for m in solvers.names() if not solvers.capabilities(m).oracle]
    walls = Table(title="budget sweep (220 messages): tokens and utilisation after each wall")
    walls.add_column("solver", no_wrap=True)
    for budget in solver_replay.SWEEP_BUDGETS:
        walls.add_column(f"{budget // 1000}k", justify="right")
    cache = Table(title="budget sweep: cache and churn over the whole run")
    cache.add_column("solver", no_wrap=True)
    for col in ("hit rate", "billed", "churn", "over wall"):
        cache.add_column(col, justify="right")
    with Progress(console=console, transient=True) as progress:
        for name in methods:
            task = progress.add_task(name, total=None)

            def advance(done: int, total: int, task: TaskID = task) -> None:
                progress.update(task, completed=done, total=total)

            options = dict(solvers.capabilities(name).example_options) or None
            try:
                out = solver_replay.sweep(method=name, options=options, progress=advance)
            except solvers.SolverConfigError as exc:
                progress.stop()
                fail(str(exc))
            s = out["summary"]
            walls.add_row(
                name,
                *[f"{p['tokens'] / 1000:.1f}k {p['utilisation']:.0%}" for p in out["phases"]],
            )
            cache.add_row(
                name,
                f"{s['hit_rate']:.1%}",
                f"{s['billed'] / 1e6:.2f}M",
                f"{s['total_perturbation'] / 1e6:.2f}M",
                str(s["over_budget_steps"]),
            )
    console.print(walls)
    console.print(cache)


# ------------------------------------------------------------------ benchmark

DEMO_BUDGETS = (4_000, 8_000, 16_000)


def _summary_table(report: Any, title: str) -> Table:
    table = Table(title=title)
    columns = (
        "policy",
        "budget",
        "mean tok",
        "peak",
        "over",
        "invalid",
        "cache reuse",
        "billed (k)",
        "+ summaries (k)",
        "summary tok",
        "cpu p95 ms",
        "retained",
    )
    for col in columns:
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for s in report.summaries():
        retained = "-" if s.retention is None else f"{s.facts_retained}/{s.facts_total}"
        bad = "[red]" if s.invalid else ""
        table.add_row(
            s.policy,
            f"{s.budget:,}",
            f"{s.tokens_mean:,.0f}",
            f"{s.tokens_peak:,}",
            f"{bad}{s.over_budget}",
            f"{bad}{s.invalid}",
            f"{s.cache_reuse:.0%}",
            f"{s.billed / 1000:,.1f}",
            f"{s.billed_with_summaries / 1000:,.1f}",
            f"{s.summarizer_tokens:,}",
            f"{s.cpu_p95_ms:.1f}",
            retained,
        )
    return table


def _run_benchmark(
    transcripts: list[Any], policies: list[str], budgets: list[int], workers: int, out: Path
) -> Any:
    from rich.progress import Progress

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create {out}: {exc.strerror or exc}")
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("replaying", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        try:
            report = benchmark.run(
                transcripts, policies, budgets, workers=workers, progress=advance
            )
        except (KeyError, ValueError, ModuleNotFoundError) as exc:
            fail(f"{exc.args[0] if exc.args else exc}")
    console.print(_summary_table(report, "every policy at every budget (lower billed is cheaper)"))
    for v in report.verdicts():
        colour = {True: "green", False: "yellow", None: "dim"}[v.meets_bar]
        detail = "; ".join(v.failures) or ", ".join(
            f"{p} bills {r:.2f}x ours" for p, r in v.ratios.items()
        )
        detail = detail or "no front rewriter ran"
        console.print(
            f"{v.policy} at {v.budget:,}: [{colour}]bar {v.outcome}[/{colour}] ({detail})"
        )
    markdown = out / "report.md"
    markdown.write_text(report.to_markdown(), encoding="utf-8")
    (out / "records.json").write_text(report.to_json(), encoding="utf-8")
    plot = report.plot(out / "tokens-and-cost.png")
    console.print(
        f"{len(report.records):,} requests in {report.wall_seconds:.0f} s; "
        f"report: {markdown}; plot: {plot}"
    )
    return report


def _workers(workers: int | None) -> int:
    import os

    return workers if workers is not None else max(1, min(4, os.cpu_count() or 1))


BENCH_BUDGETS = (8_000, 32_000, 128_000)


def _budget_option(default: Sequence[int]) -> Any:
    return typer.Option(
        "--budget",
        "-b",
        min=1,
        help="Input token budget (repeatable).",
        show_default=", ".join(f"{b:,}" for b in default),
    )


BudgetOption = Annotated[list[int] | None, _budget_option(DEMO_BUDGETS)]
BenchBudgetOption = Annotated[list[int] | None, _budget_option(BENCH_BUDGETS)]
PolicyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--policy",
        "-p",
        help="Policy name (repeatable; see `ctxfold policies`).",
        show_default="every installed policy but the slow ours:exact",
    ),
]
OutOption = Annotated[Path, typer.Option(help="Folder for the report, records and plot.")]
WorkersOption = Annotated[
    int | None,
    typer.Option(min=1, help="Worker processes.", show_default="the CPU count, at most 4"),
]


def demo(
    budget: BudgetOption = None,
    policy: PolicyOption = None,
    out: OutOption = Path("out/demo"),
    workers: WorkersOption = None,
    data: Annotated[
        Path | None,
        typer.Option(help="Folder of SWE-agent .traj files.", show_default="the bundled runs"),
    ] = None,
) -> None:
    """Replay the bundled real transcripts through every policy at three budgets.

    Offline and deterministic: the same extractive summariser for every policy
    that summarises. Prints the comparison, writes ``report.md``,
    ``records.json`` and ``tokens-and-cost.png`` under ``--out``.
    """

    try:
        transcripts = benchmark.default_transcripts(data)
    except (FileNotFoundError, MessageFormatError) as exc:
        fail(f"{exc}")
    console.rule("[bold]ctxfold demo: context policies on real agent transcripts")
    console.print(
        ", ".join(f"{t.name} ({len(t.messages)} messages)" for t in transcripts)
        + ". At every model call each policy says what it would send; one exact counter "
        "audits it and a prompt cache prices it."
    )
    _run_benchmark(
        transcripts,
        policy or benchmark.policy_names(),
        budget or list(DEMO_BUDGETS),
        _workers(workers),
        out,
    )


def policies() -> None:
    """List the policy names the benchmark accepts, each with what it is."""
    default = set(benchmark.policy_names())
    for name in benchmark.policy_names(peers=True, exact=True):
        note = ""
        if name not in default and name.startswith("ours:"):
            note = "slow: proves optimality with CP-SAT; runs only when named with -p"
        elif name not in default:
            lacking = ", ".join(registry.missing_packages(name))
            note = f"needs the bench extra ({lacking} missing): {registry.BENCH_EXTRA}"
        console.print(f"[bold]{escape(name)}[/bold]", highlight=False)
        console.print(f"    {escape(registry.describe(name))}", highlight=False)
        if note:
            console.print(f"    [dim]{escape(note)}[/dim]", highlight=False)


class TranscriptFormat(StrEnum):
    """The formats ``ctxfold replay --format`` accepts."""

    auto = "auto"
    anthropic = "anthropic"
    openai = "openai"
    swe_agent = "swe-agent"


def _without_path(message: str, path: Path) -> str:
    return message.removeprefix(f"{path}: ")


def _load_transcript(path: Path, fmt: str) -> Any:

    if not path.is_file():
        fail(f"{path} is not a file")
    how = "given with --format"
    if fmt == "auto":
        try:
            fmt, why = loaders.detect_format(path)
        except loaders.TranscriptError as exc:
            fail(f"cannot read {path}: {_without_path(str(exc), path)}")
        how = f"detected: {why}"
    try:
        _, messages = loaders.load_transcript_file(path, fmt)
    except (ValueError, KeyError, OSError, TypeError) as exc:  # TranscriptError included
        fail(f"cannot read {path} as {fmt}: {_without_path(str(exc), path)}")
    transcript = _transcript(path.stem, messages, {"source": str(path), "format": fmt})
    blocks = [b for m in messages for b in m.content]
    uses = sum(isinstance(b, ToolUseBlock) for b in blocks)
    results = sum(isinstance(b, ToolResultBlock) for b in blocks)
    console.print(
        f"{path}: {fmt} ({how}); {len(messages):,} messages, {uses:,} tool calls, "
        f"{results:,} tool results, {len(transcript.call_points):,} calls to the agent",
        highlight=False,
    )
    if not transcript.call_points:
        fail(f"{path} has no point where the agent is called")
    return transcript


def replay(
    path: Annotated[Path, typer.Argument(help="A transcript: .traj, OpenAI or Anthropic JSON.")],
    budget: BudgetOption = None,
    policy: PolicyOption = None,
    fmt: Annotated[
        TranscriptFormat,
        typer.Option(
            "--format",
            help="The transcript's format; auto tells it by content (a top-level 'system' "
            "key or tool_use / tool_result blocks: Anthropic; a 'history' list: SWE-agent).",
        ),
    ] = TranscriptFormat.auto,
    out: OutOption = Path("out/replay"),
    workers: WorkersOption = None,
) -> None:
    """Replay one transcript through the chosen policies and budgets."""

    transcript = _load_transcript(path, fmt.value)
    _run_benchmark(
        [transcript],
        policy or benchmark.policy_names(),
        budget or list(DEMO_BUDGETS),
        _workers(workers),
        out,
    )


def bench(
    budget: BenchBudgetOption = None,
    policy: PolicyOption = None,
    out: OutOption = Path("out/bench"),
    workers: WorkersOption = None,
    scale: Annotated[
        list[int] | None,
        typer.Option(
            help="Synthetic conversation sizes in messages (repeatable).",
            show_default="1000, 5000",
        ),
    ] = None,
) -> None:
    """The full comparison, on every dataset available here.

    The bundled transcripts, long synthetic conversations, and the BFCL memory and
    multi-turn sets and the longest chitchat conversations when their packages are
    installed.
    """

    try:
        transcripts = benchmark.default_transcripts()
        transcripts += [benchmark.synthetic_transcript(n, seed=n) for n in (scale or [1000, 5000])]
    except (FileNotFoundError, ValueError) as exc:  # MessageFormatError included
        fail(f"{exc}")
    optional: list[tuple[str, Callable[[], list[Any]]]] = [
        ("BFCL memory", loaders.load_bfcl_memory),
        ("BFCL multi-turn", lambda: loaders.load_bfcl_multi_turn("long_context", limit=5)),
        ("chitchat", lambda: loaders.load_chitchat(limit=3, longest=True)),
    ]
    for label, load in optional:
        try:
            transcripts += load()
        except loaders.TranscriptError as exc:
            console.print(f"[yellow]skipped {label}:[/yellow] {exc}")
    _run_benchmark(
        transcripts,
        policy or benchmark.policy_names(),
        budget or list(BENCH_BUDGETS),
        _workers(workers),
        out,
    )
