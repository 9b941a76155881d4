"""The four assembly functions as a worker of an iii engine (the ``iii`` extra).

The worker connects to the engine over a websocket with the ``iii-sdk`` client and
registers ``context::assemble``, ``context::count-tokens``, ``context::prune`` and
``context::compact`` (:data:`~.functions.REFERENCE_IDS`); a caller then runs one with
``trigger({"function_id": "context::compact", "payload": {...}})``. Each invocation is
answered by :func:`~.functions.call_function` under the settings in force when it
arrives (a reloaded configuration takes effect on the next call), and its result is
the function's JSON value: the same value as the HTTP route's body, ``{"status":
"busy"}`` included for a compaction another caller holds the lease for.

A refusal is answered the way the engine conveys a function's failure, as the
invocation's ``error``; the SDK writes every handler's failure as
``{"code": "invocation_failed", "message": str(exception)}``, so the message is the
JSON text of the HTTP error body, ``{"code": "context/invalid_request", "message":
...}``, which :func:`error_body` reads back.

At start the worker waits for the engine (``connect_timeout``) and fails with
:class:`WorkerError` when it cannot reach it; once connected, the SDK reconnects on
its own after a lost connection (backoff from 1 s to 30 s, without end) and registers
the functions again on each new connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from ..summarizer import Summarizer
from .errors import answer
from .functions import FUNCTIONS, REFERENCE_IDS, Summarizers, call_function
from .metrics import Metrics
from .reload import LiveSettings

if TYPE_CHECKING:
    from iii.iii import III

__all__ = [
    "FAILED_CODE",
    "ContextWorker",
    "FunctionError",
    "WorkerError",
    "error_body",
    "run_worker",
]

log = logging.getLogger("context_manager.service")

FAILED_CODE: Final = "invocation_failed"
"""The code the SDK gives every handler's failure on the wire (the function's own code
is in the message, see :func:`error_body`)."""

WORKER_NAME: Final = "ctxfold"
"""The worker's name on the engine, unless one is given."""


class WorkerError(RuntimeError):
    """The worker cannot serve: the engine is unreachable, or it dropped the worker
    for good."""


class FunctionError(Exception):
    """A function's refusal as the worker answers it: ``str()`` is the JSON text of
    :attr:`body`, the HTTP error body (``{"code", "message"}``, and ``details`` where
    the service gives some).

    Examples
    --------
    >>> str(FunctionError({"code": "context/state", "message": "no lease store"}))
    '{"code":"context/state","message":"no lease store"}'
    """

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        super().__init__(json.dumps(body, ensure_ascii=False, separators=(",", ":")))

    def __str__(self) -> str:
        return str(self.args[0])


def error_body(error: Any) -> dict[str, Any] | None:
    """The function's error body in an invocation's wire ``error`` (or an
    ``iii.InvocationError``'s message), or None when it holds none (a failure of the
    engine or of the SDK, not of the function).

    Examples
    --------
    >>> error_body({"code": "invocation_failed",
    ...             "message": '{"code":"context/overflow","message":"too long"}'})
    {'code': 'context/overflow', 'message': 'too long'}
    >>> error_body({"code": "TIMEOUT", "message": "invocation timed out"}) is None
    True
    """
    message = error.get("message") if isinstance(error, dict) else getattr(error, "message", None)
    if not isinstance(message, str):
        return None
    try:
        body = json.loads(message)
    except json.JSONDecodeError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("code"), str):
        return None
    if not isinstance(body.get("message"), str):
        return None
    return body


