"""The context service: the manager and the four assembly functions over HTTP.

``ctxfold serve --config service.yaml`` runs it (the ``service`` extra installs
FastAPI and uvicorn); :func:`create_app` builds the ASGI application for any server
or for tests; :class:`~context_manager.client.ContextClient` calls it with the same
methods as the in-process API.

Parts: :mod:`.settings` (the configuration model and its loading), :mod:`.reload`
(hot reload), :mod:`.agents` (one manager per agent, opened lazily, closed when idle),
:mod:`.errors` (error codes and their statuses), :mod:`.metrics` (Prometheus text),
:mod:`.schemas` (the manager routes' bodies), :mod:`.app` (the routes),
:mod:`.functions` (the four functions as every transport answers them) and
:mod:`.worker` (the four functions registered on an iii engine: ``ctxfold worker``, the
``iii`` extra).
"""

from __future__ import annotations

from .errors import STATUS, ErrorBody, ServiceError
from .reload import LiveSettings
from .settings import ApiKey, ServiceSettings, SettingsError, hash_key, load_settings

__all__ = [
    "STATUS",
    "ApiKey",
    "ErrorBody",
    "LiveSettings",
    "ServiceError",
    "ServiceSettings",
    "SettingsError",
    "create_app",
    "hash_key",
    "load_settings",
]


def create_app(*args: object, **kwargs: object) -> object:
    """The ASGI application (:func:`.app.create_app`; imports FastAPI on first use)."""
    from .app import create_app as build

    return build(*args, **kwargs)  # type: ignore[arg-type]
