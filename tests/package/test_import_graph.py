"""The import graph of the packages, read with ``ast``: layers point down and no module
reaches into another module's private names.

Every ``.py`` file of folding, solvers, context_manager and foldbench is read: its
code (imports under ``if TYPE_CHECKING:`` and inside functions included, and
``importlib.import_module`` / ``__import__`` calls with a literal name) and the
examples of its docstrings (every string holding ``>>>`` lines, read as doctest
reads them).
"""

from __future__ import annotations

import ast
import doctest
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PACKAGES = ("folding", "solvers", "context_manager", "foldbench")

FORBIDDEN = {
    "folding": {"solvers", "context_manager", "foldbench"},
    "solvers": {"context_manager", "foldbench"},
}
"""Top-level package -> the packages it must not import (the core is pure; the
benchmark is not part of the library)."""

# The private names still imported across modules, as (importing file, imported name),
# each waiting to be made public or moved where it belongs (none today). Remove an entry
# when its import goes: the test fails while an entry names an import that is gone.
PRIVATE_IMPORTS_ALLOWED: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Import:
    """One import found in a file."""

    file: str
    """The importing file, relative to the repository root."""
    line: int
    module: str
    """The absolute module imported from (or imported)."""
    name: str | None
    """The name imported from ``module`` (None for ``import module``)."""
    in_docstring: bool


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _imports_of(
    tree: ast.AST, path: Path, root: Path, in_docstring: bool, line: int = 0
) -> Iterator[Import]:
    file = path.relative_to(root).as_posix()
    name = module_name(path, root)
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(tree):
        at = line + getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(file, at, alias.name, None, in_docstring)
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                yield Import(file, at, source, alias.name, in_docstring)
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module", "__import__")
        ):
            yield Import(file, at, node.args[0].value, None, in_docstring)


def _examples(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, source) of every doctest example in the file's strings."""
    parser = doctest.DocTestParser()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and ">>>" in node.value:
            try:
                examples = parser.get_examples(node.value)
            except ValueError:  # not a doctest after all
                continue
            for example in examples:
                yield node.lineno + example.lineno, example.source


def imports(path: Path, root: Path = ROOT) -> Iterator[Import]:
    """The imports of the file at ``path`` (a module of a package under ``root``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    yield from _imports_of(tree, path, root, in_docstring=False)
    for line, source in _examples(tree):
        try:
            example = ast.parse(source)
        except SyntaxError:
            continue
        yield from _imports_of(example, path, root, in_docstring=True, line=line - 1)


def every_import(root: Path = ROOT) -> list[Import]:
    """The imports of every module of the packages under ``root``."""
    files = sorted(p for package in PACKAGES for p in (root / package).rglob("*.py"))
    return [found for path in files for found in imports(path, root)]


def private_imports(found: list[Import]) -> set[tuple[str, str]]:
    """(file, name) of every underscored name imported from another module.

    ``from x import _y`` and ``import x._y`` count; a name imported from a private
    module (``from solvers._base import get``) does not, nor a package's
    ``__init__.py`` loading its own private submodules.
    """
    out: set[tuple[str, str]] = set()
    for imp in found:
        if imp.in_docstring:
            continue  # examples are read for layers only
        package = imp.file.removesuffix("/__init__.py").replace("/", ".")
        if not imp.file.endswith("/__init__.py"):
            package = None
        if imp.name is not None:
            if not is_private(imp.name):
                continue
            if package is not None and imp.module == package:
                continue  # ``from . import _sub`` in the package's own __init__.py
            out.add((imp.file, imp.name))
        else:
            parts = imp.module.split(".")
            for i, part in enumerate(parts):
                if is_private(part) and ".".join(parts[:i]) != package:
                    out.add((imp.file, part))
    return out


def test_the_walk_sees_every_package_and_the_doctests() -> None:
    found = every_import()
    files = {imp.file.split("/")[0] for imp in found}
    assert files == set(PACKAGES)
    assert any(imp.in_docstring and imp.module == "folding.testing" for imp in found)
    assert any(imp.file == "context_manager/topology/__init__.py" and imp.name for imp in found)


def test_no_module_imports_another_modules_private_name() -> None:
    found = private_imports(every_import())
    unexpected = sorted(found - PRIVATE_IMPORTS_ALLOWED)
    assert not unexpected, (
        "private names imported from another module (make the name public where it is "
        f"shared, or move the helper where it belongs): {unexpected}"
    )


def test_the_allowlist_names_only_imports_that_still_exist() -> None:
    gone = sorted(PRIVATE_IMPORTS_ALLOWED - private_imports(every_import()))
    assert not gone, f"these imports are gone: remove them from PRIVATE_IMPORTS_ALLOWED: {gone}"


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_layers_point_down_in_code_and_doctests(package: str) -> None:
    upward = sorted(
        f"{imp.file}:{imp.line} imports {imp.module}"
        + (" (in a doctest)" if imp.in_docstring else "")
        for path in sorted((ROOT / package).rglob("*.py"))
        for imp in imports(path)
        if imp.module.split(".")[0] in FORBIDDEN[package]
    )
    assert not upward, upward


def test_the_checks_catch_what_they_are_meant_to(tmp_path: Path) -> None:
    """The walk on made-up modules: each form of import is read as intended."""
    (tmp_path / "folding").mkdir()
    probe = tmp_path / "folding" / "probe.py"
    probe.write_text(
        '''"""Example.

>>> from foldbench.synthetic import chronicle
>>> import solvers; solvers.names()[:0]
[]
"""
from .render import _layout
from folding._arrays import unique_sorted
import solvers._base
import importlib
importlib.import_module("context_manager")
''',
        encoding="utf-8",
    )
    init = tmp_path / "folding" / "__init__.py"
    init.write_text("from . import _arrays\nfrom ._arrays import unique_sorted\n", encoding="utf-8")
    found = list(imports(probe, tmp_path))
    assert private_imports(found) == {
        ("folding/probe.py", "_layout"),
        ("folding/probe.py", "_base"),
    }
    assert private_imports(list(imports(init, tmp_path))) == set()
    upward = {(imp.module.split(".")[0], imp.in_docstring) for imp in found}
    assert {("foldbench", True), ("solvers", True), ("solvers", False)} <= upward
    assert ("context_manager", False) in upward
    lines = {imp.module: imp.line for imp in found}
    assert lines["foldbench.synthetic"] == 3 and lines["folding.render"] == 7
