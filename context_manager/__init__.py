"""context_manager: the application layer over :mod:`folding` and :mod:`solvers`."""
