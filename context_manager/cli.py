"""``ctxfold``: the command line."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from folding import FoldingError, FoldProblem, cheapest_frontier, finest_frontier, render

from .messages import MessageFormatError
from .strategies.autobiographical import SummaryEntry, read_records

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Fold long agent histories into hierarchical summaries under a token budget.",
)
console = Console(width=None if sys.stdout.isatty() else 160)
errors = Console(stderr=True, soft_wrap=True)
"""Error messages go to stderr, so a piped report stays clean."""
"""Tables are wide: when the output is not a terminal, do not squeeze them to 80 columns."""


def main() -> None:
    """Entry point of the ``ctxfold`` console script."""
    app()


def _example_problem() -> FoldProblem:
    text = resources.files("folding").joinpath("data/example-problem.json").read_text("utf-8")
    return FoldProblem.model_validate_json(text)


def _load_problem(path: Path) -> FoldProblem:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        errors.print(f"[red]error:[/red] cannot read {path}: {exc.strerror or exc}")
        raise typer.Exit(2) from None
    try:
        return FoldProblem.model_validate_json(text)
    except ValidationError as exc:
        errors.print(f"[red]error:[/red] {path} is not a valid fold problem:\n{exc}")
        raise typer.Exit(2) from None
    except FoldingError as exc:
        errors.print(f"[red]error:[/red] {path}: {exc}")
        raise typer.Exit(2) from None


def _hierarchy_tree(problem: FoldProblem, max_children: int = 6) -> Tree:
    h = problem.hierarchy
    tree = Tree(
        f"[bold]{problem.n_leaves} leaves[/bold], {len(problem.summaries)} summaries, "
        f"depth L{h.depth}"
    )
    by_id = {s.id: s for s in problem.summaries}

    def add(branch: Tree, node: str) -> None:
        if node in by_id:
            s = by_id[node]
            covered = h.covered_leaves(node)
            sub = branch.add(
                f"[cyan]{node}[/cyan] L{s.level} {s.tokens} tok over "
                f"{covered[0]}..{covered[-1]} ({len(covered)} leaves)"
            )
            if s.level > 1:
                for child in s.children[:max_children]:
                    add(sub, child)
                if len(s.children) > max_children:
                    sub.add(f"... {len(s.children) - max_children} more")
        else:
            leaf = problem.leaves[h.leaf_index[node]]
            branch.add(f"{node} raw {leaf.tokens} tok ({leaf.zone})")

    roots = h.roots()
    for node in roots[:12]:
        add(tree, node)
    if len(roots) > 12:
        tree.add(f"... {len(roots) - 12} more roots")
    return tree


def _describe(problem: FoldProblem) -> None:
    console.print(_hierarchy_tree(problem))
    b = problem.budget
    console.print(
        f"budget: wall {b.total:,} tokens, target {b.target:,}, grace {b.grace:.0%}; "
        f"fixed {problem.fixed_tokens:,}; raw history {problem.raw_tokens:,}"
    )
    for conflict in problem.conflicts():
        console.print(f"[red]conflict:[/red] {conflict}")
    table = Table(title="extreme frontiers")
    for col in ("frontier", "tokens", "fits wall", "units", "raw", "recall", "deepest"):
        table.add_column(col, justify="right" if col != "frontier" else "left")
    for name, pick in (
        ("finest (least folded)", finest_frontier),
        ("cheapest (floor)", cheapest_frontier),
    ):
        frontier = pick(problem)
        if frontier is None:
            table.add_row(name, "-", "no valid frontier", "-", "-", "-", "-")
            continue
        layout = render(problem, frontier)
        recalls = sum(1 for u in layout.units if u.kind == "recall")
        table.add_row(
            name,
            f"{layout.total:,}",
            "yes" if layout.total <= b.total else "[red]no[/red]",
            str(len(layout)),
            str(len(layout) - recalls),
            str(recalls),
            f"L{max(frontier.values(), default=0)}",
        )
    console.print(table)


@app.command()
def example() -> None:
    """Show the bundled example problem: its hierarchy, extreme frontiers and every solver."""
    problem = _example_problem()
    console.rule("[bold]ctxfold example: a fold problem")
    console.print(
        "An agent's history as leaves (messages) under a hierarchy of summaries. A frontier "
        "picks the level each leaf is shown at; the renderer prices it."
    )
    _describe(problem)
    frontier = cheapest_frontier(problem) or {}
    layout = render(problem, frontier)
    console.print("first units of the cheapest layout:")
    for unit in layout.units[:8]:
        console.print(f"  @{unit.offset:>6}  {unit.kind:<6} {unit.key:<8} {unit.tokens:>5} tok")
    _compare_solvers(problem)


def _compare_solvers(problem: FoldProblem) -> None:
    """Solve the problem with every registered solver and tabulate the answers."""
    import solvers
    from folding import fidelity_loss

    table = Table(title="every solver on this problem (lower fidelity loss keeps more detail)")
    for col in ("solver", "status", "tokens", "of wall", "fidelity loss", "ms"):
        table.add_column(col, justify="left" if col in ("solver", "status") else "right")
    for name in solvers.names():
        caps = solvers.capabilities(name)
        if not caps.accepts(problem.n_leaves):
            continue
        result = solvers.get(name, **caps.example_options).solve(problem)
        tokens = result.tokens or 0
        table.add_row(
            name,
            result.status.value,
            f"{tokens:,}",
            f"{tokens / problem.budget.total:.0%}",
            f"{fidelity_loss(problem, result.frontier):,.0f}",
            f"{result.stats['solve_ms']:.1f}",
        )
    console.print(table)


@app.command()
def show(path: Annotated[Path, typer.Argument(help="A fold problem JSON file.")]) -> None:
    """Describe a saved fold problem: hierarchy, budget, conflicts and extreme frontiers."""
    _describe(_load_problem(path))


@app.command()
def schema() -> None:
    """Print the JSON Schema of a fold problem."""
    from folding import fold_problem_schema

    console.print_json(json.dumps(fold_problem_schema()))


def _parse_options(options: list[str]) -> dict[str, object]:
    parsed: dict[str, object] = {}
    for item in options:
        key, sep, value = item.partition("=")
        if not sep or not key:
            errors.print(f"[red]error:[/red] option {item!r} is not KEY=VALUE")
            raise typer.Exit(2)
        try:
            parsed[key] = json.loads(value)
        except json.JSONDecodeError:
            parsed[key] = value
    return parsed


@app.command()
def solve(
    path: Annotated[Path, typer.Argument(help="A fold problem JSON file.")],
    method: Annotated[str, typer.Option(help="Solver name (see `ctxfold solvers`).")] = (
        "kv-stable"
    ),
    option: Annotated[
        list[str] | None,
        typer.Option("--option", "-o", help="Solver option KEY=VALUE (JSON values)."),
    ] = None,
    time_limit: Annotated[float | None, typer.Option(help="Seconds.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the SolveResult JSON.")] = False,
) -> None:
    """Solve a saved problem and print the plan and its layout."""
    import solvers

    problem = _load_problem(path)
    try:
        solver = solvers.configure(method, _parse_options(option or []))
    except solvers.SolverConfigError as exc:
        errors.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    result = solver.solve(problem, time_limit=time_limit)
    if json_out:
        typer.echo(result.model_dump_json(indent=2))
        return
    console.print(
        f"[bold]{result.solver}[/bold]: {result.status.value}, {result.tokens} tokens "
        f"(wall {problem.budget.total:,}, target {problem.budget.target:,}), "
        f"KV re-read {result.kv_cost}, {result.stats.get('solve_ms', 0):.1f} ms"
    )
    typed = ("decision", "floor_tokens", "objective", "bound", "conflicts", "message")
    for key, value in [(k, getattr(result, k)) for k in typed] + list(result.diagnostics.items()):
        if value is not None:
            console.print(f"  {key}: {value}")
    for request in result.produce:
        console.print(f"  produce L{request.level} over {request.first}..{request.last}")
    if result.frontier or result.tokens is not None:
        layout = render(problem, result.frontier)
        table = Table(title="layout")
        for col in ("offset", "unit", "tokens"):
            table.add_column(col, justify="right" if col != "unit" else "left")
        for unit in layout.units[:40]:
            table.add_row(f"{unit.offset:,}", f"{unit.kind}:{unit.key}", f"{unit.tokens:,}")
        if len(layout) > 40:
            table.add_row("...", f"{len(layout) - 40} more units", "")
        console.print(table)


@app.command(name="solvers")
def list_solvers() -> None:
    """List the registered solvers."""
    import solvers

    for name in solvers.names():
        cls = type(solvers.get(name, **solvers.capabilities(name).example_options))
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        console.print(f"[bold]{name}[/bold]: {doc}")


@app.command()
def sweep(
    method: Annotated[
        list[str] | None, typer.Option("--method", "-m", help="Solvers (default: all).")
    ] = None,
) -> None:
    """Replay the standard budget sweep (64k, 100k, 180k, 300k, 100k) for each solver.

    Tables: tokens and utilisation after each wall; then cache hit rate, billed
    input (millions of base-price tokens), churn (millions of tokens re-read beyond
    the appended ones) and calls over the wall.
    """
    from rich.progress import Progress, TaskID

    import solvers

    methods = method or [m for m in solvers.names() if not solvers.capabilities(m).oracle]
    walls = Table(title="budget sweep (220 messages): tokens and utilisation after each wall")
    walls.add_column("solver", no_wrap=True)
    for budget in solvers.replay_module.SWEEP_BUDGETS:
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
            out = solvers.sweep(method=name, options=options, progress=advance)
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

    from . import benchmark

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        errors.print(f"[red]error:[/red] cannot create {out}: {exc.strerror or exc}")
        raise typer.Exit(2) from None
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("replaying", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        try:
            report = benchmark.run(
                transcripts, policies, budgets, workers=workers, progress=advance
            )
        except (KeyError, ValueError, ModuleNotFoundError) as exc:
            errors.print(f"[red]error:[/red] {exc.args[0] if exc.args else exc}")
            raise typer.Exit(2) from None
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


BudgetOption = Annotated[
    list[int] | None, typer.Option("--budget", "-b", help="Input token budget (repeatable).")
]
PolicyOption = Annotated[
    list[str] | None,
    typer.Option("--policy", "-p", help="Policy name (repeatable; see `ctxfold policies`)."),
]
OutOption = Annotated[Path, typer.Option(help="Folder for the report, records and plot.")]
WorkersOption = Annotated[
    int | None, typer.Option(help="Worker processes (default: the CPU count, at most 4).")
]


@app.command()
def demo(
    budget: BudgetOption = None,
    policy: PolicyOption = None,
    out: OutOption = Path("out/demo"),
    workers: WorkersOption = None,
    data: Annotated[
        Path | None, typer.Option(help="Folder of SWE-agent .traj files (default: bundled).")
    ] = None,
) -> None:
    """Replay the bundled real transcripts through every policy at three budgets.

    Offline and deterministic: the same extractive summariser for every policy
    that summarises. Prints the comparison, writes ``report.md``,
    ``records.json`` and ``tokens-and-cost.png`` under ``--out``.
    """
    from . import benchmark

    try:
        transcripts = benchmark.default_transcripts(data)
    except (FileNotFoundError, MessageFormatError) as exc:
        errors.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
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


@app.command()
def policies() -> None:
    """List the policy names the benchmark accepts."""
    from . import benchmark

    available = set(benchmark.policy_names())
    for name in benchmark.policy_names(peers=True, exact=True):
        note = "" if name in available else "  [dim](needs the bench extra)[/dim]"
        console.print(f"{name}{note}")


def _load_transcript(path: Path, fmt: str) -> Any:
    from . import loaders
    from .benchmark import _transcript

    if not path.is_file():
        errors.print(f"[red]error:[/red] {path} is not a file")
        raise typer.Exit(2)
    if fmt == "auto":
        fmt = "swe-agent" if path.suffix == ".traj" else "openai"
    readers = {
        "swe-agent": loaders.load_swe_agent,
        "openai": loaders.load_openai,
        "anthropic": loaders.load_anthropic,
    }
    if fmt not in readers:
        errors.print(f"[red]error:[/red] --format must be auto, {', '.join(readers)}; got {fmt!r}")
        raise typer.Exit(2)
    try:
        messages = readers[fmt](path)
    except (ValueError, KeyError, OSError, SyntaxError) as exc:  # MessageFormatError included
        errors.print(f"[red]error:[/red] cannot read {path} as {fmt}: {exc}")
        raise typer.Exit(2) from None
    transcript = _transcript(path.stem, messages, {"source": str(path)})
    if not transcript.call_points:
        errors.print(f"[red]error:[/red] {path} has no point where the agent is called")
        raise typer.Exit(2)
    return transcript


@app.command()
def replay(
    path: Annotated[Path, typer.Argument(help="A transcript: .traj, OpenAI or Anthropic JSON.")],
    budget: BudgetOption = None,
    policy: PolicyOption = None,
    fmt: Annotated[
        str, typer.Option("--format", help="auto, swe-agent, openai or anthropic.")
    ] = "auto",
    out: OutOption = Path("out/replay"),
    workers: WorkersOption = None,
) -> None:
    """Replay one transcript through the chosen policies and budgets."""
    from . import benchmark

    transcript = _load_transcript(path, fmt)
    _run_benchmark(
        [transcript],
        policy or benchmark.policy_names(),
        budget or list(DEMO_BUDGETS),
        _workers(workers),
        out,
    )


@app.command()
def bench(
    budget: BudgetOption = None,
    policy: PolicyOption = None,
    out: OutOption = Path("out/bench"),
    workers: WorkersOption = None,
    scale: Annotated[
        list[int] | None,
        typer.Option(help="Synthetic conversation sizes in messages (repeatable)."),
    ] = None,
) -> None:
    """The full comparison: bundled transcripts, long synthetic conversations, and the
    BFCL memory and multi-turn sets and the longest chitchat conversations when their
    packages are installed."""
    from . import benchmark, loaders

    try:
        transcripts = benchmark.default_transcripts()
        transcripts += [benchmark.synthetic_transcript(n, seed=n) for n in (scale or [1000, 5000])]
    except (FileNotFoundError, ValueError) as exc:  # MessageFormatError included
        errors.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
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
        budget or [8_000, 32_000, 128_000],
        _workers(workers),
        out,
    )


@app.command()
def inspect(
    store: Annotated[Path, typer.Argument(help="A context manager store (SQLite file).")],
    namespace: Annotated[str, typer.Option(help="The strategy namespace.")] = "default",
    last: Annotated[int, typer.Option(min=1, help="How many of the newest messages to list.")] = 10,
) -> None:
    """Describe a store: messages, branches, the memory tree, resolutions and pins."""
    import sqlite3

    from .store import Store, StoreError

    if not store.is_file():
        errors.print(f"[red]error:[/red] {store} is not a file")
        raise typer.Exit(2)
    # look before opening: opening a store writes to it. The read-only probe needs a URI;
    # as_uri() percent-encodes the path, so '#', '?' and '%' in a name stay part of it
    probe_uri = store.resolve().as_uri() + "?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(probe_uri, uri=True)) as probe:
            tables = {r[0] for r in probe.execute("SELECT name FROM sqlite_master")}
    except sqlite3.DatabaseError as exc:
        errors.print(f"[red]error:[/red] {store} is not a SQLite database: {exc}")
        raise typer.Exit(2) from None
    if not {"records", "branches", "meta"} <= tables:
        errors.print(f"[red]error:[/red] {store} is a SQLite database but not a store")
        raise typer.Exit(2)
    try:
        db = Store.open(store)
    except (StoreError, OSError) as exc:
        errors.print(f"[red]error:[/red] cannot open {store}: {exc}")
        raise typer.Exit(2) from None
    with db:
        messages = db.items("messages")
        console.print(
            f"[bold]{store}[/bold]: branch {db.branch!r} of "
            f"{', '.join(b.name for b in db.list_branches())}; {len(messages):,} messages"
        )
        for item in messages[-last:]:
            body = item.body
            text = " ".join(b.get("text", f"[{b.get('type')}]") for b in body.get("content", []))
            console.print(f"  {item.id:>6} {body.get('participant', '?'):<12} {text[:90]!r}")
        records = read_records(db, lambda name: f"{namespace}/{name}")
        summaries = list(records.summaries.values())
        chunks = records.chunks
        levels: dict[int, int] = {}
        for s in summaries:
            levels[s.level] = levels.get(s.level, 0) + 1
        console.print(
            f"memories: {len(summaries)} "
            f"({', '.join(f'L{k}: {v}' for k, v in sorted(levels.items())) or 'none'}); "
            f"chunks: {len(chunks)} ({sum(1 for c in chunks if c.compressed)} compressed)"
        )
        tree = Tree("memory tree (parentless memories, newest last)")

        def add(branch: Tree, s: SummaryEntry, depth: int) -> None:
            node = branch.add(f"[cyan]{s.id}[/cyan] L{s.level}: {s.content[:70]!r}")
            if s.level > 1 and depth < 2:
                for child in s.source_ids:
                    if child in records.summaries:
                        add(node, records.summaries[child], depth + 1)

        roots = [s for s in summaries if not s.parent_id]
        for s in roots[-12:]:
            add(tree, s, 0)
        console.print(tree)
        shown: dict[int, int] = {}
        for _, _, level in records.runs:
            shown[level] = shown.get(level, 0) + 1
        console.print(
            "last compiled frontier: "
            + (", ".join(f"{v} runs at L{k}" for k, v in sorted(shown.items())) or "all raw")
        )
        for pin in records.pins:
            console.print(
                f"pin {pin.id} {pin.name or ''}: {pin.first}..{pin.last} "
                f"level={pin.level} max_level={pin.max_level}"
            )
