"""Give large buffers back to the OS when they are freed.

glibc serves allocations above ``M_MMAP_THRESHOLD`` with their own mappings, unmapped on
free. By default that threshold is dynamic: each freed mapping raises it (up to 32 MiB),
after which request bodies and log objects of that size come from the heap and stay
resident after use. A gateway's working set is mostly such short-lived buffers (a 1 MiB
produce request, an 8 MiB log object, a fetch answer), so under bursts the resident size
grew to twice the bytes actually in use. A fixed threshold keeps them mapped and returned.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

__all__ = ["return_large_buffers"]

log = logging.getLogger("kafscale.heap")

_M_MMAP_THRESHOLD = -3  # from glibc's malloc.h
LARGE_BUFFER_BYTES = 128 * 1024  # glibc's initial value, kept


def return_large_buffers(threshold: int = LARGE_BUFFER_BYTES) -> bool:
    """Fix glibc's mmap threshold; False where that is not glibc (nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # musl and others: no mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(_M_MMAP_THRESHOLD, threshold) != 1:
        log.debug("mallopt(M_MMAP_THRESHOLD) refused")
        return False
    return True
