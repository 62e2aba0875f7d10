"""A range answer read series by series (``read_range``) gives each window the figures that its
vector items give (``split_matrix`` -> ``route_answers`` -> ``read_window``), skips included."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.ingest import IngestStats, split_matrix
from quotas import constants as k
from quotas.ingest.metric_range import read_range
from quotas.ingest.metrics import build_metric_samples, read_window, route_answers, samples_of

TIMES = (60.0, 120.0, 180.0)
PER_FLAVOR = (
    k.KUEUE_METRIC_NOMINAL,
    k.KUEUE_METRIC_BORROWING_LIMIT,
    k.KUEUE_METRIC_LENDING_LIMIT,
    k.KUEUE_METRIC_USAGE,
    k.KUEUE_METRIC_RESERVATION,
)
PER_QUEUE = (
    k.KUEUE_METRIC_RESOURCE_PENDING,
    k.KUEUE_METRIC_PENDING_WORKLOADS,
    k.KUEUE_METRIC_ADMITTED_WORKLOADS,
)
# Quotas, usages and the values a gauge may carry that are not plain numbers.
values = st.sampled_from(["0", "4", "8", "16", "2.5", "+Inf", "NaN", "-Inf", "x", None])
queues = st.sampled_from(["cq-a", "cq-b", "cq-c", ""])
cohorts = st.sampled_from(["team", "other", ""])


def _points(draw_values: list) -> list:
    return [[ts, value] for ts, value in zip(TIMES, draw_values, strict=False) if value != "skip"]


point_values = st.lists(st.one_of(values, st.just("skip")), min_size=1, max_size=len(TIMES))


@st.composite
def per_flavor_series(draw):
    labels = {
        "__name__": draw(st.sampled_from(PER_FLAVOR)),
        "cluster_queue": draw(queues),
        "cohort": draw(cohorts),
        "flavor": draw(st.sampled_from(["a100", "h100", ""])),
    }
    resource = draw(st.sampled_from([None, "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "bogus"]))
    if resource is not None:
        labels["resource"] = resource
    return {"metric": labels, "values": _points(draw(point_values))}


@st.composite
def per_queue_series(draw):
    labels = {"__name__": draw(st.sampled_from(PER_QUEUE)), "cluster_queue": draw(queues)}
    if labels["__name__"] == k.KUEUE_METRIC_PENDING_WORKLOADS:
        labels["status"] = draw(st.sampled_from(["active", "inadmissible"]))
    return {"metric": labels, "values": _points(draw(point_values))}


@st.composite
def info_series(draw):
    labels = {"cluster_queue": draw(queues), "parent_cohort": draw(cohorts), "root_cohort": "r"}
    return {"metric": labels, "values": _points(draw(point_values))}


malformed = st.sampled_from(
    [
        "not an item",
        {"metric": "no labels", "values": []},
        {"metric": {"__name__": k.KUEUE_METRIC_NOMINAL}, "values": "none"},
        {"metric": {"__name__": k.KUEUE_METRIC_USAGE}, "values": [[60.0], ["t", "1"], [True, 1]]},
    ]
)


@st.composite
def range_answers(draw):
    return {
        "per_flavor": draw(st.lists(st.one_of(per_flavor_series(), malformed), max_size=8)),
        "per_queue": draw(st.lists(per_queue_series(), max_size=6)),
        "info": draw(st.lists(info_series(), max_size=3)),
    }


def _by_window(answers: dict[str, list]) -> tuple[dict[float, object], IngestStats]:
    stats = IngestStats()
    split = {name: split_matrix(items, stats) for name, items in answers.items()}
    stamps = sorted({ts for by_ts in split.values() for ts in by_ts})
    return {
        ts: read_window(route_answers({name: by_ts.get(ts, []) for name, by_ts in split.items()}))
        for ts in stamps
    }, stats


def _figures(figures) -> dict:
    found = dataclasses.asdict(figures)
    stats = found.pop("stats")
    found["read"], found["skips"] = stats["records_read"], dict(stats["skip_reasons"])
    return found


@settings(max_examples=150, deadline=None)
@given(range_answers())
def test_each_window_reads_as_its_vector_items_read(answers):
    expected, expected_stats = _by_window(answers)
    stats = IngestStats()

    found = read_range(answers, stats)

    assert {ts: _figures(f) for ts, f in found.items()} == {
        ts: _figures(f) for ts, f in expected.items()
    }
    assert stats.skip_reasons == expected_stats.skip_reasons


def test_a_window_s_samples_are_those_of_its_vector_items():
    labels = {"cluster_queue": "cq-a", "cohort": "team", "flavor": "a100"}
    answers = {
        "per_flavor": [
            {"metric": {"__name__": k.KUEUE_METRIC_NOMINAL, **labels}, "values": [[60, "8"]]},
            {"metric": {"__name__": k.KUEUE_METRIC_USAGE, **labels}, "values": [[60, "12"]]},
            {
                "metric": {"__name__": k.KUEUE_METRIC_NOMINAL, **labels, "cluster_queue": "cq-b"},
                "values": [[60, "16"]],
            },
        ],
        "per_queue": [
            {
                "metric": {"__name__": k.KUEUE_METRIC_PENDING_WORKLOADS, "cluster_queue": "cq-a"},
                "values": [[60, "3"]],
            }
        ],
    }
    vector = {
        name: [{"metric": i["metric"], "value": i["values"][0]} for i in items]
        for name, items in answers.items()
    }

    samples = samples_of(read_range(answers)[60.0]).samples

    assert samples == build_metric_samples(route_answers(vector)).samples
    borrowed = {s.cluster_queue_name: (s.borrowed, s.lent) for s in samples}
    assert borrowed == {"cq-a": (4, 0), "cq-b": (0, 4)}
