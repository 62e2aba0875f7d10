"""fleet.ingest: Prometheus answers (real-format fixtures in tests/fixtures/dcgm) -> rows.

Expected figures come from tests/fixtures/dcgm/README.md ("Expected derived figures"), which were
checked against a real Prometheus; every figure here is recomputed from the rows.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import mean

import pytest

from core.timewindows import Window
from fleet.choices import ActivitySource, PodLabelStyle
from fleet.constants import DCGM_METRICS
from fleet.ingest import (
    IngestError,
    IngestStats,
    WindowInput,
    build_window,
    detect_label_style,
    parse_query_response,
    split_matrix,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "dcgm"
H100 = "gpu-node-h100-01"
A100 = "gpu-node-a100-mig-01"
PENDING_POD = "resnet-eval-0-q7z4t"
# The instant query's evaluation time and the range query's end (2026-06-15 10:00Z).
FIXTURE_END = datetime(2026, 6, 15, 10, 0, tzinfo=UTC)
WINDOW = Window(FIXTURE_END - timedelta(minutes=1), FIXTURE_END)
WINDOW_30M = Window(FIXTURE_END - timedelta(minutes=30), FIXTURE_END)


# --- Fixture readers ----------------------------------------------------------------------------

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def parse_exposition(text: str) -> list[tuple[str, dict[str, str], str]]:
    """(name, labels, value) of every sample in a Prometheus text exposition."""
    samples = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, line
        labels = {}
        for key, raw in _LABEL.findall(match.group("labels") or ""):
            labels[key] = raw.replace(r"\"", '"').replace(r"\n", "\n").replace("\\\\", "\\")
        samples.append((match.group("name"), labels, match.group("value")))
    return samples


def vector(samples, ts: float = FIXTURE_END.timestamp()) -> list[dict]:
    return [{"metric": {"__name__": n, **labels}, "value": [ts, v]} for n, labels, v in samples]


def ksm_inputs(join_running: bool = True) -> tuple[list[dict], list[dict]]:
    """GPU requests and kube_pod_labels as the collector's PromQL returns them.

    With ``join_running`` the requests are joined to kube_pod_status_phase{phase="Running"} == 1
    on (namespace, pod, uid), like the README's query; without, pending pods stay in.
    """
    samples = parse_exposition((FIXTURES / "kube-state-metrics.txt").read_text())
    running = {
        (labels["namespace"], labels["pod"], labels["uid"])
        for name, labels, value in samples
        if name == "kube_pod_status_phase" and labels["phase"] == "Running" and float(value) == 1
    }
    requests = [
        (name, labels, value)
        for name, labels, value in samples
        if name == "kube_pod_container_resource_requests"
        and re.fullmatch(r"nvidia_com_gpu|nvidia_com_mig_.*", labels["resource"])
        and (not join_running or (labels["namespace"], labels["pod"], labels["uid"]) in running)
    ]
    pod_labels = [s for s in samples if s[0] == "kube_pod_labels"]
    return vector(requests), vector(pod_labels)


def instant_items() -> list[dict]:
    return parse_query_response((FIXTURES / "prometheus-query-response.json").read_bytes())


def range_items() -> list[dict]:
    text = (FIXTURES / "prometheus-query-range-response.json").read_text()
    return parse_query_response(text, expect="matrix")


EXPORTERS = ("exporter-metrics.txt", "exporter-metrics-mig.txt")


def exporter_items(names: tuple[str, ...] = EXPORTERS, exported: bool = False) -> dict:
    """DCGM_METRICS key -> vector items from a direct exporter scrape (plain pod labels).

    ``exported`` renames them the way Prometheus does with honor_labels: false and adds the
    exporter pod's own target labels.
    """
    by_field = {field: key for key, field in DCGM_METRICS.items()}
    result: dict[str, list[dict]] = defaultdict(list)
    samples = [s for name in names for s in parse_exposition((FIXTURES / name).read_text())]
    for metric_name, labels, value in samples:
        if metric_name not in by_field:
            continue
        labels = dict(labels)
        if exported:
            for plain in ("namespace", "pod", "container"):
                if plain in labels:
                    labels[f"exported_{plain}"] = labels.pop(plain)
            labels.update(
                namespace="gpu-operator",
                pod="nvidia-dcgm-exporter-7xk2p",
                container="nvidia-dcgm-exporter",
                instance="10.244.3.17:9400",
            )
        result[by_field[metric_name]].extend(vector([(metric_name, labels, value)]))
    return dict(result)


def fixture_input(**overrides) -> WindowInput:
    """The instant fixture (SM_ACTIVE) with kube-state-metrics, as one window."""
    requests, pod_labels = ksm_inputs()
    values = {
        "window": WINDOW,
        "dcgm_avg": {"sm_active": instant_items()},
        "gpu_requests": requests,
        "pod_labels": pod_labels,
    }
    values.update(overrides)
    return WindowInput(**values)


def avg_over_time_inputs() -> tuple[dict, dict]:
    """avg_over_time / count_over_time over the range fixture's 31 points (Prometheus 2.x)."""
    avg, count = [], []
    for item in range_items():
        points = [float(v) for _, v in item["values"]]
        avg.append(
            {"metric": item["metric"], "value": [FIXTURE_END.timestamp(), repr(mean(points))]}
        )
        count.append(
            {"metric": item["metric"], "value": [FIXTURE_END.timestamp(), str(len(points))]}
        )
    return {"sm_active": avg}, {"sm_active": count}


