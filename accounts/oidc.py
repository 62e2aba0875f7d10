"""OpenID Connect sign-in with mozilla-django-oidc (README "Sign-in").

mozilla-django-oidc does the authorization-code flow (state, nonce, PKCE, the code exchange);
this module adds what it leaves to its users:

- discovery: the endpoints and the JWKS address come from the issuer's
  ``/.well-known/openid-configuration`` (or ``GPULEDGER_OIDC_DISCOVERY_URL``), whose ``issuer``
  must be the configured one;
- the ID token's checks: signature by a key of the provider's JWKS with an allowed algorithm,
  ``iss``, ``aud`` (our client id; ``azp`` too when several audiences), ``exp``, ``iat``, ``sub``
  and the nonce (the library checks the signature and the nonce only);
- users matched on (issuer, subject) through ``OidcIdentity``, never on e-mail;
- roles set from the groups claim at every sign-in (``accounts.roles``).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import resolve_url
from django.urls import reverse
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from accounts.models import OidcIdentity
from accounts.roles import apply_roles, granted_roles, groups_from_claims
from quotas.models import Team

logger = logging.getLogger(__name__)

# Session keys: when the roles were last set from the provider, and the refresh token.
SESSION_SYNCED_AT = "gpuledger_oidc_synced_at"
SESSION_REFRESH_TOKEN = "gpuledger_oidc_refresh_token"
SESSION_ACCESS_TOKEN = "oidc_access_token"
# How long a discovery document is reused before it is fetched again.
DISCOVERY_SECONDS = 3600
# Clock skew allowed on exp and iat.
LEEWAY_SECONDS = 30


class OidcError(Exception):
    """The provider could not be reached or answered something unusable."""


_discovery: dict[str, tuple[float, dict[str, Any]]] = {}
_discovery_lock = threading.Lock()


def enabled() -> bool:
    return bool(settings.GPULEDGER_OIDC_ISSUER)


def discovery_url() -> str:
    return settings.GPULEDGER_OIDC_DISCOVERY_URL or (
        settings.GPULEDGER_OIDC_ISSUER.rstrip("/") + "/.well-known/openid-configuration"
    )


def provider_config() -> dict[str, Any]:
    """The provider's discovery document (fetched at most once per ``DISCOVERY_SECONDS``)."""
    url = discovery_url()
    with _discovery_lock:
        cached = _discovery.get(url)
        if cached is not None and time.monotonic() - cached[0] < DISCOVERY_SECONDS:
            return cached[1]
    try:
        response = requests.get(url, timeout=settings.GPULEDGER_OIDC_TIMEOUT)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise OidcError(f"OIDC discovery at {url} failed: {exc}") from exc
    if not isinstance(document, dict):
        raise OidcError(f"OIDC discovery at {url} is not a JSON object")
    missing = [
        key
        for key in ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri")
        if not isinstance(document.get(key), str)
    ]
    if missing:
        raise OidcError(f"OIDC discovery at {url} lacks {', '.join(missing)}")
    if document["issuer"].rstrip("/") != settings.GPULEDGER_OIDC_ISSUER.rstrip("/"):
        raise OidcError(
            f"OIDC discovery at {url} names issuer {document['issuer']!r}, "
            f"not GPULEDGER_OIDC_ISSUER={settings.GPULEDGER_OIDC_ISSUER!r}"
        )
    with _discovery_lock:
        _discovery[url] = (time.monotonic(), document)
    return document


def forget_provider_config() -> None:
    with _discovery_lock:
        _discovery.clear()


def _username_for(claims: dict[str, Any]) -> str:
    """A free username from ``preferred_username``, the e-mail's local part or the subject."""
    user_model = get_user_model()
    email = claims.get("email") if isinstance(claims.get("email"), str) else ""
    base = claims.get("preferred_username") or (email.split("@")[0] if email else "")
    base = re.sub(r"[^\w.@+-]", "", str(base or ""))[:120] or "oidc-" + str(claims["sub"])[:40]
    name, suffix = base, 1
    while user_model.objects.filter(username=name).exists():
        suffix += 1
        name = f"{base}-{suffix}"
    return name


