"""Who may read /metrics: loopback and signed-in staff with no configuration; elsewhere a
bearer token or an allowlisted network; a wrong token is 401, anything else 403."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

TOKEN = "metrics-token-" + "z" * 24
OUTSIDE = "10.20.30.40"


@pytest.fixture(autouse=True)
def _no_broker(settings):
    # Access is the subject here: a broker that answers nothing keeps each scrape fast.
    settings.CELERY_BROKER_URL = "memory://"


def get(client, **extra):
    return client.get("/metrics", **extra)


def test_loopback_reads_the_metrics_with_no_configuration(client):
    response = get(client, REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    assert b"gpuledger_broker_up" in response.content


def test_ipv6_and_mapped_loopback_read_the_metrics(client):
    assert get(client, REMOTE_ADDR="::1").status_code == 200
    assert get(client, REMOTE_ADDR="::ffff:127.0.0.1").status_code == 200


def test_another_address_is_refused_without_a_token(client):
    response = get(client, REMOTE_ADDR=OUTSIDE)
    assert response.status_code == 403
    assert b"GPULEDGER_METRICS_TOKEN" in response.content
    assert b"gpuledger_" not in response.content


def test_the_token_lets_another_address_in(client, settings):
    settings.GPULEDGER_METRICS_TOKEN = TOKEN
    response = get(client, REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert b"gpuledger_broker_up" in response.content


def test_a_wrong_token_is_refused_with_401_even_from_loopback(client, settings):
    settings.GPULEDGER_METRICS_TOKEN = TOKEN
    for address in (OUTSIDE, "127.0.0.1"):
        response = get(client, REMOTE_ADDR=address, HTTP_AUTHORIZATION=f"Bearer {TOKEN}x")
        assert response.status_code == 401
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert b"gpuledger_" not in response.content


def test_a_token_is_refused_when_none_is_configured(client, settings):
    settings.GPULEDGER_METRICS_TOKEN = ""
    response = get(client, REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION="Bearer ")
    assert response.status_code == 401
    response = get(client, REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION="Bearer anything")
    assert response.status_code == 401


def test_signed_in_staff_read_the_metrics_from_anywhere(client, django_user_model):
    admin = django_user_model.objects.create_user("ops", password="pw-ops-12345", is_staff=True)
    client.force_login(admin)
    assert get(client, REMOTE_ADDR=OUTSIDE).status_code == 200


def test_a_signed_in_user_who_is_not_staff_is_refused(client, django_user_model):
    lead = django_user_model.objects.create_user("lead", password="pw-lead-12345")
    client.force_login(lead)
    assert get(client, REMOTE_ADDR=OUTSIDE).status_code == 403


def test_an_allowlisted_network_reads_the_metrics(client, settings):
    settings.GPULEDGER_METRICS_ALLOWED_NETWORKS = ["10.20.0.0/16", "fd00::/8"]
    assert get(client, REMOTE_ADDR=OUTSIDE).status_code == 200
    assert get(client, REMOTE_ADDR="fd00::5").status_code == 200
    assert get(client, REMOTE_ADDR="10.21.0.1").status_code == 403


def test_x_forwarded_for_is_ignored_unless_trusted(client, settings):
    settings.GPULEDGER_TRUST_X_FORWARDED_FOR = False
    assert get(client, REMOTE_ADDR=OUTSIDE, HTTP_X_FORWARDED_FOR="127.0.0.1").status_code == 403


def test_a_trusted_proxy_on_loopback_does_not_make_its_clients_local(client, settings):
    # Given a proxy on the same host that appends the address it saw to X-Forwarded-For
    settings.GPULEDGER_TRUST_X_FORWARDED_FOR = True
    # then a client on the network is refused, whatever it wrote into the header itself,
    refused = get(client, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=f"127.0.0.1, {OUTSIDE}")
    assert refused.status_code == 403
    # and a client the proxy saw on loopback is let in.
    assert get(client, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="127.0.0.1").status_code == 200


def test_metrics_are_not_redirected_to_https(client, settings):
    settings.SECURE_SSL_REDIRECT = True
    assert get(client, REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get("/login/").status_code == 301


def test_only_get_is_answered(client):
    assert client.post("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 405
