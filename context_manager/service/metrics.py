"""The service's counters, in the Prometheus text format (``GET /metrics``).

A handful of counters, gauges and one latency histogram, kept under one lock; no
client library is needed for so few series.

Examples
--------
>>> m = Metrics()
>>> m.observe_request("POST", "/v1/context/prune", 200, 0.012)
>>> m.count("ctxfold_compiles_total")
>>> text = m.render(open_agents=0)
>>> 'ctxfold_requests_total{method="POST",route="/v1/context/prune",status="200"} 1' in text
True
>>> "ctxfold_compiles_total 1" in text
True
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict

__all__ = ["BUCKETS", "COUNTERS", "Metrics"]

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds (seconds) of the request latency histogram."""

COUNTERS = {
    "ctxfold_compiles_total": "Compiles answered with a request.",
    "ctxfold_refusals_total": "Compiles refused over budget.",
    "ctxfold_ticks_total": "Ticks run on request (background ticks not included).",
    "ctxfold_summarizer_calls_total": "Calls to the summariser.",
    "ctxfold_summarizer_failures_total": "Summariser calls that did not end in a memory.",
    "ctxfold_config_reloads_total": "Configurations put in force after the first.",
}
"""The plain counters, with their help text."""


def _labels(**labels: str) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Counters of one service process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str, str], int] = defaultdict(int)
        self._latency: dict[str, list[int]] = {}
        self._latency_sum: dict[str, float] = defaultdict(float)
        self._counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered request and its latency."""
        with self._lock:
            self._requests[(method, route, str(status))] += 1
            counts = self._latency.setdefault(route, [0] * (len(BUCKETS) + 1))
            counts[bisect.bisect_left(BUCKETS, seconds)] += 1
            self._latency_sum[route] += seconds

    def count(self, name: str, by: int = 1) -> None:
        """Add ``by`` to the counter ``name`` (a key of :data:`COUNTERS`)."""
        with self._lock:
            self._counters[name] += by

    def value(self, name: str) -> int:
        """The counter ``name`` now."""
        with self._lock:
            return self._counters[name]

    def render(self, *, open_agents: int) -> str:
        """All series in the Prometheus text exposition format (version 0.0.4)."""
        lines: list[str] = []
        with self._lock:
            lines += [
                "# HELP ctxfold_requests_total Requests answered, by route and status.",
                "# TYPE ctxfold_requests_total counter",
            ]
            for (method, route, status), n in sorted(self._requests.items()):
                labels = _labels(method=method, route=route, status=status)
                lines.append(f"ctxfold_requests_total{labels} {n}")
            lines += [
                "# HELP ctxfold_request_seconds Request latency, by route.",
                "# TYPE ctxfold_request_seconds histogram",
            ]
            for route, counts in sorted(self._latency.items()):
                running = 0
                for bound, n in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
                    running += n
                    labels = _labels(route=route, le=bound)
                    lines.append(f"ctxfold_request_seconds_bucket{labels} {running}")
                lines.append(
                    f"ctxfold_request_seconds_sum{_labels(route=route)} "
                    f"{self._latency_sum[route]:.6f}"
                )
                lines.append(f"ctxfold_request_seconds_count{_labels(route=route)} {running}")
            for name, help_text in COUNTERS.items():
                lines += [
                    f"# HELP {name} {help_text}",
                    f"# TYPE {name} counter",
                    f"{name} {self._counters[name]}",
                ]
        lines += [
            "# HELP ctxfold_open_agents Agent stores open now.",
            "# TYPE ctxfold_open_agents gauge",
            f"ctxfold_open_agents {open_agents}",
        ]
        return "\n".join(lines) + "\n"
