"""``bench/collect.py --load remote-write``: the fleet of bench/_fleet.py streamed into a running
Prometheus through its remote-write receiver (``--web.enable-remote-write-receiver``).

Text for promtool of a day at 50,000 GPUs would be ~310 GB and ~10 h of import; this sends the
same series and values as snappy-compressed protobuf ``WriteRequest``s (Prometheus' ``prompb``),
in time order: block by block of ``BLOCK_STAMPS`` scrapes, every request of a block answered
before the first of the next one goes, so each series' samples arrive in order and no two
requests in flight are more than one block apart (far inside the head's one-hour appendable
window: no out-of-order window is needed). Within a block, requests are generated and encoded
while earlier ones are in flight: ``IN_FLIGHT`` sent at a time, as many more queued.

Samples are encoded with numpy, not one Python object per sample: a ``Sample`` (a double and a
millisecond timestamp, whose varint is always 6 bytes between 1971 and 2109) is 18 fixed bytes
inside its ``TimeSeries``; each series' labels are encoded once. Python touches each series once
per block, each sample never.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import cramjam
import numpy as np
import requests
from _fleet import Family, Fleet, Labels

IN_FLIGHT = 4
# Samples per request, about (whole series per request): ~0.9 MB before compression.
REQUEST_SAMPLES = 50_000
RETRIES = 3
# A sample inside TimeSeries.samples: tag, length, value tag, double, timestamp tag, varint.
SAMPLE = np.dtype(
    [
        ("tag", "u1"),
        ("length", "u1"),
        ("value_tag", "u1"),
        ("value", "<f8"),
        ("time_tag", "u1"),
        ("time", "u1", (6,)),
    ]
)
assert SAMPLE.itemsize == 18
# 6-byte varints: 2**35 <= ms < 2**42.
_TIME_RANGE = (1 << 35, 1 << 42)


class RemoteWriteError(RuntimeError):
    """Prometheus refused a request (its answer is in the message)."""


def varint(number: int) -> bytes:
    out = bytearray()
    while number >= 0x80:
        out.append((number & 0x7F) | 0x80)
        number >>= 7
    out.append(number)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def encode_labels(name: str, labels: Labels) -> bytes:
    """The ``labels`` fields of a TimeSeries: ``__name__`` and the rest, sorted by name."""
    pairs = sorted((("__name__", name), *labels))
    return b"".join(
        _field(1, _field(1, key.encode()) + _field(2, value.encode())) for key, value in pairs
    )


def encode_times(times_ms: np.ndarray) -> np.ndarray:
    """``(count, 6)`` varint bytes of millisecond timestamps."""
    low, high = _TIME_RANGE
    if times_ms.size and (times_ms.min() < low or times_ms.max() >= high):
        raise ValueError("timestamps outside 1971-2109 do not have 6-byte varints")
    shifts = np.arange(0, 42, 7, dtype=np.int64)
    out = ((times_ms[:, None] >> shifts) & 0x7F).astype(np.uint8)
    out[:, :5] |= 0x80
    return out


def encode_samples(values: np.ndarray, times_ms: np.ndarray) -> bytes:
    """``(series, count)`` values at ``count`` times as each series' samples, series after
    series, ``count * 18`` bytes each."""
    records = np.empty(values.shape, dtype=SAMPLE)
    records["tag"] = 2 << 3 | 2
    records["length"] = 16
    records["value_tag"] = 1 << 3 | 1
    records["value"] = values
    records["time_tag"] = 2 << 3
    records["time"] = encode_times(times_ms)[None, :, :]
    return records.tobytes()


class Encoder:
    """The requests of one family and block; series labels encoded once per family."""

    def __init__(self, family: Family) -> None:
        self.family = family
        self.labels = [encode_labels(family.name, labels) for labels in family.series]

    def requests(self, first: int, count: int, times_ms: np.ndarray) -> Iterator[bytes]:
        if not self.labels:
            return
        step = max(1, REQUEST_SAMPLES // count)
        width = count * 18
        samples = memoryview(encode_samples(self.family.values(first, count), times_ms))
        for start in range(0, len(self.labels), step):
            parts: list[bytes | memoryview] = []
            for index in range(start, min(start + step, len(self.labels))):
                body_length = len(self.labels[index]) + width
                parts += [
                    b"\x0a",
                    varint(body_length),
                    self.labels[index],
                    samples[index * width : (index + 1) * width],
                ]
            yield b"".join(parts)


class Sender:
    """Posts compressed WriteRequests, ``IN_FLIGHT`` at a time, one keep-alive session per
    thread; a refused request raises (a 5xx is retried: samples already stored are the same
    samples again, which Prometheus accepts as duplicates)."""

    def __init__(self, url: str) -> None:
        self.url = f"{url}/api/v1/write"
        self.local = threading.local()
        self.pool = ThreadPoolExecutor(IN_FLIGHT)
        self.bytes_sent = 0
        self.requests = 0
        self._lock = threading.Lock()

    def submit(self, body: bytes) -> Future[None]:
        return self.pool.submit(self._send, body)

    def _send(self, body: bytes) -> None:
        session = getattr(self.local, "session", None)
        if session is None:
            session = self.local.session = requests.Session()
        compressed = bytes(cramjam.snappy.compress_raw(body))
        headers = {
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        }
        for attempt in range(RETRIES + 1):
            answer = session.post(self.url, data=compressed, headers=headers, timeout=300)
            if answer.status_code < 300:
                break
            if answer.status_code < 500 or attempt == RETRIES:
                raise RemoteWriteError(f"HTTP {answer.status_code}: {answer.text[:500]}")
            time.sleep(1 + attempt)
        with self._lock:
            self.bytes_sent += len(compressed)
            self.requests += 1

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def stream(fleet: Fleet, url: str) -> dict[str, int]:
    """Send the whole fleet to Prometheus at ``url``, oldest block first; returns counts."""
    encoders = [Encoder(family) for family in fleet.families]
    sender = Sender(url)
    pending: list[Future[None]] = []
    try:
        for first, count in fleet.blocks():
            times_ms = fleet.times(first, count) * 1000
            for encoder in encoders:
                for body in encoder.requests(first, count, times_ms):
                    # Bounded: the oldest request in flight ends before another is queued.
                    while len([f for f in pending if not f.done()]) >= 2 * IN_FLIGHT:
                        next(f for f in pending if not f.done()).result()
                    pending.append(sender.submit(body))
            # The block's requests answered before the next block's first is sent.
            for future in pending:
                future.result()
            pending = []
    finally:
        for future in pending:
            future.cancel()
        sender.close()
    return {"requests": sender.requests, "bytes_sent": sender.bytes_sent}


# Hours per count query: Prometheus holds a range query's samples of every series at once, so
# one query over a month at 5,000 GPUs took it past 18 GB; a day per query stays small.
COUNT_HOURS = 24


def count_stored(url: str, fleet: Fleet, end_seconds: float) -> int:
    """Samples Prometheus holds for the fleet's families, by count queries: per family, the
    sum of ``count_over_time`` over consecutive hours that cover the fleet's span, asked
    ``COUNT_HOURS`` hours at a time."""
    hours = max(1, -(-(int(end_seconds) - int(fleet.start)) // 3600))
    total = 0
    for family in fleet.families:
        if not family.series:
            continue
        # Each query's steps are hour ends; the last query ends at ``end_seconds``.
        for last in range(hours - 1, -1, -COUNT_HOURS):
            first = max(0, last - COUNT_HOURS + 1)
            answer = requests.get(
                f"{url}/api/v1/query_range",
                params={
                    "query": f'sum(count_over_time({{__name__="{family.name}"}}[1h]))',
                    "start": f"{end_seconds - last * 3600:.3f}",
                    "end": f"{end_seconds - first * 3600:.3f}",
                    "step": "3600",
                },
                timeout=600,
            )
            answer.raise_for_status()
            for result in answer.json()["data"]["result"]:
                total += sum(int(float(value)) for _, value in result["values"])
    return total


def wait_ingested(url: str, fleet: Fleet, end_seconds: float, timeout: float = 600.0) -> int:
    """Poll the count queries until every sample of the fleet is there; raise if not in time."""
    expected = fleet.samples()
    deadline = time.monotonic() + timeout
    while True:
        stored = count_stored(url, fleet, end_seconds)
        if stored == expected:
            return stored
        if stored > expected or time.monotonic() > deadline:
            raise RemoteWriteError(f"Prometheus holds {stored:,} samples, expected {expected:,}")
        time.sleep(1)
