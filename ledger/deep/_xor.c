/*
 * Prometheus' XOR chunks decoded in C: the same decoding as ``ledger.deep.chunks`` (its module
 * docstring describes the encoding), a chunk at a time, sample after sample.
 *
 * ``decode_into`` writes each chunk's samples where the numpy decoder puts them (step after
 * step: every chunk's first sample, then every chunk's second, ...), so both give the same
 * arrays. The layout is computed by the caller (``chunks._native``): each chunk's place among
 * the chunks of a step (``ranks``) and where each step's samples start (``offsets``).
 *
 * Malformed chunk bytes never make it read outside the chunk's own bytes: a read past them
 * sees zeros, and a sample that ends past them makes the chunk an error. An error is returned
 * as a message (a str) for the caller to raise; None means every chunk decoded.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const uint8_t *bytes;
    int64_t size; /* bytes */
} Chunk;

/* The 64 bits starting at bit ``bit`` of the chunk, big-endian; zeros past its end. */
static inline uint64_t peek(const Chunk *chunk, int64_t bit) {
    int64_t at = bit >> 3;
    unsigned shift = (unsigned)(bit & 7);
    uint64_t high = 0;
    uint64_t next = 0;
    if (at + 9 <= chunk->size) {
        const uint8_t *p = chunk->bytes + at;
        for (int i = 0; i < 8; i++) {
            high = (high << 8) | p[i];
        }
        next = p[8];
    } else {
        for (int i = 0; i < 8; i++) {
            high = (high << 8) | (at + i < chunk->size ? chunk->bytes[at + i] : 0);
        }
        next = at + 8 < chunk->size ? chunk->bytes[at + 8] : 0;
    }
    /* ``next >> 8`` is 0 when ``shift`` is 0: no shift by 64. */
    return (high << shift) | (next >> (8 - shift));
}

/* The byte-aligned varint at ``*bit``, which moves past it; NULL or a message. */
static const char *varint(const Chunk *chunk, int64_t *bit, uint64_t *number) {
    if (*bit & 7) {
        return "XOR chunk: a varint that is not byte-aligned";
    }
    int64_t at = *bit >> 3;
    uint64_t found = 0;
    for (int byte = 0; byte < 10; byte++) {
        uint64_t part = at + byte < chunk->size ? chunk->bytes[at + byte] : 0;
        found |= (part & 0x7F) << (7 * byte);
        if (part < 0x80) {
            *bit += 8 * (byte + 1);
            *number = found;
            return NULL;
        }
    }
    return "XOR chunk: a varint longer than 10 bytes";
}

typedef struct {
    uint64_t value;
    uint64_t leading;
    uint64_t trailing;
} ValueState;

/* The next value, its control bits at ``*bit``; NULL or a message. */
static const char *next_value(const Chunk *chunk, int64_t *bit, ValueState *state) {
    uint64_t word = peek(chunk, *bit);
    uint64_t changed = word >> 63;
    uint64_t fresh = changed & (word >> 62);
    if (fresh) {
        uint64_t leading = (word >> 57) & 31;
        uint64_t length = (word >> 51) & 63;
        if (length == 0) {
            length = 64;
        }
        if (leading + length > 64) {
            return "XOR chunk: a value wider than 64 bits";
        }
        state->leading = leading;
        state->trailing = 64 - leading - length;
    }
    uint64_t meaningful = 64 - state->leading - state->trailing;
    if (!changed) {
        *bit += 1;
        return NULL;
    }
    if (meaningful == 0) {
        return "XOR chunk: a changed value with no meaningful bits";
    }
    int64_t control = fresh ? 13 : 2;
    uint64_t bits = peek(chunk, *bit + control);
    /* Modulo 64: a width of 64 takes the whole word (no shift by 64). */
    state->value ^= (bits >> ((64 - meaningful) & 63)) << state->trailing;
    *bit += control + (int64_t)meaningful;
    return NULL;
}

/* Bits of the delta of deltas by the number of leading ones of its prefix (at most four). */
static const int DOD_BITS[5] = {0, 14, 17, 20, 64};

