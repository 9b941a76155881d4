"""The benchmark's ``ctxfold`` commands: ``demo``, ``bench``, ``replay``, ``policies``
and ``sweep``.

They register on the library's command line through the ``ctxfold.commands``
entry point (:func:`register`), so ``ctxfold`` without this package installed
still runs its own commands.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

import solvers
from context_manager.cli import Command, console, fail
from context_manager.messages import MessageFormatError, ToolResultBlock, ToolUseBlock

from . import benchmark, executors, loaders, registry, solver_replay

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add this package's commands to ``app`` (the ``ctxfold`` entry-point hook)."""
    for command in (demo, policies, replay, bench, report, sweep):
        app.command(cls=Command)(command)


class ExecutorName(StrEnum):
    """The executors ``--executor`` accepts."""

    local = "local"
    dask = "dask"


ExecutorOption = Annotated[
    ExecutorName,
    typer.Option(
        "--executor",
        help="Where the replay jobs run: local processes, or a dask.distributed cluster "
        "(the one --scheduler names, else a local one started for the run; the dask "
        "extra). The records are the same either way.",
    ),
]
SchedulerOption = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        help="A running dask scheduler's address (tcp://host:8786), whose workers have "
        "this package installed; implies --executor dask.",
        show_default="a local cluster of --workers processes",
    ),
]


def _sweep_job(job: tuple[str, dict[str, Any] | None]) -> dict[str, Any]:
    name, options = job
    return solver_replay.sweep(method=name, options=options)


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
    workers: Annotated[
        int,
        typer.Option(min=1, help="Worker processes (local ones, or the local dask cluster's)."),
    ] = 1,
    executor: ExecutorOption = ExecutorName.local,
    scheduler: SchedulerOption = None,
) -> None:
    """Replay the standard budget sweep (64k, 100k, 180k, 300k, 100k) for each solver.

    Tables: tokens and utilisation after each wall; then cache hit rate, billed
    input (millions of base-price tokens), churn (millions of tokens re-read beyond
    the appended ones) and calls over the wall. With several workers or a dask
    cluster the solvers replay in parallel, one job each.
    """
    from rich.progress import Progress, TaskID

    unknown = [m for m in method or [] if m not in solvers.names()]
    if unknown:
        fail(
            f"unknown solver{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"registered solvers: {', '.join(solvers.names())}"
        )
    methods = method or [m for m in solvers.names() if not solvers.capabilities(m).oracle]
    jobs = [(m, dict(solvers.capabilities(m).example_options) or None) for m in methods]
    outs: list[dict[str, Any]] = []
    try:
        if executor == ExecutorName.local and scheduler is None and workers == 1:
            with Progress(console=console, transient=True) as progress:
                for name, options in jobs:  # here, with each solver's steps shown
                    task = progress.add_task(name, total=None)

                    def advance(done: int, total: int, task: TaskID = task) -> None:
                        progress.update(task, completed=done, total=total)

                    outs.append(solver_replay.sweep(method=name, options=options, progress=advance))
        else:
            with contextlib.closing(_executor(executor, workers, scheduler)) as running:
                console.print(f"{len(jobs)} solvers on {_where(running)}", highlight=False)
                with _ProgressLines("sweeping", len(jobs), load=running.load) as lines:
                    outs = running.map(_sweep_job, jobs, progress=lines)
    except solvers.SolverConfigError as exc:
        fail(str(exc))
    walls = Table(title="budget sweep (220 messages): tokens and utilisation after each wall")
    walls.add_column("solver", no_wrap=True)
    for budget in solver_replay.SWEEP_BUDGETS:
        walls.add_column(f"{budget // 1000}k", justify="right")
    cache = Table(title="budget sweep: cache and churn over the whole run")
    cache.add_column("solver", no_wrap=True)
    for col in ("hit rate", "billed", "churn", "over wall"):
        cache.add_column(col, justify="right")
    for name, out in zip(methods, outs, strict=True):
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
QUICK_BUDGETS = (4_000, 16_000)
DEMO_TAU_SESSIONS = 20
"""tau-bench sessions in the demo (``bench`` replays all 150)."""


PLOT_NAME = "bill-and-kept.png"
"""The plot ``demo``, ``replay`` and ``bench`` write beside ``report.md`` (bills under the
explicit provider model; ``bill-and-kept-automatic.png`` under the automatic one)."""
CALLS_PLOT_NAME = "per-call.png"
"""The per-call chart of the default policy against the cheapest valid peer."""
PROGRESS_EVERY = 15.0
"""Seconds between progress lines when the output is not a terminal."""


