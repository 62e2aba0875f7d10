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
