"""The rate card's allocated price per GPU-hour for a flavor / GPU model at an hour."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.conf import settings

from ledger.chargeback import ceil_hour
from ledger.choices import RateKind
from ledger.models import RateCard


class Prices:
    """A flavor card beats a GPU-model card, which beats a default card (ledger.RateCard)."""

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
        in_force = [card for card in self.cards if ceil_hour(card.effective_from) <= hour]
        for matches in (
            [card for card in in_force if flavor and card.flavor == flavor],
            [
                card
                for card in in_force
                if gpu_model and not card.flavor and card.gpu_model == gpu_model
            ],
            [card for card in in_force if not card.flavor and not card.gpu_model],
        ):
            if matches:
                return matches[-1].price_per_gpu_hour
        return Decimal(0)
