"""Deep backfill against the generated fleet in a real Prometheus (tests/fleet/conftest.py: a
2-GPU job, a GPU time-sliced between two pods, an idle GPU, a GPU with GR_ENGINE_ACTIVE only, a
NaN sample, a MIG GPU, a pod whose series lost their pod labels, a pod starting half-way, a
Pending pod): every rollup row of every scope must equal the one the per-window path gives
(``collect_metrics --start --end`` window by window, then rolled up), within 0.5 %, for every
figure; sharded or not; resumable; nothing written when Prometheus fails or answers garbage.
"""

from __future__ import annotations

import gc
import http.server
import json
import urllib.parse
import urllib.request
import weakref
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from typing import Any

import cramjam
import pytest
import time_machine
from django.core.management import call_command
from django.db import connection, transaction

from fleet.models import Cluster
from fleet.prometheus import PrometheusClient, PrometheusError
from ledger.choices import RollupScope
from ledger.deep import DeepBackfill, presence, remote, shards_for, workers
from ledger.deep.grain import GrainBuilder
from ledger.deep.queries import DeepQueries, shard_matchers
from ledger.models import GpuUsage, HourlyRollup, RollupHour
from ledger.rollup.row_figures import Thresholds
from ledger.rollup.sweep import due_hours
from tests.fleet.conftest import T0, WINDOW_SECONDS
from tests.http_serving import serving_thread

pytestmark = pytest.mark.django_db(transaction=True)

START, END = T0, T0 + timedelta(hours=2)
IDENTITY = ("scope", "key", "hour", "flavor", "gpu_model")
NOT_FIGURES = {"id", "cluster_id", "team_id", "cluster_queue_id", "workload_id", "updated_at"}
FIGURES = tuple(
    field.attname
    for field in HourlyRollup._meta.concrete_fields
    if field.attname not in {*IDENTITY, *NOT_FIGURES, "created_at"}
)
TOLERANCE = 0.005


@pytest.fixture(autouse=True)
def _collection_settings(settings):
    settings.GPULEDGER_COLLECT_SECONDS = WINDOW_SECONDS
    settings.GPULEDGER_CATCHUP_HOURS = 24
    settings.GPULEDGER_IDLE_THRESHOLD = 0.01


def rollups(cluster: Cluster) -> dict[tuple, dict[str, float]]:
    found: dict[tuple, dict[str, float]] = {}
    for row in HourlyRollup.objects.filter(cluster=cluster).values(*IDENTITY, *FIGURES):
        key = "(the cluster)" if row["scope"] == RollupScope.FLEET else row["key"]
        found[(row["scope"], key, row["hour"], row["flavor"], row["gpu_model"])] = {
            figure: float(row[figure] or 0.0) for figure in FIGURES
        }
    return found


_windowed: dict[str, dict[tuple, dict[str, float]]] = {}


def window_rollups(url: str) -> dict[tuple, dict[str, float]]:
    """The rollups of the per-window path (a backfill window by window), once per module."""
    if "rows" not in _windowed:
        cluster = Cluster.objects.create(name="windows", prometheus_url=url)
        call_command(
            "collect_metrics",
            cluster=cluster.name,
            start=START.isoformat(),
            end=END.isoformat(),
            no_progress=True,
        )
        _windowed["rows"] = rollups(cluster)
        assert {key[0] for key in _windowed["rows"]} == set(RollupScope.values)
    return _windowed["rows"]


def assert_same(deep: dict[tuple, dict[str, float]], windows: dict[tuple, dict[str, float]]):
    assert sorted(set(deep) - set(windows)) == [], "rows only the deep backfill wrote"
    assert sorted(set(windows) - set(deep)) == [], "rows only the per-window path wrote"
    wrong = [
        (identity, figure, deep[identity][figure], want)
        for identity, figures in windows.items()
        for figure, want in figures.items()
        if deep[identity][figure] != pytest.approx(want, rel=TOLERANCE, abs=1e-6)
    ]
    assert not wrong, "\n".join(map(str, wrong))


def deep(url: str, name: str = "deep", **options: Any) -> tuple[Cluster, Any]:
    cluster, _ = Cluster.objects.get_or_create(name=name, defaults={"prometheus_url": url})
    result = DeepBackfill(cluster, window_seconds=WINDOW_SECONDS, **options).run(START, END)
    return cluster, result


