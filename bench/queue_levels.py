"""Benchmark: the queue service-level API for a month of 1,000 ClusterQueues x 50,000 workloads.

    .venv/bin/python bench/queue_levels.py [--small] [--database-url URL] [--reset] [--requests 20]

PostgreSQL (default postgres://postgres@127.0.0.1:5432/gpuledger_bench_queue_levels, created
when missing) holds one cluster, 100 teams, 1,000 ClusterQueues in 50 cohorts (one LocalQueue
each), and 30 days of admission records: 50,000 workloads queued at random moments, waiting
seconds to hours (a heavy tail), one in eight evicted (mostly preempted by a queue of the same
cohort) and admitted again, and about one in fifty still pending at the end. Rows go in with COPY
and are kept between runs (``--reset`` rebuilds them).

Each URL is requested ``--requests`` times through the Django stack (test client, signed in as
staff, and as one team's lead), after one warm-up request; p50 / p95 are wall time inside
``Client.get`` (view, queries, JSON or CSV rendered). Target: p95 <= 300 ms for the
month by day.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pages as base  # noqa: E402  (bench/pages.py: the environment, database and timing helpers)

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/gpuledger_bench_queue_levels"
END = datetime(2026, 11, 1, tzinfo=UTC)
DAYS = 30
FULL = {"teams": 100, "queues": 1000, "cohorts": 50, "workloads": 50_000}
SMALL = {"teams": 4, "queues": 20, "cohorts": 2, "workloads": 1000}
EVICTED_ONE_IN = 8
PENDING_ONE_IN = 50
REASONS = ["InCohortReclamation", "InClusterQueue", "InCohortFairSharing"]


def generate(scale: dict[str, int], seed: int = 7) -> int:
    """Teams, queues and admission records; the number of records written."""
    from django.db import transaction

    from fleet.models import Cluster
    from quotas.models import ClusterQueue, LocalQueue, Team
    from servicelevels.models import AdmissionRecord

    rng = random.Random(seed)
    with transaction.atomic():
        cluster = Cluster.objects.create(name="bench", display_name="Queue levels bench")
        teams = Team.objects.bulk_create(
            [Team(name=f"team-{t:03d}") for t in range(scale["teams"])]
        )
        queues = ClusterQueue.objects.bulk_create(
            [
                ClusterQueue(
                    cluster=cluster,
                    name=f"cq-{q:04d}",
                    team=teams[q % len(teams)],
                    cohort_name=f"cohort-{q % scale['cohorts']:02d}",
                )
                for q in range(scale["queues"])
            ]
        )
        locals_ = LocalQueue.objects.bulk_create(
            [
                LocalQueue(
                    cluster=cluster,
                    namespace=f"ns-{queue.team_id}",
                    name=f"lq-{queue.name}",
                    cluster_queue=queue,
                    cluster_queue_name=queue.name,
                )
                for queue in queues
            ]
        )
        by_cohort: dict[str, list[Any]] = {}
        for queue in queues:
            by_cohort.setdefault(queue.cohort_name, []).append(queue)
        written = base.copy_rows(
            AdmissionRecord, _records(scale, cluster, queues, locals_, by_cohort, rng)
        )
    return written


def _records(
    scale: dict[str, int],
    cluster: Any,
    queues: list[Any],
    locals_: list[Any],
    by_cohort: dict[str, list[Any]],
    rng: random.Random,
) -> Any:
    start = END - timedelta(days=DAYS)
    span = DAYS * 86400
    for w in range(scale["workloads"]):
        index = rng.randrange(len(queues))
        queue, local = queues[index], locals_[index]
        queued = start + timedelta(seconds=rng.uniform(0, span))
        wait = rng.lognormvariate(5.5, 1.6)  # median ~4 min, a tail of hours
        common = {
            "cluster_id": cluster.pk,
            "workload_uid": f"uid-{w}",
            "namespace": local.namespace,
            "workload_name": f"job-{w}",
            "cluster_queue_id": queue.pk,
            "cluster_queue_name": queue.name,
            "local_queue_id": local.pk,
            "local_queue_name": local.name,
            "team_id": queue.team_id,
            "cohort_name": queue.cohort_name,
            "priority_class_name": rng.choice(["low", "normal", "high"]),
            "gpus": float(rng.choice([1, 2, 4, 8, 8, 16])),
            "source": "live",
        }
        if rng.randrange(PENDING_ONE_IN) == 0 and queued > END - timedelta(days=2):
            yield {**common, "attempt": 1, "queued_at": queued}
            continue
        admitted = queued + timedelta(seconds=wait)
        running = admitted + timedelta(seconds=rng.uniform(5, 300))
        first = {
            **common,
            "attempt": 1,
            "queued_at": queued,
            "quota_reserved_at": admitted,
            "admitted_at": admitted,
            "running_at": running,
        }
        if rng.randrange(EVICTED_ONE_IN):
            yield first
            continue
        evicted = running + timedelta(seconds=rng.uniform(600, 6 * 3600))
        preemptor = rng.choice(by_cohort[queue.cohort_name])
        preempted = rng.random() < 0.8
        yield {
            **first,
            "evicted_at": evicted,
            "eviction_reason": "Preempted" if preempted else "PodsReadyTimeout",
            "preemption_reason": rng.choice(REASONS) if preempted else "",
            "preempting_cluster_queue_name": preemptor.name if preempted else "",
            "preempted_by_path": f"ns-{preemptor.team_id}/job-x{w}" if preempted else "",
        }
        again = evicted + timedelta(seconds=rng.lognormvariate(6.0, 1.2))
        yield {
            **common,
            "attempt": 2,
            "queued_at": evicted,
            "quota_reserved_at": again,
            "admitted_at": again,
            "running_at": again + timedelta(seconds=rng.uniform(5, 120)),
        }


def urls(small: bool) -> list[tuple[str, str]]:
    window = f"start={END - timedelta(days=DAYS):%Y-%m-%dT%H:%M:%SZ}&end={END:%Y-%m-%dT%H:%M:%SZ}"
    day = f"start={END - timedelta(days=1):%Y-%m-%dT%H:%M:%SZ}&end={END:%Y-%m-%dT%H:%M:%SZ}"
    levels = "/api/v1/queue-levels/"
    out = [
        (f"30d by day, {group}", f"{levels}?{window}&group_by={group}&step=day")
        for group in ("cluster_queue", "local_queue", "cohort", "team", "priority_class")
    ]
    out += [
        ("30d by day, page 16", f"{levels}?{window}&group_by=cluster_queue&step=day&offset=15000"),
        (
            "30d by day, local_queue p30",
            f"{levels}?{window}&group_by=local_queue&step=day&offset=29000",
        ),
        ("30d by day, cohort p2", f"{levels}?{window}&group_by=cohort&step=day&offset=1000"),
        ("30d by day, team p3", f"{levels}?{window}&group_by=team&step=day&offset=2000"),
        ("30d whole, cluster_queue", f"{levels}?{window}&group_by=cluster_queue"),
        ("30d by day, csv", f"{levels}?{window}&group_by=cluster_queue&step=day&format=csv"),
        ("1d by hour, cluster_queue", f"{levels}?{day}&group_by=cluster_queue&step=hour"),
        ("admissions 30d, page 1", f"/api/v1/admissions/?{window}&limit=100"),
        ("admissions 30d, one queue", f"/api/v1/admissions/?{window}&cluster_queue=cq-0007"),
    ]
    return out


def consume(response: Any) -> None:
    """Read a streamed body to its end, so its rendering is timed too."""
    if getattr(response, "streaming", False):
        for _ in response.streaming_content:
            pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--reset", action="store_true", help="drop and regenerate the data")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--small", action="store_true", help="20 queues x 1,000 workloads")
    options = parser.parse_args()
    scale = SMALL if options.small else FULL
    requests = 3 if options.small else options.requests

    base.prepare_environment(options.database_url)
    base.create_database(options.database_url, drop=options.reset)
    base.setup_django()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from quotas.models import Team
    from servicelevels.models import AdmissionRecord

    call_command("migrate", verbosity=0, interactive=False)
    if not AdmissionRecord.objects.exists():
        started = time.perf_counter()
        written = generate(scale)
        print(f"generated {written:,} admission records in {time.perf_counter() - started:.1f} s")
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    records = AdmissionRecord.objects.count()
    queues = len(set(AdmissionRecord.objects.values_list("cluster_queue_id", flat=True)))
    print(f"{records:,} admission records, {queues:,} ClusterQueues, {DAYS} days")

    users = get_user_model()
    staff = users.objects.filter(username="bench-staff").first() or users.objects.create_user(
        "bench-staff", password="x", is_staff=True
    )
    lead = users.objects.filter(username="bench-lead").first()
    if lead is None:
        lead = users.objects.create_user("bench-lead", password="x")
        Team.objects.order_by("name").first().leads.add(lead)  # type: ignore[union-attr]
    failures = slow = 0
    for who, user in (("staff", staff), ("lead", lead)):
        client = Client()
        client.force_login(user)
        print(f"\n{who:28} {'p50 ms':>8} {'p95 ms':>8}")
        for label, path in urls(options.small):
            if who == "lead" and "by day" not in label:
                continue
            _, p95, status = base.time_requests(
                _Consuming(client), f"{label}", path, requests, width=28
            )
            failures += status != 200
            slow += p95 > base.TARGET_P95_MS
    client = Client()
    client.force_login(staff)
    started = time.perf_counter()
    path, pages, rows = urls(options.small)[0][1], 0, 0
    while path:
        body = client.get(path).json()
        pages, rows, path = pages + 1, rows + len(body["rows"]), body["next"]
    print(
        f"\nall pages of 30d by day, cluster_queue: {rows:,} rows in {pages} pages, "
        f"{time.perf_counter() - started:.2f} s"
    )
    print(
        f"\n{len(urls(options.small))} URLs, {slow} above p95 {base.TARGET_P95_MS:.0f} ms, "
        f"{failures} not 200"
    )
    return 1 if failures else 0


class _Consuming:
    """A test client whose GET reads streamed bodies to the end (CSV is timed whole)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def get(self, path: str) -> Any:
        response = self.client.get(path)
        consume(response)
        return response


if __name__ == "__main__":
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    sys.exit(main())
