"""A killed collector or sync no longer blocks the next run for minutes (fleet.leases).

The heartbeat runs on the real clock (a renewal every third of a lease); the tests wait for its
renewals to show in the cursor, then ask the lease what it answers at a given moment
(``acquire(now=...)``) instead of sleeping until that moment comes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.test import override_settings
from django.utils import timezone

from fleet.choices import IngestSource, IngestStatus
from fleet.leases import Lease, holder_identity
from fleet.models import Cluster, CollectionCursor, IngestRun
from tests.databases import child_database_url

ROOT = Path(__file__).resolve().parents[2]
# The shortest lease the settings accept from the environment (the holder process reads it there).
LEASE_SECONDS = 3
TICK = timedelta(milliseconds=100)

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


def lease_end(cluster: Cluster, source: str) -> datetime:
    end = CollectionCursor.objects.get(cluster=cluster, source=source).claimed_until
    assert end is not None, "the lease is not held"
    return end


def wait_for_renewal(cluster: Cluster, source: str, after: datetime) -> datetime:
    """The lease's end once a heartbeat has moved it past ``after``."""
    deadline = time.monotonic() + 2 * LEASE_SECONDS
    while time.monotonic() < deadline:
        end = lease_end(cluster, source)
        if end > after:
            return end
        time.sleep(0.05)
    raise AssertionError(f"the lease was not renewed within {2 * LEASE_SECONDS} s")


@pytest.mark.django_db(transaction=True)
@override_settings(GPULEDGER_LEASE_SECONDS=LEASE_SECONDS, GPULEDGER_LEASE_HEARTBEAT=True)
def test_a_live_holder_keeps_its_lease_past_its_length_and_a_busy_claim_names_it():
    cluster = Cluster.objects.create(name="leased")
    holder = Lease(cluster, IngestSource.DCGM, holder_identity("collect"))
    assert holder.acquire()
    try:
        first_end = lease_end(cluster, IngestSource.DCGM)
        renewed = wait_for_renewal(cluster, IngestSource.DCGM, first_end)
        renewed = wait_for_renewal(cluster, IngestSource.DCGM, renewed)
        other = Lease(cluster, IngestSource.DCGM, "collect@elsewhere:2:def")

        # Past the lease's first length, only the heartbeat's renewals keep it.
        assert renewed > first_end + TICK
        assert not other.acquire(now=first_end + TICK)
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
        "DATABASE_URL": child_database_url(),
        "GPULEDGER_LEASE_SECONDS": str(LEASE_SECONDS),
        "GPULEDGER_LEASE_HEARTBEAT": "true",
    }
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    rerun = Lease(cluster, IngestSource.KUEUE, holder_identity("sync"))
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "held"
        first_end = lease_end(cluster, IngestSource.KUEUE)
        wait_for_renewal(cluster, IngestSource.KUEUE, first_end)
        assert not rerun.acquire(now=first_end + TICK)  # the holder is alive and renewing

        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        killed_at = timezone.now()
    finally:
        if process.poll() is None:
            process.kill()

    # Nobody renews it any more: it runs out within one lease of the kill, and not before.
    last_end = lease_end(cluster, IngestSource.KUEUE)
    assert last_end <= killed_at + timedelta(seconds=LEASE_SECONDS)
    assert not rerun.acquire(now=last_end - TICK)
    assert rerun.acquire(now=last_end + TICK)
    rerun.release()
    assert IngestRun.objects.get(cluster=cluster).status == IngestStatus.FAILED
    assert "Abandoned" in IngestRun.objects.get(cluster=cluster).error
    assert CollectionCursor.objects.get(cluster=cluster, source=IngestSource.KUEUE).claimed_by == ""
