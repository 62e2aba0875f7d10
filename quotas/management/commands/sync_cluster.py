"""Run one Kueue sync of a cluster (cron users, debugging, tests)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fleet.choices import IngestStatus
from fleet.models import Cluster, ClusterChoiceError
from quotas.kueue import KubeError
from quotas.sync import SyncBusy, sync_cluster


class Command(BaseCommand):
    help = (
        "LIST the cluster's Kueue objects, GPU pods and nodes, write them, and optionally WATCH "
        "for changes for a while. Exits non-zero when the sync failed."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--cluster",
            help="Cluster name (Cluster.name); required when there are several. Default: the "
            "only cluster, or the one KUBECONFIG / PROMETHEUS_URL describe.",
        )
        parser.add_argument(
            "--watch",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="After the LIST, watch for changes this long (default: no watch).",
        )
        parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG).")
        parser.add_argument("--context", help="kubeconfig context (default: the cluster's).")
        parser.add_argument(
            "--create",
            action="store_true",
            help="Create the cluster row when it does not exist yet.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["cluster"]
        if options["watch"] < 0:
            raise CommandError("--watch must be zero or more seconds")
        if not name:
            try:
                name = Cluster.objects.unnamed().name
            except ClusterChoiceError as exc:
                raise CommandError(str(exc)) from exc
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            if not options["create"]:
                raise CommandError(f"no cluster named {name!r} (add --create to create it)")
            cluster = Cluster.objects.create(name=name, kube_context=options["context"] or "")
            self.stdout.write(f"created cluster {name}")
        try:
            run = sync_cluster(
                cluster.pk,
                watch_seconds=options["watch"],
                kubeconfig=options["kubeconfig"],
                context=options["context"],
            )
        except SyncBusy as exc:
            raise CommandError(str(exc)) from exc
        except KubeError as exc:
            kind = "permanent" if exc.permanent else "transient"
            raise CommandError(f"sync of {name} failed ({kind}): {exc.message}") from exc
        summary = (
            f"{name}: {run.status}; read {run.records_read}, wrote {run.rows_written}, "
            f"skipped {run.skipped}"
        )
        if run.skip_reasons:
            reasons = ", ".join(f"{k}={v}" for k, v in sorted(run.skip_reasons.items()))
            summary += f" ({reasons})"
        if run.error:
            summary += f"\n{run.error}"
        if run.status == IngestStatus.FAILED:
            raise CommandError(summary)
        self.stdout.write(summary)
