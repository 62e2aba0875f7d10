"""How the dashboard writes a number: the one set of formatting rules, as template filters.

Templates format what views pass (``{% load formatting %}{{ row.nominal|figure }}``); the few
places that build display text in Python (stat cards, whose notes are sentences, and table rows
the page tests read from the context) call the same functions. Every filter writes "—" for
``None``: no data is never shown as 0.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from django import template

from quotas.words import Words, words_for

if TYPE_CHECKING:
    from dashboard.queries.gpu_states import GpuLike

register = template.Library()

DASH = "—"


@register.filter
def figure(value: float | Decimal | None, digits: int = 1) -> str:
    """A figure for a table cell or stat card: whole numbers plain, others rounded."""
    if value is None:
        return DASH
    number = float(value)
    if abs(number - round(number)) < 1e-9:
        return f"{round(number):,}"
    return f"{number:,.{digits}f}"


@register.filter
def gpus(value: float | None) -> str:
    """A number of GPUs on the fleet pages: one decimal, never a trailing ``.0``."""
    return figure(value).removesuffix(".0")


@register.filter
def percent(ratio: float | None) -> str:
    """A 0-1 ratio as a percentage with one decimal, without the % sign (the unit follows)."""
    return DASH if ratio is None else f"{ratio * 100:.1f}"


@register.filter
def duration(seconds: float | None) -> str:
    """``1 d 4 h``, ``3 h 12 min``, ``45 s``; a whole unit without its zero remainder (``2 h``)."""
    if seconds is None:
        return DASH
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 90:
        return f"{minutes:.0f} min"
    hours = int(minutes // 60)
    if hours < 24:
        rest = int(minutes % 60)
        return f"{hours} h {rest} min" if rest else f"{hours} h"
    return f"{hours // 24} d {hours % 24} h" if hours % 24 else f"{hours // 24} d"


@register.filter
def quantity(value: Decimal | None, resource: str) -> str:
    """A quota in its resource's unit: null is "unlimited", 0 is 0, memory in GiB."""
    if value is None:
        return "unlimited"
    if resource in ("memory", "ephemeral-storage") or resource.endswith("/memory"):
        gib = Decimal(value) / Decimal(2**30)
        return f"{figure(gib)} GiB"
    return figure(value, digits=3)


@register.filter
def gpu_label(gpu: GpuLike) -> str:
    """``GPU 3``, or ``GPU 3 · MIG 1g.10gb (GI 7)`` for a MIG instance."""
    if gpu.gi_id:
        return f"GPU {gpu.index} · MIG {gpu.mig_profile or '?'} (GI {gpu.gi_id})"
    return f"GPU {gpu.index}"


@register.filter
def queue_place(position: int | None) -> str:
    """Kueue's ``positionInClusterQueue`` (0 = next to be admitted) as people count: 1 is next."""
    return DASH if position is None else f"{position + 1:,}"


@register.filter
def words(scheduler: str | None) -> Words:
    """What ``scheduler`` calls the product's concepts (``quotas.words``):
    ``{% with w=queue.scheduler|words %}{{ w.queue }}{% endwith %}``."""
    return words_for(scheduler)
