"""Run every notebook here at the small scale and save it with its outputs.

    python notebooks/execute.py [NOTEBOOK ...]

The notebooks are kept with their outputs, so a reader sees the figures without
running them; the small scale (``CTXFOLD_NOTEBOOK_SCALE=small``) and 60-dpi figures
keep each file small. The test suite runs them again on every change
(``tests/package/test_notebooks.py``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent


def main() -> None:
    """Execute the notebooks named (all here by default) and write them back."""
    os.environ["CTXFOLD_NOTEBOOK_SCALE"] = "small"
    names = [Path(a) for a in sys.argv[1:]] or sorted(HERE.glob("*.ipynb"))
    for path in names:
        nb = nbformat.read(path, as_version=4)
        NotebookClient(
            nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(HERE)}}
        ).execute()
        nbformat.write(nb, path)
        print(f"{path.name}: {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
