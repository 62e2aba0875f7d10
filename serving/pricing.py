"""The price per GPU-hour a capacity plan is costed at: the allocated rate card in force now for
a ResourceFlavor or GPU model, by the project's one rate-card precedence
(``ledger.chargeback.pricing.card_in_force``: a flavor's card, else the GPU model's, else the
default card)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from ledger.chargeback.pricing import card_in_force, rate_cards
from ledger.choices import RateKind
from quotas.models import ResourceFlavor


@dataclass(frozen=True)
class Price:
    """A GPU-hour's price and what set it."""

    per_gpu_hour: Decimal
    currency: str
    card: str


def flavor_exists(name: str) -> bool:
    """A ResourceFlavor of that name is synced (in any cluster) and not deleted."""
    return ResourceFlavor.objects.filter(name=name, deleted_at__isnull=True).exists()


def flavor_names() -> list[str]:
    """The synced ResourceFlavors' names, each once, for the planner's form."""
    return list(
        ResourceFlavor.objects.filter(deleted_at__isnull=True)
        .order_by("name")
        .values_list("name", flat=True)
        .distinct()
    )


def flavor_gpu_model(name: str) -> str:
    """The GPU model the flavor's nodes carry, when its clusters agree on one; else ""."""
    models = set(
        ResourceFlavor.objects.filter(name=name, deleted_at__isnull=True)
        .exclude(gpu_model="")
        .values_list("gpu_model", flat=True)
    )
    return models.pop() if len(models) == 1 else ""


def price_now(flavor: str, gpu_model: str, now: datetime | None = None) -> Price | None:
    """The allocated price of a GPU-hour of ``flavor`` / ``gpu_model`` in the hour now starts in,
    in ``GPULEDGER_CURRENCY``; None when neither is given or no card prices it. A flavor without
    a GPU model of its own is priced by its nodes' model (``flavor_gpu_model``) after its own
    card, as the chargeback prices its hours."""
    if not flavor and not gpu_model:
        return None
    if flavor and not gpu_model:
        gpu_model = flavor_gpu_model(flavor)
    hour = (now or timezone.now()).replace(minute=0, second=0, microsecond=0)
    currency = settings.GPULEDGER_CURRENCY
    card = card_in_force(rate_cards(currency), RateKind.ALLOCATED, flavor, gpu_model, hour)
    if card is None:
        return None
    if card.flavor:
        source = f"flavor {card.flavor}"
    elif card.gpu_model:
        source = f"GPU model {card.gpu_model}"
    else:
        source = "the default card"
    return Price(
        per_gpu_hour=card.price_per_gpu_hour,
        currency=currency,
        card=f"{source}, from {card.effective_from:%Y-%m-%d %H:%M} UTC",
    )
