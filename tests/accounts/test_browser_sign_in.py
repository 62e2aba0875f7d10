"""Chromium signs in through the real test provider and lands a mapped team lead on My teams."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from accounts.choices import Role
from accounts.models import GroupRoleMapping
from quotas.models import Team
from tests.accounts.conftest import PROVIDER_NAME

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("GPULEDGER_SCREENSHOTS", "/tmp/gpuledger-screenshots"))


def test_a_mapped_lead_signs_in_with_the_provider_and_lands_on_my_teams(
    page, live_server, oidc_settings, console_errors
):
    alpha = Team.objects.create(name="alpha", display_name="Alpha")
    Team.objects.create(name="beta", display_name="Beta")
    GroupRoleMapping.objects.create(group="gpu-alpha-leads", role=Role.LEAD, team=alpha)
    oidc_settings.seed("user", "ada", "ada-pw", "ada@example.com", "gpu-alpha-leads")
    SHOTS.mkdir(parents=True, exist_ok=True)

    page.goto(f"{live_server.url}/login/")
    button = page.get_by_role("link", name=f"Sign in with {PROVIDER_NAME}")
    assert button.is_visible()
    # Local accounts keep working next to it (break-glass).
    assert page.get_by_label("Password").is_visible()
    page.screenshot(path=SHOTS / "login-oidc.png", full_page=True)

    button.click()
    page.wait_for_url(re.compile(re.escape(oidc_settings.url) + "/accounts/login/"))
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill("ada-pw")
    page.get_by_role("button", name="Sign in to the provider").click()

    page.wait_for_url(f"{live_server.url}/my-teams/")
    assert page.get_by_role("heading", name="Alpha").first.is_visible()
    assert "Beta" not in page.content()
    page.screenshot(path=SHOTS / "my-teams-after-oidc.png", full_page=True)
    user = get_user_model().objects.get(username="ada")
    assert list(user.teams_led.values_list("name", flat=True)) == ["alpha"]
    assert console_errors == []


def test_the_login_page_hides_the_password_form_when_local_accounts_are_off(
    page, live_server, oidc_settings, settings
):
    settings.GPULEDGER_LOCAL_LOGIN = False

    page.goto(f"{live_server.url}/login/")

    assert page.get_by_role("link", name=f"Sign in with {PROVIDER_NAME}").is_visible()
    assert page.get_by_label("Password").count() == 0
    page.screenshot(path=SHOTS / "login-oidc-only.png", full_page=True)


def test_an_admin_maps_a_group_to_a_team_lead_in_the_admin(page, live_server, console_errors):
    from django.conf import settings
    from django.test import Client

    alpha = Team.objects.create(name="alpha", display_name="Alpha")
    admin = get_user_model().objects.create_superuser("root", password="root-password-1")
    client = Client()
    client.force_login(admin)
    page.context.add_cookies(
        [
            {
                "name": settings.SESSION_COOKIE_NAME,
                "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                "url": live_server.url,
            }
        ]
    )

    page.goto(f"{live_server.url}/admin/accounts/grouprolemapping/add/")
    page.get_by_label("Group").fill("gpu-alpha-leads")
    page.get_by_label("Role").select_option("lead")
    page.locator("#id_team").select_option(str(alpha.pk))
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SHOTS / "admin-group-role-mapping.png", full_page=True)
    page.get_by_role("button", name="Save", exact=True).click()

    page.wait_for_url(f"{live_server.url}/admin/accounts/grouprolemapping/")
    mapping = GroupRoleMapping.objects.get()
    assert (mapping.group, mapping.role, mapping.team_id) == ("gpu-alpha-leads", "lead", alpha.pk)
    page.screenshot(path=SHOTS / "admin-group-role-mappings.png", full_page=True)
    assert console_errors == []
