"""The benchmark's report: summaries, the verdict, tables and plots.

A run's :class:`~foldbench.records.CallRecord` list is summarised per policy,
budget and dataset (:class:`RunSummary`), with its bill under each provider
model of :mod:`foldbench.pricing`. Each of our cache-aware solvers
(:data:`CACHE_AWARE`) is then judged at each budget, on each dataset, under each
provider model (:class:`Verdict`) by two clauses:

(a) no call over budget and no invalid request;
(b) no valid peer *weakly dominates* ours on the plane of (bill including the
    summariser calls, fact retention, argument support): cheaper-or-equal and
    keeping-equal-or-more on every measured metric, strictly better on one.

The report puts a verdict line per budget and model first, then one table per
budget (sorted by total bill, the best marked, 110 columns wide), a breakdown
per dataset, the peers' settings, where the bill goes, and every peer that
beats us on any metric.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .pricing import EXPLICIT, MODELS
from .records import CallRecord
from .registry import describe, is_known, is_ours
from .settings_table import settings_lines

__all__ = [
    "CACHE_AWARE",
    "BenchmarkReport",
    "RunSummary",
    "Verdict",
]

CACHE_AWARE = ("ours:kv-stable", "ours:kv-unified")
"""Our solvers that weigh the provider's prompt cache; the verdict judges them, and each
of their variants that ran (``ours:kv-stable+with-context``, ...)."""
TABLE_WIDTH = 110
"""The widest a report table is."""


def _p(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)])


def _solver_of(policy: str) -> str:
    """``ours:<solver>`` of a policy name with its variant suffixes (``+full``, ...)."""
    return policy.split("+", 1)[0]


def _is_peer(policy: str) -> bool:
    """Not one of this library's own policies (:func:`~foldbench.registry.is_ours`)."""
    return not is_ours(policy)


@dataclass(frozen=True)
class RunSummary:
    """The metrics of one policy at one budget, over the transcripts of a selection.

    Token statistics leave out failed calls (counted in ``errors``); ``cache_reuse``
    is cached tokens over all tokens sent; ``billed`` sums the simulated bills. The
    unsuffixed cache and bill figures are the explicit provider model's, the
    ``_automatic`` ones the automatic model's (:mod:`foldbench.pricing`);
    :meth:`total_bill` reads either.
    """

    policy: str
    budget: int
    calls: int
    tokens_mean: float
    tokens_p95: float
    tokens_peak: int
    over_budget: int
    invalid: int
    errors: int
    cache_reuse: float
    billed: float
    summarizer_calls: int
    summarizer_tokens: int
    cpu_p50_ms: float
    cpu_p95_ms: float
    facts_total: int
    facts_retained: int | None
    unpaired: int = 0
    """Requests with an orphan tool result or an unanswered tool call."""
    cached: int = 0
    """Tokens read from the cache."""
    written: int = 0
    """Tokens written to the cache."""
    missed: int = 0
    """Tokens sent uncached and not written."""
    resent: int = 0
    """Tokens of history sent again at more than the read price (see
    :attr:`CallRecord.resent`): the cost of rewriting the front of the context."""
    resent_billed: float = 0.0
    """What they cost, in base-price tokens."""
    summarizer_billed: float = 0.0
    """What the summariser calls cost, in base-price input tokens."""
    arguments_total: int = 0
    """Argument values of the agent's next tool calls that the full history shows."""
    arguments_kept: int = 0
    """How many of them the requests showed."""
    dataset: str = ""
    """The dataset summarised (empty: every dataset of the run)."""
    cached_automatic: int = 0
    """Tokens read from the cache under the automatic model."""
    billed_automatic: float = 0.0
    """The request bill under the automatic model."""
    summarizer_billed_automatic: float = 0.0
    """What the summariser calls cost under the automatic model."""
    summarizer_input_tokens: int = 0
    """What the summariser calls read (``summarizer_tokens`` less this: what they wrote)."""

    def total_bill(self, model: str = "explicit") -> float:
        """The request bill plus the summariser calls under provider model ``model``."""
        if model == "automatic":
            return self.billed_automatic + self.summarizer_billed_automatic
        if model != "explicit":
            known = ", ".join(MODELS)
            raise ValueError(f"unknown provider model {model!r}; the models are {known}")
        return self.billed + self.summarizer_billed

    @property
    def summarizer_output_tokens(self) -> int:
        """What the summariser calls wrote."""
        return self.summarizer_tokens - self.summarizer_input_tokens

    @property
    def argument_support(self) -> float | None:
        """Share of the agent's next tool-call argument values the requests showed,
        relative to the full history (None without tool calls)."""
        return self.arguments_kept / self.arguments_total if self.arguments_total else None

    @property
    def billed_with_summaries(self) -> float:
        """The billed input plus what the summariser calls cost (their input through a
        prompt cache where they mark breakpoints, their output at the output price)."""
        return self.billed + self.summarizer_billed

    @property
    def summary_share(self) -> float:
        """What the summariser calls cost, as a share of the request bill."""
        return self.summarizer_billed / self.billed if self.billed else 0.0

    @property
    def retention(self) -> float | None:
        """Share of facts still visible in the final requests (None without facts)."""
        if self.facts_retained is None or not self.facts_total:
            return None
        return self.facts_retained / self.facts_total


