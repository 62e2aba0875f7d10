"""End to end through a real Celery worker process, Redis and PostgreSQL: collected windows are
announced, the evaluation task goes through the broker, and the worker writes the episode."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from functools import partial
from pathlib import Path

import pytest
import redis
from django.db import connection

from alerts.choices import Rule
from alerts.models import AlertEvaluation, Episode
from alerts.tasks import evaluate_alerts
from ledger.signals import windows_collected
from tests.alerts.conftest import World, at
from tests.prometheus_server import in_ci

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

BASE_DIR = Path(__file__).resolve().parents[2]
IDLE = 0.002


def _require(condition: bool, message: str) -> None:
    if condition:
        return
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def worker_env() -> dict[str, str]:
    from config.celery import app

    broker = str(app.conf.broker_url)
    try:
        redis.Redis.from_url(broker, socket_timeout=2).ping()
    except redis.RedisError:
        _require(False, f"Redis is not answering at {broker}")
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    if db.get("PASSWORD"):
        url = url.replace("@", f":{db['PASSWORD']}@", 1)
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings_test",
        "DATABASE_URL": url,
        "CELERY_BROKER_URL": broker,
        "CELERY_RESULT_BACKEND": broker,
    }


@pytest.mark.postgresql(
    reason="the worker process reads the windows this test committed: a database it can share"
)
def test_collected_windows_become_an_episode_written_by_the_worker(
    world: World, worker_env, tmp_path, monkeypatch
):
    # Given three hours of one idle workload, stored (committed) as the collector writes them
    gang = world.gang(world.workload("idle", 2))
    world.run(gang, range(180), IDLE)
    world.store()
    # and a worker on a queue of its own, which the task is published to
    queue = f"gl-alerts-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(
        evaluate_alerts, "apply_async", partial(evaluate_alerts.apply_async, queue=queue)
    )
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [str(Path(sys.executable).with_name("celery")), "-A", "config", "worker"]
        + ["--pool", "solo", "-Q", queue, "--loglevel", "INFO"]
        + ["--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=BASE_DIR,
        env=worker_env,
        stdout=log,
        stderr=log,
    )
    try:
        # When the collector announces them (outside a transaction: queued at once)
        windows_collected.send(
            sender=None, cluster_id=world.cluster.pk, start=at(0), end=at(180), live=True
        )
        assert not Episode.objects.filter(cluster=world.cluster).exists()
        # Then the worker evaluates them and writes the episode
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            row = AlertEvaluation.objects.filter(cluster=world.cluster).first()
            if row is not None and row.evaluated_until == at(180) and not row.claimed_by:
                break
            time.sleep(0.5)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        log.close()
    episodes = list(Episode.objects.filter(cluster=world.cluster, rule=Rule.IDLE_WORKLOAD))
    assert len(episodes) == 1, (tmp_path / "worker.log").read_text()[-3000:]
    [episode] = episodes
    # Idle from minute 0: warning after 60 min, critical after 120, open at minute 180.
    assert (episode.started_at, episode.fired_at, episode.escalated_at) == (at(0), at(60), at(120))
    assert episode.resolved_at is None and episode.detected_live
    assert AlertEvaluation.objects.get(cluster=world.cluster).pending_start is None