def item(labels: dict, value, ts: float = FIXTURE_END.timestamp()) -> dict:
    return {"metric": dict(labels), "value": [ts, value]}


def gpu_labels(index: int, **extra) -> dict:
    labels = {
        "gpu": str(index),
        "UUID": f"GPU-test-{index:04d}",
        "pci_bus_id": f"00000000:{index:02X}:00.0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "node-t",
    }
    labels.update(extra)
    return labels


def rows_by_key(batch):
    return {(r.gpu_key, r.namespace, r.pod): r for r in batch.usage}


# --- The fixture's expected figures --------------------------------------------------------------


def test_it_counts_whole_gpus_allocated_per_namespace_from_running_pods():
    batch = build_window(fixture_input())

    whole = Counter()
    for row in batch.usage:
        if row.allocated and not row.gi_id:
            whole[row.namespace] += row.gpus
    assert dict(whole) == {"team-a": 4, "team-b": 2}
    requested = Counter()
    for alloc in batch.allocations:
        if alloc.resource == "nvidia.com/gpu":
            requested[alloc.namespace] += alloc.gpus
    assert dict(requested) == {"team-a": 4, "team-b": 2}


def test_it_counts_mig_slices_per_namespace_by_profile():
    batch = build_window(fixture_input())

    mig = Counter(
        (a.namespace, a.resource)
        for a in batch.allocations
        if a.resource.startswith("nvidia.com/mig-")
    )
    assert mig == {
        ("team-a", "nvidia.com/mig-3g.40gb"): 1,
        ("team-a", "nvidia.com/mig-1g.10gb"): 1,
        ("team-b", "nvidia.com/mig-2g.20gb"): 1,
        ("team-b", "nvidia.com/mig-1g.10gb"): 1,
    }
    slices = {(a.namespace, a.pod): a.gpus * 7 for a in batch.allocations if "mig" in a.resource}
    assert slices[("team-a", "embed-server-5f7c8d9b6-r8t2n")] == pytest.approx(3)
    assert slices[("team-b", "feature-extract-0")] == pytest.approx(2)
    # The usage rows of the MIG node add up to the same slices: 3 + 1 (team-a), 2 + 1 (team-b).
    usage = Counter()
    for row in batch.usage:
        if row.allocated and row.gi_id:
            usage[row.namespace] += row.gpus
    assert usage["team-a"] == pytest.approx(4 / 7)
    assert usage["team-b"] == pytest.approx(3 / 7)


def test_it_gives_the_readme_mean_sm_active_per_namespace():
    batch = build_window(fixture_input())

    def mean_by_namespace(host=None):
        values = defaultdict(list)
        for row in batch.usage:
            if row.allocated and (host is None or row.host == host):
                values[row.namespace].append(row.activity)
        return {ns: mean(v) for ns, v in values.items()}

    assert mean_by_namespace(H100) == pytest.approx({"team-a": 0.53841575, "team-b": 0.6236055})
    assert mean_by_namespace(A100) == pytest.approx({"team-a": 0.156203, "team-b": 0.337751})
    assert mean_by_namespace() == pytest.approx({"team-a": 0.4110115, "team-b": 0.48067825})