_QUALITY: dict[str, Callable[[RunSummary], float | None]] = {
    "retained": lambda s: s.retention,
    "argument support": lambda s: s.argument_support,
}
"""The quality axes of the verdict's plane (higher is better)."""


def _better(
    model: str,
) -> dict[str, tuple[Callable[[RunSummary], float | None], bool, str]]:
    """Every metric on which the report names the peers that beat us, under ``model``:
    metric -> (value, higher is better, format)."""
    cached = (lambda s: s.cache_reuse) if model == "explicit" else _automatic_reuse
    return {
        "total bill": (lambda s: s.total_bill(model) / 1000, False, "{:,.1f}k"),
        "request bill": (
            lambda s: (s.total_bill(model) - _summary_bill(s, model)) / 1000,
            False,
            "{:,.1f}k",
        ),
        "retained": (lambda s: s.retention, True, "{:.0%}"),
        "argument support": (lambda s: s.argument_support, True, "{:.1%}"),
        "invalid": (lambda s: s.invalid, False, "{:,.0f}"),
        "cache reuse": (cached, True, "{:.0%}"),
        "cpu p95": (lambda s: s.cpu_p95_ms, False, "{:.1f} ms"),
    }


def _summary_bill(s: RunSummary, model: str) -> float:
    return s.summarizer_billed_automatic if model == "automatic" else s.summarizer_billed


def _automatic_reuse(s: RunSummary) -> float:
    sent = s.tokens_mean * (s.calls - s.errors)
    return s.cached_automatic / sent if sent else 0.0


def _weakly_dominates(peer: RunSummary, ours: RunSummary, model: str = "explicit") -> bool:
    """``peer`` is cheaper-or-equal (bill with summaries under ``model``) and keeps
    equal-or-more on every quality axis both measure, strictly better on one of them. A
    peer with an invalid request is not a point within the budget: it dominates
    nobody."""
    if peer.invalid:
        return False
    axes = [
        (q(peer), q(ours)) for q in _QUALITY.values() if q(peer) is not None and q(ours) is not None
    ]
    if not axes:
        return False  # nothing kept is measured: cost alone does not dominate
    cost_p, cost_o = peer.total_bill(model), ours.total_bill(model)
    if cost_p > cost_o or any(p < o for p, o in axes):  # type: ignore[operator]
        return False
    return cost_p < cost_o or any(p > o for p, o in axes)  # type: ignore[operator]


@dataclass(frozen=True)
class Verdict:
    """One cache-aware solver at one budget on one dataset under one provider model,
    held to the bar."""

    policy: str
    budget: int
    dataset: str
    over_budget: int
    invalid: int
    cost: float
    """Our bill with the summariser calls under :attr:`cache_model`, in base-price
    tokens."""
    retention: float | None
    argument_support: float | None
    dominated_by: list[str]
    """Valid peers that weakly dominate ours (clause (b))."""
    beaten_on: dict[str, list[str]] = field(default_factory=dict)
    """Metric -> the peers strictly better on it, best first, with their value."""
    cache_model: str = "explicit"
    """The provider model the bills are priced under (:mod:`foldbench.pricing`)."""

    @property
    def within_budget(self) -> bool:
        """Clause (a): no call over budget and no invalid request."""
        return self.over_budget == 0 and self.invalid == 0

    @property
    def undominated(self) -> bool:
        """Clause (b): no valid peer weakly dominates ours."""
        return not self.dominated_by

    @property
    def failures(self) -> list[str]:
        """The clauses that fail, in words (empty when none does)."""
        out = []
        if not self.within_budget:
            parts = [f"{self.over_budget} calls over budget"] if self.over_budget else []
            parts += [f"{self.invalid} invalid requests"] if self.invalid else []
            out.append("(a) " + ", ".join(parts))
        if self.dominated_by:
            out.append(f"(b) weakly dominated by {', '.join(self.dominated_by)}")
        return out

    @property
    def meets_bar(self) -> bool:
        """Whether both clauses hold."""
        return not self.failures

    @property
    def outcome(self) -> str:
        """``met`` or ``not met``."""
        return "met" if self.meets_bar else "not met"

    def explain(self) -> str:
        """The clauses in words, failures first."""
        if self.failures:
            return "; ".join(self.failures)
        return "(a) within budget, all valid; (b) no peer weakly dominates"


