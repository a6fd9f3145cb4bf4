/* Bulk readers' record decoding, in C: the records of one (decompressed) batch appended
 * to Arrow column buffers, with the same checks and results as records._decode_into
 * (which stays the reference, the fallback, and what a hypothesis test compares with).
 *
 * decode(payload, base_offset, base_timestamp, max_timestamp, log_append, count, start,
 *        end, buffers) -> rows appended
 *
 * ``buffers`` is a list of bytearrays the rows are appended to, in this order:
 *   0 offsets (int64)             1 timestamps (int64 microseconds)
 *   2 key offsets (int32)         3 key bytes          4 key validity (bitmap)
 *   5 value offsets (int32)       6 value bytes        7 value validity (bitmap)
 * and, to build the headers column, either nothing more or:
 *   8 header list offsets (int32) 9 header key offsets (int32)  10 header key bytes
 *  11 header value offsets (int32) 12 header value bytes  13 header value validity (bitmap)
 * Offset buffers start with their first entry (0) already in place; bitmaps hold one bit
 * per row (per header) so far. A corrupt batch raises ValueError(message) and leaves the
 * buffers as they were.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_varint_reader.h"

enum { OFFSETS, STAMPS, KEY_OFFSETS, KEYS, KEY_VALID, VALUE_OFFSETS, VALUES, VALUE_VALID,
       HEADER_LISTS, HEADER_KEY_OFFSETS, HEADER_KEYS, HEADER_VALUE_OFFSETS, HEADER_VALUES,
       HEADER_VALUE_VALID, ALL_BUFFERS };
#define WITHOUT_HEADERS HEADER_LISTS

/* A growable view of one bytearray: written through ``at``, its length fixed at the end. */
typedef struct {
    PyObject *array;
    Py_ssize_t length; /* bytes in use */
} Out;

static int reserve(Out *out, Py_ssize_t more) {
    Py_ssize_t needed = out->length + more;
    Py_ssize_t size = PyByteArray_GET_SIZE(out->array);
    if (needed <= size)
        return 0;
    Py_ssize_t grown = size + size / 2;
    return PyByteArray_Resize(out->array, grown > needed ? grown : needed);
}

static uint8_t *at(Out *out) { return (uint8_t *)PyByteArray_AS_STRING(out->array) + out->length; }

static int put_i32(Out *out, int32_t value) {
    if (reserve(out, 4) < 0)
        return -1;
    memcpy(at(out), &value, 4);
    out->length += 4;
    return 0;
}

/* The unchecked writers below follow one reservation per batch (reserve_batch). */
static inline void fast_i64(Out *out, int64_t value) {
    memcpy(at(out), &value, 8);
    out->length += 8;
}

static inline void fast_bytes(Out *data, Out *offsets, const uint8_t *bytes, Py_ssize_t size) {
    if (size)
        memcpy(at(data), bytes, (size_t)size);
    data->length += size;
    int32_t end = (int32_t)data->length;
    memcpy(at(offsets), &end, 4);
    offsets->length += 4;
}

static inline void fast_bit(Out *bitmap, int64_t index, int valid) {
    uint8_t *bits = (uint8_t *)PyByteArray_AS_STRING(bitmap->array) + (index >> 3);
    uint8_t mask = (uint8_t)(1u << (index & 7));
    *bits = valid ? (uint8_t)(*bits | mask) : (uint8_t)(*bits & ~mask);
}

/* Room for ``count`` more rows whose bytes come from a payload of ``size`` bytes; the
 * bitmaps' new bytes are zeroed and their length set to cover the rows (trimmed at the end). */
static int reserve_batch(Out *out, int64_t rows, long long count, Py_ssize_t size) {
    if (out[KEYS].length + size > INT32_MAX || out[VALUES].length + size > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of bytes in one Arrow column");
        return -1;
    }
    if (reserve(&out[OFFSETS], count * 8) < 0 || reserve(&out[STAMPS], count * 8) < 0 ||
        reserve(&out[KEY_OFFSETS], count * 4) < 0 || reserve(&out[VALUE_OFFSETS], count * 4) < 0 ||
        reserve(&out[KEYS], size) < 0 || reserve(&out[VALUES], size) < 0)
        return -1;
    Py_ssize_t bitmap = (Py_ssize_t)((rows + count + 7) / 8);
    int valid_maps[2] = {KEY_VALID, VALUE_VALID};
    for (int i = 0; i < 2; i++) {
        Out *map = &out[valid_maps[i]];
        if (bitmap > map->length) {
            if (reserve(map, bitmap - map->length) < 0)
                return -1;
            memset(at(map), 0, (size_t)(bitmap - map->length));
            map->length = bitmap;
        }
    }
    return 0;
}

