/* Bulk writers' record encoding, in C: rows of Arrow binary columns (keys, values) encoded
 * as the records of one v2 batch, and Kafka's default partitioner over a key column. The
 * Python encoder (records._encode_record, through build_batch) stays the reference a
 * hypothesis test compares with.
 *
 * encode(keys, values, start, stop) -> bytes
 *     the records of rows [start, stop), offset deltas from 0, timestamp deltas 0, no headers.
 * partitions(keys, count, partitions) -> bytes
 *     int32 per row: murmur2(key) & 0x7fffffff % partitions (Kafka's Utils.murmur2), -1 for a
 *     null key.
 * A column is a tuple (validity bitmap or None, int32 offsets, data, array offset) of an
 * Arrow binary array's buffers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_buffer validity, offsets, data;
    int has_validity;
    Py_ssize_t offset; /* the array's offset into its buffers */
} Column;

static void release(Column *c) {
    if (c->has_validity)
        PyBuffer_Release(&c->validity);
    if (c->offsets.obj)
        PyBuffer_Release(&c->offsets);
    if (c->data.obj)
        PyBuffer_Release(&c->data);
}

static int column_from(PyObject *tuple, Column *c, Py_ssize_t rows_needed) {
    memset(c, 0, sizeof *c);
    PyObject *validity, *offsets, *data;
    if (!PyArg_ParseTuple(tuple, "OOOn", &validity, &offsets, &data, &c->offset))
        return -1;
    if (validity != Py_None) {
        if (PyObject_GetBuffer(validity, &c->validity, PyBUF_SIMPLE) < 0)
            return -1;
        c->has_validity = 1;
    }
    if (PyObject_GetBuffer(offsets, &c->offsets, PyBUF_SIMPLE) < 0 ||
        PyObject_GetBuffer(data, &c->data, PyBUF_SIMPLE) < 0) {
        release(c);
        return -1;
    }
    if (c->offset < 0 || (c->offset + rows_needed + 1) * 4 > c->offsets.len ||
        (c->has_validity && (c->offset + rows_needed + 7) / 8 > c->validity.len)) {
        release(c);
        PyErr_SetString(PyExc_ValueError, "column buffers are shorter than the rows asked for");
        return -1;
    }
    return 0;
}

/* Row ``row``'s bytes (NULL for null); -1 when its offsets point outside the data. */
static int cell(Column *c, Py_ssize_t row, const uint8_t **bytes, int32_t *size) {
    Py_ssize_t at = c->offset + row;
    if (c->has_validity && !((((const uint8_t *)c->validity.buf)[at >> 3] >> (at & 7)) & 1)) {
        *bytes = NULL;
        *size = -1;
        return 0;
    }
    int32_t begin, end;
    memcpy(&begin, (const uint8_t *)c->offsets.buf + at * 4, 4);
    memcpy(&end, (const uint8_t *)c->offsets.buf + (at + 1) * 4, 4);
    if (begin < 0 || end < begin || end > c->data.len)
        return -1;
    *bytes = (const uint8_t *)c->data.buf + begin;
    *size = end - begin;
    return 0;
}

static int varint_size(int64_t value) {
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    int size = 1;
    while (v >= 0x80) {
        v >>= 7;
        size++;
    }
    return size;
}

