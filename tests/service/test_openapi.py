"""The OpenAPI document lists what each route may answer, and schemathesis finds no
server error, no undocumented status and no answer off its schema on any route."""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

from context_manager.service import ServiceSettings, create_app
from tests.support.assembly_fixtures import FakeSummarizer

EXAMPLES = 25
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
]
"""No 500, no undocumented status, and answers as documented. Not checked: that every
schema-valid body is accepted: the functions and the manager refuse, with 422 and the
reason, what the schema cannot say (a tool result with no call, a pin over unknown
messages...)."""


def _app(root: Path) -> object:
    service = ServiceSettings.model_validate(
        {
            "allow_anonymous": True,
            "store_root": str(root),
            "manager": {"auto_tick": False, "window_tokens": 4000},
            "limits": {"max_body_bytes": 1_000_000},
        }
    )
    return create_app(service, summarizer=FakeSummarizer(reply="S"), environ={})


def test_every_route_documents_its_error_answers(tmp_path: Path) -> None:
    doc = _app(tmp_path).openapi()  # type: ignore[attr-defined]
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            answers = set(op["responses"])
            if path == "/healthz":
                continue
            assert "401" in answers, (method, path)
            if "requestBody" in op:
                assert {"400", "413", "422"} <= answers, (method, path)
            if path.startswith("/v1/"):
                assert "504" in answers or path == "/v1/config", (method, path)
    for name in ("AssembleRequest", "CompactRequest", "ErrorBody", "Message"):
        assert name in doc["components"]["schemas"]


def _operations() -> list[tuple[str, str]]:
    doc = _app(Path("never-opened")).openapi()  # type: ignore[attr-defined]
    return [(path, method.upper()) for path, methods in doc["paths"].items() for method in methods]


@pytest.mark.parametrize(("path", "method"), _operations())
def test_no_route_answers_a_server_error_or_off_its_schema(
    path: str, method: str, tmp_path: Path
) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", _app(tmp_path))
    operation = schema[path][method]

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case: schemathesis.Case) -> None:
        case.call_and_validate(checks=CHECKS)

    fuzz()
