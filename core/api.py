"""Shared REST API pieces: authentication, token scopes, throttling and parameter errors.

Every API view of the apps derives from :class:`ApiViewMixin` so the same rules apply
everywhere: session, personal DRF tokens (``Authorization: Token …``) and our named API tokens
(``Authorization: Bearer glt_…``, ``quotas.ApiToken``); tokens with the ``chargeback`` scope
reach only views that set ``chargeback_scope = True``.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import django_filters
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import StreamingHttpResponse
from django_filters.fields import IsoDateTimeField
from rest_framework import exceptions
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

from core.params import InvalidParameter, check_all

logger = logging.getLogger(__name__)


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


def token_scope(request: Request) -> str:
    """``full`` for sessions and personal tokens, else the API token's scope.

    ``quotas.api.auth.ApiTokenAuthentication`` puts the token in ``request.auth``; DRF's
    personal tokens and sessions carry no ``scope``.
    """
    return getattr(getattr(request, "auth", None), "scope", None) or "full"


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


class ApiViewMixin:
    """Permissions and pagination every GPU Ledger API view shares; authentication is
    ``REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]`` (sessions, DRF tokens, API tokens).

    The attributes are declared with the types of ``APIView`` / ``GenericAPIView`` so the mixin
    combines with them.
    """

    permission_classes: Sequence[type[BasePermission] | OperandHolder | SingleOperandHolder] = [
        IsAuthenticated,
        TokenScopePermission,
    ]
    pagination_class: type[BasePagination] | None = BoundedLimitOffsetPagination
    chargeback_scope = False

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """Refuse NUL characters and oversized text in any query or path parameter (400)."""
        super().initial(request, *args, **kwargs)  # type: ignore[misc]
        try:
            check_all(request.query_params)
            check_all(kwargs)
        except InvalidParameter as exc:
            raise ParameterError(exc.name, exc.reason) from None


def parameter_error_response_schema() -> dict[str, Any]:
    """The OpenAPI shape of a 400 body: parameter name → list of reasons."""
    return {
        "type": "object",
        "additionalProperties": {"type": "array", "items": {"type": "string"}},
        "example": {"start": ["naive datetime: give a UTC offset, e.g. 2026-01-01T00:00:00Z"]},
    }


class _Echo:
    """A file-like object whose write returns the line, for streaming csv.writer output."""

    def write(self, value: str) -> str:
        return value


def stream_csv(filename: str, lines: Iterable[Sequence[Any]]) -> StreamingHttpResponse:
    """A CSV download streamed row by row (the API's CSV answers: chargeback, queue levels)."""
    writer = csv.writer(_Echo(), lineterminator="\r\n", quoting=csv.QUOTE_MINIMAL)
    response = StreamingHttpResponse(
        (writer.writerow(line) for line in lines), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
