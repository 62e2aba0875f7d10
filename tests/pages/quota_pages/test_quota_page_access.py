"""Who may open the quota pages and charts, and how they answer bad requests.

The data is the Kueue scenario of ``tests.pages.quota_pages.world``, built once per module.
"""

from __future__ import annotations

import json

import pytest

from tests.pages.quota_pages.world import (
    chart_urls,
    figure,
    page_urls,
    text,
)

# --- Access, login, errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["team-list", "team", "cohort-list", "cohort", "queue-list", "queue", "workload"]
)
def test_every_page_redirects_anonymous_users_to_login(client, world, name):
    response = client.get(page_urls(world)[name])

    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


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
def test_every_chart_answers_anonymous_users_with_401_json(client, world, name):
    response = client.get(chart_urls(world)[name])

    assert response.status_code == 401
    assert "error" in json.loads(response.content)


@pytest.mark.parametrize(
    "name", ["team-list", "team", "cohort-list", "cohort", "queue-list", "queue", "workload"]
)
def test_every_page_renders_for_staff(staff_client, world, name):
    response = staff_client.get(page_urls(world)[name])

    assert response.status_code == 200
    assert "<h1>" in text(response)


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
def test_every_chart_has_a_title_axis_titles_and_a_legend(staff_client, world, name):
    fig = figure(staff_client.get(chart_urls(world)[name] + "?range=7d"))

    assert fig["layout"]["title"]["text"]
    assert fig["layout"]["xaxis"]["title"]["text"]
    assert fig["layout"]["yaxis"]["title"]["text"]
    assert fig["layout"]["showlegend"] is True
    assert fig["data"], "a chart with data in range has traces"
    assert fig["meta"]["empty"] is False


@pytest.mark.parametrize("name", ["team", "queue", "workload"])
def test_another_teams_lead_gets_404_on_team_queue_and_workload_pages(beta_client, world, name):
    # The same answer as for an object that does not exist (dashboard.access).
    response = beta_client.get(page_urls(world)[name])

    assert response.status_code == 404


@pytest.mark.parametrize(
    "name",
    ["team-allocation", "team-queues", "queue-usage", "queue-evictions", "workload-timeline"],
)
def test_another_teams_lead_gets_404_on_their_charts(beta_client, world, name):
    response = beta_client.get(chart_urls(world)[name])
    assert response.status_code == 404
    assert response.json() == {"error": "Not found, or not yours to see."}


@pytest.mark.parametrize("name", ["team", "queue", "workload"])
def test_the_teams_own_lead_sees_its_pages(lead_client, world, name):
    assert lead_client.get(page_urls(world)[name]).status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "/teams/nobody/",
        "/teams/nobody/charts/allocation.json",
        "/cohorts/test/nowhere/",
        "/cohorts/other-cluster/research/",
        "/cohorts/test/nowhere/charts/usage.json",
        "/queues/test/no-such-queue/",
        "/queues/test/no-such-queue/charts/evictions.json",
        "/workloads/999999/",
        "/workloads/999999/charts/timeline.json",
    ],
)
def test_unknown_objects_are_404(staff_client, world, url):
    assert staff_client.get(url).status_code == 404


@pytest.mark.parametrize("name", ["team-list", "team", "cohort", "queue", "workload"])
@pytest.mark.parametrize(
    "query", ["range=fortnight", "start=yesterday", "start=2026-08-22&end=2026-08-01"]
)
def test_bad_range_parameters_are_400_pages(staff_client, world, name, query):
    response = staff_client.get(f"{page_urls(world)[name]}?{query}")

    assert response.status_code == 400
    assert "Bad request" in text(response)


@pytest.mark.parametrize(
    "name", ["team-allocation", "cohort-borrowing", "queue-evictions", "workload-activity"]
)
def test_bad_range_parameters_are_400_json_on_charts(staff_client, world, name):
    response = staff_client.get(chart_urls(world)[name] + "?range=forever")

    assert response.status_code == 400
    assert "range" in json.loads(response.content)["error"]


@pytest.mark.parametrize(
    "name,query",
    [
        ("team", "state=zombie"),
        ("team", "page=two"),
        ("team-list", "page=0"),
        ("queue", "page=-1"),
        ("cohort-list", "page=x"),
        ("queue-list", "page=1.5"),
    ],
)
def test_bad_filters_and_page_numbers_are_400(staff_client, world, name, query):
    assert staff_client.get(f"{page_urls(world)[name]}?{query}").status_code == 400


def test_a_page_number_past_the_end_shows_the_last_page(staff_client, world):
    response = staff_client.get(page_urls(world)["team-list"] + "?page=99")

    assert response.status_code == 200
    assert "beta" in text(response)


def test_bad_activity_metric_is_400(staff_client, world):
    response = staff_client.get(chart_urls(world)["workload-activity"] + "?metric=watts")

    assert response.status_code == 400
    assert "metric" in json.loads(response.content)["error"]


def test_charts_refuse_post(staff_client, world):
    assert staff_client.post(chart_urls(world)["team-allocation"]).status_code == 405
    assert staff_client.post(page_urls(world)["team"]).status_code == 405