class _QuietRefusals(logging.Filter):
    """Drops the SDK's traceback for a function's refusal: the caller's error, answered
    to the caller, is no failure of the worker (any other failure is still logged)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        while error is not None:
            if isinstance(error, FunctionError):
                return False
            error = error.__cause__
        return True


class ContextWorker:
    """The four functions registered on an engine, answered under ``live``.

    Parameters
    ----------
    engine_url : str
        The engine's websocket address (``ws://127.0.0.1:49134``).
    live : LiveSettings
        The settings; each call reads the ones in force (``live.current``).
    environ : mapping
        Where a summariser's provider key is read.
    summarizer : Summarizer, optional
        A summariser in place of the configured one.
    worker_name : str
        The worker's name on the engine.
    telemetry : bool
        Send the SDK's OpenTelemetry traces, logs and metrics to the engine (its
        ``/otel`` endpoint); off by default.

    Examples
    --------
    >>> from context_manager.service import ServiceSettings
    >>> worker = ContextWorker("ws://127.0.0.1:49134", LiveSettings(initial=ServiceSettings()),
    ...                        environ={})
    >>> worker.call("count-tokens", {"messages": [], "model": {"id": "any"}})["tokens"]
    0
    >>> sorted(worker.function_ids)
    ['context::assemble', 'context::compact', 'context::count-tokens', 'context::prune']
    """

    def __init__(
        self,
        engine_url: str,
        live: LiveSettings,
        *,
        environ: Mapping[str, str],
        summarizer: Summarizer | None = None,
        worker_name: str = WORKER_NAME,
        telemetry: bool = False,
    ) -> None:
        self.engine_url = engine_url
        self.live = live
        self.worker_name = worker_name
        self.telemetry = telemetry
        self.metrics = Metrics()
        self.summarizers = Summarizers(environ=environ, override=summarizer, metrics=self.metrics)
        self._client: III | None = None
        self._failed = threading.Event()
        self._quiet = _QuietRefusals()

    @property
    def function_ids(self) -> dict[str, str]:
        """Function id on the engine -> the function's name."""
        return {function_id: name for name, function_id in REFERENCE_IDS.items()}

    @property
    def failed(self) -> threading.Event:
        """Set when the SDK gave the connection up for good (see its log for why)."""
        return self._failed

    def call(self, name: str, payload: Any) -> Any:
        """Answer one invocation of the function ``name``: its result as a JSON value.

        Raises
        ------
        FunctionError
            The function refused (its ``context/...`` code), or the call failed (the
            service's ``manager/error``, logged).
        """
        settings = self.live.current
        try:
            answered = call_function(name, payload, settings=settings, summarizers=self.summarizers)
        except Exception as exc:  # a ServiceError or AssemblyError: the function's own
            error = answer(exc)
            if error.code == "manager/error":
                log.error("invocation of %s failed", REFERENCE_IDS[name], exc_info=exc)
            raise FunctionError(error.body()) from None
        return json.loads(answered.json)

    def _handler(self, name: str) -> Callable[[Any], Any]:
        def handle(payload: Any) -> Any:
            return self.call(name, payload)

        return handle

    def start(self, connect_timeout: float | None = 10.0) -> None:
        """Connect to the engine and register the four functions.

        Parameters
        ----------
        connect_timeout : float, optional
            Seconds to wait for the first connection (the SDK retries meanwhile);
            None waits without end.

        Raises
        ------
        WorkerError
            The engine cannot be reached within ``connect_timeout``.
        ImportError
            The ``iii`` extra is not installed.
        """
        from iii import InitOptions
        from iii.iii import III

        if self._client is not None:
            raise WorkerError("the worker is already started")
        logging.getLogger("iii.iii").addFilter(self._quiet)
        settled = threading.Event()
        """Set at the first connection, or when the SDK gives up."""

        def on_state(state: str) -> None:
            if state == "failed":
                self._failed.set()
            if state in ("connected", "failed"):
                settled.set()

        options = InitOptions(worker_name=self.worker_name, otel={"enabled": self.telemetry})
        client = III(self.engine_url, options)
        self._client = client
        client.add_connection_state_listener(on_state)
        if not settled.wait(connect_timeout) or self._failed.is_set():
            self.stop()
            waited = "" if connect_timeout is None else f" within {connect_timeout:g} s"
            raise WorkerError(
                f"cannot reach the iii engine at {self.engine_url}{waited}: is it running, "
                "and is the address its websocket (ws://HOST:PORT)?"
            )
        for name, function_id in REFERENCE_IDS.items():
            function, request_model, response_model = FUNCTIONS[name]
            client.register_function(
                function_id,
                self._handler(name),
                description=(function.__doc__ or name).strip().splitlines()[0],
                request_format=request_model.model_json_schema(),
                response_format=_schema(response_model),
            )
        log.info(
            "registered %s on %s as %s",
            ", ".join(REFERENCE_IDS.values()),
            self.engine_url,
            self.worker_name,
        )

    def stop(self) -> None:
        """Close the connection (what is in progress is answered or dropped) and stop
        the SDK's thread."""
        client, self._client = self._client, None
        if client is not None:
            client.shutdown()
            # the SDK stops its event loop but leaves it open (a ResourceWarning when
            # collected): close it once its thread has ended
            loop = getattr(client, "_loop", None)
            if isinstance(loop, asyncio.AbstractEventLoop) and not loop.is_running():
                loop.close()
        logging.getLogger("iii.iii").removeFilter(self._quiet)

    def __enter__(self) -> ContextWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _schema(model: Any) -> dict[str, Any]:
    """The JSON schema of a response model (a union of models included)."""
    from pydantic import TypeAdapter

    schema: dict[str, Any] = TypeAdapter(model).json_schema()
    return schema


def run_worker(
    engine_url: str,
    live: LiveSettings,
    *,
    environ: Mapping[str, str],
    summarizer: Summarizer | None = None,
    stop: threading.Event | None = None,
    connect_timeout: float | None = 10.0,
    worker_name: str = WORKER_NAME,
    telemetry: bool = False,
) -> None:
    """Serve the four functions on the engine at ``engine_url`` until ``stop`` is set.

    Parameters
    ----------
    engine_url : str
        The engine's websocket address.
    live : LiveSettings
        The settings; each call reads the ones in force.
    environ : mapping
        Where a summariser's provider key is read.
    summarizer : Summarizer, optional
        A summariser in place of the configured one.
    stop : threading.Event, optional
        Set it to disconnect and return (none: serve until the process ends).
    connect_timeout : float, optional
        Seconds to wait for the first connection; None waits without end.
    worker_name : str
        The worker's name on the engine.
    telemetry : bool
        Send the SDK's OpenTelemetry data to the engine.

    Raises
    ------
    WorkerError
        The engine cannot be reached within ``connect_timeout``, or the SDK gave the
        connection up for good (the engine refused the worker's registration).
    """
    stop = stop or threading.Event()
    worker = ContextWorker(
        engine_url,
        live,
        environ=environ,
        summarizer=summarizer,
        worker_name=worker_name,
        telemetry=telemetry,
    )
    worker.start(connect_timeout)
    with worker:
        while not stop.wait(0.5):
            if worker.failed.is_set():
                raise WorkerError(
                    f"the iii engine at {engine_url} refused the worker or the connection "
                    "failed for good (the log says why)"
                )
