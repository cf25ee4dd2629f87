"""Keep a long-running server's memory where its caches say it is.

glibc's malloc raises its mmap threshold every time a large block is freed, so after a while
the large buffers a broker churns through (message payloads, read batches) come from the
heap, and freed ones are kept rather than given back: RSS grows by hundreds of MiB while
every cache stays within its budget. Fixing the threshold (which also turns the dynamic
adjustment off), trimming the heap top sooner and capping the number of arenas keeps RSS at
the caches' budgets plus a fixed overhead, at no measurable cost on this workload.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD = 128 * 1024  # glibc's initial value: blocks this large are mmapped
TRIM_THRESHOLD = 1024 * 1024
ARENA_MAX = 4


def bound_allocator() -> bool:
    """Apply the settings above; True if the C library took them (glibc only). Call it
    first thing in a server process, before threads start."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc (musl, macOS): nothing to tune
    done = all(
        mallopt(param, value) == 1
        for param, value in (
            (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
            (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
            (M_ARENA_MAX, ARENA_MAX),
        )
    )
    if not done:
        log.warning("could not tune malloc: memory may grow past the cache budgets")
    return done
