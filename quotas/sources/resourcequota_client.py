"""The LIST and WATCH of a ResourceQuota cluster's ClusterQueues and Workloads, for
``quotas.sources.SourceClient`` (docs/architecture.md "Quota sources"); the translation itself
is ``quotas.sources.resourcequota``'s.

* ClusterQueue: a LIST of ``resourcequotas`` (core v1), translated per namespace; its WATCH keeps
  the quotas of the last LIST and turns each event into the events of the namespace's
  ClusterQueue (nothing changed: a BOOKMARK to resume from).
* Workload: the GPU pods grouped by owner; its WATCH is a pod WATCH that keeps the pods by
  workload and turns each pod event into its workload's event (DELETED with its last pod).
* A ClusterQueue's workload counts come from the pods: the ClusterQueue LIST lists the pods
  first; in the LIST pass the Workload and Pod LISTs take that same pod LIST (one pod LIST a
  sync), and a queue's counts follow on its next quota event (the quota controller updates
  ``status.used`` whenever a pod of the namespace comes or goes).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from quotas.kueue import KINDS_BY_NAME, ListResult, ResourceExpired, WatchEvent
from quotas.sources import resourcequota as rq
from quotas.sources.common import key_of

if TYPE_CHECKING:
    from core.deadlines import Deadline
    from quotas.kueue import KueueClient

POD = KINDS_BY_NAME["Pod"]
Key = tuple[str, str]


def _changes(
    old: dict[Any, dict[str, Any]], new: dict[Any, dict[str, Any]], keys: list[Any], rv: str
) -> Iterator[WatchEvent]:
    """The events that turn ``old`` into ``new`` for ``keys``; a BOOKMARK when none."""
    changed = False
    for key in keys:
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        changed = True
        if after is None:
            assert before is not None  # noqa: S101 - one of them differs from None
            yield WatchEvent("DELETED", before, rv)
        else:
            yield WatchEvent("MODIFIED" if before is not None else "ADDED", after, rv)
    if not changed:
        yield WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": rv}}, rv)


class ResourceQuotaReader:
    """One ResourceQuota cluster's quotas and GPU pods, as of the last LIST or event."""

    def __init__(self, client: KueueClient) -> None:
        self.client = client
        self._lock = threading.Lock()
        self._quotas: dict[Key, dict[str, Any]] | None = None
        self._pods: dict[Key, rq.PodFacts] | None = None
        self._by_workload: dict[Key, set[Key]] = {}
        # Per workload, its state as its pods stand ("pending", "admitted", "finished"): the
        # queues' counts, read on every quota event, without going through every pod.
        self._states: dict[Key, str] = {}
        # The pod LIST of this LIST pass, for its Workload and Pod LISTs.
        self._pod_list: ListResult | None = None
        self._pod_list_users: set[str] = set()
        self.watching = False

    # --- state -------------------------------------------------------------------------------
    def _index_pods(self, items: list[dict[str, Any]]) -> None:
        pods: dict[Key, rq.PodFacts] = {}
        by_workload: dict[Key, set[Key]] = {}
        for item in items:
            facts = rq.pod_facts(item)
            if facts is not None:
                pods[(facts.namespace, facts.name)] = facts
                by_workload.setdefault(facts.key, set()).add((facts.namespace, facts.name))
        states = {
            key: rq.workload_state([pods[k] for k in found]).state
            for key, found in by_workload.items()
        }
        with self._lock:
            self._pods, self._by_workload, self._states = pods, by_workload, states

    def _workload(self, key: Key) -> dict[str, Any] | None:
        """The translated workload ``key`` as the pods stand (None when it has none); under the
        lock."""
        assert self._pods is not None  # noqa: S101 - called once pods are indexed
        found = [self._pods[k] for k in sorted(self._by_workload.get(key, ()))]
        return rq.to_workload(found) if found else None

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per namespace, (pending, admitted) workloads as the pods stand."""
        with self._lock:
            states = [(key[0], state) for key, state in self._states.items()]
        return rq.workload_counts(states)

    # --- LIST --------------------------------------------------------------------------------
    def _list_pods(self, deadline: Deadline | None) -> ListResult:
        listed = self.client.list_kind(POD, "v1", deadline=deadline)
        self._index_pods(listed.items)
        return listed

    def _pass_pod_list(self, kind: str, deadline: Deadline | None) -> ListResult:
        """This LIST pass's pod LIST for ``kind`` ("Workload" or "Pod"), else a new one."""
        with self._lock:
            kept = self._pod_list if kind not in self._pod_list_users else None
            if kept is not None:
                self._pod_list_users.add(kind)
                if self._pod_list_users >= {"Workload", "Pod"}:
                    self._pod_list = None
        if kept is not None:
            return kept
        if kind == "Pod":
            return self.client.list_kind(POD, "v1", deadline=deadline)
        return self._list_pods(deadline)

    def list_cluster_queues(self, deadline: Deadline | None) -> ListResult:
        pods = self._list_pods(deadline)
        with self._lock:
            self._pod_list = None if self.watching else pods
            self._pod_list_users = set()
        listed = self.client.list_kind(rq.RESOURCE_QUOTA, "v1", deadline=deadline)
        quotas = {key_of(q): q for q in listed.items}
        with self._lock:
            self._quotas = quotas
        items = list(rq.cluster_queues(quotas.values(), self.counts()).values())
        return ListResult("ClusterQueue", items, listed.resource_version, listed.pages)

    def list_workloads(self, deadline: Deadline | None) -> ListResult:
        listed = self._pass_pod_list("Workload", deadline)
        with self._lock:
            pods = list((self._pods or {}).values())
        items = list(rq.workloads(pods).values())
        return ListResult("Workload", items, listed.resource_version, listed.pages)

    def list_pods(self, deadline: Deadline | None) -> ListResult:
        return self._pass_pod_list("Pod", deadline)

    # --- WATCH -------------------------------------------------------------------------------
    def watch_cluster_queues(
        self,
        resource_version: str,
        timeout_seconds: int,
        stop: threading.Event | None,
        deadline: Deadline | None,
    ) -> Iterator[WatchEvent]:
        with self._lock:
            if self._quotas is None:
                raise ResourceExpired("ClusterQueue: no ResourceQuota list to watch from; relist")
            known = dict(self._quotas)
        shown = rq.cluster_queues(known.values(), self.counts())
        for event in self.client.watch_kind(
            rq.RESOURCE_QUOTA, "v1", resource_version, timeout_seconds, stop=stop, deadline=deadline
        ):
            if event.type in ("BOOKMARK", "INVALID"):
                yield event
                continue
            key = key_of(event.object)
            if event.type == "DELETED":
                known.pop(key, None)
            else:
                known[key] = event.object
            with self._lock:
                self._quotas = dict(known)
            after = rq.cluster_queues(known.values(), self.counts())
            # The event's namespace, and any queue whose counts moved since it was last shown.
            keys = sorted(after.keys() | shown.keys())
            yield from _changes(shown, after, keys, event.resource_version)
            shown = after

    def watch_workloads(
        self,
        resource_version: str,
        timeout_seconds: int,
        stop: threading.Event | None,
        deadline: Deadline | None,
    ) -> Iterator[WatchEvent]:
        with self._lock:
            if self._pods is None:
                raise ResourceExpired("Workload: no pod list to watch from; relist")
        for event in self.client.watch_kind(
            POD, "v1", resource_version, timeout_seconds, stop=stop, deadline=deadline
        ):
            if event.type in ("BOOKMARK", "INVALID"):
                yield event
                continue
            yield from self._apply_pod_event(event)

    def _apply_pod_event(self, event: WatchEvent) -> Iterator[WatchEvent]:
        """A pod event as the events of the workloads it changes."""
        pod_key = key_of(event.object)
        facts = None if event.type == "DELETED" else rq.pod_facts(event.object)
        with self._lock:
            assert self._pods is not None  # noqa: S101 - checked before the WATCH
            before_facts = self._pods.get(pod_key)
            keys = sorted({f.key for f in (before_facts, facts) if f is not None})
            old = {k: self._workload(k) for k in keys}
            if before_facts is not None:
                self._pods.pop(pod_key)
                self._by_workload.get(before_facts.key, set()).discard(pod_key)
            if facts is not None:
                self._pods[pod_key] = facts
                self._by_workload.setdefault(facts.key, set()).add(pod_key)
            new = {k: self._workload(k) for k in keys}
            for k in keys:
                found = [self._pods[p] for p in self._by_workload.get(k, ())]
                if found:
                    self._states[k] = rq.workload_state(found).state
                else:
                    self._states.pop(k, None)
                    self._by_workload.pop(k, None)
        yield from _changes(
            {k: v for k, v in old.items() if v is not None},
            {k: v for k, v in new.items() if v is not None},
            keys,
            event.resource_version,
        )
