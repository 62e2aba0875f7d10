"""A queue per cluster (fleet/routing.py): two real Celery worker processes, each consuming one
cluster's queue on Redis, collect their clusters from a real Prometheus at the same time; a
cluster without a queue of its own stays on the default queue."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import pytest
import redis
from celery.exceptions import TimeoutError as CeleryTimeoutError

from config.celery import app
from core.timewindows import floor_time
from fleet.choices import IngestSource, IngestStatus
from fleet.constants import COLLECT_DELAY_SECONDS
from fleet.models import Cluster, CollectionCursor, IngestRun
from fleet.routing import route_task
from ledger.models import RollupHour
from ledger.tasks import collect_metrics, roll_up_cluster_hours, roll_up_dirty_hours
from tests.databases import child_database_url
from tests.fleet.test_celery_worker import _write_recent_fleet
from tests.prometheus_server import PrometheusServer, create_blocks, in_ci, require_binary

BASE_DIR = Path(__file__).resolve().parents[2]
WINDOW = 60
CATCH_UP_WINDOWS = 30
EVALUATED = re.compile(r"alerts\.tasks\.evaluate_alerts\[[-\w]+\] succeeded")


def _queue_of(name: str, *args: Any) -> str | None:
    route = route_task(name, list(args), {}, {})
    return None if route is None else route["queue"]


def test_per_cluster_tasks_go_to_the_queue_of_a_cluster_that_has_one(db, settings) -> None:
    east = Cluster.objects.create(name="east")
    west = Cluster.objects.create(name="west")
    settings.GPULEDGER_CLUSTER_QUEUES = ["east"]

    assert _queue_of("ledger.tasks.collect_metrics", east.pk) == "cluster.east"
    assert _queue_of("quotas.tasks.sync_cluster", east.pk) == "cluster.east"
    assert _queue_of("ledger.tasks.roll_up_cluster_hours", east.pk) == "cluster.east"
    assert _queue_of("alerts.tasks.evaluate_alerts", east.pk, "a", "b", True) == "cluster.east"
    assert route_task("ledger.tasks.collect_metrics", [], {"cluster_id": east.pk}, {}) == {
        "queue": "cluster.east"
    }
    # a cluster with no queue of its own, a gone cluster, a fleet-wide task: the default queue
    assert _queue_of("ledger.tasks.collect_metrics", west.pk) is None
    assert _queue_of("ledger.tasks.collect_metrics", 10**9) is None
    assert _queue_of("ledger.tasks.collect_metrics_all") is None
    assert _queue_of("notifications.tasks.send_notifications") is None
    assert _queue_of("ledger.tasks.collect_metrics", "east") is None

    settings.GPULEDGER_CLUSTER_QUEUES = ["*"]
    assert _queue_of("quotas.tasks.sync_cluster", west.pk) == "cluster.west"
    settings.GPULEDGER_CLUSTER_QUEUES = []
    assert _queue_of("quotas.tasks.sync_cluster", east.pk) is None


def test_celery_publishes_to_the_routed_queue_and_a_caller_queue_wins(db, settings) -> None:
    east = Cluster.objects.create(name="east")
    settings.GPULEDGER_CLUSTER_QUEUES = ["east"]
    router = app.amqp.router

    assert router.route({}, "ledger.tasks.collect_metrics", args=[east.pk])["queue"].name == (
        "cluster.east"
    )
    chosen = router.route({"queue": "other"}, "ledger.tasks.collect_metrics", args=[east.pk])
    assert chosen["queue"].name == "other"
    assert router.route({}, "ledger.tasks.prune_usage", args=[])["queue"].name == "celery"


@pytest.mark.integration
def test_the_rollup_sweep_hands_a_cluster_with_a_queue_to_its_worker(db, settings) -> None:
    broker = _broker(settings.CELERY_BROKER_URL)
    east = Cluster.objects.create(name=f"east-{uuid.uuid4().hex[:6]}")
    hour = datetime(2026, 1, 5, 10, tzinfo=UTC)
    RollupHour.objects.create(cluster=east, hour=hour, changes=1)  # a window not rolled up
    settings.GPULEDGER_CLUSTER_QUEUES = [east.name]
    queue = f"cluster.{east.name}"
    try:
        answer = roll_up_dirty_hours()
        published = broker.lrange(queue, 0, -1)
    finally:
        broker.delete(queue)
    assert answer == {"rolled_up": {}, "failed": 0, "queued": [east.pk]}
    assert len(published) == 1
    message = json.loads(published[0])
    assert message["headers"]["task"] == "ledger.tasks.roll_up_cluster_hours"
    assert message["headers"]["argsrepr"] == f"[{east.pk}]"
    assert RollupHour.objects.dirty().filter(cluster=east).exists()  # left to its worker

    # the task the cluster's worker runs rolls the hour up
    answer = roll_up_cluster_hours(east.pk)
    assert answer == {"cluster_id": east.pk, "rolled_up": [hour.isoformat()], "failed": 0}
    assert not RollupHour.objects.dirty().filter(cluster=east).exists()


def _broker(url: str) -> redis.Redis:
    broker = redis.Redis.from_url(url, socket_timeout=2)
    try:
        broker.ping()
    except redis.RedisError:
        if in_ci():
            pytest.fail(f"Redis is not running at {url}")
        pytest.skip(f"Redis is not running at {url}")
    return broker


def _start_worker(name: str, queue: str, env: dict[str, str], log: IO[bytes]) -> subprocess.Popen:
    celery_bin = str(Path(sys.executable).with_name("celery"))
    command = [celery_bin, "-A", "config", "worker", "--pool", "solo", "-Q", queue]
    command += ["-n", f"{name}@gl-test", "--loglevel", "INFO"]
    command += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    return subprocess.Popen(command, cwd=BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)


def _wait_for(condition: Any, seconds: float, what: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            tails = "\n".join(path.read_text()[-2000:] for path in logs)
            pytest.fail(f"{what} not within {seconds} s:\n{tails}")
        time.sleep(0.5)


@pytest.mark.integration
def test_two_workers_each_collect_their_own_cluster_at_the_same_time(
    transactional_db, settings, tmp_path
) -> None:
    require_binary("prometheus")
    broker = _broker(settings.CELERY_BROKER_URL)
    # given a real Prometheus with recent data, and three clusters reading it: two with queues
    # of their own, one without
    now = datetime.now(UTC)
    cursor_at = floor_time(now - timedelta(seconds=COLLECT_DELAY_SECONDS), WINDOW) - timedelta(
        minutes=CATCH_UP_WINDOWS
    )
    _write_recent_fleet(tmp_path / "fleet.om", cursor_at.timestamp() - 600, now.timestamp())
    create_blocks(tmp_path / "fleet.om", tmp_path / "tsdb")
    server = PrometheusServer(tmp_path / "tsdb").start()
    tag = uuid.uuid4().hex[:6]
    names = {"east": f"east-{tag}", "west": f"west-{tag}", "north": f"north-{tag}"}
    clusters = {
        key: Cluster.objects.create(name=name, prometheus_url=server.url)
        for key, name in names.items()
    }
    for cluster in clusters.values():
        CollectionCursor.objects.create(
            cluster=cluster, source=IngestSource.DCGM, last_window_end=cursor_at
        )
    settings.GPULEDGER_CLUSTER_QUEUES = [names["east"], names["west"]]
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings_test",
        "DATABASE_URL": child_database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "CELERY_RESULT_BACKEND": settings.CELERY_BROKER_URL,
        "GPULEDGER_COLLECT_SECONDS": str(WINDOW),
        "GPULEDGER_CLUSTER_QUEUES": ",".join(settings.GPULEDGER_CLUSTER_QUEUES),
    }
    logs = {key: tmp_path / f"{key}.log" for key in ("east", "west")}
    handles = [logs[key].open("wb") for key in ("east", "west")]
    workers = {
        key: _start_worker(key, f"cluster.{names[key]}", env, handle)
        for key, handle in zip(("east", "west"), handles, strict=True)
    }
    results: dict[str, Any] = {}
    default_queue: list[bytes] = []
    try:
        _wait_for(
            lambda: all("ready." in path.read_text() for path in logs.values()),
            60,
            "both workers ready",
            list(logs.values()),
        )
        # when each cluster's collection is published without naming a queue
        for key in ("east", "west", "north"):
            results[key] = collect_metrics.apply_async(args=[clusters[key].pk])
        answers = {}
        for key in ("east", "west"):
            try:
                answers[key] = results[key].get(timeout=120)
            except CeleryTimeoutError:
                _wait_for(lambda: False, 0, f"{key}'s collection", list(logs.values()))
        # the alert evaluation each collection queued runs on the same worker, after it
        _wait_for(
            lambda: all(EVALUATED.search(path.read_text()) for path in logs.values()),
            60,
            "the alert evaluations",
            list(logs.values()),
        )
        default_queue = broker.lrange("celery", 0, -1)
    finally:
        for worker in workers.values():
            worker.terminate()
        for worker in workers.values():
            worker.wait(timeout=30)
        server.cleanup()
        # only the message of this test: other tests may share the default queue
        north = results["north"].id if "north" in results else None
        for message in default_queue:
            if json.loads(message)["headers"]["id"] == north:
                broker.lrem("celery", 1, message)
        for handle in handles:
            handle.close()

    # then each cluster's tasks ran on its own worker, off its own queue
    for key in ("east", "west"):
        assert answers[key]["cluster"] == names[key]
        assert answers[key]["windows"] >= CATCH_UP_WINDOWS, answers[key]
        assert results[key].worker == f"{key}@gl-test"
        assert results[key].queue == f"cluster.{names[key]}"
        other = "west" if key == "east" else "east"
        text = logs[key].read_text()
        assert f"'cluster': {clusters[key].pk}," in text  # its evaluate_alerts result
        assert f"'cluster': {clusters[other].pk}," not in text
        assert names[other] not in text
    # the cluster with no queue of its own waits on the default queue, untouched by both
    waiting = {
        json.loads(message)["headers"]["id"]: json.loads(message)["headers"]["argsrepr"]
        for message in default_queue
    }
    assert waiting[results["north"].id] == f"[{clusters['north'].pk}]"
    assert results["east"].id not in waiting and results["west"].id not in waiting
    assert not IngestRun.objects.filter(cluster=clusters["north"]).exists()
    # and the two collections ran at the same time: their runs overlap
    spans = {}
    for key in ("east", "west"):
        runs = IngestRun.objects.filter(cluster=clusters[key], source=IngestSource.DCGM)
        assert all(run.status == IngestStatus.SUCCESS for run in runs)
        spans[key] = (
            min(run.started_at for run in runs),
            max(run.finished_at for run in runs),
        )
    (east_start, east_end), (west_start, west_end) = spans["east"], spans["west"]
    overlap = min(east_end, west_end) - max(east_start, west_start)
    shorter = min(east_end - east_start, west_end - west_start)
    assert overlap > shorter / 2, spans
