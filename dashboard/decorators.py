"""Decorators every dashboard page and chart JSON view share.

``@dashboard_page``: login required (redirect to /login/), GET/HEAD only, the time range parsed
from the query string and passed to the view as its second argument
(``def team_detail(request, time_range, name)``), and the freshness banner attached as
``request.freshness`` (lazy: computed only when the frame renders it). A page that shows no
range says ``@dashboard_page(uses_range=False)`` and takes no ``time_range``. A ``RangeError`` or
``BadParameter`` becomes a 400 page that says what was wrong.

``@chart_view``: the same for the small JSON views behind each Plotly figure; the view returns a
dict (a Plotly figure from ``core.plotting``) and errors become ``{"error": ...}`` with 400.
Unauthenticated chart requests get 401 JSON rather than a redirect to the login form. An object
that does not exist or that the user may not see (``dashboard.access``) is one JSON 404,
``{"error": "Not found, or not yours to see."}``, whichever it is.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.functional import SimpleLazyObject
from django.views.decorators.http import require_http_methods, require_safe

from core.dbrouter import primary_reads
from core.params import InvalidParameter, check_all, check_int
from core.ranges import RangeError, parse_range
from dashboard.access import NOT_YOURS
from fleet.freshness import current_freshness

logger = logging.getLogger(__name__)


class BadParameter(ValueError):
    """A query parameter (filter, page, mode) that cannot be honoured; shown to the user."""


def int_param(request: HttpRequest, name: str, default: int | None = None) -> int | None:
    raw = request.GET.get(name, "").strip()
    if raw == "":
        return default
    try:
        value = check_int(name, int(raw))
    except InvalidParameter as exc:
        raise BadParameter(f"{name} {exc.reason}") from exc
    except ValueError as exc:
        raise BadParameter(f"{name}={raw[:64]!r} is not a whole number") from exc
    if value < 1:
        raise BadParameter(f"{name} must be 1 or more")
    return value


def choice_param(request: HttpRequest, name: str, choices: tuple[str, ...], default: str) -> str:
    raw = request.GET.get(name, "").strip() or default
    if raw not in choices:
        raise BadParameter(f"{name}={raw[:64]!r} is not one of {', '.join(choices)}")
    return raw


def _call(
    func: Callable[..., Any], request: HttpRequest, uses_range: bool, *args: Any, **kwargs: Any
) -> Any:
    """Call the view, with the parsed time range as its second argument when it shows one.

    Every query and path parameter is checked first (core.params): NUL characters or oversized
    text are a 400 naming the parameter, never a database error.
    """
    try:
        check_all(request.GET)
        check_all(kwargs)
    except InvalidParameter as exc:
        raise BadParameter(str(exc)) from None
    if uses_range:
        return func(request, parse_range(request.GET), *args, **kwargs)
    return func(request, *args, **kwargs)


def dashboard_page(
    view: Callable[..., HttpResponse] | None = None, *, uses_range: bool = True
) -> Any:
    def decorate(func: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(func)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            request.freshness = SimpleLazyObject(current_freshness)  # type: ignore[attr-defined]
            try:
                return _call(func, request, uses_range, *args, **kwargs)
            except (RangeError, BadParameter) as exc:
                logger.info("bad page parameters %s: %s", request.get_full_path(), exc)
                return render(
                    request,
                    "base_dashboard.html",
                    {"error_message": str(exc), "page_title": "Bad request"},
                    status=400,
                )

        return login_required(require_safe(wrapper))

    return decorate(view) if view is not None else decorate


def dashboard_form(func: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """``@dashboard_page(uses_range=False)`` for pages that also take a POST (forms, buttons):
    login required, parameters checked, the freshness banner attached."""

    @functools.wraps(func)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        request.freshness = SimpleLazyObject(current_freshness)  # type: ignore[attr-defined]
        try:
            return _call(func, request, False, *args, **kwargs)
        except BadParameter as exc:
            return render(
                request,
                "base_dashboard.html",
                {"error_message": str(exc), "page_title": "Bad request"},
                status=400,
            )

    # A form shows what it edits: its GET reads the primary, never a lagging replica.
    return primary_reads(login_required(require_http_methods(["GET", "HEAD", "POST"])(wrapper)))


def chart_view(view: Callable[..., Any] | None = None, *, uses_range: bool = True) -> Any:
    def decorate(func: Callable[..., Any]) -> Callable[..., HttpResponse]:
        @functools.wraps(func)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return JsonResponse({"error": "authentication required"}, status=401)
            try:
                result = _call(func, request, uses_range, *args, **kwargs)
            except (RangeError, BadParameter) as exc:
                logger.info("bad chart parameters %s: %s", request.get_full_path(), exc)
                return JsonResponse({"error": str(exc)}, status=400)
            except Http404:
                return JsonResponse({"error": NOT_YOURS}, status=404)
            if isinstance(result, HttpResponse):
                return result
            response = JsonResponse(result)
            response["Cache-Control"] = "private, max-age=0"
            return response

        return require_safe(wrapper)

    return decorate(view) if view is not None else decorate
