"""Page reads from a read replica (core/dbrouter.py), against a second real database standing in
for the replica: a copy of the migrated test database with content of its own, so every answer
tells which database served it. PostgreSQL: a database made from the test database as a
template; SQLite: a second file."""

from __future__ import annotations

import copy
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, connections, router, transaction
from django.test import RequestFactory
from rest_framework.test import APIClient

from core.dbrouter import (
    PIN_COOKIE,
    REPLICA,
    ReplicaReadsMiddleware,
    ReplicaRouter,
    is_write,
    pinned,
    request_reads,
)
from fleet.models import Cluster
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from quotas.models import ApiToken, QuotaChange

ROOT = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"
# A complete hour inside the last 24 hours.
HOUR = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)


def _copy_database(primary: Any) -> dict[str, Any]:
    """A new database holding what the test database holds now (its migrated schema)."""
    config = copy.deepcopy(primary.settings_dict)
    if primary.vendor == "postgresql":
        config["NAME"] = f"{primary.settings_dict['NAME']}_replica"
        template = primary.settings_dict["NAME"]
        primary.close()  # a template database must have no other session
        with primary._nodb_cursor() as cursor:
            # Earlier modules of this worker may leave an idle connection of a finished thread
            # (a live server's, a pool's) open on the test database; none is in use now.
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                [template],
            )
            cursor.execute(f'DROP DATABASE IF EXISTS "{config["NAME"]}"')
            cursor.execute(f'CREATE DATABASE "{config["NAME"]}" TEMPLATE "{template}"')
    else:
        config["NAME"] = f"{primary.settings_dict['NAME']}.replica"
        source = sqlite3.connect(primary.settings_dict["NAME"])
        target = sqlite3.connect(config["NAME"])
        with target:
            source.backup(target)
        source.close()
        target.close()
    return config


def _drop_database(primary: Any, config: dict[str, Any]) -> None:
    if primary.vendor == "postgresql":
        with primary._nodb_cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{config["NAME"]}"')
    else:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{config['NAME']}{suffix}").unlink(missing_ok=True)


