"""``PassthroughStrategy``: the task and the newest messages that fit, unchanged.

The strategy a manager opened without a summariser uses: nothing is summarised and
older messages that do not fit are left out, but a request is never empty and never
loses the user's task. The newest turn (the one the model answers) and the task are
sent first, with their tool results capped in the copy sent when they alone do not
fit (:mod:`context_manager.strategies.capping`); the newest messages before the turn
fill what is left. A compile refuses, with a diagnosis, only when even the capped
task and turn do not fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import ConfigDict, Field

from ..errors import ConfigError, OverBudgetError
from ..images import ImagePolicy
from ..message_caps import MessageCaps
from ..messages import USER
from ..pairing import pair_groups
from .base import (
    Entry,
    RequestBudget,
    Selection,
    StoredMessage,
    Strategy,
    StrategyContext,
)
from .capping import MAX_CAP_ROUNDS, Capped, cap_forms
from .send_copy import SendCopyOptions

__all__ = ["PassthroughConfig", "PassthroughStrategy"]


class PassthroughConfig(SendCopyOptions):
    """Options of :class:`PassthroughStrategy`.

    Examples
    --------
    >>> PassthroughConfig(window_tokens=32_000).keep_task
    True
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    keep_task: bool = Field(
        default=True,
        description="Send the first user turn (the task) on every request, before the "
        "newest messages, even once newer history no longer fits around it. False: the "
        "newest messages that fit, and nothing else.",
    )
    window_tokens: int | None = Field(
        default=None,
        gt=0,
        description="The window ``compile()`` takes when no ``max_tokens`` is given. "
        "None: the manager's default.",
    )
    reserve_for_response_tokens: int | None = Field(
        default=None,
        ge=0,
        description="The response reserve ``compile()`` takes when none is given. None: "
        "the manager's default.",
    )


