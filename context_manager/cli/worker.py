"""``ctxfold worker``: the four assembly functions on an iii engine (the ``iii`` extra)."""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from .base import RUNTIME_ERROR, USAGE_ERROR, Command, app, fail


@app.command(cls=Command)
def worker(
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="The engine's websocket address, e.g. ws://127.0.0.1:49134.",
        ),
    ],
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="The service configuration (YAML; its assembly and summarizer sections "
            "apply); it is reloaded when it changes or on SIGHUP. "
            "CTXFOLD_<SECTION>__<FIELD> environment variables override it.",
        ),
    ] = None,
    connect_timeout: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="Seconds to wait for the engine at start; past them the command fails. "
            "Once connected, a lost connection is retried without end.",
        ),
    ] = 10.0,
    name: Annotated[str, typer.Option(help="The worker's name on the engine.")] = "ctxfold",
    telemetry: Annotated[
        bool, typer.Option(help="Send the SDK's OpenTelemetry data to the engine.")
    ] = False,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
) -> None:
    """Register context::assemble, context::count-tokens, context::prune and
    context::compact on an iii engine and answer their invocations.

    SIGTERM or Ctrl-C disconnects and stops it; SIGHUP reloads the configuration.
    """
    if not engine.startswith(("ws://", "wss://")):
        fail(f"--engine {engine!r}: give the engine's websocket address, ws://HOST:PORT")
    try:
        import iii  # noqa: F401

        from ..service.worker import WorkerError, run_worker
    except ImportError as exc:
        fail(
            f"the worker needs the 'iii' extra ({exc.name} is missing): "
            "pip install 'context-folding[iii]'",
            USAGE_ERROR,
        )
    from ..service import LiveSettings, SettingsError

    try:
        live = LiveSettings(config, environ=os.environ)
    except SettingsError as exc:
        fail(str(exc), USAGE_ERROR)
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    live.install_sighup()
    live.start_watching()
    try:
        run_worker(
            engine,
            live,
            environ=os.environ,
            stop=stop,
            connect_timeout=connect_timeout,
            worker_name=name,
            telemetry=telemetry,
        )
    except WorkerError as exc:
        fail(str(exc), RUNTIME_ERROR)
    finally:
        live.stop_watching()
