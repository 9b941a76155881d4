"""``ctxfold``: the command line."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
from collections.abc import Iterator, Sequence
from importlib import resources
from itertools import accumulate
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree
from typer.core import TyperCommand

from folding import (
    Conflict,
    FoldingError,
    FoldProblem,
    Status,
    cheapest_frontier,
    finest_frontier,
    render,
)

from .strategies.autobiographical import SummaryEntry, read_records

USAGE_ERROR = 2
"""Exit status of a bad option or argument, or an input file that cannot be read."""
RUNTIME_ERROR = 1
"""Exit status of a failure while doing the work."""
NO_PLAN = 3
"""Exit status of ``solve`` when no plan fits the wall (``over_budget`` or ``infeasible``)."""

EXIT_STATUS = (
    "Exit status: 0 done; 1 a failure while working; 2 a usage error (a bad option or "
    "argument, or an input file that cannot be read); 3 `solve` found no plan within "
    "the wall (over_budget or infeasible)."
)


MAX_JSON_DEPTH = 100
"""The deepest nesting of arrays and objects a JSON input may have."""
MAX_NUMBER_DIGITS = 100
"""The most digits a number in a JSON input may have."""
MAX_INPUT_BYTES = 1 << 30
"""The largest JSON input file read, in bytes (1 GiB)."""
MAX_TREE_DEPTH = 8
"""How many levels below a root ``show`` draws; deeper summaries are counted, not drawn."""


class InputLimitError(ValueError):
    """A JSON input is beyond a limit of the command line: nested too deeply, a number
    with too many digits, or a file too large.

    Parameters
    ----------
    source : str
        What was read (a file name, an option), named in the message.
    problem : str
        What is wrong with it, naming the limit.

    Attributes
    ----------
    source, problem : str
        As given.
    """

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"{source}: {problem}")
        self.source = source
        self.problem = problem


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_LONG_NUMBER = re.compile(rf"[0-9]{{{MAX_NUMBER_DIGITS + 1},}}")
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}


def check_json_limits(text: str, source: str) -> None:
    """Refuse JSON text the parsers cannot take safely, before it is parsed.

    The check does not recurse: string literals are blanked out, and the nesting depth
    is the running count of the brackets left, so a document of any depth is measured
    in linear time and constant stack.

    Parameters
    ----------
    text : str
        The JSON text.
    source : str
        What it was read from, named in the error.

    Raises
    ------
    InputLimitError
        Arrays and objects are nested deeper than :data:`MAX_JSON_DEPTH`, or a number
        has more than :data:`MAX_NUMBER_DIGITS` digits.

    Examples
    --------
    >>> check_json_limits('{"a": [1, 2, "[[[["]}', "x.json")
    >>> try:
    ...     check_json_limits("[" * 101 + "]" * 101, "x.json")
    ... except InputLimitError as exc:
    ...     print(exc)
    x.json: arrays and objects nested 101 levels deep, over the limit of 100
    """
    bare = _STRING.sub('""', text)
    brackets = _NOT_BRACKET.sub("", bare)
    depth = max(accumulate(map(_NESTING.__getitem__, brackets)), default=0)
    if depth > MAX_JSON_DEPTH:
        raise InputLimitError(
            source,
            f"arrays and objects nested {depth:,} levels deep, over the limit of {MAX_JSON_DEPTH}",
        )
    long = _LONG_NUMBER.search(bare)
    if long is not None:
        digits = len(long.group())
        raise InputLimitError(
            source,
            f"a number of {digits:,} digits, over the limit of {MAX_NUMBER_DIGITS} digits",
        )


def load_json(text: str, source: str) -> Any:
    """Parse JSON text within the limits of :func:`check_json_limits`.

    Parameters
    ----------
    text : str
        The JSON text.
    source : str
        What it was read from, named in the errors.

    Returns
    -------
    Any
        The parsed value.

    Raises
    ------
    InputLimitError
        The text is beyond a limit, or the parser still ran out of stack or refused a
        number (a last guard, the message naming ``source``).
    json.JSONDecodeError
        The text is not JSON.
    """
    check_json_limits(text, source)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise InputLimitError(source, "nested too deeply to parse") from None
    except ValueError as exc:  # a number Python refuses to convert
        raise InputLimitError(source, _first_line(str(exc), 200)) from None


class Command(TyperCommand):
    """A command whose help shows no type for flags (``--json``, ``--help``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""

    def get_help_option(self, ctx: Any) -> Any:
        """The help option, shown without a type."""
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option

    def invoke(self, ctx: Any) -> Any:
        """Run the command; the library's typed errors and file errors are answered in
        one line on stderr with their exit status (a store or file that cannot be read:
        2; any other: 1), never a traceback."""
        from .errors import ContextManagerError
        from .store import StoreCorruptError, StoreError

        try:
            return super().invoke(ctx)
        except (StoreCorruptError, InputLimitError) as exc:
            fail(str(exc), USAGE_ERROR)
        except (StoreError, ContextManagerError, FoldingError) as exc:
            fail(str(exc), RUNTIME_ERROR)
        except OSError as exc:  # a path no file can have, a folder that cannot be read...
            name = exc.filename if isinstance(exc.filename, str) else ""
            shown = name if len(name) <= 80 else name[:77] + "..."
            fail(f"{shown + ': ' if shown else ''}{exc.strerror or exc}", USAGE_ERROR)
        except RecursionError:  # input nested beyond what a parser or a walk can take
            fail(
                "the input is nested too deeply to process (Python's recursion limit)",
                RUNTIME_ERROR,
            )
        except ValueError as exc:  # e.g. a number too long for Python to convert
            fail(_first_line(str(exc) or type(exc).__name__, 200), RUNTIME_ERROR)


class _Group(typer.core.TyperGroup):
    """The command group, its own ``--help`` shown without a type."""

    def get_help_option(self, ctx: Any) -> Any:
        """The help option, shown without a type."""
        option = super().get_help_option(ctx)
        if option is not None:
            option.metavar = ""
        return option


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    help="Fold long agent histories into hierarchical summaries under a token budget.",
    epilog=EXIT_STATUS,
)
console = Console(width=None if sys.stdout.isatty() else 160)
errors = Console(stderr=True, soft_wrap=True)
"""Error messages go to stderr, so a piped report stays clean."""
"""Tables are wide: when the output is not a terminal, do not squeeze them to 80 columns."""


