/* The produce hot path's batch checks, in C: the same checks as records.py's Python
 * reference (which stays as the fallback), so that checking a record set is one call
 * rather than several per batch (a Produce request names many partitions, a batch each).
 *
 * walk(buffer, pos, end, count, keyless) -> end position of the last record.
 *   ``keyless`` is a list the walk appends the index of each record without a key to, or None.
 * split(buffer, header_type, crc) -> [header_type(13 header fields, position), ...]: every
 *   batch of a record set, its header checked; ``crc`` (crc32c.crc32c, or None for bytes a
 *   checksum already covered) is called on each batch's CRC-covered bytes.
 * validate(buffer, header_type, crc) -> the same list, once each batch before the first
 *   compressed one also passed what a client's batch must: not a control batch, a count that
 *   agrees with its last offset delta, and records that agree with both (the caller checks
 *   the batches from the first compressed one on, decompressing them).
 *
 * Each raises ValueError((kind, message)) where kind 0 means a corrupt batch and 1 means
 * records that contradict the header (INVALID_RECORD).
 *
 * record_set_crc(buffer, headers, crc) -> crc32c(buffer, crc) for a record set whose batches'
 *   checksums were checked (``headers``, in order, cover the buffer; ValueError if they do not):
 *   only the 21 bytes before each batch's checked span are read, and the batch's own CRC
 *   stands for the rest (a log object's entry CRC costs no second pass over the records).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>

#include "_varint_reader.h"

#define CORRUPT 0
#define INVALID 1

static PyObject *fail(int kind, const char *format, ...) {
    char message[160];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    PyObject *detail = Py_BuildValue("(is)", kind, message);
    if (detail != NULL) {
        PyErr_SetObject(PyExc_ValueError, detail);
        Py_DECREF(detail);
    }
    return NULL;
}

/* Skip a length-prefixed field; a negative length is null. */
static int skip_field(Reader *r, Py_ssize_t *cursor, int null_allowed) {
    int64_t size = read_varint(r, cursor);
    if (r->failed)
        return 0;
    if (size < 0)
        return null_allowed;
    if (size > r->end - *cursor)
        return 0;
    *cursor += (Py_ssize_t)size;
    return 1;
}

/* Walk ``count`` records in data[pos:end]; the end of the last one, or -1 with the error set. */
static Py_ssize_t walk_records(const uint8_t *data, Py_ssize_t pos, Py_ssize_t end, long long count,
                               PyObject *keyless) {
    for (long long expected = 0; expected < count; expected++) {
        if (pos >= end) {
            fail(INVALID, "batch holds %lld records, its header says %lld", expected, count);
            return -1;
        }
        Reader outer = {data, end, 0};
        int64_t length = read_varint(&outer, &pos);
        if (outer.failed) {
            fail(CORRUPT, "batch: a record runs past its end");
            return -1;
        }
        if (length < 6 || length > end - pos) {
            fail(CORRUPT, "record length %lld runs past the batch", (long long)length);
            return -1;
        }
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        Reader r = {data, record_end, 0};
        Py_ssize_t cursor = pos + 1; /* after the attributes byte */
        read_varint(&r, &cursor);    /* the timestamp delta */
        int64_t offset_delta = read_varint(&r, &cursor);
        if (!r.failed && offset_delta != expected) {
            fail(INVALID, "record %lld has offset delta %lld", expected, (long long)offset_delta);
            return -1;
        }
        Py_ssize_t key_at = cursor;
        int ok = !r.failed && skip_field(&r, &cursor, 1) && skip_field(&r, &cursor, 1);
        if (ok && keyless != Py_None) {
            Reader k = {data, record_end, 0};
            if (read_varint(&k, &key_at) < 0) {
                PyObject *index = PyLong_FromLongLong(expected);
                if (index == NULL || PyList_Append(keyless, index) < 0) {
                    Py_XDECREF(index);
                    return -1;
                }
                Py_DECREF(index);
            }
        }
        if (ok) {
            int64_t headers = read_varint(&r, &cursor);
            if (!r.failed && headers < 0) {
                fail(CORRUPT, "record %lld has a negative header count", expected);
                return -1;
            }
            for (int64_t h = 0; ok && !r.failed && h < headers; h++)
                ok = skip_field(&r, &cursor, 0) && skip_field(&r, &cursor, 1); /* key, value */
        }
        if (!ok || r.failed || cursor != record_end) {
            fail(CORRUPT, "record %lld: its fields do not add up to its length %lld", expected, (long long)length);
            return -1;
        }
        pos = record_end;
    }
    return pos;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end;
    long long count;
    PyObject *keyless = Py_None;
    if (!PyArg_ParseTuple(args, "y*nnL|O", &view, &pos, &end, &count, &keyless))
        return NULL;
    PyObject *result = NULL;
    if (keyless != Py_None && !PyList_Check(keyless))
        PyErr_SetString(PyExc_TypeError, "keyless must be a list or None");
    else if (pos < 0 || end > view.len || pos > end)
        fail(CORRUPT, "record section %zd..%zd outside the buffer", pos, end);
    else {
        Py_ssize_t last = walk_records(view.buf, pos, end, count, keyless);
        if (last >= 0)
            result = PyLong_FromSsize_t(last);
    }
    PyBuffer_Release(&view);
    return result;
}

