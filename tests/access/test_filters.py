"""Filters that name a team follow the policy too: a lead cannot learn another team's detail by
filtering for it."""

from __future__ import annotations

from django.test import override_settings
from django.urls import reverse


def test_the_map_refuses_a_filter_on_a_team_the_lead_may_not_see(world, client_of):
    lead = client_of("lead_a")
    birch, aspen = world.teams["birch"].pk, world.teams["aspen"].pk

    for name in ("dashboard:map", "dashboard:chart-map"):
        refused = lead.get(reverse(name), {"team": birch})
        missing = lead.get(reverse(name), {"team": 99999})
        assert refused.status_code == missing.status_code == 400, name
        assert lead.get(reverse(name), {"team": aspen}).status_code == 200, name
    # The same answer for a team that exists and one that does not.
    chart = reverse("dashboard:chart-map")
    refused_error = lead.get(chart, {"team": birch}).json()["error"]
    missing_error = lead.get(chart, {"team": 99999}).json()["error"]
    assert refused_error.replace(str(birch), "N") == missing_error.replace("99999", "N")
    with override_settings(GPULEDGER_TEAM_VISIBILITY="public"):
        assert lead.get(reverse("dashboard:map"), {"team": birch}).status_code == 200


def test_the_map_offers_a_lead_only_their_teams(world, client_of):
    body = client_of("lead_a").get(reverse("dashboard:map")).content.decode()

    assert "Aspen Team" in body
    assert "Birch Team" not in body and "Cedar Team" not in body
