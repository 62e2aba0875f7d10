"""``Lister``: the LIST step of one sync, which fills the in-memory lists.

``list_all`` LISTs every kind; a kind is complete only when the client returned a complete LIST
of it (``quotas.kueue`` returns nothing else: a lie, a failed page or a timeout leaves the kind
out), so nothing of a kind whose LIST failed is ever marked deleted. ``relist_kind`` LISTs one
kind again after ``410 Gone`` on its WATCH and turns the difference into changes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from core.deadlines import Deadline
from quotas.kueue import KubeError, KubeTimeout, KueueClient, ResourceExpired
from quotas.sync.objects import (
    KIND_NAMES,
    Changes,
    ObjectLists,
    held_back,
    object_uid,
    object_version,
)
from quotas.sync.tally import Tally

logger = logging.getLogger(__name__)


class Lister:
    """LISTs a cluster's kinds into ``lists``, recording failures in ``tally``."""

    def __init__(
        self, cluster_name: str, client: KueueClient, lists: ObjectLists, tally: Tally
    ) -> None:
        self.cluster_name = cluster_name
        self.client = client
        self.lists = lists
        self.tally = tally

    def list_kind(self, kind: str, deadline: Deadline) -> tuple[list[dict[str, Any]], str] | None:
        """The complete list of one kind, or None when it failed, lied, timed out or is not
        served (recorded): only the client's complete answer makes a kind complete."""
        for attempt in (1, 2):
            try:
                result = self.client.list_objects(kind, deadline=deadline)
            except ResourceExpired as exc:
                # The continue token expired mid-list: start that LIST over, once.
                if attempt == 1:
                    logger.info("cluster %s: %s; listing again", self.cluster_name, exc.message)
                    continue
                self.tally.errors.append(f"{kind}: {exc.message}")
                self.tally.failures.append(exc)
                return None
            except KubeError as exc:
                if exc.status == 404:
                    # Cohorts (and the whole group) are absent on older Kueue: not an error.
                    logger.info("cluster %s: %s is not served", self.cluster_name, kind)
                    self.tally.notes[f"{kind}: not served"] = 1
                    self.lists.unserved.add(kind)
                    return None
                logger.warning(
                    "cluster %s: LIST %s failed, nothing of it is marked deleted: %s",
                    self.cluster_name,
                    kind,
                    exc,
                )
                self.tally.errors.append(
                    f"{kind} not listed (nothing of it marked deleted): {exc.message}"
                )
                self.tally.failures.append(exc)
                return None
            return result.items, result.resource_version
        return None

    def list_all(self, deadline: Deadline) -> None:
        """LIST every kind into the lists; ``KubeError`` when none listed.

        ``KubeTimeout`` once ``deadline`` has passed: the run fails and nothing is written.
        """
        lists = self.lists
        self.client.discover(refresh=True, deadline=deadline)
        for index, kind in enumerate(KIND_NAMES):
            _check_deadline(deadline, KIND_NAMES[index:])
            listed = self.list_kind(kind, deadline)
            if listed is None:
                lists.complete.discard(kind)
                # A LIST cut off by the run's deadline ends the run: nothing is written.
                _check_deadline(deadline, KIND_NAMES[index + 1 :])
                continue
            lists.replace(kind, *listed)
            lists.complete.add(kind)
        self._hold_back()
        if not lists.complete:
            # Retrying helps only when some failure was transient.
            failures = self.tally.failures
            permanent = all(exc.permanent for exc in failures)
            statuses = {exc.status for exc in failures}
            raise KubeError(
                "every LIST failed: " + "; ".join(self.tally.errors or ["nothing served"]),
                statuses.pop() if len(statuses) == 1 else None,
                permanent,
            )

    def _hold_back(self) -> None:
        """Leave out of this run the kinds ingest would read wrong without a failed LIST."""
        lists = self.lists
        for kind, missing in held_back(lists.complete | lists.unserved).items():
            if kind not in lists.complete:
                continue
            lists.forget(kind)
            self.tally.errors.append(
                f"{kind} not written: its rows need the {missing} list, which is not complete"
            )

    def relist_kind(self, kind: str, changes: Changes, deadline: Deadline) -> None:
        """After 410 Gone: LIST the kind again and turn the difference into changes."""
        lists = self.lists
        listed = self.list_kind(kind, deadline)
        if listed is None:
            lists.complete.discard(kind)
            return
        before = lists.objects[kind]
        lists.replace(kind, *listed)
        after = lists.objects[kind]
        for key in before.keys() | after.keys():
            old, new = before.get(key), after.get(key)
            if old is not None and new is not None and object_version(old) == object_version(new):
                continue
            if new is None:
                changes.deleted.add(kind)
                changes.gone[kind][key] = object_uid(old)
            if kind == "Workload":
                lists.note_queues(changes, old, new)
            changes.add(kind, key)


def _check_deadline(deadline: Deadline, unlisted: Iterable[str]) -> None:
    """Raise ``KubeTimeout`` once the run's deadline has passed."""
    if not deadline.expired():
        return
    left = ", ".join(unlisted)
    raise KubeTimeout(
        f"{deadline} reached" + (f"; not listed: {left}" if left else "") + "; nothing was written",
        deadline=deadline,
        run_deadline=True,
    )
