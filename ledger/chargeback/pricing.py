"""Rate cards in force per hour and the price of each aggregated piece (README "Chargeback API")."""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal

from django.db.models import Case, IntegerField, Value, When

from ledger.chargeback.base import Charge, ceil_hour, to_decimal
from ledger.choices import RateKind
from ledger.models import RateCard

# The package's name, as before the split: log filters and alerts key on it.
logger = logging.getLogger("ledger.chargeback")

# (currency, flavor, GPU model) already warned about without a rate card in this process: pages
# and the API say it on every answer (``Report.pricing``), the log once.
_WARNED: set[tuple[str, str, str]] = set()


def rate_cards(currency: str) -> list[RateCard]:
    """The cards that price in ``currency``, oldest first."""
    return list(RateCard.objects.in_currency(currency).order_by("effective_from"))


class Pricer:
    """Rate cards in force per hour, and the price segments of a window.

    A segment is a run of hours in which no card changes; the aggregate query groups by segment
    (a CASE on ``hour``) so each piece is priced with one card.
    """

    def __init__(
        self,
        start: datetime,
        end: datetime,
        currency: str,
        model: str,
        cards: list[RateCard] | None = None,
    ) -> None:
        """``cards``: the cards in ``currency`` as ``rate_cards`` reads them, when already read."""
        self.start = start
        self.model = model
        self.currency = currency
        self.cards = rate_cards(currency) if cards is None else cards
        self.breaks = sorted(
            {
                ceil_hour(card.effective_from)
                for card in self.cards
                if start < ceil_hour(card.effective_from) < end
            }
        )
        self._cache: dict[tuple[str, str, str, int], Decimal | None] = {}
        self._missing: set[tuple[str, str, str]] = set()

    def segment_expression(self) -> Case | None:
        if not self.breaks:
            return None
        whens = [
            When(hour__lt=boundary, then=Value(index)) for index, boundary in enumerate(self.breaks)
        ]
        return Case(*whens, default=Value(len(self.breaks)), output_field=IntegerField())

    def segment_start(self, index: int) -> datetime:
        return self.start if index == 0 else self.breaks[index - 1]

    def price(self, kind: str, flavor: str, gpu_model: str, segment: int) -> Decimal | None:
        cache_key = (kind, flavor, gpu_model, segment)
        if cache_key not in self._cache:
            self._cache[cache_key] = self._lookup(
                kind, flavor, gpu_model, self.segment_start(segment)
            )
        return self._cache[cache_key]

    def _lookup(self, kind: str, flavor: str, gpu_model: str, at: datetime) -> Decimal | None:
        in_force = [c for c in self.cards if c.kind == kind and ceil_hour(c.effective_from) <= at]
        for matches in (
            [c for c in in_force if flavor and c.flavor == flavor],
            [c for c in in_force if gpu_model and not c.flavor and c.gpu_model == gpu_model],
            [c for c in in_force if not c.flavor and not c.gpu_model],
        ):
            if matches:
                return matches[-1].price_per_gpu_hour
        return None

    def price_piece(self, figures: Charge, flavor: str, gpu_model: str, segment: int) -> None:
        allocated_price = self.price(RateKind.ALLOCATED, flavor, gpu_model, segment)
        if allocated_price is None:
            if self.model == "quota":
                charged = figures.nominal_gpu_hours + figures.borrowed_gpu_hours
            else:
                charged = figures.allocated_gpu_hours
            if charged > 0:
                self._warn_missing(flavor, gpu_model)
                figures.unpriced_gpu_hours += charged
            allocated_price = Decimal(0)
        if self.model == "usage":
            figures.cost_allocated = to_decimal(figures.allocated_gpu_hours) * allocated_price
            return
        borrowing_price = self.price(RateKind.BORROWING, flavor, gpu_model, segment)
        lending_price = self.price(RateKind.LENDING, flavor, gpu_model, segment)
        figures.cost_allocated = to_decimal(figures.nominal_gpu_hours) * allocated_price
        figures.cost_borrowing = to_decimal(figures.borrowed_gpu_hours) * (
            allocated_price if borrowing_price is None else borrowing_price
        )
        figures.cost_lending_credit = to_decimal(figures.lent_gpu_hours) * (
            lending_price or Decimal(0)
        )

    def _warn_missing(self, flavor: str, gpu_model: str) -> None:
        key = (RateKind.ALLOCATED, flavor, gpu_model)
        if key in self._missing:
            return
        self._missing.add(key)
        once = (self.currency, flavor, gpu_model)
        level = logging.DEBUG if once in _WARNED else logging.WARNING
        _WARNED.add(once)
        logger.log(
            level,
            "no rate card in %s for flavor %r / GPU model %r: its GPU-hours are not charged",
            self.currency,
            flavor,
            gpu_model,
        )
