"""The public methods of :class:`~context_manager.ContextManager`, by job.

Each module holds one group of its methods (a mixin typed against the manager it is
part of): they check their arguments, run as operations and delegate to the parts
the manager owns (:mod:`context_manager.record_cache`, :mod:`context_manager.presented`,
:mod:`context_manager.compiler`, the strategy). ``context_manager.manager`` composes
them; import the manager from there or from ``context_manager``.
"""
