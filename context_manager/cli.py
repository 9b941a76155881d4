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
    """Show the bundled example problem: its hierarchy and its cheapest and finest frontiers."""
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


@app.command()
def show(path: Annotated[Path, typer.Argument(help="A fold problem JSON file.")]) -> None:
    """Describe a saved fold problem: hierarchy, budget, conflicts and extreme frontiers."""
    _describe(_load_problem(path))


@app.command()
def schema() -> None:
    """Print the JSON Schema of a fold problem."""
    from folding import fold_problem_schema

    console.print_json(json.dumps(fold_problem_schema()))
