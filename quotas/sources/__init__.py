"""Quota sources: which scheduler's queues a cluster's quota sync reads, and the client that
serves the sync Kueue's kinds whatever the source (docs/architecture.md "Quota sources").

The sync (``quotas.sync``), ingest, store and read layer know Kueue's objects only. For another
source the translation happens at the client boundary: ``SourceClient`` is a ``KueueClient``
whose ``list_objects`` and ``watch`` of the product's kinds read the source's own kinds and hand
back Kueue-shaped (v1beta2) objects (``quotas.sources.volcano``, ``quotas.sources.kai``), so a
complete LIST, a failed one and a ``410 Gone`` mean what they mean for Kueue: nothing of a kind
whose LIST failed is marked deleted.

* ``detect_source``: ``Cluster.quota_source`` when set, else from discovery: Kueue's group
  served -> kueue, else ``scheduling.volcano.sh`` -> volcano, else ``scheduling.run.ai`` -> kai,
  else resourcequota when some ResourceQuota has a ``requests.nvidia.com/gpu`` line (core
  ResourceQuota is always served, so discovery cannot tell: the client LISTs them), else kueue
  (its kinds then count as not served, as before).
* Volcano and KAI (``SOURCES``, each a ``quotas.sources.common.Source``): Cohort and
  ClusterQueue from ``queues``, Workload from ``podgroups``; Pods and Nodes as for Kueue;
  LocalQueue and WorkloadPriorityClass are not served (404 ``NotServed``: known empty, nothing
  to delete). ResourceFlavor is one constant object for every source but Kueue
  (``common.source_flavor``: the queues' one flavor, holding every GPU node), with a WATCH that
  ends at its timeout without events. Which queues are Cohorts depends on the whole queue
  list, so a queue event that would turn a Cohort into a ClusterQueue or back ends that WATCH with
  ``ResourceExpired``: the sync relists the kind and turns the difference into changes
  (``quotas.sync.listing.Lister.relist_kind``). Any other queue event re-translates only the
  queues it touches (``_touched``). A queue's translation also takes what its
  PodGroups tell it (``Source.group_facts``: Volcano's Inqueue reservations, KAI's workload
  counts): the PodGroups are listed before the queues, that LIST is reused by the Workload LIST
  of the same sync, and PodGroup events keep the facts current.
* ResourceQuota (``quotas.sources.resourcequota``, read by
  ``quotas.sources.resourcequota_client.ResourceQuotaReader``): ClusterQueue from
  ``resourcequotas``, Workload from the GPU pods grouped by owner; Cohort is not served either.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from core.deadlines import Deadline
from fleet.choices import QuotaSource
from quotas.constants import KUEUE_GROUP
from quotas.kueue import Discovery, KubeError, KueueClient, ListResult, ResourceExpired, WatchEvent
from quotas.kueue.payloads import Kind
from quotas.sources import common, kai, resourcequota, volcano
from quotas.sources.common import Source, key_of, name_of
from quotas.sources.resourcequota_client import ResourceQuotaReader

if TYPE_CHECKING:
    from fleet.models import Cluster

logger = logging.getLogger(__name__)

# The product's kinds a Volcano or KAI cluster serves from its queues.
QUEUE_KINDS = frozenset({"Cohort", "ClusterQueue"})
# The sources translated at the client boundary, by QuotaSource, in detection order.
SOURCES: dict[str, Source] = {QuotaSource.VOLCANO: volcano.SOURCE, QuotaSource.KAI: kai.SOURCE}
# Sources read so far; the others are known choices without a reader yet.
READ_SOURCES = frozenset({QuotaSource.KUEUE, QuotaSource.RESOURCEQUOTA, *SOURCES})


def schedulers_served(discovery: Discovery) -> bool:
    """Whether the cluster serves Kueue's, Volcano's or KAI's group."""
    groups = (KUEUE_GROUP, *(source.group for source in SOURCES.values()))
    return any(discovery.group_versions(group) for group in groups)


def detect_source(discovery: Discovery, configured: str = "", gpu_quotas: bool = False) -> str:
    """The cluster's quota source: ``configured`` when set, else what discovery shows; with no
    batch scheduler's group served, resourcequota when ``gpu_quotas`` (some ResourceQuota has
    a ``requests.nvidia.com/gpu`` line), else kueue."""
    if configured:
        return configured
    if discovery.group_versions(KUEUE_GROUP):
        return QuotaSource.KUEUE
    for name, source in SOURCES.items():
        if discovery.group_versions(source.group):
            return name
    return QuotaSource.RESOURCEQUOTA if gpu_quotas else QuotaSource.KUEUE