class OidcBackend(OIDCAuthenticationBackend):
    """The authentication backend of provider sign-ins (``AUTHENTICATION_BACKENDS``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The library's __init__ reads fixed endpoint settings; ours come from discovery.
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = settings.GPULEDGER_OIDC_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.GPULEDGER_OIDC_CLIENT_SECRET
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.OIDC_RP_SIGN_ALGO = "RS256"
        self._token_info: dict[str, Any] = {}

    def _endpoints(self) -> dict[str, Any]:
        config = provider_config()
        self.OIDC_OP_TOKEN_ENDPOINT = config["token_endpoint"]
        self.OIDC_OP_USER_ENDPOINT = config.get("userinfo_endpoint")
        self.OIDC_OP_JWKS_ENDPOINT = config["jwks_uri"]
        return config

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        if request is None or not enabled():
            return None
        if not request.GET.get("code") or not request.GET.get("state"):
            return None
        try:
            self._endpoints()
            return super().authenticate(request, **kwargs)
        except (OidcError, SuspiciousOperation, requests.RequestException) as exc:
            logger.warning("OIDC sign-in refused: %s", exc)
            return None

    def get_token(self, payload: dict[str, Any]) -> dict[str, Any]:
        self._token_info = super().get_token(payload)
        return self._token_info

    def store_tokens(self, access_token: str, id_token: str) -> None:
        session = self.request.session
        session[SESSION_ACCESS_TOKEN] = access_token
        refresh = self._token_info.get("refresh_token")
        if refresh:
            session[SESSION_REFRESH_TOKEN] = refresh
        else:
            session.pop(SESSION_REFRESH_TOKEN, None)
        session[SESSION_SYNCED_AT] = time.time()

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """The ID token's claims once its signature, issuer, audience, times, subject and nonce
        hold; ``SuspiciousOperation`` naming the first that does not."""
        if not getattr(self, "OIDC_OP_JWKS_ENDPOINT", None):
            self._endpoints()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise SuspiciousOperation(f"ID token unreadable: {exc}") from exc
        algorithm = header.get("alg")
        if algorithm not in settings.GPULEDGER_OIDC_SIGN_ALGS:
            raise SuspiciousOperation(
                f"ID token signed with {algorithm!r}, not one of GPULEDGER_OIDC_SIGN_ALGS"
            )
        self.OIDC_RP_SIGN_ALGO = algorithm
        key = self.retrieve_matching_jwk(token)
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=self.OIDC_RP_CLIENT_ID,
                issuer=provider_config()["issuer"],
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.InvalidTokenError as exc:
            raise SuspiciousOperation(f"ID token refused: {exc}") from exc
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.OIDC_RP_CLIENT_ID:
            raise SuspiciousOperation("ID token refused: several audiences and azp is not ours")
        nonce = kwargs.get("nonce")
        if nonce is not None or "nonce" in claims:
            if claims.get("nonce") != nonce:
                raise SuspiciousOperation("ID token refused: nonce does not match")
        return claims

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        if not self.OIDC_OP_USER_ENDPOINT:
            return {}
        return super().get_userinfo(access_token, id_token, payload)

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        info = self.get_userinfo(access_token, id_token, payload)
        if info and info.get("sub") != payload["sub"]:
            raise SuspiciousOperation("userinfo names another subject than the ID token")
        claims = {**payload, **(info or {})}
        return sign_in(provider_config()["issuer"], claims)


@transaction.atomic
def sign_in(issuer: str, claims: dict[str, Any]) -> Any:
    """The user of (``issuer``, ``claims['sub']``), created when new and allowed, with names,
    e-mail and roles set from ``claims``; None when refused (inactive or unknown)."""
    subject = str(claims["sub"])
    identity = (
        OidcIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
    )
    if identity is None:
        if not settings.GPULEDGER_OIDC_CREATE_USERS:
            logger.info("OIDC sign-in of unknown subject %s refused (no user creation)", subject)
            return None
        user = get_user_model().objects.create_user(_username_for(claims))
        user.set_unusable_password()
        identity = OidcIdentity(user=user, issuer=issuer, subject=subject)
    user = identity.user
    if not user.is_active:
        return None
    for field, claim in (
        ("email", "email"),
        ("first_name", "given_name"),
        ("last_name", "family_name"),
    ):
        value = claims.get(claim)
        if isinstance(value, str):
            setattr(user, field, value[:150] if field != "email" else value[:254])
    user.save()
    sync_roles(identity, claims)
    return user


def sync_roles(identity: OidcIdentity, claims: dict[str, Any]) -> None:
    """Set the identity's user's roles to what the claims' groups grant."""
    groups = groups_from_claims(claims, settings.GPULEDGER_OIDC_GROUPS_CLAIM)
    apply_roles(identity.user, granted_roles(groups))
    identity.groups = groups
    identity.synced_at = timezone.now()
    identity.save()


class AuthenticateView(OIDCAuthenticationRequestView):
    """/oidc/authenticate/: off (404) unless the provider is configured."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.GPULEDGER_OIDC_CLIENT_ID

    def get(self, request: HttpRequest) -> HttpResponse:
        if not enabled():
            raise Http404("Sign-in with an identity provider is off.")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = provider_config()["authorization_endpoint"]
        except OidcError as exc:
            logger.warning("%s", exc)
            return HttpResponseRedirect(reverse("login") + "?oidc=unavailable")
        return super().get(request)


class CallbackView(OIDCAuthenticationCallbackView):
    """/oidc/callback/: lands a team lead on My teams, as the password sign-in does."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not enabled():
            raise Http404("Sign-in with an identity provider is off.")
        return super().get(request)

    @property
    def success_url(self) -> str:
        next_url = self.request.session.get("oidc_login_next")
        if next_url:
            return next_url
        if Team.objects.filter(leads__pk=self.user.pk).exists():
            return reverse("dashboard:my-teams")
        return resolve_url(settings.LOGIN_REDIRECT_URL)
