"""Prometheus' XOR chunks decoded all at once (``ledger.deep.chunks``) and the streamed remote
read answer around them (``remote.read_streamed``).

The chunks are written by ``encode``, a sample at a time, bit by bit, as Prometheus' appender
writes them (``tsdb/chunkenc/xor.go``); the decoder, which reads a sample of every chunk per step
with array operations, must give back every timestamp and every value bit for bit, in each
branch of the encoding. The answers from a real Prometheus are compared with its samples answer
in tests/ledger/test_deep_backfill.py."""

from __future__ import annotations

import math
import random
import struct

import google_crc32c
import numpy as np
import pytest

from ledger.deep import chunks, remote

STALE = struct.unpack("<d", struct.pack("<Q", remote.STALE_NAN))[0]


class _Bits:
    def __init__(self) -> None:
        self.bits: list[int] = []

    def write(self, value: int, width: int) -> None:
        self.bits.extend((value >> shift) & 1 for shift in range(width - 1, -1, -1))

    def byte(self, value: int) -> None:
        self.write(value, 8)

    def data(self) -> bytes:
        padded = self.bits + [0] * (-len(self.bits) % 8)
        return bytes(
            int("".join(map(str, padded[at : at + 8])), 2) for at in range(0, len(padded), 8)
        )


def _varint(number: int) -> bytes:
    return remote.encode_varint(number)


def _float_bits(value: float) -> int:
    return struct.unpack(">Q", struct.pack(">d", value))[0]


def _fits(number: int, width: int) -> bool:
    return -((1 << (width - 1)) - 1) <= number <= 1 << (width - 1)


def encode(samples: list[tuple[int, float]]) -> bytes:
    """An XOR chunk of ``samples`` ((ms, value) in time order), as Prometheus appends them."""
    bits = _Bits()
    leading, trailing = 0xFF, 0
    previous_time = delta = 0
    previous_value = 0
    for number, (at, value) in enumerate(samples):
        current = _float_bits(value)
        if number == 0:
            zigzag = (at << 1) ^ (at >> 63)  # Go's binary.PutVarint
            for byte in _varint(zigzag & (2**64 - 1)):
                bits.byte(byte)
            bits.write(current, 64)
        else:
            if number == 1:
                delta = at - previous_time
                for byte in _varint(delta):
                    bits.byte(byte)
            else:
                new_delta = at - previous_time
                dod = new_delta - delta
                delta = new_delta
                if dod == 0:
                    bits.write(0, 1)
                else:
                    for prefix, width, size in ((0b10, 2, 14), (0b110, 3, 17), (0b1110, 4, 20)):
                        if _fits(dod, size):
                            bits.write(prefix, width)
                            bits.write(dod & ((1 << size) - 1), size)
                            break
                    else:
                        bits.write(0b1111, 4)
                        bits.write(dod & (2**64 - 1), 64)
            xor = current ^ previous_value
            if xor == 0:
                bits.write(0, 1)
            else:
                bits.write(1, 1)
                new_leading = min(64 - xor.bit_length(), 31)
                new_trailing = (xor & -xor).bit_length() - 1
                if leading != 0xFF and new_leading >= leading and new_trailing >= trailing:
                    bits.write(0, 1)
                    bits.write(xor >> trailing, 64 - leading - trailing)
                else:
                    leading, trailing = new_leading, new_trailing
                    significant = 64 - leading - trailing
                    bits.write(1, 1)
                    bits.write(leading, 5)
                    bits.write(significant & 63, 6)  # 64 is written as 0
                    bits.write(xor >> trailing, significant)
        previous_time, previous_value = at, current
    return struct.pack(">H", len(samples)) + bits.data()


def decoded(chunk_samples: list[list[tuple[int, float]]]) -> list[list[tuple[int, int]]]:
    """Each chunk's samples through ``encode`` and ``chunks.decode``, values as their bits."""
    datas = [encode(samples) for samples in chunk_samples]
    ends = np.cumsum([len(data) for data in datas])
    chunk, times, values = chunks.decode(b"".join(datas), ends - [len(d) for d in datas], ends)
    found: list[list[tuple[int, int]]] = [[] for _ in datas]
    for owner, at, bits in zip(
        chunk.tolist(), times.tolist(), values.view(np.uint64).tolist(), strict=True
    ):
        found[owner].append((at, bits))
    return found


def as_bits(samples: list[tuple[int, float]]) -> list[tuple[int, int]]:
    return [(at, _float_bits(value)) for at, value in samples]


def test_every_branch_of_the_encoding_decodes_bit_for_bit():
    start = 1_767_600_011_000
    # Deltas of deltas in each bucket and at each bucket's edges, both signs; a 64-bit one.
    steps = [30_000, 30_000, 30_000, 30_001, 30_000 - 8_191, 30_000, 38_192, 30_000]
    steps += [30_000 + 8_193, 30_000, 30_000 + 65_536, 30_000, 30_000 + 2**19, 30_000 - 50]
    steps += [30_000 + 2**20, 30_000, 30_000 + 2**40, 30_000, 1, 30_000, 10**12]
    times = [start]
    for step in steps:
        times.append(times[-1] + step)
    # Values: repeated, in the last window of zeros, in a new one, every bit different (64
    # meaningful bits), more than 31 leading zeros, NaN, infinities, -0.0, a staleness marker.
    values = [0.5, 0.5, 0.75, 0.625, -0.5, 2.0**-1000, 1e300, -1e-300, math.nan, math.inf]
    values += [-math.inf, -0.0, 0.0, STALE, 0.7342, 0.7343, 123456.789, 1.0, 1.0 + 2**-52]
    values += [5e-324, 42.0, 42.0]
    samples = list(zip(times, values, strict=True))

    assert decoded([samples]) == [as_bits(samples)]


