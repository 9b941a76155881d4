"""Test support shipped with the package: hypothesis strategies (and, for solver
authors, a conformance kit). Importing :mod:`folding.testing.strategies`
requires ``hypothesis``."""
