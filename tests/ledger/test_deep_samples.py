"""The stored samples of a deep-backfilled hour: the remote read answer decoded, and the samples
binned into the per-window answers Prometheus would give (``max by`` of ``avg_over_time`` per
window, the presence test), checked against values worked out by hand."""

from __future__ import annotations

import math
import struct
from typing import Any

import cramjam
import numpy as np
import pytest

from ledger.deep import presence, remote
from ledger.deep.queries import DeepQueries
from ledger.rollup.row_figures import Thresholds

QUERIES = DeepQueries("exported", 60, Thresholds(idle=0.1, busy_gpu_util=50.0, busy_sm_active=0.2))
FIRST = 7260.0  # the hour (7200, 10800]: its first window ends at 7260
GPU = {"UUID": "GPU-1", "Hostname": "n1", "modelName": "H100"}
POD = GPU | {"exported_namespace": "t", "exported_pod": "a"}
KEY = tuple(POD.get(name, "") for name in QUERIES.by_labels)


def sample(value: float, at_ms: int) -> bytes:
    """A prompb.Sample as Prometheus writes it: a zero value (or time) is left out."""
    head = b"\x09" + struct.pack("<d", value) if value != 0 else b""
    return head + (b"\x10" + remote.encode_varint(at_ms) if at_ms else b"")


