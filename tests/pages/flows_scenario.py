"""A cohort whose members borrowed from each other in two hours: a fixture for the lender →
borrower tests (tests/pages/test_borrowing_flows.py and the browser tests).

Hour 1 (h100): queue-a borrowed 4 GPU-hours, queue-b lent 3: b → a 3, the cohort's pool → a 1
(the cohort has 1 h100 GPU of its own quota).
Hour 2 (h100): queue-a and queue-c borrowed 2 each, queue-b lent 4: b → a 2, b → c 2.
Hour 2 (a100): queue-c borrowed 1, queue-a lent 1: a → c 1 (flavors never mix).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.utils import timezone

from core.ranges import floor_time


@dataclass
class FlowScenario:
    cohort: Any
    queues: dict[str, Any]
    expected: dict[tuple[str, str], float]


@pytest.fixture
def flows_scenario(db, cluster) -> FlowScenario:
    from datetime import timedelta

    from ledger.choices import RollupScope
    from ledger.models import HourlyRollup
    from quotas.models import ClusterQueue, Cohort

    GPU = "nvidia.com/gpu"

    pool = [{"flavors": [{"name": "h100", "resources": [{"name": GPU, "nominalQuota": "1"}]}]}]
    cohort = Cohort.objects.create(cluster=cluster, name="lending", resource_groups=pool)
    queues = {
        name: ClusterQueue.objects.create(
            cluster=cluster, name=f"queue-{name}", cohort=cohort, cohort_name="lending"
        )
        for name in ("a", "b", "c")
    }
    last = floor_time(timezone.now(), 3600) - timedelta(hours=1)
    first = last - timedelta(hours=1)
    rows = [
        (first, "h100", "a", 4.0, 0.0),
        (first, "h100", "b", 0.0, 3.0),
        (last, "h100", "a", 2.0, 0.0),
        (last, "h100", "c", 2.0, 0.0),
        (last, "h100", "b", 0.0, 4.0),
        (last, "a100", "c", 1.0, 0.0),
        (last, "a100", "a", 0.0, 1.0),
    ]
    HourlyRollup.objects.bulk_create(
        HourlyRollup(
            cluster=cluster,
            scope=RollupScope.CLUSTER_QUEUE,
            key=queues[name].name,
            hour=hour,
            flavor=flavor,
            cluster_queue=queues[name],
            borrowed_gpu_hours=borrowed,
            lent_gpu_hours=lent,
            allocated_gpu_hours=10.0,
            nominal_gpu_hours=8.0,
            windows=60,
        )
        for hour, flavor, name, borrowed, lent in rows
    )
    expected = {("b", "a"): 5.0, ("pool", "a"): 1.0, ("b", "c"): 2.0, ("a", "c"): 1.0}
    return FlowScenario(cohort=cohort, queues=queues, expected=expected)
