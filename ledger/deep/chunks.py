"""Prometheus' XOR chunks (its TSDB's float encoding), decoded with numpy, all chunks at once.

The remote read API streams stored chunks as they are on disk (``STREAMED_XOR_CHUNKS``) when the
client accepts them: Prometheus then copies chunk bytes instead of decoding every sample and
encoding it again as protobuf, about four times less of its CPU for the same samples
(bench/RESULTS.md). The price is decoding the chunks here. A chunk is a bit stream (the
"Gorilla" encoding, Prometheus ``tsdb/chunkenc/xor.go``): a big-endian 16-bit sample count, the
first timestamp as a zig-zag varint and the first value as 64 raw bits, the second timestamp as
an unsigned varint delta, and from then on each timestamp as a delta of deltas in a prefix code
(``0``; ``10`` + 14 bits; ``110`` + 17; ``1110`` + 20; ``1111`` + 64) and each value XORed with
the one before (``0`` same value; ``10`` + the meaningful bits inside the previous window of
leading and trailing zeros; ``11`` + 5 bits of leading zeros + 6 bits of length (0 = 64) + the
bits).

A bit stream cannot be read from the middle, but chunks are independent: ``decode`` takes the
n-th sample of every chunk in one step of array operations, about 120 steps for an hour of
30-second scrapes whatever the number of chunks, instead of one Python step per sample.

``decode`` uses the C decoder ``_xor`` (``_xor.c``, built in place by ``make venv``: ``python
ledger/deep/build_native.py``) when it is there, about a sample per few nanoseconds and without
holding the GIL; it writes the same arrays as the numpy decoder, ``decode_numpy``, which stays
the reference (tests/ledger/test_deep_native.py compares them) and the fallback, logged once.
"""

from __future__ import annotations

import logging

import numpy as np

try:
    from ledger.deep import _xor
except ImportError:  # not built: the numpy decoder
    _xor = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

# Bytes after the last chunk: the reads of a sample that runs past its chunk's end (at most
# 145 bits, checked after each step) stay in the buffer.
_PADDING = 32
_ONE = np.uint64(1)
_U64 = np.uint64


class ChunkError(ValueError):
    """Chunk bytes that are not a well-formed XOR chunk."""


# Whether the missing C decoder was logged (once a process).
_fallback_logged = False


def native() -> bool:
    """Whether ``decode`` runs the C decoder."""
    return _xor is not None


