"""Fixtures for page tests (fleet and quota pages), Django client and headless Chromium.

Users and clients
  ``staff_user`` / ``staff_client``   staff: sees every team.
  ``lead_user`` / ``lead_client``     leads team "alpha" only (``fleet_data.team_a``).
  ``login_client(user)``              a Client logged in as any user.

Data
  ``fleet_data``  a small fleet built with the ORM (``build_fleet``) for each test (a namespace;
                  see ``FleetData``): cluster "test", teams alpha (led by ``lead_user``)
                  and beta, one ClusterQueue each,
                  two nodes × 4 GPUs (a time-sliced GPU on node-a1, a MIG-split GPU on node-b1),
                  usage rows for the newest window (``latest_rows``) and an hour of history on
                  one GPU, hourly rollups (fleet, flavor, team, workload scopes) for the last
                  ``ROLLUP_HOURS`` complete hours (``rollups``), pending workloads, and a
                  successful DCGM ``IngestRun``. Tests compute expected numbers from these objects.
                  The modules in ``fleet_pages/`` build it once per module instead.

Browser (Playwright + the system Chromium)
  ``browser_type_launch_args``  points pytest-playwright at /usr/bin/chromium with the flags
                  in ``CHROMIUM_ARGS`` (headless, in a container). Without Chromium the
                  browser tests skip, except with CI=true, where they fail.
  ``browser_login(page, live_server_url, user)``  puts a session cookie for ``user`` in ``page``.
  ``console_errors``  a list collecting console errors and page errors of the ``page`` fixture
                  (the /favicon.ico 404 is ignored).
Browser tests need ``@pytest.mark.django_db(transaction=True)`` (the live server runs in another
thread) and the ``browser`` marker.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from core.timewindows import floor_time
from fleet.choices import IngestSource, IngestStatus
from fleet.models import Gpu, IngestRun, Node
from ledger.choices import RollupScope
from ledger.models import GpuUsage, HourlyRollup
from quotas.choices import WorkloadState
from quotas.models import ClusterQueue, Team, Workload
from tests.http_serving import serving_thread

# The live server runs Django's sync ORM from Playwright's event-loop thread.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ROLLUP_HOURS = 30


# --- Users and clients --------------------------------------------------------------------------


@pytest.fixture
def staff_user(db, django_user_model):
    return django_user_model.objects.create_user(
        username="staff", password="staff-password", is_staff=True
    )


@pytest.fixture
def lead_user(db, django_user_model):
    return django_user_model.objects.create_user(username="lead", password="lead-password")


@pytest.fixture
def login_client(db):
    def make(user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def staff_client(login_client, staff_user) -> Client:
    return login_client(staff_user)


@pytest.fixture
def lead_client(login_client, lead_user) -> Client:
    return login_client(lead_user)


# --- Data ---------------------------------------------------------------------------------------


@dataclass
class FleetData:
    now: datetime
    cluster: Any
    team_a: Any
    team_b: Any
    cq_a: Any
    cq_b: Any
    workload_a: Any
    workload_b: Any
    pending: list[Any]
    node_a: Any
    node_b: Any
    gpus: dict[str, Any]
    latest_rows: list[Any]
    history_rows: list[Any]
    rollups: list[Any] = field(default_factory=list)
    complete_hours: list[datetime] = field(default_factory=list)
    lead: Any = None


def _usage(cluster, window_end, gpu, **fields):
    window_start = window_end - timedelta(seconds=settings.GPULEDGER_COLLECT_SECONDS)
    defaults = {
        "cluster": cluster,
        "window_start": window_start,
        "window_end": window_end,
        "gpu": gpu,
        "gpu_key": gpu.key if gpu else "",
        "node_name": gpu.host if gpu else fields.pop("node_name", ""),
        "gpu_model": gpu.model_name if gpu else "",
        "allocated": False,
        "gpus": gpu.fraction if gpu else 1.0,
        "capacity_gpus": gpu.fraction if gpu else 0.0,
        "activity_source": "sm_active",
        "samples": 1,
        "expected_samples": 1,
    }
    defaults.update(fields)
    if defaults.get("activity") is None:
        defaults["activity_source"] = "none"
        defaults["samples"] = 0
    if defaults.get("sm_active") is None and defaults.get("activity") is not None:
        defaults["sm_active"] = defaults["activity"]
    return GpuUsage(**defaults)


def _fleet_queues(cluster, lead_user) -> dict[str, Any]:
    """Teams alpha (led by ``lead_user``) and beta, a ClusterQueue each, an admitted and a
    pending workload in each."""
    team_a = Team.objects.create(name="alpha", display_name="Alpha")
    team_a.leads.add(lead_user)
    team_b = Team.objects.create(name="beta", display_name="Beta")
    cq_a = ClusterQueue.objects.create(cluster=cluster, name="cq-alpha", team=team_a)
    cq_b = ClusterQueue.objects.create(cluster=cluster, name="cq-beta", team=team_b)
    workload_a = Workload.objects.create(
        cluster=cluster,
        namespace="ns-alpha",
        name="train-a",
        cluster_queue=cq_a,
        state=WorkloadState.ADMITTED,
        requested_gpus=3,
        admitted_gpus=3,
    )
    workload_b = Workload.objects.create(
        cluster=cluster,
        namespace="ns-beta",
        name="train-b",
        cluster_queue=cq_b,
        state=WorkloadState.ADMITTED,
        requested_gpus=3,
        admitted_gpus=3,
    )
    pending = [
        Workload.objects.create(
            cluster=cluster,
            namespace="ns-beta",
            name="waiting-b",
            cluster_queue=cq_b,
            state=WorkloadState.PENDING,
            requested_gpus=4,
        ),
        Workload.objects.create(
            cluster=cluster,
            namespace="ns-alpha",
            name="waiting-a",
            cluster_queue=cq_a,
            state=WorkloadState.PENDING,
            requested_gpus=2,
        ),
    ]
    return {
        "team_a": team_a,
        "team_b": team_b,
        "cq_a": cq_a,
        "cq_b": cq_b,
        "workload_a": workload_a,
        "workload_b": workload_b,
        "pending": pending,
    }


def _fleet_nodes(cluster) -> tuple[Any, Any, dict[str, Any]]:
    """node-a1 (H100: one GPU time-sliced) and node-b1 (A100: one GPU split in two MIG
    instances), and their GPUs by short name."""
    node_a = Node.objects.create(
        cluster=cluster,
        name="node-a1",
        gpu_product="NVIDIA-H100-80GB-HBM3",
        node_pool="pool-a",
        flavor="h100",
        gpu_capacity=4,
        gpu_allocatable=4,
    )
    node_b = Node.objects.create(
        cluster=cluster,
        name="node-b1",
        gpu_product="NVIDIA-A100-SXM4-80GB",
        node_pool="pool-b",
        flavor="a100",
        gpu_capacity=4,
        gpu_allocatable=4,
    )

    def gpu(node, index, gi_id="", slices=7, profile="", time_sliced=False):
        return Gpu.objects.create(
            cluster=cluster,
            node=node,
            host=node.name,
            uuid=f"GPU-{node.name}-{index}",
            gi_id=gi_id,
            index=index,
            model_name=node.gpu_product,
            mig_profile=profile,
            slices=slices,
            time_sliced=time_sliced,
        )

    gpus = {
        "a0": gpu(node_a, 0),
        "a1": gpu(node_a, 1),
        "a2": gpu(node_a, 2, time_sliced=True),
        "a3": gpu(node_a, 3),
        "b0": gpu(node_b, 0),
        "b1": gpu(node_b, 1),
        "b2": gpu(node_b, 2),
        "b3-mig1": gpu(node_b, 3, gi_id="1", slices=3, profile="3g.40gb"),
        "b3-mig2": gpu(node_b, 3, gi_id="2", slices=4, profile="4g.40gb"),
    }
    return node_a, node_b, gpus


def _latest_usage(cluster, now: datetime, gpus: dict[str, Any], queues: dict[str, Any]) -> list:
    """The newest window's usage rows, one case of the pages' rules each."""
    alpha = {
        "team": queues["team_a"],
        "cluster_queue": queues["cq_a"],
        "workload": queues["workload_a"],
        "namespace": "ns-alpha",
    }
    beta = {
        "team": queues["team_b"],
        "cluster_queue": queues["cq_b"],
        "workload": queues["workload_b"],
        "namespace": "ns-beta",
    }
    latest = [
        # Busy and working.
        _usage(
            cluster,
            now,
            gpus["a0"],
            allocated=True,
            pod="train-a-0",
            activity=0.8,
            gpu_util=95.0,
            pipe_tensor_active=0.5,
            dram_active=0.3,
            fb_used_mib=40960.0,
            **alpha,
        ),
        # Idle (below the idle threshold) and busy-not-working (GPU_UTIL high, SM_ACTIVE low).
        _usage(
            cluster,
            now,
            gpus["a1"],
            allocated=True,
            pod="train-a-1",
            activity=0.005,
            gpu_util=80.0,
            **alpha,
        ),
        # Time-sliced between two pods: half each, capacity counted once.
        _usage(
            cluster,
            now,
            gpus["a2"],
            allocated=True,
            pod="train-b-0",
            activity=0.4,
            gpu_util=60.0,
            gpus=0.5,
            capacity_gpus=1.0,
            shared=True,
            **beta,
        ),
        _usage(
            cluster,
            now,
            gpus["a2"],
            allocated=True,
            pod="train-b-1",
            activity=0.4,
            gpu_util=60.0,
            gpus=0.5,
            capacity_gpus=0.0,
            shared=True,
            **beta,
        ),
        # Free and idle.
        _usage(cluster, now, gpus["a3"], activity=0.0, gpu_util=0.0),
        # Allocated, series present but no samples: no telemetry, never idle.
        _usage(cluster, now, gpus["b0"], allocated=True, pod="train-b-2", activity=None, **beta),
        # Free, no telemetry.
        _usage(cluster, now, gpus["b1"], activity=None),
        # Busy but not working.
        _usage(
            cluster,
            now,
            gpus["b2"],
            allocated=True,
            pod="train-b-3",
            activity=0.1,
            gpu_util=70.0,
            **beta,
        ),
        # MIG: 3/7 held by alpha, 4/7 free.
        _usage(
            cluster,
            now,
            gpus["b3-mig1"],
            allocated=True,
            pod="train-a-2",
            activity=0.6,
            gpu_util=90.0,
            **alpha,
        ),
        _usage(cluster, now, gpus["b3-mig2"], activity=0.0, gpu_util=0.0),
        # Two allocated GPUs whose pod has no DCGM series at all.
        _usage(
            cluster,
            now,
            None,
            allocated=True,
            pod="lost-labels",
            activity=None,
            gpus=2.0,
            capacity_gpus=0.0,
            node_name="node-b1",
            **beta,
        ),
    ]
    GpuUsage.objects.bulk_create(latest)
    return latest


def _history_usage(cluster, now: datetime, gpus: dict[str, Any], queues: dict[str, Any]) -> list:
    """An hour of one-minute windows on GPU a0, its activity rising with age."""
    alpha = {
        "team": queues["team_a"],
        "cluster_queue": queues["cq_a"],
        "workload": queues["workload_a"],
        "namespace": "ns-alpha",
    }
    history = [
        _usage(
            cluster,
            now - timedelta(minutes=minutes),
            gpus["a0"],
            allocated=True,
            pod="train-a-0",
            activity=round(0.5 + minutes / 200.0, 4),
            gpu_util=90.0,
            **alpha,
        )
        for minutes in range(1, 61)
    ]
    GpuUsage.objects.bulk_create(history)
    return history


def _fleet_rollups(
    cluster, now: datetime, queues: dict[str, Any]
) -> tuple[list[datetime], list[Any]]:
    """Hourly rollups for the last ROLLUP_HOURS complete hours (fleet, flavor, team and
    workload scopes); values vary by hour so a longer range sums to more."""
    team_a, team_b = queues["team_a"], queues["team_b"]
    workload_a, workload_b = queues["workload_a"], queues["workload_b"]
    last_hour = floor_time(now, 3600)
    hours = [last_hour - timedelta(hours=offset) for offset in range(ROLLUP_HOURS, 0, -1)]
    rollups = []
    for n, hour in enumerate(hours, start=1):
        for flavor, capacity in (("h100", 4.0), ("a100", 4.0)):
            rollups.append(
                HourlyRollup(
                    cluster=cluster,
                    scope=RollupScope.FLEET,
                    key=cluster.name,
                    hour=hour,
                    flavor=flavor,
                    capacity_gpu_hours=capacity,
                    allocated_gpu_hours=3.0,
                    telemetry_gpu_hours=2.5,
                    active_gpu_hours=1.0 + n / 100.0,
                    idle_gpu_hours=0.5,
                    busy_not_working_gpu_hours=0.25,
                    windows=60,
                )
            )
            rollups.append(
                HourlyRollup(
                    cluster=cluster,
                    scope=RollupScope.FLAVOR,
                    key=flavor,
                    hour=hour,
                    flavor=flavor,
                    capacity_gpu_hours=capacity,
                    allocated_gpu_hours=3.0,
                    telemetry_gpu_hours=2.5,
                    active_gpu_hours=1.0,
                    idle_gpu_hours=0.5,
                    windows=60,
                )
            )
        for team, active, idle, busy in ((team_a, 2.0, 0.2, 0.1), (team_b, 0.5, 1.0, 0.4)):
            rollups.append(
                HourlyRollup(
                    cluster=cluster,
                    scope=RollupScope.TEAM,
                    key=team.name,
                    hour=hour,
                    team=team,
                    allocated_gpu_hours=3.0,
                    telemetry_gpu_hours=2.5,
                    active_gpu_hours=active + n / 100.0,
                    idle_gpu_hours=idle,
                    busy_not_working_gpu_hours=busy,
                    gpu_util_gpu_hours=1.5,
                    gpu_util_covered_gpu_hours=2.5,
                    windows=60,
                )
            )
        for workload, team, busy in ((workload_a, team_a, 0.1), (workload_b, team_b, 0.4)):
            rollups.append(
                HourlyRollup(
                    cluster=cluster,
                    scope=RollupScope.WORKLOAD,
                    key=f"{workload.namespace}/{workload.name}",
                    hour=hour,
                    team=team,
                    cluster_queue=workload.cluster_queue,
                    workload=workload,
                    allocated_gpu_hours=3.0,
                    telemetry_gpu_hours=2.5,
                    active_gpu_hours=1.0,
                    busy_not_working_gpu_hours=busy,
                    gpu_util_gpu_hours=1.5,
                    gpu_util_covered_gpu_hours=2.5,
                    peak_allocated_gpus=3.0,
                    windows=60,
                )
            )
    HourlyRollup.objects.bulk_create(rollups)
    return hours, rollups


def build_fleet(cluster, lead_user) -> FleetData:
    """The fleet described above, its newest window the one the clock is in now."""
    now = floor_time(timezone.now(), settings.GPULEDGER_COLLECT_SECONDS)
    queues = _fleet_queues(cluster, lead_user)
    node_a, node_b, gpus = _fleet_nodes(cluster)
    latest = _latest_usage(cluster, now, gpus, queues)
    history = _history_usage(cluster, now, gpus, queues)
    hours, rollups = _fleet_rollups(cluster, now, queues)
    IngestRun.objects.create(
        cluster=cluster,
        source=IngestSource.DCGM,
        status=IngestStatus.SUCCESS,
        # Real time, not the aligned window: the banner must read "just now".
        started_at=timezone.now() - timedelta(seconds=10),
        finished_at=timezone.now() - timedelta(seconds=5),
        window_start=now - timedelta(seconds=60),
        window_end=now,
    )
    return FleetData(
        now=now,
        cluster=cluster,
        **queues,
        node_a=node_a,
        node_b=node_b,
        gpus=gpus,
        latest_rows=latest,
        history_rows=history,
        rollups=rollups,
        complete_hours=hours,
        lead=lead_user,
    )


@pytest.fixture
def fleet_data(db, cluster, lead_user) -> FleetData:
    return build_fleet(cluster, lead_user)


# --- Browser ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not shutil.which(CHROMIUM) and not os.path.exists(CHROMIUM):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(
                f"{CHROMIUM} is missing; CI must run the browser tests (apt install chromium)"
            )
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "headless": True,
        "args": CHROMIUM_ARGS,
    }


@pytest.fixture
def browser_login():
    def login(page, live_server_url: str, user) -> None:
        client = Client()
        client.force_login(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME]
        page.context.add_cookies(
            [{"name": settings.SESSION_COOKIE_NAME, "value": cookie.value, "url": live_server_url}]
        )

    return login


@pytest.fixture
def console_errors(page) -> list[str]:
    errors: list[str] = []

    def on_console(message) -> None:
        if message.type != "error":
            return
        location = message.location.get("url", "") if message.location else ""
        if "favicon.ico" in location or "favicon.ico" in message.text:
            return
        errors.append(f"console: {message.text} ({location})")

    def on_response(response) -> None:
        if response.status >= 400 and not response.url.endswith("/favicon.ico"):
            errors.append(f"HTTP {response.status}: {response.url}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: errors.append(f"pageerror: {error}"))
    page.on("response", on_response)
    return errors


LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


@pytest.fixture
def outside_requests(page) -> list[str]:
    """Every request the ``page`` fixture makes to a host that is not loopback (must stay [])."""
    from urllib.parse import urlsplit

    outside: list[str] = []

    def on_request(request) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("data", "blob", "about"):
            return
        if parts.hostname not in LOCAL_HOSTS:
            outside.append(request.url)

    page.on("request", on_request)
    return outside


class PrometheusStub(http.server.BaseHTTPRequestHandler):
    """A loopback Prometheus: answers every range query with ``series`` (labels only), each given
    three points from the query's start, 0.25, 0.26 and 0.27; records the queries it was sent.
    The default series is gpu 1 of the fleet_data node."""

    series: list[dict] = [{"gpu": "1", "UUID": "GPU-node-a1-1"}]

    start = 0.0
    queries: list[str] = []

    def do_POST(self) -> None:  # noqa: N802
        from urllib.parse import parse_qs

        length = int(self.headers["Content-Length"])
        form = parse_qs(self.rfile.read(length).decode())
        type(self).queries.append(form["query"][0])
        start = float(form["start"][0])
        step = float(form["step"][0])
        values = [[start + i * step, str(0.25 + i / 100)] for i in range(3)]
        body = {
            "status": "success",
            "data": {
                "resultType": "matrix",
                "result": [{"metric": labels, "values": values} for labels in type(self).series],
            },
        }
        payload = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def prometheus_stub():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), PrometheusStub)
    PrometheusStub.queries = []
    PrometheusStub.series = [{"gpu": "1", "UUID": "GPU-node-a1-1"}]
    thread = serving_thread(server)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# Nodes whose dcgm-exporter is silent (tests/pages/silent_nodes.py).
from tests.pages.flows_scenario import flows_scenario  # noqa: E402, F401
from tests.pages.silent_nodes import silent  # noqa: E402, F401
