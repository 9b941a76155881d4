"""The JSON Schema of :class:`~folding.model.FoldProblem`.

The schema shipped at ``folding/schemas/fold-problem.schema.json`` is
generated from the model; ``make schema`` rewrites it and the
test suite checks the two agree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .model import FoldProblem

__all__ = ["SCHEMA_PATH", "fold_problem_schema", "render_schema", "write_schema"]

SCHEMA_PATH = Path(__file__).parent / "schemas" / "fold-problem.schema.json"


def fold_problem_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a fold problem, as a dict."""
    schema = FoldProblem.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "fold-problem.schema.json"
    return schema


def render_schema() -> str:
    """The schema as the exact text of the shipped file."""
    return json.dumps(fold_problem_schema(), indent=2, sort_keys=True) + "\n"


def write_schema(path: Path = SCHEMA_PATH) -> Path:
    """Write the schema file (``make schema``) and return its path."""
    path.write_text(render_schema(), encoding="utf-8")
    return path
