"""What the quota-source tests (test_volcano_source.py, test_kai_source.py) share: reading a
translated queue's GPU quota, a subtree of Cohort rows, and acting once a sync watches."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from quotas.models import Cohort
from quotas.sources.common import FLAVOR

GPU = "nvidia.com/gpu"


def resource(obj: dict[str, Any]) -> dict[str, Any]:
    """The single GPU quota of a translated Cohort or ClusterQueue."""
    (group,) = obj["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    assert flavor["name"] == FLAVOR
    (found,) = flavor["resources"]
    assert found["name"] == GPU
    return found


def subtree_ids(cohort: Cohort) -> list[int]:
    """The ids of a Cohort row and every Cohort row below it."""
    found, todo = [], [cohort]
    while todo:
        node = todo.pop()
        found.append(node.pk)
        todo.extend(Cohort.objects.filter(parent=node))
    return found


def when_watching(
    api: Any, queue_kind: str, pod_group_kind: str, action: Callable[[], None]
) -> threading.Thread:
    """Run ``action`` once the sync watches PodGroups and both queue kinds (Cohort and
    ClusterQueue each watch the source's queues)."""

    def wait_then_act() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (
            api.watch_count(queue_kind) < 2 or api.watch_count(pod_group_kind) < 1
        ):
            time.sleep(0.02)
        action()

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread
