"""Cluster storage: storage nodes and the replicated ledgers brokers write to them
(docs/cluster-protocol.md). ``ReplicatedStorage`` implements the managed ledger's
``LedgerStorage`` as the local engine does, so nothing above the ledger changes."""

from magnetar.cluster.errors import (
    LedgerFencedError,
    NodeUnavailableError,
    NotEnoughStorageNodesError,
)

__all__ = ["LedgerFencedError", "NodeUnavailableError", "NotEnoughStorageNodesError"]
