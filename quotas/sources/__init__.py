"""Quota sources: which scheduler's queues a cluster's quota sync reads, and the client that
serves the sync Kueue's kinds whatever the source (docs/architecture.md "Quota sources").

The sync (``quotas.sync``), ingest, store and read layer know Kueue's objects only. For another
source the translation happens at the client boundary: ``SourceClient`` is a ``KueueClient``
whose ``list_objects`` and ``watch`` of the product's kinds read the source's own kinds and hand
back Kueue-shaped (v1beta2) objects (``quotas.sources.volcano``), so a complete LIST, a failed
one and a ``410 Gone`` mean what they mean for Kueue: nothing of a kind whose LIST failed is
marked deleted.

* ``detect_source``: ``Cluster.quota_source`` when set, else from discovery: Kueue's group
  served -> kueue, else ``scheduling.volcano.sh`` -> volcano, else kueue (its kinds then count as
  not served, as before).
* Volcano: Cohort and ClusterQueue from ``queues``, Workload from ``podgroups``; Pods and Nodes as
  for Kueue; ResourceFlavor, LocalQueue and WorkloadPriorityClass are not served (404
  ``NotServed``: known empty, nothing to delete). Which queues are Cohorts depends on the whole
  queue list, so a queue event that would turn a Cohort into a ClusterQueue or back ends that
  WATCH with ``ResourceExpired``: the sync relists the kind and turns the difference into changes
  (``quotas.sync.listing.Lister.relist_kind``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from core.deadlines import Deadline
from fleet.choices import QuotaSource
from quotas.constants import KUEUE_GROUP
from quotas.kueue import Discovery, KubeError, KueueClient, ListResult, ResourceExpired, WatchEvent
from quotas.sources import volcano

if TYPE_CHECKING:
    from fleet.models import Cluster

logger = logging.getLogger(__name__)

# The product's kinds a Volcano cluster serves from its own kinds.
VOLCANO_QUEUE_KINDS = frozenset({"Cohort", "ClusterQueue"})
VOLCANO_UNSERVED = frozenset({"ResourceFlavor", "LocalQueue", "WorkloadPriorityClass"})
# Sources read so far; the others are known choices without a reader yet.
READ_SOURCES = frozenset({QuotaSource.KUEUE, QuotaSource.VOLCANO})


def detect_source(discovery: Discovery, configured: str = "") -> str:
    """The cluster's quota source: ``configured`` when set, else what discovery shows."""
    if configured:
        return configured
    if discovery.group_versions(KUEUE_GROUP):
        return QuotaSource.KUEUE
    if discovery.group_versions(volcano.VOLCANO_GROUP):
        return QuotaSource.VOLCANO
    return QuotaSource.KUEUE


def _pod_group_key(pod_group: dict[str, Any]) -> tuple[str, str]:
    meta = pod_group.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _not_served(what: str) -> KubeError:
    return KubeError(f"{what}: not served by this API server", 404, True, reason="NotServed")


