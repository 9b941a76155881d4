"""The commands on fold problems: ``example``, ``show``, ``schema``, ``solve`` and
``solvers``, with the reading of a problem file and the drawing of its hierarchy.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from rich.table import Table
from rich.tree import Tree

from folding import (
    Conflict,
    FoldingError,
    FoldProblem,
    Status,
    cheapest_frontier,
    finest_frontier,
    render,
)

from .base import EXIT_STATUS, NO_PLAN, RUNTIME_ERROR, Command, app, console, fail
from .limits import MAX_INPUT_BYTES, MAX_TREE_DEPTH, InputLimitError, load_json


def _example_problem() -> FoldProblem:
    text = resources.files("folding").joinpath("data/example-problem.json").read_text("utf-8")
    return FoldProblem.model_validate_json(text)


def _location(loc: Sequence[int | str], data: Any) -> str:
    """``('leaves', 3, 'tokens')`` as ``leaves[3] (id 'm3').tokens``."""
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            if isinstance(node, dict) and isinstance(node.get("id"), str):
                out += f" (id {node['id']!r})"
        else:
            out += f".{part}" if out else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out


def validation_summary(exc: ValidationError, data: Any = None, limit: int = 3) -> str:
    """One line per problem of a pydantic error: where it is and what is wrong.

    Parameters
    ----------
    exc : ValidationError
        The error.
    data : Any, optional
        The parsed input, to name the id of a list entry at fault.
    limit : int
        At most this many problems; a last line says how many more there are.

    Returns
    -------
    str
        Lines such as ``leaves[0] (id 'a').zone: Input should be 'head', 'middle'
        or 'tail'``, without pydantic's input dumps and links.
    """
    problems = exc.errors(include_url=False)
    lines = []
    for error in problems[:limit]:
        where = _location(error["loc"], data)
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "missing":
            message = "required field missing"
        elif error["type"] == "extra_forbidden":
            message = "unknown field"
        lines.append(f"{where}: {message}" if where else message)
    if len(problems) > limit:
        lines.append(f"... and {len(problems) - limit} more")
    return "\n".join(f"  {line}" for line in lines)


def _load_problem(path: Path) -> FoldProblem:
    try:
        size = path.stat().st_size
        if size > MAX_INPUT_BYTES:
            raise InputLimitError(
                str(path), f"{size:,} bytes, over the limit of {MAX_INPUT_BYTES:,} bytes"
            )
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")
    except UnicodeDecodeError as exc:
        fail(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})")
    try:
        data = load_json(text, str(path))
    except InputLimitError as exc:
        fail(str(exc))
    except json.JSONDecodeError as exc:
        fail(f"{path} is not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}")
    try:
        return FoldProblem.model_validate_json(text)
    except ValidationError as exc:
        fail(f"{path} is not a valid fold problem:\n{validation_summary(exc, data)}")
    except FoldingError as exc:
        fail(f"{path}: {exc}")


def _hierarchy_tree(problem: FoldProblem, max_children: int = 6) -> Tree:
    h = problem.hierarchy
    tree = Tree(
        f"[bold]{problem.n_leaves} leaves[/bold], {len(problem.summaries)} summaries, "
        f"depth L{h.depth}"
    )
    by_id = {s.id: s for s in problem.summaries}
    roots = h.roots()
    # depth first without recursion, so a hierarchy of any depth is drawn: a work item
    # is a node to draw under a branch at a depth, or a closing line for a branch
    work: list[tuple[Tree, str, int] | tuple[Tree, str]] = []
    if len(roots) > 12:
        work.append((tree, f"... {len(roots) - 12} more roots"))
    work.extend((tree, node, 0) for node in reversed(roots[:12]))
    while work:
        item = work.pop()
        if len(item) == 2:
            item[0].add(item[1])
            continue
        branch, node, depth = item
        if node not in by_id:
            leaf = problem.leaves[h.leaf_index[node]]
            branch.add(f"{node} raw {leaf.tokens} tok ({leaf.zone})")
            continue
        s = by_id[node]
        covered = h.covered_leaves(node)
        sub = branch.add(
            f"[cyan]{node}[/cyan] L{s.level} {s.tokens} tok over "
            f"{covered[0]}..{covered[-1]} ({len(covered)} leaves)"
        )
        if s.level <= 1:
            continue
        if depth >= MAX_TREE_DEPTH:
            n = len(s.children)
            sub.add(
                f"... {n} child{'ren' if n != 1 else ''} not drawn: more than "
                f"{MAX_TREE_DEPTH} levels below the root"
            )
            continue
        if len(s.children) > max_children:
            work.append((sub, f"... {len(s.children) - max_children} more"))
        work.extend((sub, child, depth + 1) for child in reversed(s.children[:max_children]))
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


@app.command(cls=Command)
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
    """Solve the problem with every registered solver at the same wall and tabulate the
    answers, then say what each one optimises."""
    import solvers
    from folding import fidelity_loss

    wall = problem.budget.total
    # the target raised to the wall: every solver may use all of it, so a solver that
    # works to the target is not shown stopping short of one that works to the wall
    at_wall = FoldProblem.model_validate(
        {**problem.model_dump(), "budget": {**problem.budget.model_dump(), "target": wall}}
    )
    table = Table(
        title=f"every solver at the same wall of {wall:,} tokens "
        "(lower fidelity loss keeps more detail)"
    )
    for col in ("solver", "status", "tokens", "of wall", "fidelity loss", "ms"):
        table.add_column(col, justify="left" if col in ("solver", "status") else "right")
    aims: list[str] = []
    for name in solvers.names():
        caps = solvers.capabilities(name)
        if not caps.accepts(problem.n_leaves):
            continue
        solver = solvers.get(name, **caps.example_options)
        result = solver.solve(at_wall)
        tokens = result.tokens or 0
        table.add_row(
            name,
            result.status.value,
            f"{tokens:,}",
            f"{tokens / wall:.0%}",
            f"{fidelity_loss(at_wall, result.frontier):,.0f}",
            f"{result.stats['solve_ms']:.1f}",
        )
        doc = (type(solver).__doc__ or "").strip().splitlines()
        aims.append(f"  {name}: {doc[0] if doc else 'no description'}")
    console.print(table)
    console.print("what each optimises (`exact` is optimal for the fidelity loss alone; the")
    console.print("others trade some of it for a stable prompt prefix or a fixed shape):")
    for line in aims:
        console.print(line, markup=False, highlight=False)


@app.command(cls=Command)
def show(path: Annotated[Path, typer.Argument(help="A fold problem JSON file.")]) -> None:
    """Describe a saved fold problem: hierarchy, budget, conflicts and extreme frontiers."""
    _describe(_load_problem(path))


@app.command(cls=Command)
def schema() -> None:
    """Print the JSON Schema of a fold problem."""
    from folding import fold_problem_schema

    console.print_json(json.dumps(fold_problem_schema()))


def _parse_options(options: list[str]) -> dict[str, object]:
    parsed: dict[str, object] = {}
    for item in options:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"option {item!r} is not KEY=VALUE")
        try:
            parsed[key] = load_json(value, f"option {key!r}")
        except InputLimitError as exc:
            fail(str(exc))
        except json.JSONDecodeError:
            parsed[key] = value
    return parsed


def _positive_seconds(value: float | None) -> float | None:
    """``--time-limit``: a positive, finite number of seconds."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"must be a positive number of seconds, got {value}")
    return value