/* One chunk's samples, the n-th written at ``offsets[n] + rank``. */
static const char *decode_chunk(const Chunk *chunk, int64_t count, int64_t index, int64_t rank,
                                const int64_t *offsets, int64_t samples, int64_t *out_chunk,
                                int64_t *out_times, uint64_t *out_values) {
    int64_t bit = 16; /* after the sample count */
    int64_t end_bit = chunk->size * 8;
    uint64_t time = 0;
    uint64_t delta = 0;
    ValueState state = {0, 0, 0};
    const char *error;
    for (int64_t n = 0; n < count; n++) {
        if (n == 0) {
            uint64_t zigzag;
            if ((error = varint(chunk, &bit, &zigzag)) != NULL) {
                return error;
            }
            /* The sign in the lowest bit. */
            time = (zigzag >> 1) ^ (0 - (zigzag & 1));
            state.value = peek(chunk, bit);
            bit += 64;
        } else if (n == 1) {
            if ((error = varint(chunk, &bit, &delta)) != NULL) {
                return error;
            }
            time += delta;
            if ((error = next_value(chunk, &bit, &state)) != NULL) {
                return error;
            }
        } else {
            uint64_t word = peek(chunk, bit);
            int kind = 0;
            while (kind < 4 && (word >> (63 - kind)) & 1) {
                kind++;
            }
            uint64_t dod = 0;
            if (kind == 4) {
                dod = peek(chunk, bit + 4);
                bit += 68;
            } else if (kind > 0) {
                int size = DOD_BITS[kind];
                int prefix = kind + 1;
                dod = (word << prefix) >> (64 - size);
                /* Above half the range is negative: two's complement within ``size`` bits. */
                if (dod > ((uint64_t)1 << (size - 1))) {
                    dod -= (uint64_t)1 << size;
                }
                bit += prefix + size;
            } else {
                bit += 1;
            }
            delta += dod;
            time += delta;
            if ((error = next_value(chunk, &bit, &state)) != NULL) {
                return error;
            }
        }
        if (bit > end_bit) {
            return "XOR chunk: its samples run past its bytes";
        }
        int64_t at = offsets[n] + rank;
        if (at < 0 || at >= samples) {
            return "XOR chunk: its samples do not fit the layout given";
        }
        out_chunk[at] = index;
        out_times[at] = (int64_t)time;
        out_values[at] = state.value;
    }
    return NULL;
}

static int buffer_of(PyObject *object, Py_buffer *view, int writable, Py_ssize_t item,
                     const char *name) {
    if (PyObject_GetBuffer(object, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) {
        return -1;
    }
    if (view->len % item) {
        PyErr_Format(PyExc_ValueError, "%s: not a whole number of %zd-byte items", name, item);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

enum { DATA, STARTS, ENDS, COUNTS, RANKS, OFFSETS, OUT_CHUNK, OUT_TIMES, OUT_VALUES, VIEWS };

static PyObject *decode_into(PyObject *self, PyObject *args) {
    PyObject *objects[VIEWS];
    static const char *names[VIEWS] = {"data",    "starts",    "ends",      "counts",    "ranks",
                                       "offsets", "out_chunk", "out_times", "out_values"};
    if (!PyArg_ParseTuple(args, "OOOOOOOOO:decode_into", &objects[0], &objects[1], &objects[2],
                          &objects[3], &objects[4], &objects[5], &objects[6], &objects[7],
                          &objects[8])) {
        return NULL;
    }
    Py_buffer views[VIEWS];
    int taken = 0;
    for (; taken < VIEWS; taken++) {
        if (buffer_of(objects[taken], &views[taken], taken >= OUT_CHUNK, taken == DATA ? 1 : 8,
                      names[taken]) < 0) {
            break;
        }
    }
    if (taken < VIEWS) {
        for (int i = 0; i < taken; i++) {
            PyBuffer_Release(&views[i]);
        }
        return NULL;
    }
    const uint8_t *data = views[DATA].buf;
    int64_t size = views[DATA].len;
    const int64_t *starts = views[STARTS].buf, *ends = views[ENDS].buf;
    const int64_t *counts = views[COUNTS].buf, *ranks = views[RANKS].buf;
    const int64_t *offsets = views[OFFSETS].buf;
    int64_t chunks = views[STARTS].len / 8;
    int64_t steps = views[OFFSETS].len / 8;
    int64_t samples = views[OUT_CHUNK].len / 8;
    const char *error = NULL;
    if (views[ENDS].len / 8 != chunks || views[COUNTS].len / 8 != chunks ||
        views[RANKS].len / 8 != chunks || views[OUT_TIMES].len / 8 != samples ||
        views[OUT_VALUES].len / 8 != samples) {
        PyErr_SetString(PyExc_ValueError, "decode_into: arrays of different lengths");
    } else {
        Py_BEGIN_ALLOW_THREADS;
        for (int64_t index = 0; index < chunks && error == NULL; index++) {
            int64_t start = starts[index], end = ends[index], count = counts[index];
            int64_t rank = ranks[index];
            if (start < 0 || end > size || end - start < 2) {
                error = "XOR chunk: shorter than its header";
                break;
            }
            Chunk chunk = {data + start, end - start};
            if (count != ((int64_t)chunk.bytes[0] << 8 | chunk.bytes[1]) || count > steps) {
                error = "XOR chunk: its samples do not fit the layout given";
                break;
            }
            error = decode_chunk(&chunk, count, index, rank, offsets, samples, views[OUT_CHUNK].buf,
                                 views[OUT_TIMES].buf, views[OUT_VALUES].buf);
        }
        Py_END_ALLOW_THREADS;
    }
    for (int i = 0; i < VIEWS; i++) {
        PyBuffer_Release(&views[i]);
    }
    if (PyErr_Occurred()) {
        return NULL;
    }
    if (error != NULL) {
        return PyUnicode_FromString(error);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_into", decode_into, METH_VARARGS,
     "decode_into(data, starts, ends, counts, ranks, offsets, out_chunk, out_times, "
     "out_values): the XOR chunks data[starts[i]:ends[i]] (counts[i] samples each) decoded "
     "into the out arrays, the n-th sample of chunk i at offsets[n] + ranks[i]; None, or "
     "why the chunks are malformed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_xor", "Prometheus' XOR chunks decoded in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__xor(void) { return PyModule_Create(&module); }