class _ProgressLines:
    """Progress for logs and pipes: a plain line whenever a run ends at least
    :data:`PROGRESS_EVERY` seconds after the last line, at the end, and, while a long
    run goes on, a line every :data:`PROGRESS_EVERY` seconds from a timer thread."""

    def __init__(
        self,
        label: str,
        total: int,
        every: float = PROGRESS_EVERY,
        *,
        load: Callable[[], dict[str, executors.WorkerLoad]] | None = None,
    ) -> None:
        self.label, self.total, self.every = label, total, every
        self._load = load
        self.done = 0
        self._quiet = 1  # the timer's wait, in multiples of every
        self.started = self.last = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def __enter__(self) -> _ProgressLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _line(self, now: float) -> None:
        self.last = now
        share = self.done / self.total if self.total else 1.0
        load = executors.describe_load(self._load()) if self._load else ""
        console.print(
            f"{self.label}: {self.done}/{self.total} runs ({share:.0%}), "
            f"{now - self.started:.0f} s" + (f"; {load}" if load else ""),
            highlight=False,
        )

    def beat(self, now: float) -> None:
        """The timer's check: a line when none was printed for :attr:`every` seconds,
        the wait doubling (up to 8x) while no run ends."""
        with self._lock:
            if now - self.last >= self.every * self._quiet:
                self._line(now)
                self._quiet = min(8, self._quiet * 2)

    def _beat(self) -> None:
        while not self._stop.wait(self.every / 3):
            self.beat(time.monotonic())

    def __call__(self, done: int, total: int) -> None:
        with self._lock:
            self.done, self.total, self._quiet = done, total, 1
            now = time.monotonic()
            if done == total or now - self.last >= self.every:
                self._line(now)


def _executor(name: ExecutorName, workers: int, scheduler: str | None) -> executors.Executor:
    """The executor the options name; fails with the reason when it cannot start."""
    chosen = ExecutorName.dask if scheduler else name
    try:
        return executors.make_executor(chosen.value, workers=workers, scheduler=scheduler)
    except (ValueError, executors.ExecutorError) as exc:
        fail(str(exc))


def _where(running: executors.Executor) -> str:
    """The executor's name, and its dashboard's address when it has one."""
    dashboard = getattr(running, "dashboard", "")
    return f"{running.name} (dashboard: {dashboard})" if dashboard else running.name


def _run_benchmark(
    transcripts: list[Any],
    policies: list[str],
    budgets: list[int],
    workers: int,
    out: Path,
    executor: ExecutorName = ExecutorName.local,
    scheduler: str | None = None,
) -> Any:
    from rich.progress import Progress

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create {out}: {exc.strerror or exc}")
    runs = len(transcripts) * len(dict.fromkeys(policies)) * len(dict.fromkeys(budgets))
    with contextlib.ExitStack() as stack:
        running = _executor(executor, workers, scheduler)
        stack.callback(running.close)
        console.print(
            f"{runs} runs ({len(transcripts)} transcripts x {len(set(policies))} policies x "
            f"{len(set(budgets))} budgets) on {_where(running)}",
            highlight=False,
        )
        advance: Callable[[int, int], None]
        if not console.is_terminal:
            advance = stack.enter_context(_ProgressLines("replaying", runs, load=running.load))
        else:
            progress = stack.enter_context(Progress(console=console, transient=True))
            task = progress.add_task("replaying", total=None)

            def bar(done: int, total: int) -> None:
                load = executors.describe_load(running.load())
                label = f"replaying; {load}" if load else "replaying"
                progress.update(task, completed=done, total=total, description=label)

            advance = bar
        try:
            report = benchmark.run(
                transcripts, policies, budgets, progress=advance, executor=running
            )
        except (KeyError, ValueError, ModuleNotFoundError) as exc:
            fail(f"{exc.args[0] if exc.args else exc}")
        lost = getattr(running, "lost_workers", 0)
        if lost:
            console.print(
                f"{lost} worker{'s' if lost > 1 else ''} left the cluster during the run; "
                "their jobs ran again on the others, each result taken once",
                highlight=False,
            )
    return _show(report, out)


def _show(report: Any, out: Path) -> Any:
    """Print the verdict and the tables; write the report, the records and the plot."""
    console.rule("verdict")
    for line in report.verdict_lines() or ["no cache-aware solver of ours ran: no verdict"]:
        colour = "dim" if line.startswith(" ") else "bold"
        console.print(f"[{colour}]{escape(line)}[/{colour}]", highlight=False)
    for table in report.rich_tables():
        console.print(table)
    markdown = out / "report.md"
    markdown.write_text(report.to_markdown(), encoding="utf-8")
    (out / "records.json").write_text(report.to_json(), encoding="utf-8")
    plot = report.plot(out / PLOT_NAME)
    report.plot(out / PLOT_NAME.replace(".png", "-automatic.png"), model="automatic")
    calls = report.plot_calls(out / CALLS_PLOT_NAME)
    took = f" in {report.wall_seconds:.0f} s" if report.wall_seconds else ""
    console.print(
        f"{len(report.records):,} requests{took}, records digest "
        f"{executors.records_digest(report.records)[:16]} (the same on every executor); "
        f"the full report (per dataset, the peers, where the bill goes): {markdown}; "
        f"plots: {plot} (and under the automatic cache)"
        + (f", per call: {calls}" if calls else ""),
        highlight=False,
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
QuickOption = Annotated[
    bool,
    typer.Option(
        "--quick",
        help="A small selection (the shortest SWE-agent run, 4 tau-bench sessions, a short "
        "synthetic conversation) at 4k and 16k: a minute or two.",
    ),
]
WorkersOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Worker processes (local ones, or the local dask cluster's).",
        show_default="the CPU count, at most 4",
    ),
]


def demo(
    budget: BudgetOption = None,
    policy: PolicyOption = None,
    out: OutOption = Path("out/demo"),
    workers: WorkersOption = None,
    executor: ExecutorOption = ExecutorName.local,
    scheduler: SchedulerOption = None,
    data: Annotated[
        Path | None,
        typer.Option(help="Folder of SWE-agent .traj files.", show_default="the bundled runs"),
    ] = None,
    tau_sessions: Annotated[
        int,
        typer.Option(
            min=0, help="tau-bench airline sessions served in turn by one agent (0: none)."
        ),
    ] = DEMO_TAU_SESSIONS,
    quick: QuickOption = False,
) -> None:
    """Replay the bundled real transcripts through every policy at three budgets.

    The SWE-agent runs, their concatenation, synthetic conversations of three
    lengths, and tau-bench airline sessions served in turn by one agent, all with
    planted facts. Offline and deterministic: the same extractive summariser for
    every policy that summarises. Prints the verdict and a table per budget, writes
    ``report.md``, ``records.json`` and ``bill-and-kept.png`` under ``--out``.
    """
    try:
        if quick:
            transcripts = benchmark.quick_transcripts(data)
        else:
            transcripts = benchmark.default_transcripts(data)
            if tau_sessions:
                transcripts.append(benchmark.tau_bench_transcript(tau_sessions))
    except (FileNotFoundError, MessageFormatError) as exc:
        fail(f"{exc}")
    console.rule("[bold]ctxfold demo: context policies on real agent transcripts")
    console.print(
        ", ".join(f"{t.name} ({len(t.messages)} messages)" for t in transcripts)
        + ". At every model call each policy says what it would send; one exact counter "
        "audits it and a prompt cache prices it.",
        highlight=False,
    )
    _run_benchmark(
        transcripts,
        policy or benchmark.policy_names(),
        budget or list(QUICK_BUDGETS if quick else DEMO_BUDGETS),
        _workers(workers),
        out,
        executor,
        scheduler,
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
        # indented as a block, so a description that wraps keeps its indent
        console.print(Padding(escape(registry.describe(name)), (0, 0, 0, 4)), highlight=False)
        if note:
            console.print(Padding(f"[dim]{escape(note)}[/dim]", (0, 0, 0, 4)), highlight=False)


class TranscriptFormat(StrEnum):
    """The formats ``ctxfold replay --format`` accepts."""

    auto = "auto"
    anthropic = "anthropic"
    openai = "openai"
    swe_agent = "swe-agent"
    tau_bench = "tau-bench"


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
        if fmt == "tau-bench":  # its sessions served in turn by one agent
            transcript = benchmark.concatenate(loaders.load_tau_bench(path), name=path.stem)
            messages = transcript.messages
        else:
            _, messages = loaders.load_transcript_file(path, fmt)
            transcript = loaders.Transcript.from_messages(
                path.stem, messages, {"source": str(path), "format": fmt}
            )
    except (ValueError, KeyError, OSError, TypeError) as exc:  # TranscriptError included
        fail(f"cannot read {path} as {fmt}: {_without_path(str(exc), path)}")
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
    path: Annotated[
        Path, typer.Argument(help="A transcript: .traj, OpenAI or Anthropic JSON, tau-bench.")
    ],
    budget: BudgetOption = None,
    policy: PolicyOption = None,
    fmt: Annotated[
        TranscriptFormat,
        typer.Option(
            "--format",
            help="The transcript's format; auto tells it by content (a top-level 'system' "
            "key or tool_use / tool_result blocks: Anthropic; a 'history' list: SWE-agent; "
            "a list of sessions with a 'traj' each: tau-bench, served in turn by one agent).",
        ),
    ] = TranscriptFormat.auto,
    out: OutOption = Path("out/replay"),
    workers: WorkersOption = None,
    executor: ExecutorOption = ExecutorName.local,
    scheduler: SchedulerOption = None,
) -> None:
    """Replay one transcript through the chosen policies and budgets."""

    transcript = _load_transcript(path, fmt.value)
    _run_benchmark(
        [transcript],
        policy or benchmark.policy_names(),
        budget or list(DEMO_BUDGETS),
        _workers(workers),
        out,
        executor,
        scheduler,
    )


