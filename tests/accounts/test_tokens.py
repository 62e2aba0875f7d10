"""The ID token checks of ``accounts.oidc.OidcBackend.verify_token`` against the real test
provider's JWKS: tokens signed with the provider's own key (taken from its database) or with a
key of the test's, so that each check is the one that refuses."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.core.exceptions import SuspiciousOperation

from accounts.oidc import OidcBackend
from tests.accounts.conftest import CLIENT_ID, CLIENT_SECRET

pytestmark = pytest.mark.integration

NONCE = "nonce-1234"


@pytest.fixture(scope="module")
def provider_key(oidc_provider) -> tuple[str, str]:
    """The provider's signing key (PEM) and the kid its JWKS publishes for it."""
    pem = oidc_provider.seed("key")
    jwks = requests.get(f"{oidc_provider.issuer}/jwks", timeout=10).json()
    assert len(jwks["keys"]) == 1
    return pem, jwks["keys"][0]["kid"]


def _claims(issuer: str, **overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {
        "iss": issuer,
        "sub": "42",
        "aud": CLIENT_ID,
        "iat": now,
        "exp": now + 300,
        "nonce": NONCE,
    }
    claims.update(overrides)
    return {key: value for key, value in claims.items() if value is not None}


def _sign(claims: dict[str, Any], key: Any, kid: str, algorithm: str = "RS256") -> str:
    return jwt.encode(claims, key, algorithm=algorithm, headers={"kid": kid})


def test_a_token_the_provider_signed_for_us_passes(oidc_settings, provider_key):
    pem, kid = provider_key
    token = _sign(_claims(oidc_settings.issuer), pem, kid)

    claims = OidcBackend().verify_token(token, nonce=NONCE)

    assert claims["sub"] == "42"
    assert claims["aud"] == CLIENT_ID


def test_a_bad_signature_is_refused(oidc_settings, provider_key):
    _, kid = provider_key
    # Another key, claiming the provider's kid: the JWKS finds the provider's key, which fails.
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = other.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    token = _sign(_claims(oidc_settings.issuer), pem, kid)

    with pytest.raises(SuspiciousOperation, match="Signature verification failed"):
        OidcBackend().verify_token(token, nonce=NONCE)


def test_a_tampered_payload_is_refused(oidc_settings, provider_key):
    pem, kid = provider_key
    header, _, signature = _sign(_claims(oidc_settings.issuer), pem, kid).split(".")
    forged = jwt.utils.base64url_encode(
        jwt.api_jws.json.dumps(_claims(oidc_settings.issuer, sub="1")).encode()
    ).decode()

    with pytest.raises(SuspiciousOperation, match="Signature verification failed"):
        OidcBackend().verify_token(f"{header}.{forged}.{signature}", nonce=NONCE)


def test_a_token_for_another_audience_is_refused(oidc_settings, provider_key):
    pem, kid = provider_key
    token = _sign(_claims(oidc_settings.issuer, aud="another-client"), pem, kid)

    with pytest.raises(SuspiciousOperation, match="Audience doesn't match"):
        OidcBackend().verify_token(token, nonce=NONCE)


def test_several_audiences_need_azp_to_be_us(oidc_settings, provider_key):
    pem, kid = provider_key
    token = _sign(_claims(oidc_settings.issuer, aud=[CLIENT_ID, "other"], azp="other"), pem, kid)

    with pytest.raises(SuspiciousOperation, match="azp"):
        OidcBackend().verify_token(token, nonce=NONCE)


def test_an_expired_token_is_refused(oidc_settings, provider_key):
    pem, kid = provider_key
    now = int(time.time())
    token = _sign(_claims(oidc_settings.issuer, iat=now - 900, exp=now - 120), pem, kid)

    with pytest.raises(SuspiciousOperation, match="expired"):
        OidcBackend().verify_token(token, nonce=NONCE)


def test_a_token_without_expiry_is_refused(oidc_settings, provider_key):
    pem, kid = provider_key
    token = _sign(_claims(oidc_settings.issuer, exp=None), pem, kid)

    with pytest.raises(SuspiciousOperation, match="exp"):
        OidcBackend().verify_token(token, nonce=NONCE)


def test_a_token_of_another_issuer_is_refused(oidc_settings, provider_key):
    pem, kid = provider_key
    token = _sign(_claims("http://127.0.0.1:1/elsewhere"), pem, kid)

    with pytest.raises(SuspiciousOperation, match="issuer"):
        OidcBackend().verify_token(token, nonce=NONCE)


def test_a_replayed_token_with_another_nonce_is_refused(oidc_settings, provider_key):
    pem, kid = provider_key
    token = _sign(_claims(oidc_settings.issuer), pem, kid)

    with pytest.raises(SuspiciousOperation, match="nonce"):
        OidcBackend().verify_token(token, nonce="another-sign-in")


def test_a_token_signed_with_the_client_secret_is_refused(oidc_settings, provider_key):
    _, kid = provider_key
    # HS256 with the shared secret: an algorithm GPULEDGER_OIDC_SIGN_ALGS does not allow.
    token = _sign(_claims(oidc_settings.issuer), CLIENT_SECRET, kid, algorithm="HS256")

    with pytest.raises(SuspiciousOperation, match="GPULEDGER_OIDC_SIGN_ALGS"):
        OidcBackend().verify_token(token, nonce=NONCE)
