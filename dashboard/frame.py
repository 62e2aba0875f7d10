"""What every dashboard page builds the same way: stat cards, chart URLs, pagination, links.

A page's numbers come first as stat cards (``stat``: label, value, unit, note, tone), rendered
by ``front/partials/stat_card.html``. Display text built in Python (a card's value and note,
often a sentence with numbers in it; the cells of the quota tables) is formatted with the same
functions the templates use as filters (``dashboard.templatetags.formatting``), so a number
reads the same wherever it appears.
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

from core.ranges import TimeRange
from dashboard.decorators import int_param

# Rows per page of a paginated list.
PAGE_SIZE = 50
# Rows a page shows of a bounded-but-unpaginated list (a queue's holding workloads, a workload's
# pods and transitions); the page says when there are more.
LIST_LIMIT = 100


def stat(
    label: str,
    value: str,
    unit: str = "",
    note: str = "",
    *,
    tone: str | None = "",
    testid: str = "",
) -> dict[str, Any]:
    """One stat card; ``tone`` is good, warn, bad or neutral (or empty for none)."""
    return {
        "label": label,
        "value": value,
        "unit": unit,
        "note": note,
        "tone": tone,
        "testid": testid,
    }


def utilization_tone(value: float | None) -> str:
    """The card tone of an SM_ACTIVE-weighted utilization: good from 50 %, bad below 20 %."""
    if value is None:
        return "neutral"
    if value >= 0.5:
        return "good"
    if value >= 0.2:
        return "warn"
    return "bad"


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def chart_url(name: str, request: HttpRequest, *args: Any) -> str:
    """A chart's JSON URL carrying the page's whole query string (range and filters)."""
    query = request.GET.urlencode()
    url = reverse(name, args=args)
    return f"{url}?{query}" if query else url


def range_query(request: HttpRequest, time_range: TimeRange) -> str:
    """``range=7d`` (or ``start=…&end=…``): appended to chart URLs so charts follow the picker."""
    query = request.GET.copy()
    for key in list(query):
        if key not in ("range", "start", "end"):
            query.pop(key)
    for key, value in time_range.query().items():
        query[key] = value
    return query.urlencode()


def paginate(
    request: HttpRequest, queryset: QuerySet[Any], per_page: int = PAGE_SIZE
) -> tuple[Page, str]:
    """The requested page and the query string without ``page`` (for the page links).

    A page number past the end shows the last page: a bookmark outlives a shrinking list.
    """
    number = int_param(request, "page", 1)
    page = Paginator(queryset, per_page).get_page(number)
    query = request.GET.copy()
    query.pop("page", None)
    return page, query.urlencode()


def bounded(queryset: QuerySet[Any], limit: int = LIST_LIMIT) -> tuple[list[Any], bool]:
    """The first ``limit`` rows of an unpaginated list, and whether it has more."""
    rows = list(queryset[: limit + 1])
    return rows[:limit], len(rows) > limit


def quota_url(name: str, arg: int | str | None) -> str | None:
    """A link to a quota page (team by name, workload by id) when it exists; None otherwise."""
    if arg is None or arg == "":
        return None
    try:
        return reverse(name, args=[arg])
    except NoReverseMatch:
        return None
