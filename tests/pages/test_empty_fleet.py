"""The fleet pages with no cluster at all: the overview's setup instructions and an empty chart
(a database of their own: ``test_fleet_pages.py`` shares one fleet between its tests)."""

from __future__ import annotations

from django.urls import reverse


def test_overview_shows_setup_instructions_without_any_cluster(staff_client, db):
    response = staff_client.get(reverse("dashboard:overview"))

    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-testid="empty-state"' in html
    assert "make demo" in html
    assert "PROMETHEUS_URL" in html


def test_empty_chart_says_there_is_no_data(staff_client, db):
    figure = staff_client.get(reverse("dashboard:chart-capacity")).json()

    assert figure["meta"]["empty"] is True
    assert "No hourly rollups" in figure["layout"]["annotations"][0]["text"]