def decode(
    data: bytes | bytearray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The samples of the XOR chunks ``data[starts[i]:ends[i]]``.

    Returns ``(chunk, times_ms, values)``, a sample each: its chunk (an index into ``starts``),
    timestamp (int64 milliseconds) and value (float64). The samples come step after step (every
    chunk's first sample, then every chunk's second, ...), not chunk after chunk: the binning
    that follows is a count by (series, window) and needs no order. Chunk bytes that are not a
    well-formed chunk raise ``ChunkError``."""
    if _xor is not None:
        return decode_native(data, starts, ends)
    global _fallback_logged
    if not _fallback_logged:
        _fallback_logged = True
        logger.warning(
            "The C XOR chunk decoder is not built (make venv, or python "
            "ledger/deep/build_native.py): chunks are decoded with numpy, several times slower"
        )
    return decode_numpy(data, starts, ends)


def _spans(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each chunk's first and past-last byte as contiguous int64 arrays (what the C decoder
    takes); a ``ChunkError`` when a chunk is shorter than its 2-byte sample count."""
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    if ((ends - starts) < 2).any():
        raise ChunkError("XOR chunk: shorter than its header")
    return starts, ends


def _no_samples() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    empty = np.zeros(0, dtype=np.int64)
    return empty, empty, np.zeros(0)


def decode_native(
    data: bytes | bytearray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``decode`` by the C decoder: the same arrays, bit for bit."""
    if _xor is None:
        raise RuntimeError("the C XOR chunk decoder is not built")
    starts, ends = _spans(starts, ends)
    if not len(starts):
        return _no_samples()
    if (starts < 0).any() or (ends > len(data)).any():
        raise ChunkError("XOR chunk: outside the bytes given")
    view = np.frombuffer(data, dtype=np.uint8)
    counts = (view[starts].astype(np.int64) << 8) | view[starts + 1]
    # The numpy decoder's order: step after step, at each step the chunks still going, the
    # longest first (a stable sort: equal lengths in chunk order).
    order = np.argsort(-counts, kind="stable")
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[order] = np.arange(len(order))
    steps = int(counts.max())
    going = np.searchsorted(-counts[order], -np.arange(steps), side="left")
    offsets = np.zeros(steps, dtype=np.int64)
    np.cumsum(going[:-1], out=offsets[1:])
    total = int(counts.sum())
    chunk = np.empty(total, dtype=np.int64)
    times = np.empty(total, dtype=np.int64)
    values = np.empty(total, dtype=np.uint64)
    error = _xor.decode_into(data, starts, ends, counts, ranks, offsets, chunk, times, values)
    if error is not None:
        raise ChunkError(error)
    return chunk, times, values.view(np.float64)


def decode_numpy(
    data: bytes | bytearray, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``decode`` with numpy array operations, a step of every chunk at a time: the reference
    the C decoder is tested against, and what runs without it."""
    starts, ends = _spans(starts, ends)
    if not len(starts):
        return _no_samples()
    # Whole big-endian words (padded), read as native integers once.
    size = -(-(len(data) + _PADDING) // 8) * 8
    buffer = np.zeros(size, dtype=np.uint8)
    buffer[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    counts = (buffer[starts].astype(np.int64) << 8) | buffer[starts + 1]
    # Longest chunks first: the chunks still going at step n are a prefix of the arrays.
    order = np.argsort(-counts, kind="stable")
    reader = _Reader(buffer, starts[order] + 2, ends[order], counts[order])
    steps_times, steps_values = reader.run()
    # Row ``step`` holds the step's sample of the chunks still going: a prefix of ``order``.
    going = reader.going.tolist()
    if not going:  # chunks of no samples
        return _no_samples()
    chunk = np.concatenate([order[:size] for size in going])
    times = np.concatenate([row[:size] for row, size in zip(steps_times, going, strict=False)])
    values = np.concatenate([row[:size] for row, size in zip(steps_values, going, strict=False)])
    return chunk, times, values.view(np.float64)


class _Reader:
    """The state of every chunk's bit stream, advanced a sample a step."""

    def __init__(
        self,
        buffer: np.ndarray,
        firsts: np.ndarray,
        ends: np.ndarray,
        counts: np.ndarray,
    ) -> None:
        self.buffer = buffer
        self.words = buffer.view(">u8").astype(np.uint64)
        self.ends_bits = ends * 8
        self.counts = counts
        # Bit positions in the buffer (absolute), one per chunk.
        self.position = firsts * 8
        self.steps = int(counts.max(initial=0))
        # Counts come largest first: at step n the chunks with more than n samples, a prefix.
        self.going = np.searchsorted(-counts, -np.arange(self.steps), side="left")
        # A row per step (written whole, contiguously), a column per chunk.
        self.times = np.zeros((self.steps, len(counts)), dtype=np.int64)
        self.values = np.zeros((self.steps, len(counts)), dtype=np.uint64)
        self.value = np.zeros(len(counts), dtype=np.uint64)
        self.leading = np.zeros(len(counts), dtype=np.uint64)
        self.trailing = np.zeros(len(counts), dtype=np.uint64)
        self.time = np.zeros(len(counts), dtype=np.int64)
        self.delta = np.zeros(len(counts), dtype=np.int64)

    def run(self) -> tuple[np.ndarray, np.ndarray]:
        for step, going in enumerate(self.going.tolist()):
            if step == 0:
                self._first(going)
            elif step == 1:
                self._second(going)
            else:
                self._next(going)
            # A chunk that says it holds more samples than its bytes do stops here, before
            # reads past the buffer's padding.
            if (self.position[:going] > self.ends_bits[:going]).any():
                raise ChunkError("XOR chunk: its samples run past its bytes")
            self.times[step, :going] = self.time[:going]
            self.values[step, :going] = self.value[:going]
        return self.times, self.values

    def _peek(self, position: np.ndarray) -> np.ndarray:
        """The 64 bits starting at each bit ``position``, as big-endian unsigned integers."""
        word = position >> 6
        shift = (position & 63).astype(np.uint64)
        high = self.words[word] << shift
        # ``>> 1 >> (63 - shift)``: no shift by 64 (undefined) when ``shift`` is 0.
        return high | ((self.words[word + 1] >> _ONE) >> (np.uint64(63) - shift))

    def _varints(self, going: int, signed: bool) -> np.ndarray:
        """The byte-aligned varints at each chunk's position (the first two timestamps)."""
        position = self.position[:going]
        if (position & 7).any():
            raise ChunkError("XOR chunk: a varint that is not byte-aligned")
        at = position >> 3
        number = np.zeros(going, dtype=np.uint64)
        size = np.zeros(going, dtype=np.int64)
        more = np.ones(going, dtype=bool)
        for byte in range(10):
            if not more.any():
                break
            part = self.buffer[at + byte].astype(np.uint64)
            number |= np.where(more, part & _U64(0x7F), _U64(0)) << _U64(7 * byte)
            size += more
            more &= part >= 0x80
        else:
            if more.any():
                raise ChunkError("XOR chunk: a varint longer than 10 bytes")
        self.position[:going] += size * 8
        if not signed:
            return number.view(np.int64)
        # Zig-zag: the sign in the lowest bit.
        half = (number >> _ONE).view(np.int64)
        return np.where((number & _ONE).astype(bool), ~half, half)

    def _first(self, going: int) -> None:
        self.time[:going] = self._varints(going, signed=True)
        self.value[:going] = self._peek(self.position[:going])
        self.position[:going] += 64

    def _second(self, going: int) -> None:
        self.delta[:going] = self._varints(going, signed=False)
        self.time[:going] += self.delta[:going]
        self._value(going, self._peek(self.position[:going]))

    def _next(self, going: int) -> None:
        position = self.position[:going]
        word = self._peek(position)
        # The timestamp's delta of deltas: its prefix (how many of the first four bits are ones
        # before a zero) says how many bits follow.
        kind = _PREFIX_ONES[(word >> np.uint64(60)).astype(np.intp)]
        size, prefix = _DOD_BITS[kind], _PREFIX_BITS[kind]
        # ``>> 1 >> (63 - size)``, times 0 for no bits: no shift by 64.
        bits = (((word << prefix) >> _ONE) >> (np.uint64(63) - size)) * (size > 0)
        # Above half the range is negative: two's complement within ``size`` bits.
        bits -= (bits > _DOD_HALF[kind]) * _DOD_FULL[kind]
        consumed = prefix + size
        wide = np.flatnonzero(kind == 4)
        if len(wide):  # ``1111`` + 64 bits: rare, read apart
            bits[wide] = self._peek(position[wide] + 4)
        self.delta[:going] += bits.view(np.int64)
        self.time[:going] += self.delta[:going]
        # The value's control bits (at most 13) are still in ``word`` after at most 24 bits of
        # timestamp; after 68 they are not.
        rest = word << np.minimum(consumed, _U64(63))
        if len(wide):
            rest[wide] = self._peek(position[wide] + 68)
        position += consumed.view(np.int64)
        self._value(going, rest)

    def _value(self, going: int, word: np.ndarray) -> None:
        """The next value of each going chunk, ``word`` the 64 bits at its position."""
        changed = word >> np.uint64(63)
        fresh = changed & (word >> np.uint64(62))
        leading = self.leading[:going]
        trailing = self.trailing[:going]
        if fresh.any():
            new_leading = (word >> np.uint64(57)) & _U64(31)
            length = (word >> np.uint64(51)) & _U64(63)
            length += (length == 0) * _U64(64)
            if (fresh.astype(bool) & (new_leading + length > 64)).any():
                raise ChunkError("XOR chunk: a value wider than 64 bits")
            np.copyto(leading, new_leading, where=fresh.astype(bool))
            np.copyto(trailing, _U64(64) - new_leading - length, where=fresh.astype(bool))
        meaningful = _U64(64) - leading - trailing
        if ((meaningful == 0) & changed.astype(bool)).any():
            raise ChunkError("XOR chunk: a changed value with no meaningful bits")
        control = _ONE + changed + fresh * _U64(11)
        position = self.position[:going]
        bits = self._peek(position + control.view(np.int64))
        # Modulo 64: a width of 64 takes the whole word (no shift by 64).
        taken = (bits >> ((_U64(64) - meaningful) & _U64(63))) * changed
        self.value[:going] ^= taken << trailing
        position += (control + meaningful * changed).view(np.int64)


# By the number of leading ones in a timestamp's first four bits: the bits of its delta of
# deltas, of its prefix, half and all of its range.
_PREFIX_ONES = np.array([min(4, 4 - (top ^ 15).bit_length()) for top in range(16)], dtype=np.intp)
_DOD_BITS = np.array([0, 14, 17, 20, 64], dtype=np.uint64)
_PREFIX_BITS = np.array([1, 2, 3, 4, 4], dtype=np.uint64)
_DOD_HALF = np.array([2**63, 2**13, 2**16, 2**19, 2**63], dtype=np.uint64)
_DOD_FULL = np.array([0, 2**14, 2**17, 2**20, 0], dtype=np.uint64)
