"""A client of the context service (``ctxfold serve``): the in-process API, remote.

:class:`ContextClient` has the methods of :class:`~context_manager.ContextManager`
that the service serves, with the same arguments and results, and the four assembly
functions (:meth:`ContextClient.assemble` ...) with their own request and response
models; the service's error answers come back as the library's own exceptions
(:class:`~context_manager.errors.OverBudgetError`,
:class:`~context_manager.errors.UnknownMessageError`,
:class:`~context_manager.assembly.AssemblyError`...), else as :class:`ServiceCallError`.
So code moves between in-process and remote by changing one constructor::

    cm = ContextManager.open(path="agent.db", summarizer=summarizer)   # in process
    cm = ContextClient("http://127.0.0.1:8765", agent="agent", api_key=key)  # remote

    cm.add_message("User", "Book me a flight to Lisbon.")
    request = cm.compile(max_tokens=32_000, reserve_for_response=4_000).to_anthropic(model=m)

It needs ``httpx`` (installed with the ``service`` extra).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from .assembly import AssemblyError
from .assembly import models as wire
from .errors import (
    ArgumentError,
    ConstraintConflictError,
    ContextManagerError,
    OverBudgetError,
    SummarizerNotConfiguredError,
    UnknownMessageError,
)
from .messages import ContentBlock, Message
from .request import CompileResult, Injection
from .store import StoreCorruptError, StoreFullError, StoreLockedError

__all__ = ["KEEPALIVE_SECONDS", "ContextClient", "ServiceCallError"]

KEEPALIVE_SECONDS = 10.0
"""An idle connection is dropped after this long: before the service's own keep-alive
(``limits.keep_alive_seconds``, 30 s by default) closes it, so no request is sent on a
connection the service is closing."""

_M = TypeVar("_M", bound=BaseModel)


class ServiceCallError(ContextManagerError):
    """An error answer of the service with no library exception of its own.

    Attributes
    ----------
    code : str
        The service's error code (``service/unauthorized``, ``service/deadline``...).
    status : int
        The HTTP status.
    details : dict or None
        What the body carried besides the message.
    retry_after : float or None
        Seconds the service asked to wait (``Retry-After``), when it did.
    """

    def __init__(
        self,
        code: str,
        message: str,
        status: int,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.status = status
        self.details = details
        self.retry_after = retry_after
        super().__init__(f"{code} ({status}): {message}")


def _rebuilt(cls: type[Exception], message: str, **attrs: Any) -> Exception:
    """An exception of ``cls`` carrying ``message`` and ``attrs``, not re-derived."""
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(attrs)
    return error


def error_from(status: int, body: Any, retry_after: str | None = None) -> Exception:
    """The exception an error answer stands for (the library's own where there is one).

    Examples
    --------
    >>> error_from(404, {"code": "manager/unknown_message", "message": "no message 'x'",
    ...                  "details": {"ids": ["x"]}})
    UnknownMessageError("no message 'x'")
    >>> error_from(422, {"code": "context/overflow", "message": "too big"}).code
    'context/overflow'
    """
    if not isinstance(body, dict) or not isinstance(body.get("code"), str):
        said = f"an answer that is not an error body: {body!r}"[:500]
        return ServiceCallError("service/error", said, status)
    code: str = body["code"]
    message = str(body.get("message", ""))
    details = body.get("details") if isinstance(body.get("details"), dict) else None
    d = details or {}
    if code.startswith("context/") and code != "context/busy":
        return AssemblyError(code, message)
    if code == "manager/over_budget" and {"stage", "budget", "actual"} <= d.keys():
        return OverBudgetError(d["stage"], d["budget"], d["actual"], d.get("diagnostics") or {})
    if code == "manager/unknown_message":
        ids = tuple(str(i) for i in d.get("ids", ()))
        return UnknownMessageError(message, param=str(d.get("param", "message_id")), ids=ids)
    if code == "manager/invalid_argument":
        return _rebuilt(ArgumentError, message, param=d.get("param"), accepted=d.get("accepted"))
    if code == "manager/constraint_conflict":
        return _rebuilt(
            ConstraintConflictError,
            message,
            conflicts=d.get("conflicts", []),
            diagnostics=d.get("diagnostics", {}),
        )
    simple: dict[str, type[Exception]] = {
        "manager/store_busy": StoreLockedError,
        "manager/store_full": StoreFullError,
        "manager/store_damaged": StoreCorruptError,
        "manager/summarizer_unavailable": SummarizerNotConfiguredError,
    }
    if code in simple:
        return simple[code](message)
    wait = float(retry_after) if retry_after and retry_after.isdigit() else None
    return ServiceCallError(code, message, status, details, wait)


class ContextClient:
    """One agent of a context service, with the in-process API's methods.

    Parameters
    ----------
    base_url : str
        Where the service listens (``http://127.0.0.1:8765``).
    agent : str, optional
        The agent the manager methods act on (the four functions need none).
    api_key : str, optional
        Sent as ``Authorization: Bearer <key>``.
    timeout : float
        Seconds to wait for an answer.
    transport : httpx.BaseTransport, optional
        An httpx transport in place of the network (``httpx.ASGITransport`` is async
        only; tests pass the service's ``TestClient`` as ``client``).
    client : httpx.Client, optional
        A configured client to use as is (its base URL is the service's); the key is
        sent with each request, the client's own headers left as they are.
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8765",
        *,
        agent: str | None = None,
        api_key: str | None = None,
        timeout: float = 600.0,
        transport: Any = None,
        client: Any = None,
    ) -> None:
        import httpx

        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        if client is None:
            limits = httpx.Limits(keepalive_expiry=KEEPALIVE_SECONDS)
            client = httpx.Client(
                base_url=base_url, timeout=timeout, transport=transport, limits=limits
            )
        self._http = client
        self.agent = agent

    # ------------------------------------------------------------------ plumbing
    def _call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        kwargs: dict[str, Any] = {}
        if body is not None:
            kwargs["json"] = body
        query = {k: v for k, v in params.items() if v is not None}
        if query:
            kwargs["params"] = query
        response = self._http.request(method, path, headers=self._headers, **kwargs)
        _raise_for(response)
        return response.json()

    def _agent_path(self, tail: str) -> str:
        if self.agent is None:
            raise ArgumentError("agent", None, "the agent id this client acts on")
        return f"/v1/agents/{self.agent}/{tail}"

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> ContextClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ the functions
    def _function(self, name: str, request: Mapping[str, Any] | BaseModel, model: Any) -> Any:
        body = (
            request.model_dump(mode="json", exclude_none=True)
            if isinstance(request, BaseModel)
            else dict(request)
        )
        response = self._http.post(f"/v1/context/{name}", json=body, headers=self._headers)
        if response.status_code == 409 and name == "compact":
            try:
                return wire.CompactBusy.model_validate(response.json())
            except ValueError:
                pass
        _raise_for(response)
        from pydantic import TypeAdapter

        return TypeAdapter(model).validate_json(response.content)

    def assemble(self, request: Mapping[str, Any] | wire.AssembleRequest) -> wire.AssembleResponse:
        """:func:`context_manager.assembly.assemble`, served."""
        return self._function("assemble", request, wire.AssembleResponse)  # type: ignore[no-any-return]

    def count_tokens(
        self, request: Mapping[str, Any] | wire.CountTokensRequest
    ) -> wire.CountTokensResponse:
        """:func:`context_manager.assembly.count_tokens`, served."""
        return self._function("count-tokens", request, wire.CountTokensResponse)  # type: ignore[no-any-return]

    def prune(self, request: Mapping[str, Any] | wire.PruneRequest) -> wire.PruneResponse:
        """:func:`context_manager.assembly.prune`, served."""
        return self._function("prune", request, wire.PruneResponse)  # type: ignore[no-any-return]

    def compact(self, request: Mapping[str, Any] | wire.CompactRequest) -> wire.CompactResponse:
        """:func:`context_manager.assembly.compact`, served (``busy`` is a result here,
        as in process, though the service answers it with 409)."""
        return self._function("compact", request, wire.CompactResponse)  # type: ignore[no-any-return]

    # ------------------------------------------------------------- the manager
    def add_message(
        self,
        participant: str,
        content: str | Sequence[ContentBlock],
        *,
        metadata: dict[str, Any] | None = None,
        hold: bool | float = False,
        timestamp: float | None = None,
    ) -> str:
        """:meth:`ContextManager.add_message <context_manager.ContextManager.add_message>`."""
        body = {
            "participant": participant,
            "content": _content(content),
            "metadata": metadata,
            "hold": hold,
            "timestamp": timestamp,
        }
        return str(self._call("POST", self._agent_path("messages"), body)["id"])

    def get_messages(self) -> list[Any]:
        """The stored messages, oldest first (each with ``id``, ``seq`` and ``message``)."""
        from .strategies.base import StoredMessage

        out: list[Any] = []
        offset = 0
        while True:
            page = self._call("GET", self._agent_path("messages"), offset=offset, limit=10_000)
            for m in page["messages"]:
                out.append(StoredMessage(m["id"], m["seq"], Message.model_validate(m["message"])))
            offset += len(page["messages"])
            if not page["messages"] or offset >= page["total"]:
                return out

    def get_message(self, message_id: str) -> Message:
        """One message."""
        body = self._call("GET", self._agent_path(f"messages/{message_id}"))
        return Message.model_validate(body["message"])

    def edit_message(self, message_id: str, content: str | Sequence[ContentBlock]) -> None:
        """Replace a message's content."""
        body = {"content": _content(content)}
        self._call("PATCH", self._agent_path(f"messages/{message_id}"), body)

    def remove_message(self, message_id: str) -> None:
        """Remove a message."""
        self._call("DELETE", self._agent_path(f"messages/{message_id}"))

    def compile(
        self,
        *,
        max_tokens: int | None = None,
        reserve_for_response: int | None = None,
        injections: Sequence[Injection] = (),
        catch_up: bool | float = True,
        dry_run: bool = False,
    ) -> CompileResult:
        """The request the agent sends next (:meth:`ContextManager.compile`); its provider
        forms (``to_anthropic``, ``to_openai``) are built here from the messages."""
        body = {
            "max_tokens": max_tokens,
            "reserve_for_response": reserve_for_response,
            "injections": [
                {
                    "namespace": i.namespace,
                    "position": i.position,
                    "content": [b.model_dump(mode="json") for b in i.content],
                }
                for i in injections
            ],
            "catch_up": catch_up,
            "dry_run": dry_run,
        }
        got = self._call("POST", self._agent_path("context"), body)
        return CompileResult(
            [Message.model_validate(m) for m in got["messages"]],
            render_stats=got["render_stats"],
            cache_breakpoints=list(got["cache_breakpoints"]),
            system_prompt=got.get("system_prompt"),
            compile_id=got["compile_id"],
        )

    def tick(self) -> bool:
        """One unit of compression work; True when something was done."""
        return bool(self._call("POST", self._agent_path("tick"))["worked"])

    def get_summaries_in_range(self, *, level: int | None = None) -> list[dict[str, Any]]:
        """The agent's memories as stored (of one ``level`` when given)."""
        return list(self._call("GET", self._agent_path("summaries"), level=level)["summaries"])

    def pin_range(
        self,
        first_id: str,
        last_id: str,
        *,
        name: str | None = None,
        level: int | None = None,
        max_level: int | None = None,
    ) -> str:
        """Pin a range of messages; returns the pin id."""
        body = {
            "first_id": first_id,
            "last_id": last_id,
            "name": name,
            "level": level,
            "max_level": max_level,
        }
        return str(self._call("POST", self._agent_path("pins"), body)["id"])

    def list_pins(self) -> list[dict[str, Any]]:
        """The pins in force."""
        return list(self._call("GET", self._agent_path("pins"))["pins"])

    def unpin(self, pin_id: str) -> bool:
        """Remove a pin; False when there was none."""
        return bool(self._call("DELETE", self._agent_path(f"pins/{pin_id}"))["removed"])

    @property
    def current_branch(self) -> str:
        """The current branch name."""
        return str(self._call("GET", self._agent_path("branches"))["current"])

    def list_branches(self) -> list[dict[str, Any]]:
        """Every branch of the agent's store."""
        return [b["details"] for b in self._call("GET", self._agent_path("branches"))["branches"]]

    def fork(self, name: str | None = None) -> str:
        """Branch at the current head and switch to it; returns its name."""
        return str(self._call("POST", self._agent_path("branches"), {"name": name})["current"])

    def switch_branch(self, name: str) -> None:
        """Switch to another branch."""
        self._call("PUT", self._agent_path("branches/current"), {"name": name})


def _raise_for(response: Any) -> None:
    """Raise what an error answer stands for (:func:`error_from`); nothing for success."""
    if response.status_code < 400:
        return
    try:
        payload = response.json()
    except ValueError:
        payload = response.text
    raise error_from(response.status_code, payload, response.headers.get("retry-after"))


def _content(content: str | Sequence[ContentBlock]) -> Any:
    if isinstance(content, str):
        return content
    return [b.model_dump(mode="json") if isinstance(b, BaseModel) else b for b in content]