/* The v2 batch header (records.py has the layout); big-endian on the wire. */
#define HEADER_SIZE 61
#define OVERHEAD 12 /* base offset and batch length, outside the batch length */
#define CRC_START 21
#define CODEC_MASK 0x07
#define CONTROL_BIT 0x20
#define ZSTD 4

static uint64_t be(const uint8_t *p, int size) {
    uint64_t value = 0;
    for (int i = 0; i < size; i++)
        value = value << 8 | p[i];
    return value;
}

typedef struct {
    int64_t base_offset, base_timestamp, max_timestamp, producer_id;
    int32_t batch_length, partition_leader_epoch, last_offset_delta, base_sequence, records_count;
    uint32_t crc;
    int16_t attributes, producer_epoch;
    int8_t magic;
} Header;

static Header read_header(const uint8_t *p) {
    Header h;
    h.base_offset = (int64_t)be(p, 8);
    h.batch_length = (int32_t)be(p + 8, 4);
    h.partition_leader_epoch = (int32_t)be(p + 12, 4);
    h.magic = (int8_t)p[16];
    h.crc = (uint32_t)be(p + 17, 4);
    h.attributes = (int16_t)be(p + 21, 2);
    h.last_offset_delta = (int32_t)be(p + 23, 4);
    h.base_timestamp = (int64_t)be(p + 27, 8);
    h.max_timestamp = (int64_t)be(p + 35, 8);
    h.producer_id = (int64_t)be(p + 43, 8);
    h.producer_epoch = (int16_t)be(p + 51, 2);
    h.base_sequence = (int32_t)be(p + 53, 4);
    h.records_count = (int32_t)be(p + 57, 4);
    return h;
}

/* The header at ``pos`` checked as records.parse_batch_header checks it; 0 with the error set. */
static int check_header(const uint8_t *data, Py_ssize_t len, Py_ssize_t pos, Header *h) {
    if (len - pos < HEADER_SIZE) {
        fail(CORRUPT, "%zd bytes left at position %zd, a batch header needs 61", len - pos, pos);
        return 0;
    }
    *h = read_header(data + pos);
    if (h->magic != 2) {
        fail(CORRUPT, "unsupported record batch magic %d (only v2)", (int)h->magic);
        return 0;
    }
    if (h->batch_length < HEADER_SIZE - OVERHEAD) {
        fail(CORRUPT, "batch length %d is shorter than its header", (int)h->batch_length);
        return 0;
    }
    if ((Py_ssize_t)h->batch_length + OVERHEAD > len - pos) {
        fail(CORRUPT, "batch at position %zd claims %lld bytes, only %zd remain", pos,
             (long long)h->batch_length + OVERHEAD, len - pos);
        return 0;
    }
    if (h->records_count < 0 || h->last_offset_delta < 0) {
        fail(CORRUPT, "negative record count or last offset delta");
        return 0;
    }
    if ((h->attributes & CODEC_MASK) > ZSTD) {
        fail(CORRUPT, "unknown compression codec %d", h->attributes & CODEC_MASK);
        return 0;
    }
    return 1;
}

/* header_type(the 13 fields, position): a tuple subtype filled in place, as its _make would. */
static PyObject *new_header(PyTypeObject *type, const Header *h, Py_ssize_t pos) {
    PyObject *fields[14] = {
        PyLong_FromLongLong(h->base_offset),    PyLong_FromLong(h->batch_length),
        PyLong_FromLong(h->partition_leader_epoch), PyLong_FromLong(h->magic),
        PyLong_FromUnsignedLong(h->crc),        PyLong_FromLong(h->attributes),
        PyLong_FromLong(h->last_offset_delta),  PyLong_FromLongLong(h->base_timestamp),
        PyLong_FromLongLong(h->max_timestamp),  PyLong_FromLongLong(h->producer_id),
        PyLong_FromLong(h->producer_epoch),     PyLong_FromLong(h->base_sequence),
        PyLong_FromLong(h->records_count),      PyLong_FromSsize_t(pos),
    };
    PyObject *header = type->tp_alloc(type, 14);
    for (int i = 0; i < 14; i++) {
        if (header == NULL || fields[i] == NULL) {
            Py_XDECREF(fields[i]);
            continue;
        }
        PyTuple_SET_ITEM(header, i, fields[i]);
    }
    for (int i = 0; header != NULL && i < 14; i++) {
        if (fields[i] == NULL) {
            Py_DECREF(header);
            return NULL;
        }
    }
    return header;
}

