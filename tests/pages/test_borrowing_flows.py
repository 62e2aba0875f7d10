"""Who borrowed from whom in a cohort: lender → borrower GPU-hours (dashboard.queries.flows)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from core.ranges import parse_range
from dashboard.queries.flows import POOL, borrowing_flows

pytestmark = pytest.mark.django_db


def test_flows_split_each_hours_borrowing_over_that_hours_lenders_per_flavor(flows_scenario):
    queues = flows_scenario.queues
    ids = {queue.pk: name for name, queue in queues.items()}
    ids[POOL] = "pool"

    flows = borrowing_flows(list(queues.values()), parse_range({"range": "24h"}).covered_hours())

    found = {
        (ids[lender], ids[borrower]): value for (lender, borrower), value in flows.hours.items()
    }
    assert found == pytest.approx(flows_scenario.expected)
    assert ids[flows.lenders[-1]] == "pool"
    assert [ids[b] for b in flows.borrowers] == ["a", "c"]


def test_cohort_page_shows_the_lender_borrower_matrix(staff_client, flows_scenario):
    cohort = flows_scenario.cohort
    url = reverse("dashboard:cohort-detail", args=[cohort.cluster.name, cohort.name])

    response = staff_client.get(url, {"range": "24h"})

    matrix = response.context["flows"]
    assert matrix["borrowers"] == ["queue-a", "queue-c"]
    rows = {row["name"]: row["cells"] for row in matrix["rows"]}
    assert rows["queue-b"] == pytest.approx([5.0, 2.0])
    assert rows["queue-a"] == [None, pytest.approx(1.0)]
    assert rows["cohort's own pool"] == [pytest.approx(1.0), None]
    assert matrix["total"] == pytest.approx(sum(flows_scenario.expected.values()))