def test_every_row_and_figure_equals_the_per_window_path(alpha_prometheus):
    windows = window_rollups(alpha_prometheus.url)
    cluster, result = deep(alpha_prometheus.url)

    assert result.hours == [START, START + timedelta(hours=1)]
    assert_same(rollups(cluster), windows)
    # The hours are marked as having no per-window rows: never rebuilt by the sweep.
    marks = RollupHour.objects.filter(cluster=cluster).values_list("hour", "usage_pruned")
    assert sorted(marks) == [(START, True), (START + timedelta(hours=1), True)]
    assert due_hours(cluster.pk, END + timedelta(days=1)) == []


def test_a_long_run_holds_only_the_hours_in_flight(alpha_prometheus, monkeypatch):
    """A month or a year of hours in the memory of two: each hour's binned samples are let go
    once the hour is written (they were all kept to the end of the run: 18 GB into 30 days at
    5,000 GPUs)."""
    binned: dict[float, list[weakref.ref]] = {}
    real_bin = presence.bin_columns

    def tracked_bin(*args: Any, **kwargs: Any) -> dict[str, presence.Windows]:
        found = real_bin(*args, **kwargs)
        first = args[5]  # the hour's first window end
        binned.setdefault(first, []).extend(weakref.ref(w) for w in found.values())
        return found

    alive_before: list[int] = []
    real_write = DeepBackfill._write_hour

    def write(self: DeepBackfill, hour: Any, answers: Any, style: str) -> Any:
        gc.collect()
        older = [ref for first, refs in binned.items() if first < hour.timestamp() for ref in refs]
        alive_before.append(sum(ref() is not None for ref in older))
        return real_write(self, hour, answers, style)

    monkeypatch.setattr(presence, "bin_columns", tracked_bin)
    monkeypatch.setattr(DeepBackfill, "_write_hour", write)
    cluster = Cluster.objects.create(name="long", prometheus_url=alpha_prometheus.url)
    # Six hours (four past the fleet's data: empty hours are binned too), one shard, in order.
    DeepBackfill(cluster, window_seconds=WINDOW_SECONDS, workers=1).run(
        START, START + timedelta(hours=6)
    )

    assert len(binned) == 6 and all(binned.values())
    # When an hour is written, no earlier hour's samples are held any more.
    assert alive_before == [0] * 6


def test_sharded_queries_give_the_same_rows(alpha_prometheus):
    windows = window_rollups(alpha_prometheus.url)
    # Two series per query: the fleet's GPUs are split over the most shards there are.
    cluster, result = deep(alpha_prometheus.url, series_per_query=2, concurrency=2)

    assert result.shards == 16
    assert_same(rollups(cluster), windows)


def test_hours_dealt_to_two_processes_give_the_rows_of_one(alpha_prometheus):
    one, one_result = deep(alpha_prometheus.url, "one process", workers=1)
    two, two_result = deep(alpha_prometheus.url, "two processes", workers=2)

    # On PostgreSQL the two hours really go to two forked processes; SQLite keeps one.
    assert workers.usable(2, 2) == (1 if connection.vendor == "sqlite" else 2)
    assert one_result.hours == two_result.hours == [START, START + timedelta(hours=1)]
    assert two_result.rows_written == one_result.rows_written > 0
    assert rollups(two) == rollups(one)
    marks = RollupHour.objects.filter(cluster=two).values_list("hour", "usage_pruned")
    assert sorted(marks) == [(START, True), (START + timedelta(hours=1), True)]
    # Run again: every hour is there, nothing is written twice.
    again = DeepBackfill(two, window_seconds=WINDOW_SECONDS, workers=2).run(START, END)
    assert (again.hours, again.hours_skipped) == ([], 2)
    assert rollups(two) == rollups(one)


def test_worker_processes_only_where_they_can_write_and_see_the_data(monkeypatch):
    forks = 1 if connection.vendor == "sqlite" else 3
    assert workers.usable(4, 3) == forks  # at most one process per hour
    assert workers.usable(4, 1) == 1
    assert workers.usable(1, 10) == 1
    # A Celery prefork child is daemonic: it may not start processes.
    daemonic = type("Daemonic", (), {"daemon": True})()
    monkeypatch.setattr(workers.multiprocessing, "current_process", lambda: daemonic)
    assert workers.usable(4, 3) == 1
    monkeypatch.undo()
    # Inside a transaction, forked processes would not see its data.
    with transaction.atomic():
        assert workers.usable(4, 3) == 1