/* Append bytes and the next int32 end offset; fails past Arrow's 2 GiB per array. */
static int put_bytes(Out *data, Out *offsets, const uint8_t *bytes, Py_ssize_t size) {
    if (data->length + size > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of bytes in one Arrow column");
        return -1;
    }
    if (size && reserve(data, size) < 0)
        return -1;
    if (size)
        memcpy(at(data), bytes, (size_t)size);
    data->length += size;
    return put_i32(offsets, (int32_t)data->length);
}

/* Set bit ``index`` of a bitmap to ``valid`` (the bitmap grows a byte at a time). */
static int put_bit(Out *bitmap, int64_t index, int valid) {
    Py_ssize_t byte = (Py_ssize_t)(index >> 3);
    if (byte >= bitmap->length) {
        if (reserve(bitmap, 1) < 0)
            return -1;
        *at(bitmap) = 0;
        bitmap->length += 1;
    }
    uint8_t *bits = (uint8_t *)PyByteArray_AS_STRING(bitmap->array) + byte;
    uint8_t mask = (uint8_t)(1u << (index & 7));
    *bits = valid ? (uint8_t)(*bits | mask) : (uint8_t)(*bits & ~mask); /* an undone row may have left it set */
    return 0;
}

/* A header key as Arrow wants a string: valid UTF-8, malformed bytes replaced by U+FFFD
 * (as records._decode_headers and Java's clients do). */
static int put_header_key(Out *data, Out *offsets, const uint8_t *bytes, Py_ssize_t size) {
    int ascii = 1;
    for (Py_ssize_t i = 0; i < size && ascii; i++)
        ascii = bytes[i] < 0x80;
    if (ascii)
        return put_bytes(data, offsets, bytes, size);
    PyObject *text = PyUnicode_DecodeUTF8((const char *)bytes, size, "replace");
    if (text == NULL)
        return -1;
    Py_ssize_t length;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &length);
    int result = utf8 == NULL ? -1 : put_bytes(data, offsets, (const uint8_t *)utf8, length);
    Py_DECREF(text);
    return result;
}

/* A nullable field (key, value, header value) of ``size`` bytes at ``*cursor``. */
static int field(Reader *r, Py_ssize_t *cursor, int64_t *size, const uint8_t **bytes) {
    *size = read_varint(r, cursor);
    if (r->failed)
        return 0;
    if (*size < 0) {
        *bytes = NULL;
        return 1;
    }
    if (*size > r->end - *cursor)
        return 0;
    *bytes = r->data + *cursor;
    *cursor += (Py_ssize_t)*size;
    return 1;
}

