"""The demo's logins and rate card: three roles, distinct passwords, prices that change once."""

import io
import re
from datetime import datetime
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from demo.rates import seed_rate_cards
from ledger.choices import RateKind
from ledger.models import RateCard
from quotas.access import sees_everything, visible_team_ids
from quotas.models import Team

START = datetime.fromisoformat("2026-06-08T12:00:00+00:00")
END = datetime.fromisoformat("2026-06-15T12:00:00+00:00")


def _logins(output: str) -> dict[str, str]:
    return dict(re.findall(r"^\s+(\S+)\s+/ (\S+)\s+\(", output, flags=re.MULTILINE))


@pytest.mark.django_db
def test_it_prints_three_logins_with_distinct_passwords_and_the_url_it_was_given():
    team = Team.objects.create(name="alpha")
    out = io.StringIO()

    call_command("demo_users", "--url", "http://127.0.0.1:8200/", stdout=out)

    text = out.getvalue()
    assert "http://127.0.0.1:8200/" in text
    assert "8000" not in text
    logins = _logins(text)
    assert set(logins) == {"admin", "lead-alpha", "finance"}
    assert len(set(logins.values())) == 3
    users = get_user_model().objects
    for username, password in logins.items():
        assert users.get(username=username).check_password(password), username
    finance = users.get(username="finance")
    assert not finance.is_staff and not finance.is_superuser
    assert sees_everything(finance)
    lead = users.get(username="lead-alpha")
    assert visible_team_ids(lead) == {team.pk}


@pytest.mark.django_db
def test_a_given_password_still_gives_each_role_its_own():
    Team.objects.create(name="alpha")
    out = io.StringIO()

    call_command("demo_users", "--password", "pw", stdout=out)

    assert _logins(out.getvalue()) == {
        "admin": "pw-admin",
        "lead-alpha": "pw-lead",
        "finance": "pw-finance",
    }


@pytest.mark.django_db
def test_the_rate_card_prices_each_flavor_and_changes_the_h100_price_once():
    assert seed_rate_cards(START, END) == 6
    assert seed_rate_cards(START, END) == 6  # idempotent
    allocated = RateCard.objects.filter(kind=RateKind.ALLOCATED)

    assert set(allocated.values_list("flavor", flat=True)) == {"h100", "a100", "a100-mig"}
    h100 = list(allocated.filter(flavor="h100").order_by("effective_from"))
    assert [card.price_per_gpu_hour for card in h100] == [Decimal("4.10"), Decimal("3.60")]
    # The change falls on a midnight inside the period, so the demo shows both prices.
    assert START < h100[1].effective_from < END
    assert h100[1].effective_from.hour == 0
    assert RateCard.objects.count() == 6