PLUGINS = "ctxfold.commands"
"""The entry-point group of packages that add commands to ``ctxfold``.

Each entry point names a callable taking the :data:`app` (a :class:`typer.Typer`)
and registering its commands on it with ``cls=Command``; the benchmark package
(``foldbench``) adds ``demo``, ``bench``, ``replay``, ``policies`` and ``sweep``
this way.
"""


def load_plugins() -> list[str]:
    """Register the commands of every installed ``ctxfold`` plugin (once each).

    Returns
    -------
    list of str
        The entry points loaded, as ``name = module:attr``. A plugin that cannot be
        imported is skipped with a warning on stderr; the core commands still run.
    """
    from importlib.metadata import entry_points

    loaded: list[str] = []
    for ep in sorted(entry_points(group=PLUGINS), key=lambda e: e.name):
        if ep.value in _LOADED:
            loaded.append(f"{ep.name} = {ep.value}")
            continue
        try:
            register = ep.load()
            register(app)
        except ImportError as exc:
            errors.print(f"[yellow]warning:[/yellow] ctxfold plugin {ep.name!r} not loaded: {exc}")
            continue
        _LOADED.add(ep.value)
        loaded.append(f"{ep.name} = {ep.value}")
    return loaded


_LOADED: set[str] = set()


def main() -> None:
    """Entry point of the ``ctxfold`` console script."""
    load_plugins()
    app()


