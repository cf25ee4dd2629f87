"""Magnetar: a Pulsar-style event streaming store and event-sourcing engine.

Importing this package is cheap: heavy optional libraries (pyspark, pyarrow, ...)
are imported lazily by the modules that need them.
"""

import os

__version__ = "0.1.0"

# Arrow's jemalloc pool rather than its default (mimalloc): it keeps freed pages for reuse,
# so an offload does not fault in fresh memory for every buffer (typed offloads ~20 %
# faster, docs/benchmarks.md). Read when pyarrow first allocates; an explicit choice wins.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
