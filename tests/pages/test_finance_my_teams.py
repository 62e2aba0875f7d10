"""A finance user who leads no team never lands on an empty My teams: the navigation leaves it
out and the page sends them to the chargeback over the same range. Leads and plain members
still have it; staff never do."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from quotas.models import Team

pytestmark = pytest.mark.django_db

NAV_ENTRY = ">My teams</a>"


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def finance(django_user_model):
    user = django_user_model.objects.create_user("money")
    user.groups.add(Group.objects.create(name=settings.GPULEDGER_FINANCE_GROUP))
    return user


def test_finance_is_sent_to_the_chargeback_over_the_same_range(finance) -> None:
    answer = _client(finance).get(reverse("dashboard:my-teams"), {"range": "7d"})
    assert answer.status_code == 302
    assert answer["Location"] == reverse("dashboard:chargeback") + "?range=7d"


def test_the_navigation_offers_my_teams_only_where_it_has_something(
    finance, django_user_model
) -> None:
    overview = reverse("dashboard:overview")
    assert NAV_ENTRY not in _client(finance).get(overview).content.decode()

    lead = django_user_model.objects.create_user("lead")
    Team.objects.create(name="alpha").leads.add(lead)
    assert NAV_ENTRY in _client(lead).get(overview).content.decode()
    # A finance user who also leads a team keeps it.
    finance_lead = django_user_model.objects.create_user("money-lead")
    finance_lead.groups.add(Group.objects.get(name=settings.GPULEDGER_FINANCE_GROUP))
    Team.objects.get(name="alpha").leads.add(finance_lead)
    assert NAV_ENTRY in _client(finance_lead).get(overview).content.decode()
    assert _client(finance_lead).get(reverse("dashboard:my-teams")).status_code == 200

    member = django_user_model.objects.create_user("member")
    assert NAV_ENTRY in _client(member).get(overview).content.decode()
    staff = django_user_model.objects.create_user("staff", is_staff=True)
    assert NAV_ENTRY not in _client(staff).get(overview).content.decode()
