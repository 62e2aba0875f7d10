"""Shared REST API pieces: authentication, token scopes, throttling and parameter errors.

Every API view of the apps derives from :class:`ApiViewMixin` so the same rules apply
everywhere: session, personal DRF tokens (``Authorization: Token …``) and our named API tokens
(``Authorization: Bearer glt_…``, ``quotas.ApiToken``); tokens with the ``chargeback`` scope
reach only views that set ``chargeback_scope = True``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import django_filters
from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from django_filters.fields import IsoDateTimeField
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import (
    BaseAuthentication,
    SessionAuthentication,
    TokenAuthentication,
    get_authorization_header,
)
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.pagination import BasePagination, LimitOffsetPagination
from rest_framework.permissions import (
    BasePermission,
    IsAuthenticated,
    OperandHolder,
    SingleOperandHolder,
)
from rest_framework.request import Request
from rest_framework.settings import APISettings, api_settings
from rest_framework.throttling import ScopedRateThrottle

logger = logging.getLogger(__name__)

# last_used_at is refreshed at most this often, so reads do not turn into a write per request.
TOKEN_TOUCH_INTERVAL = timedelta(minutes=1)


class ParameterError(exceptions.ValidationError):
    """A bad query parameter: 400 with ``{"<parameter>": ["<reason>"]}``."""

    def __init__(self, parameter: str, reason: str) -> None:
        super().__init__({parameter: [reason]})
        self.parameter = parameter
        self.reason = reason


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 datetime converted to UTC, so every database takes it (PostgreSQL refuses
    offsets beyond ±15:59) and out-of-range values are a 400, not an overflow."""

    def to_python(self, value: Any) -> datetime | None:
        moment = super().to_python(value)
        if moment is None:
            return None
        try:
            return moment.astimezone(UTC)
        except (OverflowError, ValueError):
            raise DjangoValidationError("Out of range.", code="invalid") from None


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


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
        from quotas.models import ApiToken

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


def token_scope(request: Request) -> str:
    """``full`` for sessions and personal tokens, else the API token's scope."""
    from quotas.models import ApiToken

    auth = getattr(request, "auth", None)
    if isinstance(auth, ApiToken):
        return auth.scope
    return "full"


class TokenScopePermission(BasePermission):
    """Chargeback-scoped tokens reach only views marked ``chargeback_scope = True``."""

    message = "This token's scope (chargeback) allows only /api/v1/chargeback/ and /allocation."

    def has_permission(self, request: Request, view: Any) -> bool:
        if token_scope(request) == "chargeback":
            return bool(getattr(view, "chargeback_scope", False))
        return True


class ChargebackRateThrottle(ScopedRateThrottle):
    """Per-user limit on chargeback queries (``DEFAULT_THROTTLE_RATES["chargeback"]``).

    Reads the rates at request time (so settings overrides apply) and lets requests through
    when no chargeback rate is configured.
    """

    scope_attr = "throttle_scope"

    def get_rate(self) -> str | None:
        if self.scope is None:
            return None
        # The stubs type the rates as numbers; DRF's values are strings such as "60/min".
        rates: Mapping[str, str | None] = api_settings.DEFAULT_THROTTLE_RATES  # type: ignore[assignment]
        return rates.get(self.scope)

    def allow_request(self, request: Request, view: Any) -> bool:
        self.scope = getattr(view, self.scope_attr, None)
        if not self.scope:
            return True
        self.rate = self.get_rate()
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super(ScopedRateThrottle, self).allow_request(request, view)


class QueryFormatNegotiation(DefaultContentNegotiation):
    """``?format=`` is our own parameter (json | csv) on chargeback views, not DRF's override."""

    # The stubs pin ``settings`` to the global ``_Settings`` and URL_FORMAT_OVERRIDE to ``str``;
    # DRF takes any APISettings here and documents None as "no URL format override".
    settings = APISettings(user_settings={"URL_FORMAT_OVERRIDE": None})  # type: ignore[assignment,arg-type]


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """Limit/offset with a ceiling on both, so no value overflows a database integer."""

    max_limit = 1000
    max_offset = 2**53

    def get_offset(self, request: Request) -> int:
        return min(super().get_offset(request), self.max_offset)


AUTHENTICATION_CLASSES: Sequence[type[BaseAuthentication]] = [
    SessionAuthentication,
    TokenAuthentication,
    ApiTokenAuthentication,
]


class ApiViewMixin:
    """Authentication and permissions every GPU Ledger API view shares.

    The attributes are declared with the types of ``APIView`` / ``GenericAPIView`` so the mixin
    combines with them.
    """

    authentication_classes: Sequence[type[BaseAuthentication]] = AUTHENTICATION_CLASSES
    permission_classes: Sequence[type[BasePermission] | OperandHolder | SingleOperandHolder] = [
        IsAuthenticated,
        TokenScopePermission,
    ]
    pagination_class: type[BasePagination] | None = BoundedLimitOffsetPagination
    chargeback_scope = False


def parameter_error_response_schema() -> dict[str, Any]:
    """The OpenAPI shape of a 400 body: parameter name → list of reasons."""
    return {
        "type": "object",
        "additionalProperties": {"type": "array", "items": {"type": "string"}},
        "example": {"start": ["naive datetime: give a UTC offset, e.g. 2026-01-01T00:00:00Z"]},
    }


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Names the bearer scheme in the OpenAPI schema."""

    target_class = "core.api.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "glt_…"}
