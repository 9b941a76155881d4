"""``ctxfold``: the command line.

The package splits it by job: :mod:`.base` (the application, its command class, exit
statuses, consoles and plugins), :mod:`.limits` (the limits of what it reads and
draws), :mod:`.previews` (one-line previews of stored content), :mod:`.problems` (the
commands on fold problems), :mod:`.serve` (the context service over HTTP), :mod:`.stores`
(the commands on stores) and :mod:`.worker` (the assembly functions on an iii engine).
Importing it registers the commands, in that order. This module is the facade: its names are the
public ones.
"""

from __future__ import annotations

from .base import EXIT_STATUS as EXIT_STATUS
from .base import NO_PLAN as NO_PLAN
from .base import PLUGINS as PLUGINS
from .base import RUNTIME_ERROR as RUNTIME_ERROR
from .base import USAGE_ERROR as USAGE_ERROR
from .base import Command as Command
from .base import app as app
from .base import console as console
from .base import errors as errors
from .base import fail as fail
from .base import load_plugins as load_plugins
from .base import main as main
from .limits import MAX_INPUT_BYTES as MAX_INPUT_BYTES
from .limits import MAX_JSON_DEPTH as MAX_JSON_DEPTH
from .limits import MAX_NUMBER_DIGITS as MAX_NUMBER_DIGITS
from .limits import MAX_TREE_DEPTH as MAX_TREE_DEPTH
from .limits import InputLimitError as InputLimitError
from .limits import check_json_limits as check_json_limits
from .limits import load_json as load_json
from .previews import block_preview as block_preview
from .previews import message_preview as message_preview
from .problems import example as example
from .problems import list_solvers as list_solvers
from .problems import schema as schema
from .problems import show as show
from .problems import solve as solve
from .problems import validation_summary as validation_summary
from .serve import serve as serve
from .stores import AUDIT_STATUS as AUDIT_STATUS
from .stores import REPAIR_STATUS as REPAIR_STATUS
from .stores import audit as audit
from .stores import inspect as inspect
from .stores import repair as repair
from .worker import worker as worker

# Names this module imported for its own use before it was split; reading one from here
# warns with DeprecationWarning and gives the object from its home (next release: gone).
_IMPORTED_BEFORE = {
    "Annotated": "typing",
    "Any": "typing",
    "NoReturn": "typing",
    "Iterator": "collections.abc",
    "Sequence": "collections.abc",
    "Path": "pathlib",
    "accumulate": "itertools",
    "Console": "rich.console",
    "Table": "rich.table",
    "Tree": "rich.tree",
    "escape": "rich.markup",
    "TyperCommand": "typer.core",
    "ValidationError": "pydantic",
    "FoldProblem": "folding",
    "FoldingError": "folding",
    "Status": "folding",
    "Conflict": "folding",
    "cheapest_frontier": "folding",
    "finest_frontier": "folding",
    "render": "folding",
    "SummaryEntry": "context_manager.strategies.autobiographical",
    "read_records": "context_manager.strategies.autobiographical",
}


def __getattr__(name: str) -> object:
    home = _IMPORTED_BEFORE.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    import warnings

    warnings.warn(
        f"context_manager.cli.{name} is deprecated and will be removed in the next release; "
        f"import {name} from {home}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(home), name)
