"""``ledger.tasks.collect_metrics`` through a real Celery worker process, Redis and the test
database (PostgreSQL or the SQLite file).

The broker is the test settings' (``CELERY_BROKER_URL``, which Celery also reads from the
environment before any broker passed to it): the worker and the test's client must agree."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeoutError
from django.conf import settings

from core.timewindows import floor_time
from fleet.choices import IngestSource, IngestStatus
from fleet.constants import COLLECT_DELAY_SECONDS
from fleet.models import Cluster, CollectionCursor, IngestRun
from ledger.models import GpuUsage
from tests.databases import child_database_url
from tests.prometheus_server import (
    OpenMetricsWriter,
    PrometheusServer,
    create_blocks,
    in_ci,
    require_binary,
)

pytestmark = pytest.mark.integration

BASE_DIR = Path(__file__).resolve().parents[2]
WINDOW = 60
BUSY = 0.5


def _require(condition: bool, message: str) -> None:
    if condition:
        return
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def _write_recent_fleet(path: Path, start: float, end: float) -> None:
    """8 GPUs on one node, two held by team-a/train at SM_ACTIVE 0.5, plain pod labels."""
    times = [start + 7 + 15 * i for i in range(int((end - start - 7) // 15) + 1)]
    ksm = {"namespace": "team-a", "pod": "train", "uid": "u-train"}
    with OpenMetricsWriter(path) as out:
        for metric in ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_GPU_UTIL"):
            out.family(metric)
            for gpu in range(8):
                labels = {"gpu": str(gpu), "UUID": f"GPU-w-{gpu}", "hostname": "node-w"}
                if gpu < 2:
                    labels.update(namespace="team-a", pod="train", container="main")
                value = (BUSY if gpu < 2 else 0.0) * (100 if metric.endswith("UTIL") else 1)
                for t in times:
                    out.sample(labels, value, t)
        out.family("kube_pod_info")
        for t in times:
            out.sample({**ksm, "node": "node-w"}, 1.0, t)
        out.family("kube_pod_status_phase")
        for t in times:
            out.sample({**ksm, "phase": "Running"}, 1.0, t)
        out.family("kube_pod_container_resource_requests")
        for t in times:
            labels = {**ksm, "container": "main", "node": "node-w", "resource": "nvidia_com_gpu"}
            out.sample(labels, 2.0, t)


@pytest.fixture
def worker_env(transactional_db) -> dict[str, str]:
    try:
        redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=2).ping()
    except redis.RedisError:
        _require(False, f"Redis is not running at {settings.CELERY_BROKER_URL}")
    # The worker reads and writes the test database itself.
    url = child_database_url()
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings_test",
        "DATABASE_URL": url,
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "CELERY_RESULT_BACKEND": settings.CELERY_BROKER_URL,
        "GPULEDGER_COLLECT_SECONDS": str(WINDOW),
    }


def test_collect_metrics_runs_in_a_real_worker_and_catches_up(worker_env, tmp_path):
    require_binary("prometheus")
    # given 20 minutes of recent data in a real Prometheus
    now = datetime.now(UTC)
    # Windows close COLLECT_DELAY_SECONDS late: ten of them are complete for the worker.
    cursor_at = floor_time(now - timedelta(seconds=COLLECT_DELAY_SECONDS), WINDOW) - timedelta(
        minutes=10
    )
    _write_recent_fleet(tmp_path / "fleet.om", cursor_at.timestamp() - 600, now.timestamp())
    create_blocks(tmp_path / "fleet.om", tmp_path / "tsdb")
    server = PrometheusServer(tmp_path / "tsdb").start()
    cluster = Cluster.objects.create(name="worker", prometheus_url=server.url)
    CollectionCursor.objects.create(
        cluster=cluster, source=IngestSource.DCGM, last_window_end=cursor_at
    )
    queue = f"gl-test-{uuid.uuid4().hex[:8]}"
    celery_bin = str(Path(sys.executable).with_name("celery"))
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [celery_bin, "-A", "config", "worker", "--pool", "solo", "-Q", queue, "--loglevel", "INFO"]
        + ["--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=BASE_DIR,
        env=worker_env,
        stdout=log,
        stderr=log,
    )
    app = Celery("gl-test", broker=settings.CELERY_BROKER_URL, backend=settings.CELERY_BROKER_URL)
    try:
        # when the task goes through the broker to the worker
        result = app.send_task("ledger.tasks.collect_metrics", args=[cluster.pk], queue=queue)
        try:
            answer = result.get(timeout=90)
        except CeleryTimeoutError:
            log.flush()
            pytest.fail(f"no answer in 90 s: {(tmp_path / 'worker.log').read_text()[-3000:]}")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        log.close()
        server.cleanup()
        app.close()
    # then the worker caught up every window after the cursor, oldest first
    assert answer["cluster"] == "worker" and answer["windows"] >= 10, (
        answer,
        (tmp_path / "worker.log").read_text()[-3000:],
    )
    runs = IngestRun.objects.filter(cluster=cluster).order_by("pk")
    assert all(run.status == IngestStatus.SUCCESS for run in runs)
    ends = [run.window_end for run in runs]
    assert ends[:10] == [cursor_at + timedelta(minutes=m) for m in range(1, 11)]
    first = GpuUsage.objects.filter(cluster=cluster, window_end=ends[0], allocated=True)
    assert sorted(row.activity for row in first) == [BUSY, BUSY]
    assert CollectionCursor.objects.get(cluster=cluster).last_window_end == ends[-1]
    assert time.time() - now.timestamp() < 120
