"""Login lockout, the API documentation behind login, and the Content-Security-Policy."""

from __future__ import annotations

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User

PASSWORD = "right-horse-battery-staple"


@pytest.fixture
def alice(db):
    return User.objects.create_user("alice", password=PASSWORD)


def login(client, password, address="10.1.2.3"):
    return client.post(
        "/login/",
        {"username": "alice", "password": password},
        REMOTE_ADDR=address,
    )


def test_repeated_wrong_passwords_lock_the_user_out_even_with_the_right_password(client, alice):
    for _ in range(4):
        assert login(client, "wrong").status_code == 200  # the form again, with its error
    assert login(client, "wrong").status_code == 429  # the fifth failure locks

    response = login(client, PASSWORD)

    assert response.status_code == 429
    assert b"Too many failed sign-ins" in response.content
    assert "_auth_user_id" not in client.session


def test_the_lockout_is_per_user_and_address(client, alice):
    for _ in range(5):
        login(client, "wrong", address="10.1.2.3")

    response = login(client, PASSWORD, address="10.9.9.9")

    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(alice.pk)


def test_an_admin_unlocks_a_locked_user_by_deleting_the_attempt(client, alice):
    for _ in range(5):
        login(client, "wrong")
    assert login(client, PASSWORD).status_code == 429

    AccessAttempt.objects.filter(username="alice").delete()

    assert login(client, PASSWORD).status_code == 302


def test_a_success_before_the_limit_resets_the_count(client, alice):
    for _ in range(4):
        login(client, "wrong")
    assert login(client, PASSWORD).status_code == 302
    client.logout()

    for _ in range(4):
        login(client, "wrong")

    assert login(client, PASSWORD).status_code == 302


def test_api_documentation_needs_a_login(client, alice):
    response = client.get("/api/docs/")

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_the_schema_needs_credentials(client, alice):
    assert client.get("/api/schema/").status_code in (401, 403)

    client.force_login(alice)

    assert client.get("/api/schema/").status_code == 200


def test_api_documentation_is_served_from_static_files(client, alice):
    client.force_login(alice)

    response = client.get("/api/docs/")

    assert response.status_code == 200
    body = response.content.decode()
    assert "/static/drf_spectacular_sidecar/" in body
    assert "cdn" not in body.lower()
    assert "https://" not in body


def test_swagger_ui_starts_from_a_script_file_not_an_inline_script(client, alice):
    client.force_login(alice)

    body = client.get("/api/docs/").content.decode()
    script = client.get("/api/docs/?script=")

    assert "<script>" not in body
    assert script.status_code == 200
    assert "SwaggerUIBundle" in script.content.decode()


def test_redoc_needs_a_login_and_starts_without_an_inline_script(client, alice):
    assert client.get("/api/redoc/")["Location"].startswith("/login/")
    client.force_login(alice)

    body = client.get("/api/redoc/").content.decode()

    assert '<redoc spec-url="/api/schema/">' in body
    assert '<script src="/api/redoc/redoc.standalone.js"></script>' in body
    assert "<script>" not in body
    assert "https://" not in body


def test_the_redoc_bundle_loads_nothing_from_a_cdn(client):
    response = client.get("/api/redoc/redoc.standalone.js")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/javascript")
    bundle = response.content.decode()
    # (Booleans: a failing `in` would print the whole megabyte.)
    assert len(bundle) > 500_000
    assert ("Redoc.init" in bundle or "function Kw(" in bundle) is True
    assert ("cdn.redoc.ly" in bundle) is False
    # The package's source map describes the unpatched file.
    assert ("sourceMappingURL=redoc.standalone.js.map" in bundle) is False
    # Addresses left are schema ids, documentation links and examples, none an <img src>.
    assert ('src:"https://' in bundle) is False


def test_the_redoc_bundle_is_revalidated_and_gzipped(client):
    first = client.get("/api/redoc/redoc.standalone.js", HTTP_ACCEPT_ENCODING="gzip, br")

    again = client.get("/api/redoc/redoc.standalone.js", HTTP_IF_NONE_MATCH=first["ETag"])

    assert first["Content-Encoding"] == "gzip"
    assert len(first.content) < 500_000
    assert "Accept-Encoding" in first["Vary"]
    assert again.status_code == 304


def test_the_bundle_is_refused_when_a_new_redoc_release_loads_other_outside_files(
    monkeypatch, tmp_path
):
    from django.core.exceptions import ImproperlyConfigured

    from core import api_docs

    changed = tmp_path / "redoc.standalone.js"
    changed.write_text('img({src:"https://cdn.example.net/logo.svg"})', encoding="utf-8")
    monkeypatch.setattr(api_docs.finders, "find", lambda path: str(changed))
    api_docs.redoc_bundle.cache_clear()
    try:
        with pytest.raises(ImproperlyConfigured, match="0 times"):
            api_docs.redoc_bundle()
    finally:
        api_docs.redoc_bundle.cache_clear()


def test_every_page_carries_a_self_only_content_security_policy(client, alice):
    client.force_login(alice)

    policy = client.get("/teams/")["Content-Security-Policy"]

    directives = dict(part.strip().split(" ", 1) for part in policy.split(";") if part.strip())
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'"
    assert directives["object-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'"
