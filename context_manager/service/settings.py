"""The service's configuration: one pydantic model, read from a YAML file and the
environment, every unknown key refused by name.

A file seeds it (``ctxfold serve --config service.yaml``); environment variables
``CTXFOLD_<SECTION>__<FIELD>`` override single fields (``CTXFOLD_ASSEMBLY__TAIL_TURNS=3``,
``CTXFOLD_PORT=9000``), each value read as a YAML scalar. API keys are configured by
their SHA-256 (:func:`hash_key`), never in the clear; a summariser's provider key is
named by the environment variable that holds it.

Examples
--------
>>> settings = load_settings(text="port: 9000\\nassembly: {tail_turns: 3}", environ={})
>>> settings.port, settings.assembly.tail_turns, settings.assembly.reserved_pct
(9000, 3, 10)
>>> load_settings(text="prot: 9000", environ={})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
context_manager.service.settings.SettingsError: the service configuration: prot: unknown key; ...
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..assembly import AssemblyConfig
from ..errors import ContextManagerError

__all__ = [
    "AGENT_ID",
    "ENV_PREFIX",
    "ApiKey",
    "Limits",
    "ManagerSettings",
    "ServiceSettings",
    "SettingsError",
    "SummarizerSettings",
    "hash_key",
    "load_settings",
]

ENV_PREFIX = "CTXFOLD_"
"""Environment variables under this prefix set fields (``__`` between nested names)."""

AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""What an agent id may be: a file name on every system (no separators, no ``..``)."""


class SettingsError(ContextManagerError, ValueError):
    """A configuration that cannot be used: names the key and the fix."""


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def hash_key(key: str) -> str:
    """The SHA-256 (hex) a key is configured by.

    Examples
    --------
    >>> hash_key("secret")[:16]
    '2bb80d537b1da3e3'
    """
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKey(_Section):
    """One bearer key: its name (for logs and metrics), its hash and its scope.

    ``agents`` are glob patterns of the agent ids the key may read and write
    (``["*"]`` for all); ``functions`` says whether it may call the four stateless
    functions (``/v1/context/...``) and ``admin`` whether it may read ``/v1/config``.
    """

    name: str = Field(min_length=1, max_length=64)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    agents: tuple[str, ...] = ("*",)
    functions: bool = True
    admin: bool = False

    def matches(self, key: str) -> bool:
        """Whether ``key`` is this key (compared in constant time)."""
        return hmac.compare_digest(hash_key(key), self.sha256)

    def may_use(self, agent: str) -> bool:
        """Whether this key's scope covers ``agent``."""
        return any(fnmatch.fnmatchcase(agent, pattern) for pattern in self.agents)


class Limits(_Section):
    """What one request may ask of the service."""

    max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    """A larger body is refused with 413 before it is read whole."""
    request_timeout_seconds: float | None = Field(default=None, gt=0)
    """The per-request deadline (504 past it); None: the summariser timeout
    (``assembly.summarizer_timeout_ms``)."""
    idle_close_seconds: float = Field(default=300.0, gt=0)
    """An agent's store is closed after this long without a request."""
    max_open_agents: int = Field(default=256, gt=0)
    """Open stores kept at most; the longest idle is closed to open another."""
    keep_alive_seconds: float = Field(default=30.0, gt=0)
    """How long an idle connection is kept open (read at start). A client must drop an
    idle connection before this, or a request sent just as the server closes it is
    lost in flight: :class:`~context_manager.client.ContextClient` drops its own after
    :data:`~context_manager.client.KEEPALIVE_SECONDS`."""


class SummarizerSettings(_Section):
    """The model that writes the agents' memories.

    ``provider`` ``extractive`` needs no model (the library's deterministic
    summariser); ``anthropic`` and ``openai`` call the provider's API through its
    SDK at ``base_url`` (the provider's default when None) with the key held by the
    environment variable ``api_key_env``.
    """

    provider: Literal["extractive", "anthropic", "openai"] = "extractive"
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None


class ManagerSettings(_Section):
    """How each agent's manager is opened."""

    strategy: Literal["default", "passthrough", "autobiographical"] = "default"
    """``default``: the library's default strategy (it folds when a summariser is
    configured); or a named one."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options of the autobiographical strategy (``AutobiographicalConfig`` fields)."""
    window_tokens: int | None = Field(default=None, gt=0)
    """The model window a compile defaults to."""
    auto_tick: bool = True
    """Write memories in the background, after compiles."""


