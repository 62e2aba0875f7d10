"""``Authorization: Bearer glt_…`` authentication for :class:`quotas.models.ApiToken`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from quotas.models import ApiToken

# last_used_at is written at most this often per token, not on every request.
TOKEN_TOUCH_INTERVAL = timedelta(minutes=1)


class ApiTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer <key>`` for :class:`quotas.models.ApiToken`."""

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid bearer header: give exactly one key.")
        try:
            key = header[1].decode()
        except UnicodeError as exc:
            raise exceptions.AuthenticationFailed("Invalid bearer key encoding.") from exc
        return self.authenticate_key(key)

    def authenticate_key(self, key: str) -> tuple[Any, Any]:
        token = (
            ApiToken.objects.select_related("user").filter(key_hash=ApiToken.hash_key(key)).first()
        )
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        now = timezone.now()
        if token.expires_at is not None and token.expires_at <= now:
            raise exceptions.AuthenticationFailed("Token expired.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        if token.last_used_at is None or now - token.last_used_at > TOKEN_TOUCH_INTERVAL:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Names the bearer scheme in the OpenAPI schema."""

    target_class = "quotas.api.auth.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "glt_…"}
