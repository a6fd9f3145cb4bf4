/* The cleaner's key map in C: 16-byte key digests to their newest offset, in one
 * open-addressed table of 24-byte slots at most three quarters full (32 bytes a key,
 * against about 133 for a Python dict). protocol/cleaning.py's dict map is the
 * reference and the fallback.
 *
 * KeyMap(max_bytes): its table grows by doubling, never past ``max_bytes``; it holds at
 * most ``capacity`` keys (three quarters of the largest table that fits):
 *   put(digest, offset) -> bool   False (nothing stored) when a new key would not fit
 *   get(digest) -> int            the offset, or -1
 *   len(map), capacity()
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint64_t high, low; /* the digest, as two big-endian halves */
    int64_t offset;     /* -1: an empty slot */
} Slot;

typedef struct {
    PyObject_HEAD
    Slot *slots;
    Py_ssize_t mask;     /* slots - 1, a power of two minus one */
    Py_ssize_t used;
    Py_ssize_t max_slots; /* the largest table within max_bytes */
} KeyMap;

#define FIRST_SLOTS 1024

static uint64_t load64(const uint8_t *p) {
    uint64_t value = 0;
    for (int i = 0; i < 8; i++)
        value = (value << 8) | p[i];
    return value;
}

static int digest_of(PyObject *arg, uint64_t *high, uint64_t *low) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return -1;
    if (view.len != 16) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "a key digest is 16 bytes");
        return -1;
    }
    *high = load64(view.buf);
    *low = load64((const uint8_t *)view.buf + 8);
    PyBuffer_Release(&view);
    return 0;
}

/* The slot holding the digest, or the empty slot where it would go. */
static Slot *find(KeyMap *self, uint64_t high, uint64_t low) {
    Py_ssize_t at = (Py_ssize_t)(low & (uint64_t)self->mask); /* digests are uniform already */
    while (1) {
        Slot *slot = &self->slots[at];
        if (slot->offset < 0 || (slot->high == high && slot->low == low))
            return slot;
        at = (at + 1) & self->mask;
    }
}

static Slot *empty_table(Py_ssize_t size) {
    Slot *slots = PyMem_Malloc((size_t)size * sizeof(Slot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < size; i++)
        slots[i].offset = -1;
    return slots;
}

static int keymap_init(KeyMap *self, PyObject *args, PyObject *kwargs) {
    Py_ssize_t max_bytes;
    static char *names[] = {"max_bytes", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n", names, &max_bytes))
        return -1;
    Py_ssize_t max_slots = 8;
    while (max_slots < ((Py_ssize_t)1 << 40) && (max_slots * 2) * (Py_ssize_t)sizeof(Slot) <= max_bytes)
        max_slots <<= 1;
    Py_ssize_t size = max_slots < FIRST_SLOTS ? max_slots : FIRST_SLOTS;
    Slot *slots = empty_table(size);
    if (slots == NULL)
        return -1;
    PyMem_Free(self->slots);
    self->slots = slots;
    self->mask = size - 1;
    self->used = 0;
    self->max_slots = max_slots;
    return 0;
}

static Py_ssize_t capacity_of(KeyMap *self) { return self->max_slots / 4 * 3; }

/* Double the table (every key moves to its slot in the larger one). */
static int grow(KeyMap *self) {
    Py_ssize_t size = (self->mask + 1) * 2;
    Slot *slots = empty_table(size);
    if (slots == NULL)
        return -1;
    Slot *old = self->slots;
    Py_ssize_t old_size = self->mask + 1;
    self->slots = slots;
    self->mask = size - 1;
    for (Py_ssize_t i = 0; i < old_size; i++) {
        if (old[i].offset >= 0)
            *find(self, old[i].high, old[i].low) = old[i];
    }
    PyMem_Free(old);
    return 0;
}

static void keymap_dealloc(KeyMap *self) {
    PyMem_Free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *keymap_put(KeyMap *self, PyObject *args) {
    PyObject *digest;
    long long offset;
    if (!PyArg_ParseTuple(args, "OL", &digest, &offset))
        return NULL;
    if (offset < 0) {
        PyErr_SetString(PyExc_ValueError, "offsets are not negative");
        return NULL;
    }
    uint64_t high, low;
    if (self->slots == NULL || digest_of(digest, &high, &low) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "the map was not initialised");
        return NULL;
    }
    Slot *slot = find(self, high, low);
    if (slot->offset < 0) {
        if (self->used >= capacity_of(self))
            Py_RETURN_FALSE;
        if ((self->used + 1) * 4 > (self->mask + 1) * 3) { /* keep it at most three quarters full */
            if (grow(self) < 0)
                return NULL;
            slot = find(self, high, low);
        }
        slot->high = high;
        slot->low = low;
        self->used++;
    }
    slot->offset = offset;
    Py_RETURN_TRUE;
}

static PyObject *keymap_get(KeyMap *self, PyObject *digest) {
    uint64_t high, low;
    if (self->slots == NULL || digest_of(digest, &high, &low) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "the map was not initialised");
        return NULL;
    }
    return PyLong_FromLongLong(find(self, high, low)->offset);
}

static Py_ssize_t keymap_len(KeyMap *self) { return self->used; }

static PyObject *keymap_capacity(KeyMap *self, PyObject *unused) { return PyLong_FromSsize_t(capacity_of(self)); }

static PyMethodDef keymap_methods[] = {
    {"put", (PyCFunction)keymap_put, METH_VARARGS, "Map a digest to an offset; False if a new key does not fit."},
    {"get", (PyCFunction)keymap_get, METH_O, "The digest's offset, or -1."},
    {"capacity", (PyCFunction)keymap_capacity, METH_NOARGS, "The most keys it holds."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods keymap_sequence = {.sq_length = (lenfunc)keymap_len};

static PyTypeObject KeyMapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kafscale.protocol._key_map.KeyMap",
    .tp_basicsize = sizeof(KeyMap),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "16-byte key digests to offsets, in an open-addressed table of at most max_bytes.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)keymap_init,
    .tp_dealloc = (destructor)keymap_dealloc,
    .tp_methods = keymap_methods,
    .tp_as_sequence = &keymap_sequence,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_key_map", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__key_map(void) {
    if (PyType_Ready(&KeyMapType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&KeyMapType);
    if (PyModule_AddObject(m, "KeyMap", (PyObject *)&KeyMapType) < 0) {
        Py_DECREF(&KeyMapType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
