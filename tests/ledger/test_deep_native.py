"""The C XOR chunk decoder (``ledger/deep/_xor.c``, ``chunks.decode_native``) against the numpy
one (``chunks.decode_numpy``, the reference): the same chunk, time and value of every sample, bit
for bit and in the same order, on the chunks a real Prometheus stores and streams and on random
series written as Prometheus' appender writes them (tests/ledger/test_deep_chunks.py ``encode``);
corrupt or cut chunk bytes are a ``ChunkError`` from both, never a crash.

The C decoder is built by ``make venv``; without it these tests skip, and fail under ``CI``.
"""

from __future__ import annotations

import logging
import math
import random
import struct
from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import pytest

from fleet.prometheus import PrometheusClient
from ledger.deep import chunks, remote
from tests.fleet.conftest import T0
from tests.ledger.test_deep_chunks import STALE, as_bits, encode
from tests.prometheus_server import in_ci


@pytest.fixture(autouse=True)
def _native_built() -> None:
    if not chunks.native():
        message = "the C XOR chunk decoder is not built (make venv)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)


def joined(datas: list[bytes]) -> tuple[bytes, np.ndarray, np.ndarray]:
    ends = np.cumsum([len(data) for data in datas], dtype=np.int64)
    return b"".join(datas), ends - [len(data) for data in datas], ends


def both(data: bytes, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, ...]:
    """Both decoders' arrays, asserted equal (values compared as their bits)."""
    native = chunks.decode_native(data, starts, ends)
    reference = chunks.decode_numpy(data, starts, ends)
    assert native[0].tolist() == reference[0].tolist()
    assert native[1].tolist() == reference[1].tolist()
    assert native[2].view(np.uint64).tolist() == reference[2].view(np.uint64).tolist()
    return native


def outcome(data: bytes, starts: np.ndarray, ends: np.ndarray, decode) -> object:
    """A decoder's arrays as lists, or ``ChunkError`` when it finds the chunks malformed."""
    try:
        chunk, times, values = decode(data, starts, ends)
    except chunks.ChunkError:
        return chunks.ChunkError
    return chunk.tolist(), times.tolist(), values.view(np.uint64).tolist()


# --- the chunks a real Prometheus stores ------------------------------------------------------


def test_the_chunks_a_real_prometheus_streams_decode_the_same(
    alpha_prometheus, monkeypatch: pytest.MonkeyPatch
):
    # Every stored series of the generated fleet (DCGM, with its NaN sample, and
    # kube-state-metrics), hour by hour, as the deep backfill reads them.
    seen: list[tuple[bytes, np.ndarray, np.ndarray]] = []

    def spy(data, starts, ends):
        seen.append((bytes(data), np.array(starts), np.array(ends)))
        return chunks.decode_numpy(data, starts, ends)

    monkeypatch.setattr(chunks, "decode", spy)
    client = PrometheusClient(alpha_prometheus.url)
    for hour in range(-1, 4):
        end_ms = round((T0 + timedelta(hours=hour)).timestamp() * 1000)
        request = remote.read_request(end_ms - 3_600_000 + 1, end_ms, [("__name__", "=~", ".+")])
        answer, content_type = client.remote_read(request)
        assert content_type.startswith(remote.STREAMED)
        remote.read_answer(answer, content_type, end_ms - 3_600_000 + 1, end_ms)

    samples = nans = 0
    lengths: set[int] = set()
    for data, starts, ends in seen:
        chunk, _times, values = both(data, starts, ends)
        samples += len(chunk)
        nans += int(np.isnan(values).sum())
        lengths.update(np.bincount(chunk).tolist())
    # Whole chunks of 120 samples (30 s scrapes) and the ones an hour's end cut; the NaN sample.
    assert samples > 10_000
    assert 120 in lengths and min(lengths) < 120
    assert nans >= 1


# --- random series -----------------------------------------------------------------------------


def series(generator: random.Random, length: int, kind: str) -> list[tuple[int, float]]:
    """``length`` samples of a series of ``kind``, timestamps in time order."""
    at = generator.randrange(-(10**12), 2 * 10**12)
    found: list[tuple[int, float]] = []
    value = generator.uniform(-1e6, 1e6)
    delta = 30_000
    for _ in range(length):
        if kind == "scrapes":  # 30 s scrapes with jitter, a gauge drifting
            at += 30_000 + generator.randrange(-50, 50)
            value = round(value + generator.gauss(0, 3), 2)
        elif kind == "constant":
            at += 15_000
        elif kind == "large deltas":  # deltas of deltas of every width, at each one's edges
            if len(found) > 1:  # the second sample's delta is unsigned: the first one kept
                delta += generator.choice(DELTAS_OF_DELTAS) * generator.choice([1, -1])
            at += delta
            value = generator.choice([0.0, -0.0, value, -value, value * 2**30])
        elif kind == "negative":
            at += generator.randrange(1, 120_000)
            value = -abs(generator.uniform(0, 10 ** generator.randrange(-300, 300)))
        elif kind == "special":  # NaN, infinities, staleness markers, subnormals
            at += generator.randrange(1, 60_000)
            value = generator.choice([math.nan, math.inf, -math.inf, STALE, 5e-324, 1.0, 0.0])
        else:  # any 64 bits
            at += generator.randrange(1, 2**20)
            value = struct.unpack("<d", generator.getrandbits(64).to_bytes(8, "little"))[0]
        found.append((at, value))
    return found


