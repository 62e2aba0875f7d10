"""The rate card's allocated price per GPU-hour for a flavor / GPU model at an hour."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.conf import settings

from ledger.chargeback.pricing import card_in_force
from ledger.choices import RateKind
from ledger.models import RateCard


class Prices:
    """Allocated prices by the rate-card precedence of ``ledger.chargeback.pricing``."""

    def __init__(self) -> None:
        self.cards = list(
            RateCard.objects.in_currency(settings.GPULEDGER_CURRENCY)
            .filter(kind=RateKind.ALLOCATED)
            .order_by("effective_from")
        )
        self._cache: dict[tuple[str, str, datetime], Decimal] = {}

    def price(self, flavor: str, gpu_model: str, at: datetime) -> Decimal:
        hour = at.replace(minute=0, second=0, microsecond=0)
        key = (flavor, gpu_model, hour)
        found = self._cache.get(key)
        if found is None:
            found = self._lookup(flavor, gpu_model, hour)
            self._cache[key] = found
        return found

    def _lookup(self, flavor: str, gpu_model: str, hour: datetime) -> Decimal:
        card = card_in_force(self.cards, RateKind.ALLOCATED, flavor, gpu_model, hour)
        return Decimal(0) if card is None else card.price_per_gpu_hour