class ServiceSettings(_Section):
    """Everything ``ctxfold serve`` reads: where it listens, who may call it, where the
    stores live, the summariser, the limits, and every option of the assembly
    functions (``assembly``, the same :class:`~context_manager.assembly.AssemblyConfig`
    they take in process).

    After a reload every field takes effect on the next request (``assembly`` on the
    next function call, a ``lease_dir`` change with it; keys and limits on the next
    request; ``store_root``, ``summarizer`` and ``manager`` at each agent's next
    request, which reopens it), except ``host`` and ``port``: the socket is bound once,
    at start."""

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    keys: tuple[ApiKey, ...] = ()
    allow_anonymous: bool = False
    """Serve without keys (only where the network is the boundary, e.g. loopback)."""
    store_root: Path = Path("stores")
    """One SQLite store per agent: ``<store_root>/<agent>.db``."""
    store_url: str | None = Field(default=None, pattern=r"^postgres(ql)?://")
    """Instead, each agent's store in this PostgreSQL database (the ``postgres`` extra),
    under the agent's id: service processes on several hosts share the stores, one
    writer per agent at a time (another process's requests for an agent it holds are
    ``manager/store_busy``, 409 with Retry-After, until it closes the agent idle)."""
    assembly: AssemblyConfig = Field(default_factory=AssemblyConfig)
    summarizer: SummarizerSettings = Field(default_factory=SummarizerSettings)
    manager: ManagerSettings = Field(default_factory=ManagerSettings)
    limits: Limits = Field(default_factory=Limits)
    reload_poll_seconds: float = Field(default=1.0, gt=0)
    """How often the configuration file is checked for a change."""

    @field_validator("keys")
    @classmethod
    def _distinct_names(cls, keys: tuple[ApiKey, ...]) -> tuple[ApiKey, ...]:
        names = [k.name for k in keys]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"key names must be distinct; {', '.join(twice)} repeated")
        return keys

    def key_for(self, presented: str) -> ApiKey | None:
        """The configured key ``presented`` is, or None."""
        found = None
        for key in self.keys:
            if key.matches(presented):  # every key compared: no early exit to time
                found = key
        return found

    def redacted(self) -> dict[str, Any]:
        """The effective configuration as JSON, with each key's hash left out."""
        data = self.model_dump(mode="json")
        data["keys"] = [{**k, "sha256": "<redacted>"} for k in data["keys"]]
        return data

    def deadline_seconds(self) -> float:
        """The per-request deadline: the limit, else the summariser timeout."""
        if self.limits.request_timeout_seconds is not None:
            return self.limits.request_timeout_seconds
        return max(1.0, self.assembly.summarizer_timeout_ms / 1000)


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX):
            continue
        path = [p.lower() for p in name[len(ENV_PREFIX) :].split("__")]
        if not all(path):
            raise SettingsError(f"{name}: an empty name between '__'; write SECTION__FIELD")
        try:
            value = yaml.safe_load(environ[name])
        except yaml.YAMLError as exc:
            raise SettingsError(f"{name}: not a YAML value ({exc})") from None
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SettingsError(f"{name}: {part} is set as a value and as a section")
        node[path[-1]] = value
    return out


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _describe(exc: ValidationError, source: str) -> str:
    problems = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(top)"
        if error["type"] == "extra_forbidden":
            section = ServiceSettings
            for part in error["loc"][:-1]:
                field = section.model_fields.get(str(part))
                annotation = field.annotation if field is not None else None
                if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                    section = annotation  # type: ignore[assignment]
            known = ", ".join(sorted(section.model_fields))
            problems.append(
                f"{where}: unknown key; remove it or check its spelling (known: {known})"
            )
        else:
            problems.append(f"{where}: {error['msg']}")
    return f"{source}: " + "; ".join(problems)


def load_settings(
    path: str | Path | None = None,
    *,
    text: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServiceSettings:
    """Read the configuration: the YAML file at ``path`` (or ``text``), then the
    environment's ``CTXFOLD_...`` variables over it.

    Parameters
    ----------
    path : str or Path, optional
        A YAML file holding a mapping (none: defaults and the environment only).
    text : str, optional
        The YAML itself, in place of ``path``.
    environ : mapping, optional
        The environment (default: none is read; pass ``os.environ``).

    Raises
    ------
    SettingsError
        A file that cannot be read or parsed, or a key or value the model refuses:
        every offending key named, with the fix.
    """
    source = "the service configuration"
    data: Any = {}
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise SettingsError(f"{path}: cannot read the configuration ({exc})") from None
    if text is not None:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SettingsError(f"{source}: not valid YAML ({exc})") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise SettingsError(f"{source}: the configuration must be a mapping of keys")
    data = _merge(data, _env_overrides(environ or {}))
    try:
        return ServiceSettings.model_validate(data)
    except ValidationError as exc:
        raise SettingsError(_describe(exc, source)) from None
