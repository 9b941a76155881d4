"""solvers: fold-depth algorithms over :mod:`folding` problems."""