def test_it_gives_the_h100_node_mean_of_allocated_and_of_all_gpus():
    batch = build_window(fixture_input())

    h100 = [r for r in batch.usage if r.host == H100]
    assert len(h100) == 8
    assert mean(r.activity for r in h100 if r.allocated) == pytest.approx(0.566812, abs=1e-6)
    assert mean(r.activity for r in h100) == pytest.approx(0.425109, abs=1e-6)
    # Allocation rate 6/8: capacity is every GPU once, allocation the held ones.
    assert sum(r.gpus for r in h100 if r.allocated) / sum(r.capacity_gpus for r in h100) == 0.75


def test_it_finds_the_two_idle_but_allocated_series_over_30_minutes():
    avg, count = avg_over_time_inputs()
    batch = build_window(fixture_input(window=WINDOW_30M, dcgm_avg=avg, dcgm_count=count))

    idle = sorted(
        (r.host, r.uuid, r.gi_id, r.namespace, r.pod)
        for r in batch.usage
        if r.allocated and r.activity is not None and r.activity < 0.01
    )
    assert [(host, gi, pod) for host, _, gi, _, pod in idle] == [
        (A100, "9", "notebook-bob-0"),
        (H100, "", "notebook-alice-0"),
    ]
    assert idle[1][1].startswith("GPU-e07a4c35-")
    assert idle[0][1].startswith("GPU-4c8e2a6d-")


def test_it_gives_the_readme_30_minute_averages_with_sample_counts():
    avg, count = avg_over_time_inputs()
    batch = build_window(
        fixture_input(window=WINDOW_30M, dcgm_avg=avg, dcgm_count=count, expected_samples=31)
    )

    by_gpu = {(r.host, r.uuid[:12], r.gi_id): round(r.activity, 6) for r in batch.usage}
    assert by_gpu[(H100, "GPU-3f1c9a2e", "")] == 0.869351
    assert by_gpu[(H100, "GPU-a94e0d17", "")] == 0.861326
    assert by_gpu[(H100, "GPU-5d2b8e90", "")] == 0.421766
    assert by_gpu[(H100, "GPU-1b6f3d82", "")] == 0.638723
    assert by_gpu[(H100, "GPU-c8d2e5a1", "")] == 0.609343
    assert by_gpu[(A100, "GPU-4c8e2a6d", "2")] == 0.317398
    assert by_gpu[(A100, "GPU-4c8e2a6d", "3")] == 0.545928
    assert by_gpu[(A100, "GPU-d5a1f7c3", "7")] == 0.127366
    busy = {0.869351, 0.861326, 0.421766, 0.638723, 0.609343, 0.317398, 0.545928, 0.127366}
    assert all(value == 0 for value in by_gpu.values() if value not in busy)
    assert {(r.samples, r.expected_samples) for r in batch.usage} == {(31, 31)}


def test_it_splits_a_matrix_into_one_window_per_timestamp():
    per_ts = split_matrix(range_items())

    assert len(per_ts) == 31
    assert list(per_ts) == sorted(per_ts)
    assert {len(items) for items in per_ts.values()} == {19}
    assert min(per_ts) == datetime(2026, 6, 15, 9, 30, tzinfo=UTC).timestamp()
    # The last point equals the instant answer, series by series.
    last = build_window(fixture_input(dcgm_avg={"sm_active": per_ts[max(per_ts)]}))
    instant = build_window(fixture_input())
    assert [(r.gpu_key, r.pod, r.activity) for r in last.usage] == [
        (r.gpu_key, r.pod, r.activity) for r in instant.usage
    ]


def test_it_finds_the_idle_allocated_gpus_window_by_window_from_the_matrix():
    never_busy: dict[tuple, bool] = {}
    for ts, items in split_matrix(range_items()).items():
        end = datetime.fromtimestamp(ts, tz=UTC)
        batch = build_window(
            fixture_input(
                window=Window(end - timedelta(minutes=1), end), dcgm_avg={"sm_active": items}
            )
        )
        for row in batch.usage:
            if row.allocated:
                key = (row.gpu_key, row.pod)
                never_busy[key] = never_busy.get(key, True) and row.activity == 0

    assert sorted(pod for (_, pod), idle in never_busy.items() if idle) == [
        "notebook-alice-0",
        "notebook-bob-0",
    ]


