"""Build a realistic simulated fleet through the real ingest code (``make demo``).

Every row is written by the same pure ingest functions and writers the collectors use: the
simulator renders Prometheus answers and Kubernetes LIST payloads, and nothing else writes the
tables.
"""

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from tqdm import tqdm

from alerts.evaluate import evaluate_range
from demo.rates import seed_rate_cards
from demo.simulation import SCRAPE_SECONDS, FleetSimulator
from fleet.choices import IngestSource, IngestStatus
from fleet.constants import DCGM_METRICS
from fleet.ingest import IngestStats, WindowInput, build_window
from fleet.models import Cluster, IngestRun
from ledger.rollup import roll_up_range
from ledger.store import write_window
from quotas.ingest import build_queue_samples, build_snapshot, snapshot_from_lists
from quotas.ingest.metrics import build_metric_samples
from quotas.models import Team
from quotas.store import (
    metric_sample_context,
    write_metric_samples,
    write_queue_samples,
    write_snapshot,
)
from quotas.sync import pending_positions, write_pending_positions


class Command(BaseCommand):
    help = "Simulate a GPU fleet (nodes, Kueue queues, workloads, DCGM telemetry) for N days."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--days", type=float, default=7.0, help="Days of history (default 7).")
        parser.add_argument("--seed", type=int, default=42, help="Random seed (default 42).")
        parser.add_argument(
            "--step",
            type=int,
            default=900,
            help="Simulated collection window in seconds (default 900; the collector uses "
            "GPULEDGER_COLLECT_SECONDS).",
        )
        parser.add_argument("--cluster", default="demo", help="Cluster name (default demo).")
        parser.add_argument(
            "--sync-days",
            type=float,
            default=None,
            help="Days before the end that the API server sync ran (default: half the history). "
            "Earlier windows get their quota history from Kueue's metrics only, as a fresh "
            "install backfilling from Prometheus would.",
        )
        parser.add_argument(
            "--end",
            help="End of the simulated period, ISO 8601 with offset (default: now).",
        )
        parser.add_argument(
            "--reset",
            action="store_true",
            help="Delete the cluster's data (and teams left without queues) first.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        days = options["days"]
        step = options["step"]
        if days <= 0:
            raise CommandError("--days must be positive")
        if step < 60 or 3600 % step:
            raise CommandError("--step must be at least 60 and divide an hour (60, 300, 600…)")
        end = self._parse_end(options["end"])
        if options["reset"]:
            self._reset(options["cluster"])
        cluster, _ = Cluster.objects.get_or_create(
            name=options["cluster"],
            defaults={"display_name": "Simulated fleet"},
        )
        if options["verbosity"] < 2:
            # One progress bar instead of a log line per window and per hour.
            for name in ("fleet", "quotas", "ledger"):
                logging.getLogger(name).setLevel(logging.WARNING)
        sim = FleetSimulator(seed=options["seed"], end=end, days=days, step_seconds=step)
        windows = list(sim.windows())
        run = IngestRun.objects.create(
            cluster=cluster,
            source=IngestSource.SIMULATION,
            started_at=timezone.now(),
            window_start=sim.start,
            window_end=sim.end,
        )
        sync_days = options["sync_days"]
        synced_from = sim.end - timedelta(days=days / 2 if sync_days is None else sync_days)
        # The rate cards first: alert episodes evaluated on the simulated history cost under them.
        cards = seed_rate_cards(sim.start, sim.end)
        stats = IngestStats()
        kube_skipped = 0
        rows = 0
        try:
            for window in tqdm(windows, desc="simulating", unit="window", disable=None):
                sim.advance(window.start)
                snapshot = snapshot_from_lists(window.end, **sim.kube_lists(window.end))
                batch = build_snapshot(snapshot, settings.GPULEDGER_TEAM_LABELS)
                kube_skipped += batch.stats.skipped
                if sim.changed or window is windows[-1]:
                    write_snapshot(cluster, batch, snapshot.complete)
                    sim.changed = False
                # Kueue's metrics for every window, the API server's status once the sync "runs"
                # (it wins where both exist): the backfill path of a fresh install.
                order, pools = metric_sample_context(cluster)
                metric = build_metric_samples(
                    sim.kueue_window(window), flavor_order=order, cohort_quota=pools
                )
                rows += write_metric_samples(cluster, metric.samples, window.end, window.seconds)
                if window.end >= synced_from:
                    rows += write_queue_samples(
                        cluster, build_queue_samples(batch), window.end, window.seconds
                    )
                    # As the sync does after each sample: positions from the visibility API.
                    positions = {}
                    for summary in sim.pending_workloads(window.end).values():
                        positions.update(pending_positions(summary["items"]))
                    rows += write_pending_positions(cluster, positions)
                answers = sim.prometheus_window(window)
                window_batch = build_window(
                    WindowInput(
                        window=window,
                        dcgm_avg={key: answers.get(f"avg:{key}", []) for key in DCGM_METRICS},
                        dcgm_count={key: answers.get(f"count:{key}", []) for key in DCGM_METRICS},
                        gpu_requests=answers["gpu_requests"],
                        pod_labels=answers["pod_labels"],
                        expected_samples=window.seconds // SCRAPE_SECONDS,
                    )
                )
                stats.merge(window_batch.stats)
                rows += write_window(cluster, window_batch).rows_written
            rows += roll_up_range(cluster.id, sim.start, sim.end)
            # Evaluated here, as a backfill, not queued for a worker: the demo shows last week's
            # hoarding episodes as soon as it is loaded, with or without a worker running.
            evaluate_range(cluster.id, sim.start, sim.end, live=False)
        except BaseException as exc:
            run.status = IngestStatus.FAILED
            run.error = f"{type(exc).__name__}: {exc}"
            run.finished_at = timezone.now()
            run.save()
            raise
        run.records_read = stats.records_read
        run.rows_written = rows
        run.skipped = stats.skipped + kube_skipped
        run.nonfinite_skipped = stats.nonfinite_skipped
        run.skip_reasons = dict(stats.skip_reasons)
        run.status = IngestStatus.PARTIAL if run.skipped else IngestStatus.SUCCESS
        run.finished_at = timezone.now()
        run.save()
        self.stdout.write(
            self.style.SUCCESS(
                f"Simulated {days:g} days ({len(windows)} windows of {step} s) on cluster "
                f"{cluster.name}: {len(sim.nodes)} nodes, {len(sim.workloads)} workloads, "
                f"{rows} rows written; {cards} demo rate cards (per flavor, one price change)."
            )
        )

    def _parse_end(self, raw: str | None) -> datetime:
        if not raw:
            return timezone.now()
        moment = parse_datetime(raw)
        if moment is None:
            raise CommandError(f"--end {raw!r} is not an ISO 8601 date-time")
        if timezone.is_naive(moment):
            raise CommandError(f"--end {raw!r} has no UTC offset (add Z or +00:00)")
        return moment

    def _reset(self, name: str) -> None:
        with transaction.atomic():
            Cluster.objects.filter(name=name).delete()
            Team.objects.filter(
                Q(cluster_queues__isnull=True) & Q(namespaces__isnull=True)
            ).delete()
        self.stdout.write(f"Reset cluster {name}.")
