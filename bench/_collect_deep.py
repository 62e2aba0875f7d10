"""The deep-backfill mode of bench/collect.py (``--deep``): hours straight into hourly rollups.

A fresh child process deep-backfills the last ``--deep-hours`` hours of the generated fleet
(``ledger.deep.DeepBackfill``, 60 s windows, the default concurrency and shard size) into a fresh
database and reports the wall time and, apart, the CPU of this process (all its threads), of its
PostgreSQL backend and of Prometheus. The extrapolation to 30 days is linear in hours at the
measured fleet size only: it says nothing about a larger fleet.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any


def measure_deep(url: str, database_url: str, hours: int, prometheus_pid: int | None) -> dict:
    """Run in the child: the deep backfill of ``hours`` hours ending at the data's end."""
    from collect import END, CostMeter, peak_rss_mib, setup_django

    setup_django(database_url)
    from django.conf import settings

    from fleet.models import Cluster
    from ledger.deep import DeepBackfill
    from ledger.models import HourlyRollup

    # Queries of a 50,000-GPU hour take longer than a window's: the timeout is the cluster's.
    cluster = Cluster.objects.create(
        name="deep", prometheus_url=url, prometheus_timeout_seconds=600
    )
    start = END - timedelta(hours=hours)
    # GPULEDGER_DEEP_BACKFILL_WORKERS in the environment sets the processes (default: CPUs).
    backfill = DeepBackfill(cluster, window_seconds=60)
    cost, result = CostMeter(prometheus_pid).measure(lambda: backfill.run(start, END))
    return {
        "hours": len(result.hours),  # type: ignore[attr-defined]
        "shards": result.shards,  # type: ignore[attr-defined]
        "rows": HourlyRollup.objects.filter(cluster=cluster).count(),
        "cost": cost.as_dict(),
        "concurrency": settings.GPULEDGER_DEEP_BACKFILL_CONCURRENCY,
        "workers": backfill.workers,
        "peak_rss_mib": peak_rss_mib(),
    }


def report(measured: dict[str, Any], gpus: int) -> None:
    cost = measured["cost"]
    hours = max(measured["hours"], 1)
    load = os.getloadavg()

    def sec(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f} s"

    print(
        f"  deep backfill {gpus:,} GPUs x {measured['hours']} h: {sec(cost['wall'])} wall; CPU: "
        f"process {sec(cost['cpu'])}, PostgreSQL {sec(cost['backend_cpu'])}, Prometheus "
        f"{sec(cost['prometheus_cpu'])}; {measured['rows']:,} rollup rows, {measured['shards']} "
        f"shard(s), {measured['concurrency']} queries in flight, {measured['workers']} worker "
        f"process(es) (PostgreSQL CPU: the first process' backend only), peak RSS "
        f"{measured['peak_rss_mib']:.0f} MiB (the largest process)"
    )
    per_hour = cost["wall"] / hours
    print(
        f"  per hour {per_hour:.2f} s wall; 30 days ({30 * 24} h) at {gpus:,} GPUs extrapolated: "
        f"{per_hour * 30 * 24 / 3600:.2f} h wall ({time.strftime('%H:%M', time.gmtime())} UTC, "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})"
    )