def test_it_does_not_count_the_pending_pod_as_allocated():
    # Requests not joined to the Running phase: the pending pod's node="" item is in the input.
    requests, pod_labels = ksm_inputs(join_running=False)
    assert any(i["metric"]["pod"] == PENDING_POD for i in requests)

    batch = build_window(fixture_input(gpu_requests=requests, pod_labels=pod_labels))

    assert PENDING_POD not in {a.pod for a in batch.allocations}
    assert PENDING_POD not in {r.pod for r in batch.usage}
    assert batch.stats.pending_requests == 1
    assert batch.stats.skipped == 0
    team_b = sum(
        r.gpus for r in batch.usage if r.allocated and r.namespace == "team-b" and not r.gi_id
    )
    assert team_b == 2


def test_it_keys_mig_instances_on_uuid_and_gpu_instance_id():
    batch = build_window(fixture_input())

    mig = [g for g in batch.gpus if g.host == A100]
    assert len(mig) == 11
    assert len({g.key for g in batch.gpus}) == 19
    # GPU_I_ID 9 exists on both GPUs: two instances, not one.
    assert sorted(g.uuid[:12] for g in mig if g.gi_id == "9") == ["GPU-4c8e2a6d", "GPU-d5a1f7c3"]
    slices = Counter()
    for g in mig:
        slices[g.uuid] += g.slices
    assert set(slices.values()) == {7}
    assert {g.mig_profile: g.slices for g in mig} == {"3g.40gb": 3, "2g.20gb": 2, "1g.10gb": 1}
    assert all(g.slices == 7 and g.mig_profile == "" for g in batch.gpus if g.host == H100)


def test_it_marks_gpus_without_pod_labels_unallocated_and_keeps_their_capacity():
    batch = build_window(fixture_input())

    free = [r for r in batch.usage if not r.allocated]
    assert len(free) == 2 + 1 + 6  # two H100s, GI 10 on GPU 0, GIs 8-13 on GPU 1
    assert all(r.namespace == r.pod == "" and r.activity == 0 for r in free)
    assert sum(r.capacity_gpus for r in batch.usage) == pytest.approx(8 + 2)


def test_it_takes_pod_labels_from_exported_labels_and_ignores_the_exporter_pod():
    batch = build_window(fixture_input())

    assert batch.label_style_used == PodLabelStyle.EXPORTED
    assert "gpu-operator" not in {r.namespace for r in batch.usage}
    assert not any(r.pod.startswith("nvidia-dcgm-exporter") for r in batch.usage)
    assert {r.container for r in batch.usage if r.pod == "llm-pretrain-0-8vw5d"} == {"trainer"}


def test_it_reads_plain_pod_labels_from_a_direct_scrape():
    requests, pod_labels = ksm_inputs()
    plain = build_window(
        WindowInput(
            window=WINDOW, dcgm_avg=exporter_items(), gpu_requests=requests, pod_labels=pod_labels
        )
    )
    exported = build_window(
        WindowInput(
            window=WINDOW,
            dcgm_avg=exporter_items(exported=True),
            gpu_requests=requests,
            pod_labels=pod_labels,
        )
    )

    assert plain.label_style_used == PodLabelStyle.PLAIN
    assert exported.label_style_used == PodLabelStyle.EXPORTED

    def summary(batch):
        return [(r.gpu_key, r.namespace, r.pod, r.container, r.allocated) for r in batch.usage]

    assert summary(plain) == summary(exported)
    assert not any(r.gpu_key == "" for r in plain.usage)
    whole = Counter()
    for row in plain.usage:
        if row.allocated and not row.gi_id:
            whole[row.namespace] += row.gpus
    assert dict(whole) == {"team-a": 4, "team-b": 2}


def test_it_honours_a_configured_label_style_over_detection():
    # Forcing "plain" on exported data names the exporter pod: the setting is obeyed as given.
    batch = build_window(fixture_input(label_style=PodLabelStyle.PLAIN))

    assert batch.label_style_used == PodLabelStyle.PLAIN
    assert {r.pod for r in batch.usage if r.host == H100} == {"nvidia-dcgm-exporter-7xk2p"}


