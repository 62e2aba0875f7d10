"""X-Forwarded-Proto trusted only when configured, the per-username lockout ceiling across
addresses, and the API schema closed to chargeback-scoped tokens."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.contrib.auth.models import User
from django.test import RequestFactory
from rest_framework.test import APIClient

from quotas.choices import ApiTokenScope
from quotas.models import ApiToken
from tests.config.test_settings import REAL_KEY, ROOT

PASSWORD = "right-horse-battery-staple"


def test_x_forwarded_proto_is_ignored_unless_a_proxy_is_configured(settings, client):
    request = RequestFactory().get("/login/", HTTP_X_FORWARDED_PROTO="https")
    assert not request.is_secure()

    # With the HTTPS redirect on, a client claiming HTTPS over plain HTTP is still redirected.
    settings.SECURE_SSL_REDIRECT = True
    response = client.get("/login/", HTTP_X_FORWARDED_PROTO="https")
    assert response.status_code == 301
    assert response["Location"] == "https://testserver/login/"


def proxy_header(**env: str) -> str:
    """``SECURE_PROXY_SSL_HEADER`` as production settings read it from ``env``."""
    base = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DEBUG", "DJANGO_SETTINGS_MODULE", "GPULEDGER_TRUST_X_FORWARDED_PROTO"}
    }
    result = subprocess.run(
        [sys.executable, "-c", "import config.settings as s; print(s.SECURE_PROXY_SSL_HEADER)"],
        cwd=ROOT,
        env={**base, "SECRET_KEY": REAL_KEY, "CACHE_URL": "locmem://", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_x_forwarded_proto_is_trusted_behind_a_configured_proxy():
    assert proxy_header() == "None"
    assert proxy_header(GPULEDGER_TRUST_X_FORWARDED_PROTO="true") == (
        "('HTTP_X_FORWARDED_PROTO', 'https')"
    )


@pytest.fixture
def alice(db):
    return User.objects.create_user("alice", password=PASSWORD)


def login(client, password: str, address: str):
    return client.post("/login/", {"username": "alice", "password": password}, REMOTE_ADDR=address)


def test_failures_from_many_addresses_lock_the_username_at_the_ceiling(client, alice, settings):
    settings.GPULEDGER_LOGIN_USERNAME_FAILURES = 6
    # Three wrong passwords from each of two addresses: under the pair limit (5) each, six in all.
    statuses = [
        login(client, "wrong", address).status_code
        for address in ("10.0.0.1", "10.0.0.2")
        for _ in range(3)
    ]
    # The sixth failure reaches the ceiling and locks at once.
    assert statuses == [200, 200, 200, 200, 200, 429]

    response = login(client, PASSWORD, "10.0.0.3")

    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


def test_under_the_ceiling_another_address_still_signs_in(client, alice, settings):
    settings.GPULEDGER_LOGIN_USERNAME_FAILURES = 6
    for address in ("10.0.0.1", "10.0.0.2"):
        for _ in range(2 if address == "10.0.0.1" else 3):
            login(client, "wrong", address)

    assert login(client, PASSWORD, "10.0.0.3").status_code == 302


def test_a_chargeback_token_cannot_read_the_schema(db):
    staff = User.objects.create_user("finance-bot", is_staff=True)
    _token, chargeback = ApiToken.issue(staff, "finance", ApiTokenScope.CHARGEBACK)
    _token, full = ApiToken.issue(staff, "script", ApiTokenScope.FULL)
    api = APIClient()

    api.credentials(HTTP_AUTHORIZATION=f"Bearer {chargeback}")
    assert api.get("/api/schema/", {"format": "json"}).status_code == 403
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {full}")
    assert api.get("/api/schema/", {"format": "json"}).status_code == 200
