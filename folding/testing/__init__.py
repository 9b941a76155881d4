"""Test support shipped with the package.

Seeded problem generators (importable from here, defined in
:mod:`folding.testing.synthetic`), hypothesis strategies
(:mod:`folding.testing.strategies`) and, for solver authors, a conformance kit
(:mod:`folding.testing.conformance`). Importing :mod:`folding.testing` needs
nothing beyond the library's dependencies; the strategies need ``hypothesis``
and the conformance kit ``pytest`` as well.

Functions
---------
chronicle
    A regular chronicle: equal leaves, evenly chunked and merged.
random_problem
    A seeded random problem shaped like a real conversation (pins, locks, DAGs).
chunked_history
    A conversation chunked the way the autobiographical strategy chunks it.
agent_history
    A long agent history shaped like a live store, with a raw tail and a target.
summaries_over
    The summaries of a chronicle over given leaves, as JSON-ready dicts.

Examples
--------
>>> from folding.testing import agent_history
>>> agent_history(500).n_leaves
500
"""

from .synthetic import agent_history, chronicle, chunked_history, random_problem, summaries_over

__all__ = ["agent_history", "chronicle", "chunked_history", "random_problem", "summaries_over"]
