"""Every place a person types a quota (``POST /api/v1/quota-changes/``, the team lead's request
form, the admin's edit form) refuses a huge or non-ASCII quantity as a 400 or a form error naming
the field, never a 500, and writes nothing. Against the loopback Kubernetes API server with the
fixture fleet synced (team-a: h100 and a100, each with cpu, memory and nvidia.com/gpu)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotas.models import ClusterQueue, QuotaChange, Team
from tests.api.conftest import client_for

pytestmark = pytest.mark.usefixtures("gpu_east")

GPU = "nvidia.com/gpu"
# Each was a 500 (decimal.InvalidOperation) or was accepted (Unicode digits, 10Pi GPUs).
BAD = ["1e19", "1e30", "10Ei", "1234567890123456789012345678", "١٢", "１２", "10Pi"]


@pytest.fixture
def superuser(django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser("root", password="pw")


@pytest.fixture
def lead(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user("lead-a")
    Team.objects.get(name="team-a").leads.add(user)
    return user


def _signed_in(user: Any) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def _form(queue: ClusterQueue, flavor: str, resource: str, name: str, value: str) -> dict:
    """The edit form as rendered, with one value of one cell changed; and its field name."""
    from quotas.writeback.state import synced_cells

    data = {"reason": "a reason", "stop_policy": "None"}
    for index, cell in enumerate(synced_cells(queue)):
        for limit in ("nominal", "borrowing_limit", "lending_limit"):
            data[f"q{index}_{limit}"] = getattr(cell, limit) or ""
            if (cell.flavor, cell.resource, limit) == (flavor, resource, name):
                data[f"q{index}_{limit}"] = value
                data["_field"] = f"q{index}_{limit}"
    return data


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize("limit", ["nominal", "lending_limit"])
def test_the_api_answers_400_naming_the_field(kube, superuser, value: str, limit: str) -> None:
    cell = {"flavor": "h100", "resource": GPU, "nominal": "12", limit: value}
    answer = client_for(superuser).post(
        "/api/v1/quota-changes/",
        {"cluster": "gpu-east", "cluster_queue": "team-a", "changes": [cell], "reason": "r"},
        format="json",
    )

    assert answer.status_code == 400, answer.content[:300]
    assert list(answer.json()) == [f"h100/{GPU}/{limit}"]
    assert kube.writes("clusterqueues") == []
    assert not QuotaChange.objects.exists()


@pytest.mark.parametrize(
    ("resource", "value"),
    [("cpu", "1e30"), ("cpu", "10000001"), ("memory", "65Pi"), ("memory", "1e30")],
)
def test_cpu_and_memory_have_their_ceilings_too(kube, superuser, resource: str, value: str) -> None:
    cell = {"flavor": "h100", "resource": resource, "nominal": value}
    answer = client_for(superuser).post(
        "/api/v1/quota-changes/",
        {"cluster": "gpu-east", "cluster_queue": "team-a", "changes": [cell], "reason": "r"},
        format="json",
    )

    assert answer.status_code == 400
    assert "GPULEDGER_QUOTA_MAX_" in answer.json()[f"h100/{resource}/nominal"][0]


@pytest.mark.parametrize("value", BAD)
def test_the_leads_request_form_shows_a_field_error(kube, lead, value: str) -> None:
    queue = ClusterQueue.objects.get(name="team-a")
    data = _form(queue, "a100", GPU, "nominal", value)
    field = data.pop("_field")
    page = _signed_in(lead).post(
        reverse("dashboard:quota-change-new", args=["gpu-east", "team-a"]), data
    )

    assert page.status_code == 200
    assert field in page.context["form"].errors
    assert not QuotaChange.objects.exists()


@pytest.mark.parametrize("value", BAD)
def test_the_admin_edit_form_shows_a_field_error(kube, superuser, value: str) -> None:
    queue = ClusterQueue.objects.get(name="team-a")
    data = _form(queue, "h100", GPU, "lending_limit", value)
    field = data.pop("_field")
    page = _signed_in(superuser).post(
        reverse("admin:quotas_clusterqueue_edit_quotas", args=[queue.pk]), data
    )

    assert page.status_code == 200
    assert field in page.context["form"].errors
    assert not QuotaChange.objects.exists()
    assert kube.writes("clusterqueues") == []


QUANTITIES = st.one_of(
    st.text(max_size=70),
    st.from_regex(
        r"\A[+-]?(?:[0-9]{1,30}(?:\.[0-9]{0,12})?|\.[0-9]{1,12})"
        r"(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]{1,4})?\Z"
    ),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.none(),
)


def test_the_api_answers_any_quantity_without_a_server_error(kube, superuser) -> None:
    """Hypothesis examples of quantities through POST /api/v1/quota-changes/ (dry runs)."""
    client = client_for(superuser)
    statuses: set[int] = set()

    @given(
        nominal=QUANTITIES,
        lending=QUANTITIES,
        resource=st.sampled_from([GPU, "cpu", "memory"]),
    )
    @settings(
        max_examples=60,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def post(nominal: object, lending: object, resource: str) -> None:
        cell = {"flavor": "h100", "resource": resource, "nominal": nominal}
        cell["lending_limit"] = lending
        answer = client.post(
            "/api/v1/quota-changes/",
            {"cluster": "gpu-east", "cluster_queue": "team-a", "changes": [cell], "reason": "r"},
            format="json",
        )
        assert answer.status_code in (201, 400), (cell, answer.status_code)
        statuses.add(answer.status_code)

    post()
    # Both kinds of answer were reached: the examples are not all refused by the serializer.
    assert statuses == {201, 400}