static PyObject *corrupt(const char *message) {
    PyErr_SetString(PyExc_ValueError, message);
    return NULL;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long base_offset, base_timestamp, max_timestamp, count, start, end;
    int log_append;
    PyObject *buffers;
    if (!PyArg_ParseTuple(args, "y*LLLpLLLO!", &view, &base_offset, &base_timestamp, &max_timestamp, &log_append,
                          &count, &start, &end, &PyList_Type, &buffers))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t given = PyList_GET_SIZE(buffers);
    Out out[ALL_BUFFERS];
    Py_ssize_t before[ALL_BUFFERS];
    int with_headers = given == ALL_BUFFERS;
    if (given != ALL_BUFFERS && given != WITHOUT_HEADERS) {
        PyErr_SetString(PyExc_TypeError, "buffers must be a list of 8 or 14 bytearrays");
        goto release;
    }
    for (Py_ssize_t i = 0; i < given; i++) {
        PyObject *item = PyList_GET_ITEM(buffers, i);
        if (!PyByteArray_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "buffers must be bytearrays");
            goto release;
        }
        out[i].array = item;
        out[i].length = before[i] = PyByteArray_GET_SIZE(item);
    }
    int64_t rows = out[OFFSETS].length / 8;
    int64_t headers_so_far = with_headers ? (out[HEADER_VALUE_OFFSETS].length / 4) - 1 : 0;
    const uint8_t *data = view.buf;
    Py_ssize_t size = view.len, pos = 0;
    if (count < 0 || count > size || reserve_batch(out, rows, count, size) < 0) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "a batch of %zd bytes cannot hold %lld records", size, count);
        goto undo;
    }
    long long added = 0;
    for (long long n = 0; n < count; n++) {
        Reader outer = {data, size, 0};
        int64_t length = read_varint(&outer, &pos);
        if (outer.failed) {
            corrupt("record runs past the end of the batch");
            goto undo;
        }
        if (length < 6 || length > size - pos) {
            PyErr_Format(PyExc_ValueError, "record length %lld runs past the batch", (long long)length);
            goto undo;
        }
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        Reader r = {data, record_end, 0};
        Py_ssize_t cursor = pos + 1; /* after the attributes byte */
        int64_t timestamp_delta = read_varint(&r, &cursor);
        int64_t offset_delta = read_varint(&r, &cursor);
        int64_t key_size, value_size;
        const uint8_t *key, *value;
        if (r.failed || !field(&r, &cursor, &key_size, &key) || !field(&r, &cursor, &value_size, &value)) {
            corrupt("record fields do not add up to the record length");
            goto undo;
        }
        int64_t header_count = read_varint(&r, &cursor);
        if (r.failed) {
            corrupt("record fields do not add up to the record length");
            goto undo;
        }
        if (header_count < 0) {
            corrupt("negative header count");
            goto undo;
        }
        long long offset = base_offset + offset_delta;
        int wanted = start <= offset && offset < end;
        for (int64_t h = 0; h < header_count; h++) {
            int64_t header_key_size = read_varint(&r, &cursor);
            if (r.failed || header_key_size < 0 || header_key_size > record_end - cursor) {
                corrupt("bad record header key length");
                goto undo;
            }
            const uint8_t *header_key = data + cursor;
            cursor += (Py_ssize_t)header_key_size;
            int64_t header_value_size;
            const uint8_t *header_value;
            if (!field(&r, &cursor, &header_value_size, &header_value)) {
                corrupt("bad record header value length");
                goto undo;
            }
            if (wanted && with_headers) {
                if (put_header_key(&out[HEADER_KEYS], &out[HEADER_KEY_OFFSETS], header_key, header_key_size) < 0 ||
                    put_bit(&out[HEADER_VALUE_VALID], headers_so_far, header_value != NULL) < 0 ||
                    put_bytes(&out[HEADER_VALUES], &out[HEADER_VALUE_OFFSETS], header_value,
                              header_value ? header_value_size : 0) < 0)
                    goto undo;
                headers_so_far++;
            }
        }
        if (cursor != record_end) {
            corrupt("record fields do not add up to the record length");
            goto undo;
        }
        if (wanted) {
            int64_t stamp = log_append ? max_timestamp : base_timestamp + timestamp_delta;
            fast_i64(&out[OFFSETS], offset);
            fast_i64(&out[STAMPS], stamp * 1000);
            fast_bit(&out[KEY_VALID], rows, key != NULL);
            fast_bytes(&out[KEYS], &out[KEY_OFFSETS], key, key ? key_size : 0);
            fast_bit(&out[VALUE_VALID], rows, value != NULL);
            fast_bytes(&out[VALUES], &out[VALUE_OFFSETS], value, value ? value_size : 0);
            if (with_headers && put_i32(&out[HEADER_LISTS], (int32_t)headers_so_far) < 0)
                goto undo;
            rows++;
            added++;
        }
        pos = record_end;
    }
    if (pos != size) {
        PyErr_Format(PyExc_ValueError, "%zd bytes after the last record of the batch", size - pos);
        goto undo;
    }
    out[KEY_VALID].length = out[VALUE_VALID].length = (Py_ssize_t)((rows + 7) / 8);
    for (Py_ssize_t i = 0; i < given; i++)
        if (PyByteArray_Resize(out[i].array, out[i].length) < 0)
            goto undo;
    result = PyLong_FromLongLong(added);
    goto release;
undo:
    for (Py_ssize_t i = 0; i < given; i++) {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback); /* the resize below must not lose the error */
        PyByteArray_Resize(out[i].array, before[i]);
        PyErr_Restore(type, value, traceback);
    }
release:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "Append a batch's records in [start, end) to Arrow column buffers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_columns", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record_columns(void) { return PyModule_Create(&module); }
