"""A long-running server's share of the machine: memory where its caches say it is, and
as many file descriptors as the system allows.

Memory: glibc's malloc raises its mmap threshold every time a large block is freed, so after a while
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
import resource

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


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard limit (a broker holds a descriptor per
    connection and per open segment: the soft default of 1,024 runs out at a thousand idle
    topics). Returns (soft, hard) after the change."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, e)
    return soft, hard
