"""The cohort's lender → borrower table balances and agrees with the chargeback.

One hour of h100 in a cohort without quota of its own, in two halves (the sync's samples):

* first half: queue-a borrows 2 GPUs, lent by queue-b (1) and queue-c (1);
* second half: queue-b borrows 1 GPU, lent by queue-a (1).

So the hour's rollups say a borrowed 1.0 and lent 0.5 GPU-hours, b borrowed 0.5 and lent 0.5,
c lent 0.5. By hand: b → a 0.5 and c → a 0.5 (first half), a → b 0.5 (second half); nothing
from a pool the cohort does not have. A queue that borrowed and lent in one hour used to have
its lending split over the others and the rest put on "the cohort's own pool".
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from core.ranges import floor_time, parse_range
from dashboard.queries.flows import POOL, borrowing_flows, fit_matrix
from dashboard.templatetags.formatting import figure
from ledger.choices import RollupScope
from ledger.models import HourlyRollup
from quotas.models import ClusterQueue, Cohort

pytestmark = pytest.mark.django_db

# (queue, borrowed GPU-hours, lent GPU-hours) of the hour.
HOUR = [("a", 1.0, 0.5), ("b", 0.5, 0.5), ("c", 0.0, 0.5)]
BY_HAND = {("b", "a"): 0.5, ("c", "a"): 0.5, ("a", "b"): 0.5}


@pytest.fixture
def cohort(cluster):
    cohort = Cohort.objects.create(cluster=cluster, name="research")
    queues = {
        name: ClusterQueue.objects.create(
            cluster=cluster, name=f"queue-{name}", cohort=cohort, cohort_name="research"
        )
        for name in ("a", "b", "c")
    }
    hour = floor_time(timezone.now(), 3600) - timedelta(hours=2)
    HourlyRollup.objects.bulk_create(
        HourlyRollup(
            cluster=cluster,
            scope=RollupScope.CLUSTER_QUEUE,
            key=queues[name].name,
            hour=hour,
            flavor="h100",
            cluster_queue=queues[name],
            borrowed_gpu_hours=borrowed,
            lent_gpu_hours=lent,
            allocated_gpu_hours=4.0,
            nominal_gpu_hours=4.0,
            windows=60,
        )
        for name, borrowed, lent in HOUR
    )
    return cohort, queues


def test_each_lenders_row_adds_up_to_what_it_lent_and_nothing_comes_from_a_pool(cohort):
    _, queues = cohort
    names = {queue.pk: name for name, queue in queues.items()}
    names[POOL] = "pool"

    flows = borrowing_flows(list(queues.values()), parse_range({"range": "24h"}).covered_hours())

    found = {(names[lender], names[b]): value for (lender, b), value in flows.hours.items()}
    assert found == pytest.approx(BY_HAND)
    assert POOL not in flows.lenders
    for name, borrowed, lent in HOUR:
        assert flows.total_from(queues[name].pk) == pytest.approx(lent)
        assert flows.total_to(queues[name].pk) == pytest.approx(borrowed)


def test_the_cohort_table_shows_the_chargebacks_borrowed_and_lent(staff_client, cohort):
    research, queues = cohort
    params = {"range": "24h"}

    page = staff_client.get(
        reverse("dashboard:cohort-detail", args=[research.cluster.name, research.name]), params
    )
    charge = staff_client.get(
        reverse("dashboard:chargeback"), {**params, "group_by": "cluster_queue"}
    )

    matrix = page.context["flows"]
    lent = {row["name"]: figure(row["total"]) for row in matrix["rows"]}
    borrowed = dict(zip(matrix["borrowers"], map(figure, matrix["totals"]), strict=True))
    rows = {row["group"]: row for row in charge.context["rows"]}
    assert lent == {name: rows[name]["lent"] for name in lent}
    assert borrowed == {name: rows[name]["borrowed"] for name in borrowed}
    assert set(lent) == {"queue-a", "queue-b", "queue-c"}  # no pool row: the cohort has none
    assert figure(matrix["total"]) == figure(sum(b for _, b, _ in HOUR))
    body = page.content.decode()
    assert "own pool" not in body


def test_borrowing_recorded_without_a_lender_is_not_called_the_cohorts_pool(staff_client, cohort):
    research, queues = cohort
    # An hour recorded before the sync credited every borrowed GPU: c's lending is missing.
    HourlyRollup.objects.filter(cluster_queue=queues["c"]).update(lent_gpu_hours=0.0)

    page = staff_client.get(
        reverse("dashboard:cohort-detail", args=[research.cluster.name, research.name]),
        {"range": "24h"},
    )

    names = [row["name"] for row in page.context["flows"]["rows"]]
    assert "no lender recorded" in names
    assert "cohort's own pool" not in names


def test_the_fitted_matrix_has_the_given_sums_and_an_empty_diagonal():
    rows = {1: 3.0, 2: 1.0, 3: 2.0}
    columns = {1: 2.0, 2: 3.0, 4: 1.0}

    cells = fit_matrix(rows, columns)

    assert all(lender != borrower for lender, borrower in cells)
    for lender, total in rows.items():
        assert sum(v for (x, _), v in cells.items() if x == lender) == pytest.approx(total)
    for borrower, total in columns.items():
        assert sum(v for (_, y), v in cells.items() if y == borrower) == pytest.approx(total)
