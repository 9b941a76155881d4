"""foldbench: the policy benchmark for :mod:`context_manager` and its peers.

Not part of the library: it replays real and synthetic agent transcripts through
our strategy and through other context-management policies (LangChain,
LlamaIndex, SWE-agent, LangMem, observation masking, ...), counts every
request with one exact counter, and reports the bill, the facts kept and the
tool-call arguments kept in view.

Install it with the ``bench`` extra (``pip install 'context-folding[bench]'``);
the ``ctxfold demo | bench | replay | policies | sweep`` commands come from here.

Modules
-------
benchmark
    The replay harness, its records and its report.
loaders
    Transcript readers (SWE-agent, tau-bench, OpenAI / Anthropic chats, BFCL, chitchat).
peers
    The policies compared: ours and the peers, each as its users run it.
plant
    Facts planted in a transcript's tool results and user turns, early, midway and late.
synthetic
    Seeded synthetic fold problems and histories (re-exported from :mod:`folding.testing`).
solver_replay
    Solver-level replays: a growing conversation under a moving wall.

>>> sorted(p.name for p in dataset("tau-bench").iterdir())
['LICENSE', 'README.md', 'airline-gpt-4o-150.json']
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["DATASETS", "dataset"]

DATASETS = ("swe-agent", "tau-bench")
"""The bundled datasets (each folder keeps its licence beside the data)."""


def dataset(name: str) -> Path:
    """The folder of a bundled dataset, found through the package's resources.

    Parameters
    ----------
    name : str
        One of :data:`DATASETS`.

    Returns
    -------
    Path
        An existing folder holding the data, its ``LICENSE`` and a ``README.md``.

    Raises
    ------
    ValueError
        When ``name`` is not a bundled dataset.
    FileNotFoundError
        When the installed package lacks the data (a broken install).

    Examples
    --------
    >>> (dataset("swe-agent") / "LICENSE").is_file()
    True
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; the bundled ones are {', '.join(DATASETS)}")
    folder = Path(str(resources.files(__name__).joinpath("data", name)))
    if not folder.is_dir():
        raise FileNotFoundError(
            f"the bundled dataset {name!r} is missing from {folder}; reinstall context-folding"
        )
    return folder
