"""A fleet run by one scheduler other than Kueue: its list pages speak that scheduler's words
throughout (title, subtitle, headings, counts), not Kueue's, and name no row's kind (there is
only one). Each source's schema-true fixtures, synced through the Kubernetes API test server."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import reverse

from fleet.models import Cluster
from quotas.sync import sync_cluster
from tests.scheduler_fixtures import load_scheduler_fixtures

SERVED = {
    "volcano": {"volcano_versions": ("v1beta1",)},
    "kai": {"kai_versions": ("v2", "v2alpha2")},
    "resourcequota": {"serve_resource_quotas": True},
}


@pytest.fixture(params=sorted(SERVED))
def source(request: Any, make_kube_api: Any, db: None) -> str:
    api = make_kube_api(load=False, kueue_versions=(), **SERVED[request.param])
    load_scheduler_fixtures(api, request.param)
    assert sync_cluster(Cluster.objects.create(name=f"gpu-{request.param}").pk).status == "success"
    return request.param


def _headings(html: str, testid: str) -> list[str]:
    table = re.search(rf'data-testid="{testid}">\s*<thead>(.*?)</thead>', html, re.S)
    assert table, f"no {testid}"
    return [
        re.sub(r"<[^>]+>", "", cell).strip()
        for cell in re.findall(r"<th[^>]*>(.*?)</th>", table[1])
    ]


def _subtitle(html: str) -> str:
    found = re.search(r'<p class="subtitle">(.*?)</p>', html, re.S)
    assert found, "no subtitle"
    return " ".join(found[1].split())


# What each source's own tools call the queue list and the cohort column.
EXPECTED = {
    "volcano": ("Queues", "Volcano Queues with", "Queue", "Parent queue"),
    "kai": ("Queues", "KAI Queues with", "Queue", "Parent queue"),
    "resourcequota": ("ResourceQuotas", "Namespace ResourceQuotas with", "ResourceQuota", "Cohort"),
}


# What "Admitted now (quota)" counts, in each source's words.
ADMITTED = {
    "volcano": "Volcano quota admitted to PodGroups",
    "kai": "KAI quota admitted to PodGroups",
    "resourcequota": "ResourceQuota admitted to workloads",
}


def test_the_queue_list_speaks_the_one_scheduler(source: str, admin_client: Any) -> None:
    title, subtitle, queue, cohort = EXPECTED[source]
    page = admin_client.get(reverse("dashboard:cluster-queue-list"))
    html = page.content.decode()
    assert page.context["page_title"] == title
    assert _subtitle(html).startswith(subtitle), _subtitle(html)
    assert "ClusterQueue" not in _subtitle(html)
    assert f'title="{ADMITTED[source]} now"' in html
    headings = _headings(html, "queue-table")
    assert headings[:3] == [queue, "Cluster", cohort]
    # Kueue's per-flavor quota columns are Kueue's alone.
    assert headings[4] == "GPU quota"
    # One kind on the page: no row names its kind.
    assert 'data-testid="queue-kind"' not in html


def test_the_cohort_list_names_parent_queues_as_the_scheduler_does(
    source: str, admin_client: Any
) -> None:
    page = admin_client.get(reverse("dashboard:cohort-list"))
    html = page.content.decode()
    if source == "resourcequota":
        # ResourceQuotas have no hierarchy: an empty list, in Kueue's words.
        assert page.context["rows"] == [] and "No cohorts" in html
        return
    scheduler = {"volcano": "Volcano", "kai": "KAI"}[source]
    assert _subtitle(html).startswith(f"{scheduler} parent queues: Queues that lend"), _subtitle(
        html
    )
    assert _headings(html, "cohort-table")[0] == "Parent queue"
    assert 'data-testid="cohort-kind"' not in html


def test_a_team_page_counts_its_queues_in_the_schedulers_word(
    source: str, admin_client: Any
) -> None:
    from quotas.models import ClusterQueue

    queue = ClusterQueue.objects.filter(team__isnull=False).select_related("team").first()
    assert queue is not None
    html = admin_client.get(
        reverse("dashboard:team-detail", args=[queue.team.name])
    ).content.decode()
    word = EXPECTED[source][2]
    assert f"<h2>{word}s</h2>" in html
    assert re.search(rf"\b1 {word}\b", _subtitle(html)), _subtitle(html)
    assert f"Admitted (quota): {ADMITTED[source]}, per flavor." in html
    assert "ClusterQueue" not in _subtitle(html)


def test_the_team_pages_say_whose_quota_admitted_counts(
    source: str, admin_client: Any, admin_user: Any
) -> None:
    from quotas.models import ClusterQueue

    queue = ClusterQueue.objects.filter(team__isnull=False).select_related("team").first()
    assert queue is not None
    queue.team.leads.add(admin_user)
    admitted = ADMITTED[source]

    teams = admin_client.get(reverse("dashboard:team-list")).content.decode()
    assert f"Now: GPUs of {admitted} / GPUs held" in teams
    assert f"Admitted / held now: GPUs of {admitted} / GPUs held" in teams
    nominal = {
        "volcano": "Volcano deserved",
        "kai": "KAI quota",
        "resourcequota": "ResourceQuota hard",
    }
    assert f'<div class="stat-note">{nominal[source]}, summed</div>' in teams
    mine = admin_client.get(reverse("dashboard:my-teams")).content.decode()
    team = admin_client.get(
        reverse("dashboard:team-detail", args=[queue.team.name])
    ).content.decode()
    for html in (teams, mine, team):
        assert "Kueue" not in re.sub(r"<(script|style)\b.*?</\1>", "", html, flags=re.S)
    # The quota-per-flavor table of a lead's landing and of the team page.
    for html in (mine, team):
        assert f'title="{admitted[:1].upper()}{admitted[1:]} now">Admitted (quota)' in html
    assert f'<span title="{admitted[:1].upper()}{admitted[1:]}">quota</span>' in mine


def test_teams_of_several_schedulers_sum_their_quota_in_neutral_words(
    source: str, admin_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dashboard import frame
    from dashboard.views import teams as team_views
    from quotas.models import ClusterQueue, Team

    # Given a Kueue ClusterQueue of another team, last by name, on another cluster
    shown = Team.objects.count()
    kueue = Cluster.objects.create(name="gpu-kueue")
    ClusterQueue.objects.create(
        cluster=kueue, name="zz-kueue", team=Team.objects.create(name="zz-kueue")
    )
    # and a first page of the team list holding the source's teams only
    monkeypatch.setattr(
        team_views, "paginate", lambda request, teams: frame.paginate(request, teams, shown)
    )

    html = admin_client.get(reverse("dashboard:team-list")).content.decode()
    assert 'data-team="zz-kueue"' not in html
    # Then the summed nominal quota, over every team, names no one scheduler
    assert '<div class="stat-note">nominal, summed</div>' in html
    # and the rows shown still speak their one scheduler
    assert f"Now: GPUs of {ADMITTED[source]} / GPUs held" in html