def _summarise(policy: str, budget: int, rs: Sequence[CallRecord], dataset: str) -> RunSummary:
    # a failed call sent nothing: it counts as an error, not as a small request
    tokens = [r.tokens for r in rs if r.error is None] or [0]
    cpu = [r.cpu_ms for r in rs]
    total = sum(tokens)
    cached = sum(r.cached for r in rs)
    with_facts = [r for r in rs if r.facts_retained is not None]
    return RunSummary(
        policy=policy,
        budget=budget,
        calls=len(rs),
        tokens_mean=statistics.fmean(tokens),
        tokens_p95=_p(tokens, 0.95),
        tokens_peak=max(tokens),
        over_budget=sum(r.over_budget for r in rs),
        invalid=sum(r.invalid for r in rs),
        errors=sum(r.error is not None for r in rs),
        cache_reuse=cached / total if total else 0.0,
        billed=sum(r.billed for r in rs),
        summarizer_calls=sum(r.summarizer_calls for r in rs),
        summarizer_tokens=sum(r.summarizer_tokens for r in rs),
        summarizer_billed=sum(r.summarizer_billed for r in rs),
        cpu_p50_ms=_p(cpu, 0.5),
        cpu_p95_ms=_p(cpu, 0.95),
        facts_total=sum(r.facts_total for r in with_facts),
        facts_retained=(sum(r.facts_retained or 0 for r in with_facts) if with_facts else None),
        unpaired=sum(r.unpaired for r in rs),
        cached=cached,
        written=sum(r.written for r in rs),
        missed=sum(r.missed for r in rs),
        resent=sum(r.resent for r in rs),
        resent_billed=sum(r.resent_billed for r in rs),
        arguments_total=sum(r.arguments_total for r in rs),
        arguments_kept=sum(r.arguments_kept for r in rs),
        dataset=dataset,
        cached_automatic=sum(r.cached_automatic for r in rs),
        billed_automatic=sum(r.billed_automatic for r in rs),
        summarizer_billed_automatic=sum(r.summarizer_billed_automatic for r in rs),
        summarizer_input_tokens=sum(r.summarizer_input_tokens for r in rs),
    )


# ------------------------------------------------------------------ the tables


_COLUMNS = (
    # header, width, right-aligned
    ("#", 2, True),
    ("policy", 34, False),
    ("expl.", 9, True),
    ("auto", 9, True),
    ("summ.", 5, True),
    ("cache", 5, True),
    ("facts", 6, True),
    ("args", 7, True),
    ("over", 4, True),
    ("inv.", 4, True),
)
"""The per-budget table: at most 85 characters of cells (a best value's ``*`` included), a
space after each: within a 100-column terminal (the CPU time is in the table of every
figure)."""
TABLE_CAPTION = (
    "expl./auto: total bill (requests and summariser) under explicit breakpoints / automatic "
    "prefix caching; * the best valid value in its column; ours in bold"
)
"""What the terminal table's columns and marks mean, printed under it."""


@dataclass(frozen=True)
class _Row:
    cells: tuple[str, ...]
    best: frozenset[int]
    """Columns holding the best value of the table."""
    invalid: bool
    ours: bool


MARK_INVALID_SHARE = 0.01
"""A policy's values are marked best only with no call over budget and at most this
share of its requests invalid: a stray invalid request among hundreds does not hide
its figures, a policy that sends little that is valid cannot look best."""


def _counts(s: RunSummary) -> bool:
    """Whether ``s`` competes for the best marks (see :data:`MARK_INVALID_SHARE`)."""
    return not s.over_budget and s.invalid <= MARK_INVALID_SHARE * s.calls


def _rows(rows: Sequence[RunSummary]) -> list[_Row]:
    """One budget's summaries as table rows, sorted by total bill (cheapest first),
    the best value of each measured column marked among the policies that count
    (:func:`_counts`)."""
    ordered = sorted(rows, key=lambda s: (s.billed_with_summaries, s.policy))
    valid = [s for s in ordered if _counts(s)]
    best: dict[int, float] = {}
    measured: list[tuple[int, Callable[[RunSummary], float | None], bool]] = [
        (2, lambda s: s.total_bill("explicit"), False),
        (3, lambda s: s.total_bill("automatic"), False),
        (6, lambda s: s.retention, True),
        (7, lambda s: s.argument_support, True),
    ]
    for col, value, higher in measured:
        got = [v for s in valid if (v := value(s)) is not None]
        if got:
            best[col] = max(got) if higher else min(got)
    out = []
    for rank, s in enumerate(ordered, 1):
        retained = "-" if s.retention is None else f"{s.facts_retained}/{s.facts_total}"
        args = "-" if s.argument_support is None else f"{s.argument_support:.1%}"
        cells = (
            str(rank),
            s.policy,
            f"{s.total_bill('explicit') / 1000:,.1f}k",
            f"{s.total_bill('automatic') / 1000:,.1f}k",
            f"{s.summary_share:.0%}" if s.summarizer_billed else "-",
            f"{s.cache_reuse:.0%}",
            retained,
            args,
            str(s.over_budget),
            str(s.invalid),
        )
        marked = set()
        if _counts(s):
            values = {
                2: s.total_bill("explicit"),
                3: s.total_bill("automatic"),
                6: s.retention,
                7: s.argument_support,
            }
            marked = {c for c, v in values.items() if c in best and v == best[c]}
        out.append(_Row(cells, frozenset(marked), bool(s.invalid), s.policy.startswith("ours:")))
    return out


