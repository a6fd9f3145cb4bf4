/* Kafka's zig-zag varints read from untrusted bytes: shared by the C record walkers. */
#ifndef KAFSCALE_VARINT_READER_H
#define KAFSCALE_VARINT_READER_H

#include <Python.h>
#include <stdint.h>

typedef struct {
    const uint8_t *data;
    Py_ssize_t end; /* reads stop here */
    int failed;     /* set by a read past ``end`` or longer than 10 bytes (64 bits) */
} Reader;

static inline int64_t read_varint(Reader *r, Py_ssize_t *pos) {
    uint64_t value = 0;
    int shift = 0;
    while (1) {
        if (*pos >= r->end || shift > 63) {
            r->failed = 1;
            return 0;
        }
        uint8_t byte = r->data[(*pos)++];
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80))
            break;
        shift += 7;
    }
    return (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
}

#endif