# 0 and the edges of the 14-, 17- and 20-bit ranges (the largest positive one is 2^(n-1)), then
# 64 bits.
DELTAS_OF_DELTAS = [0, 1, 2**13 - 1, 2**13, 2**13 + 1, 2**16, 2**16 + 1, 2**19, 2**19 + 1, 2**40]
KINDS = ["scrapes", "constant", "large deltas", "negative", "special", "bits"]


def random_chunks(seed: int, count: int = 40) -> Iterator[list[tuple[int, float]]]:
    generator = random.Random(seed)
    for _ in range(count):
        length = generator.choice([1, 2, 3, 120, generator.randrange(1, 121)])
        yield series(generator, length, generator.choice(KINDS))


@pytest.mark.parametrize("seed", range(8))
def test_random_series_decode_to_their_samples_in_both_decoders(seed: int):
    chunk_samples = list(random_chunks(seed))

    chunk, times, values = both(*joined([encode(samples) for samples in chunk_samples]))

    found: list[list[tuple[int, int]]] = [[] for _ in chunk_samples]
    for owner, at, bits in zip(
        chunk.tolist(), times.tolist(), values.view(np.uint64).tolist(), strict=True
    ):
        found[owner].append((at, bits))
    assert found == [as_bits(samples) for samples in chunk_samples]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("length", [1, 2, 120])
def test_single_sample_short_and_full_chunks_of_each_kind(kind: str, length: int):
    samples = series(random.Random(length), length, kind)

    _chunk, times, values = both(*joined([encode(samples)]))

    assert list(zip(times.tolist(), values.view(np.uint64).tolist(), strict=True)) == as_bits(
        samples
    )


def test_a_chunk_of_no_samples_and_no_chunks_at_all():
    assert [len(part) for part in both(*joined([struct.pack(">H", 0)]))] == [0, 0, 0]
    empty = np.zeros(0, dtype=np.int64)
    assert [len(part) for part in both(b"", empty, empty)] == [0, 0, 0]


# --- corrupt bytes -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_corrupt_bytes_give_the_same_samples_or_an_error_from_both(seed: int):
    generator = random.Random(seed)
    errors = 0
    for _ in range(150):
        datas = [encode(samples) for samples in random_chunks(generator.randrange(10**6), 3)]
        broken = bytearray(datas[1])
        what = generator.choice(["flip", "truncate", "count", "garbage"])
        if what == "flip":
            for _ in range(generator.randrange(1, 4)):
                broken[generator.randrange(len(broken))] ^= 1 << generator.randrange(8)
        elif what == "truncate":
            broken = broken[: generator.randrange(2, len(broken) + 1)]
        elif what == "count":  # says more samples than it holds
            broken[:2] = struct.pack(">H", generator.randrange(1, 65_536))
        else:
            broken[2:] = generator.randbytes(len(broken) - 2)
        data, starts, ends = joined([datas[0], bytes(broken), datas[2]])

        native = outcome(data, starts, ends, chunks.decode_native)

        assert native == outcome(data, starts, ends, chunks.decode_numpy)
        errors += native is chunks.ChunkError
    assert errors > 10


@pytest.mark.parametrize(
    ("data", "starts", "ends"),
    [
        (b"\x00", [0], [1]),  # shorter than the sample count
        (b"\x00\x01" + b"\xff" * 11, [0], [13]),  # a varint longer than 10 bytes
        (b"\x00\x78\x02" + b"\x00" * 8, [0], [11]),  # 120 samples said, one there
        (b"\x00\x01\x02" + b"\x00" * 8, [0], [40]),  # past the end of the bytes given
        (b"\x00\x01\x02" + b"\x00" * 8, [-1], [11]),  # before their start
    ],
)
def test_malformed_chunks_are_a_chunk_error(data: bytes, starts: list[int], ends: list[int]):
    with pytest.raises(chunks.ChunkError):
        chunks.decode_native(data, np.array(starts), np.array(ends))


def test_without_the_c_decoder_chunks_decode_with_numpy_and_it_is_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    monkeypatch.setattr(chunks, "_xor", None)
    monkeypatch.setattr(chunks, "_fallback_logged", False)
    samples = [(1_000, 1.5), (31_000, 2.5)]
    with caplog.at_level(logging.WARNING, logger=chunks.__name__):
        for _ in range(2):
            _chunk, times, values = chunks.decode(*joined([encode(samples)]))
            assert list(zip(times.tolist(), values.tolist(), strict=True)) == samples

    assert not chunks.native()
    assert [record.message for record in caplog.records].count(caplog.records[0].message) == 1
    assert "not built" in caplog.records[0].message
