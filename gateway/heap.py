"""The process's memory management: glibc's allocator and Python's cyclic collector.

Give large buffers back to the OS when they are freed; keep small ones for reuse.

glibc serves allocations above ``M_MMAP_THRESHOLD`` with their own mappings, unmapped on
free. By default that threshold is dynamic: each freed mapping raises it (up to 32 MiB),
after which request bodies and log objects of that size come from the heap and stay
resident after use. Under the abuse test (tests/e2e/test_abuse.py) that doubled the
peak resident size. Fixing the threshold at 1 MiB keeps buffers of a megabyte or more
(large produce requests, log objects, fetch answers) mapped and returned; smaller ones
stay on the heap, where reuse is cheap: at glibc's initial 128 KiB every 1 KiB-record
produce request was mapped and faulted in, which cost ~40 % more CPU.

Fixing the threshold also fixes glibc's trim threshold at its 128 KiB default: every
free at the top of the heap gave memory back, and the next request's buffers faulted
it in again (page faults were the largest single cost of a produced GiB). The heap
now keeps up to ``RETAINED_HEAP_BYTES`` of freed memory for reuse: 100 B produce cost
17 % less CPU per GiB, 1 KiB 9 %, with the same peak resident size.

Python's cyclic collector runs a full pass over every tracked object once enough
survive young collections. The gateway holds several per log object it indexes (its
directory, entries, cached batches: about 10), and at 1,000 records a second with no
linger that is 200,000 objects after 20 s: full passes took 50-190 ms, stalls every
connection's answers wait behind (produce-ack p99 35-125 ms at 1,000 msgs/s; 1-4 ms with
the collector off). ``collect_rarely`` moves what start-up made (modules, classes,
functions: never garbage) out of the collector's sight and lets 50,000 allocations pass
between young collections (Python's default is 700), so full passes come rarely:
p99 3.7-16 ms in the same runs. Garbage without cycles is freed at once either way.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import sys

__all__ = ["collect_rarely", "return_large_buffers"]

log = logging.getLogger("kafscale.heap")

_M_TRIM_THRESHOLD = -1  # from glibc's malloc.h
_M_MMAP_THRESHOLD = -3
LARGE_BUFFER_BYTES = 2**20
RETAINED_HEAP_BYTES = 64 * 2**20


def return_large_buffers(threshold: int = LARGE_BUFFER_BYTES, retained: int = RETAINED_HEAP_BYTES) -> bool:
    """Fix glibc's mmap and trim thresholds; False where that is not glibc (nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # musl and others: no mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, threshold) != 1 or mallopt(_M_TRIM_THRESHOLD, retained) != 1:
        log.debug("mallopt refused")
        return False
    return True


YOUNG_COLLECTION_ALLOCATIONS = 50_000


def collect_rarely() -> None:
    """Freeze what start-up made and space the cyclic collector's passes out (see above);
    called once the gateway's modules are imported, before it serves."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, middle, old)
