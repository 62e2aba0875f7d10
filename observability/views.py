"""``/metrics``: the exposition, to those ``observability.access`` lets in."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from observability.access import client_address, decide
from observability.exposition import registry

logger = logging.getLogger(__name__)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    decision = decide(request)
    if not decision.allowed:
        logger.info(
            "metrics: refused %s from %s: %s",
            decision.status,
            client_address(request),
            decision.reason,
        )
        response = HttpResponse(
            f"{decision.reason}\n", status=decision.status, content_type="text/plain"
        )
        if decision.status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="gpu-ledger metrics"'
        return response
    # The classic text format: every Prometheus 2 and 3 reads it, and the names need no more.
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_PLAIN_0_0_4)