def test_detect_label_style_needs_an_exported_pod_label():
    assert detect_label_style(instant_items()) == PodLabelStyle.EXPORTED
    assert detect_label_style(exporter_items()["sm_active"]) == PodLabelStyle.PLAIN
    assert detect_label_style([{"metric": {"exported_namespace": "x"}}, "junk"]) == "exported"
    assert detect_label_style([]) == PodLabelStyle.PLAIN


def test_it_accepts_lowercase_hostname_as_the_host_label():
    items = instant_items()
    lowered = copy.deepcopy(items)
    for entry in lowered:
        entry["metric"]["hostname"] = entry["metric"].pop("Hostname")

    upper = build_window(fixture_input(dcgm_avg={"sm_active": items}))
    lower = build_window(fixture_input(dcgm_avg={"sm_active": lowered}))

    assert [(r.gpu_key, r.pod, r.activity) for r in lower.usage] == [
        (r.gpu_key, r.pod, r.activity) for r in upper.usage
    ]
    assert {g.host for g in lower.gpus} == {H100, A100}


def test_it_falls_back_to_gr_engine_active_when_sm_active_is_off():
    metrics = exporter_items()
    gr_engine = {
        (entry["metric"]["UUID"], entry["metric"].get("GPU_I_ID", "")): float(entry["value"][1])
        for entry in metrics["gr_engine_active"]
    }
    del metrics["sm_active"]  # dcgm-exporter's default counters file

    batch = build_window(WindowInput(window=WINDOW, dcgm_avg=metrics))

    assert {r.activity_source for r in batch.usage} == {ActivitySource.GR_ENGINE_ACTIVE}
    assert len(gr_engine) == 19
    assert {(r.uuid, r.gi_id): r.activity for r in batch.usage} == gr_engine
    assert all(r.sm_active is None for r in batch.usage)
    # The other metrics land in their columns.
    row = next(r for r in batch.usage if r.pod == "llm-infer-6b7d9c5f8-k2m4x")
    assert row.gpu_util == 97
    assert row.fb_used_mib == 72841


def test_it_prefers_sm_active_per_series_and_records_the_source():
    metrics = exporter_items(names=("exporter-metrics.txt",))
    # SM_ACTIVE only for GPU 0: the others fall back, GPU 0 does not.
    metrics["sm_active"] = [e for e in metrics["sm_active"] if e["metric"]["gpu"] == "0"]

    batch = build_window(WindowInput(window=WINDOW, dcgm_avg=metrics))

    sources = {r.uuid[:12]: r.activity_source for r in batch.usage}
    assert sources.pop("GPU-3f1c9a2e") == ActivitySource.SM_ACTIVE
    assert set(sources.values()) == {ActivitySource.GR_ENGINE_ACTIVE}
    gpu0 = next(r for r in batch.usage if r.uuid.startswith("GPU-3f1c9a2e"))
    assert gpu0.activity == gpu0.sm_active == 0.871234
    assert gpu0.gr_engine_active is not None and gpu0.gr_engine_active != gpu0.activity


def test_it_reports_no_data_rather_than_idle_when_a_gpu_has_no_activity_sample():
    labels = gpu_labels(0, exported_namespace="ns", exported_pod="p")
    batch = build_window(
        WindowInput(window=WINDOW, dcgm_avg={"fb_used": [item(labels, "1024")]}, expected_samples=4)
    )

    (row,) = batch.usage
    assert row.activity is None
    assert row.activity_source == ActivitySource.NONE
    assert row.samples == 0 and row.expected_samples == 4
    assert row.fb_used_mib == 1024
    assert row.allocated


@pytest.mark.parametrize("raw", ["NaN", "+Inf", "-Inf"])
def test_it_skips_non_finite_samples_and_keeps_the_gpu_as_no_data(raw):
    labels = gpu_labels(1)
    batch = build_window(
        WindowInput(
            window=WINDOW,
            dcgm_avg={
                "sm_active": [item(labels, raw), item(gpu_labels(2), "0.5")],
                "gr_engine_active": [item(labels, raw)],
            },
        )
    )

    assert batch.stats.nonfinite_skipped == 2
    assert batch.stats.skipped == 0
    rows = {r.uuid: r for r in batch.usage}
    assert rows["GPU-test-0001"].activity is None
    assert rows["GPU-test-0001"].sm_active is None
    assert rows["GPU-test-0001"].capacity_gpus == 1
    assert rows["GPU-test-0002"].activity == 0.5


