"""Creating an API token in the admin shows its key once, from the response, never a cookie."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from quotas.models import ApiToken


@pytest.fixture
def admin_client(client, db):
    admin = User.objects.create_superuser("root", password="pw-root-0123456789")
    client.force_login(admin)
    return client, admin


def test_the_new_key_is_shown_once_on_the_page_and_only_its_hash_is_stored(admin_client):
    client, admin = admin_client

    response = client.post(
        "/admin/quotas/apitoken/add/",
        {"user": admin.pk, "name": "finance export", "scope": "chargeback"},
    )

    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    token = ApiToken.objects.get(name="finance export")
    body = response.content.decode()
    key = body.split('id="api-token-key"', 1)[1].split(">", 1)[1].split("<", 1)[0].strip()
    assert key.startswith("glt_")
    assert ApiToken.hash_key(key) == token.key_hash
    assert key not in token.key_hash
    # Neither a message cookie nor the session carries the key.
    assert all(key not in morsel.value for morsel in response.cookies.values())
    assert all(key not in str(value) for value in client.session.values())
    # The next page shows no key any more.
    listing = client.get("/admin/quotas/apitoken/").content.decode()
    assert key not in listing
    assert token.prefix in listing


def test_editing_a_token_keeps_its_key(admin_client):
    client, admin = admin_client
    token, key = ApiToken.issue(admin, "script")

    response = client.post(
        f"/admin/quotas/apitoken/{token.pk}/change/",
        {"user": admin.pk, "name": "renamed", "scope": "chargeback"},
    )

    assert response.status_code == 302
    token.refresh_from_db()
    assert token.name == "renamed"
    assert token.key_hash == ApiToken.hash_key(key)
