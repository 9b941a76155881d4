"""The notebooks under notebooks/: committed with their outputs, kept small, and they run.

The committed outputs are what ``python notebooks/execute.py`` saves (the small scale,
60-dpi figures), so a reader sees the figures without running anything. Each notebook
is also executed here at the small scale (``CTXFOLD_NOTEBOOK_SCALE=small``) with the
``python3`` kernel; jupyter_client starts that kernel with this interpreter, which a
cell appended in memory checks.
"""

from __future__ import annotations

import sys
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from tests.support.paths import ROOT

NOTEBOOKS = ROOT / "notebooks"
TIMEOUT = 180  # seconds per cell

# notebook -> (least number of figures, texts its outputs must contain)
EXPECTED: dict[str, tuple[int, tuple[str, ...]]] = {
    "01-hierarchy-tour.ipynb": (
        3,
        (
            "rules ['not-tileable']",
            "rules ['no-summary', 'zone']",
            "rules ['budget']",
            "kv_cost(old, old) = 0",
            "hit rate",
        ),
    ),
    "02-solver-comparison.ipynb": (
        4,
        ("brute-force: optimal", "hit rate", "churn", "a plan at"),
    ),
    "03-adapter-walkthrough.ipynb": (
        1,
        ("decision", "recall pairs", "What do you remember from earlier?"),
    ),
}


def test_every_notebook_is_covered() -> None:
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(EXPECTED)


MAX_BYTES = 256 * 1024
"""The most one committed notebook may weigh, outputs included."""


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_is_committed_with_small_outputs_from_one_run(name: str) -> None:
    path = NOTEBOOKS / name
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    # executed top to bottom in one run, as notebooks/execute.py saves them
    assert code and [c.execution_count for c in code] == list(range(1, len(code) + 1))
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert any(c.cell_type == "markdown" for c in nb.cells)
    assert path.stat().st_size <= MAX_BYTES
    outputs = _outputs(nb)
    assert not [o for o in outputs if o.output_type == "error"]
    figures, texts = EXPECTED[name]
    assert len([o for o in outputs if "image/png" in o.get("data", {})]) >= figures
    text = "\n".join(_text(o) for o in outputs)
    assert all(expected in text for expected in texts)


def _outputs(nb: Any) -> list[Any]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


def _text(output: Any) -> str:
    if output.output_type == "stream":
        return str(output.text)
    return str(output.get("data", {}).get("text/plain", ""))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_runs_at_small_scale(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXFOLD_NOTEBOOK_SCALE", "small")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.prefix)"))
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=TIMEOUT,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()
    outputs = _outputs(nb)
    assert not [o for o in outputs if o.output_type == "error"]
    assert not [o for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    figures, texts = EXPECTED[name]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= figures
    text = "\n".join(_text(o) for o in outputs)
    for expected in texts:
        assert expected in text, expected
    assert _text(nb.cells[-1].outputs[0]).strip() == sys.prefix
