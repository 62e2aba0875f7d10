"""``/api/v1/admissions/`` (one row per admission) and ``/api/v1/queue-levels/`` (the figures).

Both take a range ``(start, end]``: an admission is listed, and counts in a period, when its
``admitted_at`` falls inside. Visibility is quotas/access.py's policy: staff and finance see every
record; a team lead those of the teams they lead. A team, queue or workload the user may not see
filters to nothing, exactly as one that does not exist.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from django.conf import settings
from django.db.models import F, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import (
    ApiViewMixin,
    BoundedLimitOffsetPagination,
    ParameterError,
    QueryFormatNegotiation,
    parameter_error_response_schema,
    stream_csv,
)
from fleet.models import Cluster
from ledger.chargeback import ChargebackError, parse_instant, utc_text
from quotas.access import visible_team_ids
from servicelevels import figures
from servicelevels.api.serializers import (
    AdmissionSerializer,
    LevelRowSerializer,
    QueueLevelsSerializer,
)
from servicelevels.models import AdmissionRecord

logger = logging.getLogger(__name__)

PARAMETER_ERROR = OpenApiResponse(
    response=parameter_error_response_schema(),
    description="A bad parameter: its name → the reasons.",
)
# Hour periods are bounded so a stepped answer stays a page's worth, not a month of hours per
# queue times a year.
MAX_HOUR_STEP_DAYS = 31

RANGE_PARAMETERS = [
    OpenApiParameter(
        "start",
        OpenApiTypes.DATETIME,
        required=True,
        description="Range start (exclusive), ISO 8601 with a UTC offset.",
    ),
    OpenApiParameter(
        "end",
        OpenApiTypes.DATETIME,
        required=True,
        description="Range end (inclusive), ISO 8601 with a UTC offset.",
    ),
    OpenApiParameter("cluster", OpenApiTypes.STR, description="Only this cluster (its name)."),
    OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "csv"], default="json"),
]


@dataclass(frozen=True)
class Query:
    start: datetime
    end: datetime
    cluster: str | None
    output: str


def parse_query(params: Any) -> Query:
    """The range, cluster and format every service-level endpoint takes; ParameterError else."""
    output = params.get("format", "json") or "json"
    try:
        if output not in ("json", "csv"):
            raise ChargebackError("format", f"{output!r} is not json or csv")
        start = parse_instant("start", params.get("start"))
        end = parse_instant("end", params.get("end"))
    except ChargebackError as exc:
        raise ParameterError(exc.parameter, exc.reason) from None
    if end <= start:
        raise ParameterError("end", "must be after start (the range is (start, end])")
    limit = settings.GPULEDGER_SERVICE_LEVELS_MAX_DAYS
    if end - start > timedelta(days=limit):
        raise ParameterError(
            "end", f"the range is longer than {limit} days (GPULEDGER_SERVICE_LEVELS_MAX_DAYS)"
        )
    cluster = params.get("cluster") or None
    if cluster is not None and not Cluster.objects.filter(name=cluster).exists():
        raise ParameterError("cluster", f"unknown cluster {cluster!r}")
    return Query(start=start, end=end, cluster=cluster, output=output)


def _stamp(query: Query) -> str:
    return f"{query.start:%Y%m%dT%H%MZ}_{query.end:%Y%m%dT%H%MZ}"


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return utc_text(value)
    if isinstance(value, dict):
        return ";".join(f"{key}:{count}" for key, count in sorted(value.items()))
    return value


ADMISSION_PARAMETERS = [
    *RANGE_PARAMETERS,
    OpenApiParameter("cluster_queue", OpenApiTypes.STR, description="ClusterQueue name."),
    OpenApiParameter("team", OpenApiTypes.STR, description="Team name."),
    OpenApiParameter("workload", OpenApiTypes.STR, description="namespace/name."),
]


class AdmissionsView(ApiViewMixin, ListAPIView):  # type: ignore[type-arg]
    """Admission records admitted in ``(start, end]``, oldest admission first (README
    "Queue service levels")."""

    serializer_class = AdmissionSerializer
    content_negotiation_class = QueryFormatNegotiation
    # The schema generator reads the model here (get_queryset needs a request's range).
    queryset = AdmissionRecord.objects.none()

    def get_queryset(self) -> QuerySet[AdmissionRecord]:
        query = parse_query(self.request.query_params)
        params = self.request.query_params
        records = AdmissionRecord.objects.select_related("cluster", "team").filter(
            admitted_at__gt=query.start, admitted_at__lte=query.end
        )
        if query.cluster:
            records = records.filter(cluster__name=query.cluster)
        if params.get("cluster_queue"):
            records = records.filter(cluster_queue_name=params["cluster_queue"])
        if params.get("team"):
            records = records.filter(team__name=params["team"])
        if params.get("workload"):
            namespace, slash, name = params["workload"].partition("/")
            if not slash or not namespace or not name:
                raise ParameterError("workload", "give the workload as namespace/name")
            records = records.filter(namespace=namespace, workload_name=name)
        if self.allowed is not None:
            records = records.filter(team_id__in=self.allowed)
        records = records.annotate(preemptor_team_id=F("preempted_by__cluster_queue__team_id"))
        return records.order_by("admitted_at", "pk")

    @cached_property
    def allowed(self) -> set[int] | None:
        return visible_team_ids(self.request.user)

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "allowed": self.allowed}

    @extend_schema(
        operation_id="admissions_list",
        parameters=ADMISSION_PARAMETERS,
        responses={
            (200, "application/json"): AdmissionSerializer(many=True),
            (200, "text/csv"): OpenApiTypes.STR,
            400: PARAMETER_ERROR,
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        if (request.query_params.get("format") or "json") == "csv":
            query = parse_query(request.query_params)
            records = self.get_queryset()
            lines = _admission_lines(records, self.get_serializer_context())
            return stream_csv(f"admissions_{_stamp(query)}.csv", lines)
        return super().get(request, *args, **kwargs)


def _admission_lines(
    records: QuerySet[AdmissionRecord], context: dict[str, Any]
) -> Iterator[list[Any]]:
    fields = AdmissionSerializer.Meta.fields
    yield list(fields)
    for record in records.iterator(chunk_size=2000):
        data = AdmissionSerializer(record, context=context).data
        yield [_cell(data[name]) for name in fields]


LEVEL_PARAMETERS = [
    *RANGE_PARAMETERS,
    OpenApiParameter(
        "group_by", OpenApiTypes.STR, enum=list(figures.GROUP_BY), default="cluster_queue"
    ),
    OpenApiParameter(
        "step",
        OpenApiTypes.STR,
        enum=list(figures.STEPS),
        default="none",
        description=f"none, or UTC hours (ranges up to {MAX_HOUR_STEP_DAYS} days) or days.",
    ),
    OpenApiParameter(
        "limit", OpenApiTypes.INT, description="Rows per page (default 1,000, at most 10,000)."
    ),
    OpenApiParameter("offset", OpenApiTypes.INT, description="The first row of the page."),
]
LEVEL_FIELDS = list(LevelRowSerializer().fields)


class LevelPagination(BoundedLimitOffsetPagination):
    """Rows of the queue-levels answer: a month of 1,000 queues by day is 30,000 rows, so they
    come a page at a time (the CSV is whole)."""

    default_limit = 1000
    max_limit = 10_000


class QueueLevelsView(ApiViewMixin, APIView):
    """Waits, running delay, pending, evictions and preemptions per group and period."""

    content_negotiation_class = QueryFormatNegotiation
    pagination_class = None

    @extend_schema(
        operation_id="queue_levels",
        parameters=LEVEL_PARAMETERS,
        responses={
            (200, "application/json"): QueueLevelsSerializer,
            (200, "text/csv"): OpenApiTypes.STR,
            400: PARAMETER_ERROR,
        },
    )
    def get(self, request: Request) -> Any:
        params = request.query_params
        query = parse_query(params)
        group_by = params.get("group_by") or "cluster_queue"
        if group_by not in figures.GROUP_BY:
            raise ParameterError(
                "group_by", f"{group_by!r} is not one of {', '.join(figures.GROUP_BY)}"
            )
        step = params.get("step") or "none"
        if step not in figures.STEPS:
            raise ParameterError("step", f"{step!r} is not one of {', '.join(figures.STEPS)}")
        if step == "hour" and query.end - query.start > timedelta(days=MAX_HOUR_STEP_DAYS):
            raise ParameterError(
                "step", f"hour steps cover at most {MAX_HOUR_STEP_DAYS} days: use step=day"
            )
        rows = figures.levels(
            query.start,
            query.end,
            group_by=group_by,
            step=step,
            cluster=query.cluster,
            teams=visible_team_ids(request.user),
        )
        logger.info(
            "queue levels %s %s..%s step=%s rows=%d user=%s",
            group_by,
            utc_text(query.start),
            utc_text(query.end),
            step,
            len(rows),
            request.user.pk,
        )
        if query.output == "csv":
            name = f"queue_levels_{group_by}_{_stamp(query)}_{step}.csv"
            return stream_csv(name, _level_lines(rows))
        paginator = LevelPagination()
        page = paginator.paginate_queryset(rows, request, view=self) or []
        return Response(
            {
                "start": utc_text(query.start),
                "end": utc_text(query.end),
                "group_by": group_by,
                "step": step,
                "count": paginator.count,
                "next": paginator.get_next_link(),
                "previous": paginator.get_previous_link(),
                "rows": [_level_body(row) for row in page],
            }
        )


def _level_body(row: figures.LevelRow) -> dict[str, Any]:
    body = row.as_dict()
    body["period_start"] = utc_text(row.period_start)
    body["period_end"] = utc_text(row.period_end)
    return body


def _level_lines(rows: Iterable[figures.LevelRow]) -> Iterator[list[Any]]:
    yield LEVEL_FIELDS
    for row in rows:
        body = row.as_dict()
        yield [_cell(body[name]) for name in LEVEL_FIELDS]