def fail(message: str, code: int = USAGE_ERROR) -> NoReturn:
    """Print ``message`` as an error on stderr and leave with ``code``."""
    errors.print(f"[red]error:[/red] {escape(message)}", highlight=False)
    raise typer.Exit(code)


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


def _shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def block_preview(block: Any, width: int = 60) -> str:
    """A one-line preview of a stored content block.

    Parameters
    ----------
    block : dict
        A content block as the store keeps it (``type`` and its fields).
    width : int
        At most this many characters of the block's own text.

    Returns
    -------
    str
        The text of a text block; ``tool_use name({...})`` for a call;
        ``tool_result(<id>): <first chars>`` for a result (``error`` after the id
        when it failed); ``thinking: ...``; ``[image]``.

    Examples
    --------
    >>> block_preview({"type": "tool_use", "id": "c1", "name": "ls", "input": {"p": "."}})
    'tool_use ls({"p": "."})'
    >>> block_preview({"type": "tool_result", "tool_use_id": "c1", "content": "a.py\\nb.py"})
    'tool_result(c1): a.py b.py'
    """
    if not isinstance(block, dict):
        return _shorten(str(block), width)
    kind = block.get("type")
    if kind == "text":
        return _shorten(str(block.get("text", "")), width)
    if kind == "tool_use":
        arguments = json.dumps(block.get("input") or {}, ensure_ascii=False, default=str)
        return f"tool_use {block.get('name', '?')}({_shorten(arguments, width)})"
    if kind == "tool_result":
        content = block.get("content", "")
        if isinstance(content, list):
            content = " ".join(
                str(part.get("text", "[image]")) if isinstance(part, dict) else str(part)
                for part in content
            )
        call = str(block.get("tool_use_id", "?")) + (", error" if block.get("is_error") else "")
        return f"tool_result({call}): {_shorten(str(content), width)}"
    if kind == "thinking":
        return f"thinking: {_shorten(str(block.get('thinking', '')), width)}"
    if kind == "image":
        return "[image]"
    return f"[{kind}]"