def test_chunks_of_every_length_decode_together_each_in_its_own_place():
    generator = random.Random(7)
    chunk_samples = []
    for length in [120, 1, 2, 3, 120, 0, 57, 120, 2]:
        at = generator.randrange(10**12, 2 * 10**12)
        found = []
        for _ in range(length):
            at += generator.choice([15_000, 30_000, 30_000, 30_000, 29_999, 61_000])
            found.append((at, round(generator.random(), generator.choice([2, 4, 6]))))
        chunk_samples.append(found)

    assert decoded(chunk_samples) == [as_bits(samples) for samples in chunk_samples]


def test_samples_come_a_step_of_every_chunk_at_a_time():
    first = [(1000, 1.0), (2000, 2.0), (3000, 3.0)]
    second = [(1500, 5.0), (2500, 6.0)]
    datas = [encode(first), encode(second)]
    ends = np.cumsum([len(data) for data in datas])

    chunk, times, _values = chunks.decode(b"".join(datas), ends - [len(d) for d in datas], ends)

    assert chunk.tolist() == [0, 1, 0, 1, 0]
    assert times.tolist() == [1000, 1500, 2000, 2500, 3000]


@pytest.mark.parametrize(
    "data",
    [
        b"\x00",  # shorter than the sample count
        struct.pack(">H", 3) + _varint(2000) + b"\x00" * 8,  # 3 samples said, 1 there
        # A second value with 20 leading zeros and 50 meaningful bits: 70 bits.
        struct.pack(">H", 2) + _varint(2000) + b"\x00" * 8 + _varint(10) + bytes([0xE9, 0x90]),
    ],
)
def test_a_chunk_that_is_not_a_well_formed_xor_chunk_is_an_error(data: bytes):
    with pytest.raises(chunks.ChunkError):
        chunks.decode(data + b"\x00" * 4, np.array([0]), np.array([len(data)]))


def field(number: int, body: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(body)) + body


def varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def label(name: str, value: str) -> bytes:
    return field(1, field(1, name.encode()) + field(2, value.encode()))


def frame(message: bytes, checksum: int | None = None) -> bytes:
    crc = google_crc32c.value(message) if checksum is None else checksum
    return _varint(len(message)) + crc.to_bytes(4, "big") + message


def chunk_message(samples: list[tuple[int, float]], encoding: int = 1) -> bytes:
    return field(
        2,
        varint_field(1, samples[0][0])
        + varint_field(2, samples[-1][0])
        + varint_field(3, encoding)
        + field(4, encode(samples)),
    )


def test_a_streamed_answer_gives_each_series_samples_in_the_range_without_stale_markers():
    gpu = label("__name__", "DCGM_FI_DEV_GPU_UTIL") + label("UUID", "GPU-1")
    # Two chunks, the first straddling the range's start.
    first = field(
        1,
        gpu
        + chunk_message([(3_500_000, 9.0), (3_600_000, 10.0), (3_630_000, 11.0)])
        + chunk_message([(3_660_000, 12.0), (3_690_000, STALE)]),
    )
    fb = field(1, label("__name__", "DCGM_FI_DEV_FB_USED") + chunk_message([(3_601_000, 80.0)]))
    histogram = field(1, label("__name__", "x") + chunk_message([(3_601_000, 1.0)], encoding=2))
    answer = frame(first + varint_field(2, 0)) + frame(fb) + frame(histogram)

    found = remote.read_answer(answer, f"{remote.STREAMED}; proto=x", 3_600_001, 7_200_000)

    assert found.labels == [
        {"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": "GPU-1"},
        {"__name__": "DCGM_FI_DEV_FB_USED"},
        {"__name__": "x"},
    ]
    samples = sorted(
        zip(found.series.tolist(), found.times_ms.tolist(), found.values.tolist(), strict=True)
    )
    assert samples == [(0, 3_630_000, 11.0), (0, 3_660_000, 12.0), (1, 3_601_000, 80.0)]
    assert found.stats.skip_reasons == {"remote_read_chunk_not_float": 1}


@pytest.mark.parametrize(
    "answer",
    [
        frame(field(1, label("a", "b")), checksum=1),  # a checksum that does not match
        frame(field(1, label("a", "b")))[:-2],  # a frame cut short
        frame(field(1, b"\x08\x01")),  # a series field that is not a message
        frame(field(1, field(2, b"\x0d\x00\x00\x00\x00"))),  # a chunk field of a fixed width
        frame(field(1, field(2, varint_field(3, 1) + field(4, b"\x00\x05\x00")))),  # cut chunk
    ],
)
def test_a_malformed_streamed_answer_is_an_error(answer: bytes):
    with pytest.raises(remote.RemoteReadError):
        remote.read_answer(answer, remote.STREAMED, 0, 10**13)


@pytest.mark.parametrize("label_bytes", [10, 200, 20_000])
def test_frames_of_one_two_and_three_byte_sizes(label_bytes: int):
    message = field(1, label("pod", "p" * label_bytes) + chunk_message([(5_000, 1.0)]))
    assert len(_varint(len(message))) == {10: 1, 200: 2, 20_000: 3}[label_bytes]

    found = remote.read_answer(frame(message) + frame(message), remote.STREAMED, 0, 10_000)

    assert found.labels == [{"pod": "p" * label_bytes}] * 2
    assert found.series.tolist() == [0, 1]
