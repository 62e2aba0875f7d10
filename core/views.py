from django.db import connection
from django.http import HttpRequest, HttpResponsePermanentRedirect, JsonResponse
from django.templatetags.static import static
from django.views.decorators.http import require_GET


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and database reachability, for load balancers and compose health checks."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


@require_GET
def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """``/favicon.ico``: the site's icon. Pages link it; the admin and the API docs do not, and
    browsers then ask for this path."""
    return HttpResponsePermanentRedirect(static("img/favicon.svg"))