def test_shards_cover_every_uuid_once():
    uuids = ["GPU-0a", "GPU-ff", "GPU-9", "GPU-zz", "MIG-x_", "GPU-E", "GPU-"]
    for shards in (1, 2, 4, 8, 16):
        matchers = shard_matchers(shards)
        assert len(matchers) == shards
    assert shards_for(40_000, 10_000) == 4
    assert shards_for(1, 10_000) == 1
    assert shards_for(10**9, 1) == 16
    # Each UUID matches exactly one shard: checked with Python's regex engine on the same
    # patterns Prometheus anchors (RE2 and re agree on these character classes).
    import re

    for shards in (2, 4, 16):
        for value in uuids:
            hits = 0
            for matcher in shard_matchers(shards):
                parts = re.match(r'(\w+)(=~|!~)"(.*)"', matcher)
                assert parts is not None
                label, op, pattern = parts.groups()
                matched = re.fullmatch(pattern, value) is not None
                hits += matched if op == "=~" else not matched
            assert hits == 1, (shards, value)


def test_a_second_run_skips_done_hours_and_collected_hours(alpha_prometheus):
    cluster, first = deep(alpha_prometheus.url)
    before = rollups(cluster)
    stamps = dict(RollupHour.objects.filter(cluster=cluster).values_list("hour", "rolled_up_at"))

    _, again = deep(alpha_prometheus.url)

    assert (again.hours, again.hours_skipped) == ([], 2)
    assert rollups(cluster) == before
    assert (
        dict(RollupHour.objects.filter(cluster=cluster).values_list("hour", "rolled_up_at"))
        == stamps
    )


class _Broken(http.server.BaseHTTPRequestHandler):
    """A Prometheus that passes requests on, except the reads of the stored DCGM samples of the
    hour ending at ``fail_at`` (a Unix time), which fail or get nonsense; in mode
    ``no_remote_read`` every remote read is answered 404 (a server without that API), in mode
    ``samples_only`` each is passed on without the streamed chunks among the answers it accepts
    (a server that does not stream answers with samples)."""

    mode = "error"
    upstream = ""
    fail_at = ""

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/api/v1/read":
            request = remote._MESSAGES["ReadRequest"].FromString(
                bytes(cramjam.snappy.decompress_raw(body))
            )
            end = f"{request.queries[0].end_timestamp_ms / 1000:.3f}"
            failing = type(self).mode == "no_remote_read" or end == type(self).fail_at
            headers = {name: self.headers[name] for name in self.headers if name != "Host"}
            if type(self).mode == "samples_only":
                del request.accepted_response_types[:]
                body = bytes(cramjam.snappy.compress_raw(request.SerializeToString()))
                headers["Content-Length"] = str(len(body))
        else:
            form = urllib.parse.parse_qs(body.decode())
            # The hour's stored samples as JSON (an instant query of a range selector at its end).
            failing = form.get("query", [""])[0].startswith("{__name__=~") and form.get("time") == [
                type(self).fail_at
            ]
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if not failing:
            request = urllib.request.Request(  # noqa: S310 (loopback)
                type(self).upstream + self.path, data=body, headers=headers
            )
            with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
                self._send(200, answer.read(), answer.headers["Content-Type"])
        elif type(self).mode == "no_remote_read":
            self._send(404, b"404 page not found")
        elif type(self).mode == "error":
            self._send(503, b'{"status":"error","errorType":"unavailable","error":"down"}')
        else:
            nonsense = {"status": "success", "data": {"resultType": "vector", "result": "x"}}
            self._send(200, json.dumps(nonsense).encode())

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def broken(alpha_prometheus) -> Iterator[type[_Broken]]:
    handler = type("Handler", (_Broken,), {"upstream": alpha_prometheus.url})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = serving_thread(server)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    yield handler
    server.shutdown()
    server.server_close()


def test_without_the_remote_read_api_the_samples_come_as_json_and_give_the_same_rows(
    broken, alpha_prometheus
):
    windows = window_rollups(alpha_prometheus.url)
    broken.mode = "no_remote_read"
    cluster, _result = deep(broken.url, name="json", series_per_query=4)

    assert_same(rollups(cluster), windows)


def test_a_server_that_does_not_stream_chunks_answers_samples_and_gives_the_same_rows(
    broken, alpha_prometheus
):
    windows = window_rollups(alpha_prometheus.url)
    broken.mode = "samples_only"
    cluster, _result = deep(broken.url, name="samples", series_per_query=4)

    assert_same(rollups(cluster), windows)


