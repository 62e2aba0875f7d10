import logging

from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponsePermanentRedirect, JsonResponse
from django.templatetags.static import static
from django.views.decorators.http import require_GET

logger = logging.getLogger(__name__)


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers. It asks nothing of the database, so an outage of the
    database makes pods unready (``readyz``), never restarts them."""
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: the database answers a query. 503 with a short reason when it does not (the
    full error goes to the log, not to whoever asks: this URL is public)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        logger.warning("readyz: the database does not answer: %s", exc)
        return JsonResponse(
            {"status": "unavailable", "reason": f"database: {type(exc).__name__}"}, status=503
        )
    return JsonResponse({"status": "ok"})


@require_GET
def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """``/favicon.ico``: the site's icon. Pages link it; the admin and the API docs do not, and
    browsers then ask for this path."""
    return HttpResponsePermanentRedirect(static("img/favicon.svg"))
