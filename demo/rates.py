"""The demo's rate card: a price per GPU-hour per flavor, with one price change mid-period.

Prices are in the ballpark of on-demand cloud list prices per GPU-hour (H100 ≈ 4, A100 ≈ 2, a
MIG slice a fraction of an A100), so the chargeback page shows plausible money. Written with
``update_or_create`` on the card's identity, so re-running the demo changes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings

from ledger.choices import RateKind
from ledger.models import RateCard

# (kind, flavor, price from the start, price from the change or None)
DEMO_PRICES: tuple[tuple[str, str, Decimal, Decimal | None], ...] = (
    (RateKind.ALLOCATED, "h100", Decimal("4.10"), Decimal("3.60")),
    (RateKind.ALLOCATED, "a100", Decimal("2.20"), None),
    (RateKind.ALLOCATED, "a100-mig", Decimal("0.70"), None),
    (RateKind.BORROWING, "h100", Decimal("4.90"), None),
    (RateKind.LENDING, "h100", Decimal("1.00"), None),
)
CHANGE_NOTE = "Reserved-capacity discount"


def price_change_at(start: datetime, end: datetime) -> datetime:
    """The midnight (UTC) nearest the middle of the simulated period."""
    middle = start + (end - start) / 2
    return middle.replace(hour=0, minute=0, second=0, microsecond=0)


def seed_rate_cards(start: datetime, end: datetime) -> int:
    """Create (or update) the demo's cards; returns how many cards it wrote."""
    currency = settings.GPULEDGER_CURRENCY
    # A year before the period: every simulated hour has a card in force.
    since = (start - timedelta(days=365)).replace(hour=0, minute=0, second=0, microsecond=0)
    change = price_change_at(start, end)
    written = 0
    for kind, flavor, first, later in DEMO_PRICES:
        prices = [(since, first, "Demo list price")]
        if later is not None:
            prices.append((change, later, CHANGE_NOTE))
        for effective_from, price, note in prices:
            RateCard.objects.update_or_create(
                kind=kind,
                flavor=flavor,
                gpu_model="",
                currency=currency,
                effective_from=effective_from,
                defaults={"price_per_gpu_hour": price, "note": note},
            )
            written += 1
    return written