def test_streamed_chunks_and_samples_read_the_same_stored_samples(alpha_prometheus):
    client = PrometheusClient(alpha_prometheus.url)
    end_ms = round(END.timestamp() * 1000)
    start_ms = end_ms - 3600 * 1000 + 1
    thresholds = Thresholds(idle=0.01, busy_gpu_util=50.0, busy_sm_active=0.2)
    matchers = DeepQueries("exported", WINDOW_SECONDS, thresholds).sample_matchers("")
    found = {}
    for streamed in (True, False):
        request = remote.read_request(start_ms, end_ms, matchers, streamed=streamed)
        answer, content_type = client.remote_read(request)
        assert content_type.startswith(remote.STREAMED) == streamed
        columns = remote.read_answer(answer, content_type, start_ms, end_ms)
        found[streamed] = sorted(
            (tuple(sorted(columns.labels[series].items())), at, repr(value))
            for series, at, value in zip(
                columns.series.tolist(),
                columns.times_ms.tolist(),
                columns.values.tolist(),
                strict=True,
            )
        )
    assert len(found[True]) > 1000
    assert found[True] == found[False]
    assert all(start_ms <= at <= end_ms for _labels, at, _value in found[True])


@pytest.mark.parametrize("mode", ["error", "garbage"])
def test_a_failing_prometheus_leaves_no_hour_half_written_and_a_rerun_finishes(
    broken, alpha_prometheus, mode
):
    windows = window_rollups(alpha_prometheus.url)
    broken.mode = mode
    broken.fail_at = f"{END.timestamp():.3f}"  # the second hour's end
    cluster = Cluster.objects.create(name="broken", prometheus_url=broken.url)
    with pytest.raises(PrometheusError):
        DeepBackfill(cluster, window_seconds=WINDOW_SECONDS, concurrency=1).run(START, END)

    # The first hour is whole, the second not there at all.
    assert set(RollupHour.objects.filter(cluster=cluster).values_list("hour", flat=True)) == {START}
    first_hour = {k: v for k, v in windows.items() if k[2] == START}
    assert_same(rollups(cluster), first_hour)

    broken.fail_at = ""
    result = DeepBackfill(cluster, window_seconds=WINDOW_SECONDS).run(START, END)
    assert (result.hours, result.hours_skipped) == ([START + timedelta(hours=1)], 1)
    assert_same(rollups(cluster), windows)


def test_malformed_items_are_skipped_and_counted_and_the_rest_kept():
    queries = DeepQueries(
        "exported", 60, Thresholds(idle=0.1, busy_gpu_util=50.0, busy_sm_active=0.2)
    )
    first = 3660.0
    ends = [first + 60 * i for i in range(60)]
    gpu = {"UUID": "GPU-1", "Hostname": "n1", "modelName": "H100"}
    pod = {"exported_namespace": "team-a", "exported_pod": "p-0"}
    mig = {"UUID": "GPU-2", "Hostname": "n1", "GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb"}
    raw: dict[str, list[Any]] = {
        "presence": [
            {"metric": gpu | pod, "values": [[ts, "1"] for ts in ends[:30]]},  # 30 windows
            {"metric": mig | pod, "values": [[ts, "1"] for ts in ends]},  # 60 windows of 3/7
            {"metric": {"Hostname": "n1"} | pod, "values": [[ts, "1"] for ts in ends]},  # no UUID
            # No namespace.
            {"metric": gpu | {"UUID": "GPU-3", "exported_pod": "p-1"}, "values": [[first, "1"]]},
            "not an item",
            {"metric": gpu | {"UUID": "GPU-4"}, "values": "z"},
        ],
        "sm_active": [{"metric": gpu | pod, "values": [[first, "NaN"]]}],
    }
    found = presence.derive(
        {
            name: presence.compact(items, queries.by_labels, first, 60)
            for name, items in raw.items()
        },
        queries.by_labels,
        queries.pod_labels,
        first,
        60,
        queries.limits,
    )
    builder = GrainBuilder("exported", 60)
    builder.grain.stats.merge(found.stats)
    builder.add_series(found)
    stats = builder.grain.stats
    # The series without UUID is skipped as a pod series and as a GPU (capacity).
    assert stats.skip_reasons["missing_uuid"] == 2
    assert stats.skip_reasons["pod_without_namespace"] == 1
    assert stats.skip_reasons["malformed_matrix_item"] == 2
    assert stats.skipped >= 5 and stats.nonfinite_skipped == 1
    figures = sorted(
        piece.figures["allocated_gpu_hours"] for piece in builder.grain.pieces if piece.pod
    )
    # 60 one-minute windows of a 3g MIG instance (3/7 of a GPU); 30 of a whole GPU.
    assert figures == pytest.approx([3 / 7, 0.5])


