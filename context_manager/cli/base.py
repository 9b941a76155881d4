"""The ``ctxfold`` application itself: the :data:`app` the commands register on, the
:class:`Command` class that answers the library's errors in one line, the exit
statuses, the consoles, :func:`fail`, and the loading of plugin commands.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand

from folding import FoldingError

from .limits import InputLimitError
from .previews import first_line

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
        from ..errors import ContextManagerError
        from ..store import StoreCorruptError, StoreError

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
            fail(first_line(str(exc) or type(exc).__name__, 200), RUNTIME_ERROR)


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
