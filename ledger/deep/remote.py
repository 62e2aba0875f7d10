"""The stored DCGM samples of one shard and hour through Prometheus' remote read API
(``/api/v1/read``), as columns for ``presence.bin_columns``.

Prometheus hands the stored samples over as they are, with no query evaluation and no JSON: a
few times less of its CPU than the same samples as JSON from ``/api/v1/query`` and an order
less than per-window range queries (bench/RESULTS.md). The request accepts two answers, in this
order of preference:

- ``STREAMED_XOR_CHUNKS``: the stored chunks themselves, a frame per series (a varint length, a
  CRC-32C, a ``ChunkedReadResponse``), decoded here by ``chunks.decode``. Prometheus only copies
  chunk bytes (trimming the chunks that straddle the hour), about four times less of its CPU
  than the samples answer.
- ``SAMPLES``: one snappy-compressed ``ReadResponse`` of (value, timestamp) messages, what a
  server that does not stream answers.

The schema is the part of Prometheus' ``prompb`` (remote.proto, types.proto) these use; the
samples are decoded with numpy from their wire bytes, not one Python object per sample.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import cramjam
import google_crc32c
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from fleet.ingest import IngestStats
from ledger.deep import chunks

# A staleness marker (a series gone from its target): stored, but no sample to any query.
STALE_NAN = 0x7FF0000000000002
# prompb.LabelMatcher.Type by PromQL operator.
_MATCH_TYPES = {"=": 0, "!=": 1, "=~": 2, "!~": 3}
# prompb.ReadRequest.ResponseType: the answers asked for, the preferred first.
_SAMPLES, _STREAMED_XOR_CHUNKS = 0, 1
# The streamed answer's media type (``application/x-streamed-protobuf; proto=...``).
STREAMED = "application/x-streamed-protobuf"
# prompb.Chunk.Encoding of float samples.
_XOR = 1


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
    message(
        "ReadRequest",
        ("queries", 1, nested, many, "Query"),
        ("accepted_response_types", 2, kind.TYPE_INT32, many, ""),
    )
    message("QueryResult", ("timeseries", 1, nested, many, "TimeSeries"))
    message("ReadResponse", ("results", 1, nested, many, "QueryResult"))
    # The label records of each series, cut out of a ReadResponse (``read_response``).
    message("LabelSet", ("labels", 1, nested, many, "Label"))
    message("LabelSets", ("series", 1, nested, many, "LabelSet"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"gpuledger_prompb.{name}")
        )
        for name in ("ReadRequest", "ReadResponse", "LabelSets")
    }


_MESSAGES = _messages()


def read_request(
    start_ms: int, end_ms: int, matchers: list[tuple[str, str, str]], streamed: bool = True
) -> bytes:
    """A compressed ``ReadRequest`` for the samples in ``[start_ms, end_ms]`` of the series whose
    labels match every ``(name, operator, value)`` (PromQL's ``=``, ``!=``, ``=~``, ``!~``):
    the stored chunks streamed if the server can, else the samples (``streamed``: ask for
    chunks at all)."""
    request = _MESSAGES["ReadRequest"]()
    query = request.queries.add(start_timestamp_ms=start_ms, end_timestamp_ms=end_ms)
    for name, operator, value in matchers:
        query.matchers.add(type=_MATCH_TYPES[operator], name=name, value=value)
    if streamed:
        request.accepted_response_types.extend([_STREAMED_XOR_CHUNKS, _SAMPLES])
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))


def read_answer(answer: bytes, content_type: str, start_ms: int, end_ms: int) -> Columns:
    """The series and samples of a remote read answer of either kind (its ``Content-Type``
    says which), only the samples in ``[start_ms, end_ms]``, staleness markers dropped."""
    if content_type.split(";")[0].strip() == STREAMED:
        return read_streamed(answer, start_ms, end_ms)
    return read_response(answer)


@dataclass
class Columns:
    """Stored series (their labels) and their samples, a sample each: its series (an index into
    ``labels``), timestamp (ms) and value. Each series' samples are in time order; the series'
    samples need not be together."""

    labels: list[dict[str, str]] = field(default_factory=list)
    series: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    times_ms: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    values: np.ndarray = field(default_factory=lambda: np.zeros(0))
    stats: IngestStats = field(default_factory=IngestStats)

    @property
    def lengths(self) -> list[int]:
        """Each series' number of samples."""
        return np.bincount(self.series, minlength=len(self.labels)).tolist()

    def without_stale(self) -> Columns:
        """These columns without the staleness markers (each the end of a series, no sample)."""
        stale = self.values.view(np.uint64) == STALE_NAN
        if stale.any():
            keep = ~stale
            self.series, self.times_ms, self.values = (
                self.series[keep],
                self.times_ms[keep],
                self.values[keep],
            )
        return self


def read_response(answer: bytes) -> Columns:
    """The series and samples of a compressed ``ReadResponse`` (staleness markers dropped).

    Read from the wire bytes with numpy: the series are walked record by record, all series
    at once, so no Python object is made per sample; the label records are parsed by protobuf,
    every series' at once."""
    raw = _decompress(answer)
    spans = _series_spans(raw)
    # Padded (``_decompress``): a gather a few bytes past a record's end stays in the buffer.
    data = np.frombuffer(raw, dtype=np.uint8)
    found = Columns()
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    lengths: list[np.ndarray] = []
    # A few thousand series at a time: the arrays stay small (in cache, their memory reused).
    for first in range(0, len(spans[0]), _SERIES_PER_STEP):
        starts, ends = (side[first : first + _SERIES_PER_STEP] for side in spans)
        samples, labels = _records(data, starts, ends)
        found.labels.extend(_labels(raw, len(starts), *labels))
        lengths.append(np.bincount(samples[0], minlength=len(starts)))
        parts.append(_decode(data, samples[1], samples[2]))
    if parts:
        found.series = np.repeat(np.arange(len(found.labels)), np.concatenate(lengths))
        found.times_ms = np.concatenate([part[0] for part in parts])
        found.values = np.concatenate([part[1] for part in parts])
    return found.without_stale()


def read_streamed(answer: bytes, start_ms: int, end_ms: int) -> Columns:
    """The series and samples in ``[start_ms, end_ms]`` of a streamed answer: frames of
    ``ChunkedReadResponse`` (staleness markers dropped).

    Each frame's checksum is checked; the frames' messages joined are one message (protobuf
    concatenates repeated fields), walked like ``read_response``'s: the series' records with
    numpy, their labels by protobuf, the XOR chunks all decoded together (``chunks.decode``).
    A chunk of another encoding (histograms) is not a DCGM gauge's: skipped and counted."""
    raw = _frames(answer)
    data = np.frombuffer(raw, dtype=np.uint8)
    spans = _message_spans(raw)
    found = Columns()
    owners: list[np.ndarray] = []
    heads: list[np.ndarray] = []
    stops: list[np.ndarray] = []
    for first in range(0, len(spans[0]), _SERIES_PER_STEP):
        starts, ends = (side[first : first + _SERIES_PER_STEP] for side in spans)
        records, labels = _records(data, starts, ends)
        found.labels.extend(_labels(raw, len(starts), *labels))
        encoding, head, stop = _chunk_fields(data, records[1], records[2])
        xor = encoding == _XOR
        if not xor.all():
            found.stats.skip("remote_read_chunk_not_float", int((~xor).sum()))
        owners.append(records[0][xor] + first)
        heads.append(head[xor])
        stops.append(stop[xor])
    if not owners:
        return found
    try:
        chunk, times, values = chunks.decode(raw, np.concatenate(heads), np.concatenate(stops))
    except chunks.ChunkError as exc:
        raise RemoteReadError(f"remote read answer: {exc}") from exc
    # Chunks that straddle the range's ends may bring samples outside it.
    inside = (times >= start_ms) & (times <= end_ms)
    found.series = np.concatenate(owners)[chunk[inside]]
    found.times_ms, found.values = times[inside], values[inside]
    return found.without_stale()


def _frames(answer: bytes) -> bytearray:
    """The messages of a streamed answer's frames (each a varint size, a big-endian CRC-32C of
    the message, the message) joined, ``_PADDING`` bytes longer."""
    parts: list[bytes] = []
    at, end = 0, len(answer)
    checksum = google_crc32c.value
    while at < end:
        # Sizes of one or two bytes (a series' frame is about a kilobyte) read inline.
        size = answer[at]
        if size < 0x80:
            at += 1
        elif at + 1 < end and answer[at + 1] < 0x80:
            size = (size & 0x7F) | answer[at + 1] << 7
            at += 2
        else:
            size, at = _varint(answer, at, end)
        stop = at + 4 + size
        if stop > end:
            raise RemoteReadError("streamed remote read answer: a frame runs past the answer")
        body = answer[at + 4 : stop]
        if checksum(body) != int.from_bytes(answer[at : at + 4], "big"):
            raise RemoteReadError("streamed remote read answer: a frame fails its checksum")
        parts.append(body)
        at = stop
    parts.append(bytes(_PADDING))
    return bytearray(b"".join(parts))


def _message_spans(raw: bytearray) -> tuple[np.ndarray, np.ndarray]:
    """Where each ``ChunkedSeries`` (``ChunkedReadResponse.chunked_series``) starts and ends."""
    found = [(at, end) for number, at, end in _fields(raw, 0, len(raw) - _PADDING) if number == 1]
    starts = np.asarray([at for at, _ in found], dtype=np.int64)
    return starts, np.asarray([end for _, end in found], dtype=np.int64)


def _chunk_fields(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each ``Chunk`` message ``data[starts[i]:ends[i]]``'s encoding and where its ``data``
    field's bytes start and end (times are stepped over: the samples carry their own). Walked
    field by field for all chunks at once; proto3 leaves a zero (and empty data) out."""
    encoding = np.zeros(len(starts), dtype=np.int64)
    head = np.zeros(len(starts), dtype=np.int64)
    stop = np.zeros(len(starts), dtype=np.int64)
    at = starts.copy()
    for _ in range(8):  # four fields, each at most once in Prometheus' answers
        going = np.flatnonzero(at < ends)
        if not len(going):
            return encoding, head, stop
        where = at[going]
        tags = data[where].astype(np.int64)
        wire, number = tags & 7, tags >> 3
        if ((tags >= 0x80) | ((wire != 0) & (wire != 2))).any():
            raise RemoteReadError("remote read answer: a chunk field is not a Chunk's")
        value, width = _vector_varint(data, where + 1)
        body = where + 1 + width
        after = np.where(wire == 2, body + value, body)
        if ((after > ends[going]) | (value < 0)).any():
            raise RemoteReadError("remote read answer: a chunk field runs past its chunk")
        kind = (number == 3) & (wire == 0)
        encoding[going[kind]] = value[kind]
        payload = (number == 4) & (wire == 2)
        head[going[payload]], stop[going[payload]] = body[payload], after[payload]
        at[going] = after
    raise RemoteReadError("remote read answer: a chunk with more fields than a Chunk has")


# Series decoded together (``read_response``).
_SERIES_PER_STEP = 2048
# Bytes past the end of the decompressed answer, so fixed-size gathers never leave the buffer.
_PADDING = 32


def _decompress(answer: bytes) -> bytearray:
    """The snappy block ``answer`` decompressed into a buffer ``_PADDING`` bytes longer."""
    try:
        size = cramjam.snappy.decompress_raw_len(answer)
        # A snappy block expands at most ~22 times: a larger stated length is not one.
        if size > 32 * len(answer) + 64:
            raise RemoteReadError("remote read answer: not a snappy block")
        raw = bytearray(size + _PADDING)
        written = cramjam.snappy.decompress_raw_into(answer, memoryview(raw)[:size])
    except RemoteReadError:
        raise
    except Exception as exc:  # noqa: BLE001 (cramjam raises its own types)
        raise RemoteReadError(f"remote read answer cannot be decoded: {exc}") from exc
    if written != size:
        raise RemoteReadError("remote read answer: shorter than its stated length")
    return raw


def _varint(raw: bytes | bytearray, at: int, end: int) -> tuple[int, int]:
    """The varint at ``raw[at]`` and the position after it."""
    number, shift = 0, 0
    while at < end and shift < 64:
        byte = raw[at]
        number |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return number, at
        shift += 7
    raise RemoteReadError("remote read answer: a varint runs past its message")


def _fields(raw: bytearray, at: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(field number, start, end) of the length-delimited fields of the message ``raw[at:end]``;
    other fields are stepped over."""
    while at < end:
        tag, at = _varint(raw, at, end)
        kind = tag & 7
        if kind == 2:
            size, at = _varint(raw, at, end)
            if at + size > end:
                raise RemoteReadError("remote read answer: a field runs past its message")
            yield tag >> 3, at, at + size
            at += size
        elif kind == 0:
            at = _varint(raw, at, end)[1]
        elif kind in (1, 5):
            at += 8 if kind == 1 else 4
        else:
            raise RemoteReadError(f"remote read answer: wire type {kind} is not read")
    if at != end:
        raise RemoteReadError("remote read answer: a field runs past its message")


def _series_spans(raw: bytearray) -> tuple[np.ndarray, np.ndarray]:
    """Where each ``TimeSeries`` of ``ReadResponse.results[].timeseries`` starts and ends."""
    starts: list[int] = []
    ends: list[int] = []
    for number, at, end in _fields(raw, 0, len(raw) - _PADDING):
        if number != 1:
            continue
        for inner, first, last in _fields(raw, at, end):
            if inner == 1:
                starts.append(first)
                ends.append(last)
    return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


def _vector_varint(
    data: np.ndarray, at: np.ndarray, wanted: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The varints at positions ``at`` (all at once; only where ``wanted``, 0 elsewhere) and
    their sizes in bytes."""
    number = np.zeros(len(at), dtype=np.uint64)
    size = np.zeros(len(at), dtype=np.int64)
    going = np.ones(len(at), dtype=bool) if wanted is None else wanted.copy()
    for byte in range(10):
        if not going.any():
            return number.view(np.int64), size
        part = data[at + byte].astype(np.uint64)
        number |= np.where(going, part & np.uint64(0x7F), 0) << np.uint64(7 * byte)
        size += going
        going &= part >= 0x80
    raise RemoteReadError("remote read answer: a varint is longer than 10 bytes")


def _records(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The length-delimited records of every series (``TimeSeries`` fields), walked for all
    series together, a record each per step (a step per record of the longest series):
    ``(series, where each sample's body starts, where it ends)`` and ``(series, where each label
    record starts, where it ends)``, series after series. Other fields (exemplars, histograms)
    are stepped over."""
    samples: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    labels: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    going = starts < ends
    series = np.flatnonzero(going).astype(np.int64)
    at, end = starts[going], ends[going]
    while len(series):
        tags = data[at]
        if ((tags >= 0x80) | ((tags & 7) != 2)).any():
            raise RemoteReadError("remote read answer: a series field is not a message")
        size = data[at + 1].astype(np.int64)
        if (size >= 0x80).any():  # a body of 128 bytes or more (a sample's is at most 20)
            size, width = _vector_varint(data, at + 1)
            bodies = at + 1 + width
        else:
            bodies = at + 2
        stops = bodies + size
        if (stops > end).any() or (size < 0).any():
            raise RemoteReadError("remote read answer: a series field runs past its series")
        sample, label = tags == 0x12, tags == 0x0A
        samples.append((series[sample], bodies[sample], stops[sample]))
        if label.any():
            labels.append((series[label], at[label], stops[label]))
        going = stops < end
        series, at, end = series[going], stops[going], end[going]
    return _in_series_order(samples), _in_series_order(labels)


def _in_series_order(
    steps: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Records found step after step (each step in series order), series after series: the
    series of each record and its two position columns."""
    if not steps:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    series = np.concatenate([step[0] for step in steps])
    # A stable sort by series keeps each series' records in step order.
    order = np.argsort(series, kind="stable")
    first = np.concatenate([step[1] for step in steps])[order]
    second = np.concatenate([step[2] for step in steps])[order]
    return series[order], first, second


# Each series' labels by the bytes of its label records, kept across answers: a series' labels
# are the same bytes hour after hour, and parsing them again was about a twentieth of a
# deep-backfilled hour's CPU. Emptied when full (a fleet's pods come and go over a month).
# The dicts are shared by every answer that has the series: read, never changed.
_LABEL_CACHE: dict[bytes, dict[str, str]] = {}
_LABEL_CACHE_SIZE = 1 << 19


def _labels(
    raw: bytearray, count: int, owners: np.ndarray, heads: np.ndarray, stops: np.ndarray
) -> list[dict[str, str]]:
    """Each series' labels: its label records (tag 1) cut out; the ones not seen before
    (``_LABEL_CACHE``) parsed together, as one ``LabelSets`` message."""
    # Runs of adjacent label records of one series (usually one run a series, its first bytes).
    new_run = np.ones(len(heads), dtype=bool)
    new_run[1:] = (owners[1:] != owners[:-1]) | (heads[1:] != stops[:-1])
    firsts = np.flatnonzero(new_run)
    lasts = np.append(firsts[1:], len(heads))[: len(firsts)] - 1
    run_owner = owners[firsts].tolist()
    run_start, run_stop = heads[firsts].tolist(), stops[lasts].tolist()
    keys: list[bytes] = [b""] * count
    run, runs = 0, len(run_owner)
    while run < runs:
        number = run_owner[run]
        if run + 1 == runs or run_owner[run + 1] != number:  # one run: the usual case
            keys[number] = bytes(raw[run_start[run] : run_stop[run]])
            run += 1
            continue
        parts: list[bytes | bytearray] = []
        while run < runs and run_owner[run] == number:
            parts.append(raw[run_start[run] : run_stop[run]])
            run += 1
        keys[number] = b"".join(parts)
    cache = _LABEL_CACHE
    found = [cache.get(key) for key in keys]
    missing = [number for number, labels in enumerate(found) if labels is None]
    if not missing:
        return found  # type: ignore[return-value]
    message = b"".join(
        b"\x0a" + encode_varint(len(keys[number])) + keys[number] for number in missing
    )
    try:
        sets = _MESSAGES["LabelSets"].FromString(message)
    except Exception as exc:  # noqa: BLE001 (protobuf raises its own types)
        raise RemoteReadError(f"remote read answer: labels cannot be decoded: {exc}") from exc
    if len(cache) + len(missing) > _LABEL_CACHE_SIZE:
        cache.clear()
    for number, one in zip(missing, sets.series, strict=True):
        labels = {label.name: label.value for label in one.labels}
        found[number] = cache[keys[number]] = labels
    return found  # type: ignore[return-value]


def encode_varint(number: int) -> bytes:
    """A non-negative integer as a protobuf varint (7 bits a byte, lowest first)."""
    found = bytearray()
    while True:
        byte, number = number & 0x7F, number >> 7
        found.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(found)


def _decode(
    data: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Timestamps (ms) and values of the ``Sample`` messages ``data[starts[i]:ends[i]]``: an
    optional ``value`` (tag 0x09, 8 bytes) then an optional ``timestamp`` (tag 0x10, a varint);
    proto3 leaves a zero out."""
    count = len(starts)
    if not count:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    has_value = (ends > starts) & (data[starts] == 0x09)
    if (has_value & (ends - starts < 9)).any():
        raise RemoteReadError("remote read answer: a sample's value is cut short")
    rows = np.lib.stride_tricks.sliding_window_view(data, 11)
    values = rows[starts + 1, :8].copy().view("<f8").ravel()
    values[~has_value] = 0.0
    at = starts + np.where(has_value, 9, 0)
    has_time = at < ends
    if (has_time & (data[at] != 0x10)).any():
        raise RemoteReadError("remote read answer: a sample is not (value, timestamp)")
    size = ends - at - 1  # the varint's bytes: the timestamp is the sample's last field
    if (has_time & ((size < 1) | (size > 10))).any():
        raise RemoteReadError("remote read answer: a sample's timestamp is not a varint")
    size[~has_time] = 0
    block = rows[at + 1, :10]
    # Accumulated in place, a byte of every varint per step (no new array per step).
    times = np.zeros(count, dtype=np.uint64)
    part = np.empty(count, dtype=np.uint64)
    inside = np.empty(count, dtype=bool)
    flagged = np.empty(count, dtype=bool)
    for byte in range(int(size.max(initial=0))):
        column = block[:, byte]
        np.greater(size, byte, out=inside)
        # Every byte but the varint's last has the continuation bit, the last has not.
        np.greater_equal(column, 0x80, out=flagged)
        if (inside & (flagged != (size - 1 > byte))).any():
            raise RemoteReadError("remote read answer: a sample's timestamp is not a varint")
        np.bitwise_and(column, 0x7F, out=part, casting="unsafe")
        part *= inside
        np.left_shift(part, np.uint64(7 * byte), out=part)
        times |= part
    return times.view(np.int64), values
