"""Opens the managed ledgers of one node: the one place that knows which storage and which
object store a node's ledgers live on (Pulsar's ManagedLedgerFactory)."""

from __future__ import annotations

import asyncio
from typing import Any

from magnetar.ledger.managed_ledger import LedgerStorage, ManagedLedger
from magnetar.tier import Tier


class LedgerFactory:
    """Hands the broker its ledgers; the broker never sees storage or the object store."""

    def __init__(self, storage: LedgerStorage, tier: Tier | None = None) -> None:
        self._storage = storage
        self._tier = tier
        # partition → ids of its segments with an offload in flight, shared by every ledger
        # opened on it here: a ledger reopened meanwhile leaves the earlier one's offload be
        self._offloading: dict[str, set[int]] = {}

    @property
    def can_offload(self) -> bool:
        """True when the node has an object store to offload closed segments to."""
        return self._tier is not None

    @property
    def object_store_url(self) -> str | None:
        return self._tier.store.url if self._tier is not None else None

    @property
    def has_tables(self) -> bool:
        """True when offloaded segments are registered in an Iceberg catalog."""
        return self._tier is not None and self._tier.iceberg is not None

    async def table_of(self, name: str) -> dict[str, Any] | None:
        """The Iceberg table of topic (or partition) path ``name``, as
        ``IcebergTables.describe`` tells it; None when it does not exist yet."""
        if self._tier is None or self._tier.iceberg is None:
            return None
        return await asyncio.to_thread(self._tier.iceberg.describe, name)

    async def open(self, name: str) -> ManagedLedger:
        """The ledger of partition ``name``, created if new (durable when this returns)."""
        offloading = self._offloading.setdefault(name, set())
        return await ManagedLedger.open(name, self._storage, self._tier, offloading=offloading)
