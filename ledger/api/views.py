"""Chargeback (``/api/v1/chargeback/``) and the OpenCost-compatible ``/api/v1/allocation``.

Visibility follows quotas/access.py: staff and finance see everything; a team lead sees the
rows of the teams they lead (every team's with ``GPULEDGER_TEAM_VISIBILITY=public``).
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from core.api import (
    ApiViewMixin,
    ChargebackRateThrottle,
    ParameterError,
    QueryFormatNegotiation,
    parameter_error_response_schema,
    stream_csv,
)
from ledger import chargeback, opencost
from ledger.api import serializers
from quotas.access import visible_team_ids

logger = logging.getLogger(__name__)

PARAMETER_ERROR = OpenApiResponse(
    response=parameter_error_response_schema(),
    description="A bad parameter: its name → the reasons.",
)


def csv_response(report: chargeback.Report) -> StreamingHttpResponse:
    stamp = "%Y%m%dT%H%MZ"
    filename = (
        f"chargeback_{report.group_by}_{report.start:{stamp}}_{report.end:{stamp}}"
        f"{'' if report.step == 'none' else '_' + report.step}.csv"
    )
    return stream_csv(filename, chargeback.csv_records(report))


def report_body(report: chargeback.Report) -> dict[str, Any]:
    return {
        "start": chargeback.utc_text(report.start),
        "end": chargeback.utc_text(report.end),
        "group_by": report.group_by,
        "step": report.step,
        "currency": report.currency,
        "model": report.model,
        "pricing": report.pricing(),
        "rows": [chargeback.row_dict(report, row) for row in report.rows],
        "totals": chargeback.totals_dict(report),
    }


class ChargebackThrottled(ApiViewMixin, APIView):
    chargeback_scope = True
    throttle_scope = "chargeback"
    throttle_classes = [
        # DRF resolves the setting's import strings to classes; the stubs type it Sequence[str].
        *api_settings.DEFAULT_THROTTLE_CLASSES,  # type: ignore[list-item]
        ChargebackRateThrottle,
    ]


CHARGEBACK_PARAMETERS = [
    OpenApiParameter(
        "start",
        OpenApiTypes.DATETIME,
        required=True,
        description="Window start, ISO 8601 with a UTC offset, on a whole UTC hour.",
    ),
    OpenApiParameter(
        "end",
        OpenApiTypes.DATETIME,
        required=True,
        description="Window end (exclusive), ISO 8601 with a UTC offset, on a whole UTC hour.",
    ),
    OpenApiParameter(
        "group_by",
        OpenApiTypes.STR,
        required=True,
        enum=list(chargeback.GROUP_SCOPES),
    ),
    OpenApiParameter("cluster", OpenApiTypes.STR, description="Only this cluster (its name)."),
    OpenApiParameter("step", OpenApiTypes.STR, enum=list(chargeback.STEPS), default="none"),
    OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "csv"], default="json"),
]


class ChargebackView(ChargebackThrottled):
    """GPU-hours, real use and cost per group over a window (README "Chargeback API")."""

    content_negotiation_class = QueryFormatNegotiation

    @extend_schema(
        operation_id="chargeback",
        parameters=CHARGEBACK_PARAMETERS,
        responses={
            (200, "application/json"): serializers.ChargebackSerializer,
            (200, "text/csv"): OpenApiTypes.STR,
            400: PARAMETER_ERROR,
        },
    )
    def get(self, request: Request) -> Any:
        params = request.query_params
        output = params.get("format", "json") or "json"
        try:
            if output not in ("json", "csv"):
                raise chargeback.ChargebackError("format", f"{output!r} is not json or csv")
            start = chargeback.parse_instant("start", params.get("start"))
            end = chargeback.parse_instant("end", params.get("end"))
            group_by = params.get("group_by", "")
            if group_by not in chargeback.GROUP_SCOPES:
                raise chargeback.ChargebackError(
                    "group_by",
                    f"{group_by!r} is not one of {', '.join(chargeback.GROUP_SCOPES)}",
                )
            step = params.get("step", "none") or "none"
            if step not in chargeback.STEPS:
                raise chargeback.ChargebackError(
                    "step", f"{step!r} is not one of {', '.join(chargeback.STEPS)}"
                )
            report = chargeback.cached_report(
                start=start,
                end=end,
                group_by=group_by,
                step=step,
                cluster=chargeback.resolve_cluster(params.get("cluster")),
                team_ids=visible_team_ids(request.user),
            )
        except chargeback.ChargebackError as exc:
            raise ParameterError(exc.parameter, exc.reason) from None
        logger.info(
            "chargeback %s %s..%s step=%s rows=%d user=%s",
            group_by,
            chargeback.utc_text(start),
            chargeback.utc_text(end),
            step,
            len(report.rows),
            request.user.pk,
        )
        if output == "csv":
            return csv_response(report)
        return Response(report_body(report))


ALLOCATION_PARAMETERS = [
    OpenApiParameter(
        "window",
        OpenApiTypes.STR,
        required=True,
        description=(
            "today | yesterday | week | lastweek | month | lastmonth | a duration (90m, 24h, 7d, "
            "2w) | an RFC 3339 pair start,end | a Unix-seconds pair. UTC, widened to whole hours."
        ),
    ),
    OpenApiParameter(
        "aggregate",
        OpenApiTypes.STR,
        description=(
            "cluster | node | namespace | pod | label:<name> | team | clusterqueue | localqueue | "
            "cohort | workload | flavor; a comma list aggregates by several keys. Default pod."
        ),
    ),
    OpenApiParameter(
        "step", OpenApiTypes.STR, description="Set length in whole hours (1h, 1d); default window."
    ),
    OpenApiParameter(
        "accumulate", OpenApiTypes.BOOL, description="Sum all sets into one (default false)."
    ),
]


class AllocationView(ChargebackThrottled):
    """OpenCost-compatible allocation (GPU figures only; README "Chargeback API")."""

    @extend_schema(
        operation_id="allocation",
        parameters=ALLOCATION_PARAMETERS,
        responses={200: serializers.AllocationResponseSerializer, 400: PARAMETER_ERROR},
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        try:
            start, end = opencost.parse_window(params.get("window"), timezone.now())
            keys = opencost.parse_aggregate(params.get("aggregate"))
            step = opencost.parse_step(params.get("step"), start, end)
            accumulate = opencost.parse_bool("accumulate", params.get("accumulate"))
            sets = opencost.build_sets(
                start=start,
                end=end,
                keys=keys,
                step=step,
                accumulate=accumulate,
                team_ids=visible_team_ids(request.user),
            )
        except chargeback.ChargebackError as exc:
            raise ParameterError(exc.parameter, exc.reason) from None
        return Response(opencost.envelope(sets))
