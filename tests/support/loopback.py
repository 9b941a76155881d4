"""A scripted HTTP server on 127.0.0.1 for provider tests.

The test scripts the replies per path (the last one repeats), the server
records every request (path, headers, JSON body). A reply may block until the
server is closed, standing in for a provider that answers too late.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LoopbackServer", "RecordedRequest", "Reply"]

BLOCK_LIMIT = 30.0
"""Seconds a blocked reply waits at most, so a forgotten release cannot hang the run."""


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a JSON body (or raw text), a status and extra headers."""

    body: Any = None
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    block: bool = False
    """Hold the answer until the server is closed."""

    def payload(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        owner = self.server.owner
        reply = owner._record_and_pick(
            RecordedRequest(
                method="POST",
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
            )
        )
        if reply.block:
            owner.release.wait(BLOCK_LIMIT)
        payload = reply.payload()
        try:
            self.send_response(reply.status)
            self.send_header("content-type", reply.content_type)
            self.send_header("content-length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up on this answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close joins the handler threads
    owner: LoopbackServer


class LoopbackServer:
    """A threaded HTTP server on an ephemeral 127.0.0.1 port.

    Use :meth:`script` to set the replies of a path, :attr:`requests` to see
    what arrived and :meth:`close` (idempotent) to release blocked replies and
    stop the server.
    """

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.release = threading.Event()
        self._scripts: dict[str, list[Reply]] = {}
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        self._closed = False

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def script(self, path: str, *replies: Reply) -> None:
        """Answer requests to ``path`` with ``replies`` in turn, the last one repeating."""
        with self._lock:
            self._scripts[path] = list(replies)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        """The recorded requests to ``path``."""
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def _record_and_pick(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            script = self._scripts.get(request.path)
            if not script:
                return Reply({"error": {"message": f"no reply scripted for {request.path}"}}, 404)
            return script.pop(0) if len(script) > 1 else script[0]

    def close(self) -> None:
        """Release blocked replies, stop serving and close the socket."""
        if self._closed:
            return
        self._closed = True
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