class PassthroughStrategy(Strategy):
    """The task and the newest suffix of the conversation that fits the input budget.

    Nothing is summarised. What is sent, in order of priority:

    1. the newest turn (the last group of whole tool pairs,
       :func:`~context_manager.pairing.pair_groups`), which the model answers;
    2. the task: the first group holding a message from the user (``"User"``), unless
       ``keep_task=False``;
    3. the newest earlier groups, newest first, while they fit.

    When 1 and 2 alone exceed the budget, their tool results are capped in the copy
    sent (the head and tail of each around a marker naming the tool and its size; the
    stored messages never change) and ``render_stats["capped_results"]`` says so. The
    compile raises :class:`~context_manager.errors.OverBudgetError` only when even
    the capped turn and task do not fit. Each message goes out as its
    :func:`~context_manager.pairing.send_form`, so what is priced is what is sent.

    Use it for short conversations and as the budget reference; for long ones use
    :class:`~context_manager.strategies.AutobiographicalStrategy`, which never drops
    history without a summary (:meth:`ContextManager.open
    <context_manager.ContextManager.open>` picks it when given a summariser).

    Parameters
    ----------
    config : PassthroughConfig, optional
    **options
        The options of :class:`PassthroughConfig`, instead of ``config``.

    Examples
    --------
    >>> from context_manager import CharsCounter, ContextManager
    >>> with ContextManager.open(
    ...     path=":memory:", strategy=PassthroughStrategy(), counter=CharsCounter()
    ... ) as cm:
    ...     _ = cm.add_message("User", "Rename the config loader.")
    ...     for i in range(20):
    ...         _ = cm.add_message("Claude", f"step {i}: " + "details " * 10)
    ...     request = cm.compile(max_tokens=80, reserve_for_response=0)
    >>> [m.text[:12] for m in request.messages]
    ['Rename the c', 'step 17: det', 'step 18: det', 'step 19: det']
    """

    name = "passthrough"

    def __init__(self, config: PassthroughConfig | None = None, **options: Any) -> None:
        if config is not None and options:
            raise ConfigError(
                f"PassthroughStrategy: give a config or options, not both (got {sorted(options)})"
            )
        self.config = config if config is not None else PassthroughConfig(**options)

    @property
    def _options(self) -> PassthroughConfig:
        """Its config: the defaults for a subclass that sets none."""
        config = getattr(self, "config", None)
        return config if isinstance(config, PassthroughConfig) else PassthroughConfig()

    @property
    def message_caps(self) -> MessageCaps:
        """The caps on each message sent (see :class:`PassthroughConfig`)."""
        return self._options.message_caps()

    @property
    def image_policy(self) -> ImagePolicy:
        """The images each compile sends live (see :class:`PassthroughConfig`)."""
        return self._options.image_policy()

    def select(
        self, ctx: StrategyContext, budget: RequestBudget, *, dry_run: bool = False
    ) -> Selection:
        stored = ctx.messages()
        forms, tokens = ctx.forms()
        room = budget.history_tokens
        groups = pair_groups([f.tied for f in forms])
        if not groups:
            return Selection([], {"tokens": 0, "messages": 0, "dropped": 0}, tokens=0)
        turn = groups[-1]
        task = _task(stored, groups) if self.config.keep_task else None
        if task == turn:
            task = None
        must = [i for a, b in ([task] if task else []) + [turn] for i in range(a, b)]
        caps: dict[int, Capped] = {}
        level: int | None = None
        need = sum(tokens[i] for i in must)
        for _ in range(MAX_CAP_ROUNDS):
            if need <= room:
                break
            found = cap_forms(stored, forms, must, need - room, ctx.counter, level)
            if found is None:
                break
            caps, level = found
            need = sum(caps[i].tokens if i in caps else tokens[i] for i in must)
        stats: dict[str, Any] = {}
        if caps:
            stats["capped_results"] = {
                "messages": len(caps),
                "results": sum(len(c.tools) for c in caps.values()),
                "cap_tokens": level,
                "tokens_saved": sum(c.before - c.tokens for c in caps.values()),
            }
        if need > room:
            if dry_run:
                return Selection([], {**stats, "tokens": need, "fits": False})
            raise _refusal(budget, need, sum(tokens[i] for i in range(*turn)), task, tokens, caps)
        total = need
        start = turn[0]
        floor = task[1] if task else 0
        for first, end in reversed(groups[:-1]):
            cost = sum(tokens[first:end])
            if first < floor or total + cost > room:
                break
            total += cost
            start = first
        sent = list(range(*task)) if task and task[1] < start else []
        if task and task[1] >= start:
            start = task[0]  # the suffix reached the task: one stretch
        sent += range(start, len(stored))
        entries = [
            Entry(m.participant, m.content, (stored[i].id,), None, m)
            for i in sent
            for m in (caps[i].form if i in caps else forms[i]).messages
        ]
        stats = {
            "tokens": total,
            "messages": len(sent),
            "dropped": len(stored) - len(sent),
            **stats,
        }
        if task:
            stats["task"] = {"messages": task[1] - task[0], "tokens": sum(tokens[slice(*task)])}
        return Selection(entries, stats, tokens=total)


def _task(
    stored: Sequence[StoredMessage], groups: Sequence[tuple[int, int]]
) -> tuple[int, int] | None:
    """The first group holding a message from the user, or None."""
    for first, end in groups:
        if any(stored[i].message.participant == USER for i in range(first, end)):
            return first, end
    return None


def _refusal(
    budget: RequestBudget,
    need: int,
    turn_tokens: int,
    task: tuple[int, int] | None,
    tokens: Sequence[int],
    caps: dict[int, Capped],
) -> OverBudgetError:
    """Why even the newest turn (and the task) cannot be sent, and what would fix it."""
    room = budget.history_tokens
    parts = f"the newest turn needs {turn_tokens} tokens"
    if task:
        parts += f" and the task {sum(tokens[slice(*task)])}"
    if caps:
        parts += f" ({need} with their tool results capped)"
    fix = "raise max_tokens or lower reserve_for_response"
    if budget.fixed_tokens:
        fix += f", or shorten the system prompt and tools ({budget.fixed_tokens} tokens)"
    if task:
        fix += ", or send the turn without the task (PassthroughStrategy(keep_task=False))"
    diagnostics = {
        "newest_tokens": turn_tokens,
        "head_tokens": sum(tokens[slice(*task)]) if task else 0,
        "fixed_tokens": budget.fixed_tokens,
        "floor_tokens": need,
        "suggestion": f"{parts}, the history may use {room}: {fix}",
    }
    return OverBudgetError(
        "passthrough", budget.input_tokens, budget.fixed_tokens + need, diagnostics
    )