def report(
    records: Annotated[
        list[Path], typer.Argument(help="records.json files of earlier runs (one or more).")
    ],
    out: OutOption = Path("out/report"),
) -> None:
    """Rebuild the verdict, tables, report and plot from saved records.

    Runs of other policies or budgets over the same transcripts join into one report.
    """
    texts = []
    for path in records:
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except OSError as exc:
            fail(f"cannot read {path}: {exc.strerror or exc}")
    try:
        rebuilt = benchmark.BenchmarkReport.from_json(*texts)
    except ValueError as exc:  # JSONDecodeError included
        fail(f"cannot read the records: {exc}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create {out}: {exc.strerror or exc}")
    _show(rebuilt, out)


class Dataset(StrEnum):
    """The datasets ``ctxfold bench --dataset`` selects."""

    swe_agent = "swe-agent"
    tau_bench = "tau-bench"
    synthetic = "synthetic"
    bfcl = "bfcl"
    chitchat = "chitchat"


def bench(
    budget: BenchBudgetOption = None,
    policy: PolicyOption = None,
    out: OutOption = Path("out/bench"),
    workers: WorkersOption = None,
    executor: ExecutorOption = ExecutorName.local,
    scheduler: SchedulerOption = None,
    dataset: Annotated[
        list[Dataset] | None,
        typer.Option(
            "--dataset",
            "-d",
            help="Dataset to replay (repeatable).",
            show_default="all of them; bfcl and chitchat when their packages are installed",
        ),
    ] = None,
    scale: Annotated[
        list[int] | None,
        typer.Option(
            help="Synthetic conversation sizes in messages (repeatable).",
            show_default="1000, 5000",
        ),
    ] = None,
    tau_sessions: Annotated[
        int,
        typer.Option(min=1, help="tau-bench airline sessions served in turn by one agent."),
    ] = 150,
    quick: QuickOption = False,
) -> None:
    """The full comparison, on every dataset available here.

    The bundled SWE-agent runs and tau-bench sessions (served in turn by one agent),
    long synthetic conversations, and the BFCL memory and multi-turn sets and the
    longest chitchat conversations when their packages are installed.
    """
    chosen = set(dataset or Dataset)
    transcripts: list[Any] = []
    try:
        if quick:
            transcripts = benchmark.quick_transcripts()
        else:
            if Dataset.swe_agent in chosen:
                transcripts += [  # less the synthetic ones: --scale sizes those
                    t
                    for t in benchmark.default_transcripts()
                    if benchmark.dataset_of(t) != "synthetic"
                ]
            if Dataset.tau_bench in chosen:
                transcripts.append(benchmark.tau_bench_transcript(tau_sessions))
            if Dataset.synthetic in chosen:
                transcripts += [
                    benchmark.synthetic_transcript(n, seed=n) for n in (scale or [1000, 5000])
                ]
    except (FileNotFoundError, ValueError) as exc:  # MessageFormatError included
        fail(f"{exc}")
    optional: list[tuple[Dataset, str, Callable[[], list[Any]]]] = [
        (Dataset.bfcl, "BFCL memory", loaders.load_bfcl_memory),
        (
            Dataset.bfcl,
            "BFCL multi-turn",
            lambda: loaders.load_bfcl_multi_turn("long_context", limit=5),
        ),
        (Dataset.chitchat, "chitchat", lambda: loaders.load_chitchat(limit=3, longest=True)),
    ]
    for kind, label, load in optional if not quick else []:
        if kind not in chosen:
            continue
        try:
            transcripts += load()
        except loaders.TranscriptError as exc:
            console.print(f"[yellow]skipped {label}:[/yellow] {exc}")
    if not transcripts:
        fail("no transcript to replay: the chosen datasets are not installed here")
    _run_benchmark(
        transcripts,
        policy or benchmark.policy_names(),
        budget or list(QUICK_BUDGETS if quick else BENCH_BUDGETS),
        _workers(workers),
        out,
        executor,
        scheduler,
    )