def _markdown_table(rows: Sequence[RunSummary]) -> list[str]:
    lines = [
        "| " + " | ".join(h for h, _, _ in _COLUMNS) + " |",
        "|" + "|".join("---:" if right else "---" for _, _, right in _COLUMNS) + "|",
    ]
    for row in _rows(rows):
        cells = [f"**{c}\\***" if k in row.best else c for k, c in enumerate(row.cells)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _rich_table(rows: Sequence[RunSummary], title: str) -> Any:
    from rich import box
    from rich.table import Table

    table = Table(
        title=title,
        caption=TABLE_CAPTION,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 1, 0, 0),
        title_justify="left",
    )
    for header, width, right in _COLUMNS:
        table.add_column(
            header, justify="right" if right else "left", no_wrap=True, max_width=width
        )
    for row in _rows(rows):
        cells = []
        for k, c in enumerate(row.cells):
            if k in row.best:
                c = f"[bold green]{c}*[/bold green]"
            elif k in (8, 9) and row.invalid and c != "0":
                c = f"[bold red]{c}[/bold red]"
            cells.append(c)
        table.add_row(*cells, style="bold" if row.ours else None)
    return table


@dataclass
class BenchmarkReport:
    """Every audited request of a benchmark run, and the views of it."""

    records: list[CallRecord]
    budgets: list[int] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    transcripts: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0

    def datasets(self) -> list[str]:
        """The datasets of the run, in the order their first record appears."""
        return list(dict.fromkeys(r.dataset or "unlabelled" for r in self.records))

    def summaries(self, dataset: str | None = None) -> list[RunSummary]:
        """One :class:`RunSummary` per (policy, budget), in policy then budget order,
        over every dataset or over one."""
        runs: dict[tuple[str, int], list[CallRecord]] = {}
        for r in self.records:
            if dataset is None or (r.dataset or "unlabelled") == dataset:
                runs.setdefault((r.policy, r.budget), []).append(r)
        return [
            _summarise(policy, budget, rs, dataset or "")
            for policy in self.policies
            for budget in self.budgets
            if (rs := runs.get((policy, budget)))
        ]

    def verdicts(self) -> list[Verdict]:
        """Each cache-aware solver (:data:`CACHE_AWARE`) that ran, at each budget, on
        each dataset, under each provider model (:data:`foldbench.pricing.MODELS`),
        against the peers (every policy but this library's own) at the same budget on
        the same dataset."""
        out = []
        for dataset in self.datasets():
            rows = self.summaries(dataset)
            for ours in (s for s in rows if _solver_of(s.policy) in CACHE_AWARE):
                peers = [s for s in rows if s.budget == ours.budget and _is_peer(s.policy)]
                out += [_verdict(ours, peers, dataset, model) for model in MODELS]
        order = list(MODELS)
        out.sort(
            key=lambda v: (
                v.budget,
                CACHE_AWARE.index(_solver_of(v.policy)),
                v.policy,
                order.index(v.cache_model),
            )
        )
        return out

    def verdict_lines(self) -> list[str]:
        """A line per (solver, budget, provider model) saying on which datasets the bar
        is met, each followed by an indented line per dataset where it is not, saying
        why."""
        lines = []
        by: dict[tuple[str, int, str], list[Verdict]] = {}
        for v in self.verdicts():
            by.setdefault((v.policy, v.budget, v.cache_model), []).append(v)
        for (policy, budget, model), vs in by.items():
            outcome = "; ".join(
                f"{v.dataset} {v.outcome}"
                + (f" ({', '.join(f[1] for f in v.failures)})" if v.failures else "")
                for v in vs
            )
            lines.append(f"{budget:,} tokens, {policy}, {model} cache: {outcome}")
            lines += [f"    {v.dataset}: {v.explain()}" for v in vs if not v.meets_bar]
        return lines

    def rich_tables(self) -> list[Any]:
        """One :class:`rich.table.Table` per budget, over every dataset."""
        rows = self.summaries()
        return [
            _rich_table(
                [s for s in rows if s.budget == b],
                f"budget {b:,}: sorted by total bill (requests + summariser calls), * the best",
            )
            for b in self.budgets
        ]

    def to_markdown(self) -> str:
        """The report: verdict lines, a table per budget, a breakdown per dataset, the
        policies, where the bill goes, and every peer that beats us on a metric."""
        rows = self.summaries()
        lines = [
            "# Context policies replayed on agent transcripts",
            "",
            f"Datasets: {', '.join(self.datasets())} ({', '.join(self.transcripts)}). "
            f"Budgets: {', '.join(f'{b:,}' for b in self.budgets)} tokens. "
            f"{len(self.records):,} requests audited in {self.wall_seconds:.0f} s.",
            "",
            "## Verdict",
            "",
            *[
                f"    - {line.strip()}" if line.startswith(" ") else f"- {line}"
                for line in self.verdict_lines()
            ],
            "",
            _BAR_TEXT,
            "",
            _how_text(),
        ]
        for budget in self.budgets:
            lines += ["", f"## Budget {budget:,}", ""]
            lines += _markdown_table([s for s in rows if s.budget == budget])
        datasets = self.datasets()
        if len(datasets) > 1:
            lines += ["", "## Per dataset"]
            for dataset in datasets:
                names = sorted({r.transcript for r in self.records if r.dataset == dataset})
                per = self.summaries(dataset)
                for budget in self.budgets:
                    lines += ["", f"### {dataset} ({', '.join(names)}), budget {budget:,}", ""]
                    lines += _markdown_table([s for s in per if s.budget == budget])
        lines += ["", "## The policies", ""]
        lines += [f"- `{p}`: {_about(p)}" for p in self.policies]
        registered = [p for p in self.policies if is_known(p)]  # records may name others
        if registered:
            lines += ["", *settings_lines(registered, self.budgets)]
        errors = sorted({(r.policy, r.error) for r in self.records if r.error})
        if errors:
            lines += ["", "## Errors (first of each policy)", ""]
            seen: set[str] = set()
            for policy, error in errors:
                if policy not in seen:
                    seen.add(policy)
                    lines.append(f"- `{policy}`: {error}")
        lines += _bill_lines(rows)
        lines += self._beaten_lines()
        lines += _detail_lines(rows)
        return "\n".join(lines) + "\n"

    def _beaten_lines(self) -> list[str]:
        verdicts = self.verdicts()
        if not verdicts:
            return []
        lines = ["", "## Where a peer beats us", ""]
        for v in verdicts:
            where = f"`{v.policy}` at {v.budget:,} on {v.dataset} ({v.cache_model} cache)"
            if not v.beaten_on:
                lines.append(f"- {where}: no peer is better on any metric.")
                continue
            lines.append(
                f"- {where}: "
                + "; ".join(f"{m}: {', '.join(ps)}" for m, ps in v.beaten_on.items())
                + "."
            )
        return lines

    def to_json(self) -> str:
        """Every record, as JSON."""
        return json.dumps([asdict(r) for r in self.records], indent=1)

    @classmethod
    def from_json(cls, *texts: str) -> BenchmarkReport:
        """A report from one or more :meth:`to_json` outputs (runs of other policies or
        budgets on the same transcripts join into one report).

        Policies, budgets and transcripts keep the order they first appear in.

        Raises
        ------
        ValueError
            When a text is not a JSON list of records, naming the first bad field.

        Examples
        --------
        >>> from foldbench.records import CallRecord
        >>> r = CallRecord("t", "p", 1000, 0, 1, 10, False, False, (), None, 0, 0, 1.0, 0, 10.0)
        >>> text = BenchmarkReport([r], [1000], ["p"], ["t"]).to_json()
        >>> BenchmarkReport.from_json(text).records == [r]
        True
        """
        records: list[CallRecord] = []
        for k, text in enumerate(texts):
            data = json.loads(text)
            if not isinstance(data, list):
                raise ValueError(f"records {k}: expected a JSON list of call records")
            for i, raw in enumerate(data):
                try:
                    records.append(CallRecord(**{**raw, "problems": tuple(raw["problems"])}))
                except (TypeError, KeyError) as exc:
                    raise ValueError(f"records {k}, record {i}: {exc}") from None
        return cls(
            records=records,
            budgets=list(dict.fromkeys(r.budget for r in records)),
            policies=list(dict.fromkeys(r.policy for r in records)),
            transcripts=list(dict.fromkeys(r.transcript for r in records)),
        )

    def plot(self, path: str | Path, model: str = "explicit") -> Path:
        """Small multiples, one panel per dataset x budget and quality axis: the total bill
        under ``model`` against fact retention and against argument support.

        Every policy has a colour of its own; ours are stars, peers circles; a policy
        with a call over budget or an invalid request is drawn hollow. The line joins
        the non-dominated frontier of the valid policies (cheaper, or keeping more). The
        bill axis spans the valid policies up to three times their median: a policy
        beyond it is drawn at the right edge as a triangle labelled with its bill, so no
        outlier squeezes the others. A panel a dataset does not measure is left out.

        Parameters
        ----------
        path : str or Path
            Where the PNG goes.
        model : str
            The provider model of the bills (:data:`foldbench.pricing.MODELS`).

        Returns
        -------
        Path
            ``path``.
        """
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.ticker import PercentFormatter

        panels: list[tuple[str, str, Callable[[RunSummary], float | None], list[RunSummary]]]
        panels = []
        for dataset in self.datasets():
            per = self.summaries(dataset)
            for label, key in (
                ("facts retained", "retained"),
                ("argument support", "argument support"),
            ):
                if any(_QUALITY[key](s) is not None for s in per):
                    panels.append((dataset, label, _QUALITY[key], per))
        if not panels:
            panels = [("all", "facts retained", _QUALITY["retained"], self.summaries())]
        n_cols = max(1, len(self.budgets))
        fig, grid = plt.subplots(
            len(panels), n_cols, figsize=(4.2 * n_cols, 2.9 * len(panels) + 1.8), squeeze=False
        )
        colours = [plt.get_cmap(name)(k) for name in ("tab20", "tab20b") for k in range(20)]
        colour = {p: colours[k % len(colours)] for k, p in enumerate(self.policies)}
        for i, (dataset, label, quality, per) in enumerate(panels):
            for j, budget in enumerate(self.budgets):
                ax = grid[i][j]
                points = [
                    (s, s.total_bill(model) / 1000, y)
                    for s in per
                    if s.budget == budget and (y := quality(s)) is not None
                ]
                valid = [(s, x, y) for s, x, y in points if _counts_as_valid(s)]
                xs = sorted(x for _, x, _ in valid) or sorted(x for _, x, _ in points) or [1.0]
                right = min(xs[-1], 3 * statistics.median(xs)) * 1.08
                left = max(0.0, xs[0] - 0.08 * (right - xs[0]))
                for s, x, y in points:
                    ours = not _is_peer(s.policy)
                    beyond = x > right
                    ax.scatter(
                        [min(x, right)],
                        [y],
                        s=130 if ours else 50,
                        marker=">" if beyond else ("*" if ours else "o"),
                        facecolors=colour[s.policy] if _counts_as_valid(s) else "none",
                        edgecolors=colour[s.policy] if not _counts_as_valid(s) else "black",
                        linewidths=1.4 if not _counts_as_valid(s) else 0.5,
                        zorder=3,
                    )
                    if beyond:
                        ax.annotate(
                            f"{x:,.0f}k",
                            (right, y),
                            textcoords="offset points",
                            xytext=(-4, 6),
                            ha="right",
                            fontsize=6,
                        )
                front = _frontier([(min(x, right), y) for _, x, y in valid])
                if len(front) > 1:
                    fx, fy = zip(*front, strict=True)
                    ax.step(fx, fy, where="post", color="grey", linewidth=0.8, zorder=2)
                ax.set_xlim(left, right * 1.02)
                ax.set_ylim(-0.04, 1.06)  # shares: one scale in every panel
                ax.grid(True, linewidth=0.3, alpha=0.5)
                ax.set_title(f"{dataset}, budget {budget:,}", fontsize=9)
                ax.set_xlabel(f"total bill, k base-price tokens ({model} cache)", fontsize=7)
                ax.set_ylabel(label, fontsize=7)
                ax.yaxis.set_major_formatter(PercentFormatter(1.0))
                ax.tick_params(labelsize=7)
        handles = [
            Line2D(
                [],
                [],
                linestyle="none",
                marker="*" if not _is_peer(p) else "o",
                color=colour[p],
                markeredgecolor="black",
                markersize=9,
                label=p,
            )
            for p in self.policies
        ]
        handles.append(
            Line2D(
                [],
                [],
                linestyle="none",
                marker="o",
                markerfacecolor="none",
                markeredgecolor="black",
                markersize=8,
                label="hollow: over budget or invalid",
            )
        )
        fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=7, frameon=False)
        fig.suptitle(
            "cheaper is left, keeps more is up; stars are ours, circles the peers; "
            "grey: the valid frontier",
            fontsize=10,
        )
        legend_rows = (len(handles) + 3) // 4
        fig.tight_layout(rect=(0, 0.025 * legend_rows + 0.01, 1, 0.97))
        out = Path(path)
        fig.savefig(out, dpi=100)
        plt.close(fig)
        return out

    def plot_calls(
        self,
        path: str | Path,
        *,
        policy: str = "ours:kv-stable",
        budget: int | None = None,
        model: str = "explicit",
    ) -> Path | None:
        """Per call, ``policy`` against the cheapest valid peer on each dataset at one
        budget: the prefix it read from the cache, the history it re-sent (written or
        sent uncached beyond the new turn), and what its summariser has cost so far.

        One column per dataset, on its transcript with the most calls.

        Parameters
        ----------
        path : str or Path
            Where the PNG goes.
        policy : str
            Ours to show (default: the default policy).
        budget : int, optional
            The budget (default: the smallest of the run).
        model : str
            The provider model of the bills that choose the cheapest peer.

        Returns
        -------
        Path or None
            ``path``, or None when ``policy`` did not run at that budget.
        """
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        if not self.budgets:
            return None
        budget = min(self.budgets) if budget is None else budget
        columns = []
        for dataset in self.datasets():
            rows = [s for s in self.summaries(dataset) if s.budget == budget]
            peers = [s for s in rows if _is_peer(s.policy) and _counts_as_valid(s)]
            if not peers or not any(s.policy == policy for s in rows):
                continue
            peer = min(peers, key=lambda s: (s.total_bill(model), s.policy)).policy
            calls: dict[str, int] = {}
            for r in self.records:
                if r.dataset == dataset and r.policy == policy and r.budget == budget:
                    calls[r.transcript] = calls.get(r.transcript, 0) + 1
            transcript = max(sorted(calls), key=lambda t: calls[t])
            columns.append((dataset, transcript, peer))
        if not columns:
            return None
        fig, grid = plt.subplots(3, len(columns), figsize=(4.6 * len(columns), 7.5), squeeze=False)
        metrics: list[tuple[str, Callable[[list[CallRecord]], list[float]]]] = [
            ("prefix read from cache, k", lambda rs: [r.cached_under(model) / 1000 for r in rs]),
            ("history re-sent, k", lambda rs: [r.resent / 1000 for r in rs]),
            (
                "summariser spend so far, k",
                lambda rs: list(_cumulative([r.summarizer_bill(model) / 1000 for r in rs])),
            ),
        ]
        for j, (dataset, transcript, peer) in enumerate(columns):
            for name, style in ((policy, "-"), (peer, "--")):
                rs = sorted(
                    (
                        r
                        for r in self.records
                        if r.transcript == transcript and r.policy == name and r.budget == budget
                    ),
                    key=lambda r: r.call,
                )
                for i, (label, values) in enumerate(metrics):
                    grid[i][j].plot(
                        [r.call for r in rs], values(rs), style, linewidth=0.9, label=name
                    )
                    grid[i][j].set_ylabel(label, fontsize=7)
            grid[0][j].set_title(f"{dataset}: {transcript}, budget {budget:,}", fontsize=8)
            grid[0][j].legend(fontsize=7, frameon=False)
            grid[2][j].set_xlabel("call", fontsize=7)
            for i in range(3):
                grid[i][j].tick_params(labelsize=7)
                grid[i][j].grid(True, linewidth=0.3, alpha=0.5)
        fig.suptitle(f"{policy} against the cheapest valid peer, per call ({model} cache)")
        fig.tight_layout(rect=(0, 0, 1, 0.96))
        out = Path(path)
        fig.savefig(out, dpi=100)
        plt.close(fig)
        return out


