"""Print the public API, one line per name: ``python tests/api_listing.py > api.txt``.

Every module of folding, solvers and context_manager whose dotted path has no
underscored part, each of its public names (``__all__`` where it has one) with its
signature, and for each class of the packages its public members (inherited ones
included) with theirs. Memory addresses are left out and the repository root is
written ``ROOT``, so listings of two checkouts diff cleanly (the packages are read
from the import path, so an older checkout is listed by this script too)::

    git worktree add /tmp/base v1
    PYTHONPATH=/tmp/base python tests/api_listing.py > before.txt
    python tests/api_listing.py > after.txt && diff before.txt after.txt
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
import warnings
from pathlib import Path

PACKAGES = ("folding", "solvers", "context_manager")


def _signature(obj: object) -> str:
    try:
        return str(inspect.signature(obj)) if callable(obj) else ""  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""


def _clean(line: str) -> str:
    line = re.sub(r" at 0x[0-9a-f]+", "", line)
    line = re.sub(r"\(self: '[A-Za-z]+'", "(self", line)  # a mixin's self-type
    root = str(Path(importlib.import_module("folding").__file__ or ".").resolve().parents[1])
    return line.replace(root, "ROOT")


def listing() -> list[str]:
    """The lines of the listing, in a stable order."""
    warnings.simplefilter("ignore")
    out: list[str] = []
    for package in PACKAGES:
        root = importlib.import_module(package)
        names = [package] + [m.name for m in pkgutil.walk_packages(root.__path__, package + ".")]
        for name in sorted(names):
            if any(part.startswith("_") for part in name.split(".")):
                continue
            try:
                module = importlib.import_module(name)
            except Exception as exc:  # a module that cannot be imported is listed so
                out.append(f"{name}: IMPORT FAILED {type(exc).__name__}")
                continue
            public = getattr(module, "__all__", None) or [
                n for n in vars(module) if not n.startswith("_")
            ]
            for attr in sorted(set(public)):
                obj = getattr(module, attr, None)
                if inspect.ismodule(obj):
                    continue
                out.append(_clean(f"{name}.{attr}{_signature(obj)}"))
                if inspect.isclass(obj) and obj.__module__.startswith(package):
                    for member in sorted(dir(obj)):
                        if member.startswith("_") and member != "__init__":
                            continue
                        value = getattr(obj, member, None)
                        out.append(_clean(f"{name}.{attr}.{member}{_signature(value)}"))
    return out


if __name__ == "__main__":
    # a script's folder comes first on the path, and the test folders here are named like
    # the packages: it is left out, so the packages are read from the import path
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    print("\n".join(listing()))
