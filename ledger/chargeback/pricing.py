"""Rate cards in force per hour and the price of each aggregated piece (README "Chargeback API")."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Case, F, FloatField, Func, IntegerField, Q, Value, When
from django.db.models.functions import Lower, Replace, Trim
from django.db.models.lookups import Exact

from ledger.chargeback.base import Charge, ceil_hour, to_decimal
from ledger.choices import RateKind
from ledger.models import RateCard

# The package's name, as before the split: log filters and alerts key on it.
logger = logging.getLogger("ledger.chargeback")

# (currency, flavor, GPU model) already warned about without a rate card in this process: pages
# and the API say it on every answer (``Report.pricing``), the log once.
_WARNED: set[tuple[str, str, str]] = set()


def gpu_model_key(model: str) -> str:
    """The form in which GPU models are compared. One model reaches the ledger spelled two ways:
    DCGM's ``modelName`` ("NVIDIA H100 80GB HBM3", on rows of GPUs with telemetry) and GPU
    Feature Discovery's ``nvidia.com/gpu.product`` node label ("NVIDIA-H100-80GB-HBM3", on rows
    of pods without it), and a rate card may be typed either way, in any case."""
    return model.strip().lower().replace(" ", "-").replace("_", "-")


def gpu_model_key_sql(field: str = "gpu_model") -> Func:
    """``gpu_model_key`` of a column, in SQL (the same steps, portable to SQLite)."""
    dash = Value("-")
    spaced = Replace(Trim(F(field)), Value(" "), dash)
    return Lower(Replace(spaced, Value("_"), dash))


# The rate-card precedence, written once: a flavor's card, else the GPU model's card (one that
# names no flavor; models compared by ``gpu_model_key``), else the default card (neither). Every
# price in the project goes through it: ``card_in_force`` (the chargeback's ``Pricer``, the
# alerts' ``alerts.pricing.Prices``, the serving pages) and the SQL CASE of
# ``Pricer.price_case`` (the workload list's cost sort), whose WHENs follow its order.
PRECEDENCE: tuple[Callable[[RateCard, str, str], bool], ...] = (
    lambda card, flavor, _model: bool(flavor) and card.flavor == flavor,
    lambda card, _flavor, model: (
        bool(gpu_model_key(model))
        and not card.flavor
        and gpu_model_key(card.gpu_model) == gpu_model_key(model)
    ),
    lambda card, _flavor, _model: not card.flavor and not card.gpu_model,
)


def card_in_force(
    cards: list[RateCard], kind: str, flavor: str, gpu_model: str, at: datetime
) -> RateCard | None:
    """The card of ``kind`` pricing (flavor, GPU model) at ``at`` (an hour start): the newest in
    force (effective from the hour it starts in) at the first ``PRECEDENCE`` level that has one.
    ``cards`` oldest first."""
    in_force = [c for c in cards if c.kind == kind and ceil_hour(c.effective_from) <= at]
    for matches_level in PRECEDENCE:
        matches = [c for c in in_force if matches_level(c, flavor, gpu_model)]
        if matches:
            return matches[-1]
    return None


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
        card = card_in_force(self.cards, kind, flavor, gpu_model, at)
        return None if card is None else card.price_per_gpu_hour

    def price_case(self, kind: str, fallback: Any) -> Any:
        """The price of ``kind`` of each rollup row (``hour``, ``flavor``, ``gpu_model``) as a SQL
        CASE: per price segment, a WHEN per card key in ``PRECEDENCE`` order, each priced by
        ``price`` (so by ``card_in_force``); ``fallback`` (an expression) where none is."""
        whens = []
        bounds = [None, *self.breaks, None]
        for segment in range(len(bounds) - 1):
            hours = Q()
            if bounds[segment] is not None:
                hours &= Q(hour__gte=bounds[segment])
            if bounds[segment + 1] is not None:
                hours &= Q(hour__lt=bounds[segment + 1])
            start = self.segment_start(segment)
            in_force = [
                card
                for card in self.cards
                if card.kind == kind and ceil_hour(card.effective_from) <= start
            ]
            flavors = sorted(
                {card.flavor for card in in_force if PRECEDENCE[0](card, card.flavor, "")}
            )
            models = sorted(
                {
                    gpu_model_key(card.gpu_model)
                    for card in in_force
                    if PRECEDENCE[1](card, "", card.gpu_model)
                }
            )
            for flavor in flavors:
                price = self.price(kind, flavor, "", segment)
                whens.append(When(hours & Q(flavor=flavor), then=Value(float(price or 0))))
            for model in models:
                price = self.price(kind, "", model, segment)
                same_model = Exact(gpu_model_key_sql(), Value(model))
                whens.append(When(hours & same_model, then=Value(float(price or 0))))
            default = self.price(kind, "", "", segment)
            if default is not None:
                whens.append(When(hours, then=Value(float(default))))
        if not whens:
            return fallback
        return Case(*whens, default=fallback, output_field=FloatField())

    def priced_components(self) -> list[tuple[str, Any, int]]:
        """What a row's cost sums (``HourlyRollupQuerySet.ranking``'s ``priced``), as
        ``price_piece`` prices a piece: allocated GPU-hours × the allocated price (usage model),
        or nominal × allocated + borrowed × borrowing (else allocated) − lent × lending."""
        none = Value(0.0, output_field=FloatField())
        allocated = self.price_case(RateKind.ALLOCATED, none)
        if self.model == "usage":
            return [("allocated_gpu_hours", allocated, 1)]
        return [
            ("nominal_gpu_hours", allocated, 1),
            ("borrowed_gpu_hours", self.price_case(RateKind.BORROWING, allocated), 1),
            ("lent_gpu_hours", self.price_case(RateKind.LENDING, none), -1),
        ]

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
