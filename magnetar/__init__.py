"""Magnetar: a Pulsar-style event streaming store and event-sourcing engine.

Importing this package is cheap: heavy optional libraries (pyspark, pyarrow, ...)
are imported lazily by the modules that need them.
"""

import contextlib
import os
import sys

__version__ = "0.1.0"


def _use_jemalloc() -> None:
    """Arrow's jemalloc pool rather than its default (mimalloc): it keeps freed pages for
    reuse, so an offload does not fault in fresh memory for every buffer (typed offloads
    ~20 % faster, docs/benchmarks.md). A pool named in ARROW_DEFAULT_MEMORY_POOL wins.

    Freed pages go back to the kernel lazily (``muzzy_decay_ms:-1``: after a second they
    are only marked free, MADV_FREE, and the kernel takes them when it needs memory) rather
    than unmapped, which made every large buffer (a piece's values: 10 MB) fault its pages
    in again. JE_ARROW_MALLOC_CONF set by the user wins; both are read when Arrow first
    allocates, so they apply when magnetar is imported before pyarrow."""
    os.environ.setdefault("JE_ARROW_MALLOC_CONF", "muzzy_decay_ms:-1")
    if "ARROW_DEFAULT_MEMORY_POOL" in os.environ:
        return
    os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "jemalloc"  # read at pyarrow's first allocation
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:  # imported before us: its default pool may be chosen already
        with contextlib.suppress(Exception):  # a build without jemalloc keeps its own
            arrow.set_memory_pool(arrow.jemalloc_memory_pool())


_use_jemalloc()