@pytest.fixture(scope="module")
def replica_database(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    """The ``replica`` database, registered as DATABASE_REPLICA_URL would: a copy of the
    migrated test database, made before any test writes to it."""
    with django_db_blocker.unblock():
        primary = connections[DEFAULT_DB_ALIAS]
        config = _copy_database(primary)
        connections.settings[REPLICA] = config
        try:
            yield REPLICA
        finally:
            connections[REPLICA].close()
            del connections.settings[REPLICA]
            if hasattr(connections._connections, REPLICA):
                delattr(connections._connections, REPLICA)
            _drop_database(primary, config)


# The tests write to both databases and commit (a replica sees only what was committed).
ON_BOTH = pytest.mark.django_db(transaction=True, databases=[DEFAULT_DB_ALIAS, REPLICA])


@pytest.fixture
def replica(replica_database: str, settings: Any) -> Iterator[str]:
    """The replica holding one cluster the primary does not have, and nothing else of ours
    (the test database's flush leaves the replica alone: no migration runs there)."""
    Cluster.objects.using(REPLICA).all().delete()
    cluster = Cluster.objects.using(REPLICA).create(name="only-on-the-replica")
    HourlyRollup.objects.using(REPLICA).create(
        cluster=cluster, scope=RollupScope.FLEET, key="", hour=HOUR, capacity_gpu_hours=77.0
    )
    settings.GPULEDGER_REPLICA_PIN_SECONDS = 30
    cache.clear()
    yield REPLICA
    Cluster.objects.using(REPLICA).all().delete()


@pytest.fixture
def quota_admin() -> User:
    user = User.objects.create_user("quota-admin", is_staff=True, is_superuser=True)
    user.user_permissions.add(Permission.objects.get(codename="apply_quota_change"))
    return user


def signed_in(user: User) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def quota_change(reason: str) -> dict[str, Any]:
    return {
        "cluster": "gpu-east",
        "cluster_queue": "team-a",
        "changes": [{"flavor": "h100", "resource": GPU, "nominal": "12"}],
        "reason": reason,
    }


def cluster_names(client: APIClient) -> list[str]:
    answer = client.get("/api/v1/clusters/")
    assert answer.status_code == 200, answer.content[:300]
    return [row["name"] for row in answer.json()["results"]]


def plotted_capacity(client: APIClient) -> list[float]:
    """The capacity chart's plotted values (the chart JSON behind the overview)."""
    answer = client.get("/fleet/charts/capacity.json", {"range": "24h"})
    assert answer.status_code == 200, answer.content[:300]
    trace = next(trace for trace in answer.json()["data"] if trace["name"] == "Capacity")
    return [y for y in trace["y"] if y is not None]


def change_reasons(client: APIClient) -> list[str]:
    answer = client.get("/api/v1/quota-changes/")
    assert answer.status_code == 200, answer.content[:300]
    return [row["reason"] for row in answer.json()["results"]]


@ON_BOTH
def test_pages_read_the_replica_and_a_client_that_wrote_reads_its_own_writes(
    replica, quota_admin, gpu_east, kube
) -> None:
    # given the primary with cluster gpu-east and the replica with only its own cluster, each
    # with a fleet rollup of its own for the same hour
    HourlyRollup.objects.create(
        cluster=gpu_east, scope=RollupScope.FLEET, key="", hour=HOUR, capacity_gpu_hours=11.0
    )
    assert sorted(Cluster.objects.using("default").values_list("name", flat=True)) == ["gpu-east"]
    reader = signed_in(quota_admin)

    # then the read-only API and the pages read the replica
    assert cluster_names(reader) == ["only-on-the-replica"]
    page = reader.get("/quota-changes/")
    assert page.status_code == 200
    assert PIN_COOKIE not in page.cookies

    assert plotted_capacity(reader) == [77.0]

    # but the admin and a form that edits what it shows read the primary
    admin = reader.get("/admin/fleet/cluster/")
    assert b"gpu-east" in admin.content and b"only-on-the-replica" not in admin.content
    assert reader.get("/queues/gpu-east/team-a/quota/").status_code == 200

    # when a client edits a quota (a dry run: a QuotaChange row on the primary)
    writer = signed_in(quota_admin)
    answer = writer.post("/api/v1/quota-changes/", quota_change("grow team-a"), format="json")
    assert answer.status_code == 201, answer.content[:500]
    assert PIN_COOKIE in answer.cookies
    assert QuotaChange.objects.using("default").filter(reason="grow team-a").exists()
    assert not QuotaChange.objects.using(REPLICA).exists()

    # then that client reads the primary while pinned: its own change is there, pages too
    assert change_reasons(writer) == ["grow team-a"]
    assert cluster_names(writer) == ["gpu-east"]
    assert plotted_capacity(writer) == [11.0]
    assert b"grow team-a" in writer.get("/quota-changes/").content
    # another client, never pinned, reads the replica, where the change has not arrived
    assert change_reasons(reader) == []
    assert b"grow team-a" not in reader.get("/quota-changes/").content
    # and once the pin has run out the writer is back on the replica
    writer.cookies[PIN_COOKIE] = "1"
    assert cluster_names(writer) == ["only-on-the-replica"]


@ON_BOTH
def test_an_api_client_that_wrote_is_pinned_by_its_authorization_header(replica) -> None:
    factory = RequestFactory()
    wrote = factory.post("/api/v1/x/", HTTP_AUTHORIZATION="Token abc")
    same = factory.get("/api/v1/x/", HTTP_AUTHORIZATION="Token abc")
    other = factory.get("/api/v1/x/", HTTP_AUTHORIZATION="Token xyz")

    def view(request: Any) -> Any:
        from django.http import HttpResponse

        if request.method == "POST":
            Cluster.objects.create(name="written")
        return HttpResponse(",".join(Cluster.objects.values_list("name", flat=True)))

    middleware = ReplicaReadsMiddleware(view)
    assert middleware(same).content == b"only-on-the-replica"
    assert not pinned(same)
    response = middleware(wrote)
    # after its write, the request itself reads the primary
    assert response.content == b"written"
    assert pinned(same) and not pinned(other)
    assert middleware(same).content == b"written"
    assert middleware(other).content == b"only-on-the-replica"


@ON_BOTH
def test_transactions_accounts_and_writes_stay_on_the_primary(replica) -> None:
    routing = ReplicaRouter()
    with request_reads(replica=True) as reads:
        assert routing.db_for_read(Cluster) == REPLICA
        assert routing.db_for_read(User) == "default"  # who is signed in, at once
        assert routing.db_for_read(ApiToken) == "default"  # a revoked token, at once
        assert routing.db_for_write(Cluster) == "default"
        with transaction.atomic():
            assert routing.db_for_read(Cluster) == "default"
            assert Cluster.objects.count() == 0  # the primary's (empty) table
        assert Cluster.objects.count() == 1  # the replica's
        reads.wrote = True
        assert routing.db_for_read(Cluster) == "default"
    with request_reads(replica=False):
        assert routing.db_for_read(Cluster) == "default"
    # outside a request (Celery tasks, commands): the primary
    assert routing.db_for_read(Cluster) == "default"
    assert router.allow_migrate("default", "ledger") is True
    assert router.allow_migrate(REPLICA, "ledger") is False


def test_without_a_replica_the_router_has_no_opinion(db) -> None:
    routing = ReplicaRouter()
    with request_reads(replica=True):
        assert routing.db_for_read(Cluster) is None
        assert routing.db_for_write(Cluster) is None
        assert routing.allow_relation(object(), object()) is None
    answer = ReplicaReadsMiddleware(lambda request: request)(RequestFactory().get("/"))
    assert answer is not None


@pytest.mark.parametrize(
    ("sql", "writes"),
    [
        ('INSERT INTO "t" VALUES (1)', True),
        ('  update "t" SET a = 1', True),
        ('DELETE FROM "t"', True),
        ('SELECT * FROM "t" WHERE id = 1 FOR UPDATE', True),
        ('WITH gone AS (DELETE FROM "t" RETURNING id) SELECT count(*) FROM gone', True),
        ('WITH recent AS (SELECT * FROM "t") SELECT * FROM recent', False),
        ('SELECT * FROM "t"', False),
        ("SAVEPOINT s1", False),
    ],
)
def test_what_counts_as_a_write(sql: str, writes: bool) -> None:
    assert is_write(sql) is writes


PROBE = (
    "import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'config.settings'; "
    "from django.conf import settings as s; "
    "print(sorted(s.DATABASES), s.DATABASES.get('replica', {}).get('NAME'), "
    "s.DATABASES.get('replica', {}).get('TEST'))"
)


def load_settings(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_REPLICA_URL", "DJANGO_SETTINGS_MODULE"}
    }
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={**clean, "DEBUG": "true", "DATABASE_URL": "postgres://u@127.0.0.1/main", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_database_replica_url_adds_the_replica_database() -> None:
    assert load_settings().stdout.split() == ["['default']", "None", "None"]
    added = load_settings(DATABASE_REPLICA_URL="postgres://u@127.0.0.2/main")
    assert added.returncode == 0, added.stderr
    assert added.stdout.split("] ")[0] == "['default', 'replica'"
    assert "main {'MIRROR': 'default'}" in added.stdout
    other_engine = load_settings(DATABASE_REPLICA_URL="sqlite:///replica.sqlite3")
    assert other_engine.returncode != 0
    assert "DATABASE_REPLICA_URL must be a replica of DATABASE_URL" in other_engine.stderr
