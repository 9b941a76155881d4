"""``ctxfold serve``: the context service over HTTP (the ``service`` extra)."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Annotated

import typer

from .base import USAGE_ERROR, Command, app, fail


@app.command(cls=Command)
def serve(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="The service configuration (YAML); it is reloaded when it changes or on "
            "SIGHUP. CTXFOLD_<SECTION>__<FIELD> environment variables override it.",
        ),
    ] = None,
    host: Annotated[
        str | None, typer.Option(help="Address to listen on (default: the configuration's).")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(min=0, max=65535, help="Port to listen on (default: the configuration's)."),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Serve the context manager and the four assembly functions over HTTP.

    SIGTERM or Ctrl-C stops it gracefully: requests in progress finish, background
    ticks stop and every agent's store is closed.
    """
    try:
        import uvicorn

        from ..service.app import create_app
    except ImportError as exc:
        fail(
            f"the service needs the 'service' extra ({exc.name} is missing): "
            "pip install 'context-folding[service]'",
            USAGE_ERROR,
        )
    from ..service import LiveSettings, SettingsError

    try:
        live = LiveSettings(config, environ=os.environ)
    except SettingsError as exc:
        fail(str(exc), USAGE_ERROR)
    settings = live.current
    if not settings.keys and not settings.allow_anonymous:
        fail(
            "no API keys are configured: add keys (each with the sha256 of its key) or set "
            "allow_anonymous: true where the network is the boundary",
            USAGE_ERROR,
        )
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    live.install_sighup()
    application = create_app(live, environ=os.environ, watch=True)
    uvicorn.run(
        application,
        host=host or settings.host,
        port=settings.port if port is None else port,
        log_level=log_level,
        timeout_graceful_shutdown=int(settings.deadline_seconds()) + 1,
        timeout_keep_alive=math.ceil(settings.limits.keep_alive_seconds),
    )