/* Every batch of data[0:len] as header_type objects, each header checked and, with ``crc``
 * not None, its checksum; NULL with the error set. */
static PyObject *split_checked(const uint8_t *data, Py_ssize_t len, PyTypeObject *type, PyObject *crc) {
    PyObject *headers = PyList_New(0);
    for (Py_ssize_t pos = 0; headers != NULL && pos < len;) {
        Header h;
        if (!check_header(data, len, pos, &h))
            goto failed;
        Py_ssize_t size = (Py_ssize_t)h.batch_length + OVERHEAD;
        if (crc != Py_None) {
            PyObject *covered = PyMemoryView_FromMemory((char *)data + pos + CRC_START, size - CRC_START, PyBUF_READ);
            PyObject *sum = covered == NULL ? NULL : PyObject_CallOneArg(crc, covered);
            Py_XDECREF(covered);
            if (sum == NULL)
                goto failed;
            unsigned long computed = PyLong_AsUnsignedLong(sum);
            Py_DECREF(sum);
            if (computed == (unsigned long)-1 && PyErr_Occurred())
                goto failed;
            if (computed != h.crc) {
                fail(CORRUPT, "CRC mismatch in batch at position %zd", pos);
                goto failed;
            }
        }
        PyObject *header = new_header(type, &h, pos);
        if (header == NULL || PyList_Append(headers, header) < 0) {
            Py_XDECREF(header);
            goto failed;
        }
        Py_DECREF(header);
        pos += size;
    }
    return headers;
failed:
    Py_XDECREF(headers);
    return NULL;
}

static int parse_split_args(PyObject *args, Py_buffer *view, PyTypeObject **type, PyObject **crc) {
    if (!PyArg_ParseTuple(args, "y*O!O", view, &PyType_Type, type, crc))
        return 0;
    if (!PyType_IsSubtype(*type, &PyTuple_Type) || (*type)->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "header_type must be a named tuple");
        return 0;
    }
    return 1;
}

static PyObject *split(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyTypeObject *type;
    PyObject *crc;
    if (!parse_split_args(args, &view, &type, &crc))
        return NULL;
    PyObject *headers = split_checked(view.buf, view.len, type, crc);
    PyBuffer_Release(&view);
    return headers;
}

static PyObject *validate(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyTypeObject *type;
    PyObject *crc;
    if (!parse_split_args(args, &view, &type, &crc))
        return NULL;
    const uint8_t *data = view.buf;
    /* Every batch's structure and checksum first, then what its header says, batch by batch
     * up to the first compressed one: the caller decompresses and checks from there, so the
     * first error found is the one the Python reference finds. */
    PyObject *headers = split_checked(data, view.len, type, crc);
    for (Py_ssize_t pos = 0; headers != NULL && pos < view.len;) {
        Header h = read_header(data + pos);
        if (h.attributes & CODEC_MASK)
            break;
        Py_ssize_t end = pos + (Py_ssize_t)h.batch_length + OVERHEAD;
        Py_ssize_t last = end;
        if (h.attributes & CONTROL_BIT) {
            fail(INVALID, "batch at position %zd is a control batch: clients may not write them", pos);
            last = -1;
        } else if (h.records_count == 0 || h.last_offset_delta != h.records_count - 1) {
            fail(INVALID, "batch at position %zd has %d records but last offset delta %d", pos,
                 (int)h.records_count, (int)h.last_offset_delta);
            last = -1;
        } else {
            last = walk_records(data, pos + HEADER_SIZE, end, h.records_count, Py_None);
            if (last >= 0 && last != end) {
                fail(INVALID, "batch at position %zd holds more records than its count %d", pos, (int)h.records_count);
                last = -1;
            }
        }
        if (last < 0)
            Py_CLEAR(headers);
        pos = end;
    }
    PyBuffer_Release(&view);
    return headers;
}

