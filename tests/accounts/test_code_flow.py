"""Sign-in through the real test provider (authorization-code flow), without a browser: users by
subject, roles from the groups claim at every sign-in, and open sessions re-checked."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.choices import Role
from accounts.models import GroupRoleMapping, OidcIdentity
from accounts.oidc import SESSION_SYNCED_AT
from quotas.models import Team

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def teams(db):
    alpha = Team.objects.create(name="alpha", display_name="Alpha")
    beta = Team.objects.create(name="beta", display_name="Beta")
    GroupRoleMapping.objects.create(group="gpu-alpha-leads", role=Role.LEAD, team=alpha)
    GroupRoleMapping.objects.create(group="gpu-beta", role=Role.MEMBER, team=beta)
    GroupRoleMapping.objects.create(group="gpu-finance", role=Role.FINANCE)
    GroupRoleMapping.objects.create(group="gpu-admins", role=Role.ADMIN)
    return alpha, beta


def test_a_sign_in_creates_the_user_with_the_roles_its_groups_map_to(
    oidc_settings, code_flow, teams
):
    alpha, beta = teams
    oidc_settings.seed(
        "user", "ada", "ada-pw", "ada@example.com", "gpu-alpha-leads", "gpu-beta", "unmapped"
    )

    client, callback = code_flow("ada", "ada-pw")

    assert callback.status_code == 302
    assert callback["Location"] == "/my-teams/"
    user = get_user_model().objects.get(oidc_identity__issuer=oidc_settings.issuer)
    assert user.username == "ada"
    assert user.email == "ada@example.com"
    assert not user.has_usable_password()
    assert set(user.teams_led.all()) == {alpha}
    assert set(user.teams_joined.all()) == {beta}
    assert not user.is_staff
    assert not user.groups.filter(name="finance").exists()
    assert user.oidc_identity.groups == ["gpu-alpha-leads", "gpu-beta", "unmapped"]
    page = client.get("/my-teams/")
    assert page.status_code == 200
    assert b"Alpha" in page.content


def test_finance_and_admin_groups_grant_finance_and_staff_with_quota_apply(
    oidc_settings, code_flow, teams
):
    oidc_settings.seed("user", "fin", "fin-pw", "fin@example.com", "gpu-finance", "gpu-admins")

    client, callback = code_flow("fin", "fin-pw")

    assert callback.status_code == 302
    user = get_user_model().objects.get(username="fin")
    assert user.is_staff and not user.is_superuser
    assert user.groups.filter(name="finance").exists()
    assert user.has_perm("quotas.apply_quota_change")


def test_a_removed_group_loses_its_role_at_the_next_sign_in(oidc_settings, code_flow, teams):
    alpha, _ = teams
    oidc_settings.seed("user", "bob", "bob-pw", "bob@example.com", "gpu-alpha-leads", "gpu-admins")
    code_flow("bob", "bob-pw")
    user = get_user_model().objects.get(username="bob")
    assert set(user.teams_led.all()) == {alpha} and user.is_staff

    oidc_settings.seed("groups", "bob")
    _, callback = code_flow("bob", "bob-pw")

    assert callback.status_code == 302
    assert callback["Location"] == "/"
    user.refresh_from_db()
    assert set(user.teams_led.all()) == set()
    assert not user.is_staff
    assert not user.has_perm("quotas.apply_quota_change")
    # One account per subject, however often it signs in.
    assert OidcIdentity.objects.filter(user__username__startswith="bob").count() == 1


def _age_session(client, seconds: float) -> None:
    """Make the session's roles ``seconds`` older than they are (no waiting on the clock)."""
    session = client.session
    session[SESSION_SYNCED_AT] -= seconds
    session.save()


def test_an_open_session_loses_a_removed_group_once_the_role_ttl_passes(
    oidc_settings, code_flow, teams, settings
):
    alpha, _ = teams
    settings.GPULEDGER_OIDC_ROLE_TTL = 600
    oidc_settings.seed("user", "cy", "cy-pw", "cy@example.com", "gpu-alpha-leads")
    client, _ = code_flow("cy", "cy-pw")
    user = get_user_model().objects.get(username="cy")
    oidc_settings.seed("groups", "cy")

    # Within the TTL the session keeps what it was given...
    _age_session(client, 590)
    assert client.get("/my-teams/").status_code == 200
    assert set(user.teams_led.all()) == {alpha}
    # ...past it, the next request reads the groups again (refresh token, then userinfo).
    _age_session(client, 20)
    page = client.get("/teams/")

    assert page.status_code == 200
    assert set(user.teams_led.all()) == set()
    assert client.session.get("_auth_user_id") == str(user.pk)
    # The re-check starts a new TTL.
    assert time.time() - client.session[SESSION_SYNCED_AT] < 60


def test_an_open_session_ends_when_the_provider_refuses_its_refresh_token(
    oidc_settings, code_flow, teams, settings
):
    settings.GPULEDGER_OIDC_ROLE_TTL = 600
    oidc_settings.seed("user", "dee", "dee-pw", "dee@example.com", "gpu-alpha-leads")
    client, _ = code_flow("dee", "dee-pw")
    session = client.session
    session["gpuledger_oidc_refresh_token"] = "revoked-or-unknown"
    session.save()
    _age_session(client, 601)

    page = client.get("/teams/")

    assert page.status_code == 302
    assert page["Location"].startswith("/login/")
    assert "_auth_user_id" not in client.session


def test_a_local_account_with_the_same_email_is_not_taken_over(oidc_settings, code_flow, teams):
    local = get_user_model().objects.create_user(
        "breakglass", email="eve@example.com", password="local-pw", is_staff=True
    )
    oidc_settings.seed("user", "eve", "eve-pw", "eve@example.com")

    code_flow("eve", "eve-pw")

    created = get_user_model().objects.get(oidc_identity__issuer=oidc_settings.issuer)
    assert created.pk != local.pk
    assert created.email == "eve@example.com"
    local.refresh_from_db()
    assert local.is_staff
    assert not OidcIdentity.objects.filter(user=local).exists()


def test_a_code_the_provider_refuses_sends_back_to_the_login_page_saying_so(
    oidc_settings, live_server, teams
):
    client = Client(HTTP_HOST=urlsplit(live_server.url).netloc)
    start = client.get("/oidc/authenticate/")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]

    callback = client.get(f"/oidc/callback/?code=not-a-code&state={state}")

    assert callback.status_code == 302
    assert callback["Location"] == "/login/?oidc=failed"
    assert "_auth_user_id" not in client.session
    page = client.get(callback["Location"])
    assert b"Sign-in with Test IdP did not succeed" in page.content