def test_it_skips_malformed_items_and_keeps_the_rest():
    good = item(gpu_labels(1), "0.25")
    items = [
        "not an object",
        {"value": [1, "0.5"]},  # no metric
        {"metric": "x", "value": [1, "0.5"]},  # metric not an object
        {"metric": gpu_labels(2)},  # no value
        {"metric": gpu_labels(3), "value": "0.5"},  # value not a list
        {"metric": gpu_labels(4), "value": [1]},  # value too short
        {"metric": gpu_labels(5), "value": [1, None]},  # wrong type
        {"metric": gpu_labels(6), "value": [1, True]},  # a boolean is not a number
        {"metric": gpu_labels(7), "value": [1, "zero"]},  # unparsable
        good,
    ]

    batch = build_window(WindowInput(window=WINDOW, dcgm_avg={"sm_active": items}))

    assert [r.uuid for r in batch.usage] == ["GPU-test-0001"]
    assert batch.stats.records_read == 10
    assert batch.stats.skipped == 9
    assert batch.stats.skip_reasons == {
        "malformed_item": 1,
        "missing_metric": 2,
        "malformed_value": 5,
        "unparsable_value": 1,
    }


def test_it_skips_series_without_uuid_or_host():
    no_uuid = gpu_labels(1)
    del no_uuid["UUID"]
    no_host = gpu_labels(2)
    del no_host["Hostname"]
    bad_profile = gpu_labels(3, GPU_I_ID="4", GPU_I_PROFILE="weird")

    batch = build_window(
        WindowInput(
            window=WINDOW,
            dcgm_avg={
                "sm_active": [
                    item(no_uuid, "0.1"),
                    item(no_host, "0.1"),
                    item(bad_profile, "0.1"),
                    item(gpu_labels(4), "0.1"),
                ]
            },
        )
    )

    assert [r.uuid for r in batch.usage] == ["GPU-test-0004"]
    assert batch.stats.skip_reasons == {
        "missing_uuid": 1,
        "missing_host": 1,
        "invalid_mig_profile": 1,
    }


def test_it_keeps_one_of_duplicate_series_whatever_their_order():
    first = item(gpu_labels(1, instance="a:9400", exported_namespace="ns", exported_pod="p"), "0.1")
    second = item(
        gpu_labels(1, instance="b:9400", exported_namespace="ns", exported_pod="p"), "0.9"
    )

    forward = build_window(WindowInput(window=WINDOW, dcgm_avg={"sm_active": [first, second]}))
    backward = build_window(WindowInput(window=WINDOW, dcgm_avg={"sm_active": [second, first]}))

    assert len(forward.usage) == len(backward.usage) == 1
    assert forward.usage[0].activity == backward.usage[0].activity
    assert forward.stats.skip_reasons == {"duplicate_series": 1}
    assert backward.stats.skipped == 1


def test_it_counts_duplicate_kube_state_metrics_requests_once():
    requests, pod_labels = ksm_inputs()
    doubled = requests + [
        {"metric": {**i["metric"], "instance": "ksm-replica-2"}, "value": i["value"]}
        for i in requests
    ]

    batch = build_window(fixture_input(gpu_requests=doubled))

    assert batch.stats.skip_reasons == {"duplicate_series": len(requests)}
    assert sum(a.gpus for a in batch.allocations if a.resource == "nvidia.com/gpu") == 6