def _may_reclassify(
    source: Source, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> bool:
    """Whether an event taking a queue from ``before`` to ``after`` (None: absent) may change
    which queues are parents: only one that adds or removes a queue or changes its parent (a
    queue keeping its parent leaves every queue's parent, and so the parents, as they were)."""
    if before is None or after is None:
        return True
    return source.parent_of(before) != source.parent_of(after)


def _touched(
    source: Source,
    name: str,
    known: dict[str, dict[str, Any]],
    after: dict[str, dict[str, Any]],
    before: dict[str, Any],
    summary: dict[str, Any],
) -> set[str]:
    """The queues whose translation an event on queue ``name`` can change, the parents staying
    the same: the queue, its parent before and after (a Cohort's own quota and resourceVersion
    follow its children), and the queues whose PodGroup summary changed since their last
    translation. The others translate as they did, so an event costs what it touches, not a
    translation of every queue (``Source``)."""
    touched = {name}
    for queue in (known.get(name), after.get(name)):
        if queue is not None:
            touched.add(source.parent_of(queue))
    touched.update(q for q in before.keys() | summary.keys() if before.get(q) != summary.get(q))
    touched.discard("")
    return touched


def _not_served(what: str) -> KubeError:
    return KubeError(f"{what}: not served by this API server", 404, True, reason="NotServed")


class SourceClient(KueueClient):
    """A ``KueueClient`` that serves the product's kinds from the cluster's quota source."""

    def __init__(self, *args: Any, source: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.configured_source = source
        self.expects_kueue = source == QuotaSource.KUEUE
        self._source: str | None = source or None
        # Per product kind: the source's queues as of the last LIST or event the sync saw.
        self._queues: dict[str, dict[str, dict[str, Any]]] = {}
        self._queues_lock = threading.Lock()
        # Per PodGroup (namespace, name) that tells its queue something (``Source.group_facts``),
        # as of the last PodGroup LIST or event.
        self._facts: dict[tuple[str, str], Any] = {}
        # The same facts by queue (a fact's first item), their summary, and the queues whose
        # facts changed since it was made (None: all): a queue event summarizes only those
        # (``_summary_now``), not every PodGroup's facts.
        self._facts_by_queue: dict[str, dict[tuple[str, str], Any]] = {}
        self._summary: dict[str, Any] = {}
        self._stale: set[str] | None = None
        # The PodGroup LIST a ClusterQueue LIST made, for this sync's Workload LIST to use.
        self._pod_groups: ListResult | None = None
        # Set once a WATCH starts: the sync's LIST pass is over, and a later relist of one kind
        # (after 410 Gone) must not leave a PodGroup LIST for another kind's relist to reuse.
        self._watching = False
        # Per product kind: the per-queue summary of the facts its objects were last translated
        # with (``Source.summarize``).
        self._translated_with: dict[str, dict[str, Any]] = {}
        # A ResourceQuota cluster's quotas and GPU pods; whether some quota has a GPU line
        # (detection, when no batch scheduler's group is served).
        self._resource_quotas = ResourceQuotaReader(self)
        self._gpu_quotas: bool | None = None

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
        gpu_quotas = False
        if not self.configured_source and not schedulers_served(discovery):
            if refresh or self._gpu_quotas is None:
                self._gpu_quotas = self._has_gpu_quotas(deadline)
            gpu_quotas = self._gpu_quotas
        source = detect_source(discovery, self.configured_source, gpu_quotas)
        if source != self._source:
            logger.info("cluster %s: quota source %s", self.name, source)
        if source not in READ_SOURCES:
            raise KubeError(
                f"cluster {self.name}: quota source {source} is not read yet", None, True
            )
        if source == QuotaSource.KUEUE and not discovery.kueue_version:
            logger.warning(
                "cluster %s serves neither Kueue, Volcano nor KAI, and no ResourceQuota has a "
                "GPU line",
                self.name,
            )
        self._source = source
        return discovery

    def _has_gpu_quotas(self, deadline: Deadline | None) -> bool:
        """Whether some ResourceQuota has a ``requests.nvidia.com/gpu`` line; False when they
        may not be listed (a permanent error, e.g. no access: the cluster stays a Kueue one, as
        before). A transient failure keeps what the last detection found, and raises when
        there is none: a sync whose source is unknown writes nothing."""
        try:
            listed = self.list_kind(resourcequota.RESOURCE_QUOTA, "v1", deadline=deadline)
        except KubeError as exc:
            if not exc.permanent:
                if self._gpu_quotas is None:
                    raise
                logger.warning(
                    "cluster %s: ResourceQuotas not listed for detection, source kept: %s",
                    self.name,
                    exc,
                )
                return self._gpu_quotas
            logger.info("cluster %s: ResourceQuotas not listed for detection: %s", self.name, exc)
            return False
        return any(resourcequota.has_gpu_line(quota) for quota in listed.items)

    def _list_call(self, kind: Kind, version: str, **params: Any) -> Any:
        if kind.name == "ResourceQuota" and not kind.group:
            return self.core.list_resource_quota_for_all_namespaces, (), params
        return super()._list_call(kind, version, **params)

    def source(self, deadline: Deadline | None = None) -> str:
        """The cluster's quota source (discovers once when it is to be detected)."""
        if self._source is None:
            self.discover(deadline=deadline)
        return self._source or QuotaSource.KUEUE

    @property
    def scheduler(self) -> str:
        """The source as rows name it (``scheduler``), once known."""
        return self._source or QuotaSource.KUEUE

    def _translated(self, deadline: Deadline | None) -> Source | None:
        """The source translated at this boundary; None for Kueue itself."""
        return SOURCES.get(self.source(deadline))

    def _version(self, source: Source, kind: str, deadline: Deadline | None) -> str:
        """The version of the source's ``kind`` ("queue" or "pod_group") to read."""
        wanted = source.queue_versions if kind == "queue" else source.pod_group_versions
        served = self.discover(deadline=deadline).group_versions(source.group)
        version = next((v for v in wanted if v in served), None)
        if version is None:
            raise _not_served(f"{source.group} {'/'.join(wanted)}")
        return version

    # --- LIST --------------------------------------------------------------------------------
    def list_objects(self, kind_name: str, *, deadline: Deadline | None = None) -> ListResult:
        if kind_name == "ResourceFlavor" and self.source(deadline) != QuotaSource.KUEUE:
            # The one flavor of a cluster whose quotas name no node pool (every GPU node).
            flavor = common.source_flavor(self.scheduler)
            return ListResult(kind_name, [flavor], common.FLAVOR_VERSION, 1)
        if self.source(deadline) == QuotaSource.RESOURCEQUOTA:
            return self._list_resource_quota_kind(kind_name, deadline)
        source = self._translated(deadline)
        if source is None or kind_name in ("Pod", "Node"):
            return super().list_objects(kind_name, deadline=deadline)
        if kind_name in source.unserved:
            raise _not_served(f"{kind_name} ({source.name} has none)")
        if kind_name in QUEUE_KINDS:
            if kind_name == "ClusterQueue":
                # Their translation takes what the PodGroups tell: list those first.
                pod_groups = self._list_pod_groups(source, deadline)
                self._pod_groups = None if self._watching else pod_groups
            version = self._version(source, "queue", deadline)
            listed = self.list_kind(source.queue, version, deadline=deadline)
            queues = {name_of(q): q for q in listed.items if name_of(q)}
            with self._queues_lock:
                self._queues[kind_name] = queues
                summary = self._translated_with[kind_name] = self._summary_now(source)
            items = list(source.queues_as(kind_name, queues.values(), summary, None).values())
        elif kind_name == "Workload":
            # The PodGroups the ClusterQueue LIST of this sync read, else a LIST of its own.
            listed = self._pod_groups or self._list_pod_groups(source, deadline)
            self._pod_groups = None
            items = [source.pod_group_to_workload(g) for g in listed.items]
        else:
            raise _not_served(kind_name)
        return ListResult(kind_name, items, listed.resource_version, listed.pages, listed.filtered)

    def _list_resource_quota_kind(self, kind_name: str, deadline: Deadline | None) -> ListResult:
        """A product kind on a ResourceQuota cluster (``ResourceQuotaReader``)."""
        reader = self._resource_quotas
        if kind_name == "Node":
            return super().list_objects(kind_name, deadline=deadline)
        if kind_name == "Pod":
            return reader.list_pods(deadline)
        if kind_name == "ClusterQueue":
            return reader.list_cluster_queues(deadline)
        if kind_name == "Workload":
            return reader.list_workloads(deadline)
        raise _not_served(f"{kind_name} (ResourceQuota has none)")

    def _list_pod_groups(self, source: Source, deadline: Deadline | None) -> ListResult:
        """A complete PodGroup LIST; the facts become its PodGroups'."""
        version = self._version(source, "pod_group", deadline)
        listed = self.list_kind(source.pod_group, version, deadline=deadline)
        facts = {}
        by_queue: dict[str, dict[tuple[str, str], Any]] = {}
        for group in listed.items:
            found = source.group_facts(group)
            if found is not None:
                facts[key_of(group)] = found
                by_queue.setdefault(found[0], {})[key_of(group)] = found
        with self._queues_lock:
            self._facts, self._facts_by_queue, self._stale = facts, by_queue, None
        return listed

    def _note_facts(self, source: Source, event: WatchEvent) -> None:
        """Keep the facts up to date with a PodGroup event."""
        key = key_of(event.object)
        found = None if event.type == "DELETED" else source.group_facts(event.object)
        with self._queues_lock:
            changed = set()
            old = self._facts.pop(key, None)
            if old is not None:
                self._facts_by_queue.get(old[0], {}).pop(key, None)
                changed.add(old[0])
            if found is not None:
                self._facts[key] = found
                self._facts_by_queue.setdefault(found[0], {})[key] = found
                changed.add(found[0])
            if self._stale is not None:
                self._stale |= changed

    def _summary_now(self, source: Source) -> dict[str, Any]:
        """The summary of the facts (a copy), re-summarizing only the queues whose facts changed
        since the last call (``Source.summarize`` is per queue). Called with the lock held."""
        if self._stale is None:
            self._summary = source.summarize(self._facts.values())
        else:
            for queue in self._stale:
                part = source.summarize(self._facts_by_queue.get(queue, {}).values())
                if queue in part:
                    self._summary[queue] = part[queue]
                else:
                    self._summary.pop(queue, None)
        self._stale = set()
        return dict(self._summary)

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
        self._watching = True
        self._pod_groups = None
        self._resource_quotas.watching = True
        if kind_name == "ResourceFlavor" and self.source(deadline) != QuotaSource.KUEUE:
            # The source flavor never changes: a WATCH that ends at its timeout without events.
            (stop or threading.Event()).wait(timeout_seconds)
            return
        if self.source(deadline) == QuotaSource.RESOURCEQUOTA and kind_name not in ("Pod", "Node"):
            reader = self._resource_quotas
            if kind_name == "ClusterQueue":
                yield from reader.watch_cluster_queues(
                    resource_version, timeout_seconds, stop, deadline
                )
            elif kind_name == "Workload":
                yield from reader.watch_workloads(resource_version, timeout_seconds, stop, deadline)
            else:
                raise _not_served(f"{kind_name} (ResourceQuota has none)")
            return
        source = self._translated(deadline)
        if source is None or kind_name in ("Pod", "Node"):
            yield from super().watch(
                kind_name, resource_version, timeout_seconds, stop=stop, deadline=deadline
            )
            return
        if kind_name == "Workload":
            for event in self.watch_kind(
                source.pod_group,
                self._version(source, "pod_group", deadline),
                resource_version,
                timeout_seconds,
                stop=stop,
                deadline=deadline,
            ):
                if event.type in ("BOOKMARK", "INVALID"):
                    yield event
                else:
                    # A queue's translation follows on its next event (Volcano's and KAI's
                    # controllers update the queue's status whenever one of its PodGroups
                    # changes).
                    self._note_facts(source, event)
                    translated = source.pod_group_to_workload(event.object)
                    yield WatchEvent(event.type, translated, event.resource_version)
            return
        if kind_name not in QUEUE_KINDS:
            raise _not_served(f"{kind_name} ({source.name} has none)")
        yield from self._watch_queues(
            source, kind_name, resource_version, timeout_seconds, stop, deadline
        )

    def _watch_queues(
        self,
        source: Source,
        kind_name: str,
        resource_version: str,
        timeout_seconds: int,
        stop: threading.Event | None,
        deadline: Deadline | None,
    ) -> Iterator[WatchEvent]:
        """Queue events as events of ``kind_name``: every translated object an event changes
        (a child's quota changes its parent Cohort's own quota); ``ResourceExpired`` when the
        event changes which queues are Cohorts."""
        with self._queues_lock:
            known = self._queues.get(kind_name)
        if known is None:
            raise ResourceExpired(f"{kind_name}: no {source.name} queue list to watch from; relist")
        version = self._version(source, "queue", deadline)
        for event in self.watch_kind(
            source.queue, version, resource_version, timeout_seconds, stop=stop, deadline=deadline
        ):
            if event.type in ("BOOKMARK", "INVALID"):
                yield event
                continue
            name = name_of(event.object)
            after = dict(known)
            if event.type == "DELETED":
                after.pop(name, None)
            else:
                after[name] = event.object
            if _may_reclassify(source, known.get(name), after.get(name)) and (
                source.parent_names(after.values()) != source.parent_names(known.values())
            ):
                raise ResourceExpired(
                    f"{source.name} queue {name} changes which queues are parents; "
                    f"relisting {kind_name}"
                )
            with self._queues_lock:
                summary = self._summary_now(source)
                before = self._translated_with.get(kind_name, summary)
                touched = _touched(source, name, known, after, before, summary)
                old = source.queues_as(kind_name, known.values(), before, touched)
                new = source.queues_as(kind_name, after.values(), summary, touched)
                known = after
                self._queues[kind_name] = known
                self._translated_with[kind_name] = summary
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

    # --- what Volcano and KAI do not serve here ------------------------------------------------
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


__all__ = [
    "READ_SOURCES",
    "SOURCES",
    "SourceClient",
    "detect_source",
    "kai",
    "resourcequota",
    "volcano",
]
