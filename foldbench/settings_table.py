"""The report's table of what the harness sets on each policy: :func:`settings_lines`.

One row per policy: the library it drives and its installed version (or the source
a reimplemented peer was written from), every setting at each budget where it
differs, and why each setting has its value (:func:`foldbench.registry.peer_settings`).

Examples
--------
>>> lines = settings_lines(["observation-masking"], [4000, 8000])
>>> lines[0]
'## Peer settings'
>>> row = next(line for line in lines if line.startswith("| observation-masking |"))
>>> "keep = 5" in row, "fit to = 4000 (4k), 8000 (8k)" in row
(True, True)
"""

from __future__ import annotations

from collections.abc import Sequence

from .registry import PeerSettings, peer_settings

__all__ = ["budget_label", "settings_lines"]

HEADING = "## Peer settings"
"""The heading the table's lines start with."""


def budget_label(budget: int) -> str:
    """A budget as the table names it: ``4k`` for 4000, the number itself otherwise.

    Examples
    --------
    >>> budget_label(4000), budget_label(2500), budget_label(750)
    ('4k', '2.5k', '750')
    """
    if budget >= 1000 and budget % 100 == 0:
        return f"{budget / 1000:g}k"
    return str(budget)


def _cell(text: str) -> str:
    """``text`` safe inside a markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _settings_cell(found: Sequence[PeerSettings], budgets: Sequence[int]) -> str:
    """Each setting once when it is the same at every budget, else its value at each."""
    keys = list(dict.fromkeys(k for s in found for k in s.settings))
    parts = []
    for key in keys:
        values = [s.settings.get(key, "(not set)") for s in found]
        if len(set(values)) == 1:
            parts.append(f"{key} = {values[0]}")
        else:
            at = ", ".join(f"{v} ({budget_label(b)})" for v, b in zip(values, budgets, strict=True))
            parts.append(f"{key} = {at}")
    return _cell("; ".join(parts))


def _label(keys: Sequence[str]) -> str:
    """One name for settings sharing a reason: the key, or ``<common prefix>.*`` for
    several dotted leaves of one option, or the keys listed.

    >>> _label(["a.b.x", "a.b.y"]), _label(["keep"]), _label(["n", "m"])
    ('a.b.*', 'keep', 'n, m')
    """
    if len(keys) == 1:
        return keys[0]
    split = [k.split(".") for k in keys]
    common: list[str] = []
    for parts in zip(*split, strict=False):
        if len(set(parts)) > 1:
            break
        common.append(parts[0])
    return ".".join(common) + ".*" if common else ", ".join(keys)


def _why_cell(found: Sequence[PeerSettings]) -> str:
    """Each setting's reason (its distinct reasons, when budgets give different ones);
    settings with the same reason are named once, together."""
    keys = list(dict.fromkeys(k for s in found for k in s.reasons))
    by_reason: dict[str, list[str]] = {}
    for key in keys:
        reasons = list(dict.fromkeys(s.reasons[key] for s in found if key in s.reasons))
        by_reason.setdefault(" / ".join(reasons), []).append(key)
    return _cell("; ".join(f"{_label(k)}: {why}" for why, k in by_reason.items()))


def settings_lines(policies: Sequence[str], budgets: Sequence[int]) -> list[str]:
    """The markdown section of every setting the harness chose for ``policies``.

    Parameters
    ----------
    policies : sequence of str
        Policy names (:func:`foldbench.registry.policy_names`), one row each, in order.
    budgets : sequence of int
        The budgets of the run; a setting that differs between them is shown at each.

    Returns
    -------
    list of str
        Markdown lines: the ``## Peer settings`` heading, a sentence, then a table with
        the columns policy | library and version | settings | why. A peer whose package
        is not installed gets a row saying so.

    Raises
    ------
    ValueError
        When ``budgets`` is empty.
    KeyError
        For an unknown policy name.

    Examples
    --------
    >>> lines = settings_lines(["assemble", "ours:kv-stable"], [4000])
    >>> lines[0], sum(line.startswith(("| assemble |", "| ours:kv-stable |")) for line in lines)
    ('## Peer settings', 2)
    """
    if not budgets:
        raise ValueError("settings_lines needs at least one budget")
    lines = [
        HEADING,
        "",
        "What the harness sets on each policy, as the values its library receives, at "
        f"the budgets of this run ({', '.join(budget_label(b) for b in budgets)}), and "
        "why. Sizes that leave the system prompt out are shown for an empty one; each "
        "run subtracts its own.",
        "",
        "| policy | library and version | settings | why |",
        "|---|---|---|---|",
    ]
    for name in policies:
        try:
            found = [peer_settings(name, b) for b in budgets]
        except ModuleNotFoundError as exc:
            lines.append(f"| {_cell(name)} | not installed | | {_cell(str(exc))} |")
            continue
        lines.append(
            f"| {_cell(name)} | {_cell(found[0].library_and_version)} | "
            f"{_settings_cell(found, budgets)} | {_why_cell(found)} |"
        )
    return lines
