"""Group → role mappings, applying roles, and which ways in the login page offers."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.test import Client

from accounts.choices import Role
from accounts.models import GroupRoleMapping
from accounts.roles import Granted, apply_roles, granted_roles, groups_from_claims
from quotas.access import role_label, visible_team_ids
from quotas.models import Team

pytestmark = pytest.mark.django_db


@pytest.fixture
def teams():
    return Team.objects.create(name="alpha"), Team.objects.create(name="beta")


def test_groups_map_to_the_union_of_their_roles_and_lead_wins_over_member(teams):
    alpha, beta = teams
    GroupRoleMapping.objects.create(group="a-leads", role=Role.LEAD, team=alpha)
    GroupRoleMapping.objects.create(group="a-all", role=Role.MEMBER, team=alpha)
    GroupRoleMapping.objects.create(group="b-all", role=Role.MEMBER, team=beta)
    GroupRoleMapping.objects.create(group="money", role=Role.FINANCE)

    granted = granted_roles(["a-leads", "a-all", "b-all", "money", "unmapped"])

    assert granted == Granted(
        lead=frozenset({alpha.pk}), member=frozenset({beta.pk}), finance=True, admin=False
    )
    assert granted_roles([]) == Granted(frozenset(), frozenset(), False, False)


def test_applying_roles_sets_exactly_what_is_granted(teams, settings):
    alpha, beta = teams
    user = get_user_model().objects.create_user("u")
    user.teams_led.add(beta)
    apply_roles(user, Granted(frozenset({alpha.pk}), frozenset({beta.pk}), True, True))
    user = get_user_model().objects.get(pk=user.pk)
    assert set(user.teams_led.all()) == {alpha}
    assert set(user.teams_joined.all()) == {beta}
    assert user.groups.filter(name=settings.GPULEDGER_FINANCE_GROUP).exists()
    assert user.is_staff and user.has_perm("quotas.apply_quota_change")

    apply_roles(user, Granted(frozenset(), frozenset(), False, False))
    user = get_user_model().objects.get(pk=user.pk)
    assert not user.teams_led.exists() and not user.teams_joined.exists()
    assert not user.groups.exists()
    assert not user.is_staff and not user.has_perm("quotas.apply_quota_change")
    # The finance group itself stays for everyone else.
    assert Group.objects.filter(name=settings.GPULEDGER_FINANCE_GROUP).exists()


def test_a_member_sees_their_team_but_does_not_lead_it(teams):
    alpha, beta = teams
    user = get_user_model().objects.create_user("m")
    alpha.members.add(user)

    assert visible_team_ids(user) == {alpha.pk}
    assert role_label(user) == "Member of alpha"


def test_a_lead_or_member_mapping_names_a_team_and_the_others_do_not(teams):
    alpha, _ = teams
    with pytest.raises(ValidationError):
        GroupRoleMapping(group="g", role=Role.LEAD).full_clean()
    with pytest.raises(ValidationError):
        GroupRoleMapping(group="g", role=Role.ADMIN, team=alpha).full_clean()
    GroupRoleMapping(group="g", role=Role.MEMBER, team=alpha).full_clean()


@pytest.mark.parametrize(
    ("raw", "groups"),
    [
        (["a", "b"], ["a", "b"]),
        ("a", ["a"]),
        (None, []),
        ({"a": 1}, []),
        (["a", 3], []),
    ],
)
def test_the_groups_claim_is_read_as_a_list_of_strings_or_nothing(raw, groups):
    claims = {"sub": "1"} if raw is None else {"sub": "1", "groups": raw}
    assert groups_from_claims(claims, "groups") == groups


def test_without_an_issuer_there_is_no_provider_sign_in(client: Client, settings):
    settings.GPULEDGER_OIDC_ISSUER = ""

    page = client.get("/login/")

    assert b"Sign in with" not in page.content
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404


def test_with_local_accounts_off_a_password_does_not_sign_in(client: Client, settings):
    get_user_model().objects.create_user("local", password="local-password-1")
    settings.GPULEDGER_LOCAL_LOGIN = False
    settings.AUTHENTICATION_BACKENDS = [
        "axes.backends.AxesStandaloneBackend",
        "accounts.oidc.OidcBackend",
    ]
    settings.GPULEDGER_OIDC_ISSUER = "http://127.0.0.1:9/openid"
    settings.GPULEDGER_OIDC_CLIENT_ID = "x"

    page = client.get("/login/")
    answer = client.post("/login/", {"username": "local", "password": "local-password-1"})

    assert b'type="password"' not in page.content
    assert answer.status_code == 200
    assert "_auth_user_id" not in client.session
