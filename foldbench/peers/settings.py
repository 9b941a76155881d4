"""What the harness sets on each policy at a budget, and why: :class:`PeerSettings`.

Every policy class of :mod:`foldbench.peers` has a ``settings(budget)`` method that
answers with the values it passes to its library at that budget (resolved numbers,
as the library receives them), the library and its installed version, and one
reason per value: the library's default, or what a user would set for a window of
that size. The report prints them (:mod:`foldbench.settings_table`).

Examples
--------
>>> s = PeerSettings.of(
...     "demo", "reimplemented from a paper", "context-folding",
...     {
...         "keep": Setting(5, "the paper's value"),
...         "trigger": Setting(("tokens", 4000), "the window"),
...     },
... )
>>> s.settings["trigger"], s.reasons["keep"], s.values["keep"]
("('tokens', 4000)", "the paper's value", 5)
>>> s.library_and_version.startswith("reimplemented from a paper (context-folding ")
True
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "OURS",
    "PeerSettings",
    "Setting",
    "installed_version",
    "render_value",
]

OURS = "context-folding"
"""The distribution of this library and of the benchmark (and of the peers
reimplemented in it)."""


class Setting(NamedTuple):
    """One value a policy passes to its library, and why it is that value.

    Attributes
    ----------
    value : Any
        The value as the library receives it (a resolved number, not a fraction).
    reason : str
        Why: the library's default, or what a user would set for the window.
    """

    value: Any
    reason: str


def installed_version(distribution: str) -> str:
    """The installed version of ``distribution``, or ``"not installed"``.

    Parameters
    ----------
    distribution : str
        A distribution name as ``pip`` knows it (``"langmem"``, ``"llama-index-core"``).

    Returns
    -------
    str

    Examples
    --------
    >>> installed_version("context-folding") != "not installed"
    True
    >>> installed_version("no-such-distribution-here")
    'not installed'
    """
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def render_value(value: Any) -> str:
    """A setting's value as the report prints it: strings as they are, floats to six
    significant digits, the rest by ``repr``.

    Examples
    --------
    >>> render_value("extractive"), render_value(("tokens", 4000)), render_value(None)
    ('extractive', "('tokens', 4000)", 'None')
    >>> render_value(0.4491978609625668), render_value(4000.0)
    ('0.449198', '4000.0')
    """
    if isinstance(value, str):
        return value
    if isinstance(value, float) and float(f"{value:.6g}") != value:
        return f"{value:.6g}"  # rounded for the table; PeerSettings.values keeps it exact
    return repr(value)


@dataclass(frozen=True)
class PeerSettings:
    """Every setting the harness chose for one policy at one budget.

    Attributes
    ----------
    policy : str
        The registered policy name.
    library : str
        The library the policy drives (``"langmem"``), or ``"reimplemented from
        <source>"`` for a policy written here.
    version : str
        The installed version of :attr:`distribution`.
    distribution : str
        The distribution whose version :attr:`version` is: the library's, or this
        library's own (:data:`OURS`) for policies written here.
    settings : dict of str to str
        Each setting's value, rendered (:func:`render_value`).
    reasons : dict of str to str
        Why each setting has its value (same keys as :attr:`settings`).
    values : dict of str to Any
        The values themselves, as passed to the library.
    """

    policy: str
    library: str
    version: str
    distribution: str
    settings: dict[str, str]
    reasons: dict[str, str]
    values: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls, policy: str, library: str, distribution: str, items: Mapping[str, Setting]
    ) -> PeerSettings:
        """Build from ``name -> Setting``, reading the installed version of
        ``distribution``.

        Parameters
        ----------
        policy : str
            The policy name.
        library : str
            The library, or ``"reimplemented from <source>"``.
        distribution : str
            The distribution whose version to read.
        items : mapping of str to Setting
            The settings, in the order the report shows them.

        Returns
        -------
        PeerSettings

        Examples
        --------
        >>> PeerSettings.of("p", "langmem", "langmem", {}).distribution
        'langmem'
        """
        return cls(
            policy=policy,
            library=library,
            version=installed_version(distribution),
            distribution=distribution,
            settings={k: render_value(s.value) for k, s in items.items()},
            reasons={k: s.reason for k, s in items.items()},
            values={k: s.value for k, s in items.items()},
        )

    @property
    def library_and_version(self) -> str:
        """``"<library> <version>"``, or ``"<library> (<distribution> <version>)"`` when
        the version is another distribution's (a reimplementation's)."""
        if self.library == self.distribution:
            return f"{self.library} {self.version}"
        return f"{self.library} ({self.distribution} {self.version})"
