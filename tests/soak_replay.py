"""Replay a failing soak run as hypothesis printed it: ``python tests/soak_replay.py FILE``.

``FILE`` holds the ``state.<rule>(...)`` lines and ``Draw k: value`` lines of a failing
case (``tests/soak.py --no-shrink`` prints them); each rule is called with its draws in
order and the machine's invariants are checked after every step, so the run fails
where the soak did. A drawn memory (``SummaryEntry(...)``) is looked up by its id.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

# the repository root, ahead of this folder: its test folders are named like the packages
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.replay import replay

if __name__ == "__main__":
    logging.disable(logging.WARNING)
    print(f"{replay(Path(sys.argv[1]).read_text())} steps, no failure")
