"""The stored DCGM samples of one shard and hour through Prometheus' remote read API
(``/api/v1/read``: snappy-compressed protobuf), as columns for ``presence.bin_columns``.

Prometheus hands the stored samples over as they are, with no query evaluation and no JSON: a
few times less of its CPU than the same samples as JSON from ``/api/v1/query`` and an order
less than per-window range queries (bench/RESULTS.md). The schema is the part of Prometheus'
``prompb`` (remote.proto, types.proto) the request and the ``SAMPLES`` answer use; the samples
of each series are decoded with numpy from their wire bytes, not one Python object per sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import cramjam
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from fleet.ingest import IngestStats

# A staleness marker (a series gone from its target): stored, but no sample to any query.
STALE_NAN = 0x7FF0000000000002
# prompb.LabelMatcher.Type by PromQL operator.
_MATCH_TYPES = {"=": 0, "!=": 1, "=~": 2, "!~": 3}


class RemoteReadError(ValueError):
    """An answer of the remote read API that cannot be read."""


def _messages() -> dict[str, Any]:
    proto = descriptor_pb2.FileDescriptorProto(
        name="gpuledger_prompb.proto", package="gpuledger_prompb", syntax="proto3"
    )
    kind = descriptor_pb2.FieldDescriptorProto
    one, many = kind.LABEL_OPTIONAL, kind.LABEL_REPEATED

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        found = proto.message_type.add(name=name)
        for field_name, number, field_type, label, type_name in fields:
            added = found.field.add(name=field_name, number=number, type=field_type, label=label)
            if type_name:
                added.type_name = f".gpuledger_prompb.{type_name}"

    text, int64, nested = kind.TYPE_STRING, kind.TYPE_INT64, kind.TYPE_MESSAGE
    message("Label", ("name", 1, text, one, ""), ("value", 2, text, one, ""))
    # Samples (field 2) kept as each one's wire bytes: decoded together by ``_decode``.
    message(
        "TimeSeries",
        ("labels", 1, nested, many, "Label"),
        ("samples", 2, kind.TYPE_BYTES, many, ""),
    )
    message(
        "LabelMatcher",
        ("type", 1, kind.TYPE_INT32, one, ""),
        ("name", 2, text, one, ""),
        ("value", 3, text, one, ""),
    )
    message(
        "Query",
        ("start_timestamp_ms", 1, int64, one, ""),
        ("end_timestamp_ms", 2, int64, one, ""),
        ("matchers", 3, nested, many, "LabelMatcher"),
    )
    message("ReadRequest", ("queries", 1, nested, many, "Query"))
    message("QueryResult", ("timeseries", 1, nested, many, "TimeSeries"))
    message("ReadResponse", ("results", 1, nested, many, "QueryResult"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"gpuledger_prompb.{name}")
        )
        for name in ("ReadRequest", "ReadResponse")
    }


_MESSAGES = _messages()


def read_request(start_ms: int, end_ms: int, matchers: list[tuple[str, str, str]]) -> bytes:
    """A compressed ``ReadRequest`` for the samples in ``[start_ms, end_ms]`` of the series whose
    labels match every ``(name, operator, value)`` (PromQL's ``=``, ``!=``, ``=~``, ``!~``)."""
    request = _MESSAGES["ReadRequest"]()
    query = request.queries.add(start_timestamp_ms=start_ms, end_timestamp_ms=end_ms)
    for name, operator, value in matchers:
        query.matchers.add(type=_MATCH_TYPES[operator], name=name, value=value)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


@dataclass
class Columns:
    """Stored series (their labels) and their samples, series after series."""

    labels: list[dict[str, str]] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    times_ms: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    values: np.ndarray = field(default_factory=lambda: np.zeros(0))
    stats: IngestStats = field(default_factory=IngestStats)


def read_response(answer: bytes) -> Columns:
    """The series and samples of a compressed ``ReadResponse`` (staleness markers dropped)."""
    try:
        response = _MESSAGES["ReadResponse"].FromString(
            bytes(cramjam.snappy.decompress_raw(answer))
        )
    except Exception as exc:  # noqa: BLE001 (cramjam and protobuf raise their own types)
        raise RemoteReadError(f"remote read answer cannot be decoded: {exc}") from exc
    found = Columns()
    encoded: list[bytes] = []
    for result in response.results:
        for series in result.timeseries:
            found.labels.append({label.name: label.value for label in series.labels})
            found.lengths.append(len(series.samples))
            encoded.extend(series.samples)
    times, values = _decode(encoded)
    stale = values.view(np.uint64) == STALE_NAN
    if stale.any():
        keep = ~stale
        positions = np.repeat(np.arange(len(found.lengths)), found.lengths)[keep]
        found.lengths = np.bincount(positions, minlength=len(found.lengths)).tolist()
        times, values = times[keep], values[keep]
    found.times_ms, found.values = times, values
    return found


def _decode(encoded: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Timestamps (ms) and values of ``Sample`` messages given as their wire bytes: an optional
    ``value`` (tag 0x09, 8 bytes) then an optional ``timestamp`` (tag 0x10, a varint); proto3
    leaves a zero out."""
    count = len(encoded)
    if not count:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    lengths = np.fromiter(map(len, encoded), np.int64, count)
    data = np.frombuffer(b"".join(encoded) + bytes(16), dtype=np.uint8)
    starts = np.zeros(count, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    ends = starts + lengths
    has_value = (lengths > 0) & (data[starts] == 0x09)
    values = np.zeros(count)
    where = starts[has_value]
    if len(where):
        raw = data[where[:, None] + np.arange(1, 9)].copy()
        values[has_value] = raw.view("<f8").ravel()
    at = starts + np.where(has_value, 9, 0)
    has_time = at < ends
    if (has_time & (data[at] != 0x10)).any():
        raise RemoteReadError("remote read answer: a sample is not (value, timestamp)")
    size = ends - at - 1  # the varint's bytes
    if (has_time & ((size < 1) | (size > 10))).any():
        raise RemoteReadError("remote read answer: a sample's timestamp is not a varint")
    times = np.zeros(count, dtype=np.uint64)
    for byte in range(10):
        inside = has_time & (byte < size)
        if not inside.any():
            break
        part = data[at[inside] + 1 + byte].astype(np.uint64) & np.uint64(0x7F)
        times[inside] |= part << np.uint64(7 * byte)
    return times.view(np.int64), values
