"""Fixtures of the sign-in tests: a real OpenID Connect provider on loopback, and GPU Ledger's
settings pointed at it.

``oidc_provider``  django-oidc-provider in its own Django process (``tests/oidc_provider/``),
                   started once per test module on a free loopback port with its own SQLite file:
                   migrated, given an RSA signing key, and stopped at the end of the module.
                   ``.seed(...)`` runs ``tests/oidc_provider/seed.py`` against it.
``oidc_settings``  GPU Ledger signs in through that provider (issuer, client id and secret,
                   the OIDC backend), with its client registered for the live server's callback.
``code_flow``      signs a provider user in through the whole authorization-code flow without
                   a browser: the Django test client on our side, ``requests`` on the provider's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.test import Client

from accounts import oidc
from tests.pages.conftest import (  # noqa: F401  (the browser tests' fixtures)
    browser_type_launch_args,
    console_errors,
)
from tests.prometheus_server import LOOPBACK, free_port

ROOT = Path(__file__).resolve().parents[2]
CLIENT_ID = "gpu-ledger-test"
CLIENT_SECRET = "test-client-secret-" + "s" * 20
PROVIDER_NAME = "Test IdP"


@dataclass
class Provider:
    url: str
    env: dict[str, str]

    @property
    def issuer(self) -> str:
        return f"{self.url}/openid"

    def seed(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "tests.oidc_provider.seed", *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout


def _manage(env: dict[str, str], *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "django", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def oidc_provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    folder = tmp_path_factory.mktemp("oidc-provider")
    port = free_port()
    url = f"http://{LOOPBACK}:{port}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.oidc_provider.settings",
        "OIDC_TEST_PROVIDER_DB": str(folder / "provider.sqlite3"),
        "OIDC_TEST_PROVIDER_URL": url,
        "PYTHONPATH": str(ROOT),
    }
    _manage(env, "migrate", "--no-input")
    _manage(env, "creatersakey")
    log = (folder / "provider.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "django", "runserver", f"{LOOPBACK}:{port}", "--noreload"],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    provider = Provider(url=url, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = requests.get(
                    f"{provider.issuer}/.well-known/openid-configuration", timeout=2
                )
                if answer.status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    "the test OIDC provider did not start: "
                    + (folder / "provider.log").read_text()[-2000:]
                )
            time.sleep(0.2)
        yield provider
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


@pytest.fixture
def oidc_settings(settings: Any, oidc_provider: Provider, live_server: Any) -> Iterator[Provider]:
    oidc_provider.seed("client", CLIENT_ID, CLIENT_SECRET, f"{live_server.url}/oidc/callback/")
    settings.GPULEDGER_OIDC_ISSUER = oidc_provider.issuer
    settings.GPULEDGER_OIDC_CLIENT_ID = CLIENT_ID
    settings.GPULEDGER_OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.GPULEDGER_OIDC_PROVIDER_NAME = PROVIDER_NAME
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "accounts.oidc.OidcBackend",
    ]
    oidc.forget_provider_config()
    yield oidc_provider
    oidc.forget_provider_config()


@pytest.fixture
def code_flow(oidc_settings: Provider, live_server: Any) -> Callable[..., Client]:
    """Sign ``username`` in at the provider and finish the flow in a fresh test client; returns
    the client (signed in or not) and the callback's response."""

    def sign_in(username: str, password: str, client: Client | None = None) -> Any:
        # Our callback address must be the one registered with the provider: the live server's.
        client = client or Client(HTTP_HOST=urlsplit(live_server.url).netloc)
        start = client.get("/oidc/authenticate/")
        assert start.status_code == 302, start
        browser = requests.Session()
        login_page = browser.get(start["Location"], timeout=10)
        assert login_page.status_code == 200
        answer = browser.post(
            login_page.url,
            data={
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": browser.cookies["provider_csrftoken"],
                "next": parse_qs(urlsplit(login_page.url).query).get("next", [""])[0],
            },
            headers={"Referer": login_page.url},
            allow_redirects=False,
            timeout=10,
        )
        # Follow the provider's redirects until one leaves it for our callback.
        location = answer.headers["Location"]
        for _ in range(5):
            if location.startswith(live_server.url):
                break
            if location.startswith("/"):
                location = oidc_settings.url + location
            answer = browser.get(location, allow_redirects=False, timeout=10)
            location = answer.headers["Location"]
        assert location.startswith(f"{live_server.url}/oidc/callback/"), location
        callback = client.get(location[len(live_server.url) :])
        return client, callback

    return sign_in
