"""The Serving list and detail pages, their charts, the team page's section and the planner's
``workload`` (page and API), on tests/serving/deployments_world.py."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
import time_machine
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from tests.serving.deployments_world import HOURS, NOW, RANGE, add_deployments, build_world

QUERY = urlencode(RANGE)
PLAN = {
    "request_rate": 2,
    "input_tokens": 1000,
    "output_tokens": 400,
    "kv_cache_tokens": 100000,
    "headroom": 0,
    "spare_replicas": 0,
}
LLAMA = "east/chat/Deployment/llama"


@pytest.fixture
def world(db):
    with time_machine.travel(NOW, tick=False):
        yield build_world()


def client_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def without_token(response, path: str) -> str:
    """The body without its address and the sign-out form's CSRF token."""
    body = response.content.decode().replace(path, "")
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', "", body)


def api_of(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_list_shows_the_leads_deployments_with_their_figures(world):
    page = client_of(world.alice).get(f"/serving/?{QUERY}")

    assert page.status_code == 200
    rows = {r["workload"].name: r for r in page.context["rows"]}
    assert set(rows) == {"llama", "quiet"}
    assert rows["llama"]["per_gpu_hour"] == "1,836,000"
    assert rows["llama"]["cost_per_million"] == "1.96"
    assert rows["llama"]["overprovisioned"] is True
    assert rows["quiet"]["per_replica"] == "—"
    body = page.content.decode()
    assert "over-provisioned" in body and "ranker" not in body
    assert 'aria-current="page">Serving</a>' in body


def test_the_list_sorts_by_a_figure_with_unknown_values_last(world):
    staff = User.objects.create_user("staff", is_staff=True)
    page = client_of(staff).get(f"/serving/?{QUERY}&sort=tokens_per_gpu_hour")

    assert [r["workload"].name for r in page.context["rows"]] == ["llama", "quiet", "ranker"]
    assert client_of(staff).get(f"/serving/?{QUERY}&sort=nope").status_code == 400


def test_the_detail_page_shows_the_figures_the_knee_and_the_plan_link(world):
    page = client_of(world.alice).get(f"/serving/{world.llama.pk}/?{QUERY}")

    assert page.status_code == 200
    stats = {s["testid"]: s for s in page.context["stats"]}
    assert stats["stat-per-replica"]["value"] == "510"
    assert stats["stat-sm-active"]["value"] == "61.3"
    assert stats["stat-below-knee"]["value"] == "60.0"
    assert page.context["knee"]["per_replica"] == "800"
    assert page.context["knee"]["half"] == "400"
    body = page.content.decode()
    assert "/serving/planner/?workload=east%2Fchat%2FDeployment%2Fllama" in body
    assert body.count("data-chart-url") == 4


def test_missing_telemetry_reads_no_serving_telemetry(world):
    page = client_of(world.alice).get(f"/serving/{world.quiet.pk}/?{QUERY}")

    stats = {s["testid"]: s for s in page.context["stats"]}
    assert stats["stat-per-replica"]["value"] == "—"
    assert stats["stat-per-replica"]["note"] == "no serving telemetry"
    assert "no serving telemetry" in page.content.decode()


def test_a_deployment_without_hours_in_the_range_shows_an_empty_state(world):
    page = client_of(world.alice).get(f"/serving/{world.west_llama.pk}/?{QUERY}")

    assert page.status_code == 200
    assert "No serving telemetry in this range" in page.content.decode()


def test_the_list_without_deployments_explains_what_to_set_up(db):
    page = client_of(User.objects.create_user("nobody")).get("/serving/")

    assert page.status_code == 200
    assert "No serving deployments" in page.content.decode()


@pytest.mark.parametrize(
    "path",
    [
        "/serving/{pk}/",
        "/serving/{pk}/charts/throughput.json",
        "/serving/{pk}/charts/activity.json",
        "/serving/{pk}/charts/latency.json",
        "/serving/{pk}/charts/saturation.json",
    ],
)
def test_a_lead_of_another_team_gets_the_404_of_a_missing_deployment(world, path):
    bob = client_of(world.bob)

    hidden_path, missing_path = path.format(pk=world.llama.pk), path.format(pk=999999)
    hidden = bob.get(f"{hidden_path}?{QUERY}")
    missing = bob.get(f"{missing_path}?{QUERY}")

    assert hidden.status_code == missing.status_code == 404
    assert without_token(hidden, hidden_path) == without_token(missing, missing_path)


def test_the_charts_draw_the_hours_and_the_knee(world):
    alice = client_of(world.alice)
    base = f"/serving/{world.llama.pk}/charts"

    throughput = alice.get(f"{base}/throughput.json?{QUERY}").json()
    names = [trace["name"] for trace in throughput["data"]]
    assert throughput["data"][0]["y"] == [800.0, 300.0, 250.0, 1000.0, 200.0]
    assert names[1].startswith("Knee 800.0") and names[2].startswith("Half the knee 400.0")
    assert throughput["meta"]["knee"] == pytest.approx(800.0)
    activity = alice.get(f"{base}/activity.json?{QUERY}").json()
    assert activity["data"][0]["x"] == [80.0, 40.0, 30.0, 95.0]
    assert activity["data"][0]["y"] == [800.0, 300.0, 250.0, 1000.0]
    latency = alice.get(f"{base}/latency.json?{QUERY}").json()
    assert [t["name"] for t in latency["data"]] == [
        "TTFT p95",
        "ITL p95",
        "TTFT target 2 s",
        "ITL target 0.1 s",
    ]
    saturation = alice.get(f"{base}/saturation.json?{QUERY}").json()
    assert saturation["data"][2]["y"] == [0.0, 0.0, 0.0, 2.0, 0.0]
    quiet = alice.get(f"/serving/{world.quiet.pk}/charts/throughput.json?{QUERY}").json()
    assert quiet["meta"]["empty"] is True


def test_the_team_page_lists_its_deployments(world):
    page = client_of(world.alice).get(f"/teams/aspen/?{QUERY}")

    rows = {r["workload"].name: r for r in page.context["serving_rows"]}
    assert set(rows) == {"llama", "quiet"}
    assert rows["llama"]["per_gpu_hour"] == "1,836,000"
    assert rows["llama"]["overprovisioned"] is True
    assert f"/serving/{world.llama.pk}/" in page.content.decode()


def test_the_list_page_queries_do_not_grow_with_the_deployments(world):
    alice = client_of(world.alice)
    alice.get(f"/serving/?{QUERY}")  # session and roles warmed
    with CaptureQueriesContext(connection) as few:
        alice.get(f"/serving/?{QUERY}")
    add_deployments(world.east, ["chat"] * 15, HOURS[1])
    with CaptureQueriesContext(connection) as many:
        assert len(alice.get(f"/serving/?{QUERY}").context["rows"]) == 17

    assert len(many) == len(few)


# --- The planner's ``workload`` -------------------------------------------------------------


def test_the_plan_takes_the_knee_and_compares_with_what_runs(world):
    with time_machine.travel(NOW, tick=False):
        answer = api_of(world.alice).post(
            "/api/v1/capacity-plan/", {**PLAN, "workload": LLAMA}, format="json"
        )

    assert answer.status_code == 200, answer.json()
    body = answer.json()
    # 2 req/s x 400 tokens = 800 tokens/s ÷ 800 per replica = 1 replica; 2 run now.
    assert body["replicas"] == 1
    assert body["measured"]["inputs"] == [
        "replica_throughput_tokens_per_second",
        "replica_max_concurrency",
        "tensor_parallel",
        "flavor",
    ]
    assert body["measured"]["values"]["replica_max_concurrency"] == 4
    assert body["measured"]["knee_per_replica"] == pytest.approx(800.0)
    assert body["deployed_replicas"] == 2
    # One replica, one GPU, at 3.60 x 730 h.
    currency = settings.GPULEDGER_CURRENCY
    assert body["comparison"]["surplus_cost_per_month"] == pytest.approx(2628.0)
    assert body["comparison"]["text"] == (
        f"You run 2: 1 replica more than needed, costing 2,628.00 {currency} a month."
    )
    assert body["price_per_gpu_hour"] == pytest.approx(3.6)


def test_the_request_rate_and_lengths_are_measured_when_omitted(world):
    shape = ("request_rate", "input_tokens", "output_tokens")
    plan = {k: v for k, v in PLAN.items() if k not in shape}
    with time_machine.travel(NOW, tick=False):
        body = (
            api_of(world.alice)
            .post("/api/v1/capacity-plan/", {**plan, "workload": LLAMA}, format="json")
            .json()
        )

    assert body["measured"]["inputs"][:3] == list(shape)
    assert [body["measured"]["values"][name] for name in shape] == [
        pytest.approx(5.0),
        pytest.approx(800.0),
        pytest.approx(400.0),
    ]
    # The busiest hour's 5 req/s x 400 tokens ÷ 800 tokens/s a replica = 2.5 replicas: 3.
    assert body["replicas_by_throughput"] == pytest.approx(2.5)
    assert body["replicas"] == 3
    assert body["comparison"]["text"].startswith("You run 2: 1 replica fewer than needed")


def test_typed_inputs_override_the_measurement(world):
    with time_machine.travel(NOW, tick=False):
        body = (
            api_of(world.alice)
            .post(
                "/api/v1/capacity-plan/",
                {**PLAN, "workload": LLAMA, "replica_throughput_tokens_per_second": 400},
                format="json",
            )
            .json()
        )

    assert "replica_throughput_tokens_per_second" not in body["measured"]["inputs"]
    assert body["replicas"] == 2
    assert body["comparison"]["text"] == "You run 2: as many as needed."


@pytest.mark.parametrize(
    ("workload", "reason"),
    [
        ("chat/llama", "names 2 deployments"),
        ("chat/nope", "No serving deployment"),
        ("just-a-name", "namespace/name"),
    ],
)
def test_an_ambiguous_or_unknown_workload_is_a_400_naming_the_field(world, workload, reason):
    answer = api_of(world.alice).post(
        "/api/v1/capacity-plan/", {**PLAN, "workload": workload}, format="json"
    )

    assert answer.status_code == 400
    assert list(answer.json()) == ["workload"]
    assert reason in answer.json()["workload"][0]


def test_another_teams_deployment_is_unknown(world):
    answer = api_of(world.bob).post(
        "/api/v1/capacity-plan/", {**PLAN, "workload": LLAMA}, format="json"
    )

    assert answer.status_code == 400
    assert answer.json()["workload"] == [f"No serving deployment {LLAMA!r}."]


def test_what_cannot_be_measured_must_be_entered(world):
    plan = {k: v for k, v in PLAN.items() if k != "kv_cache_tokens"}
    answer = api_of(world.bob).post(
        "/api/v1/capacity-plan/",
        {**plan, "workload": "east/search/Deployment/ranker"},
        format="json",
    )

    errors = answer.json()
    assert answer.status_code == 400
    assert errors["kv_cache_tokens"][0].startswith("This field is required: not measured")
    assert "no hour" in errors["replica_throughput_tokens_per_second"][0]
    without = api_of(world.bob).post("/api/v1/capacity-plan/", plan, format="json").json()
    assert without["replica_throughput_tokens_per_second"] == ["This field is required."]


def test_the_planner_page_opens_prefilled_from_the_deployment(world):
    alice = client_of(world.alice)
    with time_machine.travel(NOW, tick=False):
        linked = alice.get(f"/serving/planner/?{urlencode({'workload': LLAMA})}")
        typed = alice.get(
            "/serving/planner/?"
            + urlencode(
                {**PLAN, "workload": LLAMA, "tensor_parallel": "", "latency_target_seconds": ""}
            )
        )

    # The link: the example's headroom and spares, the measured inputs (the request's shape
    # included) left to the deployment; the KV-cache size is not measured, so it is asked for.
    assert linked.context["form"].values["request_rate"] == ""
    assert linked.context["form"].values["headroom"] == "0.3"
    assert list(linked.context["form"].errors) == ["kv_cache_tokens"]
    assert "not measured" in linked.context["form"].errors["kv_cache_tokens"][0]
    body = typed.content.decode()
    assert typed.context["form"].plan.replicas == 1
    assert "You run 2: 1 replica more than needed" in body
    assert "replica throughput 800.0 tokens/s" in body


def test_a_deployment_without_a_knee_says_why_and_judges_nothing(world):
    # ranker (Triton) counts requests only and has no inter-token latency: no hour is within
    # the 0.1 s ITL target, so there is no knee.
    bob = client_of(world.bob)
    page = bob.get(f"/serving/{world.ranker.pk}/?{QUERY}")

    assert page.status_code == 200
    assert page.context["knee"] is None
    assert 'data-testid="no-knee"' in page.content.decode()
    stats = {s["testid"]: s for s in page.context["stats"]}
    assert stats["stat-below-knee"]["value"] == "—"
    assert stats["stat-per-replica"]["note"] == "no serving telemetry"
    throughput = bob.get(f"/serving/{world.ranker.pk}/charts/throughput.json?{QUERY}").json()
    # Without token counts, requests per replica; no knee line.
    assert [t["name"] for t in throughput["data"]] == ["Requests/s per replica"]
    assert throughput["data"][0]["y"] == [20.0, 20.0]
