"""PrometheusClient against a tiny loopback HTTP server: auth, headers, error mapping."""

from __future__ import annotations

import base64
import http.server
import json
import time
from datetime import UTC, datetime
from urllib.parse import parse_qs

import pytest

from fleet.choices import PrometheusAuth
from fleet.models import Cluster
from fleet.prometheus import PrometheusClient, PrometheusError
from tests.http_serving import serving_thread
from tests.prometheus_server import free_port

AT = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
VECTOR = {
    "status": "success",
    "data": {
        "resultType": "vector",
        "result": [{"metric": {"UUID": "GPU-1"}, "value": [AT.timestamp(), "0.5"]}],
    },
}


class FakePrometheus:
    """Answers every request with (status, body, delay) and records what it was sent."""

    def __init__(self) -> None:
        self.status = 200
        self.body: bytes = json.dumps(VECTOR).encode()
        self.delay = 0.0
        self.requests: list[dict] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server API)
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                fake.requests.append({"path": self.path, "form": form, "headers": self.headers})
                time.sleep(fake.delay)
                self.send_response(fake.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(fake.body)))
                self.end_headers()
                self.wfile.write(fake.body)

            def log_message(self, *args: object) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        serving_thread(self.server).start()

    def answer(self, status: int, body: dict | str) -> None:
        self.status = status
        self.body = (body if isinstance(body, str) else json.dumps(body)).encode()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake():
    server = FakePrometheus()
    yield server
    server.close()


def error_body(kind: str) -> dict:
    return {"status": "error", "errorType": kind, "error": f"{kind} happened"}


def test_query_sends_promql_and_explicit_time_and_returns_the_items(fake):
    items = PrometheusClient(fake.url).query("up", AT)
    assert items == VECTOR["data"]["result"]
    sent = fake.requests[0]
    assert sent["path"] == "/api/v1/query"
    assert sent["form"] == {"query": ["up"], "time": [f"{AT.timestamp():.3f}"]}


def test_query_range_sends_start_end_and_step(fake):
    fake.answer(200, {"status": "success", "data": {"resultType": "matrix", "result": []}})
    PrometheusClient(fake.url).query_range("up", AT, AT.replace(hour=13), 60)
    form = fake.requests[0]["form"]
    assert form["step"] == ["60"] and form["end"] == [f"{AT.replace(hour=13).timestamp():.3f}"]


@pytest.mark.parametrize(
    ("status", "kind", "permanent"),
    [
        (400, "bad_data", True),
        (422, "execution", True),
        (401, "unauthorized", True),
        (403, "forbidden", True),
        (404, "not_found", True),
        (429, "too_many_requests", False),
        (500, "internal", False),
        (502, "bad_gateway", False),
        (503, "timeout", False),
    ],
)
def test_http_errors_map_to_permanent_or_transient(fake, status, kind, permanent):
    fake.answer(status, error_body(kind))
    with pytest.raises(PrometheusError) as failure:
        PrometheusClient(fake.url).query("up", AT)
    assert failure.value.permanent is permanent
    assert failure.value.status == status
    assert kind in str(failure.value)


def test_a_timeout_is_transient(fake):
    fake.delay = 1.0
    with pytest.raises(PrometheusError, match="timed out") as failure:
        PrometheusClient(fake.url, timeout=0.2).query("up", AT)
    assert not failure.value.permanent


def test_a_refused_connection_is_transient():
    with pytest.raises(PrometheusError, match="cannot connect") as failure:
        PrometheusClient(f"http://127.0.0.1:{free_port()}", timeout=2).query("up", AT)
    assert not failure.value.permanent


def test_an_answer_that_is_not_prometheus_json_is_permanent(fake):
    fake.answer(200, "<html>login</html>")
    with pytest.raises(PrometheusError, match="not JSON") as failure:
        PrometheusClient(fake.url).query("up", AT)
    assert failure.value.permanent


def test_a_matrix_where_a_vector_was_asked_is_permanent(fake):
    fake.answer(200, {"status": "success", "data": {"resultType": "matrix", "result": []}})
    with pytest.raises(PrometheusError, match="resultType") as failure:
        PrometheusClient(fake.url).query("up", AT)
    assert failure.value.permanent


@pytest.mark.django_db
def test_cluster_bearer_token_from_file_and_tenant_header_are_sent(fake, tmp_path, monkeypatch):
    secret = tmp_path / "token"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("GPULEDGER_SECRET_PROM_TOKEN_FILE", str(secret))
    cluster = Cluster.objects.create(
        name="mimir",
        prometheus_url=fake.url + "/prometheus/",
        prometheus_auth=PrometheusAuth.BEARER,
        prometheus_secret_env="GPULEDGER_SECRET_PROM_TOKEN",
        prometheus_headers={"X-Scope-OrgID": "gpu"},
        prometheus_timeout_seconds=3,
    )
    PrometheusClient.for_cluster(cluster).query("up", AT)
    sent = fake.requests[0]
    assert sent["path"] == "/prometheus/api/v1/query"
    assert sent["headers"]["Authorization"] == "Bearer s3cret"
    assert sent["headers"]["X-Scope-OrgID"] == "gpu"


@pytest.mark.django_db
def test_cluster_basic_auth_reads_the_password_from_the_environment(fake, monkeypatch):
    monkeypatch.setenv("GPULEDGER_SECRET_PROM_PASSWORD", "pw")
    cluster = Cluster.objects.create(
        name="basic",
        prometheus_url=fake.url,
        prometheus_auth=PrometheusAuth.BASIC,
        prometheus_username="ledger",
        prometheus_secret_env="GPULEDGER_SECRET_PROM_PASSWORD",
    )
    PrometheusClient.for_cluster(cluster).query("up", AT)
    expected = "Basic " + base64.b64encode(b"ledger:pw").decode()
    assert fake.requests[0]["headers"]["Authorization"] == expected


@pytest.mark.django_db
def test_a_missing_secret_is_a_permanent_error(monkeypatch):
    monkeypatch.delenv("GPULEDGER_SECRET_NOPE", raising=False)
    monkeypatch.delenv("GPULEDGER_SECRET_NOPE_FILE", raising=False)
    cluster = Cluster.objects.create(
        name="nosecret",
        prometheus_url="http://127.0.0.1:9",
        prometheus_auth=PrometheusAuth.BEARER,
        prometheus_secret_env="GPULEDGER_SECRET_NOPE",
    )
    with pytest.raises(PrometheusError, match="NOPE") as failure:
        PrometheusClient.for_cluster(cluster)
    assert failure.value.permanent