/* CRC-32C arithmetic: checksums are polynomials over GF(2) in the reflected bit order
 * (x^0 is the top bit), and the CRC of A||B is crc(A) * x^(8 len(B)) + crc(B) mod P, so the
 * checksum of a whole record set follows from the checked ones of its batches. */
#define CASTAGNOLI 0x82F63B78u /* P, reflected */
#define X0 0x80000000u
static uint32_t crc_table[256];   /* one byte of software CRC-32C, for the 21 unchecked bytes */
static uint32_t x_pow_2k[64];     /* x^(2^k) mod P */

static uint32_t multiply_mod_p(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (uint32_t bit = X0; bit != 0; bit >>= 1) {
        if (a & bit)
            product ^= b;
        b = (b & 1) ? (b >> 1) ^ CASTAGNOLI : b >> 1; /* b * x */
    }
    return product;
}

static void init_crc_tables(void) {
    for (uint32_t byte = 0; byte < 256; byte++) {
        uint32_t c = byte;
        for (int i = 0; i < 8; i++)
            c = (c & 1) ? (c >> 1) ^ CASTAGNOLI : c >> 1;
        crc_table[byte] = c;
    }
    x_pow_2k[0] = X0 >> 1; /* x^1 */
    for (int k = 1; k < 64; k++)
        x_pow_2k[k] = multiply_mod_p(x_pow_2k[k - 1], x_pow_2k[k - 1]);
}

static uint32_t crc_bytes(uint32_t crc, const uint8_t *p, Py_ssize_t n) {
    crc = ~crc;
    while (n-- > 0)
        crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* The CRC of A||B from crc(A), crc(B) and the length of B. */
static uint32_t crc_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b) {
    uint32_t shift = X0; /* x^(8 length_b), built from the powers x^(2^k) its bits name */
    for (int k = 3; length_b != 0; length_b >>= 1, k++)
        if (length_b & 1)
            shift = multiply_mod_p(x_pow_2k[k], shift);
    return multiply_mod_p(shift, crc_a) ^ crc_b;
}

/* A header tuple's integer field; -1 with the error set if it is not one. */
static long long header_field(PyObject *header, Py_ssize_t index) {
    return PyLong_AsLongLong(PyTuple_GET_ITEM(header, index));
}

static PyObject *record_set_crc(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *headers;
    unsigned long initial;
    if (!PyArg_ParseTuple(args, "y*O!k", &view, &PyList_Type, &headers, &initial))
        return NULL;
    const uint8_t *data = view.buf;
    uint32_t crc = (uint32_t)initial;
    Py_ssize_t expected = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(headers); i++) {
        PyObject *header = PyList_GET_ITEM(headers, i);
        if (!PyTuple_Check(header) || PyTuple_GET_SIZE(header) < 14) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_TypeError, "headers must be batch headers");
            return NULL;
        }
        long long length = header_field(header, 1), position = -1, checked = -1;
        if (!(length == -1 && PyErr_Occurred()))
            position = header_field(header, 13);
        if (!(position == -1 && PyErr_Occurred()))
            checked = header_field(header, 4);
        if (checked == -1 && PyErr_Occurred()) {
            PyBuffer_Release(&view);
            return NULL;
        }
        if (position != expected || length < HEADER_SIZE - OVERHEAD || length + OVERHEAD > view.len - expected
                || checked < 0 || checked > 0xFFFFFFFFLL) {
            PyBuffer_Release(&view);
            PyErr_Format(PyExc_ValueError, "batch %zd (at %lld, %lld bytes) does not continue the record set at %zd",
                         i, position, length, expected);
            return NULL;
        }
        Py_ssize_t size = (Py_ssize_t)length + OVERHEAD;
        uint32_t batch = crc_combine(crc_bytes(0, data + expected, CRC_START), (uint32_t)checked,
                                     (uint64_t)(size - CRC_START));
        crc = crc_combine(crc, batch, (uint64_t)size);
        expected += size;
    }
    Py_ssize_t total = view.len;
    PyBuffer_Release(&view);
    if (expected != total)
        return PyErr_Format(PyExc_ValueError, "the batches cover %zd of the record set's %zd bytes", expected, total);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Check a batch's records against its header; returns the end position."},
    {"split", split, METH_VARARGS, "Every batch of a record set, its header (and optionally CRC) checked."},
    {"validate", validate, METH_VARARGS, "A client's record set checked as Produce must; its batches."},
    {"record_set_crc", record_set_crc, METH_VARARGS, "CRC-32C of a checked record set, from its batches' CRCs."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record_walk(void) {
    init_crc_tables();
    return PyModule_Create(&module);
}
