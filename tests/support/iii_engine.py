"""A loopback iii engine: a websocket server on 127.0.0.1 speaking the part of the
engine protocol a worker written with ``iii-sdk`` uses to register functions and
answer invocations.

The protocol, as the SDK (``iii/iii.py``, ``iii/iii_types.py``) speaks it: one JSON
object per text frame, its kind in ``type``.

Worker -> engine
    ``registerfunction`` ``{id, description?, request_format?, response_format?,
    metadata?}`` (at connection, for every function registered before it, and at each
    later ``register_function``); ``unregisterfunction`` ``{id}``; ``invokefunction``
    ``{function_id, data, invocation_id?, action?}``: ``engine::workers::register``
    with ``action: {"type": "void"}`` and no ``invocation_id`` carries the worker's
    metadata (name, pid, runtime, ``features``); ``invocationresult``
    ``{invocation_id, function_id, result}`` or ``{..., error: {code, message,
    stacktrace?}}`` answers an invocation; ``reattach`` ``{previous_worker_id,
    reattach_token?}`` opens a reconnection (before the registrations are sent again;
    accepted here and ignored).
Engine -> worker
    ``workerregistered`` ``{worker_id, reattach_token?, features}`` (this engine
    advertises no features: no observers, no local dispatch); ``invokefunction``
    ``{function_id, data, invocation_id}`` runs a registered function;
    ``invocationresult`` answers the worker's own calls (here: ``function_not_found``).

The engine records the registrations and the worker metadata, and :meth:`invoke`
runs a registered function as a caller's ``trigger`` would, returning its result or
raising :class:`EngineInvocationError` with the wire error.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

__all__ = ["EngineInvocationError", "LoopbackEngine"]

WAIT = 30.0
"""Seconds a wait on the worker lasts at most, so a silent worker cannot hang the run."""


class EngineInvocationError(Exception):
    """The worker answered an invocation with an error: :attr:`error` is the wire's
    ``{"code", "message", "stacktrace"?}``."""

    def __init__(self, error: Any) -> None:
        super().__init__(error)
        self.error = error


class LoopbackEngine:
    """The engine, serving on ``127.0.0.1`` (a free port) in a thread of its own.

    Use it as a context manager, or :meth:`start` and :meth:`close`.
    """

    def __init__(self) -> None:
        self.functions: dict[str, dict[str, Any]] = {}
        """Function id -> its ``registerfunction`` message, while its worker is connected."""
        self.registrations: list[str] = []
        """Every function id registered, in order (a repeat shows twice)."""
        self.workers: list[dict[str, Any]] = []
        """The metadata of every ``engine::workers::register`` received."""
        self.connections = 0
        """Worker connections accepted."""
        self._changed = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: Server | None = None
        self._socket: ServerConnection | None = None
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.port = 0

    @property
    def url(self) -> str:
        """The engine's websocket address."""
        return f"ws://127.0.0.1:{self.port}"

    def start(self) -> LoopbackEngine:
        """Listen (returns once the port is bound)."""
        self._thread.start()
        server = asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(WAIT)
        self._server = server
        self.port = next(iter(server.sockets)).getsockname()[1]
        return self

    async def _serve(self) -> Server:
        return await serve(self._connection, "127.0.0.1", 0, max_size=64 * 1024 * 1024)

    def close(self) -> None:
        """Close every connection and stop listening."""
        if self._server is not None:
            server = self._server

            async def shut() -> None:
                server.close()
                await server.wait_closed()

            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(WAIT)
            self._server = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(WAIT)
        self._loop.close()

    def __enter__(self) -> LoopbackEngine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- the protocol
    async def _connection(self, socket: ServerConnection) -> None:
        if socket.request is not None and socket.request.path.startswith("/otel"):
            await socket.close(1008, "no telemetry here")
            return
        self._socket = socket
        with self._changed:
            self.connections += 1
            self._changed.notify_all()
        await self._send(socket, {"type": "workerregistered", "worker_id": str(uuid.uuid4())})
        try:
            async for raw in socket:
                await self._receive(socket, json.loads(raw))
        except ConnectionClosed:
            pass
        finally:
            with self._changed:
                if self._socket is socket:
                    self._socket = None
                    self.functions.clear()  # a worker's functions go with its connection
                self._changed.notify_all()
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("the worker disconnected"))

    async def _send(self, socket: ServerConnection, message: dict[str, Any]) -> None:
        await socket.send(json.dumps(message))

    async def _receive(self, socket: ServerConnection, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "registerfunction":
            with self._changed:
                self.functions[message["id"]] = message
                self.registrations.append(message["id"])
                self._changed.notify_all()
        elif kind == "unregisterfunction":
            with self._changed:
                self.functions.pop(message["id"], None)
                self._changed.notify_all()
        elif kind == "invocationresult":
            future = self._pending.pop(message.get("invocation_id", ""), None)
            if future is not None and not future.done():
                future.set_result(message)
        elif kind == "invokefunction":
            if message.get("function_id") == "engine::workers::register":
                with self._changed:
                    self.workers.append(message.get("data") or {})
                    self._changed.notify_all()
            elif message.get("invocation_id"):
                await self._send(
                    socket,
                    {
                        "type": "invocationresult",
                        "invocation_id": message["invocation_id"],
                        "function_id": message.get("function_id", ""),
                        "error": {
                            "code": "function_not_found",
                            "message": f"Function '{message.get('function_id')}' not found",
                        },
                    },
                )

    async def _invoke(self, function_id: str, payload: Any) -> dict[str, Any]:
        socket = self._socket
        if socket is None:
            raise ConnectionError("no worker is connected")
        invocation_id = str(uuid.uuid4())
        future: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._pending[invocation_id] = future
        await self._send(
            socket,
            {
                "type": "invokefunction",
                "function_id": function_id,
                "data": payload,
                "invocation_id": invocation_id,
            },
        )
        return await future

    # ---------------------------------------------------------------- for the tests
    def drop(self) -> None:
        """Close the worker's connection, as an engine restart would."""
        socket = self._socket
        if socket is not None:
            asyncio.run_coroutine_threadsafe(socket.close(1001, "restart"), self._loop).result(WAIT)

    def invoke(self, function_id: str, payload: Any, timeout: float = WAIT) -> Any:
        """Run ``function_id`` on the connected worker with ``payload``: its result.

        Raises
        ------
        EngineInvocationError
            The worker answered with an error.
        """
        answer: Future[dict[str, Any]] = asyncio.run_coroutine_threadsafe(
            self._invoke(function_id, payload), self._loop
        )
        message = answer.result(timeout)
        if message.get("error") is not None:
            raise EngineInvocationError(message["error"])
        return message.get("result")

    def wait_for(self, condition: Callable[[], bool], timeout: float = WAIT) -> None:
        """Wait until ``condition()`` (read under the engine's lock) holds."""
        with self._changed:
            if not self._changed.wait_for(condition, timeout):
                raise TimeoutError(f"not within {timeout} s: {condition}")

    def wait_for_functions(self, ids: Iterable[str], timeout: float = WAIT) -> set[str]:
        """Wait until every id of ``ids`` is registered; the ids registered then."""
        wanted = set(ids)
        with self._changed:
            if not self._changed.wait_for(lambda: wanted <= set(self.functions), timeout):
                raise TimeoutError(f"registered {sorted(self.functions)}, not {sorted(wanted)}")
            return set(self.functions)

    def wait_for_worker(self, timeout: float = WAIT) -> dict[str, Any]:
        """Wait for a worker's ``engine::workers::register``: its metadata."""
        with self._changed:
            if not self._changed.wait_for(lambda: bool(self.workers), timeout):
                raise TimeoutError("no worker registered")
            return self.workers[-1]
