"""Fixtures for notification tests (remediation tests share them): episodes, and the servers
receivers talk to.

``make_episode(**fields)``  an Episode of workload ml/train (team "vision", ClusterQueue
                            "vision-cq", cluster "east"), fired an hour ago and open unless told.
``smtp_server``             a real SMTP server (aiosmtpd) on a free loopback port; Django's SMTP
                            backend pointed at it. ``.messages`` holds what arrived.
``webhook_server``          a loopback HTTP server recording each POST (headers, body); answers
                            from ``.statuses`` (first to last, then 200), or hangs with ``.hang``.
``alertmanager``            a real Alertmanager (tests/alertmanager_server.py).
``loopback_receivers``      (autouse) GPULEDGER_NOTIFY_ALLOWED_NETWORKS allows 127.0.0.0/8.
"""

from __future__ import annotations

import http.server
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from email import message_from_bytes
from email.message import Message
from typing import Any

import pytest
from django.utils import timezone

from tests.alertmanager_server import AlertmanagerServer
from tests.http_serving import serving_thread
from tests.prometheus_server import LOOPBACK, free_port

# Receivers here deliver to loopback listeners, which notifications refuse unless allowed.
LOOPBACK_NETWORKS = ["127.0.0.0/8"]


@pytest.fixture(autouse=True)
def loopback_receivers(settings) -> None:
    """Allow loopback receivers: every server these tests send to listens on 127.0.0.1."""
    settings.GPULEDGER_NOTIFY_ALLOWED_NETWORKS = LOOPBACK_NETWORKS


@dataclass
class World:
    cluster: Any
    team: Any
    cluster_queue: Any
    local_queue: Any
    workload: Any
    node: Any
    lead: Any


@pytest.fixture
def world(db, django_user_model) -> World:
    from fleet.models import Cluster, Node
    from quotas.models import ClusterQueue, LocalQueue, Team, Workload

    cluster = Cluster.objects.create(name="east", display_name="East")
    team = Team.objects.create(name="vision", display_name="Vision")
    lead = django_user_model.objects.create_user(
        username="lead", email="lead@example.test", password="x"
    )
    team.leads.add(lead)
    cq = ClusterQueue.objects.create(cluster=cluster, name="vision-cq", team=team)
    lq = LocalQueue.objects.create(
        cluster=cluster,
        namespace="ml",
        name="default",
        cluster_queue=cq,
        cluster_queue_name="vision-cq",
    )
    workload = Workload.objects.create(
        cluster=cluster,
        namespace="ml",
        name="train",
        local_queue=lq,
        cluster_queue=cq,
        admitted_gpus=4,
        requested_gpus=4,
        state="admitted",
    )
    node = Node.objects.create(cluster=cluster, name="gpu-node-1")
    return World(cluster, team, cq, lq, workload, node, lead)


@pytest.fixture
def make_episode(world: World):
    from alerts.models import Episode

    counter = {"n": 0}

    def make(**fields: Any) -> Episode:
        counter["n"] += 1
        now = timezone.now().replace(microsecond=0)
        started = fields.pop("started_at", now - timedelta(hours=2))
        values: dict[str, Any] = {
            "rule": "idle_workload",
            "severity": "warning",
            "cluster": world.cluster,
            "team": world.team,
            "cluster_queue": world.cluster_queue,
            "local_queue": world.local_queue,
            "namespace": "ml",
            "workload": world.workload,
            "gpus": 4,
            "gpu_uuids": ["GPU-1", "GPU-2", "GPU-3", "GPU-4"],
            "subject_key": f"workload:east/ml/train#{counter['n']}",
            "started_at": started,
            "fired_at": started + timedelta(minutes=60),
            "evaluated_until": now,
            "idle_gpu_hours": 4.0,
            "held_gpu_hours": 4.0,
            "summary": "Workload ml/train: 4 of 4 GPUs idle for 60 min.",
        }
        values.update(fields)
        return Episode.objects.create(**values)

    return make


# --- SMTP ---------------------------------------------------------------------------------------


class SmtpServer:
    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list[tuple[Message, list[str]]] = []
        outer = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
                outer.messages.append(
                    (message_from_bytes(envelope.content), list(envelope.rcpt_tos))
                )
                return "250 Message accepted for delivery"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname=LOOPBACK, port=self.port)

    def start(self) -> SmtpServer:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()


@pytest.fixture
def smtp_server(settings) -> Any:
    server = SmtpServer().start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = LOOPBACK
    settings.EMAIL_PORT = server.port
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = ""
    settings.EMAIL_HOST_PASSWORD = ""
    settings.DEFAULT_FROM_EMAIL = "GPU Ledger <ledger@example.test>"
    yield server
    server.stop()


# --- Webhook ------------------------------------------------------------------------------------


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class WebhookServer:
    statuses: list[int] = field(default_factory=list)
    hang: bool = False
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        outer = self
        self._closing = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                outer.received.append(Received(self.path, dict(self.headers.items()), body))
                if outer.hang:
                    outer._closing.wait(30)
                    self.close_connection = True
                    return
                status = outer.statuses.pop(0) if outer.statuses else 200
                answer = b"ok" if status < 300 else b"try later"
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                return

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: object, client_address: object) -> None:
                return

        self.server = Server((LOOPBACK, 0), Handler)
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}/hook"
        self._thread = serving_thread(self.server)
        self._thread.start()

    def close(self) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook_server() -> Any:
    server = WebhookServer()
    yield server
    server.close()


# --- Alertmanager -------------------------------------------------------------------------------


@pytest.fixture
def alertmanager() -> Any:
    with AlertmanagerServer() as server:
        yield server
