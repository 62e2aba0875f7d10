"""``POST /api/v1/capacity-plan/``: the capacity planner (README "Serving: capacity planner").

Any signed-in user or full-scope token may ask: without ``workload`` the answer reads no team's
data, only the rate cards' prices; a ``workload`` must be a deployment the caller sees (one of
another team is unknown, as one that does not exist). Nothing is stored.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ApiViewMixin, parameter_error_response_schema
from quotas.access import visible_team_ids
from serving.api.serializers import (
    CapacityPlanRequestSerializer,
    CapacityPlanSerializer,
    answer,
)
from serving.planner import PlanError

SEED_EXAMPLE = {
    "request_rate": 0.5,
    "input_tokens": 1500,
    "output_tokens": 400,
    "replica_throughput_tokens_per_second": 138,
    "replica_max_concurrency": 4,
    "kv_cache_tokens": 57000,
    "headroom": 0.3,
    "spare_replicas": 1,
    "tensor_parallel": 1,
}


class CapacityPlanView(ApiViewMixin, APIView):
    """Replicas and GPUs for a request rate, from one replica's measured throughput."""

    pagination_class = None

    @extend_schema(
        operation_id="capacity_plan",
        request=CapacityPlanRequestSerializer,
        responses={
            200: CapacityPlanSerializer,
            400: OpenApiResponse(
                response=parameter_error_response_schema(),
                description="A bad, missing or unknown field: its name → the reasons.",
            ),
        },
        examples=[
            OpenApiExample("A 0.5 req/s chat service", value=SEED_EXAMPLE, request_only=True)
        ],
    )
    def post(self, request: Request) -> Response:
        data = CapacityPlanRequestSerializer(
            data=request.data, context={"allowed": visible_team_ids(request.user)}
        )
        data.is_valid(raise_exception=True)
        try:
            result, price = data.plan()
        except PlanError as exc:
            errors = {field: [reason] for field, reason in exc.errors.items()}
            raise ValidationError(errors) from None
        return Response(answer(result, price, data))