def test_the_remote_read_answer_is_decoded_and_staleness_markers_dropped():
    stale = struct.unpack("<d", struct.pack("<Q", remote.STALE_NAN))[0]
    response = remote._MESSAGES["ReadResponse"]()
    series = response.results.add().timeseries.add()
    series.labels.add(name="__name__", value="DCGM_FI_DEV_GPU_UTIL")
    series.labels.add(name="UUID", value="GPU-1")
    series.samples.extend(
        [sample(0.0, 7_230_000), sample(stale, 7_240_000), sample(-2.5, 7_250_001)]
    )
    other = response.results[0].timeseries.add()
    other.labels.add(name="__name__", value="DCGM_FI_DEV_FB_USED")
    other.samples.extend([sample(math.nan, 1), sample(80_000.0, 10_800_000)])
    answer = bytes(cramjam.snappy.compress_raw(response.SerializeToString()))

    found = remote.read_response(answer)

    assert found.labels == [
        {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": "GPU-1"},
        {"__name__": "DCGM_FI_DEV_FB_USED"},
    ]
    assert found.lengths == [2, 2]
    assert found.times_ms.tolist() == [7_230_000, 7_250_001, 1, 10_800_000]
    assert found.values[[0, 1, 3]].tolist() == [0.0, -2.5, 80_000.0]
    assert math.isnan(found.values[2])


def field(number: int, body: bytes) -> bytes:
    return remote.encode_varint(number << 3 | 2) + remote.encode_varint(len(body)) + body


def label(name: str, value: str) -> bytes:
    return field(1, field(1, name.encode()) + field(2, value.encode()))


@pytest.mark.parametrize("series_per_step", [1, 2, 2048])
def test_series_read_from_the_wire_in_any_field_order_long_labels_and_other_fields(
    series_per_step: int, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(remote, "_SERIES_PER_STEP", series_per_step)
    long_value = "x" * 300  # a label record longer than 127 bytes: a two-byte length
    first = (
        field(2, sample(1.5, 7_230_000))
        + label("__name__", "DCGM_FI_DEV_GPU_UTIL")
        + field(3, b"\x0a\x00")  # an exemplar: not read
        + field(2, sample(2.5, 7_240_000))
        + label("pod", long_value)
    )
    empty = b""  # a series without labels or samples
    third = label("__name__", "DCGM_FI_DEV_FB_USED") + field(2, sample(0.0, 0))
    result = field(1, first) + field(1, empty) + field(1, third)
    answer = bytes(cramjam.snappy.compress_raw(field(1, result)))

    found = remote.read_response(answer)

    assert found.labels == [
        {"__name__": "DCGM_FI_DEV_GPU_UTIL", "pod": long_value},
        {},
        {"__name__": "DCGM_FI_DEV_FB_USED"},
    ]
    assert found.lengths == [2, 0, 1]
    assert found.times_ms.tolist() == [7_230_000, 7_240_000, 0]
    assert found.values.tolist() == [1.5, 2.5, 0.0]


def test_labels_read_in_an_earlier_answer_are_reused_and_never_mixed_up(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(remote, "_LABEL_CACHE", {})
    monkeypatch.setattr(remote, "_LABEL_CACHE_SIZE", 3)

    def answer(*pods: str) -> bytes:
        result = b"".join(
            field(
                1,
                label("__name__", "DCGM_FI_DEV_GPU_UTIL")
                + label("pod", pod)
                + field(2, sample(1.0, 7_230_000)),
            )
            for pod in pods
        )
        return bytes(cramjam.snappy.compress_raw(field(1, result)))

    def pods(found: remote.Columns) -> list[str]:
        assert {labels["__name__"] for labels in found.labels} == {"DCGM_FI_DEV_GPU_UTIL"}
        return [labels["pod"] for labels in found.labels]

    first = remote.read_response(answer("a", "b"))
    again = remote.read_response(answer("b", "a", "c"))

    assert pods(first) == ["a", "b"]
    assert pods(again) == ["b", "a", "c"]
    # Parsed once: the second answer's "b" is the first one's.
    assert again.labels[0] is first.labels[1]
    # Three series known and one more: the cache is emptied, then holds the new one.
    assert pods(remote.read_response(answer("d", "a"))) == ["d", "a"]
    assert list(remote._LABEL_CACHE.values()) == [{"__name__": "DCGM_FI_DEV_GPU_UTIL", "pod": "d"}]


@pytest.mark.parametrize(
    "body",
    [
        field(1, field(1, field(2, b"\x09\x00\x00"))),  # a value cut short
        field(1, field(1, field(2, b"\x10\xff\xff"))),  # a timestamp cut short
        field(1, field(1, b"\x12\x05\x09")),  # a sample running past its series
        field(1, field(1, b"\x08\x01")),  # a series field that is not a message
        field(1, b"\x0a\x09\x00"),  # a series running past its result
    ],
)
def test_a_malformed_remote_read_answer_is_an_error(body: bytes):
    with pytest.raises(remote.RemoteReadError):
        remote.read_response(bytes(cramjam.snappy.compress_raw(body)))


def test_an_answer_that_is_not_a_remote_read_answer_is_an_error():
    with pytest.raises(remote.RemoteReadError):
        remote.read_response(b'{"status": "success"}')
    # A snappy header stating a gigabyte for a few bytes: refused before anything is allocated.
    with pytest.raises(remote.RemoteReadError):
        remote.read_response(remote.encode_varint(10**9) + b"\x00\x01")


@pytest.mark.parametrize("kept_labels", [False, True])
def test_samples_binned_into_windows_as_prometheus_answers_them(
    kept_labels: bool, monkeypatch: pytest.MonkeyPatch
):
    # Kept labels: the series' metrics and keys worked out by the first call are looked up by
    # the second, which must give the same windows and count the same skips.
    monkeypatch.setattr(presence, "_SERIES_KEYS", {})
    sm, dram = "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"
    # Two stored series of one answer series (two exporters scraping the same GPU and pod).
    first_exporter = POD | {"__name__": sm, "instance": "x"}
    second_exporter = POD | {"__name__": sm, "instance": "y"}
    ms = 1000
    series = {
        "first": (
            first_exporter,
            [
                (7_200 * ms, 0.9),  # the previous hour's last instant: not in this hour
                (7_200 * ms + 1, 0.2),  # window 0 (7200, 7260]
                (7_260 * ms, 0.4),  # window 0: its end is inside it
                (7_290 * ms, math.nan),  # window 1: the average is NaN
                (7_300 * ms, 0.9),
                (7_330 * ms, math.inf),  # window 2: +Inf wins the max, no answer
            ],
        ),
        "second": (
            second_exporter,
            [(7_230 * ms, 0.5), (7_300 * ms, 0.1), (7_350 * ms, 0.7)],
        ),
        "dram": (POD | {"__name__": dram}, [(7_400 * ms, 0.3)]),  # window 3: presence only
        "other": ({"__name__": "up"}, [(7_230 * ms, 1.0)]),  # not a DCGM metric
    }
    labels = [metric for metric, _points in series.values()]
    points = [
        (position, at, value)
        for position, (_metric, found) in enumerate(series.values())
        for at, value in found
    ]
    # The samples in any order (streamed chunks come a step of every chunk at a time).
    points = points[1::2] + points[::2]

    for _ in range(2 if kept_labels else 1):
        found = presence.bin_columns(
            labels,
            np.array([position for position, _, _ in points], dtype=np.int64),
            np.array([at for _, at, _ in points], dtype=np.int64),
            np.array([value for _, _, value in points]),
            QUERIES.by_labels,
            FIRST,
            60,
            kept_labels=kept_labels,
        )

    assert len(presence._SERIES_KEYS) == (4 if kept_labels else 0)

    sm_windows = list(found["sm_active"].series[KEY])[:5]
    # 0: max(avg(0.2, 0.4), 0.5); 1: max(NaN, 0.1); 2: max(+Inf, 0.7) is no answer; 3: none.
    assert sm_windows[:2] == pytest.approx([0.5, 0.1])
    assert all(math.isnan(value) for value in sm_windows[2:])
    assert [value == 1.0 for value in list(found["presence"].series[KEY])[:5]] == [
        True,
        True,
        True,
        True,
        False,
    ]
    stats = found["presence"].stats
    assert stats.skip_reasons == {"malformed_matrix_item": 1, "matrix_point_outside_the_hour": 1}
    assert stats.nonfinite_skipped == 1  # window 2 of SM_ACTIVE


def test_the_json_answer_gives_the_same_windows():
    items: list[Any] = [
        {"metric": POD | {"__name__": "DCGM_FI_DEV_GPU_UTIL"}, "values": [[7230.5, "40"]]},
        {"metric": POD | {"__name__": "DCGM_FI_DEV_GPU_UTIL"}, "values": [["x"], [7290, "60"]]},
        "not an item",
    ]
    found = presence.bin_samples(items, QUERIES.by_labels, FIRST, 60)

    assert list(found["gpu_util"].series[KEY])[:2] == [40.0, 60.0]
    stats = found["presence"].stats
    assert stats.skip_reasons == {"malformed_matrix_item": 1, "malformed_matrix_point": 1}
