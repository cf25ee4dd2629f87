"""Opens the managed ledgers of one node: the one place that knows which storage and which
object store a node's ledgers live on (Pulsar's ManagedLedgerFactory)."""

from __future__ import annotations

from magnetar.ledger.managed_ledger import LedgerStorage, ManagedLedger
from magnetar.tier import Tier


class LedgerFactory:
    """Hands the broker its ledgers; the broker never sees storage or the object store."""

    def __init__(self, storage: LedgerStorage, tier: Tier | None = None) -> None:
        self._storage = storage
        self._tier = tier

    @property
    def can_offload(self) -> bool:
        """True when the node has an object store to offload closed segments to."""
        return self._tier is not None

    @property
    def object_store_url(self) -> str | None:
        return self._tier.store.url if self._tier is not None else None

    async def open(self, name: str) -> ManagedLedger:
        """The ledger of partition ``name``, created if new (durable when this returns)."""
        return await ManagedLedger.open(name, self._storage, self._tier)
