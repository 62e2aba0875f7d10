"""A killed collector or sync no longer blocks the next run for minutes (fleet.leases)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection
from django.test import override_settings

from fleet.choices import IngestSource, IngestStatus
from fleet.leases import Lease, holder_identity
from fleet.models import Cluster, CollectionCursor, IngestRun

ROOT = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 3

HOLDER = """
import django, sys, time
django.setup()
from django.utils import timezone
from fleet.leases import Lease
from fleet.models import Cluster, IngestRun
cluster = Cluster.objects.get(name="leased")
lease = Lease(cluster, "kueue", "sync@doomed:1:abc")
assert lease.acquire()
IngestRun.objects.create(
    cluster=cluster, source="kueue", status="running", started_at=timezone.now()
)
print("held", flush=True)
time.sleep(600)
"""


def database_url() -> str:
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{settings['NAME']}"
    user = settings["USER"] or "postgres"
    host = settings["HOST"] or "127.0.0.1"
    return f"postgres://{user}@{host}:{settings['PORT'] or 5432}/{settings['NAME']}"


@pytest.mark.django_db(transaction=True)
@override_settings(GPULEDGER_LEASE_SECONDS=LEASE_SECONDS, GPULEDGER_LEASE_HEARTBEAT=True)
def test_a_live_holder_keeps_its_lease_past_its_length_and_a_busy_claim_names_it():
    cluster = Cluster.objects.create(name="leased")
    holder = Lease(cluster, IngestSource.DCGM, holder_identity("collect"))
    assert holder.acquire()
    try:
        time.sleep(LEASE_SECONDS * 1.7)  # past one lease length: only the heartbeat keeps it
        other = Lease(cluster, IngestSource.DCGM, "collect@elsewhere:2:def")

        assert not other.acquire()
        message = other.busy_message("collected")
        assert holder.holder in message
        assert "whose lease runs until" in message
    finally:
        holder.release()

    assert other.acquire()
    other.release()


@pytest.mark.django_db(transaction=True)
@override_settings(GPULEDGER_LEASE_SECONDS=LEASE_SECONDS, GPULEDGER_LEASE_HEARTBEAT=True)
def test_a_killed_holder_is_taken_over_within_one_lease_and_its_run_ends_as_failed():
    cluster = Cluster.objects.create(name="leased")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings_test",
        "DATABASE_URL": database_url(),
        "GPULEDGER_LEASE_SECONDS": str(LEASE_SECONDS),
        "GPULEDGER_LEASE_HEARTBEAT": "true",
    }
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "held"
        time.sleep(LEASE_SECONDS * 1.7)
        rerun = Lease(cluster, IngestSource.KUEUE, holder_identity("sync"))
        assert not rerun.acquire()  # the holder is alive and renewing

        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        killed_at = time.monotonic()
        while not rerun.acquire():
            assert time.monotonic() - killed_at < LEASE_SECONDS + 2, "lease never expired"
            time.sleep(0.2)
    finally:
        if process.poll() is None:
            process.kill()

    rerun.release()
    assert IngestRun.objects.get(cluster=cluster).status == IngestStatus.FAILED
    assert "Abandoned" in IngestRun.objects.get(cluster=cluster).error
    assert CollectionCursor.objects.get(cluster=cluster, source=IngestSource.KUEUE).claimed_by == ""