@app.command(cls=Command, epilog=EXIT_STATUS)
def solve(
    path: Annotated[Path, typer.Argument(help="A fold problem JSON file.")],
    method: Annotated[str, typer.Option(help="Solver name (see `ctxfold solvers`).")] = (
        "kv-stable"
    ),
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option",
            "-o",
            help="Solver option KEY=VALUE (JSON values; repeatable), e.g. policy=reference.",
        ),
    ] = None,
    time_limit: Annotated[
        float | None,
        typer.Option(
            callback=_positive_seconds,
            help="Seconds the solver may search (solvers that search; positive).",
            show_default="the solver's own",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the SolveResult JSON.")] = False,
) -> None:
    """Solve a saved problem and print the plan and its layout.

    Exits 3 when no plan fits the wall (over_budget or infeasible): then the
    layout shown is the floor, the cheapest plan, which does not fit.
    """
    import solvers

    problem = _load_problem(path)
    try:
        solver = solvers.configure(method, _parse_options(option or []))
    except solvers.SolverConfigError as exc:
        fail(str(exc))
    try:
        result = solver.solve(problem, time_limit=time_limit)
    except solvers.SolverConfigError as exc:
        fail(str(exc))
    except FoldingError as exc:
        fail(f"solver {method!r} failed on {path}: {exc}", RUNTIME_ERROR)
    fits = result.status in Status.with_plan()
    if json_out:
        typer.echo(result.model_dump_json(indent=2))
        if not fits:
            _no_plan(result, problem)
        return
    console.print(
        f"[bold]{result.solver}[/bold]: {result.status.value}, "
        + ("no plan" if result.tokens is None else f"{result.tokens:,} tokens")
        + f" (wall {problem.budget.total:,}, target {problem.budget.target:,}), "
        + ("" if result.kv_cost is None else f"KV re-read {result.kv_cost:,}, ")
        + f"{result.stats.get('solve_ms', 0):.1f} ms",
        highlight=False,
    )
    typed = ("decision", "floor_tokens", "objective", "bound", "message")
    for key, value in [(k, getattr(result, k)) for k in typed] + list(result.diagnostics.items()):
        if value is not None:
            console.print(f"  {key}: {value}")
    for conflict in result.conflicts or []:
        try:
            described: object = Conflict(
                leaf=conflict["leaf"],
                available=tuple(conflict["available"]),
                constraints=tuple(conflict["constraints"]),
            )
        except (KeyError, TypeError):
            described = conflict
        console.print(f"  conflict: {described}", highlight=False)
    for request in result.produce:
        console.print(f"  produce L{request.level} over {request.first}..{request.last}")
    if result.status is not Status.INFEASIBLE and (result.frontier or result.tokens is not None):
        layout = render(problem, result.frontier)
        if not fits:
            console.print(
                f"[yellow]floor[/yellow]: the cheapest plan, {layout.total:,} tokens, over the "
                f"wall of {problem.budget.total:,}; it does not fit and is shown only as the floor"
            )
        table = Table(title="layout" if fits else "floor layout (over the wall)")
        for col in ("offset", "unit", "tokens"):
            table.add_column(col, justify="right" if col != "unit" else "left")
        for unit in layout.units[:40]:
            table.add_row(f"{unit.offset:,}", f"{unit.kind}:{unit.key}", f"{unit.tokens:,}")
        if len(layout) > 40:
            table.add_row("...", f"{len(layout) - 40} more units", "")
        console.print(table)
    if not fits:
        _no_plan(result, problem)


def _no_plan(result: Any, problem: FoldProblem) -> NoReturn:
    """Say on stderr that no plan fits the wall, and leave with :data:`NO_PLAN`."""
    if result.status is Status.INFEASIBLE:
        why = result.message or "the constraints contradict each other"
        fail(f"infeasible: no plan satisfies the constraints ({why})", NO_PLAN)
    floor = result.floor_tokens if result.floor_tokens is not None else result.tokens
    fail(
        f"over_budget: no plan fits the wall of {problem.budget.total:,} tokens; the floor "
        f"(the cheapest plan) is {floor:,}" + (f"; {result.message}" if result.message else ""),
        NO_PLAN,
    )


@app.command(name="solvers", cls=Command)
def list_solvers() -> None:
    """List the registered solvers."""
    import solvers

    for name in solvers.names():
        cls = type(solvers.get(name, **solvers.capabilities(name).example_options))
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        console.print(f"[bold]{name}[/bold]: {doc}")
