"""The HTTP application: :func:`create_app` builds it over the settings in force.

Routes
------
``POST /v1/context/{assemble,count-tokens,prune,compact}``
    The four stateless functions: the body is their request JSON, the answer their
    response JSON (``model_dump_json(exclude_none=True)``, the same bytes as calling
    them in process), their ``context/...`` errors mapped by
    :data:`~.errors.STATUS`; a compaction another caller holds the lease for is 409
    with ``Retry-After``.
``/v1/agents/{agent}/...``
    One manager per agent: ``messages`` (add, list, get, edit, remove), ``context``
    (compile), ``tick``, ``summaries``, ``pins``, ``branches``.
``GET /healthz``, ``/readyz``, ``/metrics``, ``/v1/config``
    Liveness (no key needed), readiness (the store root writable and the summariser
    buildable), Prometheus counters, and the configuration in force (keys redacted;
    an ``admin`` key).

Every route but ``/healthz`` wants ``Authorization: Bearer <key>`` (unless the
configuration allows anonymous calls); a key outside its scope is 403, with nothing
read or written. Each request runs under the deadline of the configuration (504 past
it) and a body larger than ``limits.max_body_bytes`` is 413.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..assembly import models as wire
from ..messages import ContentBlock, TextBlock
from ..request import CompileResult, Injection
from ..strategies.base import StoredMessage
from ..summarizer import Summarizer
from .agents import AgentPool
from .errors import STATUS, ErrorBody, ServiceError, answer, jsonable
from .functions import FUNCTIONS, Answered, Summarizers, call_function
from .metrics import Metrics
from .reload import LiveSettings
from .schemas import (
    Added,
    AddMessage,
    Branches,
    BranchInfo,
    CompileBody,
    Compiled,
    EditMessage,
    MessageList,
    NewBranch,
    PinBody,
    Pinned,
    Pins,
    Removed,
    StoredMessageBody,
    Summaries,
    SwitchBranch,
    Ticked,
)
from .settings import AGENT_ID, ApiKey, ServiceSettings

if TYPE_CHECKING:
    from ..manager import ContextManager

__all__ = ["create_app"]

log = logging.getLogger("context_manager.service")

T = TypeVar("T")


def _errors(*codes: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of ``codes`` (grouped by status, each described)."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        status = STATUS[code]
        entry = out.setdefault(status, {"model": ErrorBody, "description": ""})
        entry["description"] = ", ".join(filter(None, [entry["description"], code]))
    return out


_COMMON = (
    "service/malformed_json",
    "service/unauthorized",
    "service/forbidden",
    "service/too_large",
    "service/invalid_request",
    "service/deadline",
    "service/shutting_down",
)
_AGENT = (
    *_COMMON,
    "manager/invalid_argument",
    "manager/store_busy",
    "manager/store_full",
    "manager/store_damaged",
    "manager/summarizer_unavailable",
    "manager/error",
)


class _BodyLimit:
    """Refuse a body over the configured size with 413, before reading it whole."""

    def __init__(self, app: ASGIApp, live: LiveSettings) -> None:
        self.app = app
        self.live = live

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.live.current.limits.max_body_bytes
        too_large = ServiceError(
            "service/too_large", f"the request body is larger than {limit} bytes"
        )
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await _send_error(too_large, send)
                return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise too_large
            return message

        try:
            await self.app(scope, counted, send)
        except ServiceError as exc:
            if exc is not too_large:
                raise
            await _send_error(exc, send)


async def _send_error(error: ServiceError, send: Send) -> None:
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _error_response(error: ServiceError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers or None)


def create_app(
    live: LiveSettings | ServiceSettings | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    watch: bool = False,
    summarizer: Summarizer | None = None,
) -> FastAPI:
    """The service as an ASGI application.

    Parameters
    ----------
    live : LiveSettings or ServiceSettings, optional
        The settings (a fixed :class:`ServiceSettings` is wrapped; default: the
        defaults with anonymous calls allowed, for tests and loopback use).
    environ : mapping, optional
        Where a summariser's provider key is read (default ``os.environ``).
    watch : bool
        Poll the configuration file for changes while the application runs.
    summarizer : Summarizer, optional
        A summariser in place of the configured one (for embedding the service in a
        process that has its own, and for tests).

    Examples
    --------
    >>> from fastapi.testclient import TestClient
    >>> app = create_app(ServiceSettings(allow_anonymous=True))
    >>> with TestClient(app) as client:
    ...     client.get("/healthz").json()
    {'status': 'ok'}
    """
    if live is None:
        live = ServiceSettings(allow_anonymous=True)
    if isinstance(live, ServiceSettings):
        live = LiveSettings(initial=live)
    settings_live: LiveSettings = live
    env = dict(os.environ if environ is None else environ)
    metrics = Metrics()
    pool = AgentPool(settings_live, metrics, environ=env, summarizer=summarizer)
    settings_live.on_change(lambda old, new: metrics.count("ctxfold_config_reloads_total"))

    summarizers = Summarizers(environ=env, override=summarizer, metrics=metrics)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if watch:
            settings_live.start_watching()
        reaper = asyncio.create_task(_reap(pool))
        try:
            yield
        finally:
            reaper.cancel()
            settings_live.stop_watching()
            await anyio.to_thread.run_sync(pool.close_all)

    app = FastAPI(
        title="ctxfold context service",
        version="1",
        summary="The context manager and the four assembly functions over HTTP.",
        lifespan=lifespan,
    )
    app.state.live = settings_live
    app.state.pool = pool
    app.state.metrics = metrics
    app.add_middleware(_BodyLimit, live=settings_live)

    @app.middleware("http")
    async def observe(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        start = time.perf_counter()
        response = await call_next(request)
        path = getattr(request.scope.get("route"), "path", "unmatched")
        took = time.perf_counter() - start
        metrics.observe_request(request.method, path, response.status_code, took)
        return response

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return _error_response(
                ServiceError("service/malformed_json", "the request body is not valid JSON")
            )
        first = errors[0] if errors else {}
        where = ".".join(str(p) for p in first.get("loc", ())) or "request"
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        return _error_response(
            ServiceError("service/invalid_request", f"{where}: {first.get('msg')}{more}")
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "service/not_found", 405: "service/method_not_allowed"}.get(
            exc.status_code, "service/invalid_request"
        )
        return _error_response(ServiceError(code, str(exc.detail)))

    # ------------------------------------------------------------------ auth
    def _key(request: Request) -> ApiKey | None:
        settings = settings_live.current
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if not header:
            if settings.allow_anonymous:
                return None
            raise ServiceError(
                "service/unauthorized",
                "no API key: send 'Authorization: Bearer <key>'",
                headers={"WWW-Authenticate": "Bearer"},
            )
        found = settings.key_for(token.strip()) if scheme.lower() == "bearer" else None
        if found is None:
            raise ServiceError(
                "service/unauthorized",
                "the API key is not one this service knows",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return found

    def functions_key(request: Request) -> None:
        key = _key(request)
        if key is not None and not key.functions:
            raise ServiceError("service/forbidden", f"key {key.name!r} may not call the functions")

    def agent_key(request: Request, agent: str) -> str:
        key = _key(request)
        if key is not None and not key.may_use(agent):
            raise ServiceError("service/forbidden", f"key {key.name!r} may not use agent {agent!r}")
        if not AGENT_ID.match(agent):
            raise ServiceError("service/invalid_request", f"agent {agent!r} is not an agent id")
        return agent

    def admin_key(request: Request) -> None:
        key = _key(request)
        if key is not None and not key.admin:
            raise ServiceError(
                "service/forbidden", f"key {key.name!r} may not read the configuration"
            )

    async def run(call: Callable[[], T]) -> T:
        """``call()`` in a worker thread, under the request deadline."""
        deadline = settings_live.current.deadline_seconds()
        try:
            with anyio.fail_after(deadline):
                return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        except TimeoutError:
            raise ServiceError(
                "service/deadline", f"the request took longer than its {deadline:g} s deadline"
            ) from None
        except ServiceError:
            raise
        except Exception as exc:
            error = answer(exc)
            if error.code == "manager/error":
                log.error("request failed", exc_info=exc)
            raise error from None

    # ------------------------------------------------------------- functions
    def add_function(name: str) -> None:
        function, request_model, response_model = FUNCTIONS[name]
        codes = [*_COMMON, "context/invalid_request", "context/model_unresolved", "context/state"]
        if name == "assemble":
            codes.append("context/overflow")
        if name == "compact":
            codes.append("context/busy")

        async def endpoint(request: Request, _: None = Depends(functions_key)) -> Response:
            raw = await request.body()
            try:
                body = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError):
                raise ServiceError(
                    "service/malformed_json", "the request body is not valid JSON"
                ) from None
            settings = settings_live.current

            def call() -> Answered:
                return call_function(name, body, settings=settings, summarizers=summarizers)

            answered = await run(call)
            content = answered.json
            if answered.busy:
                retry = max(1, settings.assembly.lease_ttl_secs)
                return Response(
                    content,
                    status_code=409,
                    media_type="application/json",
                    headers={"Retry-After": str(retry)},
                )
            return Response(content, media_type="application/json")

        responses: dict[int | str, dict[str, Any]] = {200: {"model": response_model}}
        responses.update(_errors(*codes))
        if name == "compact":
            responses[409] = {
                "description": "context/busy: another compaction holds the lease (retry after "
                "Retry-After seconds); the body is the function's busy result",
                "model": wire.CompactBusy,
            }
        app.add_api_route(
            f"/v1/context/{name}",
            endpoint,
            methods=["POST"],
            name=name,
            summary=(function.__doc__ or name).strip().splitlines()[0],
            responses=responses,
            openapi_extra={
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {"$ref": f"#/components/schemas/{request_model.__name__}"}
                        }
                    },
                }
            },
            tags=["functions"],
        )

    for name in FUNCTIONS:
        add_function(name)

    # ---------------------------------------------------------------- agents
    agent_dep = Depends(agent_key)

    async def on_agent(agent: str, work: Callable[[ContextManager], T]) -> T:
        """``work(manager)`` on the agent's manager, in a worker thread under the request
        deadline, holding the agent for the whole call."""

        def call() -> T:
            with pool.use(agent) as cm:
                return work(cm)

        return await run(call)

    def route(
        method: str, path: str, model: type[BaseModel], *codes: str, status: int = 200
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register an agent route answering ``model``, with the errors every agent
        route may answer and ``codes``."""
        return app.api_route(
            f"/v1/agents/{{agent}}/{path}",
            methods=[method],
            status_code=status,
            response_model=model,
            response_model_exclude_none=True,
            responses=_errors(*_AGENT, *codes),
            tags=["agents"],
        )

    def stored(m: StoredMessage) -> StoredMessageBody:
        return StoredMessageBody(id=m.id, seq=m.seq, message=m.message)

    def one(cm: ContextManager, message_id: str) -> StoredMessageBody:
        for m in cm.get_messages():
            if m.id == message_id:
                return stored(m)
        cm.get_message(message_id)  # raises the library's unknown-message error
        raise ServiceError("manager/unknown_message", f"no message {message_id!r}")

    @route("POST", "messages", Added, status=201)
    async def add_message(body: AddMessage, agent: str = agent_dep) -> Added:
        """Append a message to the agent's history."""
        return await on_agent(
            agent,
            lambda cm: Added(
                id=cm.add_message(
                    body.participant,
                    body.content,
                    metadata=body.metadata,
                    hold=body.hold,
                    timestamp=body.timestamp,
                )
            ),
        )

    @route("GET", "messages", MessageList)
    async def list_messages(
        agent: str = agent_dep, offset: int = 0, limit: int = 100
    ) -> MessageList:
        """The agent's messages on its current branch, oldest first (``offset``, ``limit``)."""
        if offset < 0 or not 1 <= limit <= 10_000:
            raise ServiceError(
                "service/invalid_request", "offset must be >= 0 and limit in [1, 10000]"
            )
        every = await on_agent(agent, lambda cm: cm.get_messages())
        page = every[offset : offset + limit]
        return MessageList(messages=[stored(m) for m in page], total=len(every))

    @route("GET", "messages/{message_id}", StoredMessageBody, "manager/unknown_message")
    async def get_message(message_id: str, agent: str = agent_dep) -> StoredMessageBody:
        """One stored message."""
        return await on_agent(agent, lambda cm: one(cm, message_id))

    @route("PATCH", "messages/{message_id}", StoredMessageBody, "manager/unknown_message")
    async def edit_message(
        message_id: str, body: EditMessage, agent: str = agent_dep
    ) -> StoredMessageBody:
        """Replace a stored message's content."""

        def edit(cm: ContextManager) -> StoredMessageBody:
            cm.edit_message(message_id, body.content)
            return one(cm, message_id)

        return await on_agent(agent, edit)

    @route("DELETE", "messages/{message_id}", Removed, "manager/unknown_message")
    async def remove_message(message_id: str, agent: str = agent_dep) -> Removed:
        """Remove a message from the record."""

        def remove(cm: ContextManager) -> Removed:
            cm.remove_message(message_id)
            return Removed(removed=True)

        return await on_agent(agent, remove)

    @route("POST", "context", Compiled, "manager/over_budget", "manager/constraint_conflict")
    async def compile_context(body: CompileBody, agent: str = agent_dep) -> Compiled:
        """Compile the request the agent sends next: its messages and render stats, and the
        provider form asked for by ``format``."""
        settings = settings_live.current
        injections = [
            Injection(
                namespace=i.namespace,
                position=i.position,
                content=tuple(_blocks(i.content)),
            )
            for i in body.injections
        ]
        catch_up: bool | float = body.catch_up
        if catch_up is True or (catch_up is not False and catch_up > settings.deadline_seconds()):
            # never wait for memories past the request's own deadline
            catch_up = max(0.001, settings.deadline_seconds() * 0.9)

        def compile_once(cm: ContextManager) -> CompileResult:
            try:
                return cm.compile(
                    max_tokens=body.max_tokens,
                    reserve_for_response=body.reserve_for_response,
                    injections=injections,
                    catch_up=catch_up,
                    dry_run=body.dry_run,
                )
            except Exception as exc:
                if answer(exc).code == "manager/over_budget":
                    metrics.count("ctxfold_refusals_total")
                raise

        result = await on_agent(agent, compile_once)
        metrics.count("ctxfold_compiles_total")
        request: dict[str, Any] | None = None
        params: dict[str, Any] = {"model": body.model} if body.model else {}
        if body.format == "anthropic":
            request = result.to_anthropic(**params)
        elif body.format == "openai":
            request = result.to_openai(**params)
        return Compiled(
            compile_id=result.compile_id,
            messages=list(result.messages),
            system_prompt=result.system_prompt,
            cache_breakpoints=list(result.cache_breakpoints),
            render_stats=jsonable(result.render_stats),
            request=jsonable(request) if request is not None else None,
        )

    @route("POST", "tick", Ticked)
    async def tick(agent: str = agent_dep) -> Ticked:
        """Run at most one unit of compression work."""

        def tick_once(cm: ContextManager) -> Ticked:
            worked = cm.tick()
            return Ticked(worked=worked, pending=cm.pending_work())

        ticked = await on_agent(agent, tick_once)
        metrics.count("ctxfold_ticks_total")
        return ticked

    @route("GET", "summaries", Summaries)
    async def summaries(agent: str = agent_dep, level: int | None = None) -> Summaries:
        """The agent's memories (of one ``level`` when given), oldest first."""
        found = await on_agent(agent, lambda cm: cm.get_summaries_in_range(level=level))
        return Summaries(summaries=[jsonable(_record(x)) for x in found])

    @route("GET", "pins", Pins)
    async def list_pins(agent: str = agent_dep) -> Pins:
        """The pins in force."""
        found = await on_agent(agent, lambda cm: cm.list_pins())
        return Pins(pins=[jsonable(_record(p)) for p in found])

    @route("POST", "pins", Pinned, "manager/unknown_message", status=201)
    async def pin(body: PinBody, agent: str = agent_dep) -> Pinned:
        """Pin a range of messages."""
        return await on_agent(
            agent,
            lambda cm: Pinned(
                id=cm.pin_range(
                    body.first_id,
                    body.last_id,
                    name=body.name,
                    level=body.level,
                    max_level=body.max_level,
                )
            ),
        )

    @route("DELETE", "pins/{pin_id}", Removed)
    async def unpin(pin_id: str, agent: str = agent_dep) -> Removed:
        """Remove a pin (``removed`` is false when there was none)."""
        return await on_agent(agent, lambda cm: Removed(removed=cm.unpin(pin_id)))

    def branches_of(cm: ContextManager) -> Branches:
        current = cm.current_branch
        return Branches(
            current=current,
            branches=[
                BranchInfo(name=b.name, current=b.name == current, details=jsonable(asdict(b)))
                for b in cm.list_branches()
            ],
        )

    @route("GET", "branches", Branches)
    async def branches(agent: str = agent_dep) -> Branches:
        """The agent's branches."""
        return await on_agent(agent, branches_of)

    @route("POST", "branches", Branches, status=201)
    async def fork(body: NewBranch, agent: str = agent_dep) -> Branches:
        """Branch at the current head and switch to the new branch."""

        def fork_here(cm: ContextManager) -> Branches:
            cm.fork(body.name)
            return branches_of(cm)

        return await on_agent(agent, fork_here)

    @route("PUT", "branches/current", Branches)
    async def switch(body: SwitchBranch, agent: str = agent_dep) -> Branches:
        """Switch to another branch."""

        def switch_to(cm: ContextManager) -> Branches:
            cm.switch_branch(body.name)
            return branches_of(cm)

        return await on_agent(agent, switch_to)

    # ------------------------------------------------------------ operations
    @app.get("/healthz", tags=["operations"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers (no key needed)."""
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["operations"],
        responses={
            503: {"description": "service/not_ready: the reasons", "model": ErrorBody},
            **_errors("service/unauthorized"),
        },
    )
    async def readyz(request: Request) -> dict[str, str]:
        """Readiness: the store root is writable (or the store database answers) and
        the summariser can be built."""
        _key(request)
        settings = settings_live.current
        problems = []
        root = settings.store_root
        if settings.store_url is not None:
            why = await asyncio.to_thread(_database_problem, settings.store_url)
            if why is not None:
                problems.append(why)
        else:
            try:
                root.mkdir(parents=True, exist_ok=True)
                probe = root / ".ready-probe"
                probe.write_bytes(b"")
                probe.unlink()
            except OSError as exc:
                problems.append(f"the store root {root} is not writable ({exc.strerror})")
        why = pool.check_summarizer()
        if why is not None:
            problems.append(why)
        if problems:
            raise ServiceError("service/not_ready", "; ".join(problems))
        return {"status": "ready"}

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        tags=["operations"],
        responses=_errors("service/unauthorized", "service/forbidden"),
    )
    async def metrics_text(request: Request) -> PlainTextResponse:
        """Prometheus counters of this process."""
        _key(request)
        return PlainTextResponse(
            metrics.render(open_agents=pool.open_count),
            media_type="text/plain; version=0.0.4",
        )

    @app.get(
        "/v1/config",
        tags=["operations"],
        responses=_errors("service/unauthorized", "service/forbidden"),
    )
    async def config(_: None = Depends(admin_key)) -> dict[str, Any]:
        """The configuration in force, keys redacted, with its generation and the last
        refused reload."""
        return {
            "generation": settings_live.generation,
            "last_error": settings_live.last_error,
            "settings": settings_live.current.redacted(),
        }

    _document(app)
    return app


def _blocks(content: str | list[ContentBlock]) -> list[ContentBlock]:
    return [TextBlock(text=content)] if isinstance(content, str) else list(content)


def _record(value: Any) -> dict[str, Any]:
    body = getattr(value, "body", None)
    if callable(body):
        out: dict[str, Any] = body()
        return out
    return asdict(value)


async def _reap(pool: AgentPool) -> None:
    """Close idle agents, now and then."""
    while True:
        await asyncio.sleep(min(30.0, pool.live.current.limits.idle_close_seconds / 2))
        await anyio.to_thread.run_sync(pool.close_idle)


def _document(app: FastAPI) -> None:
    """Put the request models of the four functions into the OpenAPI components, and
    the 400 / 422 every body-taking route may answer."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            routes=app.routes,
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for _, request_model, _ in FUNCTIONS.values():
            model_schema = request_model.model_json_schema(
                ref_template="#/components/schemas/{model}"
            )
            for name, sub in model_schema.pop("$defs", {}).items():
                components.setdefault(name, sub)
            # optional in the model, so that the function names it when it is missing
            # (context/invalid_request), but every function needs it
            model_schema["required"] = ["messages"]
            components[request_model.__name__] = model_schema
        for methods in schema.get("paths", {}).values():
            for op in methods.values():
                responses = op.setdefault("responses", {})
                # FastAPI's own validation answer is replaced by ErrorBody (see invalid())
                if "422" in responses and "ErrorBody" not in json.dumps(responses["422"]):
                    responses["422"] = {
                        "description": "service/invalid_request",
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/ErrorBody"}
                            }
                        },
                    }
                if "requestBody" in op and "400" not in responses:
                    responses["400"] = {
                        "description": "service/malformed_json",
                        "content": {
                            "application/json": {
                                "schema": {"$ref": "#/components/schemas/ErrorBody"}
                            }
                        },
                    }
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _database_problem(url: str) -> str | None:
    """Why the store database at ``url`` cannot serve agents, or None."""
    try:
        from ..store.postgres import address, connect, migrate

        where = address(url)
        with connect(where.conninfo, where.shown) as raw:
            migrate(raw)
    except Exception as exc:  # any reason is the answer: not ready, saying why
        return f"the store database does not answer ({exc})"
    return None