def test_collect_metrics_picks_the_path_per_hour_from_the_retention(alpha_prometheus, settings):
    windows = window_rollups(alpha_prometheus.url)
    settings.GPULEDGER_USAGE_RETENTION_DAYS = 1
    Cluster.objects.create(name="mixed", prometheus_url=alpha_prometheus.url)
    out = StringIO()
    # A day and a half after the first hour: it is older than the retention, the second is not.
    with time_machine.travel(START + timedelta(days=1, hours=1, minutes=30), tick=True):
        call_command(
            "collect_metrics", cluster="mixed", start=START.isoformat(), end=END.isoformat(),
            no_progress=True, stdout=out,
        )  # fmt: skip

    assert "1 hours deep-backfilled" in out.getvalue(), out.getvalue()
    marks = dict(
        RollupHour.objects.filter(cluster__name="mixed").values_list("hour", "usage_pruned")
    )
    assert marks == {START: True, START + timedelta(hours=1): False}
    usage_ends = GpuUsage.objects.filter(cluster__name="mixed").values_list("window_end", flat=True)
    assert min(usage_ends) == START + timedelta(hours=1, seconds=WINDOW_SECONDS)
    assert_same(rollups(Cluster.objects.get(name="mixed")), windows)


def test_per_window_answers_summed_by_hand_time_slicing_and_bad_points():
    """Two pods share GPU-1 in the first 30 of 60 windows; pod a keeps it alone for the rest."""
    queries = DeepQueries(
        "exported", 60, Thresholds(idle=0.1, busy_gpu_util=50.0, busy_sm_active=0.2)
    )
    first = 3660.0
    gpu = {"UUID": "GPU-1", "Hostname": "n1", "modelName": "H100"}
    pod_a = gpu | {"exported_namespace": "t", "exported_pod": "a"}
    pod_b = gpu | {"exported_namespace": "t", "exported_pod": "b"}
    ends = [first + 60 * i for i in range(60)]
    raw: dict[str, list[Any]] = {
        "presence": [
            {"metric": pod_a, "values": [[ts, "1"] for ts in ends]},
            {"metric": pod_b, "values": [[ts, "1"] for ts in ends[:30]]},
        ],
        "sm_active": [
            # 0.5 in every window but the last, which is NaN; a point before the hour and an
            # unreadable one are skipped.
            {"metric": pod_a, "values": [[ts, "0.5"] for ts in ends[:59]]
             + [[ends[59], "NaN"], [first - 60, "0.5"], ["x", "0.5"]]},
            {"metric": pod_b, "values": [[ts, "0.05"] for ts in ends[:30]]},
            "not an item",
        ],
    }  # fmt: skip
    answers = {
        name: presence.compact(items, queries.by_labels, first, 60) for name, items in raw.items()
    }
    found = presence.derive(
        answers, queries.by_labels, queries.pod_labels, first, 60, queries.limits
    )

    def by_pod(name: str) -> dict[str, float]:
        return {dict(labels)["exported_pod"]: value for labels, value in found.figure(name).items()}

    # a: 30 windows at 1/2 + 30 alone; b: 30 windows at 1/2.
    assert by_pod("allocated") == pytest.approx({"a": 45.0, "b": 15.0})
    assert by_pod("shared") == pytest.approx({"a": 15.0, "b": 15.0})
    # a has SM_ACTIVE in 59 windows (29 of them alone): 30 x 0.5 + 29 x 1 shares.
    assert by_pod("telemetry") == pytest.approx({"a": 44.0, "b": 15.0})
    assert by_pod("active") == pytest.approx({"a": 30 * 0.5 * 0.5 + 29 * 0.5, "b": 15 * 0.05})
    assert by_pod("idle") == pytest.approx({"b": 15.0})  # 0.05 < 0.1
    assert list(found.capacity.values()) == [60.0]
    stats = found.stats
    assert stats.skip_reasons["matrix_point_outside_the_hour"] == 1
    assert stats.skip_reasons["malformed_matrix_point"] == 1
    assert stats.skip_reasons["malformed_matrix_item"] == 1
    assert stats.nonfinite_skipped == 1
    # Per window, pod a held half of GPU-1 while b was there, then all of it.
    shares = {
        dict(labels)["exported_pod"]: points
        for labels, points in found.points("pod_shares").items()
    }
    assert [v for _ts, v in shares["a"]] == [0.5] * 30 + [1.0] * 30
    assert [ts for ts, _v in shares["b"]] == ends[:30]