def _counts_as_valid(s: RunSummary) -> bool:
    """No call over budget and no invalid request: a point within the budget."""
    return not s.over_budget and not s.invalid


def _cumulative(values: Sequence[float]) -> list[float]:
    out, total = [], 0.0
    for v in values:
        total += v
        out.append(total)
    return out


def _frontier(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point weakly dominates (cheaper-or-equal and keeping
    equal-or-more), cheapest first.

    >>> _frontier([(1.0, 0.5), (2.0, 0.4), (2.0, 0.9), (3.0, 0.9), (0.5, 0.1)])
    [(0.5, 0.1), (1.0, 0.5), (2.0, 0.9)]
    """
    out: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (p[0], -p[1])):
        if not out or y > out[-1][1]:
            out.append((x, y))
    return out


def _about(policy: str) -> str:
    try:
        return describe(policy)
    except KeyError:
        return "not a registered policy"


def _verdict(ours: RunSummary, peers: Sequence[RunSummary], dataset: str, model: str) -> Verdict:
    beaten: dict[str, list[str]] = {}
    for metric, (value, higher, fmt) in _better(model).items():
        mine = value(ours)
        if mine is None:
            continue
        better = [
            (p, v)
            for p in peers
            if (v := value(p)) is not None and (v > mine if higher else v < mine)
        ]
        if better:
            better.sort(key=lambda pv: -pv[1] if higher else pv[1])
            beaten[metric] = [
                f"{p.policy} ({fmt.format(v)}"
                + (f", {p.invalid} invalid)" if p.invalid and metric != "invalid" else ")")
                for p, v in better
            ]
    return Verdict(
        policy=ours.policy,
        budget=ours.budget,
        dataset=dataset,
        over_budget=ours.over_budget,
        invalid=ours.invalid,
        cost=ours.total_bill(model),
        retention=ours.retention,
        argument_support=ours.argument_support,
        dominated_by=[p.policy for p in peers if _weakly_dominates(p, ours, model)],
        beaten_on=beaten,
        cache_model=model,
    )


_BAR_TEXT = (
    "The bar, for each of our cache-aware solvers at each budget on each dataset, under "
    "each provider model: (a) no call over budget and no invalid request; (b) no valid "
    "peer weakly dominates ours on (total bill, facts retained, argument support): "
    "cheaper-or-equal and keeping equal-or-more on every measured axis, strictly better "
    "on one."
)


def _how_text() -> str:
    models = "; ".join(f"*{m.name}*: {m.about}" for m in MODELS.values())
    return (
        "Tokens by `cl100k_base`. Every request is billed under two provider models, the "
        f"same rules for every policy: {models}. Both keep a prefix 5 minutes, at one call "
        "per 30 s, with a 1,024-token minimum. *Total bill*: the agent's input cost plus "
        "the summariser calls (their input through a prompt cache of their own, under the "
        "explicit model only where they mark breakpoints, with one-hour writes at "
        f"{EXPLICIT.hour_write_price:g}; their output at the model's output price), in "
        "thousands of base-price tokens; *summ.*: the summariser calls as a share of the "
        "request bill. *Facts*: planted facts (any accepted answer, as a whole word) still "
        "visible in the final request, of those the transcript states. *Args*: the share "
        "of the argument values of the tool calls the agent really made next (strings of 3+ "
        "characters, numbers of 2+ digits) that the request showed, of those the full "
        "history showed. *Invalid*: over budget, an orphan tool result or an unanswered "
        "call, the newest turn missing, or an error. Rows are sorted by the explicit total "
        "bill; **bold** marks the best value of a column among the policies with no call "
        "over budget and at most 1 % of their requests invalid. A concatenation replays "
        "its parts again, as one agent serving them in turn."
    )


def _bill_lines(rows: Sequence[RunSummary]) -> list[str]:
    """Where each policy's bill goes: cache reads, cache writes, uncached input, the
    history it sent again after changing the front of its context, and what its
    summariser read and wrote."""
    p = EXPLICIT.prices
    lines = [
        "",
        "## Where the bill goes",
        "",
        f"Tokens in thousands, under the explicit model: a read costs {p.read:g}, a write "
        f"{p.write:g} and an uncached token {p.miss:g} of the base price. *Re-sent*: tokens "
        "written or sent uncached beyond each call's new turn, the price of rewriting the "
        "front of the context; *share*: what they cost, of the request bill. *Summariser "
        "read / wrote*: the tokens its calls read and wrote; *summaries*: what they cost "
        "under each model.",
        "",
        "| policy | budget | read | written | uncached | re-sent | share | requests | "
        "summariser read | summariser wrote | summaries expl. | summaries auto |",
        "|---|" + "---:|" * 11,
    ]
    for s in rows:
        share = s.resent_billed / s.billed if s.billed else 0.0
        lines.append(
            f"| {s.policy} | {s.budget:,} | {s.cached / 1000:,.1f} | {s.written / 1000:,.1f} | "
            f"{s.missed / 1000:,.1f} | {s.resent / 1000:,.1f} | {share:.0%} | "
            f"{s.billed / 1000:,.1f} | {s.summarizer_input_tokens / 1000:,.1f} | "
            f"{s.summarizer_output_tokens / 1000:,.1f} | {s.summarizer_billed / 1000:,.1f} | "
            f"{s.summarizer_billed_automatic / 1000:,.1f} |"
        )
    return lines


def _detail_lines(rows: Sequence[RunSummary]) -> list[str]:
    """Every figure of every (policy, budget), for a reader who wants more than the
    tables above (this one is wider than they are)."""
    lines = [
        "",
        "## Every figure",
        "",
        "| policy | budget | calls | mean tok | p95 tok | peak | over | unpaired | invalid | "
        "errors | cache | requests (k) | summaries (k) | summary calls | summary tok | "
        "cpu p50 ms | cpu p95 ms | facts | args |",
        "|---|" + "---:|" * 18,
    ]
    for s in rows:
        facts = "-" if s.retention is None else f"{s.facts_retained}/{s.facts_total}"
        args = "-" if s.argument_support is None else f"{s.arguments_kept}/{s.arguments_total}"
        lines.append(
            f"| {s.policy} | {s.budget:,} | {s.calls} | {s.tokens_mean:,.0f} | "
            f"{s.tokens_p95:,.0f} | {s.tokens_peak:,} | {s.over_budget} | {s.unpaired} | "
            f"{s.invalid} | {s.errors} | {s.cache_reuse:.0%} | {s.billed / 1000:,.1f} | "
            f"{s.summarizer_billed / 1000:,.1f} | {s.summarizer_calls} | "
            f"{s.summarizer_tokens:,} | {s.cpu_p50_ms:.1f} | {s.cpu_p95_ms:.1f} | {facts} | "
            f"{args} |"
        )
    return lines
