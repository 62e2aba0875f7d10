"""Roles of open sessions follow the provider's groups within ``GPULEDGER_OIDC_ROLE_TTL``.

A session that signed in through the provider is re-checked once its roles are older than the
TTL: with the refresh token the provider gave at sign-in, a refresh-token grant at the token
endpoint, then the userinfo endpoint with the new access token (without a refresh token, the
userinfo endpoint with the stored access token). The answer's groups set the roles again, as a
sign-in does. When any step fails — the provider refuses the refresh (the account was disabled
or its sessions revoked), the subject changed, or the provider cannot be reached — the session
ends and the user signs in again: an unverifiable role is never kept past the TTL.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import requests
from django.conf import settings
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse

from accounts import oidc
from accounts.models import OidcIdentity

logger = logging.getLogger(__name__)


class RoleRecheckMiddleware:
    """After ``AuthenticationMiddleware``: re-reads an OIDC session's groups past the TTL."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated and oidc.enabled():
            synced_at = request.session.get(oidc.SESSION_SYNCED_AT)
            if (
                synced_at is not None
                and time.time() - synced_at >= settings.GPULEDGER_OIDC_ROLE_TTL
            ):
                recheck(request)
        return self.get_response(request)


def _refresh(refresh_token: str, config: dict[str, Any]) -> dict[str, Any]:
    response = requests.post(
        config["token_endpoint"],
        data={
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "client_id": settings.GPULEDGER_OIDC_CLIENT_ID,
            "client_secret": settings.GPULEDGER_OIDC_CLIENT_SECRET,
        },
        timeout=settings.GPULEDGER_OIDC_TIMEOUT,
    )
    response.raise_for_status()
    answer = response.json()
    if not isinstance(answer, dict) or not isinstance(answer.get("access_token"), str):
        raise oidc.OidcError("the refresh answer has no access_token")
    return answer


def _userinfo(access_token: str, config: dict[str, Any]) -> dict[str, Any]:
    url = config.get("userinfo_endpoint")
    if not url:
        raise oidc.OidcError("the provider has no userinfo endpoint")
    response = requests.get(
        url,
        headers={"Authorization": f"Bearer {access_token}"},
        timeout=settings.GPULEDGER_OIDC_TIMEOUT,
    )
    response.raise_for_status()
    info = response.json()
    if not isinstance(info, dict):
        raise oidc.OidcError("the userinfo answer is not a JSON object")
    return info


def recheck(request: HttpRequest) -> bool:
    """Set the session user's roles from the provider again; end the session when that fails.
    True when the session goes on."""
    session = request.session
    user_id = request.user.pk or 0
    identity = OidcIdentity.objects.select_related("user").filter(user_id=user_id).first()
    try:
        if identity is None:
            raise oidc.OidcError("the user has no OIDC identity")
        config = oidc.provider_config()
        refresh_token = session.get(oidc.SESSION_REFRESH_TOKEN)
        access_token = session.get(oidc.SESSION_ACCESS_TOKEN)
        if refresh_token:
            answer = _refresh(refresh_token, config)
            access_token = answer["access_token"]
            session[oidc.SESSION_ACCESS_TOKEN] = access_token
            if answer.get("refresh_token"):
                session[oidc.SESSION_REFRESH_TOKEN] = answer["refresh_token"]
        if not access_token:
            raise oidc.OidcError("the session holds no token to ask the provider with")
        info = _userinfo(access_token, config)
        if str(info.get("sub")) != identity.subject:
            raise oidc.OidcError("userinfo names another subject")
    except (oidc.OidcError, requests.RequestException, ValueError) as exc:
        logger.info(
            "OIDC session of user %s ended: roles could not be re-read (%s)", request.user.pk, exc
        )
        logout(request)
        return False
    oidc.sync_roles(identity, info)
    session[oidc.SESSION_SYNCED_AT] = time.time()
    return True