def message_preview(content: Sequence[Any], width: int = 90) -> str:
    """A one-line preview of a stored message's content blocks, joined by `` | ``.

    Parameters
    ----------
    content : sequence of dict
        The message's content blocks as the store keeps them.
    width : int
        At most this many characters in all.

    Returns
    -------
    str
        See :func:`block_preview`; ``(empty)`` for a message without visible content.
    """
    each = max(24, width // max(1, len(content)))
    parts = [p for p in (block_preview(b, each) for b in content) if p]
    return _shorten(" | ".join(parts), width) if parts else "(empty)"


def _first_line(text: str, width: int = 60) -> str:
    """The first line of ``text``, cut to ``width`` characters."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 3] + "..."


@contextlib.contextmanager
def _snapshot(store: Path) -> Iterator[Path]:
    """A consistent copy of the store file ``store``, read through SQLite as a reader
    (so a writer's log is included and the writer is never waited for), in a scratch
    folder removed afterwards."""
    import sqlite3

    from .topology.store_files import audit_scratch

    with audit_scratch(os.path.realpath(store)) as folder:
        copy = folder / "snapshot.db"
        source = sqlite3.connect(store.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            with contextlib.closing(sqlite3.connect(copy)) as target:
                source.backup(target)
        finally:
            source.close()
        yield copy


@app.command(cls=Command)
def inspect(
    store: Annotated[Path, typer.Argument(help="A context manager store (SQLite file).")],
    namespace: Annotated[
        str, typer.Option(help="The strategy namespace (the part of a slot before '/').")
    ] = "default",
    last: Annotated[int, typer.Option(min=1, help="How many of the newest messages to list.")] = 10,
    read_only: Annotated[
        bool,
        typer.Option(
            "--read-only",
            help="Look at a store a running agent holds: read a snapshot of it, taken "
            "beside it as a reader while the agent writes, instead of opening it.",
        ),
    ] = False,
) -> None:
    """Describe a store: messages, branches, the memory tree, resolutions and pins.

    A store a running agent holds is refused (opening it would take its writer lock);
    --read-only describes a snapshot of it instead.
    """
    import sqlite3

    from .store import NotAStoreError, Store, StoreError, check_store_tables, store_tables

    if not store.is_file():
        fail(f"{store} is not a file")
    # look before opening: opening a store writes to it. The read-only probe needs a URI;
    # as_uri() percent-encodes the path, so '#', '?' and '%' in a name stay part of it
    probe_uri = store.resolve().as_uri() + "?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(probe_uri, uri=True)) as probe:
            tables = store_tables(probe)
            slots = (
                [r[0] for r in probe.execute("SELECT DISTINCT slot FROM records")]
                if "records" in tables
                else []
            )
    except sqlite3.DatabaseError as exc:
        fail(f"{store} is not a SQLite database: {exc}")
    try:
        check_store_tables(str(store), tables, complete=True)
    except NotAStoreError as exc:
        fail(str(exc))
    namespaces = sorted(
        {slot.rsplit("/", 1)[0] for slot in slots if isinstance(slot, str) and "/" in slot}
    )
    if namespace not in namespaces and (namespaces or namespace != "default"):
        fail(
            f"{store} has no namespace {namespace!r}; "
            + (
                f"its namespaces: {', '.join(namespaces)}"
                if namespaces
                else "no strategy has written to it yet"
            )
        )
    stack = contextlib.ExitStack()
    try:
        db = Store.open(stack.enter_context(_snapshot(store)) if read_only else store)
    except (StoreError, OSError, sqlite3.Error) as exc:
        stack.close()
        fail(f"cannot open {store}: {exc}")
    with stack, db:
        messages = db.items("messages")
        console.print(
            f"[bold]{store}[/bold]: branch {db.branch!r} of "
            f"{', '.join(b.name for b in db.list_branches())}; {len(messages):,} messages"
        )
        frame = db.get(f"{namespace}/frame")
        frame = frame if isinstance(frame, dict) else {}
        system, tools = frame.get("system"), frame.get("tools")
        console.print(
            "  system prompt: "
            + (f"{len(system):,} characters: {_first_line(system)}" if system else "none"),
            markup=False,
            highlight=False,
        )
        names = [t.get("name", "?") for t in tools or () if isinstance(t, dict)]
        console.print(
            f"  tools: {len(names)}" + (f" ({', '.join(map(str, names))})" if names else ""),
            markup=False,
            highlight=False,
        )
        for item in messages[-last:]:
            body = item.body
            text = message_preview(body.get("content", []))
            console.print(
                f"  {item.id:>6} {body.get('participant', '?'):<12} {text}",
                markup=False,
                highlight=False,
            )
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
            label = f"[cyan]{s.id}[/cyan] L{s.level}: {escape(repr(s.content[:70]))}"
            if s.values:  # the exact values it keeps, the first few
                more = f" (+{len(s.values) - 4})" if len(s.values) > 4 else ""
                label += f" [dim]values: {escape('; '.join(s.values[:4]))}{more}[/dim]"
            node = branch.add(label)
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
        console.print(_window_line(db, namespace, [item.id for item in messages]))


def _window_line(db: Any, namespace: str, record: Sequence[str]) -> str:
    """What the namespace's agent window holds, against the shared record."""
    from .window import WindowIndex, WindowRecord

    items = db.items(f"{namespace}/window")
    if not items:
        return "window: the record (no host has presented rows)"
    index = WindowIndex.replay(WindowRecord.from_body(i.body, i.seq) for i in items)
    stored = set(record)
    held = [r for r in index.held() if r in stored]
    undone = sum(1 for r in record if index.was_undone(r))
    never = sum(1 for r in record if not index.holds(r) and not index.was_undone(r))
    return (
        f"window: {len(held):,} rows presented ({len(items):,} records), {undone:,} "
        f"taken out, {never:,} stored but not presented"
    )


AUDIT_STATUS = (
    "Exit status: 0 every memory is sound and every row readable; 1 findings or damaged "
    "rows (run `ctxfold repair STORE` for the plan); 2 a usage error: the path is not a "
    "readable store, has no such namespace or branch, or a running agent holds it (its lock)."
)
REPAIR_STATUS = (
    "Exit status: 0 nothing to repair, or repaired with --apply; 1 a repair is planned "
    "but not applied (no --apply), or the repaired copy did not audit clean and the "
    "store was left as it was; 2 a usage error: the path is not a readable store, has "
    "no such namespace or branch, or a running agent holds it (its lock)."
)

_NamespaceOption = Annotated[
    str, typer.Option(help="The strategy namespace (the part of a slot before '/').")
]
_BranchOption = Annotated[
    str | None,
    typer.Option(help="The branch to look at.", show_default="the store's current branch"),
]


def _store_failure(exc: Exception) -> NoReturn:
    """A store that cannot be audited now: a usage error naming why and the fix."""
    from .store import StoreLockedError

    if isinstance(exc, StoreLockedError):
        fail(f"{exc}; the store was not read or changed")
    if isinstance(exc, OSError):
        fail(f"cannot read the store: {exc.strerror or exc}")
    fail(str(exc))


def _print_findings(findings: Sequence[Any]) -> None:
    for finding in findings:
        console.print(f"  {finding.describe()}", markup=False, highlight=False)


@app.command(cls=Command, epilog=AUDIT_STATUS)
def audit(
    store: Annotated[Path, typer.Argument(help="A context manager store (SQLite file).")],
    namespace: _NamespaceOption = "default",
    branch: _BranchOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the findings as JSON.")] = False,
) -> None:
    """Check that each memory covers a contiguous run of messages, and the tree's rest.

    The rest: contents, unique ids, parent pointers and chunk records. Rows of the file
    that cannot be read (damaged bytes) are listed first, and the tree is checked over
    the rows that can. Reads a copy of
    the store; the file is never written. Refuses a store a running agent holds (its
    lock): stop the agent first.
    """
    from .store import StoreError
    from .topology import audit_store

    try:
        result = audit_store(store, namespace=namespace, branch=branch)
    except (StoreError, OSError) as exc:
        _store_failure(exc)
    counts = result.counts()
    if json_out:
        typer.echo(
            json.dumps(
                {
                    "store": result.path,
                    "namespace": result.namespace,
                    "branch": result.branch,
                    **counts,
                    "clean": not result.findings and not result.damaged,
                    "findings": [f.to_dict() for f in result.findings],
                    "damaged": [d.to_dict() for d in result.damaged],
                },
                indent=2,
            )
        )
    else:
        levels = ", ".join(f"{k}: {v}" for k, v in counts["levels"].items()) or "none"
        console.print(
            f"{store}: branch {result.branch!r}, {counts['messages']:,} messages, "
            f"{counts['summaries']:,} memory records ({levels}), {counts['chunks']:,} chunk "
            "records",
            markup=False,
            highlight=False,
        )
        if result.damaged:
            n = len(result.damaged)
            console.print(
                f"{n} damaged row{'s' if n != 1 else ''} (left out of what follows; "
                f"`ctxfold repair {store} --apply` copies every other row into a new store):",
                markup=False,
                highlight=False,
            )
            _print_findings(result.damaged)
        if not result.findings:
            console.print("clean: every memory covers a contiguous run of messages")
        else:
            n = len(result.findings)
            console.print(f"{n} finding{'s' if n != 1 else ''}:")
            _print_findings(result.findings)
            console.print(
                f"`ctxfold repair {store}` shows the plan; --apply carries it out",
                markup=False,
                highlight=False,
            )
    if result.findings or result.damaged:
        raise typer.Exit(RUNTIME_ERROR)


def _print_repair(store: Path, result: Any, apply: bool) -> None:
    """The findings of a repair, its plan and what became of it."""
    salvaged = bool(result.damaged)
    head = f"{store}: branch {result.branch!r}: "
    if salvaged:
        n = len(result.damaged)
        console.print(f"{head}{n} damaged row{'s' if n != 1 else ''}", markup=False)
        _print_findings(result.damaged)
        if result.findings:
            console.print("and in the rows that can be read:")
    else:
        n = len(result.findings)
        console.print(f"{head}{n} finding{'s' if n != 1 else ''}", markup=False)
    _print_findings(result.findings)
    if result.findings:
        k = len(result.actions)
        removed = "" if salvaged else "; no message is removed"
        console.print(f"plan ({k} action{'s' if k != 1 else ''}{removed}):")
        for action in result.actions:
            console.print(f"  {action.describe()}", markup=False, highlight=False)
    what = (
        "every row that can be read was copied into a new store"
        if salvaged
        else ("the plan was applied to a copy")
    )
    if result.applied:
        console.print(
            f"repaired: {what} ({result.messages_after:,} messages), which audits clean; it "
            f"replaced {result.path}, and the original is kept as {result.backup}",
            markup=False,
            highlight=False,
        )
    elif apply:
        copy = "salvaged" if salvaged else "repaired"
        console.print(f"the {copy} copy still has findings; the store was not changed:")
        _print_findings(result.after)
    else:
        step = (
            "copy every row that can be read into a new store that replaces this one"
            if (salvaged)
            else "repair (on a copy that replaces the store once it audits clean)"
        )
        console.print(
            f"dry run: nothing was changed; run with --apply to {step}; the original is "
            "kept as .bak"
        )


@app.command(cls=Command, epilog=REPAIR_STATUS)
def repair(
    store: Annotated[Path, typer.Argument(help="A context manager store (SQLite file).")],
    apply: Annotated[
        bool, typer.Option("--apply", help="Carry the plan out (without it, only print it).")
    ] = False,
    namespace: _NamespaceOption = "default",
    branch: _BranchOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Plan a repair of what `ctxfold audit` finds, and with --apply carry it out.

    A broken memory is dropped with the memories above it, and its chunk record
    reopened, so the strategy summarises those messages again; pointers and ranges are
    fixed. No message is removed, except a damaged one: when rows of the file cannot
    be read, every row that can is copied into a new store first, and that is repaired.
    With --apply the plan is applied to a copy, which
    must audit clean before it replaces the store; the original is kept as STORE.bak.
    Refuses a store a running agent holds (its lock): stop the agent first.
    """
    from .store import StoreError
    from .topology import repair_store

    try:
        result = repair_store(store, apply=apply, namespace=namespace, branch=branch)
    except (StoreError, OSError) as exc:
        _store_failure(exc)
    if json_out:
        typer.echo(
            json.dumps(
                {
                    "store": result.path,
                    "namespace": result.namespace,
                    "branch": result.branch,
                    "findings": [f.to_dict() for f in result.findings],
                    "actions": [a.to_dict() for a in result.actions],
                    "applied": result.applied,
                    "backup": result.backup,
                    "after": [f.to_dict() for f in result.after],
                    "messages_before": result.messages_before,
                    "messages_after": result.messages_after,
                    "damaged": [d.to_dict() for d in result.damaged],
                },
                indent=2,
            )
        )
    elif not result.findings and not result.damaged:
        console.print(
            f"{store}: branch {result.branch!r}: nothing to repair", markup=False, highlight=False
        )
    else:
        _print_repair(store, result, apply)
    if (result.findings or result.damaged) and not result.applied:
        raise typer.Exit(RUNTIME_ERROR)
