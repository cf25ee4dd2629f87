"""Cluster storage: storage nodes and the replicated ledgers brokers write to them
(docs/cluster-protocol.md). ``ReplicatedSegments`` is the managed ledger's
``SegmentStorage`` over storage nodes, driven by the ledger's writer; ``ReplicatedStorage``
offers the managed ledger ``LedgerStorage`` as the local engine does, so nothing above the
ledger changes."""

from magnetar.cluster.errors import (
    LedgerFencedError,
    NodeUnavailableError,
    NotEnoughStorageNodesError,
)

__all__ = ["LedgerFencedError", "NodeUnavailableError", "NotEnoughStorageNodesError"]
