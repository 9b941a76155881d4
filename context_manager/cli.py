"""``ctxfold``: the command line."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from folding import FoldingError, FoldProblem, cheapest_frontier, finest_frontier, render

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Fold long agent histories into hierarchical summaries under a token budget.",
)
console = Console()


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
        console.print(f"[red]error:[/red] cannot read {path}: {exc.strerror or exc}")
        raise typer.Exit(2) from None
    try:
        return FoldProblem.model_validate_json(text)
    except ValidationError as exc:
        console.print(f"[red]error:[/red] {path} is not a valid fold problem:\n{exc}")
        raise typer.Exit(2) from None
    except FoldingError as exc:
        console.print(f"[red]error:[/red] {path}: {exc}")
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
def demo() -> None:
    """Show the bundled example problem: its hierarchy, extreme frontiers and every solver."""
    problem = _example_problem()
    console.rule("[bold]ctxfold demo: a fold problem")
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
        options: dict[str, object] = {"policy": "reference"} if name == "kv-unified" else {}
        if name == "brute-force" and problem.n_leaves > 12:
            continue
        result = solvers.get(name, **options).solve(problem)
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
            console.print(f"[red]error:[/red] option {item!r} is not KEY=VALUE")
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
    from pydantic import ValidationError as OptionError

    import solvers

    problem = _load_problem(path)
    try:
        solver = solvers.get(method, **_parse_options(option or []))
    except KeyError as exc:
        console.print(f"[red]error:[/red] {exc.args[0]}")
        raise typer.Exit(2) from None
    except OptionError as exc:
        console.print(f"[red]error:[/red] invalid options for {method}:\n{exc}")
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
    for key, value in result.diagnostics.items():
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
        cls = type(solvers.get(name, **({"policy": "reference"} if name == "kv-unified" else {})))
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        console.print(f"[bold]{name}[/bold]: {doc}")


@app.command()
def sweep(
    method: Annotated[
        list[str] | None, typer.Option("--method", "-m", help="Solvers (default: all).")
    ] = None,
) -> None:
    """Replay the reference budget sweep (64k, 100k, 180k, 300k, 100k) for each solver.

    Tables: tokens and utilisation after each wall; then cache hit rate, billed
    input (millions of base-price tokens), churn (millions of tokens re-read beyond
    the appended ones) and calls over the wall.
    """
    from rich.progress import Progress, TaskID

    import solvers

    methods = method or [m for m in solvers.names() if m != "brute-force"]
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

            options = {"policy": "reference"} if name == "kv-unified" else None
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
