"""Options of the assembly functions, with their defaults."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["AssemblyConfig"]


class AssemblyConfig(BaseModel):
    """Every option of the assembly functions; unknown keys are rejected.

    Attributes
    ----------
    reserved_tokens_cap : int
        Cap on the default reserve (20000).
    reserved_pct : int
        Default reserve as a percentage of the context window (10).
    tail_turns : int
        User turns compaction keeps verbatim (2).
    protect_recent_tokens : int
        Newest function-result tokens never normally pruned (40000).
    decay_user_turns : int
        Later plain user turns after which a result becomes eligible for pruning; 0 is off.
    protected_user_turns : int
        Most recent user turns exempt from normal pruning (2); 0 is off.
    min_free_tokens : int
        Normal pruning changes nothing unless it frees at least this many tokens (20000).
    max_output_chars : int
        Bytes above which a result is verbose; also the summariser's truncation length (2000).
    max_result_tokens : int
        Per-result cap of ``assemble`` (20000); 0 disables the cap pass.
    lease_ttl_secs : int
        Lease time to live in seconds (300).
    allow_fallback_limits : bool
        Use 8192 / 1024 limits when a model's limits cannot be resolved (true).
    summarizer_timeout_ms : int
        Deadline of a whole summarisation, also bounded by the lease TTL minus one second.
    lease_dir : Path or None
        Directory of a SQLite lease file shared between processes; ``None`` keeps
        leases in this process.
    lease_url : str or None
        A PostgreSQL database (``postgresql://...``) whose lease table is shared by
        processes on several hosts (the ``postgres`` extra); wins over ``lease_dir``.

    Examples
    --------
    >>> AssemblyConfig().max_result_tokens, AssemblyConfig(tail_turns=1).tail_turns
    (20000, 1)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reserved_tokens_cap: int = Field(default=20_000, ge=0)
    reserved_pct: int = Field(default=10, ge=0, le=100)
    tail_turns: int = Field(default=2, ge=0)
    protect_recent_tokens: int = Field(default=40_000, ge=0)
    decay_user_turns: int = Field(default=0, ge=0)
    protected_user_turns: int = Field(default=2, ge=0)
    min_free_tokens: int = Field(default=20_000, ge=0)
    max_output_chars: int = Field(default=2_000, ge=0)
    max_result_tokens: int = Field(default=20_000, ge=0)
    lease_ttl_secs: int = Field(default=300, ge=0)
    allow_fallback_limits: bool = True
    summarizer_timeout_ms: int = Field(default=320_000, ge=0)
    lease_dir: Path | None = None
    lease_url: str | None = Field(default=None, pattern=r"^postgres(ql)?://")
