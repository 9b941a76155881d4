"""When to fold: the price of a fold schedule under a prompt cache, and its bound.

The model behind ``kv-stable``'s default (``fold="append"``). An agent makes
calls ``t = 1 .. H``; before call ``t``, ``a_t`` new tokens arrive and are
appended raw. The request is the fixed part ``F`` (system prompt, tools), the
memory log ``P`` and the raw history ``X`` after it: ``S_t = F + P + X``, never
above the window ``W``. A *fold* writes the memories of all the raw history but
its newest ``R`` tokens (the floor the host keeps raw: the recent window), at
``c`` memory tokens per raw token, appended after the memories already shown:
``P += c (X - R)``, ``X = R``. A provider reads a cached token at ``r`` and
writes a new one at ``w`` (``r <= w``), so

- a call that appends costs ``r S_{t-1} + w (S_t - S_{t-1})`` (the previous
  request is the cached prefix), the first call ``w S_1``;
- a call that folds costs ``r (F + P) + w (c (X - R) + R)``: the front up to the
  old memories stays cached, the new memories and the raw tail are written.

A schedule is the set of calls that fold. :meth:`AppendSchedule.lazy` folds only
when an append would exceed ``W``, which is what ``kv-stable`` does.

**Theorem.** If every arrival fits the floor (``a_t <= R``), the lazy schedule
is feasible whenever any schedule is, and costs at most

    ``rho = max(W / (F + R), 2 + c (W - F - R) / R)``

times the cheapest schedule (:meth:`AppendSchedule.factor`).

*Proof.* Since a fold keeps exactly ``R`` raw tokens, after a fold at call
``s`` the log holds ``c (A_s - R)`` (``A_s``: the tokens arrived by ``s``),
whatever was folded before; until the next fold the request at call ``t`` is
``S_t = F + A_t - (1 - c)(A_s - R)``, smaller the later ``s`` is.

1. *Lazy folds least often.* Let ``s_k`` and ``s'_k`` be the ``k``-th folds of
   the lazy schedule and of any feasible schedule. If ``s'_{k-1} <= s_{k-1}``,
   the other schedule's request is at least the lazy one's at every call until
   either folds again; lazy folds at the first call where appending exceeds
   ``W``, where the other must have folded already: ``s'_k <= s_k``. By
   induction the other schedule folds at least as often, and as its request
   after a fold at ``t`` is at least lazy's would be (``F + c A_t + (1 - c) R``),
   lazy fits whenever it does.
2. *Reads.* Every call costs ``r S_t + (w - r) B_t``, with ``B_t`` the tokens it
   writes. Any schedule's request is at least ``F + min(A_t, R)``; lazy's is at
   most ``min(W, F + A_t)``. The ratio is at most ``W / (F + R)``.
3. *Writes.* Any schedule writes every arrival that it appends and ``R`` at
   each of its ``N'`` folds; an arrival at a fold is inside those ``R`` tokens.
   So its writes ``B'`` are at least ``sum(a_t)`` and at least ``N' R``. Lazy
   writes at most ``sum(a_t)`` plus, at each of its ``N <= N'`` folds,
   ``R + c (W - F - R)``: at most ``(2 + c (W - F - R) / R) B'``.

Both parts of the cost are within ``rho`` of the cheapest schedule's, so the
sum is. The bound is loose: on random arrivals the lazy schedule comes within a
few per cent of the cheapest (``tests/solvers/test_schedule.py`` checks the theorem
against :meth:`AppendSchedule.cheapest`, an exact search, over short horizons).

Why fold deep: for steady arrivals ``a`` the cost per call of folding down to a
request of ``T`` tokens is ``w a (T - P) / (W - T) + r (T + W - a) / 2 + w a``,
increasing in ``T``; the floor ``R`` is what is worth keeping raw to the agent,
a retention choice, not a price one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["AppendSchedule"]


@dataclass(frozen=True)
class AppendSchedule:
    """The fold-schedule model of a window, a raw floor and a prompt cache's prices.

    Parameters
    ----------
    window : float
        ``W``: the most tokens a request may hold.
    floor : float
        ``R``: the raw tokens a fold keeps (the newest); positive.
    ratio : float
        ``c``: memory tokens written per raw token folded, in ``[0, 1]``.
    read, write : float
        ``r <= w``: the price of a cached token read and of a token written.
    fixed : float, default 0
        ``F``: the tokens every request carries besides the history.

    Examples
    --------
    >>> from solvers.schedule import AppendSchedule
    >>> model = AppendSchedule(window=10, floor=4, ratio=0.5, read=0.1, write=1.0)
    >>> model.lazy([3, 3, 3, 3])
    [False, False, False, True]
    >>> round(model.cost([3, 3, 3, 3], model.lazy([3, 3, 3, 3])), 2)
    17.9
    >>> round(model.factor(), 2)
    2.75
    """

    window: float
    floor: float
    ratio: float
    read: float
    write: float
    fixed: float = 0.0

    def __post_init__(self) -> None:
        checks = {
            "floor": self.floor > 0,
            "ratio": 0 <= self.ratio <= 1,
            "read": 0 <= self.read <= self.write,
            "window": self.window >= self.fixed + self.floor,
            "fixed": self.fixed >= 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(
                f"AppendSchedule needs floor > 0, 0 <= ratio <= 1, 0 <= read <= write and "
                f"window >= fixed + floor >= 0; check {', '.join(bad)}"
            )

    def cost(self, arrivals: Sequence[float], folds: Sequence[bool]) -> float:
        """The price of ``folds`` (one flag per call) for ``arrivals``; ``inf`` when a
        request exceeds the window. A fold with no more raw than the floor appends.

        Examples
        --------
        >>> m = AppendSchedule(window=10, floor=4, ratio=0.5, read=0.1, write=1.0)
        >>> m.cost([3, 3, 3, 3], [False] * 4)
        inf
        """
        if len(folds) != len(arrivals):
            raise ValueError(f"{len(folds)} fold flags for {len(arrivals)} arrivals")
        memory = raw = 0.0
        previous = 0.0
        total = 0.0
        for a, fold in zip(arrivals, folds, strict=True):
            raw += a
            if fold and raw > self.floor:
                written = self.ratio * (raw - self.floor)
                total += self.read * (self.fixed + memory) + self.write * (written + self.floor)
                memory += written
                raw = self.floor
                size = self.fixed + memory + raw
            else:
                size = self.fixed + memory + raw
                total += self.read * previous + self.write * (size - previous)
            if size > self.window:
                return math.inf
            previous = size
        return total

    def lazy(self, arrivals: Sequence[float]) -> list[bool]:
        """The schedule that folds only when appending would exceed the window."""
        memory = raw = 0.0
        folds = []
        for a in arrivals:
            raw += a
            fold = self.fixed + memory + raw > self.window and raw > self.floor
            if fold:
                memory += self.ratio * (raw - self.floor)
                raw = self.floor
            folds.append(fold)
        return folds

    def cheapest(self, arrivals: Sequence[float]) -> tuple[float, list[bool]]:
        """The cheapest schedule and its price, exactly, in ``O(H^2)`` for ``H`` calls.

        After a fold the state depends only on the tokens arrived by then, so the
        search runs over the call of the last fold; ``(inf, [])`` when none fits.
        """
        h = len(arrivals)
        # best[s]: the cheapest price of calls 1..s with a fold at s (s = 0: the start),
        # with the state after it: (memory, raw, request) and the folds that got there
        best: list[tuple[float, float, float, float, list[bool]] | None] = [None] * (h + 1)
        best[0] = (0.0, 0.0, 0.0, 0.0, [])
        found: tuple[float, list[bool]] = (math.inf, [])
        for s in range(h + 1):
            start = best[s]
            if start is None:
                continue
            total, memory, raw, previous, folds = start
            for t in range(s + 1, h + 1):
                a = arrivals[t - 1]
                if raw + a > self.floor:  # fold at t
                    written = self.ratio * (raw + a - self.floor)
                    size = self.fixed + memory + written + self.floor
                    price = total + self.read * (self.fixed + memory)
                    price += self.write * (written + self.floor)
                    kept = best[t]
                    if size <= self.window and (kept is None or price < kept[0]):
                        gap = [False] * (t - s - 1)
                        best[t] = (price, memory + written, self.floor, size, [*folds, *gap, True])
                raw += a  # or append at t
                size = self.fixed + memory + raw
                if size > self.window:
                    break
                total += self.read * previous + self.write * (size - previous)
                previous = size
            else:
                if total < found[0]:
                    found = (total, [*folds, *([False] * (h - s))])
        return found

    def factor(self) -> float:
        """``rho``: the most the lazy schedule costs per unit of the cheapest (the
        module's theorem; it needs every arrival at most the floor)."""
        w, f, r, c = self.window, self.fixed, self.floor, self.ratio
        return max(w / (f + r), 2 + c * (w - f - r) / r)