def test_it_splits_a_time_sliced_gpu_between_its_pods_without_double_counting():
    shared = [
        item(gpu_labels(0, exported_namespace="team-a", exported_pod="pod-b"), "0.4"),
        item(gpu_labels(0, exported_namespace="team-a", exported_pod="pod-a"), "0.4"),
        item(gpu_labels(1), "0"),
    ]

    batch = build_window(WindowInput(window=WINDOW, dcgm_avg={"sm_active": shared}))

    rows = [r for r in batch.usage if r.uuid == "GPU-test-0000"]
    assert [(r.pod, r.gpus, r.shared) for r in rows] == [("pod-a", 0.5, True), ("pod-b", 0.5, True)]
    assert sum(r.capacity_gpus for r in rows) == 1
    assert sum(r.gpus for r in rows) == 1
    assert [r.capacity_gpus > 0 for r in rows].count(True) == 1
    assert {g.uuid: g.time_sliced for g in batch.gpus} == {
        "GPU-test-0000": True,
        "GPU-test-0001": False,
    }
    assert sum(r.capacity_gpus for r in batch.usage) == 2


def test_a_gpu_seen_with_and_without_a_pod_in_one_window_counts_as_held():
    # A pod started mid-window: avg_over_time returns a bare series and a pod series.
    items = [
        item(gpu_labels(0), "0"),
        item(gpu_labels(0, exported_namespace="ns", exported_pod="p"), "0.7"),
    ]

    batch = build_window(WindowInput(window=WINDOW, dcgm_avg={"sm_active": items}))

    (row,) = batch.usage
    assert (row.pod, row.allocated, row.gpus, row.capacity_gpus, row.shared) == (
        "p",
        True,
        1,
        1,
        False,
    )


def test_allocated_gpus_without_dcgm_series_get_a_no_telemetry_row():
    requests, pod_labels = ksm_inputs()
    # The exporter on the H100 node lost GPU 1's series: the 2-GPU pod shows one.
    items = [i for i in instant_items() if not i["metric"]["UUID"].startswith("GPU-a94e0d17")]

    batch = build_window(fixture_input(dcgm_avg={"sm_active": items}))

    missing = [r for r in batch.usage if r.gpu_key == ""]
    assert [(r.namespace, r.pod, r.gpus, r.allocated, r.activity) for r in missing] == [
        ("team-a", "llm-pretrain-0-8vw5d", 1, True, None)
    ]
    # The node still has series, so its GPUs' capacity is counted there, not twice.
    assert missing[0].capacity_gpus == 0
    assert missing[0].node_name == H100
    assert missing[0].activity_source == ActivitySource.NONE
    pretrain = [r for r in batch.usage if r.pod == "llm-pretrain-0-8vw5d"]
    assert sum(r.gpus for r in pretrain) == 2


def test_a_node_without_any_dcgm_series_keeps_its_allocated_capacity():
    items = [i for i in instant_items() if i["metric"]["Hostname"] != H100]

    batch = build_window(fixture_input(dcgm_avg={"sm_active": items}))

    missing = {r.pod: r for r in batch.usage if r.gpu_key == ""}
    assert set(missing) == {
        "llm-pretrain-0-8vw5d",
        "llm-infer-6b7d9c5f8-k2m4x",
        "notebook-alice-0",
        "resnet-train-worker-0",
    }
    assert sum(r.gpus for r in missing.values()) == 6
    assert sum(r.capacity_gpus for r in missing.values()) == 6
    assert all(r.activity is None and r.allocated for r in missing.values())


def test_pods_on_dcgm_series_but_absent_from_requests_still_hold_their_gpus():
    batch = build_window(fixture_input(gpu_requests=[]))

    held = Counter()
    for alloc in batch.allocations:
        held[alloc.namespace] += alloc.gpus
    assert held["team-a"] == pytest.approx(4 + 4 / 7)
    assert held["team-b"] == pytest.approx(2 + 3 / 7)
    embed = next(a for a in batch.allocations if a.pod == "embed-server-5f7c8d9b6-r8t2n")
    assert embed.resource == "nvidia.com/mig-3g.40gb"
    assert embed.node_name == A100
    # kube_pod_labels still names the pod's uid.
    assert embed.pod_uid == "3a9d6e2b-5c1f-4e87-9b03-6d4f8a2c7e15"
    assert not any(r.gpu_key == "" for r in batch.usage)


def test_allocations_link_the_gpus_each_pod_was_seen_on():
    batch = build_window(fixture_input())

    pretrain = next(a for a in batch.allocations if a.pod == "llm-pretrain-0-8vw5d")
    assert pretrain.pod_uid == "6f2a9c1e-4b7d-4e3a-9f58-1c0d7e2b8a64"
    assert pretrain.node_name == H100
    assert pretrain.gpus == 2
    assert [k.split("/")[1][:12] for k in pretrain.gpu_keys] == ["GPU-3f1c9a2e", "GPU-a94e0d17"]
    assert len(batch.allocations) == 8


