"""The quota pages and charts read a bounded number of queries, whatever the data size.

The data is the Kueue scenario of ``tests.pages.quota_pages.world``, built once per module.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.pages.quota_pages.world import (
    MAX_CHART_QUERIES,
    MAX_PAGE_QUERIES,
    chart_urls,
    grow,
    page_urls,
)

# --- Query bounds -------------------------------------------------------------------------------


def _count_queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    return len(queries)


@pytest.mark.parametrize(
    "name", ["team-list", "team", "cohort-list", "cohort", "queue-list", "queue", "workload"]
)
def test_page_query_count_is_bounded_and_independent_of_data_size(
    staff_client, world, name, django_assert_max_num_queries
):
    url = page_urls(world)[name]
    before = _count_queries(staff_client, url)

    grow(world, 30)

    assert _count_queries(staff_client, url) == before
    with django_assert_max_num_queries(MAX_PAGE_QUERIES):
        staff_client.get(url)


@pytest.mark.parametrize(
    "name",
    [
        "team-allocation",
        "team-queues",
        "cohort-usage",
        "cohort-borrowing",
        "queue-usage",
        "queue-evictions",
        "workload-timeline",
        "workload-activity",
    ],
)
def test_chart_query_count_is_bounded_and_independent_of_data_size(
    staff_client, world, name, django_assert_max_num_queries
):
    url = chart_urls(world)[name] + "?range=7d"
    before = _count_queries(staff_client, url)

    grow(world, 30)

    assert _count_queries(staff_client, url) == before
    with django_assert_max_num_queries(MAX_CHART_QUERIES):
        staff_client.get(url)


def test_lead_page_query_count_is_bounded(lead_client, world, django_assert_max_num_queries):
    # A lead's team page also asks whether they may change its quota (permission, leadership).
    with django_assert_max_num_queries(MAX_PAGE_QUERIES + 2):
        assert lead_client.get(page_urls(world)["team"]).status_code == 200
