"""Kueue's own metrics -> ClusterQueue samples (quotas.ingest.metrics), against the fixture scrape.

The fixture's ``metrics.sample.prom`` is the Kueue v0.19.2 ``/metrics`` of the same scenario as
the API fixtures, so the samples made from it must match those the sync makes from ClusterQueue
status, figure by figure (the per-queue counts aside, which Kueue's metrics give per queue).
"""

from __future__ import annotations

import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

from quotas.ingest import build_queue_samples
from quotas.ingest.metrics import build_metric_samples
from tests.quotas.test_ingest import build, fixture_nodes

SCRAPE = Path(__file__).resolve().parent.parent / "fixtures" / "kueue" / "metrics.sample.prom"
LINE = re.compile(r"^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')
GPU = "nvidia.com/gpu"
# answer name -> (metric, the labels its query keeps): what Prometheus would answer to
# quotas.constants.KUEUE_QUERIES over this one scrape.
QUERIES = {
    "nominal": ("kueue_cluster_queue_nominal_quota", ("cluster_queue", "cohort", "flavor")),
    "borrowing_limit": (
        "kueue_cluster_queue_borrowing_limit",
        ("cluster_queue", "cohort", "flavor"),
    ),
    "lending_limit": ("kueue_cluster_queue_lending_limit", ("cluster_queue", "cohort", "flavor")),
    "usage": ("kueue_cluster_queue_resource_usage", ("cluster_queue", "cohort", "flavor")),
    "reservation": (
        "kueue_cluster_queue_resource_reservation",
        ("cluster_queue", "cohort", "flavor"),
    ),
    "resource_pending": ("kueue_cluster_queue_resource_pending", ("cluster_queue",)),
    "admitted_workloads": ("kueue_admitted_active_workloads", ("cluster_queue",)),
    "info": ("kueue_cluster_queue_info", ("cluster_queue", "parent_cohort", "root_cohort")),
}


def scrape_answers(text: str) -> dict[str, list[dict]]:
    series = []
    for line in text.splitlines():
        found = LINE.match(line)
        if found:
            series.append((found["name"], dict(LABEL.findall(found["labels"])), found["value"]))
    answers: dict[str, list[dict]] = {}
    for answer, (metric, keep) in QUERIES.items():
        items = []
        for name, labels, value in series:
            if name != metric or labels.get("replica_role") == "follower":
                continue
            if "resource" in labels and labels["resource"] != GPU:
                continue
            items.append({"metric": {k: labels.get(k, "") for k in keep}, "value": [0, value]})
        answers[answer] = items
    pending = defaultdict(float)
    for name, labels, value in series:
        if name == "kueue_pending_workloads":
            pending[labels["cluster_queue"]] += float(value)
    answers["pending_workloads"] = [
        {"metric": {"cluster_queue": queue}, "value": [0, str(count)]}
        for queue, count in pending.items()
    ]
    return answers


@pytest.fixture
def answers() -> dict[str, list[dict]]:
    return scrape_answers(SCRAPE.read_text())


def test_metric_samples_match_the_samples_of_clusterqueue_status(answers):
    # given: the API server's objects and Kueue's scrape of the same moment
    batch = build("v1beta2", nodes=fixture_nodes())
    api = {(r.cluster_queue_name, r.flavor_name): r for r in build_queue_samples(batch)}
    order = {
        cq.meta.name: [
            q.flavor_name for q in sorted(cq.quotas, key=lambda q: q.position) if q.resource == GPU
        ]
        for cq in batch.cluster_queues
    }
    pools = {("research", "a100"): Decimal(8)}

    # when
    made = build_metric_samples(answers, flavor_order=order, cohort_quota=pools)

    # then: the same rows, figure by figure
    metric = {(r.cluster_queue_name, r.flavor_name): r for r in made.samples}
    assert set(metric) == set(api)
    for key, expected in api.items():
        got = metric[key]
        for figure in (
            "total",
            "reserved",
            "borrowed",
            "lent",
            "nominal",
            "borrowing_limit",
            "lending_limit",
            "pending_demand",
            "pending_workloads",
        ):
            assert getattr(got, figure) == getattr(expected, figure), (key, figure)
    assert made.stats.skipped == 0


def test_borrowed_is_usage_above_nominal_per_flavor(answers):
    made = build_metric_samples(answers)
    borrowed = {
        (r.cluster_queue_name, r.flavor_name): r.borrowed for r in made.samples if r.borrowed
    }
    # README of the fixtures: team-a and batch each borrow 4 H100.
    assert borrowed == {("team-a", "h100"): Decimal(4), ("batch", "h100"): Decimal(4)}


def test_an_unset_limit_reads_as_none_and_a_standalone_queue_has_no_cohort():
    def item(queue: str, value: str, cohort: str = "") -> dict:
        labels = {"cluster_queue": queue, "cohort": cohort, "flavor": "h100"}
        return {"metric": labels, "value": [0, value]}

    made = build_metric_samples(
        {
            "nominal": [item("solo", "8")],
            "borrowing_limit": [item("solo", "+Inf")],
            "lending_limit": [item("solo", "+Inf")],
            "usage": [item("solo", "3")],
            "info": [{"metric": {"cluster_queue": "solo", "parent_cohort": ""}, "value": [0, "1"]}],
        }
    )

    (row,) = made.samples
    assert (row.borrowing_limit, row.lending_limit) == (None, None)
    assert (row.nominal, row.total, row.reserved, row.borrowed) == (8, 3, 3, 0)
    assert made.cohorts == {"solo": ""}


def test_bad_series_are_skipped_and_counted_never_raised():
    made = build_metric_samples(
        {
            "nominal": [
                {"metric": {"flavor": "h100"}, "value": [0, "8"]},
                {"metric": {"cluster_queue": "a", "flavor": "h100"}, "value": [0, "eight"]},
                {"metric": {"cluster_queue": "b", "flavor": "h100"}, "value": [0, "NaN"]},
                "nonsense",
            ]
        }
    )

    assert made.samples == []
    assert made.stats.skip_reasons == {
        "kueue_missing_labels": 1,
        "kueue_malformed_value": 1,
        "kueue_malformed_item": 1,
        "kueue_nan": 1,
    }