static uint8_t *put_varint(uint8_t *out, int64_t value) {
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (v >= 0x80) {
        *out++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *out++ = (uint8_t)v;
    return out;
}

static PyObject *encode(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *keys_tuple, *values_tuple;
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(args, "O!O!nn", &PyTuple_Type, &keys_tuple, &PyTuple_Type, &values_tuple, &start, &stop))
        return NULL;
    if (start < 0 || stop < start) {
        PyErr_SetString(PyExc_ValueError, "bad row range");
        return NULL;
    }
    Column keys, values;
    if (column_from(keys_tuple, &keys, stop) < 0)
        return NULL;
    if (column_from(values_tuple, &values, stop) < 0) {
        release(&keys);
        return NULL;
    }
    PyObject *result = NULL;
    /* First pass: the exact size, so the bytes object is allocated once. */
    Py_ssize_t total = 0;
    for (Py_ssize_t row = start; row < stop; row++) {
        const uint8_t *key, *value;
        int32_t key_size, value_size;
        if (cell(&keys, row, &key, &key_size) < 0 || cell(&values, row, &value, &value_size) < 0) {
            PyErr_SetString(PyExc_ValueError, "a cell's offsets point outside its column's data");
            goto done;
        }
        int64_t body = 1 + 1 + varint_size(row - start) + varint_size(key_size) + (key_size > 0 ? key_size : 0) +
                       varint_size(value_size) + (value_size > 0 ? value_size : 0) + 1;
        total += varint_size(body) + body;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL)
        goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    for (Py_ssize_t row = start; row < stop; row++) {
        const uint8_t *key, *value;
        int32_t key_size, value_size;
        cell(&keys, row, &key, &key_size);
        cell(&values, row, &value, &value_size);
        int64_t body = 1 + 1 + varint_size(row - start) + varint_size(key_size) + (key_size > 0 ? key_size : 0) +
                       varint_size(value_size) + (value_size > 0 ? value_size : 0) + 1;
        out = put_varint(out, body);
        *out++ = 0;                      /* attributes */
        out = put_varint(out, 0);        /* timestamp delta: one timestamp per batch */
        out = put_varint(out, row - start);
        out = put_varint(out, key_size); /* -1: null */
        if (key_size > 0) {
            memcpy(out, key, (size_t)key_size);
            out += key_size;
        }
        out = put_varint(out, value_size);
        if (value_size > 0) {
            memcpy(out, value, (size_t)value_size);
            out += value_size;
        }
        out = put_varint(out, 0); /* no headers */
    }
done:
    release(&keys);
    release(&values);
    return result;
}

static uint32_t murmur2(const uint8_t *data, int32_t length) {
    const uint32_t m = 0x5bd1e995;
    uint32_t h = 0x9747b28c ^ (uint32_t)length;
    int32_t whole = length - length % 4;
    for (int32_t i = 0; i < whole; i += 4) {
        uint32_t k = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8 | (uint32_t)data[i + 2] << 16 |
                     (uint32_t)data[i + 3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    switch (length % 4) {
    case 3:
        h ^= (uint32_t)data[whole + 2] << 16; /* fall through */
    case 2:
        h ^= (uint32_t)data[whole + 1] << 8; /* fall through */
    case 1:
        h ^= data[whole];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

static PyObject *partitions(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *keys_tuple;
    Py_ssize_t count;
    int partition_count;
    if (!PyArg_ParseTuple(args, "O!ni", &PyTuple_Type, &keys_tuple, &count, &partition_count))
        return NULL;
    if (count < 0 || partition_count <= 0) {
        PyErr_SetString(PyExc_ValueError, "bad row or partition count");
        return NULL;
    }
    Column keys;
    if (column_from(keys_tuple, &keys, count) < 0)
        return NULL;
    PyObject *result = PyBytes_FromStringAndSize(NULL, count * 4);
    if (result != NULL) {
        int32_t *out = (int32_t *)PyBytes_AS_STRING(result);
        for (Py_ssize_t row = 0; row < count; row++) {
            const uint8_t *key;
            int32_t size;
            if (cell(&keys, row, &key, &size) < 0) {
                Py_CLEAR(result);
                PyErr_SetString(PyExc_ValueError, "a cell's offsets point outside its column's data");
                break;
            }
            out[row] = key == NULL ? -1 : (int32_t)((murmur2(key, size) & 0x7fffffff) % (uint32_t)partition_count);
        }
    }
    release(&keys);
    return result;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_VARARGS, "Encode rows of Arrow key and value columns as the records of one batch."},
    {"partitions", partitions, METH_VARARGS, "Kafka's default partition of each key (-1 for null keys)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_encode", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__record_encode(void) { return PyModule_Create(&module); }
