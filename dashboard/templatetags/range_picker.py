"""``{% range_picker time_range %}``: the time-range picker in the page header.

The page passes its ``time_range`` (from ``@dashboard_page``); the preset links and the custom
form's hidden inputs keep every other query parameter of the request.
"""

from __future__ import annotations

from typing import Any

from django import template

from core.ranges import TimeRange, hidden_params, picker_links

register = template.Library()


@register.inclusion_tag("front/partials/range_picker.html", takes_context=True)
def range_picker(context: template.Context, time_range: TimeRange) -> dict[str, Any]:
    params = context["request"].GET
    return {
        "time_range": time_range,
        "range_links": picker_links(params, time_range),
        "range_hidden": hidden_params(params),
        # A custom range the page chose itself (a workload's whole life) keeps the form shut.
        "custom_open": time_range.preset == "custom" and not context.get("range_chosen_by_page"),
    }
