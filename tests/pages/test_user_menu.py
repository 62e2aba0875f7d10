"""The user menu names the user's role: staff, finance, the teams a lead leads, or a member who
leads none (each test on a database of its own making, no shared world)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.test import override_settings
from django.urls import reverse

from quotas.models import Team


@pytest.fixture
def finance_user(db, django_user_model):
    user = django_user_model.objects.create_user(username="fin", password="fin-password")
    user.groups.add(Group.objects.create(name=settings.GPULEDGER_FINANCE_GROUP))
    return user


def role_line(client) -> str:
    body = client.get(reverse("dashboard:team-list")).content.decode()
    return body.split('data-testid="user-role">', 1)[1].split("</p>", 1)[0]


@pytest.mark.django_db
def test_the_menu_names_staff(login_client, staff_user):
    assert role_line(login_client(staff_user)) == "Staff: sees every team"


@pytest.mark.django_db
def test_the_menu_names_the_finance_role_not_team_lead(login_client, finance_user):
    assert role_line(login_client(finance_user)) == (
        "Finance: sees every team&#x27;s figures and chargeback"
    )


@pytest.mark.django_db
def test_the_menu_names_the_teams_a_lead_leads(login_client, lead_user):
    for name in ("zeta", "alpha", "mu", "beta"):
        Team.objects.create(name=name).leads.add(lead_user)
    Team.objects.create(name="other")

    assert role_line(login_client(lead_user)) == ("Team lead of alpha, beta, mu and 1 more")


@pytest.mark.django_db
def test_a_finance_member_who_leads_a_team_is_named_both(login_client, finance_user):
    Team.objects.create(name="ledger", display_name="Ledger team").leads.add(finance_user)

    line = role_line(login_client(finance_user))

    assert line.startswith("Finance: ")
    assert line.endswith("; Team lead of Ledger team")


@pytest.mark.django_db
def test_a_member_who_leads_no_team_is_told_what_they_see(login_client, lead_user):
    client = login_client(lead_user)

    assert role_line(client) == "Member: leads no team; sees fleet totals"
    with override_settings(GPULEDGER_TEAM_VISIBILITY="public"):
        assert role_line(client) == "Member: leads no team; sees every team&#x27;s figures"
