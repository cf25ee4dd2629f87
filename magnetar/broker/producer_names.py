"""Names for producers that bring none, unique for the life of the cluster.

Deduplication keys on (producer name, sequence id), so a generated name that came back after
a restart would hand a new producer an old producer's last sequence id, and its first
messages would be answered as duplicates and never stored. As Pulsar does (cluster name,
a broker id from the metadata store, a counter), each broker start reserves a generation
number that no start before it had, and counts in memory within it.
"""

from __future__ import annotations

import itertools

from magnetar.meta import MetadataStore, reserve_block

GENERATION_PATH = "/counters/producer-name-generation"


class ProducerNames:
    """``<cluster>-<generation>-<n>``; call :meth:`start` before :meth:`next`."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.generation: int | None = None
        self._counter = itertools.count()

    async def start(self, meta: MetadataStore) -> None:
        """Reserve this broker's generation; durable when it returns."""
        self.generation = await reserve_block(meta, GENERATION_PATH, 1)

    def next(self) -> str:
        if self.generation is None:
            raise RuntimeError("ProducerNames.start() was not awaited")
        return f"{self.cluster}-{self.generation}-{next(self._counter)}"
