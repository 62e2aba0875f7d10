"""403 and 404 inside the dashboard frame: navigation, and a sentence saying why.

Django calls these for every ``PermissionDenied`` (``handler403``) and, with DEBUG off, every
unmatched URL or ``Http404`` (``handler404``). API paths keep plain answers: a client of
``/api/`` expects no HTML page.

The 404 is also the answer to an object the user may not see (``dashboard.access``), so its
page is one text for every missing or hidden object: it never repeats the address, the
object's name or its owner (docs/architecture.md "Refusals").
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.functional import SimpleLazyObject
from django.views import defaults

from dashboard.access import NOT_YOURS
from fleet.freshness import current_freshness

API_PREFIX = "/api/"
DEFAULT_403 = "Your account cannot open this page. Ask an administrator for access."
NOT_FOUND_HINT = (
    "The team, queue, node or workload may have been deleted since the link was made, the "
    "address may be mistyped, or it may belong to a team whose detail you do not see (team "
    "leads see the detail of the teams they lead). Search for it in the box above, or start "
    "from the overview."
)


def _in_frame(request: HttpRequest) -> bool:
    return request.user.is_authenticated and not request.path.startswith(API_PREFIX)


def _error_page(
    request: HttpRequest, status: int, title: str, reason: str, hint: str
) -> HttpResponse:
    request.freshness = SimpleLazyObject(current_freshness)  # type: ignore[attr-defined]
    context = {"page_title": title, "reason": reason, "hint": hint, "status": status}
    return render(request, "front/error.html", context, status=status)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _in_frame(request):
        return defaults.permission_denied(request, exception)
    # An object the user may not see is a 404 (dashboard.access); a 403 refuses an action on
    # one they do see, and its message says which permission or role it needs.
    reason = str(exception) if exception and str(exception) else DEFAULT_403
    return _error_page(
        request,
        403,
        "Not yours to see",
        reason,
        "Team leads see the detail of the teams they lead; staff and the finance group see "
        "every team.",
    )


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not _in_frame(request):
        return defaults.page_not_found(request, exception)
    return _error_page(request, 404, "Page not found", NOT_YOURS, NOT_FOUND_HINT)