def test_it_takes_queue_names_from_kueue_pod_labels():
    requests, pod_labels = ksm_inputs()
    for entry in pod_labels:
        if entry["metric"]["pod"] == "notebook-alice-0":
            entry["metric"]["label_kueue_x_k8s_io_cluster_queue_name"] = "team-a-cq"
            entry["metric"]["label_kueue_x_k8s_io_local_queue_name"] = "notebooks"

    batch = build_window(fixture_input(pod_labels=pod_labels))

    alice = next(r for r in batch.usage if r.pod == "notebook-alice-0")
    assert (alice.cluster_queue_name, alice.local_queue_name) == ("team-a-cq", "notebooks")
    alloc = next(a for a in batch.allocations if a.pod == "notebook-alice-0")
    assert (alloc.cluster_queue_name, alloc.local_queue_name) == ("team-a-cq", "notebooks")
    others = {
        (r.cluster_queue_name, r.local_queue_name)
        for r in batch.usage
        if r.pod != "notebook-alice-0"
    }
    assert others == {("", "")}


def test_its_output_does_not_depend_on_the_order_of_the_answer():
    base = build_window(fixture_input())
    shuffled_items = instant_items()
    requests, pod_labels = ksm_inputs()
    rng = random.Random(7)
    rng.shuffle(shuffled_items)
    rng.shuffle(requests)
    rng.shuffle(pod_labels)

    shuffled = build_window(
        fixture_input(
            dcgm_avg={"sm_active": shuffled_items}, gpu_requests=requests, pod_labels=pod_labels
        )
    )

    assert shuffled.usage == base.usage
    assert shuffled.gpus == base.gpus
    assert shuffled.allocations == base.allocations
    assert [g.index for g in base.gpus if g.host == H100] == list(range(8))


def test_samples_default_to_one_when_counts_are_missing():
    batch = build_window(fixture_input())

    assert {r.samples for r in batch.usage} == {1}


def test_parse_query_response_rejects_unusable_answers():
    with pytest.raises(IngestError, match="not JSON"):
        parse_query_response(b"<html>502</html>")
    with pytest.raises(IngestError, match="bad_data"):
        parse_query_response({"status": "error", "errorType": "bad_data", "error": "parse error"})
    with pytest.raises(IngestError, match="expected 'matrix'"):
        parse_query_response(
            (FIXTURES / "prometheus-query-response.json").read_text(), expect="matrix"
        )
    with pytest.raises(IngestError, match="not a list"):
        parse_query_response({"status": "success", "data": {"resultType": "vector", "result": {}}})
    with pytest.raises(IngestError, match="scalar"):
        parse_query_response(
            {"status": "success", "data": {"resultType": "scalar", "result": [1, "1"]}}
        )
    with pytest.raises(IngestError):
        parse_query_response(json.dumps([1, 2]))


def test_split_matrix_skips_malformed_items_and_points():
    stats = IngestStats()
    items = [
        {"metric": {"a": "1"}, "values": [[60, "1"], [120, "2"], "junk", [180]]},
        {"metric": {"a": "2"}, "values": "junk"},
        {"values": [[60, "1"]]},
    ]

    per_ts = split_matrix(items, stats)

    assert {ts: [i["value"][1] for i in v] for ts, v in per_ts.items()} == {
        60.0: ["1"],
        120.0: ["2"],
    }
    assert stats.skip_reasons == {"malformed_matrix_point": 2, "malformed_matrix_item": 2}


def test_ingest_stats_merge_adds_counts_and_reasons():
    one = IngestStats(records_read=3, nonfinite_skipped=1)
    one.skip("missing_uuid")
    two = IngestStats(records_read=4)
    two.skip("missing_uuid", 2)
    two.skip("duplicate_series")

    merged = one.merge(two)

    assert (merged.records_read, merged.skipped, merged.nonfinite_skipped) == (7, 4, 1)
    assert merged.skip_reasons == {"missing_uuid": 3, "duplicate_series": 1}
