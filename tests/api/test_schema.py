"""Schemathesis against /api/schema/: no 5xx and no response that violates the schema.

The operations are driven from inside one test (schemathesis' pytest plugin does not run on this
pytest), each with a bounded number of Hypothesis examples, as staff with a full-scope API token.
"""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
)

EXAMPLES_PER_OPERATION = 8


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    """Calling the WSGI app directly fires request_finished, which would close the test
    transaction's connection on PostgreSQL; Django's own test client disconnects it the same way.
    """
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def test_the_api_honours_its_schema(scenario, staff_token_key):
    from config.wsgi import application

    headers = {"Authorization": f"Bearer {staff_token_key}"}
    schema = schemathesis.openapi.from_wsgi("/api/schema/", application, headers=headers)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/api/v1/chargeback/", "/api/v1/allocation"}

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: schemathesis.Case) -> None:
            case.call_and_validate(
                headers=headers,
                checks=[not_a_server_error, response_schema_conformance, content_type_conformance],
            )

        run()


def test_real_chargeback_and_allocation_answers_match_the_schema(scenario, staff_token_key):
    from config.wsgi import application

    headers = {"Authorization": f"Bearer {staff_token_key}"}
    schema = schemathesis.openapi.from_wsgi("/api/schema/", application, headers=headers)
    checks = [not_a_server_error, response_schema_conformance, content_type_conformance]
    window = {"start": "2026-01-31T22:00:00Z", "end": "2026-02-01T02:00:00Z"}
    calls = [
        ("/api/v1/chargeback/", {**window, "group_by": group_by, "step": step, "format": fmt})
        for group_by in ("team", "node", "workload")
        for step in ("none", "day")
        for fmt in ("json", "csv")
    ] + [
        ("/api/v1/allocation", {"window": "2026-01-31T22:00:00Z,2026-02-01T02:00:00Z",
                                "aggregate": aggregate, "step": "1h"})
        for aggregate in ("namespace", "namespace,team", "label:app")
    ]  # fmt: skip

    for path, query in calls:
        case = schema[path]["GET"].Case(query=query)
        response = case.call_and_validate(headers=headers, checks=checks)
        assert response.status_code == 200, (path, query)