class SourceClient(KueueClient):
    """A ``KueueClient`` that serves the product's kinds from the cluster's quota source."""

    def __init__(self, *args: Any, source: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.configured_source = source
        self.expects_kueue = source == QuotaSource.KUEUE
        self._source: str | None = source or None
        # Per product kind: the Volcano queues as of the last LIST or event the sync saw.
        self._queues: dict[str, dict[str, dict[str, Any]]] = {}
        self._queues_lock = threading.Lock()
        # Per PodGroup (namespace, name) that is Inqueue: (its queue, the GPUs it reserves), as
        # of the last PodGroup LIST or event; a ClusterQueue's usage counts them.
        self._reservations: dict[tuple[str, str], tuple[str, Decimal]] = {}
        # The PodGroup LIST a ClusterQueue LIST made, for this sync's Workload LIST to use.
        self._pod_groups: ListResult | None = None
        # Per product kind: the reservations its objects were last translated with.
        self._translated_with: dict[str, dict[str, Decimal]] = {}

    @classmethod
    def for_cluster(cls, cluster: Cluster, **kwargs: Any) -> SourceClient:
        """``KueueClient.for_cluster``, reading ``cluster.quota_source``."""
        client = super().for_cluster(cluster, **kwargs)
        assert isinstance(client, SourceClient)  # noqa: S101 - cls is SourceClient
        client.configured_source = cluster.quota_source
        client.expects_kueue = cluster.quota_source == QuotaSource.KUEUE
        client._source = cluster.quota_source or None
        return client

    # --- the source --------------------------------------------------------------------------
    def discover(self, refresh: bool = False, *, deadline: Deadline | None = None) -> Discovery:
        discovery = super().discover(refresh, deadline=deadline)
        source = detect_source(discovery, self.configured_source)
        if source != self._source:
            logger.info("cluster %s: quota source %s", self.name, source)
        if source not in READ_SOURCES:
            raise KubeError(
                f"cluster {self.name}: quota source {source} is not read yet", None, True
            )
        if source == QuotaSource.KUEUE and not discovery.kueue_version:
            logger.warning("cluster %s serves neither Kueue nor Volcano", self.name)
        self._source = source
        return discovery

    def source(self, deadline: Deadline | None = None) -> str:
        """The cluster's quota source (discovers once when it is to be detected)."""
        if self._source is None:
            self.discover(deadline=deadline)
        return self._source or QuotaSource.KUEUE

    @property
    def scheduler(self) -> str:
        """The source as rows name it (``scheduler``), once known."""
        return self._source or QuotaSource.KUEUE

    def _volcano_version(self, deadline: Deadline | None) -> str:
        served = self.discover(deadline=deadline).group_versions(volcano.VOLCANO_GROUP)
        version = next((v for v in volcano.VOLCANO_VERSIONS if v in served), None)
        if version is None:
            raise _not_served(f"{volcano.VOLCANO_GROUP} {'/'.join(volcano.VOLCANO_VERSIONS)}")
        return version

    # --- LIST --------------------------------------------------------------------------------
    def list_objects(self, kind_name: str, *, deadline: Deadline | None = None) -> ListResult:
        if self.source(deadline) != QuotaSource.VOLCANO or kind_name in ("Pod", "Node"):
            return super().list_objects(kind_name, deadline=deadline)
        if kind_name in VOLCANO_UNSERVED:
            raise _not_served(f"{kind_name} (Volcano has none)")
        version = self._volcano_version(deadline)
        if kind_name in VOLCANO_QUEUE_KINDS:
            if kind_name == "ClusterQueue":
                # Their usage counts the Inqueue PodGroups' reservations: list those first.
                self._pod_groups = self._list_pod_groups(version, deadline)
            listed = self.list_kind(volcano.QUEUE, version, deadline=deadline)
            queues = {volcano.name_of(q): q for q in listed.items if volcano.name_of(q)}
            with self._queues_lock:
                self._queues[kind_name] = queues
                reserved = self._translated_with[kind_name] = self._reserved()
            items = list(volcano.queues_as(kind_name, queues.values(), reserved).values())
        elif kind_name == "Workload":
            # The PodGroups the ClusterQueue LIST of this sync read, else a LIST of its own.
            listed = self._pod_groups or self._list_pod_groups(version, deadline)
            self._pod_groups = None
            items = [volcano.pod_group_to_workload(g) for g in listed.items]
        else:
            raise _not_served(kind_name)
        return ListResult(kind_name, items, listed.resource_version, listed.pages, listed.filtered)

    def _list_pod_groups(self, version: str, deadline: Deadline | None) -> ListResult:
        """A complete PodGroup LIST; the reservations become its Inqueue PodGroups'."""
        listed = self.list_kind(volcano.POD_GROUP, version, deadline=deadline)
        reservations = {}
        for group in listed.items:
            found = volcano.reservation(group)
            if found is not None:
                reservations[_pod_group_key(group)] = found
        with self._queues_lock:
            self._reservations = reservations
        return listed

    def _note_reservation(self, event: WatchEvent) -> None:
        """Keep the reservations up to date with a PodGroup event."""
        key = _pod_group_key(event.object)
        found = None if event.type == "DELETED" else volcano.reservation(event.object)
        with self._queues_lock:
            if found is None:
                self._reservations.pop(key, None)
            else:
                self._reservations[key] = found

    def _reserved(self) -> dict[str, Decimal]:
        """Per queue, the GPUs its Inqueue PodGroups reserve (call with the lock held)."""
        return volcano.reserved_gpus(self._reservations.values())

    # --- WATCH -------------------------------------------------------------------------------
    def watch(
        self,
        kind_name: str,
        resource_version: str,
        timeout_seconds: int,
        *,
        stop: threading.Event | None = None,
        deadline: Deadline | None = None,
    ) -> Iterator[WatchEvent]:
        if self.source(deadline) != QuotaSource.VOLCANO or kind_name in ("Pod", "Node"):
            yield from super().watch(
                kind_name, resource_version, timeout_seconds, stop=stop, deadline=deadline
            )
            return
        version = self._volcano_version(deadline)
        if kind_name == "Workload":
            for event in self.watch_kind(
                volcano.POD_GROUP,
                version,
                resource_version,
                timeout_seconds,
                stop=stop,
                deadline=deadline,
            ):
                if event.type in ("BOOKMARK", "INVALID"):
                    yield event
                else:
                    # A queue's usage follows on its next event (Volcano's controller updates
                    # the queue's status counts whenever one of its PodGroups changes phase).
                    self._note_reservation(event)
                    translated = volcano.pod_group_to_workload(event.object)
                    yield WatchEvent(event.type, translated, event.resource_version)
            return
        if kind_name not in VOLCANO_QUEUE_KINDS:
            raise _not_served(f"{kind_name} (Volcano has none)")
        yield from self._watch_queues(
            kind_name, version, resource_version, timeout_seconds, stop, deadline
        )

    def _watch_queues(
        self,
        kind_name: str,
        version: str,
        resource_version: str,
        timeout_seconds: int,
        stop: threading.Event | None,
        deadline: Deadline | None,
    ) -> Iterator[WatchEvent]:
        """Queue events as events of ``kind_name``: every translated object an event changes
        (a child's deserved changes its parent Cohort's own quota); ``ResourceExpired`` when
        the event changes which queues are Cohorts."""
        with self._queues_lock:
            known = self._queues.get(kind_name)
        if known is None:
            raise ResourceExpired(f"{kind_name}: no Volcano queue list to watch from; relist")
        for event in self.watch_kind(
            volcano.QUEUE, version, resource_version, timeout_seconds, stop=stop, deadline=deadline
        ):
            if event.type in ("BOOKMARK", "INVALID"):
                yield event
                continue
            name = volcano.name_of(event.object)
            after = dict(known)
            if event.type == "DELETED":
                after.pop(name, None)
            else:
                after[name] = event.object
            if volcano.parent_names(after.values()) != volcano.parent_names(known.values()):
                raise ResourceExpired(
                    f"Volcano queue {name} changes which queues are parents; relisting {kind_name}"
                )
            with self._queues_lock:
                reserved = self._reserved()
                before = self._translated_with.get(kind_name, reserved)
                old = volcano.queues_as(kind_name, known.values(), before)
                new = volcano.queues_as(kind_name, after.values(), reserved)
                known = after
                self._queues[kind_name] = known
                self._translated_with[kind_name] = reserved
            changed = False
            for key in sorted(old.keys() | new.keys()):
                if old.get(key) == new.get(key):
                    continue
                changed = True
                if key not in new:
                    yield WatchEvent("DELETED", old[key], event.resource_version)
                else:
                    kind = "MODIFIED" if key in old else "ADDED"
                    yield WatchEvent(kind, new[key], event.resource_version)
            if not changed:
                # Nothing of this kind changed: still a resourceVersion to resume from.
                rv = event.resource_version
                yield WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": rv}}, rv)

    # --- what Volcano does not serve here ----------------------------------------------------
    def pending_workloads(
        self, cluster_queue: str, *, deadline: Deadline | None = None
    ) -> list[dict[str, Any]]:
        if self.source(deadline) != QuotaSource.KUEUE:
            raise _not_served("Kueue's visibility API")
        return super().pending_workloads(cluster_queue, deadline=deadline)

    def get_object(
        self, kind_name: str, name: str, *, deadline: Deadline | None = None
    ) -> dict[str, Any]:
        if self.source(deadline) != QuotaSource.KUEUE:
            raise _not_served(f"{kind_name} write-back on a {self.scheduler} cluster")
        return super().get_object(kind_name, name, deadline=deadline)

    def patch_object(
        self,
        kind_name: str,
        name: str,
        body: dict[str, Any],
        *,
        field_manager: str,
        dry_run: bool,
        deadline: Deadline | None = None,
    ) -> dict[str, Any]:
        if self.source(deadline) != QuotaSource.KUEUE:
            raise _not_served(f"{kind_name} write-back on a {self.scheduler} cluster")
        return super().patch_object(
            kind_name, name, body, field_manager=field_manager, dry_run=dry_run, deadline=deadline
        )


__all__ = ["READ_SOURCES", "SourceClient", "detect_source", "volcano"]
